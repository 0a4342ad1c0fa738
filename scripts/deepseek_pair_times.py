#!/usr/bin/env python3
"""Kernel times of DeepSeek's published DualPipe F&B pair, for docs/calibration.md.

Reads train.json from deepseek-ai/profile-data (a PyTorch profiler trace of one overlapped
forward and backward chunk pair) and prints, per phase (F, B, W) and per stream, the sum of the
kernels' durations, each kernel assigned to the profiler annotation (attn(F), dispatch(B), ...)
whose range holds the runtime call that launched it, and the pair's span from the first kernel
start to the last kernel end. Usage: deepseek_pair_times.py path/to/train.json
"""
import collections
import json
import sys


def main(path):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    notes = sorted((e for e in events if e.get("cat") == "user_annotation"
                    and e["name"].endswith(")")), key=lambda e: e["ts"])
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}

    def phase(ts):
        for n in notes:
            if n["ts"] <= ts <= n["ts"] + n["dur"]:
                return n["name"][-2]  # "attn(F)" -> "F"
        return "?"

    streams = {}
    totals = collections.defaultdict(int)
    first, last = None, None
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        first = e["ts"] if first is None else min(first, e["ts"])
        last = max(last or 0, e["ts"] + e["dur"])
        if e["cat"] != "kernel":
            continue
        launch = launches.get(e["args"].get("correlation"))
        streams.setdefault(e["tid"], len(streams))
        totals[(e["tid"], phase(launch["ts"]) if launch else "?")] += e["dur"]
    for (tid, ph), us in sorted(totals.items()):
        print(f"stream {tid} phase {ph}: {us / 1000:.3f} ms")
    print(f"span: {(last - first) / 1000:.3f} ms")


if __name__ == "__main__":
    main(sys.argv[1])
