// plan.json (`pipecast-plan/1`): one chosen configuration, complete enough to
// replay with the simulator (`simulator --plan`), execute with the validator
// and compare against in CI (`planner --check`). Written by the planner
// (planner/chosen_plan.h); read by the simulator, the planner's --check and
// the validator. The file's keys are in docs/formats.md.
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
#include "sim/training_config.h"

namespace pipecast {

inline constexpr char kPlanFormat[] = "pipecast-plan/1";

struct PlanFile {
  std::string model_name;
  std::string model_hash;  // ModelHash() of the model file's bytes
  Cluster cluster;         // embedded whole, so the plan stands alone
  // The configuration: layout (t, sequence parallelism, p, d, v; written as
  // pipeline_stages, data_parallel, schedule.virtual_stages, and, only when
  // t > 1, tensor_parallel, sequence_parallel and tp_comm_overlap), micro-batch
  // size and count, recompute, memory, the optimizer step and the gradient
  // overlap settings. p, v and m are always stated; config.schedule is the
  // kind schedule_name names (kCustom for another name). overlap_factor is
  // not written and reads as 1. By default v = m = 1.
  TrainingConfig config = [] {
    TrainingConfig c;
    c.layout.chunks = c.microbatches = 1;
    return c;
  }();
  int gpus = 0;                        // as written; reading checks it is config.layout.Gpus()
  int64_t global_batch = 0;            // as written; reading checks it is size x m x d
  std::string schedule_name;           // "1f1b", "gpipe", ...
  std::vector<StageLayers> partition;  // per virtual stage
  std::vector<int> placement;          // first GPU of each rank (replica 0): rank x t x cp
  Schedule schedule;                   // the explicit per-rank action lists
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
// is left out. The plan's configuration is options.config with p, v and m
// the schedule's.
PlanFile MakePlanFile(const std::string& model_name, const std::string& model_hash,
                      const Cluster& cluster, const Schedule& schedule, const SimOptions& options,
                      const SimResult& result);

// The SimOptions that replay the plan: its configuration and partition.
SimOptions PlanSimOptions(const PlanFile& plan);

std::string PlanToJson(const PlanFile& plan);
// Errors name the file and JSON path, as for model.json.
Result<PlanFile> ParsePlan(const std::string& text, const std::string& origin);
Result<PlanFile> LoadPlan(const std::string& path);

}  // namespace pipecast

#endif  // PIPECAST_FORMATS_PLAN_H_
