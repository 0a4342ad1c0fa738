// Comparison: what the simulator predicted for a plan against what the
// runtime measured, per metric and per stage, with each error and whether it
// is within tolerance.
//
// Measured, like predicted (sim/simulator.h): an iteration's time is the span
// from its first op's start to its last op's end over all ranks (for
// schedules without a flush, the steady state between iteration ends); a
// rank's busy time is the sum of its ops' durations; its bubble ratio is
// 1 - busy / span; the run's bubble ratio is the mean over ranks; peak memory
// is the stage's high-water mark of everything it held (static included);
// throughput is samples per iteration / iteration time. The report takes the
// median iteration (its per-rank figures too).
//
// Tensor parallelism (plan.tensor_parallel = t > 1): `runs` holds every
// worker's record; times describe tensor rank 0 of each rank, a rank's peak
// memory is the largest of its t workers', and a row "tp all-reduce" per rank
// sets the measured time inside the all-reduces (the mean over the t workers,
// waits for a slower member included) beside the predicted tp_comm_ns. That
// row is reported, not checked: the reduction on the cpu backend is a few
// memory passes between two barriers, timed mostly by how fast threads wake.
//
// Expert parallelism (plan.expert_parallel = ep > 1): likewise over the ep
// workers of a rank (times expert rank 0's, memory the largest), with a row
// "ep all-to-all" per rank: the measured time inside the MoE layers'
// dispatch and combine all-to-alls (mean over the workers) beside the
// prediction's (the ops' ExecOp::ep_comm_ns), reported, not checked.
//
// Bidirectional schedules (dualpipe): a row "copy reduce" per rank sets the
// measured exchange of the two parameter copies' gradients with the partner
// rank (runtime.h; from when both ranks were ready to when the partner's
// bytes were in, summed over partners) beside the predicted copy_reduce_ns.
// Reported, not checked: it is outside the pipeline span the iteration time
// compares, and on the cpu backend it is a memory copy between threads whose
// speed the link probe's messages only approximate.
//
// Errors of times, memory and throughput are relative, (measured -
// predicted) / predicted; bubble ratios are fractions already, so their error
// is the absolute difference. Plain functions over values.
#ifndef PIPECAST_VALIDATE_COMPARE_H_
#define PIPECAST_VALIDATE_COMPARE_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/simulator.h"
#include "validate/exec_plan.h"
#include "validate/runtime.h"

namespace pipecast::validate {

struct Tolerances {
  // Iteration time and throughput, relative. 0.35: measured spread on the
  // 2-core CI machine (docs/validator.md) with room for its noise.
  double time = 0.35;
  // Peak memory, relative: the runtime allocates exactly what the model
  // says, so only transfer buffers in flight differ.
  double memory = 0.05;
  // Bubble ratio, absolute (percentage points / 100).
  double bubble = 0.15;
  Status Validate() const;
};

struct MetricRow {
  std::string metric;  // "iteration time", "peak memory", ...
  int rank = -1;       // -1: the whole run
  std::string unit;    // "ns", "bytes", "samples/s", "ratio"
  double predicted = 0;
  double measured = 0;
  double error = 0;
  bool relative = true;  // false: absolute difference
  bool checked = false;  // counts for the verdict
  double tolerance = 0;
  bool within = true;
};

// A row with its error and verdict: relative error (measured - predicted) /
// predicted (1 when predicted is 0 and measured is not), or the absolute
// difference; `within` when not checked or |error| <= tolerance. The one rule
// for every comparison table (the validator's runs, measured runs, logs).
MetricRow MakeMetricRow(std::string metric, int rank, std::string unit, double predicted,
                        double measured, bool relative, bool checked, double tolerance);

struct Comparison {
  std::vector<MetricRow> rows;
  std::vector<TimeNs> iteration_ns;  // every measured iteration, in order
  int median_iteration = 0;          // the iteration the report describes
  bool within_tolerance = true;
};

// REQUIRES: runs has one StageRun per worker (plan.workers()) with the same number of measured
// iterations; `predicted` simulated the same plan. `samples_per_iteration`:
// microbatch size x micro-batches per iteration (one replica).
Result<Comparison> Compare(const SimResult& predicted, const ExecPlan& plan,
                           const std::vector<StageRun>& runs, int64_t samples_per_iteration,
                           const Tolerances& tolerances);

// The measured `iteration` as a SimResult timeline (ops, transfers, memory),
// its time origin at the iteration's first op, for TraceJson.
SimResult MeasuredTimeline(const ExecPlan& plan, const std::vector<StageRun>& runs, int iteration);

// The rows as the text table the validator prints (metric, stage, predicted,
// measured, error, tolerance, ok/BEYOND), each line indented by `indent`; a
// row's `rank` is shown in the column named `rank_column` ("stage").
std::string ComparisonTableText(const std::vector<MetricRow>& rows, const std::string& indent,
                                const std::string& rank_column = "stage");

// The rows as the `metrics` array of pipecast-validation/1 (docs/validator.md).
nlohmann::ordered_json ComparisonRowsJson(const std::vector<MetricRow>& rows);

// One Chrome trace: the predicted timeline as processes "predicted rank r",
// the measured one beside it as "measured rank r".
std::string SideBySideTrace(const SimResult& predicted, const SimResult& measured);

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_COMPARE_H_
