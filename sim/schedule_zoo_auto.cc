// zb-auto: the zero-bubble schedule built from the profiled stage costs under a memory limit
// (Qi et al. ICLR'24, section 3, "automatic scheduling": ZB-1p with a limit of p activations,
// ZB-2p with 2p). The order is the authors' heuristic, sail-sg/zero-bubble-pipeline-parallelism
// megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py (commit 39f2c186), Graph.
// manual_order and initial_solution, rewritten here:
//
//   - a warm-up: every stage runs F0; then, from the last stage up, each stage adds forwards
//     while they fit in memory and end before the first input gradient comes back (or, in the
//     variant that allows a bubble before the first I, while they start before it), no more
//     than the stage above it; then every stage runs I0;
//   - rounds i = 1..m-1: each stage that still has forwards runs one more (a stage does not run
//     ahead of the one below it; with `prioritize_b` a stage two forwards ahead of the next
//     skips its forward when that would delay the next stage's I), freeing memory with W ops
//     first when the forward would not fit, and filling the wait for its input with pending W
//     ops; then, from the last stage up, every stage runs I(i), filling its wait with W ops the
//     same way (`no_bubble_greedy`: one more W even when it overruns the wait, when the wait
//     would make this stage's bubble the largest);
//   - the W ops still pending close each stage's list.
//
// The eight combinations of the three switches are tried and the one with the shortest
// longest-stage span (first F start to last W end, the paper's "cost") is kept, first one on
// ties, as initial_solution does. The ILP refinement the paper runs after the heuristic is not
// ported: on the paper's rows the heuristic alone gives Table 5's ZB-1p and ZB-2p figures
// (docs/schedules.md).
//
// Memory rule (the paper's, section 3.1): F adds one activation of its stage (M_B), I frees
// the share W does not need (M_B - M_W), W frees the rest (M_W); ScheduleCosts::
// kept_after_input is M_W / M_B. A stage never holds more than the limit. Memory is counted in
// fixed point (kMemUnit per activation) so that comparisons are exact.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "sim/internal/schedule_builders.h"

namespace pipecast::internal {
namespace {

// Fixed-point units of one micro-batch's activations: fine enough that a kept share of 0.37
// loses nothing that matters, coarse enough that m x p of them fit an int64 with room.
constexpr int64_t kMemUnit = int64_t{1} << 20;

enum Category { kF = 0, kI = 1, kW = 2 };

class ZbAutoBuilder {
 public:
  ZbAutoBuilder(int p, int m, const ScheduleCosts& costs, int64_t max_mem)
      : n_(p), m_(m), comm_(costs.comm_ns), max_mem_(max_mem) {
    cost_.resize(n_);
    mem_.resize(n_);
    for (int j = 0; j < n_; ++j) {
      cost_[j] = {costs.forward_ns[j], costs.input_grad_ns[j], costs.weight_grad_ns[j]};
      const double kept = std::clamp(costs.kept_after_input[j], 0.0, 1.0);
      const int64_t w = std::llround(kept * static_cast<double>(kMemUnit));
      mem_[j] = {kMemUnit, w - kMemUnit, -w};
    }
  }

  struct Result {
    std::vector<std::vector<Action>> order;  // per stage
    TimeNs span = 0;                         // the longest stage's first F start to last W end
    int64_t peak_mem = 0;                    // the largest stage's peak, in kMemUnit
  };

  Result Run(bool allow_bubble_before_first_b, bool prioritize_b, bool no_bubble_greedy) {
    Reset();
    WarmUp(allow_bubble_before_first_b);
    for (int i = 1; i < m_; ++i) {
      Forwards(prioritize_b, no_bubble_greedy);
      Backwards(i, no_bubble_greedy);
    }
    for (int j = 0; j < n_; ++j) {
      while (count_[j][kW] < m_) Put(j, kW);
    }
    Result r{std::move(order_), 0, 0};
    for (int j = 0; j < n_; ++j) {
      r.span = std::max(r.span, End(kW, j, m_ - 1) - End(kF, j, 0) + cost_[j][kF]);
      r.peak_mem = std::max(r.peak_mem, peak_[j]);
    }
    return r;
  }

