#!/usr/bin/env bash
# Builds and runs the simulator benchmarks (bench/sim_bench.cc) and prints
# their table to stdout; set-up and build messages go to stderr.
#
#   scripts/bench.sh [extra Google Benchmark flags...]
#   e.g. scripts/bench.sh --benchmark_filter=1f1b
#        scripts/bench.sh --benchmark_format=json > bench.json
#
# Builds in build/ (RelWithDebInfo, like the tools people run). Numbers from a
# machine that is busy with other work are noisy: compare runs on one machine.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh
PIPECAST_BUILD_DIR=build scripts/build.sh -DPIPECAST_BUILD_BENCH=ON >&2

build/bench/sim_bench --benchmark_min_time=0.2 "$@"
exec build/bench/planner_bench "$@"
