// The simulator's engine as it was before the dataflow replay (a global
// event queue over ranks and links), kept verbatim for tests only: the
// equivalence test runs it and Simulate() on the same inputs and requires
// identical results, op for op. Not compiled into the library.
#include "sim/internal/reference_simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "sim/internal/event_queue.h"
#include "sim/schedule_graph.h"

namespace pipecast::internal {

namespace {

constexpr TimeNs kNotYet = -1;

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

Status CheckPartition(const std::vector<StageLayers>& partition, int num_layers, int num_stages) {
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
  return 2 * (d - 1) * link.LatencyNs() +
         TransferNs(static_cast<Bytes>(std::ceil(moved)), link.bandwidth_gbps);
}

class Engine {
 public:
  Engine(const Cluster& cluster, const Schedule& schedule, const std::vector<StageCost>& costs,
         const SimOptions& options, SimResult* result)
      : cluster_(cluster), sched_(schedule), costs_(costs), options_(options), out_(result) {}

  Status Run();

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
    Bytes peak_act = 0, peak_comm = 0, peak_ws = 0, peak_total = 0;
    int inflight = 0;
  };

  // Micro-batch major: the stages of one micro-batch share cache lines, and
  // the ranks of a pipeline work on nearby micro-batches at any moment.
  int64_t Cell(int stage, int mb) const { return int64_t{stage} * sched_.num_microbatches + mb; }
  TimeNs Duration(const Action& a) const;
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
  void Finish();

