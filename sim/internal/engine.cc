// The engine's driver (sim/internal/engine.h): pass 1, pass 2, the records
// and the per-rank totals that the metrics step reads.
#include "sim/internal/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace pipecast::internal {

Status Engine::Run(EngineTotals* totals) {
  totals_ = totals;
  // Events are numbered with 32-bit ids: ops, plus at most one activation
  // and one gradient transfer per (stage boundary, micro-batch).
  const int64_t events =
      sched_.NumActions() + 2 * int64_t{sched_.num_stages - 1} * sched_.num_microbatches;
  if (events >= std::numeric_limits<int32_t>::max()) {
    return Status::InvalidArgument(fmt::format(
        "schedule '{}' has {} ops and transfers: the simulator handles fewer than 2^31; use "
        "fewer micro-batches or stages",
        sched_.name, events));
  }
  Prepare();
  const int p = sched_.num_ranks;
  worklist_.reserve(p);
  for (int r = p - 1; r >= 0; --r) worklist_.push_back(r);
  while (!worklist_.empty()) {
    const int r = worklist_.back();
    worklist_.pop_back();
    Advance(r);
  }
  for (int r = 0; r < p; ++r) {
    if (ranks_[r].next < static_cast<int32_t>(sched_.actions[r].size())) return Deadlock();
  }
  for (int r = 0; r < p; ++r) SweepMemory(r);
  if (options_.record_timeline) RecordTimeline();
  Totals();
  return Status::Ok();
}

// The op and transfer records in the order the old engine appended them:
// ops as they started (ordered by the event that started them), transfers
// as their producers ended.
void Engine::RecordTimeline() {
  const int p = sched_.num_ranks;
  // Ops: merge the ranks' lists by the event that started each op.
  std::vector<int32_t> pos(p, 0);
  auto trigger = [&](int r) { return ev_[op_first_[r] + pos[r]].parent; };
  auto later = [&](int a, int b) { return Before(trigger(b), trigger(a)); };
  std::vector<int> heap;
  heap.reserve(p);
  for (int r = 0; r < p; ++r) {
    if (!sched_.actions[r].empty()) heap.push_back(r);
  }
  std::make_heap(heap.begin(), heap.end(), later);
  out_->ops.reserve(num_ops_);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const int r = heap.back();
    const int32_t id = op_first_[r] + pos[r];
    const int32_t parent = ev_[id].parent;
    const TimeNs start = parent < 0 ? 0 : ev_[parent].time;
    out_->ops.push_back(OpRecord{r, sched_.actions[r][pos[r]], start, ev_[id].time});
    if (++pos[r] < static_cast<int32_t>(sched_.actions[r].size())) {
      std::push_heap(heap.begin(), heap.end(), later);
    } else {
      heap.pop_back();
    }
  }
  // Transfers: merge the ranks' sending ops by the events that sent them: their end, or for an
  // overlapped pair's forward half the pair's end.
  auto sends = [&](int r, int32_t i) { return CostOf(sched_.actions[r][i]).send != 0; };
  auto send_event = [&](int r) {
    const Action& a = sched_.actions[r][pos[r]];
    return op_first_[r] + pos[r] + (a.overlapped && a.kind == OpKind::kForward ? 1 : 0);
  };
  auto skip = [&](int r) {
    const int32_t size = static_cast<int32_t>(sched_.actions[r].size());
    while (pos[r] < size && !sends(r, pos[r])) ++pos[r];
    return pos[r] < size;
  };
  auto end_later = [&](int a, int b) { return Before(send_event(b), send_event(a)); };
  std::fill(pos.begin(), pos.end(), 0);
  for (int r = 0; r < p; ++r) {
    if (skip(r)) heap.push_back(r);
  }
  std::make_heap(heap.begin(), heap.end(), end_later);
  std::vector<int32_t> sent(links_.size(), 0);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), end_later);
    const int r = heap.back();
    const Action& a = sched_.actions[r][pos[r]];
    const TimeNs ready = ev_[send_event(r)].time;
    const bool gradient = a.kind != OpKind::kForward;
    const int dst_stage = gradient ? a.stage - 1 : a.stage + 1;
    const int hop = gradient ? dst_stage : a.stage;
    const HopCost& hc = Hop(hop, gradient);
    const int li = hc.link;
    const LinkState& link = links_[li];
    const TimeNs arrive = ev_[link.first + sent[li]++].time;
    const TimeNs serial = hc.serial;
    const TimeNs latency = hc.latency;
    out_->transfers.push_back(TransferRecord{r, link.dst, a.stage, dst_stage, a.microbatch,
                                             gradient, costs_[hop].output_bytes, ready,
                                             arrive - latency - serial, arrive});
    ++pos[r];
    if (skip(r)) {
      std::push_heap(heap.begin(), heap.end(), end_later);
    } else {
      heap.pop_back();
    }
  }
}

// What the metrics step reads (sim/internal/simulate_steps.h).
void Engine::Totals() {
  for (int k = 0; k < sched_.num_ranks; ++k) {
    const RankState& st = ranks_[k];
    RankTotals& t = totals_->ranks[k];
    t.busy_ns = st.busy;
    // The first op's start: the time of the event that started it.
    const int32_t first_parent = ev_[op_first_[k]].parent;
    t.first_start_ns = first_parent < 0 ? 0 : ev_[first_parent].time;
    t.last_end_ns = st.prev_end;
  }
  if (sched_.iterations > 1) totals_->iteration_end_ns = std::move(iteration_end_);
}

Status RunDataflowEngine(const Cluster& cluster, const Schedule& schedule,
                         const std::vector<StageCost>& costs, const SimOptions& options,
                         SimResult* result, EngineTotals* totals) {
  Engine engine(cluster, schedule, costs, options, result);
  return engine.Run(totals);
}

}  // namespace pipecast::internal
