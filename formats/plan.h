// plan.json (`pipecast-plan/1`): one chosen configuration, complete enough to
// replay with the simulator (`simulator --plan`), execute with the validator
// and compare against in CI (`planner --check`). Written by the planner. It
// lives in sim because every part reads it and sim is the common base.
#ifndef PIPECAST_FORMATS_PLAN_H_
#define PIPECAST_FORMATS_PLAN_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "sim/cluster.h"
#include "sim/memory.h"
#include "sim/partition.h"
#include "sim/schedule.h"
#include "sim/simulator.h"

namespace pipecast {

inline constexpr char kPlanFormat[] = "pipecast-plan/1";

struct PlanFile {
  std::string model_name;
  std::string model_hash;  // ModelHash() of the model file's bytes
  Cluster cluster;         // embedded whole, so the plan stands alone
  int gpus = 0;
  int pipeline_stages = 0;
  int data_parallel = 1;
  // Tensor parallelism (written only when tensor_parallel > 1; absent reads
  // as 1, false, false): gpus = pipeline_stages x data_parallel x t.
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;
  int microbatch_size = 1;
  int microbatches = 1;
  int64_t global_batch = 0;
  std::string schedule_name;              // "1f1b", "gpipe", ...
  int virtual_stages = 1;                 // model chunks per GPU
  Recompute recompute = Recompute::kOff;  // "recompute": off, selective or full
  std::vector<StageLayers> partition;     // per virtual stage
  std::vector<int> placement;             // first GPU of each rank (replica 0): rank x t
  Schedule schedule;                      // the explicit per-rank action lists
  MemoryConfig memory;
  TimeNs optimizer_step_ns = 0;
  // SimOptions' data-parallel and optimizer choices the plan was made with
  // (optional in the file: plans written before them read as the defaults).
  bool estimate_optimizer_step = true;
  bool overlap_grad_reduce = true;
  int64_t grad_bucket_params = 0;
  // What the simulator predicted when the plan was made: every metric of
  // that simulation (written as ResultToJson's object under `predicted`),
  // without its timeline (ops, transfers, memory samples, critical path),
  // which is not part of a plan. per_rank has one entry per rank.
  SimResult predicted;

  Bytes LargestPredictedPeak() const;  // largest per-rank predicted peak memory
};

// "fnv1a64:<16 hex digits>" of `bytes`: enough to notice a changed model file.
std::string ModelHash(const std::string& bytes);

// A plan from a simulation of `schedule` with `options`; `result`'s timeline
// is left out.
PlanFile MakePlanFile(const std::string& model_name, const std::string& model_hash,
                      const Cluster& cluster, const Schedule& schedule, const SimOptions& options,
                      const SimResult& result);

// The SimOptions that replay the plan.
SimOptions PlanSimOptions(const PlanFile& plan);

std::string PlanToJson(const PlanFile& plan);
// Errors name the file and JSON path, as for model.json.
Result<PlanFile> ParsePlan(const std::string& text, const std::string& origin);
Result<PlanFile> LoadPlan(const std::string& path);

}  // namespace pipecast

#endif  // PIPECAST_FORMATS_PLAN_H_
