// DualPipeV: deepseek-ai/DualPipe's dualpipe/dualpipev.py (commit 3da1bbe), the "cut-in-half"
// DualPipe of Sea AI Lab that PyTorch ships as ScheduleDualPipeV. V placement: rank r holds
// stages r (phase 0) and 2p-1-r (phase 1); m >= 2p micro-batches. The order follows `step()`'s
// eight steps with its loop counts; a zero-bubble backward (`enable_zb`) is an input gradient I
// whose weight gradient W waits in WeightGradStore's FIFO queue until a `_weight_chunk`, and
// `_forward_backward_chunk(phase0, phase1)` is an overlapped pair (Action::overlapped): the next
// forward of phase0 with the next whole backward of phase1. scripts/dualpipe_order.py is a
// line-by-line port of the same `step()`; schedule_zoo_dualpipe_test.cc holds this generator to
// its output.
//
// DualPipe: deepseek-ai/DualPipe's dualpipe/dualpipe.py (commit 3da1bbe), the bidirectional
// schedule of the DeepSeek-V3 report. p even, m even and >= 2p: micro-batches [0, m/2) enter at
// rank 0 (direction a, virtual stages 0..p-1) and [m/2, m) at rank p-1 (direction b, virtual
// stages p..2p-1, stage p+k being model chunk k on rank p-1-k). Its step() is DualPipeV's on
// half the ranks and half the micro-batches: rank r plays DualPipeV rank min(r, p-1-r) of p/2,
// its phase 0 being the direction that enters at its own end (`phase ^ is_in_second_half`), and
// the two middle ranks do not overlap their first pair.
#include <algorithm>
#include <deque>
#include <vector>

#include "sim/internal/schedule_builders.h"

namespace pipecast::internal {
namespace {

// One rank's ops as DualPipeV's step() issues them, with its chunk counters.
class DualPipeVRank {
 public:
  DualPipeVRank(int p, int rank, std::vector<Action>& list)
      : stage_{rank, 2 * p - 1 - rank}, list_(list) {}
  // Phase ph runs virtual stage stage[ph], its micro-batches numbered from first_mb[ph].
  DualPipeVRank(const int stage[2], const int first_mb[2], std::vector<Action>& list)
      : stage_{stage[0], stage[1]}, first_mb_{first_mb[0], first_mb[1]}, list_(list) {}

  void Forward(int phase) { list_.push_back(NextForward(phase)); }
  void Backward(int phase, bool zero_bubble) { list_.push_back(NextBackward(phase, zero_bubble)); }
  // _forward_backward_chunk: overlapped when, as here, the modules provide it.
  void ForwardBackward(int phase0, int phase1) {
    Action f = NextForward(phase0);
    Action b = NextBackward(phase1, false);
    f.overlapped = true;
    b.overlapped = true;
    list_.push_back(f);
    list_.push_back(b);
  }
  // _weight_chunk: WeightGradStore.pop(), first in first out.
  void Weight() {
    list_.push_back(weights_.front());
    weights_.pop_front();
  }

 private:
  Action NextForward(int phase) {
    return Action{stage_[phase], OpKind::kForward, first_mb_[phase] + forward_[phase]++};
  }
  Action NextBackward(int phase, bool zero_bubble) {
    const int mb = first_mb_[phase] + backward_[phase]++;
    if (!zero_bubble) return Action{stage_[phase], OpKind::kBackward, mb};
    weights_.push_back(Action{stage_[phase], OpKind::kBackwardWeight, mb});
    return Action{stage_[phase], OpKind::kBackwardInput, mb};
  }

  int stage_[2];
  int first_mb_[2] = {0, 0};
  int forward_[2] = {0, 0};   // current_f_chunk_id
  int backward_[2] = {0, 0};  // current_b_chunk_id
  std::deque<Action> weights_;
  std::vector<Action>& list_;
};

// DualPipeV's step() for rank `rank` of `p` with `m` micro-batches: the eight steps with its
// loop counts. The last rank does not overlap its first pair of the main step.
void DualPipeSteps(int p, int m, int rank, DualPipeVRank& r) {
  const bool last_rank = rank == p - 1;
  // Step 1: nF0
  for (int i = 0; i < (p - rank - 1) * 2; ++i) r.Forward(0);
  // Step 2: nF0F1
  for (int i = 0; i < rank + 1; ++i) {
    r.Forward(0);
    r.Forward(1);
  }
  // Step 3: nB1W1F1 (zero bubble)
  for (int i = 0; i < p - rank - 1; ++i) {
    r.Backward(1, true);
    r.Weight();
    r.Forward(1);
  }
  // Step 4 (main step): nF0B1F1B0. The last rank does not overlap its first pair, "to further
  // reduce bubble size".
  for (int i = 0; i < m - 2 * p + rank + 1; ++i) {
    if (i == 0 && last_rank) {
      r.Forward(0);
      r.Backward(1, false);
    } else {
      r.ForwardBackward(0, 1);
    }
    r.ForwardBackward(1, 0);
  }
  // Step 5: nB1F1B0
  for (int i = 0; i < p - rank - 1; ++i) {
    r.Backward(1, false);
    r.ForwardBackward(1, 0);
  }
  // Step 6: nB1B0, the second half with zero bubble
  const int step6 = rank + 1;
  bool zero_bubble = false;
  for (int i = 0; i < step6; ++i) {
    if (i == step6 / 2 && rank % 2 == 1) zero_bubble = true;
    r.Backward(1, zero_bubble);
    if (i == step6 / 2 && rank % 2 == 0) zero_bubble = true;
    r.Backward(0, zero_bubble);
  }
  // Step 7: nWB0 (zero bubble)
  for (int i = 0; i < p - rank - 1; ++i) {
    r.Weight();
    r.Backward(0, true);
  }
  // Step 8: nW
  for (int i = 0; i < rank + 1; ++i) r.Weight();
}

}  // namespace

void BuildDualPipeV(Schedule& s) {
  for (int rank = 0; rank < s.num_ranks; ++rank) {
    DualPipeVRank r(s.num_ranks, rank, s.actions[rank]);
    DualPipeSteps(s.num_ranks, s.num_microbatches, rank, r);
  }
}

void BuildDualPipe(Schedule& s) {
  const int p = s.num_ranks;
  const int half = s.num_microbatches / 2;
  for (int rank = 0; rank < p; ++rank) {
    // Module 0 is direction a's stage `rank`, module 1 direction b's stage p-1-rank (virtual
    // 2p-1-rank); phase 0 is the module whose micro-batches enter at this rank's end.
    const bool second_half = rank >= p / 2;
    const int module_stage[2] = {rank, 2 * p - 1 - rank};
    const int module_mb[2] = {0, half};
    const int stage[2] = {module_stage[second_half], module_stage[!second_half]};
    const int first_mb[2] = {module_mb[second_half], module_mb[!second_half]};
    DualPipeVRank r(stage, first_mb, s.actions[rank]);
    DualPipeSteps(p / 2, half, std::min(rank, p - 1 - rank), r);
  }
}

}  // namespace pipecast::internal
