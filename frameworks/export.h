// A chosen plan (formats/plan.h) as the settings of the training frameworks
// that would run it: Megatron-LM command-line arguments, a torchtitan job
// TOML and a DeepSpeed JSON config. Where a framework cannot run the plan as
// planned (a schedule it lacks, a ZeRO level it refuses with pipeline
// parallelism, a partition it cannot place) the export says so in
// `differences`, each naming the closest setting the framework runs, and the
// file holds that closest setting. Every name written is documented, with the
// framework commit it was read from, in docs/frameworks.md; the Megatron-LM
// flags are checked against its argument parser's list
// (tests/fixtures/frameworks/megatron_flags.txt).
//
// Pure functions of the plan and the model's layer names: nothing is read or
// written here (the tools write the files, atomically).
#ifndef PIPECAST_FRAMEWORKS_EXPORT_H_
#define PIPECAST_FRAMEWORKS_EXPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "formats/plan.h"

namespace pipecast {

enum class Framework { kMegatron, kTorchtitan, kDeepSpeed };

// "megatron", "torchtitan", "deepspeed": the --export names.
const char* FrameworkName(Framework framework);
std::vector<std::string> FrameworkNames();
// InvalidArgument naming `name` and the three known names.
Result<Framework> ParseFramework(std::string_view name);

// The source each mapping was read from (docs/frameworks.md): repository and commit.
const char* FrameworkSource(Framework framework);

// What an export needs besides the plan.
struct ExportRequest {
  // The model's layer names in order (model.json `layers`). A first layer
  // whose name holds "embed" is the embedding and a last layer whose name
  // holds "head" or "output" the output layer; every other layer is a
  // transformer layer (what Megatron-LM's --num-layers counts).
  std::vector<std::string> layer_names;
  // The sequence length (model.json source.architecture); 0: unknown, not written.
  int64_t sequence_length = 0;
  // torchtitan: the PyTorch CSV of the plan's schedule (--schedule-format
  // pytorch-csv) that pipeline_parallel_schedule_csv names; empty: none (a
  // plan without pipeline parallelism needs none).
  std::string schedule_csv;
  // The MoE model's expert capacity (model.json source.details "moe",
  // profiler analytic --moe-capacity-factor, ModelExpertCapacity): unset for
  // a dropless model; pad: every expert padded to its capacity.
  std::optional<double> moe_capacity_factor;
  bool moe_pad_to_capacity = false;
};

struct FrameworkExport {
  Framework framework = Framework::kMegatron;
  std::string text;  // the file: arguments one per line, TOML or JSON
  // What the framework cannot run as planned, each with the closest setting
  // it runs (which the file holds). Empty: the file runs the plan as planned.
  std::vector<std::string> differences;
  // What else the user must know (settings the file cannot carry).
  std::vector<std::string> notes;
  bool RunsAsPlanned() const { return differences.empty(); }
};

// The plan as `framework`'s settings. REQUIRES: `plan` was read by ParsePlan
// or made by MakePlanFile (p, v, m stated, the partition covers the layers).
FrameworkExport ExportPlan(Framework framework, const PlanFile& plan, const ExportRequest& request);

// The transformer layers of each stage of the partition (embedding and
// output layers not counted), in virtual-stage order.
std::vector<int> TransformerLayersPerStage(const PlanFile& plan,
                                           const std::vector<std::string>& layer_names);

}  // namespace pipecast

#endif  // PIPECAST_FRAMEWORKS_EXPORT_H_
