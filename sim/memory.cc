#include "sim/memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace pipecast {

namespace {

constexpr double kFp32Bytes = 4;       // main parameters, main gradients, optimizer state
constexpr double kHalfBytes = 2;       // bf16 / fp16 parameters and gradients
constexpr double kAdamStateBytes = 8;  // first and second moments, fp32
constexpr double kMomentumBytes = 4;   // SGD momentum, fp32
constexpr double kFp8Bytes = 1;        // E4M3 / E5M2
// Scale bytes per FP8 element: an fp32 scale per 128 x 128 weight block
// (DeepSeek-V3 sec. 3.3.2, TE Float8BlockScaling); an E8M0 byte per 32
// elements (OCP Microscaling spec v1.0).
constexpr double kBlockwiseScaleBytes = 4.0 / (128 * 128);
constexpr double kMxScaleBytes = 1.0 / 32;
// The FP8 weight and its transpose (Hopper FP8 GEMMs are TN only).
constexpr double kFp8WeightCopies = 2;

}  // namespace

const char* Fp8RecipeName(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::kDelayed:
      return "delayed";
    case Fp8Recipe::kCurrent:
      return "current";
    case Fp8Recipe::kBlockwise:
      return "blockwise";
    case Fp8Recipe::kMxfp8:
      return "mxfp8";
    default:
      return "none";
  }
}

Result<Fp8Recipe> ParseFp8Recipe(const std::string& name) {
  for (Fp8Recipe r :
       {Fp8Recipe::kDelayed, Fp8Recipe::kCurrent, Fp8Recipe::kBlockwise, Fp8Recipe::kMxfp8}) {
    if (name == Fp8RecipeName(r)) return r;
  }
  return Status::InvalidArgument(fmt::format(
      "--fp8-recipe is '{}': expected delayed (per-tensor, amax history), current (per-tensor, "
      "this tensor's amax), blockwise (1x128 / 128x128 blocks, DeepSeek-V3) or mxfp8 (1x32 "
      "blocks, Blackwell)",
      name));
}

double Fp8WeightCopyBytes(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::kDelayed:
    case Fp8Recipe::kCurrent:
      return kFp8WeightCopies * kFp8Bytes;
    case Fp8Recipe::kBlockwise:
      return kFp8WeightCopies * (kFp8Bytes + kBlockwiseScaleBytes);
    case Fp8Recipe::kMxfp8:
      return kFp8WeightCopies * (kFp8Bytes + kMxScaleBytes);
    default:
      return 0;
  }
}

Status CheckFp8Support(Fp8Recipe recipe, const GpuSpec& gpu) {
  if (recipe == Fp8Recipe::kNone || gpu.peak_tflops <= 0) return Status::Ok();
  if (gpu.peak_fp8_tflops <= 0) {
    return Status::InvalidArgument(fmt::format(
        "--precision fp8: the GPU '{}' has no FP8 tensor cores (no peak_fp8_tflops; A100 has "
        "none); use --precision bf16, or an FP8 GPU (presets h100-sxm, h200, or a cluster file "
        "with gpu.peak_fp8_tflops)",
        gpu.name));
  }
  if (recipe == Fp8Recipe::kMxfp8 && !gpu.mxfp8) {
    return Status::InvalidArgument(fmt::format(
        "--fp8-recipe mxfp8: the GPU '{}' has no MXFP8 tensor cores (Blackwell has them; Hopper "
        "does not); use --fp8-recipe blockwise, current or delayed, or a cluster file with "
        "gpu.mxfp8 true",
        gpu.name));
  }
  return Status::Ok();
}

std::string ShardingLabel(const ShardingConfig& sharding) {
  std::string out;
  auto word = [&out](const std::string& w) { out += (out.empty() ? "" : " ") + w; };
  if (!sharding.reshard_after_forward) word("reshard=off");
  if (!sharding.prefetch) word("prefetch=off");
  if (!sharding.reduce_every_microbatch) word("reduce=once");
  if (sharding.shard_group > 0) word(fmt::format("shard-group={}", sharding.shard_group));
  return out;
}

double MemoryConfig::GatherBytesPerParam() const {
  return fp8_param_gather && fp8_recipe != Fp8Recipe::kNone ? kFp8Bytes : weight_bytes_per_param;
}

const char* ShardedStateName(ShardedState state) {
  return state == ShardedState::kFsdp2 ? "fsdp2" : "zero";
}

Result<ShardedState> ParseShardedState(const std::string& name) {
  if (name == "zero") return ShardedState::kZero;
  if (name == "fsdp2") return ShardedState::kFsdp2;
  return Status::InvalidArgument(
      fmt::format("--sharded-state is '{}': expected zero (the ZeRO levels' accounting) or fsdp2 "
                  "(PyTorch FSDP2's fp32 shards, gradients made in the backward; needs --zero 3)",
                  name));
}