 private:
  TimeNs& End(int cat, int stage, int mb) {
    return end_[(static_cast<size_t>(cat) * n_ + stage) * m_ + mb];
  }
  int Next(int j, int cat) const { return count_[j][cat]; }
  bool HasPendingW(int j) const { return count_[j][kW] < count_[j][kI]; }
  TimeNs MaxBubble() const { return *std::max_element(bubble_.begin(), bubble_.end()); }

  void Reset() {
    count_.assign(n_, {0, 0, 0});
    busy_until_.assign(n_, 0);
    used_.assign(n_, 0);
    peak_.assign(n_, 0);
    bubble_.assign(n_, 0);
    end_.assign(static_cast<size_t>(3) * n_ * m_, 0);
    order_.assign(n_, {});
  }

  // zb.py's put(): the op ends when its stage is free and its input has arrived.
  void Put(int j, int cat) {
    const int mb = count_[j][cat];
    const TimeNs no_bubble = busy_until_[j] + cost_[j][cat];
    TimeNs t = no_bubble;
    if (cat == kF && j > 0) t = std::max(t, End(kF, j - 1, mb) + comm_ + cost_[j][cat]);
    if (cat == kI && j < n_ - 1) t = std::max(t, End(kI, j + 1, mb) + comm_ + cost_[j][cat]);
    if (count_[j][kF] > 0) bubble_[j] += t - no_bubble;
    busy_until_[j] = t;
    End(cat, j, mb) = t;
    used_[j] += mem_[j][cat];
    peak_[j] = std::max(peak_[j], used_[j]);
    static constexpr std::array<OpKind, 3> kKinds = {OpKind::kForward, OpKind::kBackwardInput,
                                                     OpKind::kBackwardWeight};
    order_[j].push_back(Action{j, kKinds[cat], mb});
    ++count_[j][cat];
  }

  void WarmUp(bool allow_bubble_before_first_b) {
    for (int j = 0; j < n_; ++j) Put(j, kF);
    std::vector<int> extra(n_, 0);
    TimeNs last_t = 0;  // when I0 of the stage below ends
    for (int j = n_ - 1; j >= 0; --j) {
      if (j == n_ - 1) {
        last_t = End(kF, j, 0) + cost_[j][kI];
        continue;
      }
      int64_t mem = used_[j];
      TimeNs t = busy_until_[j];
      while (Next(j, kF) + extra[j] < m_ && mem + mem_[j][kF] <= max_mem_) {
        if (allow_bubble_before_first_b ? t + cost_[j][kF] > last_t + comm_ : t >= last_t + comm_) {
          break;
        }
        mem += mem_[j][kF];
        t += cost_[j][kF];
        ++extra[j];
      }
      last_t = std::max(t, last_t + comm_) + cost_[j][kI];
    }
    for (int j = 1; j < n_; ++j) {
      while (extra[j] > 0 && extra[j] >= extra[j - 1] && Next(j, kF) + extra[j] < m_) --extra[j];
    }
    for (int j = 0; j < n_; ++j) {
      for (int k = 0; k < extra[j]; ++k) Put(j, kF);
    }
    for (int j = n_ - 1; j >= 0; --j) Put(j, kI);
  }

  // Runs pending W ops while the next one ends before `ready` (the op's input arrival), then
  // one more when the stage would otherwise idle and (with `greedy`, or always when the wait
  // would make this stage's bubble the largest) zb.py's rule says so.
  void FillWait(int j, TimeNs ready, bool greedy) {
    while (HasPendingW(j) && busy_until_[j] + cost_[j][kW] <= ready) Put(j, kW);
    if (HasPendingW(j) && busy_until_[j] < ready) {
      if (ready - busy_until_[j] > MaxBubble() - bubble_[j] || greedy) Put(j, kW);
    }
  }

