// The planner tool's work, as a library call: from model.json and the
// planner's flags to the report, the plan file, the chosen plan's trace,
// chart and HTML page, and the --check verdict. tools/planner_main.cc only
// parses flags into PlannerToolOptions, calls RunPlannerTool, prints, and
// maps the outcome to an exit code (base/exit_codes.h).
//
// Writes the files the options name (atomically); never prints: progress
// lines go to the caller's callback, the report text comes back.
#ifndef PIPECAST_TOOLS_PLANNER_TOOL_H_
#define PIPECAST_TOOLS_PLANNER_TOOL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "planner/planner.h"
#include "tools/training_flags.h"

namespace pipecast {

// The planner's flags, as typed (docs/planner.md lists them).
struct PlannerToolOptions {
  std::string model_path;              // required
  int gpus = 0;                        // required
  int64_t global_batch = 0;            // 0: the model's global_batch
  TrainingFlags training;              // the flags the simulator shares (tools/training_flags.h)
  std::vector<std::string> schedules;  // empty: the planner's set
  std::vector<int> microbatch_sizes;   // empty: the sizes the model was measured at
  std::vector<int> chunks = {2};
  // auto, on (= full), or a comma list of off, selective, full, op, every:K
  std::string recompute = "auto";
  // Megatron-LM's method for the full entries (uniform or block; empty: none)
  // and its N (0: not given).
  std::string recompute_method;
  int recompute_num_layers = 0;
  // Megatron-LM's --recompute-modules for the selective entries of
  // --recompute (a comma list; empty: core_attn).
  std::string recompute_modules;
  int top = 3;
  int threads = 0;                          // 0: every core
  std::vector<int> zero;                    // ZeRO levels to try; empty: 0, 1 and 3 when d > 1
  std::vector<int> tensor_parallel;         // t to try; empty: the planner's (docs/planner.md)
  std::vector<int> context_parallel;        // cp to try; empty: the planner's (docs/planner.md)
  std::vector<int> expert_parallel;         // ep to try; empty: the planner's (docs/planner.md)
  std::vector<int> expert_tensor_parallel;  // etp to try; empty: 1
  std::string sequence_parallel = "auto";   // auto, on or off (at t > 1)
  bool tp_comm_overlap = false;
  int pipeline_stages = 0;          // p pinned; 0: searched
  int data_parallel = 0;            // d pinned; 0: searched
  int microbatches = 0;             // m pinned; 0: searched
  std::string ep_overlap = "auto";  // auto, on, off or both (PlannerOptions::expert_overlaps)
  // deepep, alltoall or both (PlannerOptions::expert_dispatchers)
  std::string ep_dispatcher = "deepep";
  std::string partition = "balanced";    // balanced, even or both
  bool json = false;                     // the report as one JSON object instead of text
  std::string out;                       // --out: the chosen plan (pipecast-plan/1)
  std::string trace;                     // --trace: the chosen plan's Chrome trace
  std::string schedule_out;              // --schedule-out: the chosen plan's schedule
  std::string schedule_format = "text";  // --schedule-format: text or pytorch-csv
  std::vector<std::string> exports;      // --export FRAMEWORK=PATH (tools/export_flags.h)
  bool gantt = false;        // --gantt: the chosen plan's timeline after the text report
  bool gantt_color = false;  // ANSI colours in that chart
  int gantt_width = 0;       // columns of that chart: --width, else the terminal's; 0: the default
  std::string check;         // --check: the baseline plan.json
  double tolerance = 0.02;   // --check tolerance
  std::string report;        // --report: the self-contained HTML report
  std::string command_line;  // as typed, shown in the report's inputs
  // The search's progress (report/search_progress.h shows it); empty: none.
  std::function<void(const SearchProgress&)> search_progress;

  // How ZeRO 2/3 run (PlannerOptions::sharding): auto searches, on/off pins.
  std::string reshard_after_forward = "auto";  // auto, on or off
  std::string shard_prefetch = "on";           // on or off
  std::string reduce_every_microbatch = "on";  // auto, on or off
  std::string shard_group = "auto";            // auto, or N replicas (0: all of them)
  // --compare-to: a configuration's words ("d=8 zero=3 mbs=2") or a plan.json to compare the
  // choice with (planner/compare.h); empty: none.
  std::string compare_to;

  // InvalidArgument for a --tolerance outside [0, 1), an --export value
  // ParseExportFlags refuses, or tensor-parallel
  // degrees that cannot run on --gpus or that --sequence-parallel on or
  // --tp-comm-overlap needs above 1 (CheckTensorParallelChoices): usage errors.
  [[nodiscard]] Status Validate() const;
};

// --recompute's value other than auto: on (= full) or a comma list of off,
// selective, full, op and every:K, each mode once. The one parser of the
// list: the flag's check (tools/planner_main.cc) and the run use it.
// InvalidArgument "'X' is not one of auto, off, ..." naming the item.
[[nodiscard]] Result<std::vector<RecomputeChoice>> ParseRecomputeList(std::string_view text);

struct PlannerToolResult {
  std::string text;       // for stdout: the text or JSON report, with the diff and chart
  bool feasible = false;  // a configuration fits
  bool checked = false;   // --check was given
  bool check_passed = false;
};

// One line of progress for the user, without the tool's name.
using PlannerProgress = std::function<void(const std::string& line)>;

// Failures (unreadable or bad files, bad flag values, an unwritable output)
// name the file or flag. REQUIRES: options.Validate() is OK.
[[nodiscard]] Result<PlannerToolResult> RunPlannerTool(const PlannerToolOptions& options,
                                                       const PlannerProgress& progress);

}  // namespace pipecast

#endif  // PIPECAST_TOOLS_PLANNER_TOOL_H_
