#include "sim/internal/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "sim/gathered_bytes.h"
#include "sim/memory.h"

namespace pipecast::internal {

namespace {

// Layers whose unsharded parameters a ZeRO-3 rank holds at once: the running
// layer's and the one prefetched for the next (FSDP's default
// forward/backward prefetch of one unit).
constexpr int kGatheredLayers = 2;

// What the per-op collectives add to a rank's list: each op's ActionDurationNs with `after`
// less with `before`. A pair's halves depend on nothing but its two stages and the backward's
// kind, and a rank's pairs repeat a few such combinations (DualPipe's: its two stages, B or I),
// so each is worked out once per list: under the layered rule each costs a two-stream replay
// of the pair's layers, and worked out per op they were a fifth of the planner's search on
// DeepSeek-V3 at 2048 GPUs (ZeRO 2 and 3 candidates).
TimeNs LengtheningNs(const std::vector<StageCost>& before, const std::vector<StageCost>& after,
                     const std::vector<Action>& list, const PairOverlap& pairs) {
  struct Known {
    int f = 0, b = 0;
    OpKind b_kind = OpKind::kBackward;
    PairHalvesNs added;  // after's halves less before's
  };
  std::vector<Known> known;
  TimeNs exposed = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (!a.overlapped) {
      exposed += after[a.stage].DurationNs(a.kind) - before[a.stage].DurationNs(a.kind);
      continue;
    }
    const bool forward = a.kind == OpKind::kForward;
    const Action& f = forward ? a : list[i - 1];
    const Action& b = forward ? list[i + 1] : a;
    auto it = std::find_if(known.begin(), known.end(), [&](const Known& k) {
      return k.f == f.stage && k.b == b.stage && k.b_kind == b.kind;
    });
    if (it == known.end()) {
      const PairHalvesNs x = OverlappedPairNs(after[f.stage], after[b.stage], b.kind, pairs);
      const PairHalvesNs y = OverlappedPairNs(before[f.stage], before[b.stage], b.kind, pairs);
      known.push_back(Known{f.stage, b.stage, b.kind,
                            PairHalvesNs{x.forward - y.forward, x.backward - y.backward}});
      it = known.end() - 1;
    }
    exposed += forward ? it->added.forward : it->added.backward;
  }
  return exposed;
}

}  // namespace

CollectiveGroup WithContextParallel(const Cluster& cluster, CollectiveGroup group, int cp) {
  if (cp <= 1) return group;
  group.ranks *= cp;
  if (cluster.nodes_per_gpu > 1) {  // each simulated GPU's cp GPUs spread over its nodes
    group.nodes *= cluster.nodes_per_gpu;
    group.per_node = std::max(1, cp / cluster.nodes_per_gpu);
  } else {
    group.per_node *= cp;
  }
  return group;
}

CollectiveGroup DataParallelGroup(const Cluster& cluster, int ranks, int rank, int d, int cp) {
  return WithContextParallel(cluster, StridedGroup(cluster, rank, ranks, d), cp);
}

ShardGroups ShardGroupsOf(const Cluster& cluster, int ranks, int rank, int d,
                          const ShardingConfig& sharding, int cp) {
  const int g = sharding.shard_group > 0 && sharding.shard_group < d ? sharding.shard_group : d;
  ShardGroups groups;
  groups.shard_size = g * cp;
  groups.shard = WithContextParallel(cluster, StridedGroup(cluster, rank, ranks, g), cp);
  groups.replicas = StridedGroup(cluster, rank, g * ranks, d / g);
  return groups;
}

CollectiveGroup ExpertDataParallelGroup(const Cluster& cluster, int ranks, int rank,
                                        const ParallelLayout& layout) {
  const int d = layout.data_parallel;
  const int group = layout.tensor_parallel * layout.context_parallel;  // one simulated GPU's
  const int shards = layout.ExpertShards();
  const int edp = layout.ExpertDataParallel();
  if (shards % group == 0) {  // every (ep x etp) / (t x cp)-th replica
    return StridedGroup(cluster, rank, ranks * (shards / group), edp);
  }
  if (group % shards == 0) {  // (t x cp) / (ep x etp) GPUs of each replica's group
    return WithContextParallel(cluster, StridedGroup(cluster, rank, ranks, d), group / shards);
  }
  CollectiveGroup g = DataParallelGroup(cluster, ranks, rank, d, layout.context_parallel);
  g.ranks = edp;  // neither divides the other: the data-parallel group's placement, edp GPUs
  return g;
}

