#!/usr/bin/env python3
"""Runs pipecast on MosaicML llm-foundry's published MPT training benchmarks.

For each row of tests/calibration/llm_foundry_rows.json (docs/calibration.md,
"llm-foundry"): `profiler analytic` with the row's architecture on the row's
GPU preset, then `simulator --json` with the row's configuration pinned (t, p,
d, micro-batch size, accumulation steps, recomputation, ZeRO-3 for FSDP
FULL_SHARD). Prints per row the predicted and published tokens/s per GPU, the
error (predicted / published - 1) and the split of the predicted iteration:
compute (the busiest rank's ops without the sharding collectives they wait
for), exposed sharding communication, the data-parallel tail and the optimizer
step; then the mean error and mean |error| per GPU.

    scripts/calibration/llm_foundry.py [--build build] [--only h100] [--json]
        [--profiler-arg=--attention=flash2 ...] [--simulator-arg=... ...]

Needs the built profiler and simulator (scripts/build.sh). Exit code 0, or 1
when a tool fails (its message is printed).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_ROWS = os.path.join(ROOT, "tests", "calibration", "llm_foundry_rows.json")


def tool(build, name):
    for sub in ("profiler", "sim", "tools", "planner"):
        path = os.path.join(build, sub, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    sys.exit(f"llm_foundry.py: no {name} under {build}: build it first (scripts/build.sh)")


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(f"llm_foundry.py: {' '.join(cmd)} failed ({done.returncode}):\n")
        sys.stderr.write(done.stderr)
        sys.exit(1)
    return done.stdout


def predict(row, profiler, simulator, profiler_args, simulator_args, workdir):
    a = row["architecture"]
    model = os.path.join(workdir, row["id"] + ".json")
    cmd = [profiler, "analytic", "--name", a["model"], "--layers", str(a["layers"]),
           "--hidden", str(a["hidden"]), "--heads", str(a["heads"]),
           "--kv-heads", str(a["kv_heads"]), "--ffn-hidden", str(a["ffn"]),
           "--seq", str(a["seq"]), "--vocab", str(a["vocab"]),
           "--microbatch-sizes", str(row["mbs"]), "--gpu", row["preset"],
           "--attention", row.get("attention", "flash2"), "--out", model]
    if row.get("elementwise"):  # absent: the profiler's default (fused)
        cmd += ["--elementwise", row["elementwise"]]
    if a.get("tied"):
        cmd.append("--tied-embeddings")
    if a.get("gated_mlp"):
        cmd.append("--gated-mlp")
    if a.get("rotary"):
        cmd.append("--rotary-positions")
    run(cmd + profiler_args)
    sim = [simulator, "--model", model, "--stages", str(row["p"]),
           "--microbatches", str(row["m"]), "--microbatch-size", str(row["mbs"]),
           "--data-parallel", str(row["d"]), "--tensor-parallel", str(row["t"]),
           "--zero", "3", "--recompute", "full" if row["recompute"] == "full" else "off",
           "--cluster", row["preset"], "--shard-prefetch", row.get("shard_prefetch", "on"),
           "--json"]
    result = json.loads(run(sim + simulator_args))
    gpus = row["d"] * row["t"] * row["p"]
    per_gpu = result["tokens_per_s"] / gpus
    # The busiest rank (one stage here: FSDP rows run p = 1).
    stage = max(result["stages"], key=lambda s: s["busy_us"])
    sharding = stage.get("sharding_exposed_us", 0.0)
    tail = stage.get("allreduce_us", 0.0) + stage.get("allgather_us", 0.0)
    return {
        "id": row["id"],
        "preset": row["preset"],
        "gpus": gpus,
        "published": row["measured"]["tokens_per_s_per_gpu"],
        "predicted": per_gpu,
        "error": per_gpu / row["measured"]["tokens_per_s_per_gpu"] - 1,
        "iteration_ms": result["iteration_time_us"] / 1e3,
        "compute_ms": (stage["busy_us"] - sharding) / 1e3,
        "sharding_exposed_ms": sharding / 1e3,
        "dp_tail_ms": tail / 1e3,
        "optimizer_ms": result["optimizer_time_us"] / 1e3,
        "mfu": result["mfu"],
        "published_mfu": row["measured"].get("mfu", float("nan")),
    }


def summary(rows, preset):
    errors = [r["error"] for r in rows if r["preset"] == preset]
    if not errors:
        return None
    return {
        "preset": preset,
        "rows": len(errors),
        "mean_error": sum(errors) / len(errors),
        "mean_abs_error": sum(abs(e) for e in errors) / len(errors),
        "max_abs_error": max(abs(e) for e in errors),
        "within_10": sum(abs(e) <= 0.10 for e in errors),
        "within_15": sum(abs(e) <= 0.15 for e in errors),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.environ.get("PIPECAST_BUILD_DIR",
                                                          os.path.join(ROOT, "build")))
    parser.add_argument("--rows", default=DEFAULT_ROWS)
    parser.add_argument("--only", default="", help="keep rows whose id contains this")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--profiler-arg", action="append", default=[],
                        help="extra profiler analytic flag (repeat), e.g. --profiler-arg=--attention=flash2")
    parser.add_argument("--simulator-arg", action="append", default=[],
                        help="extra simulator flag (repeat)")
    args = parser.parse_args()
    profiler = tool(args.build, "profiler")
    simulator = tool(args.build, "simulator")
    with open(args.rows) as f:
        rows = [r for r in json.load(f)["rows"] if args.only in r["id"]]
    with tempfile.TemporaryDirectory() as workdir:
        out = [predict(r, profiler, simulator, args.profiler_arg, args.simulator_arg, workdir)
               for r in rows]
    presets = sorted({r["preset"] for r in out}, key=lambda p: (p != "h100-sxm", p))
    sums = [s for s in (summary(out, p) for p in presets) if s]
    if args.json:
        print(json.dumps({"rows": out, "summary": sums}, indent=1))
        return
    print(f"{'row':34} {'pub':>7} {'pred':>8} {'error':>7} | {'iter ms':>9} {'compute':>9} "
          f"{'sharding':>9} {'dp tail':>8} {'optim':>7} | {'MFU pub':>7} {'pred':>6}")
    for r in out:
        print(f"{r['id']:34} {r['published']:7.0f} {r['predicted']:8.0f} {r['error']*100:+6.1f}% | "
              f"{r['iteration_ms']:9.1f} {r['compute_ms']:9.1f} {r['sharding_exposed_ms']:9.1f} "
              f"{r['dp_tail_ms']:8.1f} {r['optimizer_ms']:7.1f} | {r['published_mfu']*100:6.1f}% "
              f"{r['mfu']*100:5.1f}%")
    for s in sums:
        print(f"{s['preset']}: {s['rows']} rows, mean error {s['mean_error']*100:+.1f}%, "
              f"mean |error| {s['mean_abs_error']*100:.1f}%, max |error| "
              f"{s['max_abs_error']*100:.1f}%, within 10%: {s['within_10']}, within 15%: "
              f"{s['within_15']}")


if __name__ == "__main__":
    main()
