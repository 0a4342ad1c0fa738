#include "tools/export_flags.h"

#include <fmt/format.h>

#include <filesystem>

#include "formats/cluster_select.h"
#include "formats/schedule_text.h"

namespace pipecast {

void AddExportFlag(CLI::App& app, std::vector<std::string>* values) {
  app.add_option("--export", *values,
                 "write the plan as a framework's settings, FRAMEWORK=PATH, repeatable: "
                 "megatron (arguments), torchtitan (TOML, with its schedule CSV beside it) or "
                 "deepspeed (JSON); what the framework cannot run is said in the file and on "
                 "stderr (docs/frameworks.md)")
      ->take_all();
}

Result<std::vector<ExportSpec>> ParseExportFlags(const std::vector<std::string>& values,
                                                 const std::string& schedule_out,
                                                 const std::string& schedule_format) {
  std::vector<ExportSpec> specs;
  for (const std::string& value : values) {
    const size_t eq = value.find('=');
    if (eq == std::string::npos || eq + 1 == value.size()) {
      return Status::InvalidArgument(fmt::format(
          "--export '{}': expected FRAMEWORK=PATH, e.g. --export megatron=megatron.args "
          "(frameworks: megatron, torchtitan, deepspeed)",
          value));
    }
    auto framework = ParseFramework(value.substr(0, eq));
    if (!framework.ok()) return framework.status().WithPrefix("--export");
    for (const ExportSpec& s : specs) {
      if (s.framework == *framework) {
        return Status::InvalidArgument(
            fmt::format("--export: {} is given twice ({} and {}); give each framework once",
                        FrameworkName(*framework), s.path, value.substr(eq + 1)));
      }
    }
    ExportSpec spec;
    spec.framework = *framework;
    spec.path = value.substr(eq + 1);
    if (spec.framework == Framework::kTorchtitan) {
      if (!schedule_out.empty() && schedule_format == "pytorch-csv") {
        spec.schedule_csv = schedule_out;
      } else {
        spec.schedule_csv = std::filesystem::path(spec.path).replace_extension(".csv").string();
        spec.write_csv = true;
      }
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::vector<NamedPath> ExportOutputs(const std::vector<ExportSpec>& specs) {
  std::vector<NamedPath> out;
  for (const ExportSpec& s : specs) {
    out.push_back({"--export " + std::string(FrameworkName(s.framework)), s.path});
    if (s.write_csv) {
      out.push_back({"--export torchtitan (its schedule CSV)", s.schedule_csv});
    }
  }
  return out;
}

Status WriteExports(const std::vector<ExportSpec>& specs, const PlanFile& plan, const Model& model,
                    const std::function<void(const std::string&)>& progress) {
  ExportRequest request;
  for (const Layer& layer : model.layers) request.layer_names.push_back(layer.name);
  if (model.sequence_length) {
    request.sequence_length = *model.sequence_length;
  } else if (model.source.architecture) {
    request.sequence_length = model.source.architecture->sequence_length;
  }
  const ModelCapacity capacity = ModelExpertCapacity(model);
  request.moe_capacity_factor = capacity.factor;
  request.moe_pad_to_capacity = capacity.pad;
  for (const ExportSpec& spec : specs) {
    const char* name = FrameworkName(spec.framework);
    ExportRequest r = request;
    const bool pipelined = plan.config.layout.pipeline_stages > 1;
    if (spec.framework == Framework::kTorchtitan && pipelined) {
      if (spec.write_csv) {
        PIPECAST_RETURN_IF_ERROR(
            WriteFileAtomic(spec.schedule_csv, ScheduleToPyTorchCsv(plan.schedule))
                .WithPrefix("--export torchtitan (its schedule CSV)"));
        progress(
            fmt::format("wrote the plan's schedule as PyTorch's CSV to {}", spec.schedule_csv));
      }
      r.schedule_csv = std::filesystem::absolute(spec.schedule_csv).lexically_normal().string();
    }
    const FrameworkExport out = ExportPlan(spec.framework, plan, r);
    PIPECAST_RETURN_IF_ERROR(
        WriteFileAtomic(spec.path, out.text).WithPrefix(fmt::format("--export {}", name)));
    progress(fmt::format("wrote the plan as {} settings to {}{}", name, spec.path,
                         out.RunsAsPlanned() ? "" : " (not as planned: see below)"));
    for (const std::string& d : out.differences) {
      progress(fmt::format("{} cannot run the plan as planned: {}", name, d));
    }
    for (const std::string& n : out.notes) progress(fmt::format("{}: note: {}", name, n));
  }
  return Status::Ok();
}

}  // namespace pipecast