TimeNs ShardedGradientReductionNs(const Cluster& cluster, const ShardGroups& groups,
                                  Bytes gradients, int pieces) {
  TimeNs ns = CollectiveNs(cluster, Collective::kReduceScatter, gradients, groups.shard, pieces);
  if (groups.replicas.ranks > 1) {
    ns += CollectiveNs(cluster, Collective::kAllReduce, gradients / groups.shard_size,
                       groups.replicas, pieces);
  }
  return ns;
}

void ApplyPerOpCollectives(const Model& model, const Cluster& cluster, const Schedule& schedule,
                           const SimOptions& options, const std::vector<StageLayers>& partition,
                           std::vector<StageCost>* costs, SimResult* result) {
  const int d = options.config.layout.data_parallel;
  const MemoryConfig& memory = options.config.memory;
  const ShardingConfig& sharding = memory.sharding;
  if (memory.zero < 2 || options.config.layout.GradientReplicas() <= 1) return;
  const std::vector<StageCost> before = *costs;
  // A GPU's routed experts are gathered and reduce-scattered over the edp GPUs holding the same
  // experts (StageGatheredOf), none at edp = 1; without expert or tensor parallelism they are
  // dense parameters of the shard group.
  const ParallelLayout& layout = options.config.layout;
  const double expert_scale = ExpertReductionScale(layout);
  const bool separate_experts = layout.ExpertShards() > 1 || layout.tensor_parallel > 1;
  std::vector<Bytes> held_weights(schedule.num_ranks, 0);  // reshard off: the stages' weights
  bool split_ops = false;
  for (const std::vector<Action>& list : schedule.actions) {
    for (const Action& a : list) split_ops |= a.kind == OpKind::kBackwardInput;
  }
  for (size_t s = 0; s < costs->size(); ++s) {
    StageCost& c = (*costs)[s];
    const int rank = schedule.stage_rank[s];
    const ShardGroups groups = ShardGroupsOf(cluster, schedule.num_ranks, rank, d, sharding,
                                             options.config.layout.context_parallel);
    const int layers = partition[s].last_layer - partition[s].first_layer + 1;
    const StageGathered g = StageGatheredOf(model, partition[s], c, memory, expert_scale);
    const Bytes stage_gathered = g.whole;
    const Bytes largest = g.largest_layer;
    // The stage's local experts move over their edp group; the rest over the shard group.
    const Bytes expert_gathered = separate_experts ? g.experts : 0;
    const int64_t expert_params =
        separate_experts ? ReducedParameters(c.expert_parameters, c.expert_parameters, expert_scale)
                         : 0;
    const int64_t dense_params =
        (separate_experts ? c.parameters - c.expert_parameters
                          : ReducedParameters(c.parameters, c.expert_parameters, expert_scale));
    const CollectiveGroup experts =
        separate_experts ? ExpertDataParallelGroup(cluster, schedule.num_ranks, rank, layout)
                         : CollectiveGroup{};
    TimeNs gather = 0;
    if (memory.zero >= 3) {
      gather = CollectiveNs(cluster, Collective::kAllGather, stage_gathered - expert_gathered,
                            groups.shard, layers);
      if (expert_gathered > 0) {
        gather += CollectiveNs(cluster, Collective::kAllGather, expert_gathered, experts, layers);
      }
    }
    // Without resharding after the forward the backward finds its parameters.
    const TimeNs backward_gather = sharding.reshard_after_forward ? gather : 0;
    TimeNs scatter = 0;
    if (sharding.reduce_every_microbatch) {
      scatter = ShardedGradientReductionNs(
          cluster, groups, ParameterBytes(dense_params, memory.gradient_bytes_per_param), layers);
      if (expert_params > 0) {
        scatter += CollectiveNs(cluster, Collective::kReduceScatter,
                                ParameterBytes(expert_params, memory.gradient_bytes_per_param),
                                experts, layers);
      }
    }
    // With prefetch an op lasts the longer of its compute and its link time;
    // without, each layer waits for its gather and then reduce-scatters.
    const auto with = [&](TimeNs compute, TimeNs comm) {
      return sharding.prefetch ? std::max(compute, comm) : compute + comm;
    };
    c.forward_ns = with(c.forward_ns, gather);
    // Split only where the schedule runs I and W as their own ops; a whole B
    // hides the gathers and reduce-scatters behind all of its compute (FSDP
    // reduce-scatters layer l while layer l-1's backward runs).
    if (c.has_backward_split && split_ops) {
      const TimeNs input = with(c.backward_ns - c.backward_weight_ns, backward_gather);
      c.backward_weight_ns = with(c.backward_weight_ns, scatter);
      c.backward_ns = input + c.backward_weight_ns;
    } else {
      c.backward_ns = with(c.backward_ns, backward_gather + scatter);
    }
    if (memory.zero >= 3) {
      MemoryBreakdown& m = result->per_rank[rank].memory;
      m.gathered_weights = std::max(m.gathered_weights, kGatheredLayers * largest);
      if (!sharding.reshard_after_forward) {
        // The stage's gathered parameters stay from its forwards to its backwards.
        held_weights[rank] += stage_gathered;
        m.gathered_weights = std::max(m.gathered_weights, held_weights[rank]);
      }
    }
  }
  const PairOverlap pairs = options.config.Pairs();
  for (int k = 0; k < schedule.num_ranks; ++k) {
    result->per_rank[k].sharding_exposed_ns =
        LengtheningNs(before, *costs, schedule.actions[k], pairs) /
        std::max(1, schedule.iterations);
  }
}

