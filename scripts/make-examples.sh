#!/usr/bin/env bash
# Regenerates the shipped analytic model examples in examples/ with the built
# profiler (docs/profiler.md). Deterministic: the same profiler writes the
# same bytes, so `git diff examples/` after a run shows what a formula change did.
# Except examples/cpu-mlp.json, measured by `profiler cpu` on this machine: its
# times change from run to run (its sizes do not).
#
#   scripts/make-examples.sh
#
# Environment:
#   PIPECAST_BUILD_DIR  build folder holding profiler/profiler (default: build)
#   PIPECAST_PROFILER   the profiler binary (default: $PIPECAST_BUILD_DIR/profiler/profiler)
#
# Leaves examples/toy-uniform.json and examples/gpt-small.json alone: they
# are written by hand.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

profiler="${PIPECAST_PROFILER:-${PIPECAST_BUILD_DIR:-build}/profiler/profiler}"
if [[ ! -x "${profiler}" ]]; then
  echo "make-examples.sh: no profiler at ${profiler}: build it first (scripts/build.sh)," \
    "or set PIPECAST_PROFILER" >&2
  exit 1
fi

# Shared by every example: GPT-2 vocabulary unless said, s = 2048, bf16 on
# an H100 SXM, the default matmul time model (docs/calibration.md). The models
# a planner splits over nodes also carry per-GPU profiles at t = 2, 4 and 8
# (with and without sequence parallelism), so the planner's tensor-parallel
# search reads estimated per-t costs rather than t = 1 costs scaled by 1/t.
common=(--seq 2048 --microbatch-sizes 1,2,4,8 --gpu h100-sxm)

make_example() {
  local name="$1"
  shift
  "${profiler}" analytic --name "${name}" "${common[@]}" "$@" --out "examples/${name}.json"
}

# GPT-3 shapes (Brown et al. 2020, table 2.1), untied head: Megatron-LM with
# pipeline parallelism holds a copy of the table on the last stage anyway.
make_example gpt-1.3b --layers 24 --hidden 2048 --heads 16 --vocab 50257 --global-batch 256
make_example gpt-7b --layers 32 --hidden 4096 --heads 32 --vocab 50257 --global-batch 512 \
  --tensor-parallel 1,2,4,8
make_example gpt-13b --layers 40 --hidden 5120 --heads 40 --vocab 50257 --global-batch 512 \
  --tensor-parallel 1,2,4,8
# LLaMA 2 70B (Touvron et al. 2023): SwiGLU MLP, 8 key/value heads (GQA),
# rotary positions; its 4096-token context is shortened to 2048 like the rest.
make_example llama-70b --layers 80 --hidden 8192 --heads 64 --kv-heads 8 --ffn-hidden 28672 \
  --gated-mlp --rotary-positions --vocab 32000 --global-batch 512 --tensor-parallel 1,2,4,8
# The 1.3B body with a 256k vocabulary (Gemma-size): embedding and lm_head
# outweigh several blocks, which tests the planner's first and last stages.
make_example gpt-bigvocab --layers 24 --hidden 2048 --heads 16 --vocab 256000 --global-batch 256

# Mixtures of experts from their publishers' HuggingFace configurations
# (examples/hf/), 4096 tokens per sample; t up to the key/value heads (Qwen3:
# 4). Each MoE block carries its routing (`moe`) for --expert-parallel.
make_moe_example() {
  local name="$1"
  shift
  "${profiler}" analytic --hf-config "examples/hf/${name}.json" --seq 4096 \
    --microbatch-sizes 1,2,4,8 --gpu h100-sxm "$@" --out "examples/${name}.json"
}
make_moe_example mixtral-8x7b --global-batch 1024 --tensor-parallel 1,2,4,8
make_moe_example qwen3-30b-a3b --global-batch 512 --tensor-parallel 1,2,4
make_moe_example qwen3-235b-a22b --global-batch 2048 --tensor-parallel 1,2,4
make_moe_example deepseek-v3 --global-batch 4096 --tensor-parallel 1,2,4,8

# Measured, not estimated: the built-in CPU workload timed on the machine that
# runs this script (about a minute on 2 cores). Eight MLP blocks, the last 4x
# wider, so that a balanced partition is not simply equal layer counts.
"${profiler}" cpu --name cpu-mlp --layers 8 --hidden 256 --ffn 1024 --tokens-per-sample 32 \
  --layer-ffn 7:4096 --microbatch-sizes 1,2,4 --warmup 2 --iterations 10 --global-batch 16 \
  --note "${PIPECAST_CPU_NOTE:-measured on this machine by scripts/make-examples.sh: the shipped file on the pipecast development VM (2 shared vCPUs, other builds running); regenerate it for yours}" \
  --out examples/cpu-mlp.json
