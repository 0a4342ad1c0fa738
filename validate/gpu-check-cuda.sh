#!/usr/bin/env bash
# The validator's cuda backend on a small plan, for a machine with an NVIDIA
# GPU (scripts/gpu-check.sh can call this). Writes the comparison (text and
# JSON) and the side-by-side trace to $OUT (default: ./gpu-check-out).
# Usage: validate/gpu-check-cuda.sh [BUILD_DIR]   (default: build)
# Exit: the validator's (0 within tolerance, 3 beyond, 1 failure).
set -euo pipefail
build="${1:-build}"
out="${OUT:-gpu-check-out}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# A busy-work model: 8 layers of 1 ms forward, 2 ms backward (0.8 ms of it the
# weight gradient), 32 MiB of activations and 4 MiB outputs per micro-batch.
cat >"$work/model.json" <<'JSON'
{"format": "pipecast-model/1", "name": "gpu-check-8", "global_batch": 16, "layers": [
JSON
for i in 0 1 2 3 4 5 6 7; do
  sep=$([ "$i" = 7 ] && echo "" || echo ",")
  cat >>"$work/model.json" <<JSON
 {"name": "l$i", "parameters": 100000000, "profiles": [{"microbatch_size": 1,
  "forward_us": 1000, "backward_us": 2000, "backward_weight_us": 800,
  "activation_bytes": 33554432, "output_bytes": 4194304, "workspace_bytes": 16777216}]}$sep
JSON
done
echo ']}' >>"$work/model.json"

# 4 stages on the one GPU (each in its own green context), 1F1B and ZB-H1.
rc=0
for sched in 1f1b zb-h1; do
  "$build/planner/planner" --model "$work/model.json" --gpus 4 --cluster h200 \
    --schedules "$sched" --memory-gb 4 --recompute off --out "$work/$sched.plan.json" \
    >"$out/planner-$sched.txt"
  set +e
  "$build/validate/validator" --backend cuda --plan "$work/$sched.plan.json" \
    --model "$work/model.json" --warmup 2 --iterations 5 \
    --trace "$out/trace-$sched.json" | tee "$out/validator-$sched.txt"
  r=${PIPESTATUS[0]}
  "$build/validate/validator" --backend cuda --plan "$work/$sched.plan.json" \
    --model "$work/model.json" --warmup 2 --iterations 5 --json >"$out/validator-$sched.json"
  set -e
  [ "$r" -gt "$rc" ] && rc=$r
done
exit "$rc"
