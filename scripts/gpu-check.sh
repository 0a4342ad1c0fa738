#!/usr/bin/env bash
# GPU check of the CUPTI profiler: builds with CUDA, runs the tests labelled
# `gpu`, profiles the built-in CUDA transformer block on small cases (through
# `profiler builtin` and through `profiler cupti -- <program>`), measures the
# profiler's overhead on the block, runs the validator's cuda backend on a
# small plan (validate/gpu-check-cuda.sh), and writes logs, model.json files
# and a summary under $OUT.
#
#   scripts/gpu-check.sh            OUT=./gpu-check-out by default
#   OUT=/tmp/x scripts/gpu-check.sh
#
# Environment:
#   OUT                  results folder (created; default ./gpu-check-out)
#   PIPECAST_BUILD_DIR   build folder (default build-gpu)
#   PIPECAST_JOBS        compile jobs (default nproc)
#   GPU_CHECK_TIMEOUT    seconds allowed for each profiling step (default 300)
#
# Exit status: 0 when everything ran and passed, or when there is no GPU
# (then it builds, the gpu tests skip themselves, and summary.txt says that
# nothing was measured); 1 when a build, a test or a profile failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
OUT="${OUT:-./gpu-check-out}"
mkdir -p "${OUT}"
OUT=$(cd "${OUT}" && pwd)
build_dir="${PIPECAST_BUILD_DIR:-build-gpu}"
step_timeout="${GPU_CHECK_TIMEOUT:-300}"
summary="${OUT}/summary.txt"
failures=0

log() { echo "gpu-check: $*" | tee -a "${summary}" >&2; }
fail() { log "FAILED: $*"; failures=$((failures + 1)); }

: > "${summary}"
log "started $(date -u +%FT%TZ) in ${root}, results in ${OUT}"
git rev-parse HEAD > "${OUT}/commit.txt" 2>/dev/null || true

# 1. The machine.
have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && timeout 60 nvidia-smi > "${OUT}/nvidia-smi.txt" 2>&1; then
  have_gpu=1
  timeout 60 nvidia-smi -q -d CLOCK,PERFORMANCE > "${OUT}/nvidia-smi-clocks.txt" 2>&1 || true
  log "GPU: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null | head -1)"
else
  log "no GPU (nvidia-smi missing or failing): building and running the gpu tests, which skip"
fi

# 2. Build with CUDA.
if ! PIPECAST_BUILD_DIR="${build_dir}" PIPECAST_CUDA=ON timeout 1800 scripts/build.sh \
    -DPIPECAST_BUILD_BENCH=OFF > "${OUT}/build.log" 2>&1; then
  fail "build (see build.log)"
  tail -30 "${OUT}/build.log" >&2
  exit 1
fi
log "built in ${build_dir}"
profiler="${build_dir}/profiler/profiler"
runner="${build_dir}/profiler/cupti/pipecast_block_runner"

# 3. The gpu-labelled tests (they skip themselves without a device).
if timeout 1200 ctest --test-dir "${build_dir}" -L gpu --output-on-failure \
    > "${OUT}/gpu-tests.log" 2>&1; then
  log "gpu tests: $(grep -E 'tests passed|tests failed' "${OUT}/gpu-tests.log" | tail -1)," \
    "$(grep -c '(Skipped)' "${OUT}/gpu-tests.log") skipped"
else
  fail "gpu tests (see gpu-tests.log)"
fi
# The CUPTI unit tests too: decoding through this machine's libcupti.
if ! timeout 300 ctest --test-dir "${build_dir}" -R 'Activity|Attribution|Aggregate|Inject|CuptiCli|MeasureTraces|RangeName|Summarize|RecordLoss' \
    --output-on-failure > "${OUT}/cupti-unit-tests.log" 2>&1; then
  fail "CUPTI unit tests (see cupti-unit-tests.log)"
fi

if ((have_gpu == 0)); then
  log "nothing measured: no GPU. Run this on a machine with an NVIDIA GPU and driver."
  "${profiler}" builtin --hidden 256 --heads 4 --seq 128 --layers 2 \
    > /dev/null 2> "${OUT}/no-gpu-builtin.log"
  log "profiler builtin without a GPU exits $? saying: $(tail -1 "${OUT}/no-gpu-builtin.log")"
  exit $((failures > 0 ? 1 : 0))
fi

