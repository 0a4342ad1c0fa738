#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ (clang-14, ASan+UBSan, in build-fuzz/)
# and runs each for a bounded time: first every input of fuzz/regressions/<t>/
# once (inputs that crashed before and must stay fixed), then fuzzing from
# the committed seeds fuzz/corpus/<t>/. New inputs libFuzzer finds go to
# build-fuzz/corpus/<t>/ (not into the repository); a crash, leak, timeout or
# out-of-memory leaves its input in build-fuzz/artifacts/<t>/ and makes this
# script exit 1 after the other targets have run. docs/errors.md says how to
# turn a finding into a regression test.
#
#   scripts/fuzz.sh [seconds-per-target] [target...]     e.g. scripts/fuzz.sh 30
#                                                          scripts/fuzz.sh 600 fuzz_plan
# Environment:
#   PIPECAST_FUZZ_BUILD_DIR  build folder (default: build-fuzz)
#   PIPECAST_JOBS            parallel compile jobs (default: nproc)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds="${1:-60}"
shift || true
all_targets=(fuzz_model fuzz_cluster fuzz_plan fuzz_schedule_text fuzz_simulate fuzz_hf_config
  fuzz_trace_file fuzz_megatron_log)
if (($# > 0)); then targets=("$@"); else targets=("${all_targets[@]}"); fi
build_dir="${PIPECAST_FUZZ_BUILD_DIR:-build-fuzz}"
jobs="${PIPECAST_JOBS:-$(nproc)}"
# Per input: a schedule or a model that takes longer than this is a hang.
per_input_timeout_s=10
rss_limit_mb=2048

log() { echo "fuzz.sh: $*" >&2; }

scripts/setup.sh

configure=(
  cmake -S . -B "${build_dir}" -G Ninja
  -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo
  -DPIPECAST_FUZZ=ON -DPIPECAST_BUILD_TESTS=OFF -DPIPECAST_BUILD_BENCH=OFF -DPIPECAST_CUDA=OFF
)
if command -v ccache >/dev/null 2>&1; then
  configure+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
log "${configure[*]}"
"${configure[@]}" >&2
log "cmake --build ${build_dir} -j ${jobs} --target ${targets[*]}"
cmake --build "${build_dir}" -j "${jobs}" --target "${targets[@]}" >&2

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

failed=()
for t in "${targets[@]}"; do
  bin="${build_dir}/fuzz/${t}"
  work="${build_dir}/corpus/${t}"
  artifacts="${build_dir}/artifacts/${t}/"
  mkdir -p "${work}" "${artifacts}"
  common=(-timeout="${per_input_timeout_s}" -rss_limit_mb="${rss_limit_mb}"
          -artifact_prefix="${artifacts}")

  regressions=(fuzz/regressions/"${t}"/*)
  if [[ -e "${regressions[0]}" ]]; then
    log "${t}: replaying ${#regressions[@]} regression input(s) from fuzz/regressions/${t}/"
    if ! "${bin}" "${common[@]}" "${regressions[@]}" >"${build_dir}/${t}.regressions.log" 2>&1; then
      log "${t}: a regression input fails again; see ${build_dir}/${t}.regressions.log"
      tail -n 40 "${build_dir}/${t}.regressions.log" >&2
      failed+=("${t} (regressions)")
      continue
    fi
  fi

  log "${t}: fuzzing for ${seconds}s (seeds fuzz/corpus/${t}/, new inputs in ${work}/)"
  # libFuzzer's own limit on the whole run, and a hard one in case it hangs
  # (generous: loading a large build-fuzz/corpus on a busy machine is slow).
  rc=0
  timeout --kill-after=30 "$((2 * seconds + 300))" \
    "${bin}" "${common[@]}" -max_total_time="${seconds}" -print_final_stats=1 \
    "${work}" "fuzz/corpus/${t}" >"${build_dir}/${t}.log" 2>&1 || rc=$?
  if ((rc == 124 || rc == 137)); then
    log "${t}: FAILED: libFuzzer did not stop within $((2 * seconds + 300))s; log ${build_dir}/${t}.log"
    tail -n 40 "${build_dir}/${t}.log" >&2
    failed+=("${t} (did not stop)")
  elif ((rc != 0)); then
    log "${t}: FAILED (exit ${rc}); input in ${artifacts}, log ${build_dir}/${t}.log"
    tail -n 40 "${build_dir}/${t}.log" >&2
    failed+=("${t}")
  else
    log "${t}: clean; $(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "${build_dir}/${t}.log" || true)"
  fi
done

if ((${#failed[@]} > 0)); then
  log "failed: ${failed[*]}"
  exit 1
fi
log "all ${#targets[@]} fuzz targets ran clean for ${seconds}s each"