  // Frees memory with W ops until an op of `cat` fits. Never fails for a limit >= 1 activation:
  // a stage holds at most (forwards - input gradients) activations once its W ops have run.
  void MakeRoom(int j, int cat) {
    while (used_[j] + mem_[j][cat] > max_mem_ && HasPendingW(j)) Put(j, kW);
  }

  bool SkipForPriority(int j) const {
    const TimeNs next_ready = busy_until_[j + 1] + cost_[j + 1][kF] + cost_[j + 1][kI] + comm_;
    if (busy_until_[j] >= next_ready) return true;
    TimeNs w_cost = 0;
    int64_t mem = used_[j] + mem_[j][kF];
    for (int w = count_[j][kW]; mem > max_mem_ && w < count_[j][kI]; ++w) {
      w_cost += cost_[j][kW];
      mem += mem_[j][kW];
    }
    if (busy_until_[j] + cost_[j][kF] + w_cost <= next_ready) return false;
    return next_ready - busy_until_[j] <= MaxBubble() - bubble_[j];
  }

  void Forwards(bool prioritize_b, bool no_bubble_greedy) {
    std::vector<int> run(n_, 0);
    for (int j = 0; j < n_; ++j) {
      if (Next(j, kF) >= m_) continue;
      if (prioritize_b && j + 1 < n_ && Next(j, kF) >= Next(j + 1, kF) + 2 && SkipForPriority(j)) {
        continue;
      }
      run[j] = 1;
    }
    for (int j = n_ - 2; j >= 0; --j) run[j] = std::min(run[j], run[j + 1]);
    for (int j = 0; j < n_; ++j) {
      if (run[j] == 0) continue;
      MakeRoom(j, kF);
      if (j > 0) FillWait(j, End(kF, j - 1, Next(j, kF)) + comm_, no_bubble_greedy);
      Put(j, kF);
    }
  }

  void Backwards(int i, bool no_bubble_greedy) {
    for (int j = n_ - 1; j >= 0; --j) {
      MakeRoom(j, kI);
      if (j + 1 < n_) FillWait(j, End(kI, j + 1, i) + comm_, no_bubble_greedy);
      if (j == 0 && Next(j, kF) == m_) {
        while (HasPendingW(j)) Put(j, kW);
      }
      Put(j, kI);
    }
  }

  const int n_, m_;
  const TimeNs comm_;
  const int64_t max_mem_;
  std::vector<std::array<TimeNs, 3>> cost_;
  std::vector<std::array<int64_t, 3>> mem_;
  std::vector<std::array<int, 3>> count_;
  std::vector<TimeNs> busy_until_, bubble_, end_;
  std::vector<int64_t> used_, peak_;
  std::vector<std::vector<Action>> order_;
};

}  // namespace

Status BuildZBAutoFromCosts(Schedule& s, const ScheduleCosts& costs) {
  const int64_t max_mem =
      static_cast<int64_t>(std::floor(costs.memory_limit * static_cast<double>(kMemUnit) + 1e-9));
  ZbAutoBuilder builder(s.num_ranks, s.num_microbatches, costs, max_mem);
  ZbAutoBuilder::Result best;
  bool have = false;
  for (bool allow_bubble : {true, false}) {
    for (bool prioritize_b : {true, false}) {
      for (bool greedy : {true, false}) {
        ZbAutoBuilder::Result r = builder.Run(allow_bubble, prioritize_b, greedy);
        if (!have || r.span < best.span) {
          best = std::move(r);
          have = true;
        }
      }
    }
  }
  if (best.peak_mem > max_mem) {
    return Status::Internal(fmt::format(
        "zb-auto's order holds {:.2f} activations on a stage, over --memory-limit {:.2f}",
        static_cast<double>(best.peak_mem) / kMemUnit, costs.memory_limit));
  }
  s.actions = std::move(best.order);
  return Status::Ok();
}

}  // namespace pipecast::internal
