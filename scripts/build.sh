#!/usr/bin/env bash
# Configures and builds pipecast with CMake and Ninja.
#
#   scripts/build.sh [extra cmake arguments...]
#
# Environment:
#   PIPECAST_BUILD_DIR  build folder, relative to the repository root or
#                       absolute (default: build)
#   PIPECAST_CUDA       AUTO, ON or OFF (default: AUTO)
#   PIPECAST_JOBS       parallel compile jobs (default: nproc)
#   PIPECAST_BUILD_TARGETS  targets to build, space-separated (default: all)
#
# Extra arguments go to the configure step after the defaults, so they win:
# e.g. scripts/build.sh -DCMAKE_BUILD_TYPE=Debug -DPIPECAST_BUILD_BENCH=OFF.
# Configures every time (cheap; it picks up changed arguments), then builds
# incrementally.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir="${PIPECAST_BUILD_DIR:-build}"
jobs="${PIPECAST_JOBS:-$(nproc)}"

log() { echo "build.sh: $*" >&2; }

# A folder configured with another generator cannot be reused by Ninja:
# drop its cache (only CMake's own files) rather than fail.
cache="${build_dir}/CMakeCache.txt"
if [[ -f "${cache}" ]] && ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "${cache}"; then
  log "${build_dir} was configured with another generator; clearing its CMake cache"
  rm -rf "${cache}" "${build_dir}/CMakeFiles"
fi

# RelWithDebInfo with line tables only (-g1, not CMake's -g): backtraces, perf
# and the sanitizers' reports name file and line all the same, and a cold
# build compiles about a third faster (docs/testing.md, "CI time"). Pass
# -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG" for full debug info.
configure=(
  cmake -S . -B "${build_dir}" -G Ninja
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
  "-DPIPECAST_CUDA=${PIPECAST_CUDA:-AUTO}"
  "$@"
)
log "${configure[*]}"
"${configure[@]}"

targets=()
for target in ${PIPECAST_BUILD_TARGETS:-}; do targets+=(--target "${target}"); done
log "cmake --build ${build_dir} -j ${jobs} ${targets[*]}"
cmake --build "${build_dir}" -j "${jobs}" "${targets[@]}"
