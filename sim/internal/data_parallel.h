// Data-parallel communication of one simulated replica: which link a rank's
// data-parallel group uses, the ring collectives' times, and how ZeRO's
// levels place them (sim/simulator.h states the model; docs/simulator.md
// "Data parallelism and sharding" derives it). Internal: only sim/ includes
// it. Stateless functions, safe from several threads. Units: ns, bytes.
#ifndef PIPECAST_SIM_INTERNAL_DATA_PARALLEL_H_
#define PIPECAST_SIM_INTERNAL_DATA_PARALLEL_H_

#include <vector>

#include "base/units.h"
#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/partition.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"

namespace pipecast::internal {

// The link of rank `rank`'s data-parallel group (GPU r·ranks + rank of every
// replica r): intra-node when the whole group sits in one node.
const Link& DataParallelLink(const Cluster& cluster, int ranks, int rank, int d);

// Ring all-reduce of `bytes` over `d` ranks: 2(d-1) steps, each moving
// bytes/d and paying the latency once.
TimeNs RingAllReduceNs(Bytes bytes, int d, const Link& link);

// Ring reduce-scatter or all-gather of `bytes` (the unsharded size) over `d`
// ranks, split in `pieces` collectives (one per layer): (d-1) steps of
// bytes/d each, the latency paid (d-1) times per piece.
TimeNs RingHalfNs(Bytes bytes, int d, const Link& link, int pieces = 1);

// ZeRO levels 2 and 3: lengthens each stage's ops by the collectives that
// run beside them (level 2: the gradient reduce-scatter after each backward;
// level 3: also the parameter all-gather before each F and B or I) where the
// link takes longer than the compute, and fills each rank's
// sharding_exposed_ns (per iteration) and, at level 3, gathered_weights.
// No-op at levels 0 and 1 or d = 1.
// REQUIRES: costs[s] is stage s of `partition`; result->per_rank is filled.
void ApplyPerOpCollectives(const Model& model, const Cluster& cluster, const Schedule& schedule,
                           const SimOptions& options, const std::vector<StageLayers>& partition,
                           std::vector<StageCost>* costs, SimResult* result);

// The collectives after rank `sr`'s last op (allreduce_ns: the all-reduce at
// level 0, the reduce-scatter at 1) and after the optimizer step
// (allgather_ns: the parameter all-gather at levels 1 and 2).
void TailCollectives(const Cluster& cluster, int ranks, const SimOptions& options, StageResult* sr);

}  // namespace pipecast::internal

#endif  // PIPECAST_SIM_INTERNAL_DATA_PARALLEL_H_
