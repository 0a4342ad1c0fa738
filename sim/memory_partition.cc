#include "sim/memory_partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "sim/internal/min_max_split.h"
#include "sim/schedule_traits.h"

namespace pipecast {

namespace {

// Layers whose unsharded parameters a ZeRO-3 rank holds at once (the
// simulator's rule, sim/simulator.h): the running layer and the prefetched one.
constexpr int kGatheredLayers = 2;

// In-flight activations of stage `stage`: micro-batches before their input gradient hold what
// the forward kept, those past it (split backwards, when the model gives weight_grad_bytes)
// what W keeps; plus one rebuild, and what I allocates beyond the forward's bytes.
Bytes ActivationMemory(const StageCost& sc, const PipelineShape& shape, int stage, int inflight) {
  const ScheduleTraits& traits = TraitsOf(shape.schedule);
  if (!sc.weight_grad_known || traits.before_input_gradient == nullptr) {
    return inflight * sc.held_bytes + sc.recomputed_bytes;
  }
  const int before =
      std::min(inflight, traits.before_input_gradient(stage, shape.stages, shape.microbatches));
  return before * sc.held_bytes + (inflight - before) * sc.weight_grad_bytes +
         sc.ActivationsAtStart(OpKind::kBackwardInput);
}

// Prefix sums over the layers, for bounds that only grow with a stage's
// layers (what MinMaxSplit needs to look at few cuts).
struct Prefix {
  std::vector<int64_t> sums;  // sums[l]: over layers [0, l)
  template <class F>
  Prefix(const StageCostTable& t, F per_layer) : sums(t.NumLayers() + 1, 0) {
    for (int l = 0; l < t.NumLayers(); ++l) sums[l + 1] = sums[l] + per_layer(t.Layer(l));
  }
  int64_t Over(int first, int last) const { return sums[last + 1] - sums[first]; }
};

// Range-monotone lower bound of TrainingTimeNs: forward + backward, plus the
// rerun forward under full recomputation of each layer (and under selective
// when every layer or none gives the attention core, where its sum is
// monotone too; under per-op recomputation its layers' reruns). The
// checkpointing modes (every:K, Megatron-LM's methods) rerun blocks by their
// place in the stage: no rerun is counted.
Prefix TimeLowerBound(const StageCostTable& t) {
  const Recompute mode = t.options().recompute;
  const bool each_layer = t.options().recompute_layers.method == RecomputeMethod::kEachLayer;
  int with_core = 0;
  for (int l = 0; l < t.NumLayers(); ++l) with_core += t.Layer(l).attention_core_bytes.has_value();
  const bool selective_sums =
      mode == Recompute::kSelective && (with_core == 0 || with_core == t.NumLayers());
  return Prefix(t, [&](const LayerCost& c) -> int64_t {
    TimeNs ns = c.forward_ns + c.backward_ns;
    if (mode == Recompute::kFull && each_layer) ns += c.forward_ns;
    if (mode == Recompute::kOp && c.op_saved_bytes && c.op_recompute_ns) ns += *c.op_recompute_ns;
    if (selective_sums && c.attention_core_bytes.has_value()) {
      ns += c.attention_core_ns.value_or(0);
    }
    return ns;
  });
}

// Everything MemoryAwarePartition evaluates for one shape.
class StageMemory {
 public:
  StageMemory(const StageCostTable& t, const PipelineShape& shape, const MemoryConfig& memory)
      : t_(t),
        shape_(shape),
        memory_(memory),
        traits_(TraitsOf(shape.schedule)),
        per_param_(ShardedBytesPerParam(memory, shape.data_parallel)),
        per_expert_param_(
            ExpertBytesPerParam(per_param_, memory, t.options().tensor_parallel,
                                t.options().expert_parallel * t.options().expert_tensor_parallel)) {
    const int n = t.NumLayers();
    bool all_checkpoints = true, no_checkpoints = true;
    for (int l = 0; l < n; ++l) {
      all_checkpoints &= t.Layer(l).checkpoint_bytes.has_value();
      no_checkpoints &= !t.Layer(l).checkpoint_bytes.has_value();
    }
    // Full recomputation where no layer gives its checkpoint: every stage
    // keeps only its input and rebuilds all its layers' activations at once
    // (StageCostTable::Stage's whole-stage rule), so the rebuild alone, the
    // sum of the stage's activations, bounds its memory from below.
    const bool each_layer = t.options().recompute_layers.method == RecomputeMethod::kEachLayer;
    whole_stage_rebuild_ =
        t.options().recompute == Recompute::kFull && each_layer && no_checkpoints;
    for (int l = 0; l < n; ++l) all_weight_grad_ &= t.Layer(l).weight_grad_bytes.has_value();
    bool all_cores = true;
    for (int l = 0; l < n; ++l) all_cores &= t.Layer(l).attention_core_bytes.has_value();
    parameters_.assign(n + 1, 0);
    expert_parameters_.assign(n + 1, 0);
    held_.assign(n + 1, 0);
    weight_grad_.assign(n + 1, 0);
    activations_.assign(n + 1, 0);
    std::vector<int64_t> rebuilt(n, 0);
    for (int l = 0; l < n; ++l) {
      const LayerCost& c = t.Layer(l);
      // What any stage's forward keeps of this layer at least (StageCostTable::Stage): its
      // activations, less the attention core under selective recomputation, its checkpoint
      // under full recomputation when every layer gives one (else a stage keeps only its
      // input: no floor).
      int64_t held = 0;
      switch (t.options().recompute) {
        case Recompute::kOff:
          held = c.activation_bytes;
          break;
        case Recompute::kSelective:
          held = c.activation_bytes - c.attention_core_bytes.value_or(0);
          break;
        case Recompute::kFull:
          held = c.checkpoint_bytes.value_or(0);
          floor_ &= all_checkpoints && each_layer;
          break;
        case Recompute::kOp:
          held = c.op_saved_bytes && c.op_recompute_ns
                     ? std::min(*c.op_saved_bytes, c.activation_bytes)
                     : c.activation_bytes;
          break;
        case Recompute::kEvery:  // a block keeps nothing or all by its place in the stage
          floor_ = false;
          break;
      }
      floor_ &= held >= 0;
      // What B (or I) rebuilds at least: the largest layer's activations under full
      // recomputation, its attention core under selective, when every layer gives them
      // (StageCostTable::Stage); nothing otherwise.
      if (t.options().recompute == Recompute::kFull && all_checkpoints && each_layer) {
        rebuilt[l] = c.activation_bytes;
      } else if (t.options().recompute == Recompute::kOp && c.op_saved_bytes && c.op_recompute_ns) {
        rebuilt[l] = std::max<Bytes>(0, c.activation_bytes - *c.op_saved_bytes);
      } else if (t.options().recompute == Recompute::kSelective && all_cores) {
        rebuilt[l] = c.attention_core_bytes.value_or(0);
      }
      const StageCost one = t.StageBytes(StageLayers{l, l});
      parameters_[l + 1] = parameters_[l] + one.parameters - one.expert_parameters;
      expert_parameters_[l + 1] = expert_parameters_[l] + one.expert_parameters;
      held_[l + 1] = held_[l] + held;
      weight_grad_[l + 1] = weight_grad_[l] + c.weight_grad_bytes.value_or(0);
      activations_[l + 1] = activations_[l] + c.activation_bytes;
    }
    rebuilt_ = RangeMax(std::move(rebuilt));
    if (Gathers()) {
      // Each layer's gathered bytes rounded once here, not once per range the search asks.
      std::vector<int64_t> gathered(n);
      for (int l = 0; l < n; ++l) gathered[l] = t.GatheredBytes(l, memory_);
      gathered_ = RangeMax(std::move(gathered));
    }
  }

