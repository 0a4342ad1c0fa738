#!/usr/bin/env python3
"""Reads a schedule CSV the way PyTorch pipelining does, without torch, and checks every cell.

The parsing is PyTorch's own (torch/distributed/pipelining/schedules.py at commit
00722e648b740f91d0e71494baa17891749fd291): `csv.reader` rows, one per rank, and
`_Action.from_str` on each cell — the `(a;b)OVERLAP_F_B` form split at ')' and ';', the rest
matched by `_action_regex`. PyTorch's `re.match` accepts a cell with trailing text (it keeps
`0F0` of `0F0 0F1`); this script also requires the match to cover the whole cell, so a file that
passes loses nothing in `_load_csv`.

    scripts/check_pytorch_csv.py FILE.csv    # exit 0 and a summary, or 1 naming the bad cell
"""
import csv
import re
import sys

_action_regex = re.compile(
    r"(\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)"
)
_types = {"F", "I", "W", "UNSHARD", "RESHARD", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "B",
          "OVERLAP_F_B", "REDUCE_GRAD"}


def from_str(text):
    """_Action.from_str, returning (stage, type, microbatch, sub_actions) or raising."""
    text = text.strip()
    if text == "":
        return None
    if text.startswith("(") and ")" in text:
        end = text.find(")")
        kind = text[end + 1:]
        if kind not in _types:
            raise RuntimeError("Invalid computation type %s" % kind)
        subs = [from_str(s.strip()) for s in text[1:end].split(";") if s.strip()]
        return (-1, kind, None, tuple(subs) or None)
    match = _action_regex.match(text)
    if not match:
        raise RuntimeError("Invalid action string: %s" % text)
    if match.end() != len(text):
        raise RuntimeError("%s: PyTorch would keep only '%s'" % (text, match.group(0)))
    stage, kind, mb = match.groups()
    return (int(stage), kind, int(mb) if mb else None, None)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: check_pytorch_csv.py FILE.csv\n")
        return 2
    ranks = actions = pairs = 0
    with open(argv[1], newline="") as stream:
        for rank, row in enumerate(csv.reader(stream)):
            ranks += 1
            for column, cell in enumerate(row, 1):
                try:
                    action = from_str(cell)
                except RuntimeError as error:
                    sys.stderr.write("%s: row %d column %d: %s\n" % (argv[1], rank + 1, column, error))
                    return 1
                if action is None:
                    continue
                actions += 1
                pairs += action[1] == "OVERLAP_F_B"
    print("%s: %d ranks, %d actions (%d OVERLAP_F_B) read as PyTorch's _load_csv reads them"
          % (argv[1], ranks, actions, pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
