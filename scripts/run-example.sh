#!/usr/bin/env bash
# The README's main command: sets up the machine, builds, and runs pipecast on
# a shipped example.
#
#   scripts/run-example.sh [extra flags for the tool...]
#
# Set-up and build messages go to stderr, so stdout carries only the tool's
# results. Exits with the tool's exit code (README, "Exit codes").
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The example: change this command to change what the README's main command
# runs. Paths are relative to the repository root.
example=(
  build/planner/planner
  --model examples/gpt-7b.json
  --gpus 8
)

# Only what the main job needs: the packages the tools build with, and the
# planner with its libraries (about 45 compiled files of the project's 229
# targets' worth). scripts/test.sh brings the rest: the test and benchmark
# packages, then every target. A build folder that exists keeps its
# configuration (tests and benchmarks on, when scripts/test.sh made it).
scripts/setup.sh main
configure=()
if [[ ! -f build/CMakeCache.txt ]]; then
  configure=(-DPIPECAST_BUILD_TESTS=OFF -DPIPECAST_BUILD_BENCH=OFF)
fi
# This script's results are the tool's; build progress goes to stderr.
PIPECAST_BUILD_DIR=build PIPECAST_BUILD_TARGETS=planner scripts/build.sh "${configure[@]}" >&2

echo "run-example.sh: ${example[*]} $*" >&2
exec "${example[@]}" "$@"
