// The partition a run gets when none is given, in one place (PartitionFor):
// pipecast's balanced split — the memory-aware partition, which layers each
// stage holds so that the stages balance on time and every stage's estimated
// peak memory fits the GPU — or Megatron-LM's even split (EvenPartition,
// sim/partition.h), as the configuration's partition rule says. One home for
// the planner's partition pass, the simulator tool's default partition and
// Simulate()'s (docs/planner.md, "Partition"; docs/simulator.md).
//
// The estimate follows the schedule: stage s holds
// TraitsOf(schedule).inflight_microbatches(s, p, m) micro-batches of
// activations (GPipe m, 1F1B min(p - s, m), ...), so under 1F1B stage 0 may
// take fewer layers than the last; static state is sharded at the ZeRO level
// of the MemoryConfig (sim/memory.h), with the gathered parameters at level
// 3; plus the workspace and the communication buffers. The simulator then
// counts the exact peak.
#ifndef PIPECAST_SIM_MEMORY_PARTITION_H_
#define PIPECAST_SIM_MEMORY_PARTITION_H_

#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "sim/cluster.h"
#include "sim/memory.h"
#include "sim/model.h"
#include "sim/partition.h"
#include "sim/schedule.h"
#include "sim/stage_costs.h"
#include "sim/training_config.h"

namespace pipecast {

// What a stage's memory depends on beyond its layers.
struct PipelineShape {
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int stages = 1;         // p, ranks
  int chunks = 1;         // v, model chunks per rank
  int microbatches = 1;   // m
  int data_parallel = 1;  // d x cp, the GPUs ZeRO shards over (GradientReplicas)
  // Two paths over p model stages (Schedule::bidirectional, DualPipe): the split is of p
  // stages, repeated for virtual stages p..2p-1.
  bool bidirectional = false;
};

// The shape of a configuration whose p, v and m are stated (a planner
// candidate): its schedule, p, v, m and d, bidirectional as its schedule's
// traits say.
PipelineShape ShapeOf(const TrainingConfig& config);
// The shape of `schedule` (its ranks, chunks per rank, micro-batches per
// iteration and bidirectionality) with config's schedule kind and d.
PipelineShape ShapeOf(const Schedule& schedule, const TrainingConfig& config);

// One stage's estimated peak memory by part.
struct StageMemoryParts {
  Bytes weights = 0;  // with PipeDream's stashed and ZeRO-3's gathered copies
  Bytes gradients = 0;
  Bytes optimizer = 0;    // optimizer state, fp32 main parameters, gradient copy
  Bytes activations = 0;  // activations held and recomputed
  Bytes other = 0;        // workspace and communication buffers
  Bytes Total() const { return weights + gradients + optimizer + activations + other; }
};

// The estimate for layers `layers` as stage `stage` (0-based) of `shape`, at
// memory.zero. REQUIRES: table built at the shape's micro-batch size.
StageMemoryParts EstimateStageMemoryParts(const StageCostTable& table, const PipelineShape& shape,
                                          const MemoryConfig& memory, int stage,
                                          StageLayers layers);

// The split of the table's layers into `stages` contiguous stages whose
// largest training time (StageCostTable::TrainingTimeNs) is smallest; on ties
// the last stage starts as early as it can, then the one before it, and so on.
// REQUIRES: 1 <= stages <= table.NumLayers().
std::vector<StageLayers> TimeBalancedSplit(const StageCostTable& table, int stages);

struct MemoryAwareSplit {
  // p·v stages: the time-balanced split whose every stage fits, else (fits
  // false) the split whose fullest stage needs least memory.
  std::vector<StageLayers> partition;
  bool fits = true;
  // When !fits: the fullest stage of that split and its parts.
  int worst_stage = 0;
  StageMemoryParts worst_parts;
  // The search's work: how many stage memory estimates and lower bounds it
  // evaluated (for tests and benchmarks of its scaling in layers).
  int64_t evaluations = 0;
};

// The time-balanced split (as TimeBalancedSplit, ties alike) among those
// whose every stage's estimate is at most `capacity` (the memory limit,
// MemoryLimitBytes(); 0 = unlimited). With chunks > 1 a rank's memory sums v
// separate chunks, which a split over contiguous ranges cannot bound stage by
// stage: the p·v chunks balance on time alone and `fits` stays true.
// A bidirectional schedule (DualPipe) balances p model stages on time and
// repeats them as virtual stages p..2p-1 (sim/schedule.h), 2p entries in all.
// `time_balanced`, when given, is TimeBalancedSplit(table, p·v) (p for a
// bidirectional schedule), to reuse across calls.
// REQUIRES: 1 <= p·v (p) <= table.NumLayers().
MemoryAwareSplit MemoryAwarePartition(const StageCostTable& table, const PipelineShape& shape,
                                      const MemoryConfig& memory, Bytes capacity,
                                      const std::vector<StageLayers>* time_balanced = nullptr);

// The model's embedding and head (EndsOf in sim/partition.h, by layer name).
ModelEnds EndsOf(const Model& model);

// The partition of rule config.partition for `shape`, with the memory
// estimate at config.PerGpuMemory() against `capacity` (0 = unlimited):
// - balanced: MemoryAwarePartition (with `time_balanced` as there);
// - even: Megatron-LM's EvenPartition of the model's layers (`ends`), on
//   stage_rank (the rank of each of the p·v virtual stages; of the p model
//   stages for a bidirectional schedule, repeated as there), with `fits`,
//   worst_stage and worst_parts as MemoryAwarePartition fills them (for
//   v = 1; with v > 1 fits stays true, as there).
// InvalidArgument (naming the flag) when the even split cannot be made.
// REQUIRES: 1 <= p·v (p) <= table.NumLayers().
Result<MemoryAwareSplit> PartitionFor(const StageCostTable& table, ModelEnds ends,
                                      const PipelineShape& shape,
                                      const std::vector<int>& stage_rank,
                                      const TrainingConfig& config, Bytes capacity,
                                      const std::vector<StageLayers>* time_balanced = nullptr);

// The partition a simulation of `schedule` gets when none is given: PartitionFor
// on the planner's cost table (StageCostOptionsFor(config, cluster)), at the
// GPU's memory limit (MemoryLimitBytes). For a schedule text whose stages are
// no whole number per rank, the time-balanced split alone. The stage count
// checked as CheckStageCount does. Simulate() and the simulator tool call it.
Result<MemoryAwareSplit> DefaultPartition(const Model& model, const Cluster& cluster,
                                          const Schedule& schedule, const TrainingConfig& config);

}  // namespace pipecast

#endif  // PIPECAST_SIM_MEMORY_PARTITION_H_
