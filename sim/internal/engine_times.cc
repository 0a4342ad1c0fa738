// Pass 1 of the engine (sim/internal/engine.h): every op's end and every
// transfer's arrival, with the event that caused each.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <string>

#include "sim/internal/engine.h"
#include "sim/schedule_graph.h"

namespace pipecast::internal {

void Engine::Prepare() {
  NumberOps();
  const int64_t events = NumberLinks();
  ev_.Reset(static_cast<size_t>(events));
  alternatives_.clear();
  ties_ = 0;
  ranked_ = false;
  all_decided_ = false;
  walk_budget_ = kWalkStepsPerEvent * events;
  partner_.Reset(0);
  KeepPairDurations();
  TabulateOpCosts();
  const int n = sched_.num_stages;
  const int m = sched_.num_microbatches;
  cells_.Reset(static_cast<size_t>(n) * m);
  std::fill_n(cells_.data(), static_cast<size_t>(n) * m, Cell{});
  ranks_.assign(sched_.num_ranks, RankState{});
  for (int r = 0; r < sched_.num_ranks; ++r) ranks_[r].prev = -1 - r;
  iteration_end_.assign(sched_.iterations, 0);
  mb_per_iteration_ = m / sched_.iterations;
}

// Op ends are events 0 .. num_ops_ - 1, each rank's in list order from op_first_[rank].
void Engine::NumberOps() {
  const int p = sched_.num_ranks;
  op_first_.resize(p + 1);
  int64_t ops = 0;
  for (int r = 0; r < p; ++r) {
    op_first_[r] = static_cast<int32_t>(ops);
    ops += static_cast<int64_t>(sched_.actions[r].size());
  }
  op_first_[p] = static_cast<int32_t>(ops);
  num_ops_ = static_cast<int32_t>(ops);
}

// The links between ranks, numbered as first used from stage 0 up (the numbering is internal),
// each stage boundary's hops with their transfer times, and each link's block of arrival events
// after the op ends. Returns the number of events.
int64_t Engine::NumberLinks() {
  const int p = sched_.num_ranks;
  const int n = sched_.num_stages;
  std::map<std::pair<int, int>, int> index;
  auto link = [&](int src, int dst) {
    if (src == dst) return -1;
    auto [it, fresh] = index.try_emplace({src, dst}, static_cast<int>(links_.size()));
    if (fresh) links_.push_back(LinkState{src, dst, 0, 0, 0, -1});
    return it->second;
  };
  hops_.assign(2 * static_cast<size_t>(n), HopCost{});
  // Every stage boundary carries one activation and one gradient per
  // micro-batch (the schedule is complete), so each link's share of the
  // transfer ids is known up front.
  std::vector<int64_t> per_link;
  std::vector<std::set<int>> hops;  // per link: the boundaries it carries
  for (int s = 0; s + 1 < n; ++s) {
    if (sched_.IsLastStage(s)) continue;  // the end of a path (bidirectional): no boundary
    const int a = sched_.stage_rank[s], b = sched_.stage_rank[s + 1];
    HopCost& fwd = hops_[2 * s];
    HopCost& bwd = hops_[2 * s + 1];
    fwd.link = link(a, b);
    bwd.link = link(b, a);
    if (a == b) continue;
    per_link.resize(links_.size(), 0);
    per_link[fwd.link] += sched_.MicrobatchesThrough(s);
    per_link[bwd.link] += sched_.MicrobatchesThrough(s);
    hops.resize(links_.size());
    hops[fwd.link].insert(s);
    hops[bwd.link].insert(s);
    // Both directions carry s's output shape: activations out, gradients back.
    fwd.serial = TransferNs(costs_[s].output_bytes, cluster_.LinkBetween(a, b).bandwidth_gbps);
    fwd.latency = cluster_.LinkBetween(a, b).LatencyNs();
    bwd.serial = TransferNs(costs_[s].output_bytes, cluster_.LinkBetween(b, a).bandwidth_gbps);
    bwd.latency = cluster_.LinkBetween(b, a).LatencyNs();
  }
  int64_t next_id = num_ops_;
  rank_links_.assign(p, {});
  for (size_t l = 0; l < links_.size(); ++l) {
    links_[l].first = static_cast<int32_t>(next_id);
    next_id += per_link[l];
    if (hops[l].size() == 1) links_[l].bytes = costs_[*hops[l].begin()].output_bytes;
    rank_links_[links_[l].src].push_back(static_cast<int>(l));
    rank_links_[links_[l].dst].push_back(static_cast<int>(l));
  }
  num_events_ = static_cast<int32_t>(next_id);
  return next_id;
}

// An overlapped half's duration depends on its partner (ActionDurationNs), so it is kept per
// op; schedules without pairs keep none. It depends on nothing but the two ops' stages and
// kinds, and the pairs repeat a few such combinations (DualPipe's: each rank's two stages, B
// or I), so each is worked out once and kept in a small direct-mapped table (a combination
// that collides with another is worked out again). Worked out for every half, they were 7%
// of a DualPipe simulation at p = 8; a search of a list of them, whose match moves
// from pair to pair, was mispredicted at almost every pair.
void Engine::KeepPairDurations() {
  pair_ns_.clear();
  constexpr int kSlotBits = 6;
  constexpr uint64_t kEmpty = ~uint64_t{0};  // no key: a W op is never a half
  std::array<std::pair<uint64_t, TimeNs>, size_t{1} << kSlotBits> known;
  known.fill({kEmpty, 0});
  for (int r = 0; r < sched_.num_ranks; ++r) {
    const std::vector<Action>& list = sched_.actions[r];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (!a.overlapped) continue;
      pair_ns_.resize(static_cast<size_t>(num_ops_), 0);
      // Its partner: list[i + 1] for a forward half, list[i - 1] for a backward one
      // (ValidateSchedule). Stages are below 2^30 (Run(): fewer than 2^31 events).
      const Action& partner = a.kind == OpKind::kForward ? list[i + 1] : list[i - 1];
      const uint64_t key = uint64_t{static_cast<uint32_t>(a.stage)} << 34 |
                           uint64_t{static_cast<uint32_t>(partner.stage)} << 4 |
                           static_cast<uint64_t>(a.kind) << 2 | static_cast<uint64_t>(partner.kind);
      auto& slot = known[(key * 0x9e3779b97f4a7c15u) >> (64 - kSlotBits)];
      if (slot.first != key) {
        slot = {key, ActionDurationNs(costs_, list, i, options_.config.Pairs())};
      }
      pair_ns_[op_first_[r] + i] = slot.second;
    }
  }
}

