// Validator: runs a plan (plan.json) for real on a backend and holds the
// simulator's forecast to account (docs/validator.md).
//
// Steps: load the plan and the model; for the CPU backends measure the link
// between two workers with a short probe and describe the machine as the
// `local` cluster with the measured figures; simulate the plan on that
// cluster (the prediction); turn the plan into per-rank op lists
// (exec_plan.h); run them (runtime.h) for warm-up and measured iterations;
// compare (compare.h). Only the root process (rank 0 under MPI) gets the
// comparison; the others run their workers and return an empty one.
#ifndef PIPECAST_VALIDATE_VALIDATOR_H_
#define PIPECAST_VALIDATE_VALIDATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/plan.h"
#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/simulator.h"
#include "validate/backend.h"
#include "validate/compare.h"
#include "validate/exec_plan.h"
#include "validate/runtime.h"

namespace pipecast::validate {

// --memory-limit-mb's largest value: 1 PiB, far from overflowing bytes.
inline constexpr double kMaxMemoryLimitMb = 1024.0 * 1024 * 1024;

struct ValidatorOptions {
  std::string plan_path;   // required
  std::string model_path;  // required
  // The cluster the prediction assumes: "" = for cpu and mpi the `local`
  // preset with the probed link and this machine's memory per stage; for
  // cuda the plan's own cluster. Else a preset name or cluster file.
  std::string cluster;
  RuntimeOptions runtime;
  Tolerances tolerances;
  // Per-stage memory limit, MiB; -1: the comparison cluster's GPU memory
  // (0 = unlimited); anything else negative, NaN or over 1 PiB is refused.
  double memory_limit_mb = -1;

  Status Validate() const;
};

struct ValidationResult {
  bool is_root = true;
  PlanFile plan;
  std::string model_name;
  Cluster cluster;             // what the prediction assumed
  bool link_measured = false;  // the cluster's links come from the probe
  std::string work;            // what the ops did
  std::vector<std::string> notes;
  Bytes memory_limit_bytes = 0;
  SimResult predicted;  // with its timeline
  ExecPlan exec;
  std::vector<StageRun> runs;  // root only
  Comparison comparison;       // root only
};

// Runs the whole validation on `backend`. Errors: InvalidArgument/NotFound
// for bad files or options; FailedPrecondition for a schedule that cannot
// finish and for every fault during the run (the message names the stage and
// op); Unavailable when the backend cannot run here.
Result<ValidationResult> RunValidation(const ValidatorOptions& options, Backend* backend,
                                       OpWork* work_override = nullptr);

// `pipecast-validation/1`: one JSON object (docs/validator.md).
std::string ValidationJson(const ValidationResult& result);
// The human report: header, notes, a table of metrics and the verdict.
std::string ValidationText(const ValidationResult& result);

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_VALIDATOR_H_
