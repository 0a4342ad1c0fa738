// The flags the simulator and the planner share: the cluster, the memory
// settings and the training precision and optimizer, with one help text and
// one check each. Header-only, for the tools' mains.
#ifndef PIPECAST_TOOLS_TRAINING_FLAGS_H_
#define PIPECAST_TOOLS_TRAINING_FLAGS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "base/cli.h"
#include "base/flag_checks.h"

namespace pipecast {

// Where each shared flag's value goes, in the tool's own options struct.
struct TrainingFlagFields {
  std::string* cluster;
  double* memory_gb;
  const char* memory_gb_help;
  double* optimizer_step_us;
  std::string* overlap_grad_reduce;
  int64_t* grad_bucket_params;
  std::string* precision;
  std::string* optimizer;
  std::string* grad_dtype;
  double* memory_reserve_gb;
  double* memory_headroom;
};

// Adds --cluster, --memory-gb, --optimizer-step-us, --overlap-grad-reduce,
// --grad-bucket-params, --precision, --optimizer, --grad-dtype,
// --memory-reserve-gb and --memory-headroom, and returns them (the simulator
// makes --plan exclude them).
inline std::vector<CLI::Option*> AddTrainingFlags(CLI::App& app, const TrainingFlagFields& f) {
  std::vector<CLI::Option*> added;
  added.push_back(app.add_option(
      "--cluster", *f.cluster,
      "preset (ideal, a100-80gb, h100-sxm, h200, local) or cluster JSON file (default: the "
      "model's device if it is a preset, else ideal)"));
  added.push_back(app.add_option("--memory-gb", *f.memory_gb, f.memory_gb_help)
                      ->check(FiniteRange(kMaxMemoryGiB, "GiB")));
  added.push_back(
      app.add_option("--optimizer-step-us", *f.optimizer_step_us,
                     "optimizer step time, in us (default: estimated from HBM bandwidth and the "
                     "bytes Adam touches per parameter, docs/simulator.md)")
          ->check(FiniteRange(kMaxStepUs, "microseconds")));
  added.push_back(
      app.add_option("--overlap-grad-reduce", *f.overlap_grad_reduce,
                     "on: the data-parallel gradient reduction runs in buckets beside the "
                     "backward (Megatron-LM's --overlap-grad-reduce); off: after the last op")
          ->check(OneOf({"on", "off"}))
          ->capture_default_str());
  added.push_back(
      app.add_option("--grad-bucket-params", *f.grad_bucket_params,
                     "parameters per gradient bucket (default: Megatron-LM's max(40M, 1M x d))")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 50)));
  added.push_back(app.add_option("--precision", *f.precision,
                                 "training precision, for bytes per parameter: bf16, fp16 "
                                 "(mixed) or fp32 (docs/simulator.md)")
                      ->check(OneOf({"bf16", "fp16", "fp32"}))
                      ->capture_default_str());
  added.push_back(app.add_option("--optimizer", *f.optimizer,
                                 "optimizer, for bytes per parameter: adam, sgd or sgd-nomomentum")
                      ->check(OneOf({"adam", "sgd", "sgd-nomomentum"}))
                      ->capture_default_str());
  added.push_back(
      app.add_option(
             "--grad-dtype", *f.grad_dtype,
             "main-gradient precision: fp32 (Megatron's default) or bf16 (docs/simulator.md)")
          ->check(OneOf({"fp32", "bf16", "fp16"}))
          ->capture_default_str());
  added.push_back(
      app.add_option("--memory-reserve-gb", *f.memory_reserve_gb,
                     "override the per-GPU runtime reserve (CUDA context, cuBLAS, NCCL), in GiB")
          ->check(FiniteRange(kMaxMemoryGiB, "GiB")));
  added.push_back(
      app.add_option("--memory-headroom", *f.memory_headroom,
                     "override the allocator margin, a fraction of capacity (presets: 0.05)")
          ->check(FiniteRange(kMaxMemoryHeadroom, "fraction of capacity")));
  return added;
}

// --gantt and --width, with the tool's own words for what --gantt follows.
inline void AddGanttFlags(CLI::App& app, bool* gantt, int* width, const std::string& gantt_help) {
  app.add_flag("--gantt", *gantt, gantt_help);
  app.add_option("--width", *width,
                 "--gantt: the chart's width in columns (default: the terminal's, else 130)")
      ->check(CLI::Range(20, 100000));
}

// --schedule-out and --schedule-format.
inline void AddScheduleOutFlags(CLI::App& app, std::string* out, std::string* format,
                                const std::string& out_help) {
  app.add_option("--schedule-out", *out, out_help)->check(OutputPath());
  app.add_option("--schedule-format", *format,
                 "--schedule-out's format: text, or pytorch-csv (PyTorch's _load_csv reads it)")
      ->check(OneOf({"text", "pytorch-csv"}))
      ->capture_default_str();
}

}  // namespace pipecast

#endif  // PIPECAST_TOOLS_TRAINING_FLAGS_H_
