// The engine's driver (sim/internal/engine.h): pass 1, pass 2, the records
// and the per-rank totals that the metrics step reads.
#include "sim/internal/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
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
  // Ties left open, or records to order: number the events, or where no tie
  // is open sort the records alone (engine_order.cc).
  records_sorted_ = false;
  if (ties_ > 0) {
    RankEvents();
  } else if (options_.record_timeline && !(walk_budget_ > 0 && !ZeroTimeHop() && SortRecords())) {
    RankEvents();
  }
  for (int r = 0; r < p; ++r) SweepMemory(r);
  if (options_.record_timeline) RecordTimeline();
  Totals();
  return Status::Ok();
}

// Whether a transfer between two ranks takes no time (the ideal cluster):
// then a whole wavefront of the pipeline shares an instant, SortRecords()'
// walks would run out of budget at the first one, and the replay is the way
// to the records' order. Only the cost depends on it, never the order.
bool Engine::ZeroTimeHop() const {
  for (const HopCost& h : hops_) {
    if (h.link >= 0 && h.serial == 0 && h.latency == 0) return true;
  }
  return false;
}

// The op and transfer records in the order the old engine appended them:
// ops as they started (by the event that started them, which the ranking
// step lists as it goes), transfers as their producers ended (an overlapped
// pair's forward half sends when the pair ends, before the pair's own
// send), a walk over the processing order.
void Engine::RecordTimeline() {
  const int p = sched_.num_ranks;
  const size_t places = static_cast<size_t>(p) + num_events_;
  LargeArray<int32_t> op_rank;
  op_rank.Reset(static_cast<size_t>(std::max(num_ops_, 1)));
  for (int r = 0; r < p; ++r) {
    std::fill(op_rank.data() + op_first_[r], op_rank.data() + op_first_[r + 1], r);
  }
  // Records are written in place (sized up front) rather than pushed back.
  out_->ops.resize(num_ops_);
  OpRecord* op = out_->ops.data();
  for (const int32_t id : op_order_) {
    const int r = op_rank[id];
    const int32_t parent = ev_[id].parent;
    const TimeNs start = parent < 0 ? 0 : ev_[parent].time;
    *op++ = OpRecord{r, sched_.actions[r][id - op_first_[r]], start, ev_[id].time};
  }
  size_t transfers = 0;
  for (const LinkState& link : links_) transfers += link.count;
  out_->transfers.resize(transfers);
  TransferRecord* transfer = out_->transfers.data();
  std::vector<int32_t> sent(links_.size(), 0);
  // The transfer of rank r's op i, sent when `event` was processed.
  auto send = [&](int r, int32_t i, int32_t event) {
    const Action& a = sched_.actions[r][i];
    const TimeNs ready = ev_[event].time;
    const bool gradient = a.kind != OpKind::kForward;
    const int dst_stage = gradient ? a.stage - 1 : a.stage + 1;
    const int hop = gradient ? dst_stage : a.stage;
    const HopCost& hc = Hop(hop, gradient);
    const int li = hc.link;
    const LinkState& link = links_[li];
    const TimeNs arrive = ev_[link.first + sent[li]++].time;
    *transfer++ = TransferRecord{r,
                                 link.dst,
                                 a.stage,
                                 dst_stage,
                                 a.microbatch,
                                 gradient,
                                 costs_[hop].output_bytes,
                                 ready,
                                 arrive - hc.latency - hc.serial,
                                 arrive};
  };
  if (!records_sorted_) {  // the ops that send, in the order of their ends
    producers_.clear();
    for (size_t k = p; k < places; ++k) {
      const int32_t e = by_rank_[k];
      if (e < num_ops_) producers_.push_back(e);  // not an arrival
    }
  }
  for (const int32_t e : producers_) {
    const int r = op_rank[e];
    const int32_t i = e - op_first_[r];
    ForEachSendAtEnd(sched_.actions[r], i, [&](int32_t j) { send(r, j, e); });
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
