// `profiler cupti` with CUDA: check for a device, run the command under the
// injection library, build the model from its records.
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "profiler/cupti/injection_runner.h"
#include "profiler/cupti_model.h"
#include "profiler/cupti_profile.h"

namespace pipecast {

Result<Model> ProfileCommand(const CuptiCommandOptions& options, std::string* report) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  PIPECAST_RETURN_IF_ERROR(CheckCudaDevice());
  InjectionRun run;
  run.argv = options.command;
  run.device_buffer_mib = options.device_buffer_mib;
  run.records_dir = options.records_dir;
  PIPECAST_ASSIGN_OR_RETURN(std::vector<ActivityTrace> traces, RunInjected(run));
  PIPECAST_ASSIGN_OR_RETURN(CuptiMeasurement m,
                            MeasureTraces(traces, options.microbatch_size, options.aggregate));
  if (report != nullptr) *report += DescribeMeasurement(m);
  std::string name = options.name;
  if (name.empty()) name = std::filesystem::path(options.command.front()).filename().string();
  const std::map<std::string, std::string> extra = {
      {"command", nlohmann::json(options.command).dump()}};
  return BuildCuptiModel(name, {m}, options.aggregate, extra);
}

}  // namespace pipecast