# 4. Profile the built-in block: a tiny and a small shape.
profile_builtin() {
  local name=$1
  shift
  if timeout "${step_timeout}" "${profiler}" builtin --name "${name}" "$@" \
      --out "${OUT}/${name}.json" 2> "${OUT}/${name}.log"; then
    log "profiled ${name}: $(tail -1 "${OUT}/${name}.log")"
  else
    fail "profiler builtin ${name} (see ${name}.log)"
    tail -5 "${OUT}/${name}.log" >&2
  fi
}
profile_builtin builtin-tiny --hidden 256 --heads 4 --seq 128 --layers 2 \
  --microbatch-sizes 1,2 --warmup 2 --iterations 10
profile_builtin builtin-small --hidden 1024 --heads 16 --seq 512 --layers 2 \
  --microbatch-sizes 1,2,4 --warmup 3 --iterations 20
# One GPU's shard of the block at t = 2 and 4 (docs/profiler.md): per-GPU times and memory.
profile_builtin builtin-tp --hidden 1024 --heads 16 --seq 512 --layers 2 \
  --microbatch-sizes 1,2 --tensor-parallel 1,2,4 --warmup 3 --iterations 20

# 5. The generic path: `profiler cupti` on an unmodified program.
runner_args=(--hidden 1024 --heads 16 --seq 512 --layers 2 --microbatch 2 --steps 23)
if timeout "${step_timeout}" "${profiler}" cupti --name runner --microbatch-size 2 \
    --warmup 3 --iterations 20 --keep-records "${OUT}/records" --out "${OUT}/cupti-runner.json" \
    -- "${runner}" "${runner_args[@]}" 2> "${OUT}/cupti-runner.log"; then
  log "profiled the runner through profiler cupti: $(tail -1 "${OUT}/cupti-runner.log")"
else
  fail "profiler cupti -- pipecast_block_runner (see cupti-runner.log)"
  tail -5 "${OUT}/cupti-runner.log" >&2
fi

# 6. Overhead: the runner's own CUDA-event step time without and with CUPTI.
timeout "${step_timeout}" "${runner}" "${runner_args[@]}" 2> "${OUT}/runner-plain.log" > /dev/null \
  || fail "pipecast_block_runner alone (see runner-plain.log)"
log "step time without CUPTI: $(grep -o 'mean step .*' "${OUT}/runner-plain.log")"
log "step time with CUPTI:    $(grep -o 'mean step .*' "${OUT}/cupti-runner.log")"

# 7. Numbers for the issue's note, and a planner run on the measured model.
if command -v python3 >/dev/null 2>&1; then
  python3 - "${OUT}" >> "${summary}" 2>&1 <<'EOF'
import json, sys, os
out = sys.argv[1]
for name in ("builtin-tiny", "builtin-small", "builtin-tp", "cupti-runner"):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        continue
    m = json.load(open(path))
    src = m["source"]
    print(f"{name}: device {src.get('device')}, warmup {src.get('warmup')}, iterations {src.get('iterations')}")
    for key, rec in src.get("records", {}).items():
        print(f"  {key}: {rec['gpu_records']} GPU records, {rec['attributed']} attributed, "
              f"{rec['dropped']} dropped, {rec['zero_timestamps']} without timestamps")
    for layer in m["layers"]:
        for p in layer["profiles"]:
            print(f"  {layer['name']} t={p.get('tensor_parallel', 1)} b={p['microbatch_size']}: fwd {p['forward_us']} us, "
                  f"bwd {p['backward_us']} us (weight {p.get('backward_weight_us')}), "
                  f"activations {p['activation_bytes']} B")
    for key, s in src.get("spread", {}).items():
        step = s.get("step_busy", {})
        print(f"  {key}: max iqr_rel {s['max_iqr_rel']}, step busy median {step.get('median_us')} us")
EOF
fi
if [[ -f "${OUT}/builtin-small.json" ]]; then
  timeout 120 "${build_dir}/planner/planner" --model "${OUT}/builtin-small.json" --gpus 2 \
    > "${OUT}/planner.txt" 2>&1 || fail "planner on builtin-small.json (see planner.txt)"
fi

# 5. The validator's cuda backend on small plans (validate/gpu-check-cuda.sh
# writes cuda-*.{txt,json}, traces and cuda-check-summary.txt into $OUT);
# exit 3 (beyond tolerance) is a finding to record, not a failure of the check.
if ((have_gpu == 1)); then
  vrc=0
  OUT="${OUT}" timeout "$((step_timeout * 4))" validate/gpu-check-cuda.sh "${build_dir}" \
    > "${OUT}/validator-cuda.log" 2>&1 || vrc=$?
  log "validator --backend cuda: exit ${vrc} (see validator-cuda.log)"
  if ((vrc != 0 && vrc != 3)); then fail "validator cuda backend (see validator-cuda.log)"; fi
fi

log "finished $(date -u +%FT%TZ): ${failures} failure(s)"
exit $((failures > 0 ? 1 : 0))
