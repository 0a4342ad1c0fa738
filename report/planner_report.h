// The planner's HTML report: one self-contained page (inline CSS and SVG, no
// script, no network) with the inputs, the chosen plan's headline numbers,
// the trade-off a user is choosing — throughput, bubble ratio and
// bubble/ideal, and peak memory against the micro-batch count m for the
// chosen layout (PlanReport::sweep) — the chosen plan's timeline and memory
// (drawn by report/html_report.h's building blocks), the ranked candidates, and
// the rejections grouped by reason with counts and the closest miss. When
// nothing fits, the page says so and shows the rejections and suggestions.
// docs/report.md says how to read it and lists the data attributes.
//
// Pure function of its arguments: the same input gives the same bytes.
// Thread-safe.
#ifndef PIPECAST_REPORT_PLANNER_REPORT_H_
#define PIPECAST_REPORT_PLANNER_REPORT_H_

#include <string>

#include "planner/planner.h"
#include "report/html_report.h"
#include "sim/model.h"
#include "sim/simulator.h"

namespace pipecast {

// `chosen_timeline` is the chosen candidate simulated again with
// record_timeline (the planner's search does not record timelines); null
// when nothing fits, or to leave the timeline and memory charts out.
// `inputs` gives the model name, cluster and command line shown as inputs.
// REQUIRES: `report` came from RunPlanner on `model`.
std::string PlanReportHtml(const PlanReport& report, const Model& model,
                           const SimResult* chosen_timeline, const ReportInputs& inputs);

}  // namespace pipecast

#endif  // PIPECAST_REPORT_PLANNER_REPORT_H_
