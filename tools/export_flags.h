// --export FRAMEWORK=PATH, the planner's and the simulator's: the chosen (or
// simulated) plan written as a training framework's settings
// (frameworks/export.h, docs/frameworks.md). Repeatable, one framework each.
#ifndef PIPECAST_TOOLS_EXPORT_FLAGS_H_
#define PIPECAST_TOOLS_EXPORT_FLAGS_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/file_util.h"
#include "formats/plan.h"
#include "frameworks/export.h"
#include "sim/model.h"

namespace pipecast {

struct ExportSpec {
  Framework framework = Framework::kMegatron;
  std::string path;  // the file to write
  // torchtitan only: the PyTorch CSV its TOML names (`path` with the extension .csv, or
  // --schedule-out's file when that is a pytorch-csv); empty for the others.
  std::string schedule_csv;
  bool write_csv = false;  // the CSV is written here (not already by --schedule-out)
};

// Adds --export (repeatable) bound to `values`.
void AddExportFlag(CLI::App& app, std::vector<std::string>* values);

// Parses the --export values. `schedule_out` with `schedule_format`
// "pytorch-csv" is the CSV a torchtitan export names instead of writing its
// own. InvalidArgument naming --export: a value without '=' or with an empty
// path, an unknown framework, a framework given twice.
Result<std::vector<ExportSpec>> ParseExportFlags(const std::vector<std::string>& values,
                                                 const std::string& schedule_out,
                                                 const std::string& schedule_format);

// The files the exports write, named by flag, for CheckOutputs.
std::vector<NamedPath> ExportOutputs(const std::vector<ExportSpec>& specs);

// Writes each export of `plan` for `model` atomically (torchtitan's CSV
// first), with one progress line per file and one per difference from the
// plan. Failures name --export and the path.
[[nodiscard]] Status WriteExports(const std::vector<ExportSpec>& specs, const PlanFile& plan,
                                  const Model& model,
                                  const std::function<void(const std::string&)>& progress);

}  // namespace pipecast

#endif  // PIPECAST_TOOLS_EXPORT_FLAGS_H_
