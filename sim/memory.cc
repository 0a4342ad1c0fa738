#include "sim/memory.h"

#include <fmt/format.h>

namespace pipecast {

namespace {

constexpr double kFp32Bytes = 4;       // master weights, optimizer state
constexpr double kHalfBytes = 2;       // bf16 / fp16 weights and gradients
constexpr double kAdamStateBytes = 8;  // first and second moments, fp32
constexpr double kMomentumBytes = 4;   // SGD momentum, fp32

}  // namespace

Result<MemoryConfig> MemoryConfigFor(const std::string& precision, const std::string& optimizer) {
  MemoryConfig m;
  double master = 0;
  if (precision == "bf16" || precision == "fp16") {
    m.weight_bytes_per_param = kHalfBytes;
    m.gradient_bytes_per_param = kHalfBytes;
    master = kFp32Bytes;
  } else if (precision == "fp32") {
    m.weight_bytes_per_param = kFp32Bytes;
    m.gradient_bytes_per_param = kFp32Bytes;
  } else {
    return Status::InvalidArgument(fmt::format(
        "--precision is '{}': expected bf16, fp16 (mixed precision) or fp32", precision));
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
