#!/usr/bin/env python3
"""Per-step figures of PyTorch profiler (Kineto) traces, computed independently of pipecast's
C++ reader (measured/), by brute force over the events, for checking it (measured_test.cc's
published-trace tests quote this script's output) and for anyone who wants the numbers without
pipecast. The rules are docs/measured-runs.md's:

- a GPU activity (kernel, memcpy, memset) belongs to the ProfilerStep#N range holding the start of
  the runtime/driver call that launched it (joined by args.correlation);
- it is communication when its name is an NCCL kernel (ncclKernel_*, ncclDevKernel_*) or one of
  DeepEP's dispatch/combine/notify kernels, of the collective its name says (SendRecv refined by the
  enclosing nccl:<op> range on the launching thread);
- its phase is that of the innermost phase-bearing range (PP:<action>, "x(F)", "## forward ##",
  "Optimizer.step#...", "forward"/"backward") holding the launch on the launching thread, else on
  another thread (the latest-starting such range), else backward when an
  autograd::engine::evaluate_function range holds the launch; forward when nothing in the step is
  marked and the main thread launched it;
- per step: window = first start to last end; compute = union of non-communication activity;
  comm = union of communication kernels; exposed = comm less its overlap with compute.

Usage: kineto_figures.py TRACE.json [TRACE.json ...]   (times in microseconds, 3 decimals)
"""
import json
import sys
from decimal import Decimal, ROUND_HALF_UP


