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
  const int d = options.data_parallel;
  const MemoryConfig& memory = options.memory;
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
    for (const Action& a : schedule.actions[k]) {
      const double f = options.overlap_factor;
      exposed += (*costs)[a.stage].DurationNs(a.kind, a.overlapped, f) -
                 before[a.stage].DurationNs(a.kind, a.overlapped, f);
    }
    result->per_rank[k].sharding_exposed_ns = exposed / std::max(1, schedule.iterations);
  }
}

void TailCollectives(const Cluster& cluster, int ranks, const SimOptions& options,
                     StageResult* sr) {
  const int d = options.data_parallel;
  const MemoryConfig& memory = options.memory;
  const Link& link = DataParallelLink(cluster, ranks, sr->rank, d);
  const Bytes gradients = ParameterBytes(sr->parameters, memory.gradient_bytes_per_param);
  const Bytes weights = ParameterBytes(sr->parameters, memory.weight_bytes_per_param);
  sr->allreduce_ns = 0;
  sr->allgather_ns = 0;
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
}

}  // namespace pipecast::internal