// Per (stage, op kind, overlapped): its duration and memory changes (op_cost_).
void Engine::TabulateOpCosts() {
  const int n = sched_.num_stages;
  op_cost_.assign(static_cast<size_t>(n) * 8, OpCost{});
  if (options_.record_timeline) cost_delta_.assign(op_cost_.size(), 0);
  for (int s = 0; s < n; ++s) {
    const StageCost& c = costs_[s];
    const int r = sched_.stage_rank[s];
    const bool send_fwd = !sched_.IsLastStage(s) && sched_.stage_rank[s + 1] != r;
    const bool send_bwd = !sched_.IsFirstStage(s) && sched_.stage_rank[s - 1] != r;
    for (int k = 0; k < 8; ++k) {
      OpCost& oc = op_cost_[s * 8 + k];
      const OpKind kind = static_cast<OpKind>(k / 2);
      oc.duration = c.DurationNs(kind);  // an overlapped half's: pair_ns_
      oc.start_act = c.ActivationsAtStart(kind);
      oc.end_act = -c.ActivationsFreedAtEnd(kind);
      oc.workspace = c.workspace_bytes;
      switch (kind) {
        case OpKind::kForward:
          oc.recv_free = send_bwd ? -c.input_bytes : 0;  // its input came from s-1
          oc.send = send_fwd ? c.output_bytes : 0;
          break;
        case OpKind::kBackward:
        case OpKind::kBackwardInput:
          oc.recv_free = send_fwd ? -c.output_bytes : 0;  // its gradient came from s+1
          oc.send = send_bwd ? c.input_bytes : 0;
          break;
        case OpKind::kBackwardWeight:
          break;
      }
    }
  }
}

