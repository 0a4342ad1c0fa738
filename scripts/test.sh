#!/usr/bin/env bash
# The README's test command: sets up the machine, builds, and runs every test
# with ctest. Exits non-zero when a test fails, or when no test was found.
#
#   scripts/test.sh [extra ctest arguments...]    e.g. -R Schedule, -L unit
#
# Environment:
#   PIPECAST_SANITIZE=1   build into build-asan with AddressSanitizer and
#                         UndefinedBehaviorSanitizer (benchmarks off) and test
#                         that build instead of the normal one in build/.
#                         .ci/run runs both, one after the other.
#   PIPECAST_TEST_JOBS    tests run in parallel (default: 2)
#   PIPECAST_CUDA, PIPECAST_JOBS: as for scripts/build.sh
#
# Tests labelled `gpu` run too: without a CUDA device they skip themselves.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "test.sh: $*" >&2; }

scripts/setup.sh all

if [[ "${PIPECAST_SANITIZE:-0}" == 1 ]]; then
  build_dir=build-asan
  # Debug (-O0): compiles much faster than -O2, and the tests are small.
  # Line tables only (-g1): the reports' stacks keep file and line.
  cmake_args=(-DPIPECAST_SANITIZE=ON -DPIPECAST_BUILD_TESTS=ON -DPIPECAST_BUILD_BENCH=OFF
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1)
  # The lint scripts and the browser's check of the HTML report run no
  # instrumented code of their own that the other tests do not: once is enough.
  ctest_filter=(-LE "^(lint|browser)$")
  # Fail on the first report, with a stack; leaks are errors; an allocation too
  # big to serve returns null as without ASan (the validator's out-of-memory
  # path depends on it). Exit code 86 (not
  # 1) so that a report from a tool that a test expects to fail with 1 still
  # fails the test.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:check_initialization_order=1:allocator_may_return_null=1:exitcode=86}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=86}"
else
  build_dir=build
  ctest_filter=()
  # Tests and benchmarks on, also where scripts/run-example.sh configured
  # build/ for the planner alone.
  cmake_args=(-DPIPECAST_SANITIZE=OFF -DPIPECAST_BUILD_TESTS=ON -DPIPECAST_BUILD_BENCH=ON)
fi

PIPECAST_BUILD_DIR="${build_dir}" scripts/build.sh "${cmake_args[@]}"

ctest_cmd=(
  ctest --test-dir "${build_dir}" --output-on-failure --no-tests=error
  -j "${PIPECAST_TEST_JOBS:-2}" "${ctest_filter[@]}" "$@"
)
log "${ctest_cmd[*]}"
"${ctest_cmd[@]}"
