#include "sim/internal/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "sim/memory.h"

namespace pipecast::internal {

namespace {

// Layers whose unsharded parameters a ZeRO-3 rank holds at once: the running
// layer's and the one prefetched for the next (FSDP's default
// forward/backward prefetch of one unit).
constexpr int kGatheredLayers = 2;

}  // namespace

const Link& DataParallelLink(const Cluster& cluster, int ranks, int rank, int d) {
  return cluster.SameNode(rank, (d - 1) * ranks + rank) ? cluster.intra_node : cluster.inter_node;
}

TimeNs RingAllReduceNs(Bytes bytes, int d, const Link& link) {
  if (d <= 1) return 0;
  double moved = 2.0 * (d - 1) / d * static_cast<double>(bytes);
  return 2 * (d - 1) * link.LatencyNs() +
         TransferNs(static_cast<Bytes>(std::ceil(moved)), link.bandwidth_gbps);
}

TimeNs RingHalfNs(Bytes bytes, int d, const Link& link, int pieces) {
  if (d <= 1) return 0;
  double moved = 1.0 * (d - 1) / d * static_cast<double>(bytes);
  return int64_t{pieces} * (d - 1) * link.LatencyNs() +
         TransferNs(static_cast<Bytes>(std::ceil(moved)), link.bandwidth_gbps);
}

void ApplyPerOpCollectives(const Model& model, const Cluster& cluster, const Schedule& schedule,
                           const SimOptions& options, const std::vector<StageLayers>& partition,
                           std::vector<StageCost>* costs, SimResult* result) {
  const int d = options.config.layout.data_parallel;
  const MemoryConfig& memory = options.config.memory;
  if (memory.zero < 2 || d <= 1) return;
  const std::vector<StageCost> before = *costs;
  for (size_t s = 0; s < costs->size(); ++s) {
    StageCost& c = (*costs)[s];
    const int rank = schedule.stage_rank[s];
    const Link& link = DataParallelLink(cluster, schedule.num_ranks, rank, d);
    const int layers = partition[s].last_layer - partition[s].first_layer + 1;
    const TimeNs gather =
        memory.zero >= 3 ? RingHalfNs(ParameterBytes(c.parameters, memory.weight_bytes_per_param),
                                      d, link, layers)
                         : 0;
    const TimeNs scatter =
        RingHalfNs(ParameterBytes(c.parameters, memory.gradient_bytes_per_param), d, link, layers);
    c.forward_ns = std::max(c.forward_ns, gather);
    if (c.has_backward_split) {
      const TimeNs input = std::max(c.backward_ns - c.backward_weight_ns, gather);
      c.backward_weight_ns = std::max(c.backward_weight_ns, scatter);
      c.backward_ns = input + c.backward_weight_ns;
    } else {
      c.backward_ns = std::max(c.backward_ns, gather + scatter);
    }
    if (memory.zero >= 3) {
      Bytes largest = 0;
      for (int l = partition[s].first_layer; l <= partition[s].last_layer; ++l) {
        largest = std::max(
            largest, ParameterBytes(model.layers[l].parameters, memory.weight_bytes_per_param));
      }
      MemoryBreakdown& m = result->per_rank[rank].memory;
      m.gathered_weights = std::max(m.gathered_weights, kGatheredLayers * largest);
    }
  }
  for (int k = 0; k < schedule.num_ranks; ++k) {
    TimeNs exposed = 0;
    const std::vector<Action>& list = schedule.actions[k];
    for (size_t i = 0; i < list.size(); ++i) {
      const double f = options.config.overlap.overlap_factor;
      exposed += ActionDurationNs(*costs, list, i, f) - ActionDurationNs(before, list, i, f);
    }
    result->per_rank[k].sharding_exposed_ns = exposed / std::max(1, schedule.iterations);
  }
}

int64_t DefaultGradBucketParams(int d) {
  return std::max<int64_t>(40'000'000, int64_t{1'000'000} * d);
}

double OptimizerBytesPerParam(const MemoryConfig& memory) {
  return memory.gradient_bytes_per_param + 2 * memory.optimizer_bytes_per_param +
         memory.weight_bytes_per_param;
}

TimeNs EstimateOptimizerStepNs(const Cluster& cluster, const SimOptions& options,
                               int64_t parameters) {
  const double bandwidth = cluster.gpu.memory_bandwidth_gbps * 1e9 * kOptimizerMemoryEfficiency;
  if (bandwidth <= 0) return 0;
  const double shards = options.config.memory.zero >= 1 ? options.config.layout.data_parallel : 1;
  const double bytes =
      static_cast<double>(parameters) / shards * OptimizerBytesPerParam(options.config.memory);
  return static_cast<TimeNs>(std::llround(bytes / bandwidth * 1e9));
}

namespace {

// The buckets of rank `sr` (TailCollectives' contract).
std::vector<GradBucket> RankBuckets(const Schedule& schedule, const StageCostTable& table,
                                    const std::vector<StageLayers>& partition,
                                    const std::vector<StageCost>& costs, int64_t bucket_params,
                                    double overlap_factor, const StageResult& sr) {
  const std::vector<Action>& list = schedule.actions[sr.rank];
  const Action& last = list.back();
  const TimeNs duration = ActionDurationNs(costs, list, list.size() - 1, overlap_factor);
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
      open.parameters += table.Stage(StageLayers{l, l}).parameters;
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
  const Link& link = DataParallelLink(cluster, schedule.num_ranks, sr->rank, d);
  const Bytes gradients = ParameterBytes(sr->parameters, memory.gradient_bytes_per_param);
  const Bytes weights = ParameterBytes(sr->parameters, memory.weight_bytes_per_param);
  sr->allreduce_ns = 0;
  sr->allgather_ns = 0;
  sr->allreduce_hidden_ns = 0;
  sr->grad_buckets = 0;
  sr->optimizer_ns =
      options.config.optimizer_step.time_ns > 0 || !options.config.optimizer_step.estimate
          ? options.config.optimizer_step.time_ns
          : EstimateOptimizerStepNs(cluster, options, sr->parameters);
  switch (memory.zero) {
    case 0:
      sr->allreduce_ns = RingAllReduceNs(gradients, d, link);
      break;
    case 1:
      sr->allreduce_ns = RingHalfNs(gradients, d, link);
      sr->allgather_ns = RingHalfNs(weights, d, link);
      break;
    case 2:  // gradients were reduce-scattered during the backwards
      sr->allgather_ns = RingHalfNs(weights, d, link);
      break;
    default:  // level 3: parameters are gathered before each op instead
      break;
  }
  const bool overlapped = options.config.overlap.overlap_grad_reduce && memory.zero <= 1 && d > 1 &&
                          schedule.flush && schedule.iterations == 1 && !schedule.bidirectional &&
                          !schedule.actions[sr->rank].empty();
  if (!overlapped) return;
  const int64_t bucket_params = options.config.overlap.grad_bucket_params > 0
                                    ? options.config.overlap.grad_bucket_params
                                    : DefaultGradBucketParams(d);
  const std::vector<GradBucket> buckets = RankBuckets(
      schedule, table, partition, costs, bucket_params, options.config.overlap.overlap_factor, *sr);
  const auto collective = [&](Bytes bytes) {
    return memory.zero == 0 ? RingAllReduceNs(bytes, d, link) : RingHalfNs(bytes, d, link);
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
