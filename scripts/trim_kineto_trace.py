#!/usr/bin/env python3
"""Trims a PyTorch profiler (Kineto) trace to a small test fixture (tests/traces/README.md).

Keeps, of the ProfilerStep#N ranges named by --steps (all when absent): the step ranges; the GPU
kernels, memcpys and memsets whose launch lies in them, with the runtime/driver calls that launched
them; the user annotations and the CPU ops that pipecast reads (autograd::engine::evaluate_function,
Optimizer.*, nccl:*) plus --keep-other of every other kind (cpu_op, python_function) so the
reader still meets names it ignores; process/thread metadata, distributedInfo and the first
deviceProperties entry. Args are cut to the keys pipecast reads (correlation, stream,
device), and with --max-name N names to N characters. Writes one event per line.

Usage: trim_kineto_trace.py IN OUT [--steps 551,552] [--keep-other 20] [--max-name 80]
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--steps", default="")
    ap.add_argument("--keep-other", type=int, default=20)
    ap.add_argument("--max-name", type=int, default=0, help="cut event names to this many characters")
    a = ap.parse_args()
    with open(a.src) as f:
        t = json.load(f)
    ev = t["traceEvents"]
    wanted = {int(s) for s in a.steps.split(",") if s}
    steps = [e for e in ev if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")
             and (not wanted or int(e["name"].split("#")[1]) in wanted)]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in steps]

    def in_steps(ts):
        return any(s <= ts < e for s, e in spans)

    launches = {e["args"]["correlation"]: e for e in ev
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    keep_args = ("correlation", "stream", "device")
    out, other = [], 0
    for e in ev:
        cat, ph, name = e.get("cat"), e.get("ph"), e.get("name", "")
        if ph == "M":
            out.append(e)
            continue
        if ph != "X":
            continue
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            l = launches.get(e.get("args", {}).get("correlation"))
            if l is None or not in_steps(l["ts"]):
                continue
            out.append(e)
            out.append(l)
        elif cat == "user_annotation":
            if in_steps(e["ts"]) or name.startswith("ProfilerStep#") and e in steps:
                out.append(e)
        elif cat == "cpu_op" and in_steps(e["ts"]):
            if (name.startswith("autograd::engine::evaluate_function:") or name.startswith("Optimizer.")
                    or name.startswith("nccl:")):
                out.append(e)
            elif other < a.keep_other:
                out.append(e)
                other += 1
    for e in out:
        if a.max_name and e.get("ph") == "X" and len(e.get("name", "")) > a.max_name:
            e["name"] = e["name"][:a.max_name]
        if "args" in e and e.get("ph") == "X":
            e["args"] = {k: v for k, v in e["args"].items() if k in keep_args}
    seen, events = set(), []
    for e in out:
        key = json.dumps(e, sort_keys=True)
        if key not in seen:
            seen.add(key)
            events.append(e)
    head = {k: t[k] for k in ("schemaVersion", "distributedInfo") if k in t}
    if t.get("deviceProperties"):
        head["deviceProperties"] = t["deviceProperties"][:1]
    with open(a.dst, "w") as f:
        f.write("{\n")
        for k, v in head.items():
            f.write(f'"{k}": {json.dumps(v)},\n')
        f.write('"traceEvents": [\n')
        f.write(",\n".join(json.dumps(e, separators=(",", ":")) for e in events))
        f.write("\n]")
        if "baseTimeNanoseconds" in t:
            f.write(f',\n"baseTimeNanoseconds": {t["baseTimeNanoseconds"]}')
        f.write("\n}\n")


if __name__ == "__main__":
    main()
