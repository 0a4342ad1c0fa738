#!/usr/bin/env bash
# Every fault kind the validator can inject (throw, stall, drop, oom), into
# every schedule family (1f1b, interleaved, zb-h1, dualpipev, dualpipe), at
# tensor-parallel degree 1 and 2, on the cpu backend with the real layers of a
# `profiler cpu` model, each run REPS times: every run must end in a
# diagnosis (exit 1, one `validator: error:` line that names the fault's
# stage or the stuck op) and never a crash (a signal, a sanitizer report,
# std::terminate, a hang past the timeout). Issue 28: a double free (exit 134)
# every time at t = 2, and 8 of 20 runs of t = 1 1f1b crashing, before the
# runtime's buffers and threads were made to outlive every worker
# (docs/validator.md, "Faults").
#
#   scripts/validator-faults.sh BUILD_DIR [REPS] [FAMILIES] [KINDS] [TENSOR_PARALLEL]
#   e.g. scripts/validator-faults.sh build-asan 50
#        scripts/validator-faults.sh build 3 "1f1b dualpipe" "throw oom" "2"
#
# BUILD_DIR holds planner, profiler and validator (build-asan for the
# sanitizers: configure with -DPIPECAST_SANITIZE=ON). Prints one line per
# (family, t, fault) with its outcomes, then a total; exits 1 when any run
# did not end in a diagnosis. ctest runs it with REPS = 2 (validator_faults).
set -euo pipefail

build="${1:?usage: validator-faults.sh BUILD_DIR [REPS] [FAMILIES] [KINDS] [TENSOR_PARALLEL]}"
reps="${2:-50}"
families="${3:-1f1b interleaved zb-h1 dualpipev dualpipe}"
kinds="${4:-throw stall drop oom}"
degrees="${5:-1 2}"
# A run that takes longer than this hangs (a diagnosis takes seconds).
timeout_s="${PIPECAST_FAULT_TIMEOUT_S:-120}"

planner="${build}/planner/planner"
profiler="${build}/profiler/profiler"
validator="${build}/validate/validator"
for tool in "${planner}" "${profiler}" "${validator}"; do
  [[ -x "${tool}" ]] || { echo "validator-faults.sh: no ${tool}: build it first" >&2; exit 2; }
done

# Sanitizer reports exit 86 (as scripts/test.sh sets it), so they are never
# mistaken for the diagnosis's exit 1; leaks are reported too.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:exitcode=86}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=86}"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# The CPU workload, small: 4 layers so that interleaved's 2 chunks of 2
# stages have a layer each; profiles at t = 1 and 2; global batch 4, so m = 4
# at d = 1 (dualpipe needs an even m of at least 2p).
"${profiler}" cpu --layers 4 --hidden 32 --ffn 64 --tokens-per-sample 8 --microbatch-sizes 1 \
  --tensor-parallel 1,2 --global-batch 4 --warmup 1 --iterations 3 --out "${work}/cpu.json" \
  2>"${work}/profile.err" || { cat "${work}/profile.err" >&2; exit 1; }

total=0
bad=0
for family in ${families}; do
  chunks=()
  [[ "${family}" == interleaved ]] && chunks=(--chunks 2)
  for t in ${degrees}; do
    plan="${work}/${family}-t${t}.plan.json"
    if ! "${planner}" --model "${work}/cpu.json" --gpus $((2 * t)) --stages 2 \
      --tensor-parallel "${t}" --schedules "${family}" "${chunks[@]}" --cluster local --zero 0 \
      --recompute off --microbatch-sizes 1 --out "${plan}" >"${work}/plan.out" \
      2>"${work}/plan.err"; then
      echo "validator-faults.sh: cannot plan ${family} at t=${t}:" >&2
      cat "${work}/plan.err" >&2
      exit 1
    fi
    # A forward and the first backward of stage 1 (I when the schedule
    # splits the backward); a drop takes stage 0's forward instead, since
    # stage 1's forward ends a micro-batch's path on 2 stages and sends
    # nothing to drop (the validator refuses such a drop).
    backward=1B0
    grep -q '1I0' "${plan}" && backward=1I0
    for kind in ${kinds}; do
      forward=1F1
      [[ "${kind}" == drop ]] && forward=0F1
      for action in "${forward}" "${backward}"; do
        counts=""
        for ((i = 0; i < reps; i++)); do
          rc=0
          timeout -k 10 "${timeout_s}" "${validator}" --plan "${plan}" --model "${work}/cpu.json" \
            --backend cpu --warmup 0 --iterations 1 --tolerance 1000 --bubble-tolerance 1 \
            --memory-tolerance 1000 --recv-timeout-ms 5000 --inject-fault "${kind}:${action}" \
            >"${work}/v.out" 2>"${work}/v.err" || rc=$?
          total=$((total + 1))
          outcome="diagnosis"
          if ((rc != 1)); then
            outcome="exit${rc}"
          elif grep -qE 'Sanitizer|terminate called|runtime error|double free' "${work}/v.err"; then
            outcome="report"
          elif ! grep -qE '^validator: error: .*(threw|watchdog|deadlocks|did not arrive|out of memory)' \
            "${work}/v.err"; then
            outcome="other"
          fi
          if [[ "${outcome}" != diagnosis ]]; then
            bad=$((bad + 1))
            echo "--- ${family} t=${t} ${kind}:${action} run ${i}: ${outcome}" >&2
            head -c 2000 "${work}/v.err" >&2
          fi
          counts+="${outcome}"$'\n'
        done
        summary="$(printf '%s' "${counts}" | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}')"
        printf '%-12s t=%s %-6s %-4s %s\n' "${family}" "${t}" "${kind}" "${action}" "${summary%, }"
      done
    done
  done
done
echo "validator-faults.sh: ${total} runs, $((total - bad)) ended in a diagnosis, ${bad} did not"
((bad == 0))