  StageMemoryParts Parts(int stage, int first, int last) const {
    const StageCost sc = t_.StageBytes(StageLayers{first, last});  // no times read
    StageMemoryParts parts;
    const ParameterMemory m =
        ParameterMemoryOf(sc.parameters, sc.expert_parameters, per_param_, per_expert_param_);
    parts.weights = m.weights;
    parts.gradients = m.gradients;
    parts.optimizer = m.optimizer;
    const int inflight = Inflight(stage);
    // PipeDream stashes one weight version per in-flight micro-batch.
    if (shape_.schedule == ScheduleKind::kPipeDream) parts.weights += (inflight - 1) * m.weights;
    if (Gathers()) parts.weights += kGatheredLayers * Gathered(first, last);
    parts.activations = ActivationMemory(sc, shape_, stage, inflight);
    const Bytes output = last + 1 < t_.NumLayers() ? sc.output_bytes : 0;
    parts.other = sc.workspace_bytes + sc.input_bytes + output;
    return parts;
  }
  Bytes Total(int stage, int first, int last) const { return Parts(stage, first, last).Total(); }

  // At most Total(stage, first, last), and never smaller for a range around
  // [first, last]: Parts() less the workspace and the stage's input and
  // output buffers, with
  // the activations at their floor (the in-flight micro-batches holding at
  // least the layers' share of what F keeps, or past I of what W keeps, plus
  // the smallest rebuild).
  Bytes LowerBound(int stage, int first, int last) const {
    // Truncating is cheaper than ParameterBytes' rounding and never above it:
    // the three rounded parts sum to at least the truncated whole less 2.
    // Routed experts' parameters at their own bytes (ParameterMemoryOf): two
    // roundings per part where a stage has both kinds.
    const double params = static_cast<double>(parameters_[last + 1] - parameters_[first]);
    const double experts =
        static_cast<double>(expert_parameters_[last + 1] - expert_parameters_[first]);
    const Bytes slack = experts > 0 ? 2 : 0;
    Bytes b = std::max<Bytes>(
        0, static_cast<Bytes>(params * per_param_.Total() + experts * per_expert_param_.Total()) -
               2 - 2 * slack);
    const int inflight = Inflight(stage);
    if (shape_.schedule == ScheduleKind::kPipeDream && inflight > 1) {
      b += (inflight - 1) *
           std::max<Bytes>(0, static_cast<Bytes>(params * per_param_.weights +
                                                 experts * per_expert_param_.weights) -
                                  1 - slack / 2);
    }
    if (Gathers()) b += kGatheredLayers * Gathered(first, last);
    if (floor_) {
      // ActivationMemory()'s two rules, each at its floor: the smaller of them.
      const Bytes held = held_[last + 1] - held_[first];
      Bytes activations = std::max(inflight, 0) * held;
      if (traits_.before_input_gradient != nullptr) {
        const int before =
            std::clamp(traits_.before_input_gradient(stage, shape_.stages, shape_.microbatches), 0,
                       std::max(inflight, 0));
        const Bytes kept = weight_grad_[last + 1] - weight_grad_[first];
        const Bytes split = before * held + (std::max(inflight, 0) - before) * kept;
        // With every layer's weight_grad_bytes every stage takes the split rule.
        activations = all_weight_grad_ ? split : std::min(activations, split);
      }
      b += activations + rebuilt_.Max(first, last);
    } else if (whole_stage_rebuild_) {
      // Without this floor a stage far over the limit (10 GB of a rebuild)
      // passed the search's filter, and every cut of it was tried and
      // refused: O(n) cuts per state, O(n^2) a search (40k layers: minutes).
      b += activations_[last + 1] - activations_[first];
    }
    return b;
  }

