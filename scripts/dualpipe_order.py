#!/usr/bin/env python3
"""Per-rank compute order of deepseek-ai/DualPipe's DualPipeV and DualPipe, without torch.

A line-by-line port of the `step()` methods of dualpipe/dualpipev.py and dualpipe/dualpipe.py
(deepseek-ai/DualPipe at commit 3da1bbe, "cite latest year"): the same eight steps, the same
loop counts and the same chunk counters, with each compute call recording its op instead of
running a module, and WeightGradStore's FIFO queue kept as a list. Communication calls only
order transfers, so they are left out; `_forward_backward_chunk` records an overlapped pair.

    scripts/dualpipe_order.py dualpipev P M    # P ranks (2P stages in a V), M micro-batches
    scripts/dualpipe_order.py dualpipe P M     # P ranks (even), M micro-batches (even)

prints one line per rank in pipecast's schedule text (docs/formats.md): `<stage><kind><mb>`,
overlapped pairs as `(F;B)OVERLAP_F_B`. DualPipeV's rank r holds stages r and 2P-1-r. DualPipe's
lines name the direction before the stage, pipecast's bidirectional schedule text
(docs/formats.md): `a3F5` is micro-batch 5 of direction a (entering at rank 0) on model stage 3,
direction b entering at rank P-1. The fixtures under tests/schedules/ were written by this script; the C++
generator (sim/schedule_zoo_dualpipe.cc) must reproduce them.
"""
import sys


class Recorder:
    """The compute calls of one rank: `name(phase, chunk)` gives an op's text."""

    def __init__(self, name):
        self.name = name
        self.ops = []
        self.f = [0, 0]  # current_f_chunk_id
        self.b = [0, 0]  # current_b_chunk_id
        self.weights = []  # WeightGradStore.funcs_queue

    def forward(self, phase):
        chunk = self.f[phase]
        self.f[phase] += 1
        return self.name(phase, "F", chunk)

    def backward(self, phase, enable_zb):
        chunk = self.b[phase]
        self.b[phase] += 1
        if enable_zb:
            # WeightGradStore.flush(): the weight gradient waits in the queue for _weight_chunk.
            self.weights.append(self.name(phase, "W", chunk))
            return self.name(phase, "I", chunk)
        return self.name(phase, "B", chunk)

    # The schedule's calls.
    def forward_chunk(self, phase):
        self.ops.append(self.forward(phase))

    def backward_chunk(self, phase, enable_zb=False):
        self.ops.append(self.backward(phase, enable_zb))

    def forward_backward_chunk(self, phase0, phase1):
        f = self.forward(phase0)
        b = self.backward(phase1, False)
        self.ops.append("(%s;%s)OVERLAP_F_B" % (f, b))

    def weight_chunk(self):
        self.ops.append(self.weights.pop(0))  # "Assume FIFO"


def dualpipev(num_ranks, num_chunks, rank):
    assert num_chunks > 0 and num_chunks >= num_ranks * 2
    stages = (rank, 2 * num_ranks - 1 - rank)
    r = Recorder(lambda phase, kind, chunk: "%d%s%d" % (stages[phase], kind, chunk))
    is_last_rank = rank == num_ranks - 1

    # Step 1: nF0
    for _ in range((num_ranks - rank - 1) * 2):
        r.forward_chunk(0)
    # Step 2: nF0F1
    for _ in range(rank + 1):
        r.forward_chunk(0)
        r.forward_chunk(1)
    # Step 3: nB1W1F1 (Use zero bubble)
    for _ in range(num_ranks - rank - 1):
        r.backward_chunk(1, enable_zb=True)
        r.weight_chunk()
        r.forward_chunk(1)
    # Step 4 (Main step): nF0B1F1B0
    for i in range(num_chunks - num_ranks * 2 + rank + 1):
        if i == 0 and is_last_rank:
            # NOTE: We don't overlap these two chunks to further reduce bubble size.
            r.forward_chunk(0)
            r.backward_chunk(1)
        else:
            r.forward_backward_chunk(0, 1)
        r.forward_backward_chunk(1, 0)
    # Step 5: nB1F1B0
    for _ in range(num_ranks - rank - 1):
        r.backward_chunk(1)
        r.forward_backward_chunk(1, 0)
    # Step 6: nB1B0 (The second half of the chunks use zero bubble)
    step_6 = rank + 1
    enable_zb = False
    for i in range(step_6):
        if i == step_6 // 2 and rank % 2 == 1:
            enable_zb = True
        r.backward_chunk(1, enable_zb=enable_zb)
        if i == step_6 // 2 and rank % 2 == 0:
            enable_zb = True
        r.backward_chunk(0, enable_zb=enable_zb)
    # Step 7: nWB0 (Use zero bubble)
    for _ in range(num_ranks - rank - 1):
        r.weight_chunk()
        r.backward_chunk(0, enable_zb=True)
    # Step 8: nW
    for _ in range(rank + 1):
        r.weight_chunk()
    assert not r.weights
    return r.ops


