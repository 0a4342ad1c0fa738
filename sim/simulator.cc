#include "sim/simulator.h"

#include "sim/schedule_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <set>

namespace pipecast {

Status SimOptions::Validate() const {
  if (microbatch_size < 1) {
    return Status::InvalidArgument(
        fmt::format("--microbatch-size is {}: must be at least 1", microbatch_size));
  }
  if (data_parallel < 1) {
    return Status::InvalidArgument(
        fmt::format("--data-parallel is {}: must be at least 1", data_parallel));
  }
  if (optimizer_step_ns < 0) {
    return Status::InvalidArgument("--optimizer-step-us is negative: must be >= 0");
  }
  if (memory.weight_bytes_per_param < 0 || memory.gradient_bytes_per_param < 0 ||
      memory.optimizer_bytes_per_param < 0) {
    return Status::InvalidArgument("bytes per parameter must be >= 0");
  }
  return Status::Ok();
}

int64_t SimResult::NumOps() const {
  int64_t n = 0;
  for (const OpRecord& op : ops) n += op.end_ns >= op.start_ns;
  return n;
}

namespace {


// Costs of one virtual stage at the simulated micro-batch size.
struct StageCost {
  TimeNs forward = 0;
  TimeNs backward = 0;         // whole backward
  TimeNs backward_weight = 0;  // W part of `backward`
  bool has_split = true;
  Bytes activations = 0;  // sum over the stage's layers
  Bytes held = 0;         // kept from F start until B (or W) ends
  Bytes recomputed = 0;   // rebuilt at B (or I) start, freed with `held`
  Bytes output = 0;       // the last layer's output, sent to the next stage
  Bytes workspace = 0;    // largest over the stage's layers
  int64_t parameters = 0;
};

// Costs per stage, and notes about interpolated ones.
std::vector<StageCost> StageCosts(const Model& model, const std::vector<StageLayers>& partition,
                                  int microbatch_size, bool recompute,
                                  std::vector<std::string>* notes) {
  std::vector<StageCost> costs(partition.size());
  int interpolated = 0, extrapolated = 0;
  for (size_t s = 0; s < partition.size(); ++s) {
    StageCost& c = costs[s];
    for (int l = partition[s].first_layer; l <= partition[s].last_layer; ++l) {
      LayerCost lc = CostAt(model.layers[l], microbatch_size);
      c.forward += lc.forward_ns;
      c.backward += lc.backward_ns;
      c.backward_weight += lc.backward_weight_ns;
      c.has_split = c.has_split && lc.has_backward_split;
      c.activations += lc.activation_bytes;
      c.output = lc.output_bytes;
      c.workspace = std::max(c.workspace, lc.workspace_bytes);
      c.parameters += model.layers[l].parameters;
      interpolated += lc.origin == CostOrigin::kInterpolated;
      extrapolated += lc.origin == CostOrigin::kExtrapolated;
    }
    c.held = c.activations;
    if (recompute) {
      c.held = s > 0 ? costs[s - 1].output : 0;
      c.recomputed = c.activations;
      c.backward += c.forward;  // rerun the forward before the backward
    }
  }
  const int n = static_cast<int>(model.layers.size());
  if (interpolated > 0) {
    notes->push_back(fmt::format(
        "micro-batch size {} was not measured for {} of {} layers: their costs are interpolated "
        "linearly between the nearest measured sizes",
        microbatch_size, interpolated, n));
  }
  if (extrapolated > 0) {
    notes->push_back(fmt::format(
        "micro-batch size {} is outside the measured sizes for {} of {} layers: their costs are "
        "extrapolated in proportion to the nearest measured size",
        microbatch_size, extrapolated, n));
  }
  return costs;
}

Status CheckPartition(const std::vector<StageLayers>& partition, int num_layers,
                      int num_stages) {
  if (static_cast<int>(partition.size()) != num_stages) {
    return Status::InvalidArgument(fmt::format(
        "the partition has {} stages but the schedule has {}", partition.size(), num_stages));
  }
  int next = 0;
  for (size_t s = 0; s < partition.size(); ++s) {
    if (partition[s].first_layer != next || partition[s].last_layer < partition[s].first_layer ||
        partition[s].last_layer >= num_layers) {
      return Status::InvalidArgument(fmt::format(
          "partition stage {} holds layers {}-{}: stages must be non-empty, contiguous and "
          "within layers 0-{}",
          s, partition[s].first_layer, partition[s].last_layer, num_layers - 1));
    }
    next = partition[s].last_layer + 1;
  }
  if (next != num_layers) {
    return Status::InvalidArgument(fmt::format(
        "the partition covers layers 0-{} but the model has {} layers", next - 1, num_layers));
  }
  return Status::Ok();
}

// Ring all-reduce of `bytes` over `d` ranks on `link`: 2(d-1) steps, each
// moving bytes/d and paying the latency once.
TimeNs RingAllReduceNs(Bytes bytes, int d, const Link& link) {
  if (d <= 1) return 0;
  double moved = 2.0 * (d - 1) / d * static_cast<double>(bytes);
  return 2 * (d - 1) * link.LatencyNs() + TransferNs(static_cast<Bytes>(std::ceil(moved)),
                                                     link.bandwidth_gbps);
}

// The engine: a dataflow replay in two passes, with no global event queue
// (docs/simulator.md, section 2).
//
// Pass 1 (times). An op starts at max(its rank's previous op end, the arrival
// of its input from another rank); a transfer starts at max(its producer's
// end, its link's previous transfer's start + serialisation). Every transfer
// on a link comes from the link's one sending rank, in that rank's order, so
// each rank's list can be replayed on its own as far as its inputs are known:
// a worklist of ranks advances each one until its next op waits for an
// input no rank has produced yet, and a rank that produces that input wakes
// it. When no rank can advance and ops remain, the schedule deadlocks.
//
// The event order. Times alone do not fix everything the old event-queue
// engine reported: several changes of one rank's memory can fall on one
// instant, and their order decides the peaks and the memory timeline (and
// the order of `ops` and `transfers`). That engine processed events by
// (time, insertion order), an event being inserted while the one that
// caused it was processed. So each event records its cause (`parent`): an
// op's end was inserted when the op started, i.e. by the later-processed of
// its rank's previous op end and its input's arrival; a transfer's arrival
// by the later-processed of its producer's end and the previous arrival on
// its link (a link's queue holds one arrival event at a time); the first op
// of each rank, when it needs no input, by the start (in rank order). An
// event's place in the processing order is then (time, place of its parent,
// order within the parent's handling, where a transfer arrival was always
// inserted before an op end), which TieBefore() compares by walking up the
// parents while the times are equal. Ties are rare with real links and
// common on the ideal cluster; either way the result is the old engine's.
//
// Pass 2 (memory). Each rank's memory changes come from its own ops and
// from the arrivals on the links into and out of it: each of those streams
// is already in processing order, so one small merge per rank replays the
// changes in exactly the old order, with an op's start applied right after
// the event that caused it.
class Engine {
 public:
  Engine(const Cluster& cluster, const Schedule& schedule, const std::vector<StageCost>& costs,
         const SimOptions& options, SimResult* result)
      : cluster_(cluster), sched_(schedule), costs_(costs), options_(options), out_(result) {}