 private:
  int Inflight(int stage) const {
    return traits_.inflight_microbatches(stage, shape_.stages, shape_.microbatches);
  }
  bool Gathers() const { return memory_.zero >= 3 && shape_.data_parallel > 1; }
  // The unsharded bytes of the stage's largest layer. REQUIRES: Gathers().
  Bytes Gathered(int first, int last) const { return gathered_.Max(first, last); }

  const StageCostTable& t_;
  PipelineShape shape_;
  MemoryConfig memory_;
  const ScheduleTraits& traits_;
  ShardedBytes per_param_;
  ShardedBytes per_expert_param_;  // ExpertBytesPerParam
  // Prefix sums over layers [0, l) at index l.
  // Prefix sums over layers: parameters other than routed experts, routed experts.
  std::vector<int64_t> parameters_, expert_parameters_, held_, weight_grad_, activations_;
  RangeMax rebuilt_;
  // Per layer, its unsharded bytes (ParameterBytes), when Gathers().
  RangeMax gathered_;
  bool floor_ = true;                 // LowerBound may count activations
  bool whole_stage_rebuild_ = false;  // full recomputation by the whole-stage rule
  bool all_weight_grad_ = true;
};

}  // namespace

PipelineShape ShapeOf(const TrainingConfig& config) {
  const ParallelLayout& l = config.layout;
  return PipelineShape{
      config.schedule,     l.pipeline_stages,    l.chunks,
      config.microbatches, l.GradientReplicas(), TraitsOf(config.schedule).bidirectional};
}

PipelineShape ShapeOf(const Schedule& schedule, const TrainingConfig& config) {
  PipelineShape shape;
  shape.schedule = config.schedule;
  shape.stages = schedule.num_ranks;
  shape.chunks = std::max(1, schedule.ChunksPerRank());
  shape.microbatches = schedule.num_microbatches / std::max(1, schedule.iterations);
  shape.data_parallel = config.layout.GradientReplicas();
  shape.bidirectional = schedule.bidirectional;
  return shape;
}

StageMemoryParts EstimateStageMemoryParts(const StageCostTable& table, const PipelineShape& shape,
                                          const MemoryConfig& memory, int stage,
                                          StageLayers layers) {
  return StageMemory(table, shape, memory).Parts(stage, layers.first_layer, layers.last_layer);
}

std::vector<StageLayers> TimeBalancedSplit(const StageCostTable& table, int stages) {
  const Prefix lower = TimeLowerBound(table);
  return internal::MinMaxSplit(
      table.NumLayers(), stages,
      [&](int, int first, int last) {
        return table.TrainingTimeNs(StageLayers{first, last});
      },
      [&](int, int first, int last) { return lower.Over(first, last); },
      [](int, int, int) { return true; }, [](int, int, int) { return true; });
}

MemoryAwareSplit MemoryAwarePartition(const StageCostTable& table, const PipelineShape& shape,
                                      const MemoryConfig& memory, Bytes capacity,
                                      const std::vector<StageLayers>* time_balanced) {
  MemoryAwareSplit out;
  const int n = table.NumLayers();
  const int p = shape.stages;
  std::vector<StageLayers> own;
  if (time_balanced == nullptr) {
    own = TimeBalancedSplit(table, shape.bidirectional ? p : p * shape.chunks);
    time_balanced = &own;
  }
  out.partition = *time_balanced;
  if (shape.bidirectional) {
    // p model stages, balanced on time; virtual stage p+k is a second copy of stage k
    // (sim/schedule.h), on the rank that holds it in the V.
    for (int k = 0; k < p; ++k) out.partition.push_back(out.partition[k]);
    return out;
  }
  if (shape.chunks > 1 || capacity <= 0) return out;
  const StageMemory mem(table, shape, memory);
  // The time-balanced split is the answer whenever all its stages fit: the
  // constrained programme then makes the same choices (a cut it prefers is a
  // cut of the unconstrained one that fits).
  bool all_fit = true;
  for (int s = 0; s < p && all_fit; ++s) {
    all_fit = mem.Total(s, out.partition[s].first_layer, out.partition[s].last_layer) <= capacity;
  }
  if (all_fit) return out;
  const Prefix lower_time = TimeLowerBound(table);
  // The memory estimates and bounds, counted (MemoryAwareSplit::evaluations).
  auto total = [&](int stage, int first, int last) {
    ++out.evaluations;
    return mem.Total(stage, first, last);
  };
  auto lower = [&](int stage, int first, int last) {
    ++out.evaluations;
    return mem.LowerBound(stage, first, last);
  };
  out.partition = internal::MinMaxSplit(
      n, p,
      [&](int, int first, int last) {
        return table.TrainingTimeNs(StageLayers{first, last});
      },
      [&](int, int first, int last) { return lower_time.Over(first, last); },
      [&](int stage, int first, int last) { return total(stage, first, last) <= capacity; },
      [&](int stage, int first, int last) { return lower(stage, first, last) <= capacity; });
  if (!out.partition.empty()) return out;
  // Nothing fits: the split that needs the least memory, for the closest
  // miss, and its fullest stage.
  out.fits = false;
  out.partition = internal::MinMaxSplit(
      n, p, total, lower, [](int, int, int) { return true; }, [](int, int, int) { return true; });
  Bytes worst_bytes = 0;
  for (int s = 0; s < p; ++s) {
    const Bytes b = mem.Total(s, out.partition[s].first_layer, out.partition[s].last_layer);
    if (b > worst_bytes) {
      worst_bytes = b;
      out.worst_stage = s;
    }
  }
  const StageLayers& worst = out.partition[out.worst_stage];
  out.worst_parts = mem.Parts(out.worst_stage, worst.first_layer, worst.last_layer);
  return out;
}

ModelEnds EndsOf(const Model& model) {
  std::vector<std::string> names;
  names.reserve(model.layers.size());
  for (const Layer& layer : model.layers) names.push_back(layer.name);
  return EndsOf(names);
}

Result<MemoryAwareSplit> PartitionFor(const StageCostTable& table, ModelEnds ends,
                                      const PipelineShape& shape,
                                      const std::vector<int>& stage_rank,
                                      const TrainingConfig& config, Bytes capacity,
                                      const std::vector<StageLayers>* time_balanced) {
  const MemoryConfig memory = config.PerGpuMemory();
  if (config.partition.rule != PartitionRule::kEven) {
    return MemoryAwarePartition(table, shape, memory, capacity, time_balanced);
  }
  const int p = shape.stages;
  std::vector<int> model_stage_rank = stage_rank;
  if (shape.bidirectional) model_stage_rank.resize(std::min<size_t>(stage_rank.size(), p));
  PIPECAST_ASSIGN_OR_RETURN(
      std::vector<StageLayers> even,
      EvenPartition(table.NumLayers(), ends, p, model_stage_rank, config.partition.even));
  MemoryAwareSplit out;
  out.partition = std::move(even);
  if (shape.bidirectional) {
    for (int k = 0; k < p; ++k) out.partition.push_back(out.partition[k]);
    return out;
  }
  if (shape.chunks > 1 || capacity <= 0) return out;
  // The same estimate as the balanced split's: the fullest stage, when one is over.
  const StageMemory mem(table, shape, memory);
  Bytes worst_bytes = 0;
  for (int s = 0; s < p; ++s) {
    const Bytes b = mem.Total(s, out.partition[s].first_layer, out.partition[s].last_layer);
    out.fits = out.fits && b <= capacity;
    if (b > worst_bytes) {
      worst_bytes = b;
      out.worst_stage = s;
    }
  }
  if (!out.fits) {
    const StageLayers& worst = out.partition[out.worst_stage];
    out.worst_parts = mem.Parts(out.worst_stage, worst.first_layer, worst.last_layer);
  }
  return out;
}

Result<MemoryAwareSplit> DefaultPartition(const Model& model, const Cluster& cluster,
                                          const Schedule& schedule, const TrainingConfig& config) {
  const StageCostTable table(model, StageCostOptionsFor(config, cluster));
  const int model_stages = schedule.NumModelStages();
  PIPECAST_RETURN_IF_ERROR(CheckStageCount(model_stages, table.NumLayers()));
  const PipelineShape shape = ShapeOf(schedule, config);
  if (!shape.bidirectional && schedule.num_stages != shape.stages * shape.chunks) {
    // Stages that are no whole number per rank (a schedule text): balanced on time alone,
    // which has no per-rank count for Megatron-LM's rule to follow.
    if (config.partition.rule == PartitionRule::kEven) {
      return Status::InvalidArgument(fmt::format(
          "--partition even: the schedule's {} stages are no whole number per each of its {} "
          "ranks: give --partition as a list of layer ranges",
          schedule.num_stages, schedule.num_ranks));
    }
    MemoryAwareSplit out;
    out.partition = TimeBalancedSplit(table, model_stages);
    return out;
  }
  return PartitionFor(table, EndsOf(model), shape, schedule.stage_rank, config,
                      MemoryLimitBytes(cluster.gpu));
}

}  // namespace pipecast
