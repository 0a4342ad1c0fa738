// The simulator tool's work, as a library call: load model.json (and a
// plan.json or schedule text when given), build the schedule and options the
// flags describe, simulate with the timeline recorded, write the files the
// options name (schedule text, Chrome trace, HTML report) and return the
// summary (text or JSON, with the terminal chart). tools/simulator_main.cc
// only parses flags into SimulatorToolOptions, calls RunSimulatorTool,
// prints, and maps the status to an exit code (base/exit_codes.h).
//
// Never prints: notes and warnings go to the caller's callback.
#ifndef PIPECAST_TOOLS_SIMULATOR_TOOL_H_
#define PIPECAST_TOOLS_SIMULATOR_TOOL_H_

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/training_config.h"
#include "tools/training_flags.h"

namespace pipecast {

// The simulator's flags, as typed (docs/simulator.md lists them).
struct SimulatorToolOptions {
  std::string model_path;  // required
  // The configuration the flags give directly: --stages (p; 0: from
  // --partition or --schedule-in), --microbatches (m; 0: from --schedule-in,
  // else p), --chunks (v; 0: 2 for interleaved and looped-bfs, else 1),
  // --microbatch-size, --data-parallel, --tensor-parallel,
  // --sequence-parallel, --tp-comm-overlap, --zero (config.memory.zero),
  // --shard-group (config.memory.sharding.shard_group) and --overlap-factor. The run completes it
  // from the flags below (FillTrainingConfig, --schedule, --recompute) and from the schedule.
  TrainingConfig config;
  TrainingFlags training;  // the flags the planner shares (tools/training_flags.h)
  std::string schedule = "1f1b";
  // --memory-limit, for zb-auto and zb-v-auto: activations a rank may hold, as a count of
  // micro-batch activations ("16") or a size with a unit ("40GiB"); empty: the schedule's
  // default (2p for zb-auto, p for zb-v-auto).
  std::string memory_limit;
  std::string recompute = "off";  // off, selective, full, op or every:K
  // --ep-overlap: auto, on or off (config.overlap.expert_overlap; ParseExpertOverlap).
  std::string ep_overlap = "auto";
  // --ep-dispatcher: deepep, alltoall or allgather (config.layout.expert_dispatcher;
  // ParseExpertDispatcher).
  std::string ep_dispatcher = "deepep";
  // Megatron-LM's --recompute-method (uniform or block; empty: none) and
  // --recompute-num-layers (0: not given), with --recompute full.
  std::string recompute_method;
  int recompute_num_layers = 0;
  // Megatron-LM's --recompute-modules, with --recompute selective (a comma
  // list; empty: not given, core_attn).
  std::string recompute_modules;
  // balanced or empty (the planner's), even (Megatron-LM's), or layer ranges.
  std::string partition;
  // How ZeRO 2 and 3 run (ShardingConfig in sim/memory.h), on or off; the
  // hybrid shard group is config.memory.sharding.shard_group (0: all replicas).
  std::string reshard_after_forward = "on";
  std::string shard_prefetch = "on";
  std::string reduce_every_microbatch = "on";
  // --memory-replay: off, or torchtitan-fsdp2 (sim/memory_replay.h): memory as the GPU reports
  // it from a replay of that framework's step through PyTorch's caching allocator, refused for a
  // configuration the replay does not describe.
  std::string memory_replay = "off";
  std::string trace_path;                // --trace: the Chrome trace
  std::string report_path;               // --report: the self-contained HTML report
  std::string command_line;              // as typed, shown in the report's inputs
  std::string schedule_out;              // --schedule-out: the schedule as text
  std::string schedule_format = "text";  // --schedule-format: text or pytorch-csv
  std::vector<std::string> exports;      // --export FRAMEWORK=PATH (tools/export_flags.h)
  std::string schedule_in;               // --schedule-in: a custom schedule text
  std::string plan_path;                 // --plan: the configuration comes from plan.json
  bool json = false;                     // the summary as one JSON object
  bool gantt = false;        // --gantt: the timeline as a terminal chart, after the summary
  bool gantt_color = false;  // ANSI colours in that chart
  int gantt_width = 0;       // columns of that chart: --width, else the terminal's; 0: the default
  bool allow_over_memory = false;  // --allow-over-memory: exit 0 though a rank is over memory

  // InvalidArgument for flags that contradict each other before any file is
  // read (a usage error): config.Validate(), e.g. --sequence-parallel or
  // --tp-comm-overlap without --tensor-parallel above 1.
  [[nodiscard]] Status Validate() const;
};

// One line for the user (a note or a warning), without the tool's name.
using SimulatorProgress = std::function<void(const std::string& line)>;

struct SimulatorToolResult {
  std::string text;  // for stdout: the summary or JSON, with the chart
  // Empty when every rank's peak fits the GPU's memory limit; else a line
  // naming the worst rank, its peak and the limit (the simulator then exits
  // 4, docs/errors.md).
  std::string over_memory;
};

// The text for stdout and whether it fits. Failures name the file or flag
// that is wrong.
[[nodiscard]] Result<SimulatorToolResult> RunSimulatorTool(const SimulatorToolOptions& options,
                                                           const SimulatorProgress& progress);

}  // namespace pipecast

#endif  // PIPECAST_TOOLS_SIMULATOR_TOOL_H_
