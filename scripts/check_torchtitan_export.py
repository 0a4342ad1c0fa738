#!/usr/bin/env python3
"""Checks a torchtitan TOML that `--export torchtitan=FILE.toml` wrote against its schedule CSV.

Reads the TOML with Python's tomllib and the CSV it names the way PyTorch's _load_csv reads it
(check_pytorch_csv.py's from_str), and checks they describe one run, as torchtitan v0.2.2's
torchtitan/distributed/pipeline_parallel.py uses them: one CSV row per pipeline rank
(pipeline_parallel_degree), stage ids 0..S-1 with S the number of module_fqns_per_model_part,
micro-batches 0..m-1 with m = local_batch_size / pipeline_parallel_microbatch_size.

    scripts/check_torchtitan_export.py FILE.toml   # exit 0 and a summary, or 1 saying what differs
"""
import csv
import os
import sys
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_pytorch_csv import from_str  # noqa: E402


def actions(cell):
    action = from_str(cell)
    if action is None:
        return []
    if action[3]:
        return [a for a in action[3] if a is not None]
    return [action]


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: check_torchtitan_export.py FILE.toml\n")
        return 2
    with open(argv[1], "rb") as stream:
        config = tomllib.load(stream)
    par, training = config["parallelism"], config["training"]
    p = par["pipeline_parallel_degree"]
    parts = len(par["module_fqns_per_model_part"])
    m = training["local_batch_size"] // par["pipeline_parallel_microbatch_size"]
    errors = []
    if training["local_batch_size"] % par["pipeline_parallel_microbatch_size"]:
        errors.append("local_batch_size is not a multiple of the micro-batch size")
    stages, microbatches, rows = set(), set(), 0
    with open(par["pipeline_parallel_schedule_csv"], newline="") as stream:
        for row in csv.reader(stream):
            rows += 1
            for cell in row:
                for stage, _, mb, _ in actions(cell):
                    stages.add(stage)
                    if mb is not None:
                        microbatches.add(mb)
    if rows != p:
        errors.append("the CSV has %d rows, pipeline_parallel_degree is %d" % (rows, p))
    if stages != set(range(parts)):
        errors.append("the CSV's stages are %s, module_fqns_per_model_part has %d parts"
                      % (sorted(stages), parts))
    if microbatches != set(range(m)):
        errors.append("the CSV's micro-batches are %s, local_batch_size / micro-batch size is %d"
                      % (sorted(microbatches), m))
    if parts % p:
        errors.append("%d parts over %d ranks" % (parts, p))
    for e in errors:
        sys.stderr.write("%s: %s\n" % (argv[1], e))
    if errors:
        return 1
    print("%s: %d ranks, %d stages, %d micro-batches, as its CSV" % (argv[1], p, parts, m))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
