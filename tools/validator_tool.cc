#include "tools/validator_tool.h"

#include <memory>
#include <string>
#include <utility>

#include "base/exit_codes.h"
#include "formats/file_util.h"

namespace pipecast {
namespace {

ValidatorToolResult Failed(const Status& status) {
  return ValidatorToolResult{kExitBadInput, "", std::string(status.message())};
}

Result<std::unique_ptr<validate::Backend>> MakeBackend(const std::string& name) {
  if (name == "cpu") return validate::MakeCpuBackend();
  return name == "mpi" ? validate::MakeMpiBackend(nullptr, nullptr) : validate::MakeCudaBackend(0);
}

}  // namespace

ValidatorToolResult RunValidatorTool(const ValidatorToolOptions& flags) {
  using namespace validate;
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
  if (!flags.trace.empty()) {
    Status writable = backend->Agree(
        backend->is_root()
            ? CheckOutputs({{"--trace", flags.trace}},
                           {{"--plan", options.plan_path}, {"--model", options.model_path}})
            : Status::Ok());
    if (!writable.ok()) {
      return backend->is_root() ? Failed(writable) : ValidatorToolResult{kExitBadInput, "", ""};
    }
  }
  Result<ValidationResult> result = RunValidation(options, backend);
  Status agreed = backend->Agree(result.ok() ? Status::Ok() : result.status());
  if (!backend->is_root()) {
    return ValidatorToolResult{agreed.ok() ? kExitOk : kExitBadInput, "", ""};
  }
  if (!result.ok()) return Failed(result.status());
  const ValidationResult& r = *result;
  if (!flags.trace.empty()) {
    Status st = WriteFileAtomic(
        flags.trace, SideBySideTrace(r.predicted, MeasuredTimeline(r.exec, r.runs,
                                                                   r.comparison.median_iteration)));
    if (!st.ok()) return Failed(st.WithPrefix("--trace"));
  }
  return ValidatorToolResult{r.comparison.within_tolerance ? kExitOk : kExitCheckFailed,
                             flags.json ? ValidationJson(r) : ValidationText(r), ""};
}

}  // namespace pipecast