def dualpipe(num_ranks, num_chunks, rank):
    assert num_ranks % 2 == 0
    assert num_chunks > 0 and num_chunks % 2 == 0 and num_chunks >= num_ranks * 2
    num_half_ranks = num_ranks // 2
    half_rank = min(rank, num_ranks - 1 - rank)
    half_num_chunks = num_chunks // 2
    is_in_second_half = rank >= num_half_ranks
    is_middle_rank = rank in (num_half_ranks - 1, num_half_ranks)

    # module[0] is direction a's stage `rank`, module[1] direction b's stage num_ranks-1-rank;
    # `phase ^= is_in_second_half` picks the module, as in _forward_compute_chunk.
    def name(phase, kind, chunk):
        module = phase ^ is_in_second_half
        if module == 0:
            return "a%d%s%d" % (rank, kind, chunk)
        return "b%d%s%d" % (num_ranks - 1 - rank, kind, chunk)

    r = Recorder(name)
    # Step 1: nF0
    for _ in range((num_half_ranks - half_rank - 1) * 2):
        r.forward_chunk(0)
    # Step 2: nF0F1
    for _ in range(half_rank + 1):
        r.forward_chunk(0)
        r.forward_chunk(1)
    # Step 3: nB1W1F1 (Use zero bubble)
    for _ in range(num_half_ranks - half_rank - 1):
        r.backward_chunk(1, enable_zb=True)
        r.weight_chunk()
        r.forward_chunk(1)
    # Step 4 (Main step): nF0B1F1B0
    for i in range(half_num_chunks - num_ranks + half_rank + 1):
        if i == 0 and is_middle_rank:
            # NOTE: We don't overlap these two chunks to further reduce bubble size.
            r.forward_chunk(0)
            r.backward_chunk(1)
        else:
            r.forward_backward_chunk(0, 1)
        r.forward_backward_chunk(1, 0)
    # Step 5: nB1F1B0
    for _ in range(num_half_ranks - half_rank - 1):
        r.backward_chunk(1)
        r.forward_backward_chunk(1, 0)
    # Step 6: nB1B0 (The second half of the chunks use zero bubble)
    step_6 = half_rank + 1
    enable_zb = False
    for i in range(step_6):
        if i == step_6 // 2 and half_rank % 2 == 1:
            enable_zb = True
        r.backward_chunk(1, enable_zb=enable_zb)
        if i == step_6 // 2 and half_rank % 2 == 0:
            enable_zb = True
        r.backward_chunk(0, enable_zb=enable_zb)
    # Step 7: nWB0 (Use zero bubble)
    for _ in range(num_half_ranks - half_rank - 1):
        r.weight_chunk()
        r.backward_chunk(0, enable_zb=True)
    # Step 8: nW
    for _ in range(half_rank + 1):
        r.weight_chunk()
    assert not r.weights
    return r.ops


def main(argv):
    if len(argv) != 4 or argv[1] not in ("dualpipev", "dualpipe"):
        sys.stderr.write("usage: dualpipe_order.py dualpipev|dualpipe RANKS MICROBATCHES\n")
        return 2
    kind, p, m = argv[1], int(argv[2]), int(argv[3])
    make = dualpipev if kind == "dualpipev" else dualpipe
    for rank in range(p):
        print(" ".join(make(p, m, rank)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
