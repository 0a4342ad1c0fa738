// Explain: the planner's last pass, turning a PlanReport into what people and
// scripts read. Text for people: the chosen plan (stages with their layers,
// schedule, micro-batches, iteration time, throughput, both bubble forms
// named plainly, memory per stage against capacity with its breakdown), the
// runners-up, the rejections grouped by reason with the closest miss, and the
// micro-batch count sweep; when nothing fits, why and what to try. JSON for
// scripts: the same content as one object.
//
// GroupRejections() is the grouping all three views share (the HTML report,
// report/planner_report.h, uses it too).
//
// Units in the output: times in ms (text) or us (JSON, `*_us`), memory in GiB
// (text) or bytes (JSON, `*_bytes`).
//
// Thread-safety: pure functions of their arguments.
#ifndef PIPECAST_PLANNER_EXPLAIN_H_
#define PIPECAST_PLANNER_EXPLAIN_H_

#include <string>
#include <vector>

#include "planner/check.h"
#include "planner/planner.h"
#include "sim/model.h"

namespace pipecast {

// Examples kept per rejection group in the text, JSON and HTML.
inline constexpr int kRejectionExamples = 3;

// The rejections of one reason: how many, the nearest to being chosen, and
// a few examples. Pointers into the vector given to GroupRejections().
struct RejectGroup {
  RejectReason reason;
  std::vector<const Rejection*> all;  // in the report's order
  // Out of memory: the least memory over capacity; pruned: the best lower
  // bound; other reasons: none.
  const Rejection* closest = nullptr;
  std::vector<const Rejection*> examples;  // up to kRejectionExamples, not `closest`
};

// One group per reason that occurs, in a fixed order (out of memory, pruned,
// batch not divisible, schedule constraint, simulation error).
// REQUIRES: `rejected` outlives the result.
std::vector<RejectGroup> GroupRejections(const std::vector<Rejection>& rejected);

// A stable identifier for scripts: "out_of_memory", "pruned", ...
const char* RejectReasonId(RejectReason reason);

// REQUIRES: `report` came from RunPlanner on `model` (layer indices valid).
std::string PlanReportToText(const PlanReport& report, const Model& model);

// The `format` key of the planner's --json object.
inline constexpr char kPlannerReportFormat[] = "pipecast-planner/1";

// One JSON object (2-space indent, trailing newline) with keys: format
// (kPlannerReportFormat), feasible,
// model, gpus, global_batch, cluster, enumerated, simulated, chosen (null
// when nothing fits; its `predicted` is ResultJson's object, without a format key), runners_up,
// rejected ([{reason, description, count, closest_miss, examples}]), sweep,
// notes, suggestions; and `check` ({passed, failures, diff}) when `check` is
// given.
std::string PlanReportToJson(const PlanReport& report, const Model& model,
                             const CheckOutcome* check = nullptr);

}  // namespace pipecast

#endif  // PIPECAST_PLANNER_EXPLAIN_H_
