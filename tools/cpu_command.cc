// `profiler cpu`: flags -> CpuProfileOptions -> ProfileCpu -> model.json.
#include "tools/cpu_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cstdio>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "base/cli.h"
#include "base/exit_codes.h"
#include "base/terminal_text.h"
#include "formats/file_util.h"
#include "formats/formats.h"
#include "profiler/cpu/profile.h"

namespace pipecast {
namespace {

struct CpuFlags {
  cpu::CpuProfileOptions options;
  std::vector<std::string> layer_ffn;  // "LAYER:FFN"
  std::string out;                     // empty: stdout
};

bool ParseInt(const std::string& text, int& out) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty();
}

// Turns --layer-ffn LAYER:FFN overrides into per-layer shapes.
Status ApplyLayerFfn(const std::vector<std::string>& overrides, cpu::WorkloadSpec& spec) {
  if (overrides.empty()) return Status::Ok();
  if (spec.layers < 1) return Status::Ok();  // Validate() reports --layers
  spec.per_layer.assign(static_cast<std::size_t>(spec.layers), spec.shape);
  for (const std::string& item : overrides) {
    const std::size_t colon = item.find(':');
    int layer = 0;
    int ffn = 0;
    if (colon == std::string::npos || !ParseInt(item.substr(0, colon), layer) ||
        !ParseInt(item.substr(colon + 1), ffn)) {
      return Status::InvalidArgument(fmt::format(
          "--layer-ffn '{}' is not LAYER:FFN: give a layer index and its MLP width, e.g. 0:4096",
          item));
    }
    if (layer < 0 || layer >= spec.layers) {
      return Status::InvalidArgument(
          fmt::format("--layer-ffn '{}': layer {} does not exist; --layers {} gives layers 0 to {}",
                      item, layer, spec.layers, spec.layers - 1));
    }
    spec.per_layer[static_cast<std::size_t>(layer)].ffn = ffn;
  }
  return Status::Ok();
}

int RunCpu(CpuFlags& flags) {
  cpu::CpuProfileOptions& options = flags.options;
  Status st = ApplyLayerFfn(flags.layer_ffn, options.workload);
  if (st.ok()) st = options.Validate();
  // Before measuring, which takes a while: an --out that cannot be written
  // is found now, not after.
  if (st.ok() && !flags.out.empty()) st = CheckOutputs({{"--out", flags.out}}, {});
  if (!st.ok()) {
    fmt::print(stderr, "profiler: error: {}\n", TerminalSafeLines(st.message()));
    return kExitBadInput;
  }
  fmt::print(stderr,
             "profiler: measuring {} layers at micro-batch sizes {} ({} warm-up + {} "
             "timed iterations each, one thread)...\n",
             options.workload.LayerCount(), fmt::join(options.microbatch_sizes, ","),
             options.warmup, options.iterations);
  SteadyClock clock;
  Result<cpu::CpuProfile> profile = cpu::ProfileCpu(options, clock);
  if (!profile.ok()) {
    fmt::print(stderr, "profiler: error: {}\n", TerminalSafeLines(profile.status().message()));
    return kExitBadInput;
  }
  const Model& model = profile->model;
  for (const Layer& layer : model.layers) {
    const LayerProfile& p = layer.profiles.front();
    fmt::print(stderr,
               "  {}: micro-batch {}: forward {:.3f} ms, backward {:.3f} ms (weight gradient "
               "{:.3f} ms), activations {} bytes\n",
               layer.name, p.microbatch_size, NsToMs(p.forward_ns), NsToMs(p.backward_ns),
               NsToMs(p.backward_weight_ns.value_or(0)), p.activation_bytes);
  }
  if (profile->worst_spread > cpu::kNoisySpread) {
    fmt::print(stderr,
               "profiler: warning: the timings were noisy: interquartile range {:.0f}% of the "
               "median ({}); rerun on a quieter machine or with more --iterations\n",
               100 * profile->worst_spread, profile->worst_spread_at);
  }
  const std::string text = ModelToJson(model);
  if (flags.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kExitOk;
  }
  st = WriteFileAtomic(flags.out, text);
  if (!st.ok()) {
    fmt::print(stderr, "profiler: error: {}\n",
               TerminalSafeLines(st.WithPrefix("--out").message()));
    return kExitBadInput;
  }
  fmt::print(stderr,
             "profiler: wrote {}: {}, {} layers measured on {} (median of {} iterations; worst "
             "spread {:.1f}% at {}; how it was measured is in its \"source\")\n",
             flags.out, model.name, model.layers.size(), model.source.device, options.iterations,
             100 * profile->worst_spread, profile->worst_spread_at);
  return kExitOk;
}

}  // namespace

