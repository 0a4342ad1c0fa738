// Generators of the built-in schedules: naive, GPipe, 1F1B, PipeDream, looped BFS, ZB-H1 and
// ZB-H2 (interleaved 1F1B and interleaved zero bubble: schedule_zoo_interleaved.cc; the V
// family: schedule_zoo_v.cc). MakeSchedule() (schedule.cc) checks the shape (CheckShape in
// schedule_traits.cc), sizes the Schedule and calls the kind's generator from its traits row to
// fill `actions`. Each generator cites its source and the closed form it reaches with equal
// stages and free communication (docs/schedules.md); schedule_zoo_test.cc checks each one in
// the simulator.
#include <algorithm>
#include <vector>

#include "sim/internal/schedule_builders.h"

namespace pipecast::internal {
namespace {

Action Op(int stage, OpKind kind, int microbatch) { return Action{stage, kind, microbatch}; }

// Appends one zero-bubble rank's ops (stage == rank, one chunk): `warmup` forwards, then for each
// micro-batch i its input gradient I(i), the weight gradient W(i - lag) once i >= lag, and the
// next forward; the `lag` weight gradients still owed at the end close the list. The rank holds
// warmup + lag activations at most (each from F start until its W ends).
void AppendZeroBubbleRank(int rank, int m, int warmup, int lag, std::vector<Action>& list) {
  for (int i = 0; i < warmup; ++i) list.push_back(Op(rank, OpKind::kForward, i));
  int next_w = 0;
  for (int i = 0; i < m; ++i) {
    list.push_back(Op(rank, OpKind::kBackwardInput, i));
    if (i >= lag) list.push_back(Op(rank, OpKind::kBackwardWeight, next_w++));
    if (warmup + i < m) list.push_back(Op(rank, OpKind::kForward, warmup + i));
  }
  while (next_w < m) list.push_back(Op(rank, OpKind::kBackwardWeight, next_w++));
}

}  // namespace

// Naive model parallelism: one micro-batch at a time through the whole
// pipeline and back (GPipe paper fig. 2(b); PipeDream fig. 3). Each rank
// alternates F(i), B(i); the data dependencies keep a single micro-batch in
// flight, so an iteration takes m·p·(F+B).
void BuildNaive(Schedule& s) {
  for (int r = 0; r < s.num_ranks; ++r) {
    for (int i = 0; i < s.num_microbatches; ++i) {
      s.actions[r].push_back(Op(r, OpKind::kForward, i));
      s.actions[r].push_back(Op(r, OpKind::kBackward, i));
    }
  }
}

// GPipe (Huang et al. 2019, section 2.3): all forwards, then all backwards,
// then a flush. Backwards in micro-batch order, as PyTorch's ScheduleGPipe.
void BuildGPipe(Schedule& s) {
  for (int r = 0; r < s.num_ranks; ++r) {
    for (int i = 0; i < s.num_microbatches; ++i) s.actions[r].push_back(Op(r, OpKind::kForward, i));
    for (int i = 0; i < s.num_microbatches; ++i)
      s.actions[r].push_back(Op(r, OpKind::kBackward, i));
  }
}

// 1F1B with flush (PipeDream-Flush; Narayanan et al. SC'21 section 2.2.1).
// Megatron-LM's `forward_backward_pipelining_without_interleaving`: rank r
// runs min(p-r-1, m) warm-up forwards, then alternates one forward and one
// backward, then drains the remaining backwards. Rank r holds at most
// min(p-r, m) micro-batches' activations.
void Build1F1B(Schedule& s) {
  const int p = s.num_ranks;
  const int m = s.num_microbatches;
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(p - r - 1, m);
    const int steady = m - warmup;
    auto& list = s.actions[r];
    for (int i = 0; i < warmup; ++i) list.push_back(Op(r, OpKind::kForward, i));
    for (int i = 0; i < steady; ++i) {
      list.push_back(Op(r, OpKind::kForward, warmup + i));
      list.push_back(Op(r, OpKind::kBackward, i));
    }
    for (int i = steady; i < m; ++i) list.push_back(Op(r, OpKind::kBackward, i));
  }
}

// PipeDream asynchronous 1F1B with weight stashing (Narayanan et al.,
// SOSP'19): the 1F1B order without a flush between iterations. Simulated as
// kPipeDreamIterations iterations back to back, micro-batches numbered
// across them, so the steady state shows; each rank stashes one weight
// version per in-flight micro-batch (p - s on stage s).
void BuildPipeDream(Schedule& s) {
  s.iterations = kPipeDreamIterations;
  s.flush = false;
  const int per_iteration = s.num_microbatches;
  s.num_microbatches = per_iteration * s.iterations;
  Build1F1B(s);
}