  Status Run();

 private:
  // Events are an op's end or a transfer's arrival. Ids: ops [0, num_ops_)
  // numbered rank by rank in list order, then transfers link by link in send
  // order. Each has a time and a parent, the event that inserted it; a parent
  // below 0 is the start of the simulation: -1 - rank.
  // What an op of one (stage, kind) does, precomputed.
  struct OpCost {
    TimeNs duration = 0;
    Bytes start_act = 0;  // activations added at start
    Bytes end_act = 0;    // activations freed at end (<= 0)
    Bytes recv_free = 0;  // receive buffer of its input freed at end (<= 0)
    Bytes send = 0;       // send buffer of its output (0: none or same rank)
    Bytes workspace = 0;
  };
  // Per (stage, micro-batch), 8 bytes: the state of its activation input
  // and F (f), and of its gradient input and B or I (b): kNotDelivered (not
  // delivered), kHandedOver (delivered on the same rank), the arrival event
  // (>= 0), or kDone once the op that consumes it is computed.
  static constexpr int32_t kNotDelivered = -1;
  static constexpr int32_t kHandedOver = -2;
  static constexpr int32_t kDone = -3;
  struct Cell {
    int32_t f = kNotDelivered;
    int32_t b = kNotDelivered;
  };
  struct LinkState {
    int src = 0, dst = 0;
    int32_t first = 0;  // id of its first transfer
    int32_t count = 0;  // transfers sent so far
    TimeNs free = 0;    // when its last transfer stops occupying it
    Bytes bytes = -1;   // every transfer's size when they all cross one hop, else -1
  };
  struct RankState {
    int32_t next = 0;     // next op in the list to compute
    int32_t prev = 0;     // event of the previous op's end (or -1 - rank)
    TimeNs prev_end = 0;  // its time
    int64_t waiting_on = kNotWaiting;  // input key that would let it advance
    TimeNs busy = 0;
  };
  static constexpr int64_t kNotWaiting = -1;

