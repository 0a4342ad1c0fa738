// The engine's driver (sim/internal/engine.h): pass 1, pass 2, the records
// and the per-rank totals that the metrics step reads.
#include "sim/internal/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

namespace pipecast::internal {

namespace {

// Room for n records in *v, its fresh memory marked for huge pages before
// anything touches it: a timeline's records fault in 2 MiB at a time.
template <typename T>
void ReserveHuge(std::vector<T>* v, size_t n) {
  v->reserve(n);
  AdviseHugePages(v->data(), sizeof(T) * n);
}

}  // namespace

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
  // Ties left open: number the events (engine_order.cc). The records need no
  // order of events: they are taken rank by rank (RecordTimeline()).
  if (ties_ > 0) RankEvents();
  all_decided_ = true;
  if (options_.record_timeline) SizeMemoryTimelines();
  for (int r = 0; r < p; ++r) SweepMemory(r);
  if (options_.record_timeline) RecordTimeline();
  Totals();
  return Status::Ok();
}

// The op and transfer records rank by rank (SimResult::ops): each rank's ops
// in its list's order, which is the order they run in, and the transfers it
// sends in the order it sends them (an overlapped pair's forward half sends
// when the pair ends, before the pair's own send). Both are walks over the
// event table in id order, so the records need no sort: a link's transfers
// are its one sender's, in that order, which is the order of its arrival
// events.
void Engine::RecordTimeline() {
  const int p = sched_.num_ranks;
  // Records are written in place (sized up front) rather than pushed back,
  // into memory marked for huge pages before it is first touched.
  ReserveHuge(&out_->ops, num_ops_);
  out_->ops.resize(num_ops_);
  OpRecord* op = out_->ops.data();
  const Event* ev = ev_.data();
  // Op ids are rank by rank in list order: one pass, reading each op's end
  // and its cause's time (its start).
  for (int r = 0; r < p; ++r) {
    const Action* list = sched_.actions[r].data();
    for (int32_t id = op_first_[r]; id < op_first_[r + 1]; ++id) {
      const int32_t parent = ev[id].parent;
      const TimeNs start = parent < 0 ? 0 : ev[parent].time;
      *op++ = OpRecord{r, *list++, start, ev[id].time};
    }
  }
  size_t transfers = 0;
  for (const LinkState& link : links_) transfers += link.count;
  ReserveHuge(&out_->transfers, transfers);
  out_->transfers.resize(transfers);
  TransferRecord* transfer = out_->transfers.data();
  std::vector<int32_t> sent(links_.size(), 0);
  for (int r = 0; r < p; ++r) {
    const std::vector<Action>& list = sched_.actions[r];
    for (int32_t i = 0; i < static_cast<int32_t>(list.size()); ++i) {
      const TimeNs ready = ev[op_first_[r] + i].time;
      ForEachSendAtEnd(list, i, [&](int32_t j) {
        const Action& a = list[j];
        const bool gradient = a.kind != OpKind::kForward;
        const int dst_stage = gradient ? a.stage - 1 : a.stage + 1;
        const int hop = gradient ? dst_stage : a.stage;
        const HopCost& hc = Hop(hop, gradient);
        const int li = hc.link;
        const LinkState& link = links_[li];
        const TimeNs arrive = ev[link.first + sent[li]++].time;
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
      });
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
