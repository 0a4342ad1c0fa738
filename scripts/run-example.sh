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

scripts/setup.sh
# This script's results are the tool's; build progress goes to stderr.
PIPECAST_BUILD_DIR=build scripts/build.sh >&2

echo "run-example.sh: ${example[*]} $*" >&2
exec "${example[@]}" "$@"
