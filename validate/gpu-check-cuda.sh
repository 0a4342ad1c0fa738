#!/usr/bin/env bash
# The validator's cuda backend on a machine with an NVIDIA GPU
# (scripts/gpu-check.sh calls this). Runs the validator's gpu-labelled tests
# (CudaBackendGpu.*: 2- and 4-stage plans, message bytes checked, peak device
# memory within 1% of the prediction; dualpipev pairs; dualpipe p=2 with its
# copy reduce, DualPipeRunsItsCopyReduceOnTheDevice, never run on a GPU yet),
# then the validator itself on small
# 2- and 4-stage plans, GPipe and 1F1B, and with 2+ GPUs also one process per
# stage under mpirun. Writes under $OUT (default ./gpu-check-out):
#   validator-gpu-tests.log           the tests
#   cuda-<p>stage-<sched>.txt/.json   each comparison (text and --json)
#   cuda-<p>stage-<sched>.trace.json  its side-by-side trace
#   cuda-check-summary.txt            one line per step with its exit code
# Usage: validate/gpu-check-cuda.sh [BUILD_DIR]   (default: build)
# Environment: GPU_CHECK_STEP_TIMEOUT seconds per step (default 120).
# Every step runs under `timeout` and the script goes on after a failure.
# Exit: 0 when every step exited 0 or 3 (3 = a metric beyond tolerance,
# which is a finding, not a failure); 1 otherwise.
set -uo pipefail
build="${1:-build}"
out="${OUT:-gpu-check-out}"
mkdir -p "$out"
step_timeout="${GPU_CHECK_STEP_TIMEOUT:-120}"
summary="$out/cuda-check-summary.txt"
: >"$summary"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0

record() {  # record NAME EXIT_CODE
  echo "$1: exit $2" | tee -a "$summary" >&2
  case "$2" in 0|3) ;; *) failures=$((failures + 1)) ;; esac
}

# 1. The gpu-labelled validator tests (each skips itself without a device).
timeout "$((step_timeout * 5))" ctest --test-dir "$build" -L gpu -R CudaBackendGpu \
  --output-on-failure >"$out/validator-gpu-tests.log" 2>&1
record "ctest -L gpu -R CudaBackendGpu ($(grep -E 'tests passed|tests failed' \
  "$out/validator-gpu-tests.log" | tail -1))" $?

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

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "GPUs: ${gpus:-0}" | tee -a "$summary" >&2

# 2. 2 and 4 stages (sharing the GPUs there are: green contexts and
# device-to-device copies on one GPU, NCCL between distinct ones).
for stages in 2 4; do
  for sched in gpipe 1f1b; do
    name="cuda-${stages}stage-${sched}"
    plan="$work/$name.plan.json"
    # GPU memory the planner assumes: too little for fewer stages (the model's
    # static bytes are 12.8 GB), so the plan has exactly $stages stages.
    mem=$([ "$stages" = 2 ] && echo 12 || echo 6)
    timeout "$step_timeout" "$build/planner/planner" --model "$work/model.json" \
      --gpus "$stages" --cluster h200 --schedules "$sched" --memory-gb "$mem" --recompute off \
      --out "$plan" >"$out/$name.planner.txt" 2>&1
    rc=$?
    record "planner $name" $rc
    [ "$rc" = 0 ] || continue
    timeout "$step_timeout" "$build/validate/validator" --backend cuda --plan "$plan" \
      --model "$work/model.json" --warmup 2 --iterations 5 \
      --trace "$out/$name.trace.json" >"$out/$name.txt" 2>&1
    record "validator $name (text)" $?
    timeout "$step_timeout" "$build/validate/validator" --backend cuda --plan "$plan" \
      --model "$work/model.json" --warmup 2 --iterations 5 --json \
      >"$out/$name.json" 2>"$out/$name.stderr.txt"
    record "validator $name (--json)" $?
  done
done

# 3. One process per stage under mpirun (NCCL over MPI-shared ids): needs a
# GPU per process on this machine.
if [ "${gpus:-0}" -ge 2 ] && command -v mpirun >/dev/null 2>&1; then
  name="cuda-mpi-2stage-1f1b"
  plan="$work/cuda-2stage-1f1b.plan.json"
  if [ -f "$plan" ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "$step_timeout" \
      mpirun --oversubscribe -np 2 "$build/validate/validator" --backend cuda --plan "$plan" \
      --model "$work/model.json" --warmup 2 --iterations 5 >"$out/$name.txt" 2>&1
    record "mpirun validator $name" $?
  fi
else
  echo "mpirun run skipped: fewer than 2 GPUs or no mpirun" | tee -a "$summary" >&2
fi

exit $((failures > 0 ? 1 : 0))
