// The comparison report as one self-contained HTML page (report/html_report.h
// building blocks): the inputs, the comparison table (validate/compare.h rows
// with their errors and verdicts), the notes, and the predicted and measured
// timelines one above the other, each drawn as the simulator's report draws
// a timeline. Serves the validator's own runs and measured runs alike.
//
// Pure function: the same input gives the same bytes. Thread-safe.
#ifndef PIPECAST_MEASURED_REPORT_HTML_H_
#define PIPECAST_MEASURED_REPORT_HTML_H_

#include <string>
#include <vector>

#include "report/html_report.h"
#include "sim/simulator.h"
#include "validate/compare.h"
#include "validate/validator.h"

namespace pipecast::measured {

struct ComparisonPage {
  std::string title;          // e.g. "measured run against plan.json"
  ReportInputs inputs;        // the plan's configuration and cluster
  std::string measured_what;  // what was measured, one line (files, steps)
  std::vector<validate::MetricRow> rows;
  std::vector<std::string> notes;
  const SimResult* predicted = nullptr;  // with its timeline
  const SimResult* measured = nullptr;   // nullptr or no ops: said instead of drawn
};

// REQUIRES: page.predicted is set.
std::string ComparisonReportHtml(const ComparisonPage& page);

// The page of a validator run (validator --plan ... --report): its median
// iteration as the measured timeline. REQUIRES: result.is_root.
std::string ValidationReportHtml(const validate::ValidationResult& result,
                                 const std::string& command_line);

}  // namespace pipecast::measured

#endif  // PIPECAST_MEASURED_REPORT_HTML_H_