// Sends the output of op `producer` (ended at `end`) to stage `dst_stage`,
// micro-batch `mb`, and wakes the receiving rank if it waits for it.
[[gnu::always_inline]] inline void Engine::Deliver(int dst_stage, int mb, bool gradient,
                                                   int32_t producer, TimeNs end) {
  Cell& c = cells_[CellIndex(dst_stage, mb)];
  __builtin_prefetch(&c + kPrefetchCells, 1);
  const int hop = gradient ? dst_stage : dst_stage - 1;  // the boundary hop..hop+1
  const HopCost& hc = Hop(hop, gradient);
  int32_t& input = gradient ? c.b : c.f;
  if (hc.link < 0) {  // same GPU: hand-over at no cost
    input = kHandedOver;
    return;
  }
  LinkState& link = links_[hc.link];
  const int32_t id = link.first + link.count;
  const TimeNs start = std::max(end, link.free);
  link.free = start + hc.serial;
  const TimeNs arrive = start + hc.latency + hc.serial;
  // Inserted when its producer ended, unless the previous arrival on the
  // link was still pending then: inserted when that one was processed. At
  // one instant the ranking step chooses.
  int32_t parent = producer;
  int32_t packed = ArrivalHop(hop, gradient);
  if (link.count > 0) {
    const TimeNs prev = ev_[id - 1].time;
    if (prev > end) {
      parent = id - 1;
    } else if (prev == end) {
      const int order = TryTieBefore(producer, id - 1);
      if (order == kUnknown) {
        packed |= kTiedArrival;
        ++ties_;
      } else if (order == 1) {
        parent = id - 1;
      }
    }
  }
  ++link.count;
  ev_[id] = Event{arrive, parent, packed};
  // The link's next slots, for its next transfers (see Advance()).
  __builtin_prefetch(ev_.data() + id + kPrefetchEvents, 1);
  input = id;
  RankState& dst = ranks_[link.dst];
  const int64_t key = CellIndex(dst_stage, mb) * 2 + gradient;
  if (dst.waiting_on == key) {
    dst.waiting_on = kNotWaiting;
    worklist_.push_back(link.dst);
  }
}

// The inputs of op list[i] on `rank` (its cell `c`): *in_event is the arrival of its input from
// another rank (kHandedOver: none, or handed over on this rank); for an overlapped pair (docs/
// simulator.md, "Overlapped F&B"), the later of both halves' inputs, with *in_event_2 the other
// when the two arrived at one instant and the ranking step must choose. False when an input is
// not there yet: st.waiting_on names it if another rank will deliver it.
__attribute__((always_inline)) inline bool Engine::InputsOf(RankState& st,
                                                            const std::vector<Action>& list,
                                                            int32_t i, const Cell& c,
                                                            int32_t* in_event,
                                                            int32_t* in_event_2) {
  const Action& a = list[i];
  if (a.kind == OpKind::kBackwardWeight) return c.b == kDone;  // else its I runs later: never
  if (a.kind != OpKind::kForward) {
    if (c.f != kDone) return false;  // its F runs later on this rank: never
    if (sched_.IsLastStage(a.stage)) return true;
    if (c.b == kNotDelivered) {
      if (Hop(a.stage, true).link >= 0) {  // else handed over here: never
        st.waiting_on = CellIndex(a.stage, a.microbatch) * 2 + 1;
      }
      return false;
    }
    *in_event = c.b;
    return true;
  }
  if (!sched_.IsFirstStage(a.stage)) {
    if (c.f == kNotDelivered) {
      // Waiting for an activation; one from this rank would already be here.
      if (Hop(a.stage - 1, false).link >= 0) st.waiting_on = CellIndex(a.stage, a.microbatch) * 2;
      return false;
    }
    *in_event = c.f;
  }
  if (!a.overlapped) return true;
  // The backward half's inputs too (ValidateSchedule: list[i + 1] is its B or I).
  const Action& b = list[i + 1];
  const Cell& cb = cells_[CellIndex(b.stage, b.microbatch)];
  if (cb.f != kDone) return false;  // its F runs later on this rank: never
  if (sched_.IsLastStage(b.stage)) return true;
  if (cb.b == kNotDelivered) {
    if (Hop(b.stage, true).link >= 0) st.waiting_on = CellIndex(b.stage, b.microbatch) * 2 + 1;
    return false;
  }
  const int32_t in_b = cb.b;
  if (in_b < 0) return true;
  if (*in_event < 0 || ev_[in_b].time > ev_[*in_event].time) {
    *in_event = in_b;
  } else if (ev_[in_b].time == ev_[*in_event].time) {
    const int order = TryTieBefore(*in_event, in_b);
    if (order == 1) {
      *in_event = in_b;
    } else if (order == kUnknown) {
      *in_event_2 = in_b;  // the ranking step chooses
    }
  }
  return true;
}

