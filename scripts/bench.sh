#!/usr/bin/env bash
# Builds and runs the simulator benchmarks (bench/sim_bench.cc) and prints
# their table to stdout; set-up and build messages go to stderr. Then the
# scaling benchmarks (bench/scaling_bench.cc: cost per op as p and m grow, with
# its linearity check) and the planner's wall time and peak memory for 8, 64,
# 512 and 1024 GPUs on examples/llama-70b.json (docs/benchmarks.md). Exits 1
# when the scaling check fails.
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
build/bench/planner_bench "$@"

# Cost per op must stay flat as the number of ops grows 1000-fold
# (PIPECAST_LINEAR_FACTOR: the most ns/op may grow, largest vs smallest).
scaling_rc=0
build/bench/scaling_bench --benchmark_min_time=0.1 \
  --linear_factor="${PIPECAST_LINEAR_FACTOR:-4}" "$@" || scaling_rc=$?

# The real planner binary on both cores: wall time and peak resident memory
# (getrusage ru_maxrss of the child process).
echo
echo "planner on examples/llama-70b.json, h100-sxm, --threads 2: wall time, CPU time (user + system) and peak memory"
for gpus in 8 64 512 1024; do
  python3 - "${gpus}" <<'PY'
import resource, subprocess, sys, time
gpus = sys.argv[1]
start = time.monotonic()
run = subprocess.run(["build/planner/planner", "--model", "examples/llama-70b.json", "--gpus", gpus,
                      "--cluster", "h100-sxm", "--threads", "2"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
wall = time.monotonic() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"  {gpus:>5} GPUs: {wall:7.2f} s wall, {usage.ru_utime + usage.ru_stime:7.2f} s CPU, "
      f"{usage.ru_maxrss / 1024:8.1f} MiB peak RSS, exit {run.returncode}")
PY
done
exit "${scaling_rc}"
