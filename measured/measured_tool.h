// `validator --measured` and `validator --megatron-log` as one library call,
// so that tools/validator_main.cc only maps flags to these options: read the
// traces (or the log), summarise them, or with --plan hold them against the
// forecast, and write the outputs (--trace, --report) atomically.
// docs/measured-runs.md is the user's guide.
//
// It never prints: the caller prints `text` to stdout. Thread-compatible.
#ifndef PIPECAST_MEASURED_MEASURED_TOOL_H_
#define PIPECAST_MEASURED_MEASURED_TOOL_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "measured/measured_run.h"
#include "validate/compare.h"

namespace pipecast::measured {

struct MeasuredToolOptions {
  std::vector<std::string> traces;      // --measured: one Chrome trace per pipeline rank, in order
  std::string megatron_log;             // --megatron-log: a Megatron-LM training log
  std::string plan_path;                // --plan: compare with its forecast (else summarise)
  std::string model_path;               // --model: required with --plan
  std::string cluster;                  // --cluster: "" = the plan's own
  MeasureOptions measure;               // --label, --skip-steps
  std::string rank_order = "tp-dp-pp";  // --megatron-rank-order
  validate::Tolerances tolerances;
  std::string
      trace_out;  // --trace: predicted and measured side by side (measured alone without a plan)
  std::string report_out;    // --report: HTML, predicted and measured timelines (needs --plan)
  bool json = false;         // --json
  std::string command_line;  // shown in the report

  // InvalidArgument naming the flag: neither or both of --measured and
  // --megatron-log; --plan without --model; --report without --plan.
  Status Validate() const;
};

struct MeasuredToolResult {
  std::string text;       // stdout
  bool compared = false;  // a plan was given
  bool within_tolerance = true;
};

// Errors: the readers' and PredictPlan's (InvalidArgument/NotFound, naming the
// file), the comparison's (ranks that do not fit the plan), an output that
// cannot be written (prefixed by its flag).
Result<MeasuredToolResult> RunMeasuredTool(const MeasuredToolOptions& options);

}  // namespace pipecast::measured

#endif  // PIPECAST_MEASURED_MEASURED_TOOL_H_