  int64_t CellIndex(int stage, int mb) const {
    return int64_t{stage} * sched_.num_microbatches + mb;
  }
  const OpCost& CostOf(const Action& a) const {
    return op_cost_[a.stage * 4 + static_cast<int>(a.kind)];
  }
  // Processing order of two distinct events (or starts) at one time.
  bool TieBefore(int32_t x, int32_t y) const;
  bool Before(int32_t x, int32_t y) const {
    const TimeNs tx = TimeOf(x), ty = TimeOf(y);
    return tx != ty ? tx < ty : TieBefore(x, y);
  }
  TimeNs TimeOf(int32_t e) const { return e < 0 ? -1 : ev_[e].time; }

  void Prepare();
  void Advance(int rank);
  void Deliver(int dst_stage, int mb, bool gradient, int32_t producer, TimeNs end);
  Status Deadlock() const;
  void SweepMemory(int rank);
  template <int kWidth, bool kRecord>
  void SweepRank(int rank);
  void RecordTimeline();
  void Finish();

  const Cluster& cluster_;
  const Schedule& sched_;
  const std::vector<StageCost>& costs_;
  const SimOptions& options_;
  SimResult* out_;

  int32_t num_ops_ = 0;
  std::vector<int32_t> op_first_;  // per rank: id of its first op
  struct Event {
    TimeNs time;
    int32_t parent;
    int32_t hop;  // transfers on a link with several sizes: the boundary crossed
  };
  std::unique_ptr<Event[]> ev_;  // per event, one cache line holds four
  std::vector<OpCost> op_cost_;    // per (stage, kind)
  std::vector<Cell> cells_;
  std::vector<LinkState> links_;
  // Per stage s: the link carrying s's activations to s+1 and the one
  // carrying the gradients back from s+1 (-1 when both are on one rank), and
  // their serialisation and latency.
  struct HopCost {
    int link = -1;
    TimeNs serial = 0;
    TimeNs latency = 0;
  };
  std::vector<HopCost> hops_;  // [2 * s]: forward over boundary s, [2 * s + 1]: backward
  const HopCost& Hop(int boundary, bool gradient) const { return hops_[2 * boundary + gradient]; }
  std::vector<std::vector<int>> rank_links_;  // per rank: links into or out of it
  std::vector<RankState> ranks_;
  std::vector<int> worklist_;
  std::vector<TimeNs> iteration_end_;  // per iteration (PipeDream)
  int mb_per_iteration_ = 1;
  // Results of the memory sweep, per rank.
  struct Peaks {
    Bytes act = 0, comm = 0, ws = 0, total = 0;
  };
  std::vector<Peaks> peaks_;
  // The sweep's streams: the next event of each, where it ends, whether it
  // leaves the rank, and its transfers' size (-1: they differ, look up).
  struct Stream {
    int32_t next = 0, end = 0;
    bool out = false;
    Bytes bytes = 0;
  };
  std::vector<Stream> streams_;
  std::vector<TimeNs> head_time_;
  std::vector<int> order_;
};

bool Engine::TieBefore(int32_t x, int32_t y) const {
  while (true) {
    if (x < 0 || y < 0) {
      // The start comes first; starts in rank order (-1 - rank).
      return x < 0 && y < 0 ? x > y : x < 0;
    }
    const int32_t px = ev_[x].parent, py = ev_[y].parent;
    // Siblings: an arrival is inserted before an op end.
    if (px == py) return x >= num_ops_;
    const TimeNs tx = TimeOf(px), ty = TimeOf(py);
    if (tx != ty) return tx < ty;
    x = px;
    y = py;
  }
}

void Engine::Prepare() {
  const int p = sched_.num_ranks;
  const int n = sched_.num_stages;
  const int m = sched_.num_microbatches;
  op_first_.resize(p + 1);
  int64_t ops = 0;
  for (int r = 0; r < p; ++r) {
    op_first_[r] = static_cast<int32_t>(ops);
    ops += static_cast<int64_t>(sched_.actions[r].size());
  }
  op_first_[p] = static_cast<int32_t>(ops);
  num_ops_ = static_cast<int32_t>(ops);

  // Links, numbered as first used from stage 0 up (the numbering is internal).
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
    const int a = sched_.stage_rank[s], b = sched_.stage_rank[s + 1];
    HopCost& fwd = hops_[2 * s];
    HopCost& bwd = hops_[2 * s + 1];
    fwd.link = link(a, b);
    bwd.link = link(b, a);
    if (a == b) continue;
    per_link.resize(links_.size(), 0);
    per_link[fwd.link] += m;
    per_link[bwd.link] += m;
    hops.resize(links_.size());
    hops[fwd.link].insert(s);
    hops[bwd.link].insert(s);
    // Both directions carry s's output shape: activations out, gradients back.
    fwd.serial = TransferNs(costs_[s].output, cluster_.LinkBetween(a, b).bandwidth_gbps);
    fwd.latency = cluster_.LinkBetween(a, b).LatencyNs();
    bwd.serial = TransferNs(costs_[s].output, cluster_.LinkBetween(b, a).bandwidth_gbps);
    bwd.latency = cluster_.LinkBetween(b, a).LatencyNs();
  }
  int64_t next_id = ops;
  rank_links_.assign(p, {});
  for (size_t l = 0; l < links_.size(); ++l) {
    links_[l].first = static_cast<int32_t>(next_id);
    next_id += per_link[l];
    if (hops[l].size() == 1) links_[l].bytes = costs_[*hops[l].begin()].output;
    rank_links_[links_[l].src].push_back(static_cast<int>(l));
    rank_links_[links_[l].dst].push_back(static_cast<int>(l));
  }
  ev_.reset(new Event[next_id]);

