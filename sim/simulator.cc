#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/internal/engine.h"

namespace pipecast {

using internal::Engine;
using internal::StageCost;

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

}  // namespace

namespace internal {

Status Engine::Run() {
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
  peaks_.assign(p, Peaks{});
  for (int r = 0; r < p; ++r) SweepMemory(r);
  if (options_.record_timeline) RecordTimeline();
  Finish();
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

}  // namespace internal

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

}  // namespace pipecast