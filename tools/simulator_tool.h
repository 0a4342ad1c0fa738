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

#include "base/status.h"

namespace pipecast {

// The simulator's flags, as typed (docs/simulator.md lists them).
struct SimulatorToolOptions {
  std::string model_path;  // required
  int stages = 0;          // 0: from --partition or --schedule-in
  int microbatches = 0;    // 0: from --schedule-in, else the number of stages
  std::string schedule = "1f1b";
  int chunks = 0;  // v, model chunks per GPU; 0: 2 for interleaved and looped-bfs, else 1
  // --memory-limit, for zb-auto and zb-v-auto: activations a rank may hold, as a count of
  // micro-batch activations ("16") or a size with a unit ("40GiB"); empty: the schedule's
  // default (2p for zb-auto, p for zb-v-auto).
  std::string memory_limit;
  std::string recompute = "off";  // off, selective or full
  int microbatch_size = 1;
  std::string partition;  // empty: balanced on time
  std::string cluster;    // empty: the preset named by the model's source.device, else ideal
  double memory_gb = -1;  // < 0: the cluster's
  int data_parallel = 1;
  int tensor_parallel = 1;  // t: GPUs of one node splitting each layer of a stage
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;
  double optimizer_step_us = -1;           // < 0: estimated from HBM bandwidth
  std::string overlap_grad_reduce = "on";  // on or off
  int64_t grad_bucket_params = 0;          // 0: Megatron-LM's max(40M, 1M x d)
  std::string precision = "bf16";
  std::string optimizer = "adam";
  std::string grad_dtype = "fp32";  // main gradients: fp32 (Megatron's default) or bf16
  int zero = 0;                     // ZeRO level over the data-parallel replicas
  // How ZeRO 2 and 3 run (ShardingConfig in sim/memory.h): on or off, and
  // the hybrid shard group (0: all replicas).
  std::string reshard_after_forward = "on";
  std::string shard_prefetch = "on";
  std::string reduce_every_microbatch = "on";
  int shard_group = 0;
  double overlap_factor = 1.0;           // an overlapped F&B pair lasts factor x (F + B)
  double memory_reserve_gb = -1;         // < 0: the cluster's runtime reserve
  double memory_headroom = -1;           // < 0: the cluster's allocator margin
  std::string trace_path;                // --trace: the Chrome trace
  std::string report_path;               // --report: the self-contained HTML report
  std::string command_line;              // as typed, shown in the report's inputs
  std::string schedule_out;              // --schedule-out: the schedule as text
  std::string schedule_format = "text";  // --schedule-format: text or pytorch-csv
  std::string schedule_in;               // --schedule-in: a custom schedule text
  std::string plan_path;                 // --plan: the configuration comes from plan.json
  bool json = false;                     // the summary as one JSON object
  bool gantt = false;        // --gantt: the timeline as a terminal chart, after the summary
  bool gantt_color = false;  // ANSI colours in that chart
  int gantt_width = 0;       // columns of that chart: --width, else the terminal's; 0: the default

  // InvalidArgument for flags that contradict each other before any file is
  // read (a usage error): --sequence-parallel or --tp-comm-overlap without
  // --tensor-parallel above 1.
  [[nodiscard]] Status Validate() const;
};

// One line for the user (a note or a warning), without the tool's name.
using SimulatorProgress = std::function<void(const std::string& line)>;

// The text for stdout. Failures name the file or flag that is wrong.
[[nodiscard]] Result<std::string> RunSimulatorTool(const SimulatorToolOptions& options,
                                                   const SimulatorProgress& progress);

}  // namespace pipecast

#endif  // PIPECAST_TOOLS_SIMULATOR_TOOL_H_