  op_cost_.assign(static_cast<size_t>(n) * 4, OpCost{});
  for (int s = 0; s < n; ++s) {
    const StageCost& c = costs_[s];
    const int r = sched_.stage_rank[s];
    const bool send_fwd = s + 1 < n && sched_.stage_rank[s + 1] != r;
    const bool send_bwd = s > 0 && sched_.stage_rank[s - 1] != r;
    for (int k = 0; k < 4; ++k) {
      OpCost& oc = op_cost_[s * 4 + k];
      const OpKind kind = static_cast<OpKind>(k);
      oc.workspace = c.workspace;
      switch (kind) {
        case OpKind::kForward:
          oc.duration = c.forward;
          oc.start_act = c.held;
          oc.recv_free = send_bwd ? -costs_[s - 1].output : 0;  // its input came from s-1
          oc.send = send_fwd ? c.output : 0;
          break;
        case OpKind::kBackward:
        case OpKind::kBackwardInput:
          oc.duration = kind == OpKind::kBackward ? c.backward : c.backward - c.backward_weight;
          oc.start_act = c.recomputed;
          oc.end_act = kind == OpKind::kBackward ? -(c.held + c.recomputed) : 0;
          oc.recv_free = send_fwd ? -c.output : 0;  // its gradient came from s+1
          oc.send = send_bwd ? costs_[s - 1].output : 0;
          break;
        case OpKind::kBackwardWeight:
          oc.duration = c.backward_weight;
          oc.end_act = -(c.held + c.recomputed);
          break;
      }
    }
  }
  cells_.assign(static_cast<size_t>(n) * m, Cell{});
  ranks_.assign(p, RankState{});
  for (int r = 0; r < p; ++r) ranks_[r].prev = -1 - r;
  iteration_end_.assign(sched_.iterations, 0);
  mb_per_iteration_ = m / sched_.iterations;
}

// Sends the output of op `producer` (ended at `end`) to stage `dst_stage`,
// micro-batch `mb`, and wakes the receiving rank if it waits for it.
[[gnu::always_inline]] inline void Engine::Deliver(int dst_stage, int mb, bool gradient,
                                                   int32_t producer, TimeNs end) {
  Cell& c = cells_[CellIndex(dst_stage, mb)];
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
  // link was still pending then: inserted when that one was processed.
  int32_t parent = producer;
  if (link.count > 0) {
    const TimeNs prev = ev_[id - 1].time;
    if (prev > end || (prev == end && TieBefore(producer, id - 1))) parent = id - 1;
  }
  ++link.count;
  ev_[id] = Event{arrive, parent, hop};
  input = id;
  RankState& dst = ranks_[link.dst];
  const int64_t key = CellIndex(dst_stage, mb) * 2 + gradient;
  if (dst.waiting_on == key) {
    dst.waiting_on = kNotWaiting;
    worklist_.push_back(link.dst);
  }
}

// Computes `rank`'s ops in list order as far as their inputs are known.
void Engine::Advance(int rank) {
  RankState& st = ranks_[rank];
  const std::vector<Action>& list = sched_.actions[rank];
  const int32_t size = static_cast<int32_t>(list.size());
  const int last = sched_.num_stages - 1;
  int32_t i = st.next;
  int32_t prev = st.prev;
  TimeNs prev_end = st.prev_end;
  TimeNs busy = st.busy;
  for (; i < size; ++i) {
    const Action& a = list[i];
    Cell& c = cells_[CellIndex(a.stage, a.microbatch)];
    int32_t in_event = kHandedOver;  // or the arrival of its input from another rank
    if (a.kind == OpKind::kForward) {
      if (a.stage > 0) {
        if (c.f == kNotDelivered) {
          // Waiting for an activation; one from this rank would already be here.
          if (Hop(a.stage - 1, false).link >= 0) {
            st.waiting_on = CellIndex(a.stage, a.microbatch) * 2;
          }
          break;
        }
        in_event = c.f;
      }
    } else if (a.kind == OpKind::kBackwardWeight) {
      if (c.b != kDone) break;  // its I runs later on this rank: never
    } else {
      if (c.f != kDone) break;  // its F runs later on this rank: never
      if (a.stage < last) {
        if (c.b == kNotDelivered) {
          if (Hop(a.stage, true).link >= 0) {  // else handed over here: never
            st.waiting_on = CellIndex(a.stage, a.microbatch) * 2 + 1;
          }
          break;
        }
        in_event = c.b;
      }
    }
    // It starts when the later of its rank's previous op and its input is
    // processed; a hand-over on one rank came no later than the previous op.
    TimeNs start = prev_end;
    int32_t parent = prev;
    if (in_event >= 0) {
      const TimeNs in = ev_[in_event].time;
      if (in > prev_end || (in == prev_end && TieBefore(prev, in_event))) {
        start = in;
        parent = in_event;
      }
    }
    const OpCost& oc = CostOf(a);
    const TimeNs end = start + oc.duration;
    busy += oc.duration;
    const int32_t id = op_first_[rank] + i;
    ev_[id].time = end;
    ev_[id].parent = parent;
    if (sched_.iterations > 1) {
      TimeNs& iter_end = iteration_end_[a.microbatch / mb_per_iteration_];
      iter_end = std::max(iter_end, end);
    }
    if (a.kind == OpKind::kForward) {
      c.f = kDone;
      if (a.stage < last) Deliver(a.stage + 1, a.microbatch, false, id, end);
    } else if (a.kind != OpKind::kBackwardWeight) {
      c.b = kDone;
      if (a.stage > 0) Deliver(a.stage - 1, a.microbatch, true, id, end);
    }
    prev = id;
    prev_end = end;
  }
  st.next = i;
  st.prev = prev;
  st.prev_end = prev_end;
  st.busy = busy;
}

Status Engine::Run() {
  // Events are numbered with 32-bit ids: ops, plus at most one activation
  // and one gradient transfer per (stage boundary, micro-batch).
  const int64_t events = sched_.NumActions() + 2 * int64_t{sched_.num_stages - 1} *
                                                   sched_.num_microbatches;
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
  peaks_.assign(p, Peaks{});
  for (int r = 0; r < p; ++r) SweepMemory(r);
  if (options_.record_timeline) RecordTimeline();
  Finish();
  return Status::Ok();
}

Status Engine::Deadlock() const {
  // No rank can advance and ops remain: name where each rank is stuck, then
  // the cycle of dependencies that holds them (a DFS over the op graph).
  std::string stuck;
  for (int r = 0; r < sched_.num_ranks; ++r) {
    if (ranks_[r].next < static_cast<int32_t>(sched_.actions[r].size())) {
      stuck += fmt::format("{}rank {} at {}", stuck.empty() ? "" : ", ", r,
                           ActionName(sched_.actions[r][ranks_[r].next]));
    }
  }
  const std::vector<DependencyEdge> cycle = FindDependencyCycle(sched_);
  return Status::FailedPrecondition(fmt::format(
      "schedule '{}' can never finish: stuck are {}; these ops wait on each other in a cycle:{}"
      "\nreorder the ranks' action lists so that every op's inputs are produced first",
      sched_.name, stuck, DescribeCycle(cycle)));
}

// A rank's live memory as the sweep replays its changes.
template <bool kRecord>
struct LiveMemory {
  Bytes act = 0, comm = 0, ws = 0;
  Bytes peak_act = 0, peak_comm = 0, peak_ws = 0, peak_total = 0;
  std::vector<MemorySample>* timeline = nullptr;  // when recording

