// Simulate() in three steps (sim/internal/simulate_steps.h): preparation
// and metrics here, the engine in sim/internal/engine*.cc.
#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "base/text_table.h"
#include "sim/collectives.h"
#include "sim/internal/data_parallel.h"
#include "sim/internal/simulate_steps.h"
#include "sim/memory_partition.h"
#include "sim/stage_costs.h"
#include "sim/totals.h"

namespace pipecast {

using internal::EngineTotals;
using internal::RankTotals;

Status SimOptions::Validate() const {
  if (critical_path && !record_timeline) {
    return Status::InvalidArgument(
        "the critical path needs the timeline: set record_timeline with critical_path (the path "
        "is walked back over the op and transfer records)");
  }
  return config.Validate();
}

bool SimResult::FitsMemory() const {
  for (const StageResult& r : per_rank) {
    if (!r.fits_memory) return false;
  }
  return true;
}

int64_t SimResult::NumOps() const {
  int64_t n = 0;
  for (const OpRecord& op : ops) n += op.end_ns >= op.start_ns;
  return n;
}

namespace {

// The configuration's p, v and m, where stated, are the schedule's.
Status CheckConfigMatchesSchedule(const TrainingConfig& config, const Schedule& schedule) {
  const ParallelLayout& layout = config.layout;
  if (layout.pipeline_stages > 0 && layout.pipeline_stages != schedule.num_ranks) {
    return Status::InvalidArgument(
        fmt::format("the configuration has {} but schedule '{}' has {}",
                    Count(layout.pipeline_stages, "pipeline stage", "pipeline stages"),
                    schedule.name, Count(schedule.num_ranks, "rank", "ranks")));
  }
  if (layout.chunks > 0 && schedule.num_ranks > 0 && layout.chunks != schedule.ChunksPerRank()) {
    return Status::InvalidArgument(
        fmt::format("the configuration has {} chunks per rank but schedule '{}' has {}",
                    layout.chunks, schedule.name, schedule.ChunksPerRank()));
  }
  // --ep-overlap's rules at the schedule's p (a stated p may be 0 until here).
  TrainingConfig staged = config;
  staged.layout.pipeline_stages = schedule.num_ranks;
  PIPECAST_RETURN_IF_ERROR(staged.CheckExpertOverlap());
  const int m = schedule.num_microbatches / std::max(1, schedule.iterations);
  if (config.microbatches > 0 && config.microbatches != m) {
    return Status::InvalidArgument(
        fmt::format("the configuration has {} per iteration but schedule '{}' has {}",
                    Count(config.microbatches, "micro-batch", "micro-batches"), schedule.name, m));
  }
  return Status::Ok();
}

Status CheckPartition(const std::vector<StageLayers>& partition, int num_layers, int num_stages) {
  if (static_cast<int>(partition.size()) != num_stages) {
    return Status::InvalidArgument(fmt::format("the partition has {} but the schedule has {}",
                                               Count(partition.size(), "stage", "stages"),
                                               num_stages));
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
    return Status::InvalidArgument(
        fmt::format("the partition covers layers 0-{} but the model has {}", next - 1,
                    Count(num_layers, "layer", "layers")));
  }
  return Status::Ok();
}

// The partition to simulate: the options', else the configuration's rule
// as the tools and the planner apply it (DefaultPartition,
// sim/memory_partition.h); checked against the model and the schedule.
Result<std::vector<StageLayers>> ResolvePartition(const Model& model, const Cluster& cluster,
                                                  const StageCostTable& table,
                                                  const Schedule& schedule,
                                                  const SimOptions& options) {
  std::vector<StageLayers> partition = options.partition;
  const int model_stages = schedule.NumModelStages();
  if (partition.empty()) {
    PIPECAST_ASSIGN_OR_RETURN(MemoryAwareSplit split,
                              DefaultPartition(model, cluster, schedule, options.config));
    partition = std::move(split.partition);
  }
  if (schedule.bidirectional && static_cast<int>(partition.size()) == schedule.num_stages) {
    // Given per virtual stage (as a plan stores it): stage p+k must repeat stage k.
    for (int s = model_stages; s < schedule.num_stages; ++s) {
      const StageLayers& copy = partition[schedule.ModelStage(s)];
      if (partition[s].first_layer != copy.first_layer ||
          partition[s].last_layer != copy.last_layer) {
        return Status::InvalidArgument(fmt::format(
            "partition stage {} holds layers {}-{}, but in bidirectional schedule '{}' it is "
            "the second copy of stage {} (layers {}-{}): give the {} model stages only",
            s, partition[s].first_layer, partition[s].last_layer, schedule.name,
            schedule.ModelStage(s), copy.first_layer, copy.last_layer, model_stages));
      }
    }
    partition.resize(model_stages);
  }
  PIPECAST_RETURN_IF_ERROR(CheckPartition(partition, table.NumLayers(), model_stages));
  // A bidirectional schedule's stage p+k is model stage k again (sim/schedule.h): from here on
  // the partition is indexed by virtual stage.
  for (int s = model_stages; s < schedule.num_stages; ++s) {
    partition.push_back(partition[schedule.ModelStage(s)]);
  }
  return partition;
}

Status CheckSplitBackward(const Schedule& schedule, const std::vector<StageLayers>& partition,
                          const std::vector<StageCost>& costs) {
  if (!schedule.split_backward) return Status::Ok();
  for (size_t s = 0; s < costs.size(); ++s) {
    if (!costs[s].has_backward_split) {
      return Status::InvalidArgument(fmt::format(
          "schedule '{}' splits the backward into I and W, but stage {} (layers {}-{}) has "
          "layers without backward_weight_us: profile the weight-gradient time or use a "
          "schedule with whole backwards",
          schedule.name, s, partition[s].first_layer, partition[s].last_layer));
    }
  }
  return Status::Ok();
}

// The result's fields known before the replay: shape, batch, static memory.
Status FillStatic(const Cluster& cluster, const Schedule& schedule, const SimOptions& options,
                  const std::vector<StageLayers>& partition, const std::vector<StageCost>& costs,
                  SimResult* result) {
  result->schedule_name = schedule.name;
  result->ranks = schedule.num_ranks;
  result->stages = schedule.num_stages;
  result->bidirectional = schedule.bidirectional;
  result->microbatches = schedule.num_microbatches / schedule.iterations;  // per iteration
  const TrainingConfig& config = options.config;
  result->microbatch_size = config.microbatch_size;
  result->data_parallel = config.layout.data_parallel;
  result->tensor_parallel = config.layout.tensor_parallel;
  result->context_parallel = config.layout.context_parallel;
  result->cp_algorithm = config.layout.cp_algorithm;
  result->expert_parallel = config.layout.expert_parallel;
  result->expert_tensor_parallel = config.layout.expert_tensor_parallel;
  result->ep_dispatcher = config.layout.expert_dispatcher;
  result->sequence_parallel = config.layout.sequence_parallel;
  result->tp_comm_overlap = config.overlap.tp_comm_overlap;
  result->ep_overlap = config.ExpertOverlapOn() && config.layout.expert_parallel > 1;
  result->ep_combined_1f1b = result->ep_overlap && config.CombinesForwardBackward();
  result->global_batch =
      int64_t{config.microbatch_size} * result->microbatches * config.layout.data_parallel;
  result->zero = config.memory.zero;
  result->fp8_recipe = config.memory.fp8_recipe;
  result->fp8_param_gather = config.memory.fp8_param_gather;
  result->sharded_state = config.memory.sharded_state;
  result->memory_capacity_bytes = cluster.gpu.memory_bytes;
  result->memory_reserve_bytes =
      cluster.gpu.memory_bytes > 0 ? cluster.gpu.memory_reserve_bytes : 0;
  result->memory_headroom = cluster.gpu.memory_headroom;
  result->memory_headroom_bytes = MemoryHeadroomBytes(cluster.gpu);
  result->memory_limit_bytes = MemoryLimitBytes(cluster.gpu);
  result->per_rank.resize(schedule.num_ranks);
  const ShardedBytes per_param =
      ShardedBytesPerParam(config.memory, config.layout.GradientReplicas());
  const ShardedBytes per_expert_param = ExpertBytesPerParam(
      per_param, config.memory, config.layout.tensor_parallel, config.layout.ExpertShards());
  for (int s = 0; s < schedule.num_stages; ++s) {
    StageResult& sr = result->per_rank[schedule.stage_rank[s]];
    sr.stages.push_back(s);
    sr.layers.push_back(partition[s]);
    const int64_t params = costs[s].parameters;
    sr.parameters += params;
    const ParameterMemory m =
        ParameterMemoryOf(params, costs[s].expert_parameters, per_param, per_expert_param);
    sr.memory.weights += m.weights;
    sr.memory.gradients += m.gradients;
    sr.memory.optimizer += m.optimizer;
    sr.memory.fp8_weights += m.fp8_weights;
  }
  for (int k = 0; k < schedule.num_ranks; ++k) {
    result->per_rank[k].rank = k;
    if (schedule.actions[k].empty()) {
      return Status::InvalidArgument(
          fmt::format("rank {} has no ops in schedule '{}': every rank must own at least one stage",
                      k, schedule.name));
    }
  }
  return Status::Ok();
}

// The pipeline's span: the steady state for an asynchronous pipeline.
TimeNs PipelineSpan(const Schedule& schedule, EngineTotals* totals, SimResult* result) {
  const int k_iter = schedule.iterations;
  TimeNs span = 0;
  for (const RankTotals& t : totals->ranks) span = std::max(span, t.last_end_ns);
  std::vector<TimeNs>& iteration_end = totals->iteration_end_ns;
  if (k_iter == 1) iteration_end[0] = span;
  // An iteration ends when it and every earlier one have ended: a schedule
  // may finish a later iteration's micro-batches first (e.g. `0B1 0B0`), and
  // the weights are still updated in iteration order.
  for (int k = 1; k < k_iter; ++k) {
    iteration_end[k] = std::max(iteration_end[k], iteration_end[k - 1]);
  }
  result->iterations_simulated = k_iter;
  result->first_iteration_ns = iteration_end[0];
  if (k_iter > 1) {
    // Steady state of an asynchronous pipeline: the first iteration carries
    // the fill; later ones repeat. Per-iteration busy time is busy / K.
    span = (iteration_end[k_iter - 1] - iteration_end[0]) / (k_iter - 1);
    // No period is shorter than the busiest rank's work for one iteration.
    for (const RankTotals& t : totals->ranks) span = std::max(span, t.busy_ns / k_iter);
  }
  result->pipeline_ns = span;
  return span;
}

// A bidirectional schedule's two parameter copies (docs/simulator.md, "Bidirectional
// schedules"): model stage k lives on the ranks of virtual stages k and p+k (k and p-1-k in
// DualPipe's V). After both ranks have ended their last ops they sum that stage's gradients:
// one ring all-reduce of 2 per partner rank, of the gradient bytes of the stages they share, on
// the link between them (in the V one partner and both chunks; all pairs at once, on disjoint
// links). A stage whose copies share a rank sums locally, at no cost. Fills copy_reduce_ns and
// returns when each rank's tail collectives start: its last op's end, or its partners' later.
std::vector<TimeNs> CopyReduce(const Cluster& cluster, const Schedule& schedule,
                               const SimOptions& options, const std::vector<StageCost>& costs,
                               const EngineTotals& totals, SimResult* result) {
  const int p = schedule.num_ranks;
  std::vector<TimeNs> start(p);
  for (int k = 0; k < p; ++k) start[k] = totals.ranks[k].last_end_ns;
  if (!schedule.bidirectional) return start;
  const std::vector<std::map<int, Bytes>> shared = CopyReduceBytes(
      schedule, costs,
      ShardedBytesPerParam(options.config.memory, options.config.layout.GradientReplicas())
          .gradients);
  for (int k = 0; k < p; ++k) {
    StageResult& sr = result->per_rank[k];
    for (const auto& [partner, bytes] : shared[k]) {
      start[k] = std::max(start[k], totals.ranks[partner].last_end_ns);
      sr.copy_reduce_ns +=
          CollectiveNs(cluster, Collective::kAllReduce, bytes, GroupOf(cluster, {k, partner}));
    }
    result->copy_reduce_ns = std::max(result->copy_reduce_ns, sr.copy_reduce_ns);
  }
  return start;
}

// One replay's inputs as the metrics read them: the cluster folded to one GPU
// of each group, the options with one GPU's share of the memory, the cost
// table, the partition and each stage's costs.
struct ReplayInputs {
  const Model& model;
  const Cluster& cluster;
  const Schedule& schedule;
  const SimOptions& options;
  const StageCostTable& table;
  const std::vector<StageLayers>& partition;
  const std::vector<StageCost>& costs;
};

// Bubbles, peak memory and all-reduce from the engine's totals.
void PipelineMetrics(const ReplayInputs& in, EngineTotals* totals, SimResult* result) {
  const Cluster& cluster = in.cluster;
  const Schedule& schedule = in.schedule;
  const SimOptions& options = in.options;
  const std::vector<StageCost>& costs = in.costs;
  SimResult& r = *result;
  const int p = schedule.num_ranks;
  const int k_iter = schedule.iterations;
  const TimeNs span = PipelineSpan(schedule, totals, result);
  const std::vector<TimeNs> tail_start =
      CopyReduce(cluster, schedule, options, costs, *totals, result);
  double sum_ratio = 0, sum_idle = 0, sum_busy = 0;
  TimeNs end = 0;
  TimeNs busiest = 0, longest_span = 0;  // for R3, over all simulated iterations
  for (int k = 0; k < p; ++k) {
    const RankTotals& t = totals->ranks[k];
    StageResult& sr = r.per_rank[k];
    sr.memory.activations_peak = t.peak_activations;
    sr.memory.comm_buffers_peak = t.peak_comm;
    sr.memory.workspace_peak = t.peak_workspace;
    const TimeNs busy = t.busy_ns / k_iter;
    sr.busy_ns = busy;
    sr.first_start_ns = t.first_start_ns;
    sr.last_end_ns = t.last_end_ns;
    sr.bubble_ratio = span > 0 ? 1.0 - static_cast<double>(busy) / span : 0.0;
    sr.bubble_fraction_of_ideal = busy > 0 ? static_cast<double>(span - busy) / busy : 0.0;
    sum_ratio += sr.bubble_ratio;
    sum_idle += static_cast<double>(span - busy);
    sum_busy += static_cast<double>(busy);
    busiest = std::max(busiest, t.busy_ns);
    longest_span = std::max(longest_span, t.last_end_ns - t.first_start_ns);
    if (!schedule.flush) {
      // Weight stashing: one version per in-flight micro-batch (SOSP'19 §3.3).
      sr.weight_versions = std::max(1, sr.peak_inflight_microbatches);
      sr.memory.stashed_weights = (sr.weight_versions - 1) * sr.memory.weights;
    }
    // --sharded-state fsdp2: the gradients are made in the backward, in peak_live (the engine's
    // sweep adds them at the rank's first backward's end, gradients_from_ns), not held all step.
    sr.peak_memory_bytes = sr.HeldAllStepBytes() + t.peak_live;
    sr.fits_memory = r.memory_limit_bytes <= 0 || sr.peak_memory_bytes <= r.memory_limit_bytes;
    internal::TailCollectives(cluster, schedule, in.table, in.partition, costs, options, &sr);
    r.allreduce_ns = std::max(r.allreduce_ns, sr.allreduce_ns);
    r.allreduce_hidden_ns = std::max(r.allreduce_hidden_ns, sr.allreduce_hidden_ns);
    r.optimizer_ns = std::max(r.optimizer_ns, sr.optimizer_ns);
    r.overlap_grad_reduce = r.overlap_grad_reduce || sr.grad_buckets > 0;
    r.allgather_ns = std::max(r.allgather_ns, sr.allgather_ns);
    r.sharding_exposed_ns = std::max(r.sharding_exposed_ns, sr.sharding_exposed_ns);
    r.tp_comm_ns = std::max(r.tp_comm_ns, sr.tp_comm_ns);
    end = std::max(end, (k_iter > 1 ? span : tail_start[k]) + sr.copy_reduce_ns + sr.allreduce_ns);
  }
  r.bubble_ratio = sum_ratio / p;
  r.bubble_fraction_of_ideal = sum_busy > 0 ? sum_idle / sum_busy : 0.0;
  r.zb_bubble_rate = longest_span > 0
                         ? 1.0 - static_cast<double>(busiest) / static_cast<double>(longest_span)
                         : 0.0;
  r.optimizer_estimated = options.config.optimizer_step.time_ns == 0 && r.optimizer_ns > 0;
  r.iteration_ns = end + r.optimizer_ns + r.allgather_ns;
}

// Throughput (samples, tokens, TFLOP/s, MFU) of the simulated iteration.
void Throughput(const Model& model, const Cluster& cluster, const Schedule& schedule,
                const SimOptions& options, SimResult* result) {
  if (result->iteration_ns <= 0) {
    result->notes.push_back(
        "the iteration takes 0 ns (every cost is zero): throughput is undefined");
    return;
  }
  const double seconds = static_cast<double>(result->iteration_ns) / kNsPerS;
  result->samples_per_s = static_cast<double>(result->global_batch) / seconds;
  if (model.sequence_length) result->tokens_per_s = result->samples_per_s * *model.sequence_length;
  if (auto flops = model.ForwardFlopsPerSample()) {
    // Forward + backward = 3x the forward FLOPs (the backward costs two
    // forwards); recomputation is not counted, as in MFU's definition.
    ParallelLayout layout = options.config.layout;
    layout.pipeline_stages = schedule.num_ranks;
    const double gpus = static_cast<double>(layout.Gpus());
    result->tflops_per_gpu = 3.0 * *flops * result->samples_per_s / gpus / 1e12;
    if (cluster.gpu.peak_tflops > 0) {
      result->mfu = *result->tflops_per_gpu / cluster.gpu.peak_tflops;
    }
  }
}

// Everything after the replay: metrics, the critical path and notes.
void Metrics(const ReplayInputs& in, EngineTotals* totals, SimResult* result) {
  const Cluster& cluster = in.cluster;
  const Schedule& schedule = in.schedule;
  const SimOptions& options = in.options;
  PipelineMetrics(in, totals, result);
  if (result->optimizer_estimated) {
    // options.config.memory is one GPU's share at t > 1: the note gives the
    // bytes of a whole parameter.
    result->notes.push_back(fmt::format(
        "optimizer step estimated at {:.3f} ms: {:g} bytes per parameter (gradient read, main "
        "parameters and Adam moments read and written, parameters written) over {:g}% of {:g} "
        "GB/s HBM; give --optimizer-step-us to use a measured time",
        NsToMs(result->optimizer_ns),
        internal::OptimizerBytesPerParam(options.config.memory) *
            options.config.layout.tensor_parallel,
        internal::kOptimizerMemoryEfficiency * 100, cluster.gpu.memory_bandwidth_gbps));
  }
  if (options.record_timeline && options.critical_path && !result->ops.empty()) {
    result->critical_path = ComputeCriticalPath(schedule, result->ops, result->transfers);
    for (const CriticalStep& step : result->critical_path->steps) {
      if (step.kind != CriticalStep::Kind::kCompute) continue;
      const Action& a = result->ops[step.op].action;
      result->critical_path->tp_comm_ns += in.costs[a.stage].TpCommNs(a.kind);
    }
  }
  if (!schedule.flush) {
    result->notes.push_back(fmt::format(
        "{} is asynchronous: no flush between iterations, weights updated while micro-batches "
        "are in flight, so training semantics change (weight stashing keeps each micro-batch's "
        "forward and backward on one version); times are the steady state over {} simulated "
        "iterations, the first taking {:.3f} ms",
        schedule.name, schedule.iterations, NsToUs(result->first_iteration_ns) / 1e3));
  }
  Throughput(in.model, cluster, schedule, options, result);
}

// Each rank's tensor-parallel communication per iteration.
void TensorParallelTimes(const Schedule& schedule, const std::vector<StageCost>& costs,
                         SimResult* result) {
  for (int k = 0; k < schedule.num_ranks; ++k) {
    TimeNs comm = 0;
    for (const Action& a : schedule.actions[k]) comm += costs[a.stage].TpCommNs(a.kind);
    result->per_rank[k].tp_comm_ns = comm / std::max(1, schedule.iterations);
    TimeNs ep = 0;
    for (const Action& a : schedule.actions[k]) {
      const StageCost& c = costs[a.stage];
      ep += a.kind == OpKind::kForward          ? c.ep_forward_ns + c.etp_forward_ns
            : a.kind == OpKind::kBackwardWeight ? 0
                                                : c.ep_backward_ns + c.etp_backward_ns;
    }
    result->ep_comm_ns = std::max(result->ep_comm_ns, ep / std::max(1, schedule.iterations));
  }
}

// The cluster as one simulated GPU of each t x cp group sees it (rank order
// t, cp, p, d; sim/training_config.h): its node holds gpus_per_node / (t x
// cp) groups, so the pipeline's and the data-parallel links follow from the
// folded node size; a group larger than a node spans (t x cp) / gpus_per_node
// whole nodes (nodes_per_gpu) and every pipeline hop leaves the node.
Result<Cluster> GroupCluster(const Cluster& cluster, int t, int cp) {
  if (t == 1 && cp == 1) return cluster;
  PIPECAST_RETURN_IF_ERROR(CheckTensorParallelFitsNode(t, cluster));
  const int span = t * cp;
  if (span > cluster.gpus_per_node && span % cluster.gpus_per_node != 0) {
    return Status::InvalidArgument(fmt::format(
        "--context-parallel {} with --tensor-parallel {}: a group of t x cp = {} GPUs neither "
        "fits in nor fills whole nodes of {} GPUs; use a cp with t x cp dividing {} or a "
        "multiple of it",
        cp, t, span, cluster.gpus_per_node, cluster.gpus_per_node));
  }
  if (span < cluster.gpus_per_node && cluster.gpus_per_node % span != 0) {
    return Status::InvalidArgument(fmt::format(
        "--context-parallel {} with --tensor-parallel {}: t x cp = {} does not divide the {} "
        "GPUs of a node; use a cp with t x cp dividing {} or a multiple of it",
        cp, t, span, cluster.gpus_per_node, cluster.gpus_per_node));
  }
  Cluster grouped = cluster;
  grouped.gpus_per_node = std::max(1, cluster.gpus_per_node / span);
  grouped.nodes_per_gpu = std::max(1, span / cluster.gpus_per_node);
  // Each of a group's GPUs moves its own share through its own share of the
  // NICs: the folded "GPU" keeps one GPU's share.
  grouped.inter_node.bandwidth_gbps = cluster.NetworkGbpsPerGpu();
  grouped.nics_per_node = 0;
  return grouped;
}

}  // namespace

namespace internal {

Result<SimResult> SimulateWith(EngineFn engine, const Model& model, const Cluster& cluster,
                               const Schedule& schedule, const SimOptions& options) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  PIPECAST_RETURN_IF_ERROR(ValidateSchedule(schedule));
  if (model.layers.empty()) return Status::InvalidArgument("the model has no layers");
  // Before anything is summed: every total below stays inside 64 bits.
  PIPECAST_RETURN_IF_ERROR(CheckConfigMatchesSchedule(options.config, schedule));
  const TrainingConfig& config = options.config;
  PIPECAST_RETURN_IF_ERROR(
      CheckTotals(model, cluster,
                  TotalsInput{config.microbatch_size, schedule.num_microbatches,
                              schedule.num_stages, config.memory, config.optimizer_step.time_ns}));
  const int t = config.layout.tensor_parallel;
  PIPECAST_RETURN_IF_ERROR(CheckContextParallelCosts(model, config.layout.context_parallel));
  PIPECAST_RETURN_IF_ERROR(CheckExpertParallelCosts(model, config.layout.expert_parallel,
                                                    config.layout.expert_tensor_parallel));
  PIPECAST_ASSIGN_OR_RETURN(Cluster grouped,
                            GroupCluster(cluster, t, config.layout.context_parallel));
  PIPECAST_RETURN_IF_ERROR(CheckTensorParallelHeads(model, t));
  PIPECAST_RETURN_IF_ERROR(CheckTensorParallelCosts(model, t, config.layout.sequence_parallel));
  // From here on the options' memory is one GPU's share of each parameter.
  SimOptions per_gpu = options;
  per_gpu.config.memory = config.PerGpuMemory();
  StageCostOptions cost_options = StageCostOptionsFor(config, cluster);
  cost_options.split_backward = schedule.split_backward;
  const StageCostTable table(model, cost_options);
  PIPECAST_ASSIGN_OR_RETURN(std::vector<StageLayers> partition,
                            ResolvePartition(model, cluster, table, schedule, options));

