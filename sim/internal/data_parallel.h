// Data-parallel communication of one simulated replica: which link a rank's
// data-parallel group uses, the ring collectives' times, and how ZeRO's
// levels place them (sim/simulator.h states the model; docs/simulator.md
// "Data parallelism and sharding" derives it). Internal: only sim/ includes
// it. Stateless functions, safe from several threads. Units: ns, bytes.
#ifndef PIPECAST_SIM_INTERNAL_DATA_PARALLEL_H_
#define PIPECAST_SIM_INTERNAL_DATA_PARALLEL_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/units.h"
#include "sim/cluster.h"
#include "sim/collectives.h"
#include "sim/memory.h"
#include "sim/model.h"
#include "sim/partition.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"

namespace pipecast::internal {

// The data-parallel group of rank `rank`: GPU r·ranks + rank of every one of
// the d replicas (sim/collectives.h times its collectives).
CollectiveGroup DataParallelGroup(const Cluster& cluster, int ranks, int rank, int d, int cp = 1);
// `group` (of simulated GPUs on the folded `cluster`) as the GPUs it stands
// for with context parallelism: each member's cp GPUs hold the same weights
// (sim/simulator.h), so the group has cp x the ranks, in the same nodes.
CollectiveGroup WithContextParallel(const Cluster& cluster, CollectiveGroup group, int cp);

// The expert-data-parallel group of rank `rank` (the edp GPUs holding the
// same routed experts; Megatron-LM's folding orders a stage's t x cp x d
// GPUs etp, ep, edp from the inside, so they are every (ep x etp)-th GPU):
// on the folded `cluster`, every (ep x etp) / (t x cp)-th replica, or
// (t x cp) / (ep x etp) GPUs of each replica's group; where neither divides
// the other, edp GPUs placed as the data-parallel group (an approximation).
// REQUIRES: the folding rule holds (sim/training_config.h).
CollectiveGroup ExpertDataParallelGroup(const Cluster& cluster, int ranks, int rank,
                                        const ParallelLayout& layout);

// The groups of sharded data parallelism (levels 2 and 3) for rank `rank`:
// the shard group (the first memory.sharding.shard_group replicas, or all d)
// that gathers and reduce-scatters, and the replicas of its shard across the
// groups (hybrid sharding) that all-reduce the gradient shards.
struct ShardGroups {
  int shard_size = 1;
  CollectiveGroup shard;
  CollectiveGroup replicas;  // one rank without hybrid sharding
};
ShardGroups ShardGroupsOf(const Cluster& cluster, int ranks, int rank, int d,
                          const ShardingConfig& sharding, int cp = 1);
// The gradients' reduction at levels 2 and 3 (`pieces` collectives, one per
// layer): reduce-scatter in the shard group, then with hybrid sharding the
// all-reduce of each shard across the groups.
TimeNs ShardedGradientReductionNs(const Cluster& cluster, const ShardGroups& groups,
                                  Bytes gradients, int pieces);

// ZeRO levels 2 and 3 (as memory.sharding runs them, sim/memory.h): lengthens each stage's ops by
// the collectives that run beside them (level 2: the gradient reduce-scatter after each backward;
// level 3: also the parameter all-gather before each F and B or I) where the
// link takes longer than the compute, and fills each rank's
// sharding_exposed_ns (per iteration) and, at level 3, gathered_weights.
// No-op at levels 0 and 1 or d = 1.
// REQUIRES: costs[s] is stage s of `partition`; result->per_rank is filled.
void ApplyPerOpCollectives(const Model& model, const Cluster& cluster, const Schedule& schedule,
                           const SimOptions& options, const std::vector<StageLayers>& partition,
                           std::vector<StageCost>* costs, SimResult* result);

// Megatron-LM's default gradient bucket: max(40M, 1M x d) parameters
// (DistributedDataParallelConfig.bucket_size).
int64_t DefaultGradBucketParams(int d);

// One gradient bucket: the parameters of consecutive layers, reduced
// together once the backward has produced all of them.
struct GradBucket {
  int64_t parameters = 0;
  TimeNs ready_ns = 0;  // when its last gradient is produced
};

// The buckets' collectives, issued in ready order one after another on one
// link: each starts at max(its ready time, the previous one's end). Returns
// when the last ends; 0 buckets: 0. `collective_ns(bytes)` is one bucket's
// time.
template <typename CollectiveNs>
TimeNs BucketedReductionEndNs(std::vector<GradBucket> buckets, double bytes_per_param,
                              CollectiveNs collective_ns);

// The collectives after rank `sr`'s last op (allreduce_ns: the all-reduce at
// level 0, the reduce-scatter at 1) and after the optimizer step
// (allgather_ns: the parameter all-gather at levels 1 and 2). With
// options.config.overlap.overlap_grad_reduce on a flushing schedule of one
// iteration, the level 0 and 1 reduction runs in buckets beside the backward
// and allreduce_ns is only its exposed tail (allreduce_hidden_ns the rest):
// buckets are filled from the rank's last layer backwards; a bucket of the
// stage of the rank's last op (B, or W with a split backward) is ready when
// that op has run the backward of its layers (layer shares of the op by
// their backward, or weight-gradient, time); a bucket of the rank's other
// stages when that op starts. Also fills the rank's optimizer step estimate
// (OptimizerStep::estimate).
// REQUIRES: sr->last_end_ns is the end of the rank's last op; costs[s] is
// stage s of `partition`; table is the one `costs` came from.
void TailCollectives(const Cluster& cluster, const Schedule& schedule, const StageCostTable& table,
                     const std::vector<StageLayers>& partition, const std::vector<StageCost>& costs,
                     const SimOptions& options, StageResult* sr);

// The optimizer step of a rank holding `parameters` (docs/simulator.md,
// "Optimizer step"): bytes Adam touches per parameter (gradient read, main
// parameters and moments read and written, model parameters written) over
// kOptimizerMemoryEfficiency x HBM bandwidth; / d with ZeRO >= 1. 0 when the
// GPU has no bandwidth.
TimeNs EstimateOptimizerStepNs(const Cluster& cluster, const SimOptions& options,
                               int64_t parameters);
// Bytes the optimizer step touches per parameter: gradient + 2 x optimizer
// state (read and written) + weight (written): 4 + 2 x 12 + 2 = 30 by default.
double OptimizerBytesPerParam(const MemoryConfig& memory);
// Share of HBM bandwidth the optimizer's streaming kernels reach (the
// analytic profiler's memory_efficiency: BabelStream-like kernels, 80-90%).
inline constexpr double kOptimizerMemoryEfficiency = 0.8;

template <typename CollectiveNs>
TimeNs BucketedReductionEndNs(std::vector<GradBucket> buckets, double bytes_per_param,
                              CollectiveNs collective_ns) {
  std::stable_sort(buckets.begin(), buckets.end(), [](const GradBucket& a, const GradBucket& b) {
    return a.ready_ns < b.ready_ns;
  });
  TimeNs free = 0;
  for (const GradBucket& b : buckets) {
    const TimeNs start = std::max(free, b.ready_ns);
    free = start + collective_ns(ParameterBytes(b.parameters, bytes_per_param));
  }
  return free;
}

}  // namespace pipecast::internal

#endif  // PIPECAST_SIM_INTERNAL_DATA_PARALLEL_H_