  [[gnu::always_inline]] void Change(TimeNs now, Bytes d_act, Bytes d_comm, Bytes d_ws) {
    act += d_act;
    comm += d_comm;
    ws += d_ws;
    // Peaks are taken after every change that adds memory. A category's own
    // peak can only move when that category grew (its level is otherwise at
    // most its peak already), so only those are compared.
    if (d_act > 0) peak_act = std::max(peak_act, act);
    if (d_comm > 0) peak_comm = std::max(peak_comm, comm);
    if (d_ws > 0) peak_ws = std::max(peak_ws, ws);
    if (d_act > 0 || d_comm > 0 || d_ws > 0) peak_total = std::max(peak_total, act + comm + ws);
    // Every change is kept, several per instant included, so a high that
    // lasts zero time (an op's output allocated before its workspace is
    // freed) still shows in the timeline as it does in the peak.
    if constexpr (kRecord) timeline->push_back(MemorySample{now, act, comm, ws});
  }
};

// Replays `rank`'s memory changes in processing order: its op starts and
// ends (a send buffer allocated just before its producer's end is applied)
// and the arrivals into and out of it. The streams (its ops' ends, and the
// arrivals on each link into or out of it) are each in processing order and
// few (two to five for the built-in schedules), so each step takes the
// earliest head by a scan of their times, and breaks ties by TieBefore().
// An op's end is pending only once the op has started.
void Engine::SweepMemory(int rank) {
  options_.record_timeline ? SweepRank<0, true>(rank) : SweepRank<0, false>(rank);
}

// kWidth: streams scanned per step (unused ones never come first), or 0 for
// as many as the rank has.
template <int kWidth, bool kRecord>
void Engine::SweepRank(int rank) {
  const std::vector<Action>& list = sched_.actions[rank];
  const int32_t first = op_first_[rank];
  const int32_t size = static_cast<int32_t>(list.size());
  LiveMemory<kRecord> mem;
  if constexpr (kRecord) {
    mem.timeline = &out_->per_rank[rank].memory_timeline;
    size_t samples = 2 * static_cast<size_t>(size);
    for (int li : rank_links_[rank]) samples += links_[li].count;
    for (const Action& a : list) samples += CostOf(a).send != 0;
    mem.timeline->reserve(samples);
  }
  int inflight = 0, peak_inflight = 0;

  // Stream 0 is the rank's ops; stream j > 0 is the link rank_links_[r][j-1].
  constexpr TimeNs kNone = std::numeric_limits<TimeNs>::max();
  const std::vector<int>& links = rank_links_[rank];
  const int k = kWidth > 0 ? kWidth : static_cast<int>(links.size()) + 1;
  streams_.assign(k, Stream{});
  head_time_.assign(k, kNone);
  Stream* const streams = streams_.data();
  TimeNs* const head_time = head_time_.data();
  for (size_t j = 1; j <= links.size(); ++j) {
    const LinkState& l = links_[links[j - 1]];
    streams[j] = Stream{l.first, l.first + l.count, l.src == rank, l.bytes};
    if (l.count > 0) head_time[j] = ev_[l.first].time;
  }

  int32_t started = 0;  // ops whose start is applied; the next one's end is head 0
  // The event that starts the next op (kNoTrigger once all have started).
  constexpr int32_t kNoTrigger = std::numeric_limits<int32_t>::min();
  int32_t trigger = size > 0 ? ev_[first].parent : kNoTrigger;
  auto start = [&](TimeNs now) __attribute__((always_inline)) {
    const Action& a = list[started];
    const OpCost& oc = CostOf(a);
    if (a.kind == OpKind::kForward) peak_inflight = std::max(peak_inflight, ++inflight);
    mem.Change(now, oc.start_act, 0, oc.workspace);
    const int32_t id = first + started;
    streams[0].next = id;
    head_time[0] = ev_[id].time;
    ++started;
    trigger = started < size ? ev_[id + 1].parent : kNoTrigger;
  };
  if (trigger < 0 && trigger != kNoTrigger) start(0);  // started at the outset
  // The links with arrivals left, in the processing order of their heads:
  // a link that advances sinks back into place (usually to the end, as the
  // links take turns), so the earliest is always first.
  order_.resize(k);
  int* const order = order_.data();
  int n = 0;
  auto head_before = [&](int x, int y) __attribute__((always_inline)) {
    return head_time[x] < head_time[y] ||
           (head_time[x] == head_time[y] && TieBefore(streams[x].next, streams[y].next));
  };
  for (int j = 1; j < k; ++j) {
    if (head_time[j] == kNone) continue;
    int pos = n++;
    while (pos > 0 && head_before(j, order[pos - 1])) {
      order[pos] = order[pos - 1];
      --pos;
    }
    order[pos] = j;
  }
  while (true) {
    int best = n > 0 ? order[0] : 0;
    TimeNs t = head_time[best];
    const TimeNs own = head_time[0];
    if (own < t || (own == t && best != 0 && TieBefore(streams[0].next, streams[best].next))) {
      best = 0;
      t = own;
    }
    if (t == kNone) break;
    Stream& st = streams[best];
    const int32_t id = st.next;
    if (best == 0) {  // an op's end
      const Action& a = list[id - first];
      const OpCost& oc = CostOf(a);
      if (oc.send != 0) mem.Change(t, 0, oc.send, 0);
      if (a.kind == OpKind::kBackward || a.kind == OpKind::kBackwardWeight) --inflight;
      mem.Change(t, oc.end_act, oc.recv_free, -oc.workspace);
      head_time[0] = kNone;
      if (trigger == id) start(t);
      continue;
    }
    st.next = id + 1;
    if (id + 1 < st.end) {
      head_time[best] = ev_[id + 1].time;
      int pos = 0;
      while (pos + 1 < n && head_before(order[pos + 1], best)) {
        order[pos] = order[pos + 1];
        ++pos;
      }
      order[pos] = best;
    } else {  // this link is done
      head_time[best] = kNone;
      --n;
      for (int pos = 0; pos < n; ++pos) order[pos] = order[pos + 1];
    }
    const Bytes bytes = st.bytes >= 0 ? st.bytes : costs_[ev_[id].hop].output;
    if (st.out) {  // sent from here: the send buffer is freed
      mem.Change(t, 0, -bytes, 0);
    } else {  // received here: held until the consuming op ends
      mem.Change(t, 0, bytes, 0);
      if (trigger == id) start(t);
    }
  }
  peaks_[rank] = Peaks{mem.peak_act, mem.peak_comm, mem.peak_ws, mem.peak_total};
  out_->per_rank[rank].peak_inflight_microbatches = peak_inflight;
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
  // Transfers: merge the ranks' sending ops by their end events.
  auto sends = [&](int r, int32_t i) { return CostOf(sched_.actions[r][i]).send != 0; };
  auto skip = [&](int r) {
    const int32_t size = static_cast<int32_t>(sched_.actions[r].size());
    while (pos[r] < size && !sends(r, pos[r])) ++pos[r];
    return pos[r] < size;
  };
  auto end_later = [&](int a, int b) {
    return Before(op_first_[b] + pos[b], op_first_[a] + pos[a]);
  };
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
    const TimeNs ready = ev_[op_first_[r] + pos[r]].time;
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
                                             gradient, costs_[hop].output, ready,
                                             arrive - latency - serial, arrive});
    ++pos[r];
    if (skip(r)) {
      std::push_heap(heap.begin(), heap.end(), end_later);
    } else {
      heap.pop_back();
    }
  }
}