bool KeptInBf16UnderFp8(const std::string& layer_name) {
  return layer_name == "embedding" || layer_name == "lm_head";
}

double MemoryConfig::KeptBf16GatherBytesPerParam() const {
  return fp8_param_gather && fp8_recipe != Fp8Recipe::kNone ? kHalfBytes : GatherBytesPerParam();
}

double MemoryConfig::GatherBytesPerParam(const std::string& layer_name) const {
  return KeptInBf16UnderFp8(layer_name) ? KeptBf16GatherBytesPerParam() : GatherBytesPerParam();
}

MemoryConfig TensorParallelShare(const MemoryConfig& memory, int t) {
  MemoryConfig out = memory;
  const double share = t;
  out.weight_bytes_per_param /= share;
  out.gradient_bytes_per_param /= share;
  out.optimizer_bytes_per_param /= share;
  out.gradient_copy_bytes_per_param /= share;
  out.fp8_weight_bytes_per_param /= share;
  return out;
}

Status MemoryConfig::Validate() const {
  if (weight_bytes_per_param < 0 || gradient_bytes_per_param < 0 || optimizer_bytes_per_param < 0 ||
      gradient_copy_bytes_per_param < 0 || fp8_weight_bytes_per_param < 0) {
    return Status::InvalidArgument("bytes per parameter must be >= 0");
  }
  if (zero < 0 || zero > kMaxZeroLevel) {
    return Status::InvalidArgument(
        fmt::format("--zero is {}: expected 0, 1, 2 or 3 (the ZeRO level)", zero));
  }
  if (sharding.shard_group < 0) {
    return Status::InvalidArgument(fmt::format(
        "--shard-group is {}: expected a number of data-parallel replicas to shard over, or 0 "
        "for all of them",
        sharding.shard_group));
  }
  if (sharding.shard_group > 0 && zero < 2) {
    return Status::InvalidArgument(fmt::format(
        "--shard-group {} needs --zero 2 or 3: hybrid sharding shards gradients (and at 3 "
        "parameters) inside a group and replicates across groups",
        sharding.shard_group));
  }
  if (Fsdp2()) {
    if (zero != kMaxZeroLevel) {
      return Status::InvalidArgument(fmt::format(
          "--sharded-state fsdp2 needs --zero 3 (--zero is {}): FSDP2 shards the parameters, "
          "gradients and optimizer state; use --sharded-state zero below level 3",
          zero));
    }
    if (!sharding.reduce_every_microbatch) {
      return Status::InvalidArgument(
          "--sharded-state fsdp2 needs --reduce-every-microbatch on: its sharded gradients are "
          "reduce-scattered in each backward; FSDP2 without gradient sync accumulates unsharded "
          "gradients, which this mode does not count");
    }
    if (gradient_copy_bytes_per_param > 0) {
      return Status::InvalidArgument(
          "--sharded-state fsdp2 needs --grad-dtype fp32: FSDP2 makes its sharded gradients in "
          "the dtype of its fp32 sharded parameters, whatever the reduce dtype");
    }
  }
  return Status::Ok();
}

ShardedBytes ShardedBytesPerParam(const MemoryConfig& memory, int data_parallel) {
  const int group = memory.zero >= 2 && memory.sharding.shard_group > 0
                        ? std::min(memory.sharding.shard_group, data_parallel)
                        : data_parallel;
  const double d = group < 1 ? 1.0 : static_cast<double>(group);
  const double f = memory.fp8_weight_bytes_per_param;
  const double w = memory.weight_bytes_per_param + f;
  const double g = memory.gradient_bytes_per_param;
  // Gradients accumulated unsharded over the micro-batches (no_sync).
  const double g_shards = memory.sharding.reduce_every_microbatch ? d : 1.0;
  const double k = memory.optimizer_bytes_per_param;
  if (memory.Fsdp2() && memory.zero >= kMaxZeroLevel) {
    // FSDP2: the fp32 shard (the sharded gradients' dtype, so g bytes) is the optimizer's main
    // copy in mixed precision (weights in another dtype than the gradients): that copy leaves
    // the optimizer's bytes. No FP8 copies are kept.
    const double main = memory.weight_bytes_per_param != g || f > 0 ? g : 0.0;
    return {g / d, g / d, (k - main) / d, 0};
  }
  switch (memory.zero) {
    case 0:  // Megatron without the distributed optimizer: 20, 18, 16
      return {w, g, k + memory.gradient_copy_bytes_per_param, f};
    case 1:  // Megatron's distributed optimizer: 4 + 16/d, 6 + 12/d, 8 + 8/d
      return {w, g, (k + memory.gradient_copy_bytes_per_param) / d, f};
    case 2:  // ZeRO P_os+g: 2 + 14/d for fp16/fp16 (K = 12, no gradient copy)
      return {w, g / g_shards, k / d, f};
    default:  // ZeRO P_os+g+p, FSDP: 16/d for fp16/fp16
      return {w / d, g / g_shards, k / d, f / d};
  }
}

