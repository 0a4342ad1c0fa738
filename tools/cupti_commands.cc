#include "tools/cupti_commands.h"

#include <fmt/format.h>

#include <cstdio>

#include "base/cli.h"
#include "base/exit_codes.h"
#include "base/terminal_text.h"
#include "formats/file_util.h"
#include "formats/formats.h"

namespace pipecast {
namespace {

void AddAggregateFlags(CLI::App* cmd, AggregateOptions& a) {
  cmd->add_option("--warmup", a.warmup,
                  "iterations skipped first (allocator growth, autotuning, lazy loading)")
      ->capture_default_str();
  cmd->add_option("--iterations", a.iterations,
                  "iterations aggregated after the warm-up (median and spread per layer)")
      ->capture_default_str();
}

int Finish(const char* what, Result<Model> model, const std::string& report,
           const std::string& out) {
  if (!report.empty()) fmt::print(stderr, "{}", report);
  if (!model.ok()) {
    fmt::print(stderr, "profiler {}: error: {}\n", what,
               TerminalSafeLines(model.status().message()));
    return kExitBadInput;
  }
  const std::string text = ModelToJson(*model);
  if (out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kExitOk;
  }
  Status st = WriteFileAtomic(out, text);
  if (!st.ok()) {
    fmt::print(stderr, "profiler {}: error: {}\n", what,
               TerminalSafeLines(st.WithPrefix("--out").message()));
    return kExitBadInput;
  }
  fmt::print(stderr, "profiler {}: wrote {}: {} layers measured with CUPTI on {}\n", what, out,
             model->layers.size(), model->source.device);
  return kExitOk;
}

}  // namespace

CuptiCommands::CuptiCommands(CLI::App& app) {
  CuptiCommandOptions& c = cupti_options_;
  cupti_ = app.add_subcommand(
      "cupti",
      "measure per-layer GPU time and memory of an unmodified CUDA program with CUPTI; layers "
      "are NVTX ranges named pipecast:<layer>:forward|backward|weight_grad (docs/profiler.md)."
      "\nExample: profiler cupti --warmup 3 --iterations 20 --out model.json -- python train.py");
  cupti_->add_option("--out", cupti_out_, "write model.json here (default: stdout)")
      ->check(pipecast::OutputPath());
  cupti_->add_option("--name", c.name, "the model's name (default: the program's file name)");
  cupti_
      ->add_option("--microbatch-size", c.microbatch_size,
                   "the micro-batch size the program runs, written into the profile")
      ->capture_default_str();
  AddAggregateFlags(cupti_, c.aggregate);
  cupti_
      ->add_option("--device-buffer-mib", c.device_buffer_mib,
                   "CUPTI device timestamp buffer in MiB (0: CUPTI's default); raise it when "
                   "the profile is refused for records without timestamps")
      ->capture_default_str();
  cupti_->add_option("--keep-records", c.records_dir,
                     "write the raw records files (pipecast-activity/1) into this folder and "
                     "keep them");
  cupti_->add_option("command", c.command, "the program to profile and its arguments, after --")
      ->required();

  BuiltinOptions& b = builtin_options_;
  builtin_ = app.add_subcommand(
      "builtin",
      "measure pipecast's own CUDA transformer block (cuBLAS products, layer norm, softmax, "
      "GELU) with CUPTI: forward, input gradient and weight gradient per block.\nExample: "
      "profiler builtin --hidden 1024 --heads 16 --seq 512 --microbatch-sizes 1,2,4 --out "
      "block.json");
  builtin_->add_option("--out", builtin_out_, "write model.json here (default: stdout)")
      ->check(pipecast::OutputPath());
  builtin_->add_option("--name", b.name, "the model's name")->capture_default_str();
  builtin_->add_option("--hidden", b.shape.hidden, "hidden size h")->capture_default_str();
  builtin_->add_option("--heads", b.shape.heads, "attention heads (must divide --hidden)")
      ->capture_default_str();
  builtin_->add_option("--ffn-hidden,--ffn", b.shape.ffn, "MLP width (default 4 x --hidden)");
  builtin_->add_option("--seq", b.shape.seq, "sequence length, tokens per sample")
      ->capture_default_str();
  builtin_->add_option("--layers", b.shape.layers, "blocks, each with its own weights")
      ->capture_default_str();
  builtin_->add_option("--microbatch-sizes", b.microbatch_sizes, "micro-batch sizes to measure")
      ->delimiter(',')
      ->capture_default_str();
  builtin_
      ->add_option("--tensor-parallel", b.tensor_parallel,
                   "tensor-parallel degrees to measure one GPU's shard at, e.g. 1,2,4,8 (each "
                   "must divide --heads and the MLP width; 1 is always measured)")
      ->delimiter(',');
  builtin_->add_option("--device", b.device, "CUDA device ordinal")->capture_default_str();
  AddAggregateFlags(builtin_, b.aggregate);
}

int CuptiCommands::RunIfParsed() {
  if (cupti_->parsed()) return RunCupti();
  if (builtin_->parsed()) return RunBuiltin();
  return -1;
}

int CuptiCommands::RunCupti() {
  std::string report;
  Result<Model> model = ProfileCommand(cupti_options_, &report);
  return Finish("cupti", std::move(model), report, cupti_out_);
}

int CuptiCommands::RunBuiltin() {
  std::string report;
  Result<Model> model = ProfileBuiltin(builtin_options_, &report);
  return Finish("builtin", std::move(model), report, builtin_out_);
}

}  // namespace pipecast
