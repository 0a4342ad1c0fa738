// The flags the simulator and the planner share: the cluster, the memory
// settings and the training precision and optimizer, with one help text and
// one check each, and the one function that turns them into the
// configuration (sim/training_config.h) and the cluster.
#ifndef PIPECAST_TOOLS_TRAINING_FLAGS_H_
#define PIPECAST_TOOLS_TRAINING_FLAGS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/cli.h"
#include "base/flag_checks.h"
#include "base/status.h"
#include "formats/cluster_select.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/training_config.h"

namespace pipecast {

// The shared flags, as typed (docs/simulator.md and docs/planner.md list
// them).
struct TrainingFlags {
  std::string cluster;                     // empty: the model's device if a preset, else ideal
  double memory_gb = -1;                   // < 0: the cluster's
  double memory_reserve_gb = -1;           // < 0: the cluster's runtime reserve
  double memory_headroom = -1;             // < 0: the cluster's allocator margin
  double optimizer_step_us = -1;           // < 0: estimated from HBM bandwidth
  std::string overlap_grad_reduce = "on";  // on or off
  int64_t grad_bucket_params = 0;          // 0: Megatron-LM's max(40M, 1M x d)
  std::string precision = "bf16";
  std::string optimizer = "adam";
  std::string grad_dtype = "fp32";  // main gradients: fp32 (Megatron's default) or bf16
  std::string fp8_recipe;           // --precision fp8: delayed (default), current, blockwise, mxfp8
  std::string fp8_param_gather = "off";  // on: FP8 primary weights, gathered in FP8
  // How ZeRO 3 keeps its shards: zero (the ZeRO accounting) or fsdp2 (FSDP2's fp32 shards,
  // gradients made in the backward); MemoryConfig::sharded_state.
  std::string sharded_state = "zero";
  // How context parallelism exchanges keys and values: ring (p2p) or
  // allgather (all_gather); ParseCpAlgorithm.
  std::string cp_algorithm = "ring";
  // Megatron-LM's even split's options (--first-stage-layers,
  // --last-stage-layers, --account-for-embedding, --account-for-loss).
  EvenSplitOptions even;
};

// Adds --cluster, --memory-gb (with the tool's help text), --optimizer-step-us,
// --overlap-grad-reduce, --grad-bucket-params, --precision, --optimizer,
// --grad-dtype, --fp8-recipe, --fp8-param-gather, --sharded-state, --cp-algorithm,
// --memory-reserve-gb,
// --memory-headroom and the even split's --first-stage-layers,
// --last-stage-layers, --account-for-embedding and --account-for-loss, bound
// to `flags`,
// and returns them (the simulator makes --plan exclude them). `flags` must
// outlive the parse.
std::vector<CLI::Option*> AddTrainingFlags(CLI::App& app, TrainingFlags* flags,
                                           const char* memory_gb_help);

// What the shared flags set in `config`: the bytes per parameter of
// --precision, --optimizer and --grad-dtype, --sharded-state (config->memory's ZeRO level
// and sharding settings kept), the
// gradient reduction's overlap and bucket size, and the optimizer step
// (given by --optimizer-step-us, else estimated), the context-parallel
// algorithm (config->layout.cp_algorithm; the degree is each tool's
// --context-parallel), and the even split's
// options (config->partition.even; the rule is each tool's --partition).
// The one place these flags
// become the configuration. InvalidArgument naming the flags that conflict
// (fp32 training with half-precision main gradients).
[[nodiscard]] Status FillTrainingConfig(const TrainingFlags& flags, TrainingConfig* config);

// The cluster --cluster, the model's device and --memory-gb choose
// (formats/cluster_select.h), with --memory-reserve-gb and --memory-headroom
// applied. Failures name the flag; --precision fp8 is refused on a GPU with a
// known bf16 peak and no FP8 peak (A100), and --fp8-recipe mxfp8 on one
// without MXFP8 tensor cores.
[[nodiscard]] Result<ClusterSelection> SelectToolCluster(const TrainingFlags& flags,
                                                         const Model& model);

// The model's costs against the chosen cluster's GPU, before anything is
// simulated: the warning of ModelGpuMismatch (formats/cluster_select.h), or
// empty, when they were made for another GPU; an error starting with
// `model_path` when they are faster than the GPU can run
// (CheckCostsWithinPeak, sim/stage_costs.h).
[[nodiscard]] Result<std::string> CheckModelOnCluster(const Model& model,
                                                      const std::string& model_path,
                                                      const Cluster& cluster);

// --schedule, --schedules: a pipecast schedule name, or the PyTorch
// pipelining class that runs the same order ("ScheduleInterleaved1F1B",
// "ZBVZeroBubble", any case; sim/schedule.h PyTorchScheduleKind), which the
// check replaces by the pipecast name; else OneOf's error with the nearest
// name.
inline CLI::Validator ScheduleChoice() {
  const CLI::Validator names = OneOf(BuiltinScheduleNames());
  return CLI::Validator(
      [names](std::string& value) -> std::string {
        if (std::optional<ScheduleKind> kind = PyTorchScheduleKind(value)) {
          value = ScheduleKindName(*kind);
          return "";
        }
        return names(value);
      },
      "SCHEDULE");  // the help text lists them
}

// --gantt and --width, with the tool's own words for what --gantt follows.
inline void AddGanttFlags(CLI::App& app, bool* gantt, int* width, const std::string& gantt_help) {
  app.add_flag("--gantt", *gantt, gantt_help);
  app.add_option("--width", *width,
                 "--gantt: the chart's width in columns (default: the terminal's, else 130)")
      ->check(pipecast::IntRange(20, 100000));
}

// --schedule-out and --schedule-format; returns the latter, for
// ResolveScheduleFormat.
inline CLI::Option* AddScheduleOutFlags(CLI::App& app, std::string* out, std::string* format,
                                        const std::string& out_help) {
  app.add_option("--schedule-out", *out, out_help)->check(OutputPath());
  return app
      .add_option("--schedule-format", *format,
                  "--schedule-out's format: text, or pytorch-csv (PyTorch's _load_csv reads "
                  "it); default: pytorch-csv for a file named *.csv, else text")
      ->check(OneOf({"text", "pytorch-csv"}))
      ->capture_default_str();
}

// After the parse: a --schedule-out file named *.csv gets PyTorch's CSV when
// --schedule-format is not given (`format_flag` not parsed), and an explicit
// --schedule-format text into a *.csv file is refused (issue 28: a .csv file
// of space-separated text). The usage error, or empty.
std::string ResolveScheduleFormat(const CLI::Option& format_flag, const std::string& out,
                                  std::string* format);

}  // namespace pipecast

#endif  // PIPECAST_TOOLS_TRAINING_FLAGS_H_
