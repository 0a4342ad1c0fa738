// The validator tool's work, as a library call: choose the backend, check
// that the trace and report can be written before the run, run the plan
// (validate/validator.h), agree on the outcome across processes, write the
// side-by-side trace and the HTML report and return the text for stdout; or,
// with --measured or --megatron-log, hold a real run against the plan
// (measured/measured_tool.h). tools/validator_main.cc
// only parses flags into ValidatorToolOptions, calls RunValidatorTool, prints
// and returns the exit code.
//
// Never prints: the text and the error come back for the caller to print.
#ifndef PIPECAST_TOOLS_VALIDATOR_TOOL_H_
#define PIPECAST_TOOLS_VALIDATOR_TOOL_H_

#include <string>

#include "measured/measured_tool.h"
#include "validate/validator.h"

namespace pipecast {

// The validator's flags, as typed (docs/validator.md lists them).
struct ValidatorToolOptions {
  validate::ValidatorOptions options;  // plan, model, cluster, runtime and tolerances
  std::string backend = "cpu";         // cpu, mpi or cuda
  std::string trace;                   // --trace: predicted and measured side by side
  std::string fault;                   // --inject-fault KIND:ACTION (tests only)
  double recv_timeout_ms = 10'000;     // --recv-timeout-ms, in [0, a day]
  bool json = false;                   // print pipecast-validation/1
  std::string report;                  // --report: HTML, predicted and measured timelines
  std::string command_line;            // as typed, shown in the report
  // --measured / --megatron-log: a real run instead of running the plan
  // (docs/measured-runs.md); plan, model, cluster, tolerances, trace, report
  // and json come from the fields above.
  measured::MeasuredToolOptions measured;
};

// What the run leaves for the caller.
struct ValidatorToolResult {
  // base/exit_codes.h: 0 within tolerance, 1 failure, 2 usage (flags that do not go
  // together), 3 a metric beyond tolerance.
  int exit_code = 0;
  std::string text;   // for stdout; empty on every process but the root
  std::string error;  // for stderr, without the tool's name; empty when none, or off the root
};

// Every process of the run calls it; all of them return the same exit code.
ValidatorToolResult RunValidatorTool(const ValidatorToolOptions& options);

}  // namespace pipecast

#endif  // PIPECAST_TOOLS_VALIDATOR_TOOL_H_
