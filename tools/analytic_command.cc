// `profiler analytic`: flags (and --hf-config) -> TransformerSpec and
// AnalyticOptions -> EstimateTransformerJson -> model.json on stdout or --out;
// or, with --describe, the parameter counts and shapes on stdout.
#include "tools/analytic_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "base/cli.h"
#include "base/exit_codes.h"
#include "base/terminal_text.h"
#include "formats/file_util.h"
#include "formats/formats.h"
#include "profiler/analytic.h"
#include "profiler/hf_config.h"
#include "profiler/layer_shapes.h"

namespace pipecast {
namespace {

struct AnalyticFlags {
  TransformerSpec spec;  // what the flags give; with --hf-config, laid over the file
  AnalyticOptions options;
  std::string hf_config;  // a HuggingFace config.json; empty: the flags describe the model
  bool describe = false;  // print parameters and shapes instead of estimating
  // The architecture flags, to tell which were given (they win over --hf-config).
  struct {
    CLI::Option *name, *layers, *hidden, *heads, *seq, *vocab, *ffn_hidden, *kv_heads, *head_dim,
        *sliding_window, *gated_mlp, *rotary, *tied;
    // Mixture of experts (docs/profiler.md "Mixture of experts").
    CLI::Option *experts, *experts_per_token, *expert_ffn, *shared_experts, *shared_expert_ffn,
        *first_dense_layers;
  } given{};
  int first_dense_layers = 0;  // --first-dense-layers: dense blocks before the first MoE block
  bool rotary_positions = false;
  std::string attention = "flash2";
  std::string loss = "fused";
  std::string elementwise = "fused";
  std::string moe_dispatcher = "deepep";  // --moe-dispatcher: deepep, alltoall or allgather
  double moe_capacity_factor = 0;         // --moe-capacity-factor, when given
  CLI::Option* moe_capacity_factor_given = nullptr;
  std::string precision = "bf16";        // bf16, or fp8 with --fp8-recipe
  std::string fp8_recipe;                // empty: delayed with --precision fp8
  std::string time_model;                // empty: matmul, or flat when --matmul-efficiency is given
  bool matmul_efficiency_given = false;  // --matmul-efficiency on the command line
  std::vector<int> tensor_parallel = {1};
  std::string out;  // empty: stdout
};

// The mixture-of-experts flags over `spec` (the flags' spec, or the file's):
// each given one sets its field; --first-dense-layers N makes blocks 0..N-1
// dense. Names each in `over` when given. A usage error (exit 2) when an
// expert flag is given for a model without --experts.
std::optional<int> LayMoeFlags(const AnalyticFlags& flags, TransformerSpec* spec,
                               std::vector<std::string>* over) {
  const auto& g = flags.given;
  MoeSpec& m = spec->moe;
  const MoeSpec& f = flags.spec.moe;
  auto lay = [&](const CLI::Option* option, int MoeSpec::*member) {
    if (option->count() == 0) return;
    m.*member = f.*member;
    if (over != nullptr) over->push_back(option->get_name());
  };
  lay(g.experts, &MoeSpec::experts);
  lay(g.experts_per_token, &MoeSpec::experts_per_token);
  lay(g.expert_ffn, &MoeSpec::expert_ffn);
  lay(g.shared_experts, &MoeSpec::shared_experts);
  lay(g.shared_expert_ffn, &MoeSpec::shared_expert_ffn);
  if (g.first_dense_layers->count() > 0) {
    m.dense_layers.clear();
    for (int i = 0; i < flags.first_dense_layers && i < spec->layers; ++i) {
      m.dense_layers.push_back(i);
    }
    if (over != nullptr) over->push_back(g.first_dense_layers->get_name());
  }
  if (m.experts == 0) {
    for (const CLI::Option* o : {g.experts_per_token, g.expert_ffn, g.shared_experts,
                                 g.shared_expert_ffn, g.first_dense_layers}) {
      if (o->count() == 0) continue;
      fmt::print(stderr,
                 "profiler: error: {} needs --experts (the routed experts of each MoE "
                 "block)\nRun with --help for more information.\n",
                 o->get_name());
      return kExitUsage;
    }
    return std::nullopt;
  }
  // Flags alone: a width and a top-k by default, as an MoE needs both.
  if (m.expert_ffn == 0) m.expert_ffn = spec->FfnHidden();
  if (m.experts_per_token == 0) m.experts_per_token = std::min(2, m.experts);
  return std::nullopt;
}

// The architecture: from --hf-config with every given flag laid over it
// (docs/profiler.md, "Precedence"), or from the flags alone, which must then
// name the required ones. Returns an exit code, or nullopt with `spec` set.
std::optional<int> ResolveSpec(const AnalyticFlags& flags, TransformerSpec* spec) {
  const auto& g = flags.given;
  if (flags.hf_config.empty()) {
    for (const CLI::Option* required : {g.name, g.layers, g.hidden, g.heads, g.seq, g.vocab}) {
      if (required->count() == 0) {
        fmt::print(stderr,
                   "profiler: error: {} is required (or give the model as --hf-config "
                   "config.json)\nRun with --help for more information.\n",
                   required->get_name());
        return kExitUsage;
      }
    }
    *spec = flags.spec;
    spec->learned_positions = !flags.rotary_positions;
    if (auto code = LayMoeFlags(flags, spec, nullptr)) return code;
    return std::nullopt;
  }
  Result<HfConfig> config = LoadHfConfig(flags.hf_config);
  if (!config.ok()) {
    fmt::print(stderr, "profiler: error: {}\n", config.status().message());
    return kExitBadInput;
  }
  TransformerSpec& s = *spec;
  s = config->architecture;
  const TransformerSpec& f = flags.spec;
  std::vector<std::string> over;
  auto lay = [&](const CLI::Option* option, auto member) {
    if (option->count() == 0) return;
    s.*member = f.*member;
    over.push_back(option->get_name());
  };
  lay(g.name, &TransformerSpec::name);
  lay(g.layers, &TransformerSpec::layers);
  lay(g.hidden, &TransformerSpec::hidden);
  lay(g.heads, &TransformerSpec::heads);
  lay(g.seq, &TransformerSpec::sequence_length);
  lay(g.vocab, &TransformerSpec::vocab);
  lay(g.ffn_hidden, &TransformerSpec::ffn_hidden);
  lay(g.kv_heads, &TransformerSpec::kv_heads);
  lay(g.head_dim, &TransformerSpec::head_dim);
  lay(g.sliding_window, &TransformerSpec::sliding_window);
  lay(g.gated_mlp, &TransformerSpec::gated_mlp);
  lay(g.tied, &TransformerSpec::tied_embeddings);
  if (g.rotary->count() > 0) {
    s.learned_positions = !flags.rotary_positions;
    over.push_back(g.rotary->get_name());
  }
  if (auto code = LayMoeFlags(flags, &s, &over)) return code;
  if (s.name.empty()) s.name = std::filesystem::path(flags.hf_config).stem().string();
  std::string seq_note;
  if (s.sequence_length == 0) {
    s.sequence_length =
        std::min(kDefaultHfSequenceLength,
                 s.MaxPositions() > 0 ? s.MaxPositions() : kDefaultHfSequenceLength);
    seq_note = fmt::format("; sequence length {} by default (--seq sets it)", s.sequence_length);
    fmt::print(stderr,
               "profiler: --seq not given: {} tokens per sample (the model's context is {})\n",
               s.sequence_length, s.MaxPositions());
  }
  s.microbatch_sizes = f.microbatch_sizes;
  s.global_batch = f.global_batch;
  s.from = fmt::format("HuggingFace config.json {}, model_type {}{}{}", flags.hf_config,
                       config->model_type,
                       over.empty() ? "" : "; flags over the file: " + JoinNames(over), seq_note);
  for (const std::string& note : config->notes) s.from += "; " + note;
  return std::nullopt;
}

// profiler analytic's one error line for `status` (exit 1).
int Fail(const Status& status) {
  fmt::print(stderr, "profiler: error: {}\n", status.message());
  return kExitBadInput;
}

// --out must not be --gpu's cluster file (spelled any way) or --hf-config; a
// preset name is no file and no input to protect.
Status CheckAnalyticOutput(const AnalyticFlags& flags) {
  if (flags.out.empty()) return Status::Ok();
  const std::string& gpu = flags.options.gpu_preset;
  std::error_code ec;
  std::vector<NamedPath> inputs;
  if (std::filesystem::is_regular_file(gpu, ec)) inputs.push_back({"--gpu", gpu});
  if (!flags.hf_config.empty()) inputs.push_back({"--hf-config", flags.hf_config});
  return CheckOutputs({{"--out", flags.out}}, inputs);
}

// The estimate's options from the flags: the attention kernel, FP8 and its
// recipe, the time model.
Result<AnalyticOptions> OptionsFromFlags(const AnalyticFlags& flags) {
  AnalyticOptions options = flags.options;
  PIPECAST_ASSIGN_OR_RETURN(options.attention, ParseAttention(flags.attention));
  PIPECAST_ASSIGN_OR_RETURN(options.loss, ParseLoss(flags.loss));
  PIPECAST_ASSIGN_OR_RETURN(options.elementwise, ParseElementwise(flags.elementwise));
  std::optional<ExpertDispatcher> dispatcher = ParseExpertDispatcher(flags.moe_dispatcher);
  if (!dispatcher) {
    return Status::InvalidArgument(fmt::format(
        "--moe-dispatcher {}: expected deepep, alltoall or allgather", flags.moe_dispatcher));
  }
  options.moe_dispatcher = *dispatcher;
  if (flags.moe_capacity_factor_given != nullptr && flags.moe_capacity_factor_given->count() > 0) {
    options.moe_capacity_factor = flags.moe_capacity_factor;  // checked by Validate
  }
  if (flags.precision == "fp8") {
    PIPECAST_ASSIGN_OR_RETURN(
        options.fp8, ParseFp8Recipe(flags.fp8_recipe.empty() ? "delayed" : flags.fp8_recipe));
  } else if (!flags.fp8_recipe.empty()) {
    return Status::InvalidArgument(
        fmt::format("--fp8-recipe {} needs --precision fp8 (the precision is {})", flags.fp8_recipe,
                    flags.precision));
  }
  // --matmul-efficiency is a parameter of the flat model: giving it alone
  // selects that model, as before the matmul model existed.
  if (flags.time_model == "matmul" && flags.matmul_efficiency_given) {
    return Status::InvalidArgument(
        "--matmul-efficiency applies to --time-model flat only; the matmul model takes its "
        "efficiencies from the GPU's table (docs/calibration.md)");
  }
  const bool flat =
      flags.time_model == "flat" || (flags.time_model.empty() && flags.matmul_efficiency_given);
  options.time_model = flat ? TimeModel::kFlat : TimeModel::kMatmul;
  return options;
}

// model.json's `text` to --out (a line on stderr says what it holds), or to
// stdout without --out.
int WriteAnalytic(const AnalyticFlags& flags, const TransformerSpec& spec, const Model& model,
                  const std::string& text) {
  if (flags.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kExitOk;
  }
  Status st = WriteFileAtomic(flags.out, text);
  if (!st.ok()) return Fail(st.WithPrefix("--out"));
  // A mixture of experts also says what one token reaches.
  const ParameterCount count = CountParameters(spec);
  const std::string active =
      spec.moe.MoeBlocks(spec.layers) > 0
          ? fmt::format(", {:.3f}B active per token", static_cast<double>(count.active) / 1e9)
          : "";
  fmt::print(stderr,
             "profiler: wrote {}: {}, {} layers, {:.3f}B parameters{} (analytic estimate for {}; "
             "every assumption is in its \"source\")\n",
             flags.out, model.name, model.layers.size(),
             static_cast<double>(model.TotalParameters()) / 1e9, active, model.source.device);
  return kExitOk;
}

int RunAnalytic(const AnalyticFlags& flags) {
  // Before any work.
  if (Status st = CheckAnalyticOutput(flags); !st.ok()) {
    fmt::print(stderr, "profiler: error: {}\n", TerminalSafeLines(st.message()));
    return kExitBadInput;
  }
  TransformerSpec spec;
  if (auto code = ResolveSpec(flags, &spec)) return *code;
  if (flags.describe) {
    if (Status st = spec.Validate(); !st.ok()) return Fail(st);
    fmt::print("{}", DescribeShapes(spec));
    return kExitOk;
  }
  Result<AnalyticOptions> options = OptionsFromFlags(flags);
  if (!options.ok()) return Fail(options.status());
  Result<Model> model = EstimateTransformer(spec, *options);
  if (!model.ok()) return Fail(model.status());
  Result<std::string> written = EstimateTransformerJson(spec, *options, flags.tensor_parallel);
  if (!written.ok()) return Fail(written.status());
  return WriteAnalytic(flags, spec, *model, *written);
}

// The architecture (or --hf-config, --describe), the micro-batch sizes and
// the GPU.
void AddShapeFlags(CLI::App* cmd, AnalyticFlags& f) {
  TransformerSpec& s = f.spec;
  AnalyticOptions& o = f.options;
  auto& g = f.given;
  cmd->add_option("--hf-config", f.hf_config,
                  "read the architecture from a HuggingFace config.json (model_types: " +
                      JoinNames(KnownHfModelTypes()) +
                      "); flags given beside it win over the file");
  cmd->add_flag("--describe", f.describe,
                "print the parameter counts (total and active per token) and each block's "
                "products instead of estimating; works for mixture-of-experts models too");
  g.name = cmd->add_option("--name", s.name,
                           "the model's name (required without --hf-config; default there: the "
                           "file's name)");
  g.layers =
      cmd->add_option("--layers", s.layers, "transformer blocks (required without --hf-config)");
  g.hidden = cmd->add_option("--hidden", s.hidden, "hidden size h (required without --hf-config)");
  g.heads = cmd->add_option("--heads", s.heads,
                            "attention heads a (must divide --hidden unless --head-dim is given; "
                            "required without --hf-config)");
  g.seq = cmd->add_option("--seq", s.sequence_length,
                          "sequence length s, tokens per sample (required without --hf-config; "
                          "default there: 4096 or the model's context if shorter)");
  g.vocab = cmd->add_option("--vocab", s.vocab, "vocabulary size V (required without --hf-config)");
  s.microbatch_sizes = {1, 2, 4, 8};
  cmd->add_option("--microbatch-sizes", s.microbatch_sizes, "micro-batch sizes to estimate")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option(
         "--cluster,--gpu", o.gpu_preset,
         "the GPU: a cluster preset (a100-80gb, h100-sxm, h200) or a cluster JSON file, as the "
         "simulator and planner take it (--gpu is the older name)")
      ->capture_default_str();
  g.ffn_hidden =
      cmd->add_option("--ffn-hidden,--ffn", s.ffn_hidden, "MLP width (default 4 x --hidden)");
  g.kv_heads = cmd->add_option("--kv-heads", s.kv_heads,
                               "key/value heads for grouped-query attention "
                               "(default --heads)");
  g.head_dim = cmd->add_option("--head-dim", s.head_dim,
                               "channels per attention head (default --hidden / --heads)");
  g.sliding_window = cmd->add_option(
      "--sliding-window", s.sliding_window,
      "keys each query attends to in sliding-window blocks (every block without --hf-config; "
      "0: none)");
  g.gated_mlp = cmd->add_flag("--gated-mlp", s.gated_mlp,
                              "SwiGLU MLP with three matrices (LLaMA); --gated-mlp=false turns "
                              "it off");
  g.rotary = cmd->add_flag("--rotary-positions", f.rotary_positions,
                           "rotary position embeddings: no learned position table (LLaMA)");
  g.tied = cmd->add_flag("--tied-embeddings", s.tied_embeddings,
                         "lm_head reuses the token embedding table (no extra parameters); "
                         "--tied-embeddings=false unties a file's");
  g.experts = cmd->add_option("--experts", s.moe.experts,
                              "routed experts E of each mixture-of-experts block (0: dense MLPs; "
                              "docs/profiler.md 'Mixture of experts')");
  g.experts_per_token =
      cmd->add_option("--experts-per-token,--moe-top-k", s.moe.experts_per_token,
                      "experts each token is routed to, top-k (default 2, at most --experts)");
  g.expert_ffn = cmd->add_option("--expert-ffn", s.moe.expert_ffn,
                                 "each routed expert's MLP width (default --ffn-hidden)");
  g.shared_experts = cmd->add_option("--shared-experts", s.moe.shared_experts,
                                     "shared experts every token goes through, each --expert-ffn "
                                     "wide (DeepSeek; default 0)");
  g.shared_expert_ffn =
      cmd->add_option("--shared-expert-ffn", s.moe.shared_expert_ffn,
                      "the shared experts' total MLP width (default --shared-experts x "
                      "--expert-ffn)");
  g.first_dense_layers = cmd->add_option("--first-dense-layers", f.first_dense_layers,
                                         "dense blocks before the first MoE block (DeepSeek's "
                                         "first_k_dense_replace; default 0, or the file's)");
  cmd->add_option("--moe-imbalance", o.moe_imbalance,
                  "the busiest expert's tokens over the mean: the routed experts' GEMMs and "
                  "activations are sized for it (default from a published measurement, "
                  "docs/profiler.md 'Mixture of experts')")
      ->capture_default_str();
  cmd->add_option("--moe-dispatcher", f.moe_dispatcher,
                  "the run's token dispatcher: deepep (one permutation each side), alltoall "
                  "(Megatron-LM's --moe-token-dispatcher-type alltoall, which also sorts the "
                  "received rows by local expert on each side) or allgather (Megatron-LM's "
                  "allgather: one permutation of the gathered rows each side; docs/profiler.md)")
      ->check(CLI::IsMember({"deepep", "alltoall", "allgather"}))
      ->capture_default_str();
  f.moe_capacity_factor_given =
      cmd->add_option("--moe-capacity-factor", f.moe_capacity_factor,
                      "each expert's token capacity over the mean (Megatron-LM's "
                      "--moe-expert-capacity-factor): tokens past it are dropped, so the routed "
                      "experts are sized for min(--moe-imbalance, this); default: dropless");
  cmd->add_flag("--moe-pad-to-capacity", o.moe_pad_to_capacity,
                "every expert computes exactly its capacity (Megatron-LM's "
                "--moe-pad-expert-input-to-capacity); needs --moe-capacity-factor");
}

// The time model, tensor parallelism, precision, attention, batch and output.
void AddEstimateFlags(CLI::App* cmd, AnalyticFlags& f) {
  TransformerSpec& s = f.spec;
  AnalyticOptions& o = f.options;
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
                  "share of HBM bandwidth reached by memory-bound kernels (norms, activations, "
                  "residual adds, softmax, cross-entropy)")
      ->capture_default_str();
  cmd->add_option("--bytes-per-element", o.bytes_per_element, "2 (bf16), 1 (fp8) or 4 (fp32)")
      ->capture_default_str();
  cmd->add_option("--precision", f.precision,
                  "bf16, or fp8: the blocks' weight products in FP8 at the GPU's FP8 peak "
                  "(H100, H200; not A100), attention, norms, embedding and head in bf16 "
                  "(docs/profiler.md 'FP8')")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--fp8-recipe", f.fp8_recipe,
                  "--precision fp8: delayed (default; per-tensor, amax history), current "
                  "(per-tensor, an amax pass), blockwise (1x128 / 128x128 scales, DeepSeek-V3) or "
                  "mxfp8 (Blackwell only)");
  cmd->add_option("--attention", f.attention,
                  "flash2 (FlashAttention-2; 'flash' means it too), flash3 (FlashAttention-3, "
                  "Hopper only), triton (FlashAttention's Triton kernel, as llm-foundry's MPT runs "
                  "ran it): no s x s tensors kept, each at its published speed "
                  "(docs/calibration.md); or eager (softmax output and dropout kept, Korthikanti "
                  "et al. 2022), or sdpa-flash2 (PyTorch SDPA's flash backend, its vendored "
                  "FlashAttention-2: flash2's table x pytorch/pytorch#128888's ratios, as "
                  "torchtitan ran in 2024)")
      ->check(CLI::IsMember({"flash", "flash2", "flash3", "triton", "eager", "sdpa-flash2"}))
      ->capture_default_str();
  cmd->add_option("--loss", f.loss,
                  "fused (Megatron-LM's vocabulary-parallel cross-entropy: the fp32 softmax and "
                  "the bf16 logits kept), pytorch (cross_entropy on fp32 logits, as torchtitan "
                  "runs it: the fp32 log-softmax kept, two more fp32 copies of the logits at the "
                  "backward's start) or compiled (the same under torch.compile, as torchtitan "
                  "runs it with --training.compile: the bf16 logits kept, their bf16 gradient at "
                  "the backward; docs/profiler.md 'Embedding and lm_head')")
      ->check(CLI::IsMember({"fused", "pytorch", "compiled"}))
      ->capture_default_str();
  cmd->add_option("--elementwise", f.elementwise,
                  "fused (one kernel per norm, activation and rotary embedding each way, as "
                  "Megatron-LM, llm-foundry and torch.compile run them) or eager (PyTorch eager "
                  "mode op by op, as torchtitan runs without torch.compile: RMSNorm in 8 + 16 "
                  "fp32 kernels, rotary via fp32 complex numbers, silu and mul, repeat_kv's "
                  "copies; docs/profiler.md 'Element-wise kernel sets')")
      ->check(CLI::IsMember({"fused", "eager"}))
      ->capture_default_str();
  cmd->add_option("--global-batch", s.global_batch,
                  "samples per iteration, written as the planner's default (default: omitted)");
  cmd->add_option("--out", f.out, "write model.json here (default: stdout)")
      ->check(pipecast::OutputPath());
}

CLI::App* AddAnalytic(CLI::App& app, AnalyticFlags& f) {
  CLI::App* cmd = app.add_subcommand(
      "analytic",
      "estimate per-layer time and memory of a GPT-style transformer from its architecture and "
      "a GPU's datasheet (no GPU needed; formulas in docs/profiler.md)");
  AddShapeFlags(cmd, f);
  AddEstimateFlags(cmd, f);
  return cmd;
}

}  // namespace

std::function<int()> AddAnalyticCommand(CLI::App& app) {
  auto flags = std::make_shared<AnalyticFlags>();
  AddAnalytic(app, *flags);
  return [flags] { return RunAnalytic(*flags); };
}

}  // namespace pipecast
