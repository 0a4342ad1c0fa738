#include "tools/validator_tool.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/exit_codes.h"
#include "formats/file_util.h"
#include "measured/report_html.h"

namespace pipecast {
namespace {

ValidatorToolResult Failed(const Status& status) {
  return ValidatorToolResult{kExitBadInput, "", std::string(status.message())};
}

Result<std::unique_ptr<validate::Backend>> MakeBackend(const std::string& name) {
  if (name == "cpu") return validate::MakeCpuBackend();
  return name == "mpi" ? validate::MakeMpiBackend(nullptr, nullptr) : validate::MakeCudaBackend(0);
}

ValidatorToolResult Usage(const std::string& message) {
  return ValidatorToolResult{kExitUsage, "", message + "\nRun with --help for more information."};
}

// --measured / --megatron-log: the run came from elsewhere; the plan's flags describe it.
ValidatorToolResult RunMeasured(const ValidatorToolOptions& flags) {
  measured::MeasuredToolOptions m = flags.measured;
  m.plan_path = flags.options.plan_path;
  m.model_path = flags.options.model_path;
  m.cluster = flags.options.cluster;
  m.tolerances = flags.options.tolerances;
  m.trace_out = flags.trace;
  m.report_out = flags.report;
  m.json = flags.json;
  m.command_line = flags.command_line;
  if (Status st = m.Validate(); !st.ok()) return Usage(st.message());
  Result<measured::MeasuredToolResult> r = measured::RunMeasuredTool(m);
  if (!r.ok()) return Failed(r.status());
  return ValidatorToolResult{r->within_tolerance ? kExitOk : kExitCheckFailed, r->text, ""};
}

}  // namespace

ValidatorToolResult RunValidatorTool(const ValidatorToolOptions& flags) {
  using namespace validate;
  if (!flags.measured.traces.empty() || !flags.measured.megatron_log.empty()) {
    return RunMeasured(flags);
  }
  for (const char* flag : {"--plan", "--model"}) {
    const std::string& path = flag[2] == 'p' ? flags.options.plan_path : flags.options.model_path;
    if (path.empty()) return Usage(std::string(flag) + " is required");
  }
  ValidatorOptions options = flags.options;
  // In range (the flag's check): the cast to integer ns is defined.
  options.runtime.recv_timeout_ns = static_cast<TimeNs>(flags.recv_timeout_ms * 1e6);
  if (!flags.fault.empty()) {
    Result<Fault> fault = ParseFault(flags.fault);
    if (!fault.ok()) return Failed(fault.status());
    options.runtime.fault = *fault;
  }
  Result<std::unique_ptr<Backend>> made = MakeBackend(flags.backend);
  if (!made.ok()) return Failed(made.status());
  Backend* backend = made->get();
  // Before the run, which may take minutes: a trace the root cannot write is
  // found now, not after; every process learns it and exits alike.
  std::vector<NamedPath> outputs;
  if (!flags.trace.empty()) outputs.push_back({"--trace", flags.trace});
  if (!flags.report.empty()) outputs.push_back({"--report", flags.report});
  if (!outputs.empty()) {
    Status writable =
        backend->Agree(backend->is_root() ? CheckOutputs(outputs, {{"--plan", options.plan_path},
                                                                   {"--model", options.model_path}})
                                          : Status::Ok());
    if (!writable.ok()) {
      return backend->is_root() ? Failed(writable) : ValidatorToolResult{kExitOk, "", ""};
    }
  }
  Result<ValidationResult> result = RunValidation(options, backend);
  (void)backend->Agree(result.ok() ? Status::Ok() : result.status());  // all reach here
  // The root reports every process's failure and carries the exit code. The
  // others end with 0: one that exits non-zero first makes mpirun abort the
  // job, the root included, before the root has printed the diagnosis (seen
  // under load: "mpirun detected that one or more processes exited with
  // non-zero status" and no diagnosis). mpirun's own exit code is the root's.
  if (!backend->is_root()) return ValidatorToolResult{kExitOk, "", ""};
  if (!result.ok()) return Failed(result.status());
  const ValidationResult& r = *result;
  if (!flags.trace.empty()) {
    Status st = WriteFileAtomic(
        flags.trace, SideBySideTrace(r.predicted, MeasuredTimeline(r.exec, r.runs,
                                                                   r.comparison.median_iteration)));
    if (!st.ok()) return Failed(st.WithPrefix("--trace"));
  }
  if (!flags.report.empty()) {
    Status st =
        WriteFileAtomic(flags.report, measured::ValidationReportHtml(r, flags.command_line));
    if (!st.ok()) return Failed(st.WithPrefix("--report"));
  }
  return ValidatorToolResult{r.comparison.within_tolerance ? kExitOk : kExitCheckFailed,
                             flags.json ? ValidationJson(r) : ValidationText(r), ""};
}

}  // namespace pipecast
