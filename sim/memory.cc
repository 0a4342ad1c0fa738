#include "sim/memory.h"

#include <fmt/format.h>

#include <algorithm>

namespace pipecast {

namespace {

constexpr double kFp32Bytes = 4;       // main parameters, main gradients, optimizer state
constexpr double kHalfBytes = 2;       // bf16 / fp16 parameters and gradients
constexpr double kAdamStateBytes = 8;  // first and second moments, fp32
constexpr double kMomentumBytes = 4;   // SGD momentum, fp32

}  // namespace

MemoryConfig TensorParallelShare(const MemoryConfig& memory, int t) {
  MemoryConfig out = memory;
  const double share = t;
  out.weight_bytes_per_param /= share;
  out.gradient_bytes_per_param /= share;
  out.optimizer_bytes_per_param /= share;
  out.gradient_copy_bytes_per_param /= share;
  return out;
}

Status MemoryConfig::Validate() const {
  if (weight_bytes_per_param < 0 || gradient_bytes_per_param < 0 || optimizer_bytes_per_param < 0 ||
      gradient_copy_bytes_per_param < 0) {
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
  return Status::Ok();
}

ShardedBytes ShardedBytesPerParam(const MemoryConfig& memory, int data_parallel) {
  const int group = memory.zero >= 2 && memory.sharding.shard_group > 0
                        ? std::min(memory.sharding.shard_group, data_parallel)
                        : data_parallel;
  const double d = group < 1 ? 1.0 : static_cast<double>(group);
  const double w = memory.weight_bytes_per_param;
  const double g = memory.gradient_bytes_per_param;
  // Gradients accumulated unsharded over the micro-batches (no_sync).
  const double g_shards = memory.sharding.reduce_every_microbatch ? d : 1.0;
  const double k = memory.optimizer_bytes_per_param;
  switch (memory.zero) {
    case 0:  // Megatron without the distributed optimizer: 20, 18, 16
      return {w, g, k + memory.gradient_copy_bytes_per_param};
    case 1:  // Megatron's distributed optimizer: 4 + 16/d, 6 + 12/d, 8 + 8/d
      return {w, g, (k + memory.gradient_copy_bytes_per_param) / d};
    case 2:  // ZeRO P_os+g: 2 + 14/d for fp16/fp16 (K = 12, no gradient copy)
      return {w, g / g_shards, k / d};
    default:  // ZeRO P_os+g+p, FSDP: 16/d for fp16/fp16
      return {w / d, g / g_shards, k / d};
  }
}

Result<MemoryConfig> MemoryConfigFor(const std::string& precision, const std::string& optimizer,
                                     const std::string& grad_dtype) {
  MemoryConfig m;
  double master = 0;
  bool mixed = false;
  if (precision == "bf16" || precision == "fp16") {
    m.weight_bytes_per_param = kHalfBytes;
    master = kFp32Bytes;
    mixed = true;
  } else if (precision == "fp32") {
    m.weight_bytes_per_param = kFp32Bytes;
  } else {
    return Status::InvalidArgument(fmt::format(
        "--precision is '{}': expected bf16, fp16 (mixed precision) or fp32", precision));
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