// Looped breadth-first schedule (Lamy-Poirier, "Breadth-First Pipeline Parallelism", 2022;
// PyTorch pipelining's ScheduleLoopedBFS): each rank runs every micro-batch's forward of its
// chunk 0, then of chunk 1, ..., then the backwards chunk by chunk in reverse, micro-batches in
// order. With m >= p a rank's next chunk is always ready when it finishes the previous one, so
// equal stages without communication take m(F+B) + (p-1)(F+B)/v; every rank holds all m·v
// chunk activations (m·A) before its first backward.
void BuildLoopedBFS(Schedule& s) {
  const int p = s.num_ranks;
  const int m = s.num_microbatches;
  const int v = s.ChunksPerRank();
  for (int r = 0; r < p; ++r) {
    auto& list = s.actions[r];
    for (int c = 0; c < v; ++c) {
      for (int i = 0; i < m; ++i) list.push_back(Op(c * p + r, OpKind::kForward, i));
    }
    for (int c = v - 1; c >= 0; --c) {
      for (int i = 0; i < m; ++i) list.push_back(Op(c * p + r, OpKind::kBackward, i));
    }
  }
}

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24, section 3.1, figure 3 top;
// reference code sail-sg/zero-bubble-pipeline-parallelism). 1F1B's skeleton with the backward
// split into I (input gradient, on the critical path) and W (weight gradient, deferrable):
// stage s runs p-s warm-up forwards, then I, W, F per micro-batch, its W ops lagging s
// micro-batches behind its I ops, so the s weight gradients it owes fill the cool-down where
// 1F1B idles. PyTorch pipelining's zero-bubble 1F1B (`_get_1f1b_rank_ops`) delays rank r's W
// ops by r the same way. Equal stages, no communication, m >= p and W <= F (B the time of I):
// m(F+B+W) + (p-1)(F+B-W); with W > F the cool-down's W ops run past it. Stage s holds p-s
// activations until their I, and p in all until their W.
void BuildZBH1(Schedule& s) {
  for (int r = 0; r < s.num_ranks; ++r) {
    AppendZeroBubbleRank(r, s.num_microbatches,
                         /*warmup=*/std::min(s.num_ranks - r, s.num_microbatches), /*lag=*/r,
                         s.actions[r]);
  }
}

// ZB-H2 (Qi et al., ICLR'24, section 3.1, figure 3 bottom): more warm-up forwards fill the
// bubble before the first I, and W ops are held back to the tail, turning 1F1B's trapezoid into
// a parallelogram. Stage s runs 2(p-s)-1 warm-up forwards (7/5/3/1 for p = 4), then I(i),
// W(i - 2s), F(i + warm-up) per micro-batch; its last 2s+1 W ops close the list, mirroring the
// warm-up of stage p-1-s. openxla/shardy's JAX MPMD schedules spell out the same constraints
// (`zero_bubble_h2_schedule_predicate`): I(i) < F(i + warm-up), F(i + warm-up - 1) < I(i),
// I(i + 2s) < W(i) < I(i + 2s + 1); W before F inside that gap keeps the peak at 2p-1
// activations instead of 2p. Unlike a (B, W, F) loop with W right after its own B, the lag of 2s
// leaves no tail gaps: with F = B = W and m >= 2p-1 every stage runs from its first F to its
// last W without idling (span 3m); in general the longest per-stage span, stage 0's, is
// m(F+B+W) + (p-1)(F+B-2W) when W <= F. With p <= m < 2p-1 the warm-up is capped at m and some
// bubble remains. Stages hold up to 2p-1 activations (stage 0 at the end of its warm-up, stage
// p-1 before its tail of W ops).
// The paper's gain needs the optimizer step not to synchronise the stages (it replaces the
// synchronisation with post-validation), else each iteration pays the parallelogram's (p-1)F
// fill again. The simulator's optimizer step does not synchronise stages; a single simulated
// iteration still contains that fill: with F = B = W its iteration_ns is (3m + p - 1)·F.
void BuildZBH2(Schedule& s) {
  const int p = s.num_ranks;
  const int m = s.num_microbatches;
  for (int r = 0; r < p; ++r) {
    AppendZeroBubbleRank(r, m, /*warmup=*/std::min(2 * (p - r) - 1, m), /*lag=*/2 * r,
                         s.actions[r]);
  }
}

}  // namespace pipecast::internal