  SimResult result;
  std::vector<StageCost> costs = table.Stages(partition);
  result.notes = table.Notes();
  // Measured means measured: an analytic profile is an estimate even where no
  // size was interpolated.
  if (model.source.method == "analytic") {
    result.notes.insert(result.notes.begin(),
                        "costs are estimates of the analytic profiler (source.method analytic), "
                        "not measurements");
  }
  result.costs_measured = table.CostsMeasured() && model.source.method != "analytic";
  PIPECAST_RETURN_IF_ERROR(CheckSplitBackward(schedule, partition, costs));
  PIPECAST_RETURN_IF_ERROR(FillStatic(cluster, schedule, per_gpu, partition, costs, &result));
  TensorParallelTimes(schedule, costs, &result);
  internal::ApplyPerOpCollectives(model, grouped, schedule, per_gpu, partition, &costs, &result);

  EngineTotals totals;
  totals.ranks.assign(schedule.num_ranks, RankTotals{});
  totals.iteration_end_ns.assign(schedule.iterations, 0);
  PIPECAST_RETURN_IF_ERROR(engine(grouped, schedule, costs, per_gpu, &result, &totals));
  Metrics(ReplayInputs{.model = model,
                       .cluster = grouped,
                       .schedule = schedule,
                       .options = per_gpu,
                       .table = table,
                       .partition = partition,
                       .costs = costs},
          &totals, &result);
  return result;
}

}  // namespace internal

Result<SimResult> Simulate(const Model& model, const Cluster& cluster, const Schedule& schedule,
                           const SimOptions& options) {
  return internal::SimulateWith(&internal::RunDataflowEngine, model, cluster, schedule, options);
}

}  // namespace pipecast