  const Cluster& cluster_;
  const Schedule& sched_;
  const std::vector<StageCost>& costs_;
  const SimOptions& options_;
  SimResult* out_;

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

TimeNs Engine::Duration(const Action& a) const {
  const StageCost& c = costs_[a.stage];
  switch (a.kind) {
    case OpKind::kForward:
      return c.forward;
    case OpKind::kBackward:
      return c.backward;
    case OpKind::kBackwardInput:
      return c.backward - c.backward_weight;
    case OpKind::kBackwardWeight:
      return c.backward_weight;
  }
  return 0;
}

bool Engine::Ready(const Action& a) const {
  const int64_t cell = Cell(a.stage, a.microbatch);
  switch (a.kind) {
    case OpKind::kForward:
      return a.stage == 0 || cells_[cell].f_input;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      return cells_[cell].f_end && (a.stage == sched_.num_stages - 1 || cells_[cell].b_input);
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
    st.peak_total = std::max(st.peak_total, st.act + st.comm + st.ws);
  }
  if (!options_.record_timeline) return;
  // Every change is kept, several per instant included, so a high that
  // lasts zero time (an op's output allocated before its workspace is
  // freed) still shows in the timeline as it does in the peak.
  out_->per_rank[rank].memory_timeline.push_back(MemorySample{now, st.act, st.comm, st.ws});
}

void Engine::TryStart(int rank, TimeNs now) {
  RankState& st = ranks_[rank];
  const auto& list = sched_.actions[rank];
  if (st.running || st.next >= list.size()) return;
  const Action& a = list[st.next];
  if (!Ready(a)) return;
  const TimeNs dur = Duration(a);
  st.running = true;
  ++st.next;
  st.busy += dur;
  if (st.first_start == kNotYet) st.first_start = now;
  Bytes act = 0;
  if (a.kind == OpKind::kForward) {
    act = costs_[a.stage].held;
    StageResult& sr = out_->per_rank[rank];
    sr.peak_inflight_microbatches = std::max(sr.peak_inflight_microbatches, ++st.inflight);
  } else if (a.kind != OpKind::kBackwardWeight) {
    act = costs_[a.stage].recomputed;
  }
  ChangeMemory(rank, now, act, 0, costs_[a.stage].workspace);
  if (options_.record_timeline) out_->ops.push_back(OpRecord{rank, a, now, now + dur});
  Push(now + dur, kOpEnd, rank);
}

void Engine::OnOpEnd(int rank, TimeNs now) {
  RankState& st = ranks_[rank];
  const Action& a = sched_.actions[rank][st.next - 1];
  const int64_t cell = Cell(a.stage, a.microbatch);
  const int last = sched_.num_stages - 1;
  st.running = false;
  st.last_end = now;
  TimeNs& iter_end = iteration_end_[a.microbatch / (sched_.num_microbatches / sched_.iterations)];
  iter_end = std::max(iter_end, now);
  Bytes act = 0, comm = 0;
  switch (a.kind) {
    case OpKind::kForward:
      cells_[cell].f_end = true;
      if (a.stage > 0 && sched_.stage_rank[a.stage - 1] != rank) comm -= costs_[a.stage - 1].output;
      if (a.stage < last) Send(a.stage, a.stage + 1, a.microbatch, false, now);
      break;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      cells_[cell].bi_end = true;
      if (a.stage < last && sched_.stage_rank[a.stage + 1] != rank) comm -= costs_[a.stage].output;
      if (a.stage > 0) Send(a.stage, a.stage - 1, a.microbatch, true, now);
      break;
    case OpKind::kBackwardWeight:
      break;
  }
  if (a.kind == OpKind::kBackward || a.kind == OpKind::kBackwardWeight) {
    act = -(costs_[a.stage].held + costs_[a.stage].recomputed);
    --st.inflight;
  }
  ChangeMemory(rank, now, act, comm, -costs_[a.stage].workspace);
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
    const int a = sched_.stage_rank[s], b = sched_.stage_rank[s + 1];
    fwd_link_[s] = link(a, b);
    bwd_link_[s] = link(b, a);
    if (a == b) continue;
    // Both directions carry s's output shape: activations out, gradients back.
    fwd_serial_[s] = TransferNs(costs_[s].output, cluster_.LinkBetween(a, b).bandwidth_gbps);
    fwd_latency_[s] = cluster_.LinkBetween(a, b).LatencyNs();
    bwd_serial_[s] = TransferNs(costs_[s].output, cluster_.LinkBetween(b, a).bandwidth_gbps);
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
  const Bytes bytes = costs_[hop].output;
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

Status Engine::Run() {
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
  Finish();
  return Status::Ok();
}

Status Engine::Deadlock() const {
  // The event queue ran dry with ops left: name where each rank is stuck,
  // then the cycle of dependencies that holds them (a DFS over the op graph).
  std::string stuck;
  for (int r = 0; r < sched_.num_ranks; ++r) {
    if (ranks_[r].next < sched_.actions[r].size()) {
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

void Engine::Finish() {
  SimResult& r = *out_;
  const int p = sched_.num_ranks;
  const int k_iter = sched_.iterations;
  TimeNs span = 0;
  for (const RankState& st : ranks_) span = std::max(span, st.last_end);
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
    sr.memory.activations_peak = st.peak_act;
    sr.memory.comm_buffers_peak = st.peak_comm;
    sr.memory.workspace_peak = st.peak_ws;
    const TimeNs busy = st.busy / k_iter;
    sr.busy_ns = busy;
    sr.first_start_ns = std::max<TimeNs>(st.first_start, 0);
    sr.last_end_ns = st.last_end;
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
                           sr.memory.optimizer + st.peak_total;
    // The data-parallel group of rank k: GPU r·p + k of every replica r.
    const int d = options_.data_parallel;
    const Link& link =
        cluster_.SameNode(k, (d - 1) * p + k) ? cluster_.intra_node : cluster_.inter_node;
    sr.allreduce_ns = RingAllReduceNs(sr.memory.gradients, d, link);
    r.allreduce_ns = std::max(r.allreduce_ns, sr.allreduce_ns);
    end = std::max(end, (k_iter > 1 ? span : st.last_end) + sr.allreduce_ns);
  }
  r.bubble_ratio = sum_ratio / p;
  r.bubble_fraction_of_ideal = sum_busy > 0 ? sum_idle / sum_busy : 0.0;
  r.optimizer_ns = options_.optimizer_step_ns;
  r.iteration_ns = end + r.optimizer_ns;
}

}  // namespace

Result<SimResult> ReferenceSimulate(const Model& model, const Cluster& cluster,
                                    const Schedule& schedule, const SimOptions& options) {
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
      return Status::InvalidArgument(
          fmt::format("rank {} has no ops in schedule '{}': every rank must own at least one stage",
                      k, schedule.name));
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
      if (cluster.gpu.peak_tflops > 0)
        result.mfu = *result.tflops_per_gpu / cluster.gpu.peak_tflops;
    }
  } else {
    result.notes.push_back(
        "the iteration takes 0 ns (every cost is zero): throughput is undefined");
  }
  return result;
}

}  // namespace pipecast::internal
