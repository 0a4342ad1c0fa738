// `profiler analytic`: flags -> TransformerSpec and AnalyticOptions ->
// EstimateTransformerJson -> model.json on stdout or --out.
#include "tools/analytic_command.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "base/cli.h"
#include "base/exit_codes.h"
#include "base/terminal_text.h"
#include "formats/file_util.h"
#include "formats/formats.h"
#include "profiler/analytic.h"

namespace pipecast {
namespace {

struct AnalyticFlags {
  TransformerSpec spec;
  AnalyticOptions options;
  bool rotary_positions = false;
  std::string attention = "flash";
  std::string time_model;                // empty: matmul, or flat when --matmul-efficiency is given
  bool matmul_efficiency_given = false;  // --matmul-efficiency on the command line
  std::vector<int> tensor_parallel = {1};
  std::string out;  // empty: stdout
};

int RunAnalytic(const AnalyticFlags& flags) {
  // Before any work: --out must not be --gpu's cluster file (spelled any
  // way); a preset name is no file and no input to protect.
  if (!flags.out.empty()) {
    const std::string& gpu = flags.options.gpu_preset;
    std::error_code ec;
    std::vector<NamedPath> inputs;
    if (std::filesystem::is_regular_file(gpu, ec)) inputs.push_back({"--gpu", gpu});
    Status st = CheckOutputs({{"--out", flags.out}}, inputs);
    if (!st.ok()) {
      fmt::print(stderr, "profiler: error: {}\n", TerminalSafeLines(st.message()));
      return kExitBadInput;
    }
  }
  TransformerSpec spec = flags.spec;
  spec.learned_positions = !flags.rotary_positions;
  AnalyticOptions options = flags.options;
  options.attention = flags.attention == "eager" ? Attention::kEager : Attention::kFlash;
  // --matmul-efficiency is a parameter of the flat model: giving it alone
  // selects that model, as before the matmul model existed.
  if (flags.time_model == "matmul" && flags.matmul_efficiency_given) {
    fmt::print(stderr,
               "profiler: error: --matmul-efficiency applies to --time-model flat only; the matmul "
               "model takes its efficiencies from the GPU's table (docs/calibration.md)\n");
    return kExitBadInput;
  }
  const bool flat =
      flags.time_model == "flat" || (flags.time_model.empty() && flags.matmul_efficiency_given);
  options.time_model = flat ? TimeModel::kFlat : TimeModel::kMatmul;
  Result<Model> model = EstimateTransformer(spec, options);
  if (!model.ok()) {
    fmt::print(stderr, "profiler: error: {}\n", model.status().message());
    return kExitBadInput;
  }
  Result<std::string> written = EstimateTransformerJson(spec, options, flags.tensor_parallel);
  if (!written.ok()) {
    fmt::print(stderr, "profiler: error: {}\n", written.status().message());
    return kExitBadInput;
  }
  const std::string& text = *written;
  if (flags.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kExitOk;
  }
  Status st = WriteFileAtomic(flags.out, text);
  if (!st.ok()) {
    fmt::print(stderr, "profiler: error: {}\n", st.WithPrefix("--out").message());
    return kExitBadInput;
  }
  fmt::print(stderr,
             "profiler: wrote {}: {}, {} layers, {:.3f}B parameters (analytic estimate for {}; "
             "every assumption is in its \"source\")\n",
             flags.out, model->name, model->layers.size(),
             static_cast<double>(model->TotalParameters()) / 1e9, model->source.device);
  return kExitOk;
}

CLI::App* AddAnalytic(CLI::App& app, AnalyticFlags& f) {
  CLI::App* cmd = app.add_subcommand(
      "analytic",
      "estimate per-layer time and memory of a GPT-style transformer from its architecture and "
      "a GPU's datasheet (no GPU needed; formulas in docs/profiler.md)");
  TransformerSpec& s = f.spec;
  AnalyticOptions& o = f.options;
  cmd->add_option("--name", s.name, "the model's name")->required();
  cmd->add_option("--layers", s.layers, "transformer blocks")->required();
  cmd->add_option("--hidden", s.hidden, "hidden size h")->required();
  cmd->add_option("--heads", s.heads, "attention heads a (must divide --hidden)")->required();
  cmd->add_option("--seq", s.sequence_length, "sequence length s, tokens per sample")->required();
  cmd->add_option("--vocab", s.vocab, "vocabulary size V")->required();
  s.microbatch_sizes = {1, 2, 4, 8};
  cmd->add_option("--microbatch-sizes", s.microbatch_sizes, "micro-batch sizes to estimate")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--gpu", o.gpu_preset,
                  "GPU: a cluster preset (a100-80gb, h100-sxm, h200) or a cluster JSON file")
      ->capture_default_str();
  cmd->add_option("--ffn-hidden", s.ffn_hidden, "MLP width (default 4 x --hidden)");
  cmd->add_option("--kv-heads", s.kv_heads,
                  "key/value heads for grouped-query attention "
                  "(default --heads)");
  cmd->add_flag("--gated-mlp", s.gated_mlp, "SwiGLU MLP with three matrices (LLaMA)");
  cmd->add_flag("--rotary-positions", f.rotary_positions,
                "rotary position embeddings: no learned position table (LLaMA)");
  cmd->add_flag("--tied-embeddings", s.tied_embeddings,
                "lm_head reuses the token embedding table (no extra parameters)");
  cmd->add_option("--time-model", f.time_model,
                  "matmul (each product timed from its shape with wave quantisation, calibrated "
                  "in docs/calibration.md; the default) or flat (every FLOP at "
                  "--matmul-efficiency of peak; the default when --matmul-efficiency is given)")
      ->check(CLI::IsMember({"matmul", "flat"}));
  cmd->add_option("--matmul-efficiency", o.matmul_efficiency,
                  "flat time model: share of peak TFLOP/s reached by matrix products")
      ->capture_default_str()
      ->each([&f](const std::string&) { f.matmul_efficiency_given = true; });
  cmd->add_option("--tensor-parallel", f.tensor_parallel,
                  "tensor-parallel degrees to write per-GPU profiles for, e.g. 1,2,4,8 (t > 1 "
                  "with sequence_parallel false and true; keys in docs/formats.md); 1 writes "
                  "today's single-GPU profiles only")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--memory-efficiency", o.memory_efficiency,
                  "share of HBM bandwidth reached by element-wise kernels")
      ->capture_default_str();
  cmd->add_option("--bytes-per-element", o.bytes_per_element, "2 (bf16), 1 (fp8) or 4 (fp32)")
      ->capture_default_str();
  cmd->add_option("--attention", f.attention,
                  "flash (FlashAttention: no s x s tensors kept) or eager (softmax output and "
                  "dropout kept, Korthikanti et al. 2022)")
      ->check(CLI::IsMember({"flash", "eager"}))
      ->capture_default_str();
  cmd->add_option("--global-batch", s.global_batch,
                  "samples per iteration, written as the planner's default (default: omitted)");
  cmd->add_option("--out", f.out, "write model.json here (default: stdout)")
      ->check(pipecast::OutputPath());
  return cmd;
}

}  // namespace

std::function<int()> AddAnalyticCommand(CLI::App& app) {
  auto flags = std::make_shared<AnalyticFlags>();
  AddAnalytic(app, *flags);
  return [flags] { return RunAnalytic(*flags); };
}

}  // namespace pipecast