def ns(x):
    """Microseconds as written (int or float text) to integer ns, rounded half up at the ns."""
    return int((Decimal(repr(x)) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def union(iv):
    out = []
    for s, e in sorted(iv):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(u):
    return sum(e - s for s, e in u)


def overlap(a, b):
    return sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


def comm_kind(name):
    s = name[:256].lower()
    if "deep_ep::" in s or "dpsk::ep::" in s:
        return "all-to-all" if any(w in s for w in ("dispatch", "combine", "notify")) else None
    if "nccl" not in s:
        return None
    for word, kind in (("alltoall", "all-to-all"), ("reducescatter", "reduce-scatter"),
                       ("allgather", "all-gather"), ("allreduce", "all-reduce"),
                       ("sendrecv", "send/recv"), ("_send", "send/recv"), ("_recv", "send/recv"),
                       ("broadcast", "broadcast"), ("_reduce", "reduce")):
        if word in s:
            return kind
    return "other"


def range_comm(name):
    s = name[5:].lower()
    for words, kind in ((("all_to_all", "alltoall"), "all-to-all"),
                        (("reduce_scatter", "reducescatter"), "reduce-scatter"),
                        (("all_gather", "allgather"), "all-gather"),
                        (("all_reduce", "allreduce"), "all-reduce"), (("broadcast",), "broadcast"),
                        (("send", "recv"), "send/recv"), (("reduce",), "reduce")):
        if any(w in s for w in words):
            return kind
    return "other"


def phase_of(name):
    if name.startswith("PP:"):
        a = name[3:]
        for k, p in (("F", "forward"), ("B", "backward"), ("I", "backward"), ("W", "weight")):
            head, _, tail = a.partition(k)
            if head.isdigit() and tail.isdigit():
                return p
        if a.startswith("(") and a.endswith("OVERLAP_F_B"):
            return "forward"
        return None
    if name.startswith("Optimizer.step#") or name.startswith("Optimizer.zero_grad#"):
        return "optimizer"
    if len(name) > 3 and name.endswith(")") and name[-3] == "(" and name[-2] in "FBW":
        return {"F": "forward", "B": "backward", "W": "weight"}[name[-2]]
    if name.startswith("## ") and name.endswith(" ##") and len(name) >= 7:
        core = name[3:-3].lower().split(":")[0]
        return {"forward": "forward", "backward": "backward", "optimizer": "optimizer",
                "zero_grad": "optimizer"}.get(core)
    if name.lower() in ("forward", "backward"):
        return name.lower()
    return None


def figures(path):
    with open(path) as f:
        t = json.load(f)
    ev = t["traceEvents"] if isinstance(t, dict) else t
    base = t.get("baseTimeNanoseconds", 0) if isinstance(t, dict) else 0
    X = [e for e in ev if e.get("ph") == "X" and "ts" in e]
    for e in X:
        e["_s"] = ns(e["ts"]) + base
        e["_e"] = e["_s"] + ns(e.get("dur", 0))
    steps = sorted((e for e in X if e.get("cat") in ("user_annotation", "cpu_op")
                    and e["name"].startswith("ProfilerStep#") and e["name"][13:].isdigit()),
                   key=lambda e: e["_s"])
    from collections import Counter
    main_tid = Counter(e["tid"] for e in steps).most_common(1)[0][0]
    launch = {e["args"]["correlation"]: e for e in X
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ranges = [e for e in X if e.get("cat") in ("user_annotation", "cpu_op")]
    phase_r = [(e, phase_of(e["name"])) for e in ranges if phase_of(e["name"])]
    comm_r = [e for e in ranges if e["name"].startswith("nccl:")]
    auto_r = [e for e in ranges if e["name"].startswith("autograd::engine::evaluate_function:")]

    def holding(rs, tid, ts, same):
        c = [r for r in rs if (r[0] if isinstance(r, tuple) else r)["tid"] == tid] if same else rs
        c = [r for r in c if (r[0] if isinstance(r, tuple) else r)["_s"] <= ts < (r[0] if isinstance(r, tuple) else r)["_e"]]
        return max(c, key=lambda r: ((r[0] if isinstance(r, tuple) else r)["_s"], -(r[0] if isinstance(r, tuple) else r)["_e"])) if c else None

    per_step = {}
    for e in X:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        l = launch.get(e.get("args", {}).get("correlation"))
        ts = l["_s"] if l else e["_s"]
        st = next((s for s in steps if s["_s"] <= ts < s["_e"]), None)
        if st is None:
            continue
        kind = comm_kind(e["name"]) if e["cat"] == "kernel" else None
        if l and kind in ("send/recv", "other"):
            r = holding(comm_r, l["tid"], ts, True)
            if r is not None and range_comm(r["name"]) != "other":
                kind = range_comm(r["name"])
        phase, source = "other", "none"
        if l:
            r = holding(phase_r, l["tid"], ts, True)
            if r is None:
                others = [x for x in phase_r if x[0]["tid"] != l["tid"]]
                r = holding(others, None, ts, False)
            if r is not None:
                phase, source = r[1], "range"
            elif holding(auto_r, l["tid"], ts, True) is not None:
                phase = "backward"
            elif l["tid"] == main_tid:
                phase = "main"
        per_step.setdefault(st["name"], []).append((e["_s"], e["_e"], e.get("tid"), kind, phase, source))
    out = {}
    for step, acts in per_step.items():
        # Marked: some work of the step got its phase from a phase-bearing range. Else the main
        # thread's unmarked launches are the forward.
        marked = any(x[5] == "range" for x in acts)
        main_phase = "other" if marked else "forward"
        acts = [(s, e, tid, k, main_phase if p == "main" else p, src)
                for s, e, tid, k, p, src in acts]
        compute = union([(s, e) for s, e, _, k, _, _ in acts if k is None])
        comm = union([(s, e) for s, e, _, k, _, _ in acts if k is not None])
        kinds = {}
        for s, e, _, k, _, _ in acts:
            if k is not None:
                kinds.setdefault(k, []).append((s, e))
        phases = {}
        for s, e, _, k, p, _ in acts:
            phases.setdefault((p, k is not None), []).append((s, e))
        streams = {}
        for s, e, tid, _, _, _ in acts:
            streams.setdefault(tid, []).append((s, e))
        start = min(a[0] for a in acts)
        end = max(a[1] for a in acts)
        out[step] = {
            "window": end - start, "start": start, "end": end,
            "compute": length(compute), "comm": length(comm),
            "exposed": length(comm) - overlap(comm, compute),
            "kinds": {k: (length(union(v)), length(union(v)) - overlap(union(v), compute))
                      for k, v in sorted(kinds.items())},
            "phases": {f"{p} {'comm' if c else 'compute'}": length(union(v))
                       for (p, c), v in sorted(phases.items())},
            "streams": {s: length(union(v)) for s, v in sorted(streams.items(), key=lambda x: str(x[0]))},
            "activities": len(acts),
        }
    return out


def us(n):
    return f"{n / 1000:.3f}"


def main(paths):
    for p in paths:
        for step, f in sorted(figures(p).items()):
            print(f"{p} {step}: window {us(f['window'])} compute {us(f['compute'])} comm {us(f['comm'])} "
                  f"exposed {us(f['exposed'])} activities {f['activities']} (start {f['start']} ns)")
            for k, (a, x) in f["kinds"].items():
                print(f"  {k}: {us(a)} exposed {us(x)}")
            for k, v in f["phases"].items():
                print(f"  {k}: {us(v)}")
            for s, v in f["streams"].items():
                print(f"  stream {s}: busy {us(v)}")


if __name__ == "__main__":
    main(sys.argv[1:])
