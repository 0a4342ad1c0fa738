// Generators of the interleaved schedules (v model chunks per rank, looped placement: chunk c of
// rank r is virtual stage c·p + r), in PyTorch pipelining's orders: ScheduleInterleaved1F1B and
// ScheduleInterleavedZeroBubble (torch/distributed/pipelining/schedules.py, `_get_1f1b_rank_ops`
// and `_get_warmup_ops`; read at pytorch/pytorch 00722e648b740f91d0e71494baa17891749fd291).
//
// PyTorch splits the m micro-batches into rounds = max(1, m / p) rounds of m / rounds each and
// requires m % rounds == 0 (p = 4: m = 10 runs as two rounds of 5, m = 3 as one round of 3,
// m = 9 is refused). pipecast takes every m >= 1: when m % rounds != 0 the first m % rounds
// rounds hold one micro-batch more (p = 4, m = 9: rounds of 5 and 4); that order is pipecast's
// own, documented in docs/schedules.md. Where PyTorch runs, the orders are PyTorch's.
//
// A rank's k-th forward runs chunk (k' / n) % v of its round, k' counted from the round's first
// forward and n the round's size, on the round's next micro-batch; backwards visit the chunks in
// reverse the same way. With m a multiple of p (> p) this is Megatron-LM's interleaved order.
#include <algorithm>
#include <vector>

#include "sim/internal/schedule_builders.h"

namespace pipecast::internal {
namespace {

// Which virtual stage and micro-batch the k-th forward (or backward) of a rank runs.
class RoundOrder {
 public:
  RoundOrder(int p, int m, int v) : p_(p), v_(v) {
    const int rounds = std::max(1, m / p);
    const int base = m / rounds, extra = m % rounds;
    int start = 0;
    for (int j = 0; j < rounds; ++j) {
      const int size = base + (j < extra ? 1 : 0);
      for (int k = 0; k < size * v; ++k) {
        const int chunk = k / size;
        ops_.push_back({chunk, start + k % size});
      }
      start += size;
    }
    first_round_ = base + (extra > 0 ? 1 : 0);
  }
  // Micro-batches in the first (largest) round: PyTorch's microbatches_per_round.
  int FirstRound() const { return first_round_; }
  Action Forward(int k, int r) const {
    return Action{ops_[k].first * p_ + r, OpKind::kForward, ops_[k].second};
  }
  Action Backward(int k, int r, OpKind kind) const {
    return Action{(v_ - 1 - ops_[k].first) * p_ + r, kind, ops_[k].second};
  }

 private:
  int p_, v_, first_round_ = 0;
  std::vector<std::pair<int, int>> ops_;  // (chunk, micro-batch) of the k-th op
};

// PyTorch's _get_warmup_ops: (v-1) rounds for the last rank, `factor` more per hop away from it,
// capped at m·v.
int WarmupOps(int r, int p, int m, int v, int per_round, int factor) {
  return std::min((v - 1) * per_round + factor * (p - 1 - r), m * v);
}

}  // namespace

// Interleaved 1F1B (Narayanan et al., SC'21, section 2.2.2) in PyTorch's ScheduleInterleaved1F1B
// order: rank r runs min((v-1)·n + 2(p-1-r), m·v) warm-up forwards (n the round size: p when m
// is a multiple of p), then pairs (forward warm-up + i, backward i), then the remaining
// backwards. With m a multiple of p and m > p this is Megatron-LM's order; at m = p Megatron
// runs every forward first while PyTorch caps the warm-up and holds (v-1)p + 2(p-1-r) + 1 chunk
// activations (p = 8, v = 2: ranks 4-7 hold 15, 13, 11, 9 instead of 16). Equal stages, no
// communication, m a multiple of p: m(F+B) + (p-1)(F+B)/v.
void BuildInterleaved1F1B(Schedule& s) {
  const int p = s.num_ranks;
  const int m = s.num_microbatches;
  const int v = s.ChunksPerRank();
  const RoundOrder order(p, m, v);
  const int total = m * v;
  for (int r = 0; r < p; ++r) {
    const int warmup = WarmupOps(r, p, m, v, order.FirstRound(), /*factor=*/2);
    auto& list = s.actions[r];
    for (int k = 0; k < warmup; ++k) list.push_back(order.Forward(k, r));
    for (int k = 0; k < total - warmup; ++k) {
      list.push_back(order.Forward(warmup + k, r));
      list.push_back(order.Backward(k, r, OpKind::kBackward));
    }
    for (int k = total - warmup; k < total; ++k) {
      list.push_back(order.Backward(k, r, OpKind::kBackward));
    }
  }
}

// Interleaved zero bubble (PyTorch's ScheduleInterleavedZeroBubble, "the ZB1P schedule" of Qi et
// al. ICLR'24 with v chunks): the interleaved 1F1B skeleton with warm-up (v-1)·n + (p-1-r) and
// the backward split into I and W; rank r runs the weight gradient of its i-th input gradient
// right after its (i + r)-th one, and the r it still owes at the end.
void BuildInterleavedZB(Schedule& s) {
  const int p = s.num_ranks;
  const int m = s.num_microbatches;
  const int v = s.ChunksPerRank();
  const RoundOrder order(p, m, v);
  const int total = m * v;
  for (int r = 0; r < p; ++r) {
    const int warmup = WarmupOps(r, p, m, v, order.FirstRound(), /*factor=*/1);
    auto& list = s.actions[r];
    int weights = 0;
    auto backward = [&](int k) {
      list.push_back(order.Backward(k, r, OpKind::kBackwardInput));
      if (k >= r) list.push_back(order.Backward(weights++, r, OpKind::kBackwardWeight));
    };
    for (int k = 0; k < warmup; ++k) list.push_back(order.Forward(k, r));
    for (int k = 0; k < total - warmup; ++k) {
      list.push_back(order.Forward(warmup + k, r));
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
    while (weights < total) list.push_back(order.Backward(weights++, r, OpKind::kBackwardWeight));
  }
}

}  // namespace pipecast::internal