void Engine::Finish() {
  SimResult& r = *out_;
  const int p = sched_.num_ranks;
  const int k_iter = sched_.iterations;
  TimeNs span = 0;
  for (const RankState& st : ranks_) span = std::max(span, st.prev_end);
  if (k_iter == 1) iteration_end_[0] = span;
  r.iterations_simulated = k_iter;
  r.first_iteration_ns = iteration_end_[0];
  if (k_iter > 1) {
    // Steady state of an asynchronous pipeline: the first iteration carries
    // the fill; later ones repeat. Per-iteration busy time is busy / K.
    span = (iteration_end_[k_iter - 1] - iteration_end_[0]) / (k_iter - 1);
  }
  r.pipeline_ns = span;
  double sum_ratio = 0, sum_idle = 0, sum_busy = 0;
  TimeNs end = 0;
  for (int k = 0; k < p; ++k) {
    const RankState& st = ranks_[k];
    StageResult& sr = r.per_rank[k];
    sr.memory.activations_peak = peaks_[k].act;
    sr.memory.comm_buffers_peak = peaks_[k].comm;
    sr.memory.workspace_peak = peaks_[k].ws;
    const TimeNs busy = st.busy / k_iter;
    sr.busy_ns = busy;
    // The first op's start: the time of the event that started it.
    const int32_t first_parent = ev_[op_first_[k]].parent;
    sr.first_start_ns = first_parent < 0 ? 0 : ev_[first_parent].time;
    sr.last_end_ns = st.prev_end;
    sr.bubble_ratio = span > 0 ? 1.0 - static_cast<double>(busy) / span : 0.0;
    sr.bubble_fraction_of_ideal = busy > 0 ? static_cast<double>(span - busy) / busy : 0.0;
    sum_ratio += sr.bubble_ratio;
    sum_idle += static_cast<double>(span - busy);
    sum_busy += static_cast<double>(busy);
    if (!sched_.flush) {
      // Weight stashing: one version per in-flight micro-batch (SOSP'19 §3.3).
      sr.weight_versions = std::max(1, sr.peak_inflight_microbatches);
      sr.memory.stashed_weights = (sr.weight_versions - 1) * sr.memory.weights;
    }
    sr.peak_memory_bytes = sr.memory.weights + sr.memory.stashed_weights + sr.memory.gradients +
                           sr.memory.optimizer + peaks_[k].total;
    // The data-parallel group of rank k: GPU r·p + k of every replica r.
    const int d = options_.data_parallel;
    const Link& link =
        cluster_.SameNode(k, (d - 1) * p + k) ? cluster_.intra_node : cluster_.inter_node;
    sr.allreduce_ns = RingAllReduceNs(sr.memory.gradients, d, link);
    r.allreduce_ns = std::max(r.allreduce_ns, sr.allreduce_ns);
    end = std::max(end, (k_iter > 1 ? span : st.prev_end) + sr.allreduce_ns);
  }
  r.bubble_ratio = sum_ratio / p;
  r.bubble_fraction_of_ideal = sum_busy > 0 ? sum_idle / sum_busy : 0.0;
  r.optimizer_ns = options_.optimizer_step_ns;
  r.iteration_ns = end + r.optimizer_ns;
}

}  // namespace

