// The simulator's engine as it was before the dataflow replay (a global
// event queue over ranks and links), kept for tests only: the equivalence
// test runs it and Simulate() on the same inputs and requires identical
// results, op for op. It swaps only the engine step: preparation, stage
// costs and metrics are Simulate()'s own (sim/internal/simulate_steps.h).
// Not compiled into the library.
#include "sim/internal/reference_simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "sim/internal/event_queue.h"
#include "sim/internal/simulate_steps.h"
#include "sim/schedule_graph.h"
#include "sim/stage_costs.h"

namespace pipecast::internal {

namespace {

constexpr TimeNs kNotYet = -1;

class Engine {
 public:
  Engine(const Cluster& cluster, const Schedule& schedule, const std::vector<StageCost>& costs,
         const SimOptions& options, SimResult* result)
      : cluster_(cluster), sched_(schedule), costs_(costs), options_(options), out_(result) {}

  // Fills `totals` (sim/internal/simulate_steps.h) and the result.
  Status Run(EngineTotals* totals);

 private:
  enum EventType : uint8_t { kOpEnd, kArrive };
  // 16 bytes: time, then insertion order (high 40 bits), type (1 bit) and
  // index (23 bits) packed so one integer compare breaks ties by insertion.
  using Event = internal::QueuedEvent;
  static EventType TypeOf(const Event& e) {
    return static_cast<EventType>((e.key >> kIndexBits) & 1);
  }
  static int IndexOf(const Event& e) {
    return static_cast<int>(e.key & ((uint64_t{1} << kIndexBits) - 1));
  }
  static constexpr int kIndexBits = 23;  // ranks and in-flight transfers < 8M
  struct Pending {                       // a transfer in flight
    int src_rank, dst_rank, stage, microbatch;
    bool gradient;
    Bytes bytes;
    TimeNs arrive;
  };
  struct RankState {
    size_t next = 0;
    bool running = false;
    TimeNs busy = 0, first_start = kNotYet, last_end = 0;
    Bytes act = 0, comm = 0, ws = 0;
    Bytes grads = 0;  // --sharded-state fsdp2: the gradients made (in the total only)
    bool grads_made = false;
    Bytes peak_act = 0, peak_comm = 0, peak_ws = 0, peak_total = 0;
    int inflight = 0;
  };

  // Micro-batch major: the stages of one micro-batch share cache lines, and
  // the ranks of a pipeline work on nearby micro-batches at any moment.
  int64_t Cell(int stage, int mb) const { return int64_t{stage} * sched_.num_microbatches + mb; }
  TimeNs Duration(int rank, size_t i) const;  // of action i of rank's list
  bool Ready(const Action& a) const;
  void Push(TimeNs t, EventType type, int index) {
    const Event e{t, (seq_++ << (kIndexBits + 1)) | (uint64_t{type} << kIndexBits) |
                         static_cast<uint64_t>(index)};
    if (top_consumed_) {  // the event being handled leaves: take its place
      queue_.replace_top(e);
      top_consumed_ = false;
    } else {
      queue_.push(e);
    }
  }
  void TryStart(int rank, TimeNs now);
  void OnOpEnd(int rank, TimeNs now);
  void Send(int src_stage, int dst_stage, int mb, bool gradient, TimeNs now);
  void OnArrive(int index, TimeNs now);
  [[gnu::always_inline]] inline void ChangeMemory(int rank, TimeNs now, Bytes act, Bytes comm,
                                                  Bytes ws);
  void PrepareLinks();
  Status Deadlock() const;
  void Totals();

  const Cluster& cluster_;
  const Schedule& sched_;
  const std::vector<StageCost>& costs_;
  const SimOptions& options_;
  SimResult* out_;
  EngineTotals* totals_ = nullptr;