int64_t DefaultGradBucketParams(int d) {
  return std::max<int64_t>(40'000'000, int64_t{1'000'000} * d);
}

double OptimizerBytesPerParam(const MemoryConfig& memory) {
  // FP8: the step also writes the FP8 weight copies (Transformer Engine
  // casts each weight once per step, on the first micro-batch; Megatron-LM
  // passes is_first_microbatch), charged here once per iteration.
  return memory.gradient_bytes_per_param + 2 * memory.optimizer_bytes_per_param +
         memory.weight_bytes_per_param + memory.fp8_weight_bytes_per_param;
}

TimeNs EstimateOptimizerStepNs(const Cluster& cluster, const SimOptions& options,
                               int64_t parameters) {
  const double bandwidth = cluster.gpu.memory_bandwidth_gbps * 1e9 * kOptimizerMemoryEfficiency;
  if (bandwidth <= 0) return 0;
  // The shard each rank updates: 1/(d x cp), or 1/(G x cp) with hybrid
  // sharding (levels 2, 3).
  const int group =
      (options.config.memory.zero >= 2 && options.config.memory.sharding.shard_group > 0
           ? std::min(options.config.memory.sharding.shard_group,
                      options.config.layout.data_parallel)
           : options.config.layout.data_parallel) *
      options.config.layout.context_parallel;
  const double shards = options.config.memory.zero >= 1 ? group : 1;
  const double bytes =
      static_cast<double>(parameters) / shards * OptimizerBytesPerParam(options.config.memory);
  return static_cast<TimeNs>(std::llround(bytes / bandwidth * 1e9));
}

namespace {

// The buckets of rank `sr` (TailCollectives' contract).
std::vector<GradBucket> RankBuckets(const Schedule& schedule, const StageCostTable& table,
                                    const std::vector<StageLayers>& partition,
                                    const std::vector<StageCost>& costs, int64_t bucket_params,
                                    const PairOverlap& pairs, double expert_scale,
                                    const StageResult& sr) {
  const std::vector<Action>& list = schedule.actions[sr.rank];
  const Action& last = list.back();
  const TimeNs duration = ActionDurationNs(costs, list, list.size() - 1, pairs);
  const TimeNs op_start = sr.last_end_ns - duration;
  const bool produces_gradients =
      last.kind == OpKind::kBackward || last.kind == OpKind::kBackwardWeight;
  std::vector<GradBucket> buckets;
  for (int s = static_cast<int>(partition.size()) - 1; s >= 0; --s) {
    if (schedule.stage_rank[s] != sr.rank) continue;
    const StageLayers& layers = partition[s];
    const bool timed = produces_gradients && s == last.stage;
    auto share_of = [&](int l) {
      const LayerCost& c = table.Layer(l);
      return static_cast<double>(last.kind == OpKind::kBackwardWeight ? c.backward_weight_ns
                                                                      : c.backward_ns);
    };
    double total = 0;
    for (int l = layers.first_layer; l <= layers.last_layer; ++l) total += share_of(l);
    double done = 0;  // backward time of the layers after l, inclusive
    GradBucket open;
    for (int l = layers.last_layer; l >= layers.first_layer; --l) {
      done += share_of(l);
      const StageCost one = table.StageWithoutPairLayers(StageLayers{l, l});
      open.parameters += ReducedParameters(one.parameters, one.expert_parameters, expert_scale);
      open.ready_ns =
          timed && total > 0
              ? op_start +
                    static_cast<TimeNs>(std::llround(static_cast<double>(duration) * done / total))
              : op_start;
      if (open.parameters >= bucket_params || l == layers.first_layer) {
        if (open.parameters > 0) buckets.push_back(open);
        open = GradBucket{};
      }
    }
  }
  return buckets;
}

}  // namespace

