#!/bin/sh
# The simulator's --schedule-format pytorch-csv, read back the way PyTorch's _load_csv reads it
# (scripts/check_pytorch_csv.py, no torch needed): every built-in that splits, chunks or pairs
# ops, the hand-written fixtures, and the CSV --export torchtitan writes with its TOML.
# Skipped (exit 77) without python3.
# Usage: pytorch_csv_check.sh SIMULATOR
set -eu
command -v python3 >/dev/null 2>&1 || exit 77
sim=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for schedule in 1f1b zb-h2 interleaved dualpipev; do
  "$sim" --model examples/toy-uniform.json --stages 4 --microbatches 8 --schedule "$schedule" \
    --cluster ideal --schedule-format pytorch-csv --schedule-out "$dir/$schedule.csv" >/dev/null
  python3 scripts/check_pytorch_csv.py "$dir/$schedule.csv"
done
for fixture in tests/schedules/*.csv; do python3 scripts/check_pytorch_csv.py "$fixture"; done
# --export torchtitan (docs/frameworks.md): the CSV written beside the TOML loads as above, and
# the TOML and the CSV agree on ranks, stages and micro-batches (scripts/check_torchtitan_export.py).
for schedule in 1f1b zb-h2 interleaved dualpipev; do
  "$sim" --model examples/toy-uniform.json --stages 4 --microbatches 8 --schedule "$schedule" \
    --cluster ideal --export torchtitan="$dir/titan-$schedule.toml" >/dev/null 2>&1
  python3 scripts/check_pytorch_csv.py "$dir/titan-$schedule.csv"
  python3 scripts/check_torchtitan_export.py "$dir/titan-$schedule.toml"
done