  internal::EventQueue queue_;
  // True while the handled event still sits on top of the queue: the first
  // Push() replaces it (one sift instead of a pop and a push).
  bool top_consumed_ = false;
  uint64_t seq_ = 0;
  std::vector<RankState> ranks_;
  // Per (stage, micro-batch) cell, together so one op touches one cache line.
  // Flags only: an op starts at the event that makes it ready, so no time
  // needs keeping, and 4 bytes a cell keep large pipelines in cache.
  struct CellState {
    bool f_end = false;    // its F ended
    bool bi_end = false;   // its B or I ended
    bool f_input = false;  // the activation it needs arrived
    bool b_input = false;  // the gradient it needs arrived
  };
  std::vector<CellState> cells_;
  std::vector<std::deque<Pending>> link_queue_;  // per link, in flight
  // Per virtual stage s: the link carrying s's activations to s+1, and the
  // one carrying s+1's gradients back to s (-1 when both are on one rank).
  std::vector<int> fwd_link_, bwd_link_;
  std::vector<TimeNs> link_free_;
  // Per virtual stage s: serialisation and latency of s's activation hop
  // (fwd) and of the gradient hop back into s (bwd), precomputed.
  std::vector<TimeNs> fwd_serial_, fwd_latency_, bwd_serial_, bwd_latency_;
  std::vector<TimeNs> iteration_end_;  // per iteration (PipeDream)
};

TimeNs Engine::Duration(int rank, size_t i) const {
  return ActionDurationNs(costs_, sched_.actions[rank], i, options_.config.Pairs());
}

bool Engine::Ready(const Action& a) const {
  const int64_t cell = Cell(a.stage, a.microbatch);
  switch (a.kind) {
    case OpKind::kForward:
      return sched_.IsFirstStage(a.stage) || cells_[cell].f_input;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      return cells_[cell].f_end && (sched_.IsLastStage(a.stage) || cells_[cell].b_input);
    case OpKind::kBackwardWeight:
      return cells_[cell].bi_end;
  }
  return false;
}

inline void Engine::ChangeMemory(int rank, TimeNs now, Bytes act, Bytes comm, Bytes ws) {
  RankState& st = ranks_[rank];
  st.act += act;
  st.comm += comm;
  st.ws += ws;
  if (act > 0 || comm > 0 || ws > 0) {  // peaks only move up
    st.peak_act = std::max(st.peak_act, st.act);
    st.peak_comm = std::max(st.peak_comm, st.comm);
    st.peak_ws = std::max(st.peak_ws, st.ws);
    st.peak_total = std::max(st.peak_total, st.act + st.comm + st.ws + st.grads);
  }
  if (!options_.record_timeline) return;
  // Every change is kept, several per instant included, so a high that
  // lasts zero time (an op's output allocated before its workspace is
  // freed) still shows in the timeline as it does in the peak.
  out_->per_rank[rank].memory_timeline.Append(MemorySample{now, st.act, st.comm, st.ws});
}

void Engine::TryStart(int rank, TimeNs now) {
  RankState& st = ranks_[rank];
  const auto& list = sched_.actions[rank];
  if (st.running || st.next >= list.size()) return;
  const Action& a = list[st.next];
  if (!Ready(a)) return;
  // An overlapped pair starts when both halves are ready (docs/simulator.md, "Overlapped F&B").
  if (a.overlapped && a.kind == OpKind::kForward && !Ready(list[st.next + 1])) return;
  const TimeNs dur = Duration(rank, st.next);
  st.running = true;
  ++st.next;
  st.busy += dur;
  if (st.first_start == kNotYet) st.first_start = now;
  if (a.kind == OpKind::kForward) {
    StageResult& sr = out_->per_rank[rank];
    sr.peak_inflight_microbatches = std::max(sr.peak_inflight_microbatches, ++st.inflight);
  }
  const StageCost& c = costs_[a.stage];
  ChangeMemory(rank, now, c.ActivationsAtStart(a.kind), 0, c.workspace_bytes);
  if (options_.record_timeline) out_->ops.push_back(OpRecord{rank, a, now, now + dur});
  Push(now + dur, kOpEnd, rank);
}

void Engine::OnOpEnd(int rank, TimeNs now) {
  RankState& st = ranks_[rank];
  const Action& a = sched_.actions[rank][st.next - 1];
  const int64_t cell = Cell(a.stage, a.microbatch);
  st.running = false;
  st.last_end = now;
  TimeNs& iter_end = iteration_end_[a.microbatch / (sched_.num_microbatches / sched_.iterations)];
  iter_end = std::max(iter_end, now);
  Bytes act = 0, comm = 0;
  switch (a.kind) {
    case OpKind::kForward:
      cells_[cell].f_end = true;
      if (!sched_.IsFirstStage(a.stage) && sched_.stage_rank[a.stage - 1] != rank)
        comm -= costs_[a.stage - 1].output_bytes;
      // An overlapped pair's forward half sends when the pair ends, below.
      if (!sched_.IsLastStage(a.stage) && !a.overlapped)
        Send(a.stage, a.stage + 1, a.microbatch, false, now);
      break;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      if (a.overlapped) {
        const Action& f = sched_.actions[rank][st.next - 2];
        if (!sched_.IsLastStage(f.stage)) Send(f.stage, f.stage + 1, f.microbatch, false, now);
      }
      cells_[cell].bi_end = true;
      if (!sched_.IsLastStage(a.stage) && sched_.stage_rank[a.stage + 1] != rank)
        comm -= costs_[a.stage].output_bytes;
      if (!sched_.IsFirstStage(a.stage)) Send(a.stage, a.stage - 1, a.microbatch, true, now);
      break;
    case OpKind::kBackwardWeight:
      break;
  }
  act = -costs_[a.stage].ActivationsFreedAtEnd(a.kind);
  if (a.kind == OpKind::kBackward || a.kind == OpKind::kBackwardWeight) --st.inflight;
  ChangeMemory(rank, now, act, comm, -costs_[a.stage].workspace_bytes);
  // --sharded-state fsdp2: the rank's sharded gradients are made by its first backward.
  if (options_.config.memory.Fsdp2() && !st.grads_made &&
      (a.kind == OpKind::kBackward || a.kind == OpKind::kBackwardWeight)) {
    st.grads_made = true;
    st.grads = out_->per_rank[rank].memory.gradients;
    out_->per_rank[rank].gradients_from_ns = now;
    st.peak_total = std::max(st.peak_total, st.act + st.comm + st.ws + st.grads);
  }
  TryStart(rank, now);
}

void Engine::PrepareLinks() {
  std::map<std::pair<int, int>, int> index;
  auto link = [&](int src, int dst) {
    if (src == dst) return -1;
    auto [it, fresh] = index.try_emplace({src, dst}, static_cast<int>(link_free_.size()));
    if (fresh) {
      link_free_.push_back(0);
      link_queue_.emplace_back();
    }
    return it->second;
  };
  const int n = sched_.num_stages;
  fwd_link_.assign(n, -1);
  bwd_link_.assign(n, -1);
  fwd_serial_.assign(n, 0);
  fwd_latency_.assign(n, 0);
  bwd_serial_.assign(n, 0);
  bwd_latency_.assign(n, 0);
  for (int s = 0; s + 1 < n; ++s) {
    if (sched_.IsLastStage(s)) continue;  // the end of a path (bidirectional): no boundary
    const int a = sched_.stage_rank[s], b = sched_.stage_rank[s + 1];
    fwd_link_[s] = link(a, b);
    bwd_link_[s] = link(b, a);
    if (a == b) continue;
    // Both directions carry s's output shape: activations out, gradients back.
    fwd_serial_[s] = TransferNs(costs_[s].output_bytes, cluster_.LinkBetween(a, b).bandwidth_gbps);
    fwd_latency_[s] = cluster_.LinkBetween(a, b).LatencyNs();
    bwd_serial_[s] = TransferNs(costs_[s].output_bytes, cluster_.LinkBetween(b, a).bandwidth_gbps);
    bwd_latency_[s] = cluster_.LinkBetween(b, a).LatencyNs();
  }
}

void Engine::Send(int src_stage, int dst_stage, int mb, bool gradient, TimeNs now) {
  const int src = sched_.stage_rank[src_stage];
  const int dst = sched_.stage_rank[dst_stage];
  const int64_t dst_cell = Cell(dst_stage, mb);
  if (src == dst) {  // same GPU: hand-over at no cost
    CellState& c = cells_[dst_cell];
    (gradient ? c.b_input : c.f_input) = true;
    return;
  }
  // Activations forward are the source stage's output; gradients backward
  // have the shape of the destination stage's output.
  const int hop = gradient ? dst_stage : src_stage;  // the boundary hop..hop+1
  const Bytes bytes = costs_[hop].output_bytes;
  const int li = gradient ? bwd_link_[hop] : fwd_link_[hop];
  const TimeNs start = std::max(now, link_free_[li]);
  const TimeNs serial = gradient ? bwd_serial_[hop] : fwd_serial_[hop];
  link_free_[li] = start + serial;
  const TimeNs arrive = start + (gradient ? bwd_latency_[hop] : fwd_latency_[hop]) + serial;
  ChangeMemory(src, now, 0, bytes, 0);
  // A link is FIFO and its latency fixed, so its arrivals come in request
  // order: only the head of each link's queue waits in the event queue,
  // which keeps that queue as small as the number of ranks and links.
  std::deque<Pending>& q = link_queue_[li];
  q.push_back(Pending{src, dst, dst_stage, mb, gradient, bytes, arrive});
  if (options_.record_timeline) {
    out_->transfers.push_back(
        TransferRecord{src, dst, src_stage, dst_stage, mb, gradient, bytes, now, start, arrive});
  }
  if (q.size() == 1) Push(arrive, kArrive, li);
}

void Engine::OnArrive(int link, TimeNs now) {
  std::deque<Pending>& q = link_queue_[link];
  const Pending p = q.front();
  q.pop_front();
  if (!q.empty()) Push(q.front().arrive, kArrive, link);
  ChangeMemory(p.src_rank, now, 0, -p.bytes, 0);
  ChangeMemory(p.dst_rank, now, 0, p.bytes, 0);
  CellState& c = cells_[Cell(p.stage, p.microbatch)];
  (p.gradient ? c.b_input : c.f_input) = true;
  TryStart(p.dst_rank, now);
}

Status Engine::Run(EngineTotals* totals) {
  totals_ = totals;
  const int p = sched_.num_ranks;
  const int64_t cells = int64_t{sched_.num_stages} * sched_.num_microbatches;
  ranks_.assign(p, RankState{});
  cells_.assign(cells, CellState{});
  iteration_end_.assign(sched_.iterations, 0);
  PrepareLinks();
  if (options_.record_timeline) {
    out_->ops.reserve(sched_.NumActions());
    out_->transfers.reserve(2 * cells);
  }
  for (int r = 0; r < p; ++r) TryStart(r, 0);
  while (!queue_.empty()) {
    const Event e = queue_.top();
    top_consumed_ = true;
    if (TypeOf(e) == kOpEnd) {
      OnOpEnd(IndexOf(e), e.time);
    } else {
      OnArrive(IndexOf(e), e.time);
    }
    if (top_consumed_) {
      queue_.pop();
      top_consumed_ = false;
    }
  }
  for (int r = 0; r < p; ++r) {
    if (ranks_[r].next < sched_.actions[r].size() || ranks_[r].running) return Deadlock();
  }
  // The records as SimResult documents them, rank by rank: appended as ops
  // started and producers ended, each rank's are already in its order.
  std::stable_sort(out_->ops.begin(), out_->ops.end(),
                   [](const OpRecord& a, const OpRecord& b) { return a.rank < b.rank; });
  std::stable_sort(
      out_->transfers.begin(), out_->transfers.end(),
      [](const TransferRecord& a, const TransferRecord& b) { return a.src_rank < b.src_rank; });
  Totals();
  return Status::Ok();
}

Status Engine::Deadlock() const {
  // No rank can advance and ops remain (sim/schedule_graph.h).
  std::vector<int64_t> next(sched_.num_ranks);
  for (int r = 0; r < sched_.num_ranks; ++r) next[r] = ranks_[r].next;
  return NeverFinishes(sched_, next);
}

// What the metrics step reads (sim/internal/simulate_steps.h).
void Engine::Totals() {
  for (int k = 0; k < sched_.num_ranks; ++k) {
    const RankState& st = ranks_[k];
    totals_->ranks[k] = RankTotals{st.busy,      std::max<TimeNs>(st.first_start, 0),
                                   st.last_end,  st.peak_act,
                                   st.peak_comm, st.peak_ws,
                                   st.peak_total};
  }
  totals_->iteration_end_ns = iteration_end_;
}

Status RunReferenceEngine(const Cluster& cluster, const Schedule& schedule,
                          const std::vector<StageCost>& costs, const SimOptions& options,
                          SimResult* result, EngineTotals* totals) {
  Engine engine(cluster, schedule, costs, options, result);
  return engine.Run(totals);
}

}  // namespace

Result<SimResult> ReferenceSimulate(const Model& model, const Cluster& cluster,
                                    const Schedule& schedule, const SimOptions& options) {
  return SimulateWith(&RunReferenceEngine, model, cluster, schedule, options);
}

}  // namespace pipecast::internal
