// A measured run (traces, measured_run.h) or a Megatron-LM log
// (megatron_log.h) held against pipecast's forecast for the same plan, in the
// validator's table (validate/compare.h: MetricRow, the same error rule and
// tolerances).
//
// The prediction: the plan simulated again on its own cluster (or
// `cluster`), with its timeline. Rows for a trace run (docs/measured-runs.md):
//   iteration time (all, checked): the whole iteration, prediction's
//     iteration_ns (pipeline, data-parallel tail and optimizer step) against
//     the median step's latest end less earliest start;
//   throughput (all, checked): global batch / iteration time;
//   bubble ratio (all, checked): the mean over ranks of 1 - compute / iteration
//     time, the predicted compute being busy_ns less its tensor-parallel and
//     sharding communication plus the optimizer step (the measured compute is
//     the union of non-communication kernels, optimizer included);
//   per rank: compute and bubble ratio (reported), exposed communication
//     (reported: collectives not under compute, against the prediction's
//     tensor-parallel, sharding, data-parallel and copy-reduce times;
//     pipeline send/recv is left out, pipecast counts waiting for it as
//     bubble), peak memory when the trace has PyTorch's memory events (checked);
//   per stage, when the traces name pipeline actions: op time, the sum of its
//     ops' spans (reported).
// A trace pipecast wrote compares as the validator does: compute is the sum
// of op durations, against the prediction's busy_ns.
// Rows for a Megatron-LM log: iteration time (median of the logged
// averages), TFLOP/s per GPU (when both have it), peak memory per pipeline
// rank (the largest "max allocated" of its ranks), all checked.
//
// Pure functions over values; thread-safe.
#ifndef PIPECAST_MEASURED_COMPARE_MEASURED_H_
#define PIPECAST_MEASURED_COMPARE_MEASURED_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "formats/plan.h"
#include "measured/measured_run.h"
#include "measured/megatron_log.h"
#include "sim/cluster.h"
#include "sim/simulator.h"
#include "validate/compare.h"

namespace pipecast::measured {

// The forecast a measurement is held against.
struct Prediction {
  PlanFile plan;
  std::string model_name;
  Cluster cluster;
  SimResult predicted;  // with its timeline
  std::vector<std::string> notes;
};

// Loads plan and model and simulates the plan on `cluster` ("" = the plan's
// own). Errors of the loaders and of the simulator pass through, the
// latter prefixed "the simulator cannot replay this plan".
Result<Prediction> PredictPlan(const std::string& plan_path, const std::string& model_path,
                               const std::string& cluster);

// REQUIRES: nothing. InvalidArgument when the run's ranks are not the plan's
// pipeline ranks (count; a rank running a stage the plan puts elsewhere).
// Adds what the reader should know to *notes.
Result<validate::Comparison> CompareRun(const Prediction& prediction, const MeasuredRun& run,
                                        const validate::Tolerances& tolerances,
                                        std::vector<std::string>* notes);

// `skip` logged iterations are dropped first (the first interval holds the
// start-up). InvalidArgument when skip leaves no iteration line.
Result<validate::Comparison> CompareLog(const Prediction& prediction, const MegatronLog& log,
                                        MegatronRankOrder order, int skip,
                                        const validate::Tolerances& tolerances,
                                        std::vector<std::string>* notes);

}  // namespace pipecast::measured

#endif  // PIPECAST_MEASURED_COMPARE_MEASURED_H_