std::function<int()> AddCpuCommand(CLI::App& app) {
  auto flags = std::make_shared<CpuFlags>();
  CLI::App* cmd = app.add_subcommand(
      "cpu",
      "measure the built-in CPU workload layer by layer (MLP blocks y = x + W2*gelu(W1*x) in "
      "float32, one thread), so profile -> plan -> validate runs on any machine "
      "(docs/profiler.md)");
  cpu::CpuProfileOptions& o = flags->options;
  cpu::WorkloadSpec& w = o.workload;
  cmd->add_option("--out", flags->out, "write model.json here (default: stdout)")
      ->check(pipecast::OutputPath());
  cmd->add_option("--name", o.name, "the model's name")->capture_default_str();
  cmd->add_option("--layers", w.layers, "MLP blocks")->capture_default_str();
  cmd->add_option("--hidden", w.shape.hidden, "hidden size H of every block")
      ->capture_default_str();
  cmd->add_option("--ffn-hidden,--ffn", w.shape.ffn, "MLP width F of every block")
      ->capture_default_str();
  cmd->add_option("--tokens-per-sample", w.shape.tokens_per_sample,
                  "tokens (rows of x) per sample; also written as sequence_length")
      ->capture_default_str();
  cmd->add_option("--layer-ffn", flags->layer_ffn,
                  "LAYER:FFN, a different MLP width for one layer (repeat, or separate with "
                  "commas), e.g. --layer-ffn 0:4096 for an unequal first layer")
      ->delimiter(',');
  cmd->add_option("--experts", w.shape.experts,
                  "mixture of experts: every block becomes E experts of width --ffn with a hash "
                  "router (each token to --top-k of them); 0 = dense MLP blocks "
                  "(docs/profiler.md)")
      ->capture_default_str();
  cmd->add_option("--top-k", w.shape.top_k,
                  "experts each token goes to (with --experts; C(experts, top-k) must divide "
                  "--tokens-per-sample, so that every expert gets the same tokens)")
      ->capture_default_str();
  cmd->add_option("--microbatch-sizes", o.microbatch_sizes, "micro-batch sizes to measure")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--tensor-parallel", o.tensor_parallel,
                  "tensor-parallel degrees t to measure, including 1: each t > 1 adds per-GPU "
                  "profiles of one worker's shard of a t-way Megatron split of every block "
                  "(each t must divide --ffn)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "untimed iterations first, per layer and size")
      ->capture_default_str();
  cmd->add_option("--iterations", o.iterations,
                  "timed iterations per layer and size (the median is written)")
      ->capture_default_str();
  cmd->add_option("--seed", w.seed, "seed of the weights (layer i uses seed + i)")
      ->capture_default_str();
  cmd->add_option("--global-batch", o.global_batch,
                  "samples per iteration, written as the planner's default (default: omitted)");
  cmd->add_option("--device", o.device,
                  "device name written to source.device (default: /proc/cpuinfo's model name)");
  cmd->add_option("--note", o.note, "free text written to source.note, e.g. where it was run");
  return [flags] { return RunCpu(*flags); };
}

}  // namespace pipecast
