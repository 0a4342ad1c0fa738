#include "tools/training_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <string_view>

#include "sim/stage_costs.h"

namespace pipecast {

std::vector<CLI::Option*> AddTrainingFlags(CLI::App& app, TrainingFlags* flags,
                                           const char* memory_gb_help) {
  TrainingFlags& f = *flags;
  std::vector<CLI::Option*> added;
  added.push_back(app.add_option(
      "--cluster", f.cluster,
      "preset (ideal, a100-80gb, h100-sxm, h200, local) or cluster JSON file (default: the "
      "model's device if it is a preset, else ideal)"));
  added.push_back(app.add_option("--memory-gb", f.memory_gb, memory_gb_help)
                      ->check(MemorySize(kMaxMemoryGiB, "GiB", 1024.0 * 1024 * 1024, "unlimited")));
  added.push_back(
      app.add_option("--optimizer-step-us", f.optimizer_step_us,
                     "optimizer step time, in us (default: estimated from HBM bandwidth and the "
                     "bytes Adam touches per parameter, docs/simulator.md)")
          ->check(FiniteRange(kMaxStepUs, "microseconds")));
  added.push_back(
      app.add_option("--overlap-grad-reduce", f.overlap_grad_reduce,
                     "on: the data-parallel gradient reduction runs in buckets beside the "
                     "backward (Megatron-LM's --overlap-grad-reduce); off: after the last op")
          ->check(OneOf({"on", "off"}))
          ->capture_default_str());
  added.push_back(
      app.add_option("--grad-bucket-params", f.grad_bucket_params,
                     "parameters per gradient bucket (default: Megatron-LM's max(40M, 1M x d))")
          ->check(IntRange(1, int64_t{1} << 50)));
  added.push_back(app.add_option("--precision", f.precision,
                                 "training precision, for bytes per parameter: bf16, fp16 "
                                 "(mixed), fp8 (bf16 with FP8 weight products and FP8 weight "
                                 "copies) or fp32 (docs/simulator.md)")
                      ->check(OneOf({"bf16", "fp16", "fp8", "fp32"}))
                      ->capture_default_str());
  added.push_back(app.add_option("--fp8-recipe", f.fp8_recipe,
                                 "--precision fp8: delayed (default; per-tensor, amax history), "
                                 "current (per-tensor), blockwise (1x128 / 128x128) or mxfp8 "
                                 "(Blackwell); sets the FP8 weight copies (docs/simulator.md)"));
  added.push_back(
      app.add_option("--fp8-param-gather", f.fp8_param_gather,
                     "--precision fp8: on keeps FP8 primary weights (no bf16 copy) and gathers "
                     "parameters in FP8 at ZeRO 1-3 (Megatron-LM --fp8-param-gather; torchao's "
                     "FSDP float8 all-gather)")
          ->check(OneOf({"on", "off"}))
          ->capture_default_str());
  added.push_back(
      app.add_option("--sharded-state", f.sharded_state,
                     "how ZeRO 3 keeps its shards: zero (half-precision shard, fp32 main copy, "
                     "Adam and gradients, 18 B per parameter / d for the whole step) or fsdp2 "
                     "(PyTorch FSDP2: fp32 shard and Adam, 12 B / d, and fp32 sharded gradients, "
                     "4 B / d, made in the backward); fsdp2 needs --zero 3 (docs/simulator.md)")
          ->check(OneOf({"zero", "fsdp2"}))
          ->capture_default_str());
  added.push_back(
      app.add_option("--cp-algorithm", f.cp_algorithm,
                     "--context-parallel: how the cp GPUs exchange keys and values: ring (K/V "
                     "blocks passed around the ring beside the attention compute, Megatron-LM "
                     "--cp-comm-type p2p; also 'p2p') or allgather (K/V gathered before attention, "
                     "as Llama 3; also 'all_gather'); docs/simulator.md")
          ->check(OneOf({"ring", "p2p", "allgather", "all_gather"}))
          ->capture_default_str());
  added.push_back(app.add_option("--optimizer", f.optimizer,
                                 "optimizer, for bytes per parameter: adam, sgd or sgd-nomomentum")
                      ->check(OneOf({"adam", "sgd", "sgd-nomomentum"}))
                      ->capture_default_str());
  added.push_back(
      app.add_option(
             "--grad-dtype", f.grad_dtype,
             "main-gradient precision: fp32 (Megatron's default) or bf16 (docs/simulator.md)")
          ->check(OneOf({"fp32", "bf16", "fp16"}))
          ->capture_default_str());
  added.push_back(
      app.add_option("--memory-reserve-gb", f.memory_reserve_gb,
                     "override the per-GPU runtime reserve (CUDA context, cuBLAS, NCCL), in GiB")
          ->check(FiniteRange(kMaxMemoryGiB, "GiB")));
  added.push_back(
      app.add_option("--memory-headroom", f.memory_headroom,
                     "override the allocator margin, a fraction of capacity (presets: 0.05)")
          ->check(FiniteRange(kMaxMemoryHeadroom, "fraction of capacity")));
  added.push_back(app.add_option("--first-stage-layers", f.even.first_stage_layers,
                                 "--partition even: decoder layers of the first pipeline stage "
                                 "(Megatron-LM's --decoder-first-pipeline-num-layers)")
                      ->check(IntRange(1, 1 << 24)));
  added.push_back(app.add_option("--last-stage-layers", f.even.last_stage_layers,
                                 "--partition even: decoder layers of the last pipeline stage "
                                 "(Megatron-LM's --decoder-last-pipeline-num-layers)")
                      ->check(IntRange(1, 1 << 24)));
  added.push_back(app.add_flag("--account-for-embedding", f.even.account_for_embedding,
                               "--partition even: count the embedding as one decoder layer "
                               "(Megatron-LM's --account-for-embedding-in-pipeline-split)"));
  added.push_back(app.add_flag("--account-for-loss", f.even.account_for_loss,
                               "--partition even: count the head and loss as one decoder layer "
                               "(Megatron-LM's --account-for-loss-in-pipeline-split)"));
  return added;
}

Status FillTrainingConfig(const TrainingFlags& flags, TrainingConfig* config) {
  PIPECAST_ASSIGN_OR_RETURN(auto memory,
                            MemoryConfigFor(flags.precision, flags.optimizer, flags.grad_dtype,
                                            flags.fp8_recipe, flags.fp8_param_gather == "on"));
  // The bytes per parameter; how and over what the state is sharded stays.
  memory.zero = config->memory.zero;
  memory.sharding = config->memory.sharding;
  PIPECAST_ASSIGN_OR_RETURN(memory.sharded_state, ParseShardedState(flags.sharded_state));
  config->memory = memory;
  config->overlap.overlap_grad_reduce = flags.overlap_grad_reduce == "on";
  config->overlap.grad_bucket_params = flags.grad_bucket_params;
  // --optimizer-step-us given (>= 0): that time; absent (< 0): estimated.
  config->optimizer_step.time_ns =
      flags.optimizer_step_us >= 0 ? UsToNs(flags.optimizer_step_us) : 0;
  config->optimizer_step.estimate = flags.optimizer_step_us < 0;
  config->partition.even = flags.even;
  std::optional<CpAlgorithm> cp_algorithm = ParseCpAlgorithm(flags.cp_algorithm);
  if (!cp_algorithm) {
    return Status::InvalidArgument(
        fmt::format("--cp-algorithm {}: use ring (also p2p) or allgather (also all_gather)",
                    flags.cp_algorithm));
  }
  config->layout.cp_algorithm = *cp_algorithm;
  return Status::Ok();
}

Result<ClusterSelection> SelectToolCluster(const TrainingFlags& flags, const Model& model) {
  PIPECAST_ASSIGN_OR_RETURN(auto selected, SelectCluster(flags.cluster, model, flags.memory_gb));
  PIPECAST_RETURN_IF_ERROR(
      OverrideGpuMemory(flags.memory_reserve_gb, flags.memory_headroom, &selected.cluster));
  if (flags.precision == "fp8") {
    PIPECAST_ASSIGN_OR_RETURN(
        Fp8Recipe recipe, ParseFp8Recipe(flags.fp8_recipe.empty() ? "delayed" : flags.fp8_recipe));
    PIPECAST_RETURN_IF_ERROR(CheckFp8Support(recipe, selected.cluster.gpu));
  }
  return selected;
}

Result<std::string> CheckModelOnCluster(const Model& model, const std::string& model_path,
                                        const Cluster& cluster) {
  std::string warning = ModelGpuMismatch(model, cluster);
  PIPECAST_RETURN_IF_ERROR(CheckCostsWithinPeak(model, cluster.gpu, cluster.name,
                                                warning.empty() ? "" : ModelGpuPreset(model))
                               .WithPrefix(model_path));
  return warning;
}

std::string ResolveScheduleFormat(const CLI::Option& format_flag, const std::string& out,
                                  std::string* format) {
  const std::string_view suffix = ".csv";
  const bool csv_name =
      out.size() > suffix.size() && std::equal(suffix.rbegin(), suffix.rend(), out.rbegin(),
                                               [](char a, char b) { return a == std::tolower(b); });
  if (!csv_name) return "";
  if (format_flag.count() == 0) {
    *format = "pytorch-csv";
    return "";
  }
  if (*format == "text") {
    return fmt::format(
        "--schedule-out {} with --schedule-format text: a .csv file gets PyTorch's schedule "
        "CSV (leave out --schedule-format, or name the file .txt for text)",
        out);
  }
  return "";
}

}  // namespace pipecast