ShardedBytes ExpertBytesPerParam(const ShardedBytes& dense, const MemoryConfig& memory,
                                 int tensor_parallel, int expert_shards) {
  const double whole = static_cast<double>(tensor_parallel) / expert_shards;
  ShardedBytes e = dense;
  if (memory.zero < 3) {
    e.weights *= whole;
    e.fp8_weights *= whole;
  }
  if (memory.zero < 2 || !memory.sharding.reduce_every_microbatch) e.gradients *= whole;
  if (memory.zero < 1) e.optimizer *= whole;
  return e;
}

ParameterMemory ParameterMemoryOf(int64_t parameters, int64_t expert_parameters,
                                  const ShardedBytes& dense, const ShardedBytes& expert) {
  const auto bytes = [](int64_t n, double per) {
    return static_cast<Bytes>(std::llround(static_cast<double>(n) * per));
  };
  const int64_t rest = parameters - expert_parameters;
  ParameterMemory m;
  m.weights = bytes(rest, dense.weights) + bytes(expert_parameters, expert.weights);
  m.gradients = bytes(rest, dense.gradients) + bytes(expert_parameters, expert.gradients);
  m.optimizer = bytes(rest, dense.optimizer) + bytes(expert_parameters, expert.optimizer);
  m.fp8_weights = bytes(rest, dense.fp8_weights) + bytes(expert_parameters, expert.fp8_weights);
  return m;
}

Result<MemoryConfig> MemoryConfigFor(const std::string& precision, const std::string& optimizer,
                                     const std::string& grad_dtype, const std::string& fp8_recipe,
                                     bool fp8_param_gather) {
  MemoryConfig m;
  double master = 0;
  bool mixed = false;
  if (precision != "fp8" && (!fp8_recipe.empty() || fp8_param_gather)) {
    return Status::InvalidArgument(
        fmt::format("--{} is set but --precision is '{}': FP8 settings need --precision fp8",
                    fp8_recipe.empty() ? "fp8-param-gather" : "fp8-recipe", precision));
  }
  if (precision == "fp8") {
    PIPECAST_ASSIGN_OR_RETURN(Fp8Recipe recipe,
                              ParseFp8Recipe(fp8_recipe.empty() ? "delayed" : fp8_recipe));
    m.fp8_recipe = recipe;
    m.fp8_weight_bytes_per_param = Fp8WeightCopyBytes(recipe);
    m.fp8_param_gather = fp8_param_gather;
    // FP8 primary weights (Megatron-LM --fp8-param-gather): no bf16 copy.
    m.weight_bytes_per_param = fp8_param_gather ? 0 : kHalfBytes;
    master = kFp32Bytes;
    mixed = true;
  } else if (precision == "bf16" || precision == "fp16") {
    m.weight_bytes_per_param = kHalfBytes;
    master = kFp32Bytes;
    mixed = true;
  } else if (precision == "fp32") {
    m.weight_bytes_per_param = kFp32Bytes;
  } else {
    return Status::InvalidArgument(fmt::format(
        "--precision is '{}': expected bf16, fp16 (mixed precision), fp8 (bf16 with FP8 weight "
        "products) or fp32",
        precision));
  }
  if (grad_dtype == "fp32") {
    m.gradient_bytes_per_param = kFp32Bytes;
  } else if (grad_dtype == "bf16" || grad_dtype == "fp16") {
    if (!mixed) {
      return Status::InvalidArgument(fmt::format(
          "--grad-dtype is '{}' but --precision is fp32: fp32 training keeps fp32 gradients "
          "(use --grad-dtype fp32, or --precision bf16)",
          grad_dtype));
    }
    m.gradient_bytes_per_param = kHalfBytes;
    m.gradient_copy_bytes_per_param = kFp32Bytes;  // the optimizer reads fp32 gradients
  } else {
    return Status::InvalidArgument(fmt::format(
        "--grad-dtype is '{}': expected fp32 or bf16 (fp16 is taken as bf16: both 2 bytes)",
        grad_dtype));
  }
  double state = 0;
  if (optimizer == "adam") {
    state = kAdamStateBytes;
  } else if (optimizer == "sgd") {
    state = kMomentumBytes;
  } else if (optimizer != "sgd-nomomentum") {
    return Status::InvalidArgument(
        fmt::format("--optimizer is '{}': expected adam, sgd or sgd-nomomentum", optimizer));
  }
  m.optimizer_bytes_per_param = master + state;
  return m;
}

}  // namespace pipecast