// An op starts when the later of its rank's previous op (`prev`, ending at prev_end) and its
// input is processed; a hand-over on one rank came no later than the previous op. At one instant
// it keeps the candidates for the ranking step (Event::hop, kNoAlternative when decided).
__attribute__((always_inline)) inline Engine::Event Engine::StartOf(TimeNs prev_end, int32_t prev,
                                                                    int32_t in_event,
                                                                    int32_t in_event_2) {
  Event start{prev_end, prev, kNoAlternative};
  if (in_event < 0) return start;
  const TimeNs in = ev_[in_event].time;
  if (in > prev_end) {
    start.time = in;
    start.parent = in_event;
    if (in_event_2 >= 0) start.hop = in_event_2;
  } else if (in == prev_end) {
    const int order = in_event_2 >= 0 ? kUnknown : TryTieBefore(prev, in_event);
    if (order == 1) {
      start.time = in;
      start.parent = in_event;
    } else if (order == kUnknown) {
      start.hop = in_event;
    }
    if (in_event_2 >= 0) {
      start.hop = -2 - static_cast<int32_t>(alternatives_.size());
      alternatives_.emplace_back(in_event, in_event_2);
    }
  }
  if (start.hop != kNoAlternative) ++ties_;
  return start;
}

// Marks op list[i] (event `id`, ending at `end`) done in its cell and delivers its output: a
// forward's to the next stage (an overlapped forward's waits in *deferred_stage for its pair's
// backward half), a backward's gradient to the previous stage.
__attribute__((always_inline)) inline void Engine::Finish(const std::vector<Action>& list,
                                                          int32_t i, Cell& c, int32_t id,
                                                          TimeNs end, int* deferred_stage) {
  const Action& a = list[i];
  if (a.kind == OpKind::kForward) {
    c.f = kDone;
    if (a.overlapped) {
      *deferred_stage = a.stage;
    } else if (!sched_.IsLastStage(a.stage)) {
      Deliver(a.stage + 1, a.microbatch, false, id, end);
    }
    return;
  }
  if (a.kind == OpKind::kBackwardWeight) return;
  c.b = kDone;
  if (*deferred_stage >= 0) {  // the pair's forward half, list[i - 1]
    if (!sched_.IsLastStage(*deferred_stage)) {
      Deliver(*deferred_stage + 1, list[i - 1].microbatch, false, id, end);
    }
    *deferred_stage = -1;
  }
  if (!sched_.IsFirstStage(a.stage)) Deliver(a.stage - 1, a.microbatch, true, id, end);
}

// Computes `rank`'s ops in list order as far as their inputs are known.
void Engine::Advance(int rank) {
  RankState& st = ranks_[rank];
  const std::vector<Action>& list = sched_.actions[rank];
  const int32_t size = static_cast<int32_t>(list.size());
  int32_t i = st.next;
  int32_t prev = st.prev;
  // An overlapped pair starts when both halves' inputs are there, and its forward's output leaves
  // with the backward's, when the pair ends.
  int deferred_stage = -1;  // the forward half's stage whose output waits for the pair's end
  TimeNs prev_end = st.prev_end;
  TimeNs busy = st.busy;
  for (; i < size; ++i) {
    // At p=128, m=4096 the tables hold tens of MiB and the replay turns to
    // another rank every op or two: too many streams for the hardware
    // prefetcher. So each stream fetches its next cache line itself (the
    // rank's actions and op ends; the cells of its stage, which the built-in
    // schedules visit in micro-batch order) while the other ranks run.
    __builtin_prefetch(list.data() + i + kPrefetchOps);
    __builtin_prefetch(ev_.data() + op_first_[rank] + i + kPrefetchEvents, 1);
    const Action& a = list[i];
    Cell& c = cells_[CellIndex(a.stage, a.microbatch)];
    __builtin_prefetch(&c + kPrefetchCells, 1);
    int32_t in_event = kHandedOver;    // or the arrival of its input from another rank
    int32_t in_event_2 = kHandedOver;  // an overlapped pair's other input, arrived with it
    if (!InputsOf(st, list, i, c, &in_event, &in_event_2)) break;
    const Event start = StartOf(prev_end, prev, in_event, in_event_2);
    const int32_t id = op_first_[rank] + i;
    const TimeNs duration = a.overlapped ? pair_ns_[id] : CostOf(a).duration;
    const TimeNs end = start.time + duration;
    busy += duration;
    ev_[id] = Event{end, start.parent, start.hop};
    if (sched_.iterations > 1) {
      TimeNs& iter_end = iteration_end_[a.microbatch / mb_per_iteration_];
      iter_end = std::max(iter_end, end);
    }
    Finish(list, i, c, id, end, &deferred_stage);
    prev = id;
    prev_end = end;
  }
  st.next = i;
  st.prev = prev;
  st.prev_end = prev_end;
  st.busy = busy;
}

Status Engine::Deadlock() const {
  // No rank can advance and ops remain (sim/schedule_graph.h).
  std::vector<int64_t> next(sched_.num_ranks);
  for (int r = 0; r < sched_.num_ranks; ++r) next[r] = ranks_[r].next;
  return NeverFinishes(sched_, next);
}

}  // namespace pipecast::internal