Result<SimResult> Simulate(const Model& model, const Cluster& cluster, const Schedule& schedule,
                           const SimOptions& options) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  PIPECAST_RETURN_IF_ERROR(ValidateSchedule(schedule));
  const int num_layers = static_cast<int>(model.layers.size());
  if (num_layers == 0) return Status::InvalidArgument("the model has no layers");
  std::vector<StageLayers> partition = options.partition;
  if (partition.empty()) {
    std::vector<TimeNs> layer_time;
    for (const Layer& layer : model.layers) {
      LayerCost c = CostAt(layer, options.microbatch_size);
      layer_time.push_back(c.forward_ns + c.backward_ns);
    }
    auto balanced = BalancedPartition(layer_time, schedule.num_stages);
    if (!balanced.ok()) return balanced.status();
    partition = std::move(balanced.value());
  }
  PIPECAST_RETURN_IF_ERROR(CheckPartition(partition, num_layers, schedule.num_stages));

  SimResult result;
  std::vector<StageCost> costs =
      StageCosts(model, partition, options.microbatch_size, options.recompute, &result.notes);
  result.costs_measured = result.notes.empty();
  if (schedule.split_backward) {
    for (size_t s = 0; s < costs.size(); ++s) {
      if (!costs[s].has_split) {
        return Status::InvalidArgument(fmt::format(
            "schedule '{}' splits the backward into I and W, but stage {} (layers {}-{}) has "
            "layers without backward_weight_us: profile the weight-gradient time or use a "
            "schedule with whole backwards",
            schedule.name, s, partition[s].first_layer, partition[s].last_layer));
      }
    }
  }
  result.schedule_name = schedule.name;
  result.ranks = schedule.num_ranks;
  result.stages = schedule.num_stages;
  result.microbatches = schedule.num_microbatches / schedule.iterations;  // per iteration
  result.microbatch_size = options.microbatch_size;
  result.data_parallel = options.data_parallel;
  result.global_batch =
      int64_t{options.microbatch_size} * result.microbatches * options.data_parallel;
  result.memory_capacity_bytes = cluster.gpu.memory_bytes;
  result.per_rank.resize(schedule.num_ranks);
  for (int s = 0; s < schedule.num_stages; ++s) {
    StageResult& sr = result.per_rank[schedule.stage_rank[s]];
    sr.stages.push_back(s);
    sr.layers.push_back(partition[s]);
    const double params = static_cast<double>(costs[s].parameters);
    sr.memory.weights += std::llround(params * options.memory.weight_bytes_per_param);
    sr.memory.gradients += std::llround(params * options.memory.gradient_bytes_per_param);
    sr.memory.optimizer += std::llround(params * options.memory.optimizer_bytes_per_param);
  }
  for (int k = 0; k < schedule.num_ranks; ++k) {
    result.per_rank[k].rank = k;
    if (schedule.actions[k].empty()) {
      return Status::InvalidArgument(fmt::format(
          "rank {} has no ops in schedule '{}': every rank must own at least one stage", k,
          schedule.name));
    }
  }

  Engine engine(cluster, schedule, costs, options, &result);
  PIPECAST_RETURN_IF_ERROR(engine.Run());
  if (options.record_timeline && !result.ops.empty()) {
    result.critical_path = ComputeCriticalPath(schedule, result.ops, result.transfers);
  }
  if (!schedule.flush) {
    result.notes.push_back(fmt::format(
        "{} is asynchronous: no flush between iterations, weights updated while micro-batches "
        "are in flight, so training semantics change (weight stashing keeps each micro-batch's "
        "forward and backward on one version); times are the steady state over {} simulated "
        "iterations, the first taking {:.3f} ms",
        schedule.name, schedule.iterations, NsToUs(result.first_iteration_ns) / 1e3));
  }

  if (result.iteration_ns > 0) {
    const double seconds = static_cast<double>(result.iteration_ns) / kNsPerS;
    result.samples_per_s = static_cast<double>(result.global_batch) / seconds;
    if (model.sequence_length) result.tokens_per_s = result.samples_per_s * *model.sequence_length;
    if (auto flops = model.ForwardFlopsPerSample()) {
      // Forward + backward = 3x the forward FLOPs (the backward costs two
      // forwards); recomputation is not counted, as in MFU's definition.
      const double gpus = static_cast<double>(schedule.num_ranks) * options.data_parallel;
      result.tflops_per_gpu = 3.0 * *flops * result.samples_per_s / gpus / 1e12;
      if (cluster.gpu.peak_tflops > 0) result.mfu = *result.tflops_per_gpu / cluster.gpu.peak_tflops;
    }
  } else {
    result.notes.push_back("the iteration takes 0 ns (every cost is zero): throughput is undefined");
  }
  return result;
}

}  // namespace pipecast