void TailCollectives(const Cluster& cluster, const Schedule& schedule, const StageCostTable& table,
                     const std::vector<StageLayers>& partition, const std::vector<StageCost>& costs,
                     const SimOptions& options, StageResult* sr) {
  const int d = options.config.layout.data_parallel;
  const MemoryConfig& memory = options.config.memory;
  const int cp = options.config.layout.context_parallel;
  const CollectiveGroup group = DataParallelGroup(cluster, schedule.num_ranks, sr->rank, d, cp);
  const auto collective_ns = [&](Collective op, Bytes bytes) {
    return CollectiveNs(cluster, op, bytes, group);
  };
  // Expert parallelism: the routed experts' gradients are reduced over the
  // GPUs holding the same experts (docs/simulator.md "Expert parallelism").
  const double expert_scale = ExpertReductionScale(options.config.layout);
  int64_t expert_parameters = 0;
  for (size_t s = 0; s < costs.size(); ++s) {
    if (schedule.stage_rank[s] == sr->rank) expert_parameters += costs[s].expert_parameters;
  }
  const int64_t reduced = ReducedParameters(sr->parameters, expert_parameters, expert_scale);
  const Bytes gradients = ParameterBytes(reduced, memory.gradient_bytes_per_param);
  // Gathered after the step at levels 1 and 2: FP8 with --fp8-param-gather.
  const Bytes weights = ParameterBytes(reduced, memory.GatherBytesPerParam());
  sr->allreduce_ns = 0;
  sr->allgather_ns = 0;
  sr->allreduce_hidden_ns = 0;
  sr->grad_buckets = 0;
  sr->optimizer_ns =
      options.config.optimizer_step.time_ns > 0 || !options.config.optimizer_step.estimate
          ? options.config.optimizer_step.time_ns
          : EstimateOptimizerStepNs(cluster, options, sr->parameters);
  const ShardGroups shards =
      ShardGroupsOf(cluster, schedule.num_ranks, sr->rank, d, memory.sharding, cp);
  // Levels 2 and 3 with no_sync: the accumulated gradients reduce-scattered
  // once, after the rank's last op.
  const TimeNs once = memory.zero >= 2 && !memory.sharding.reduce_every_microbatch && d * cp > 1
                          ? ShardedGradientReductionNs(cluster, shards, gradients, 1)
                          : 0;
  switch (memory.zero) {
    case 0:
      sr->allreduce_ns = collective_ns(Collective::kAllReduce, gradients);
      break;
    case 1:
      sr->allreduce_ns = collective_ns(Collective::kReduceScatter, gradients);
      sr->allgather_ns = collective_ns(Collective::kAllGather, weights);
      break;
    case 2:  // gradients were reduce-scattered during the backwards
      sr->allreduce_ns = once;
      sr->allgather_ns = CollectiveNs(cluster, Collective::kAllGather, weights, shards.shard);
      break;
    default:  // level 3: parameters are gathered before each op instead
      sr->allreduce_ns = once;
      break;
  }
  const bool overlapped = options.config.overlap.overlap_grad_reduce && memory.zero <= 1 &&
                          d * cp > 1 && schedule.flush && schedule.iterations == 1 &&
                          !schedule.bidirectional && !schedule.actions[sr->rank].empty();
  if (!overlapped) return;
  const int64_t bucket_params = options.config.overlap.grad_bucket_params > 0
                                    ? options.config.overlap.grad_bucket_params
                                    : DefaultGradBucketParams(d * cp);
  const std::vector<GradBucket> buckets = RankBuckets(
      schedule, table, partition, costs, bucket_params, options.config.Pairs(), expert_scale, *sr);
  const auto collective = [&](Bytes bytes) {
    return collective_ns(memory.zero == 0 ? Collective::kAllReduce : Collective::kReduceScatter,
                         bytes);
  };
  const TimeNs end = BucketedReductionEndNs(buckets, memory.gradient_bytes_per_param, collective);
  TimeNs busy = 0;
  for (const GradBucket& b : buckets) {
    busy += collective(ParameterBytes(b.parameters, memory.gradient_bytes_per_param));
  }
  sr->grad_buckets = static_cast<int>(buckets.size());
  sr->allreduce_ns = std::max<TimeNs>(0, end - sr->last_end_ns);
  sr->allreduce_hidden_ns = std::max<TimeNs>(0, busy - sr->allreduce_ns);
}

}  // namespace pipecast::internal
