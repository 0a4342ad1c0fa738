// Validation of the CUPTI entry points' options: the same in every build.
#include <fmt/format.h>

#include <set>

#include "profiler/cupti_profile.h"

namespace pipecast {

// 16 GiB of device timestamp buffer is already far past any real need.
constexpr int kMaxDeviceBufferMib = 16384;

Status CuptiCommandOptions::Validate() const {
  if (command.empty()) {
    return Status::InvalidArgument(
        "no command to profile: put it after --, e.g. "
        "profiler cupti --out model.json -- python train.py");
  }
  if (microbatch_size < 1) {
    return Status::InvalidArgument(
        fmt::format("--microbatch-size {} must be >= 1", microbatch_size));
  }
  if (device_buffer_mib < 0 || device_buffer_mib > kMaxDeviceBufferMib) {
    return Status::InvalidArgument(fmt::format("--device-buffer-mib {} must be in [0, {}]",
                                               device_buffer_mib, kMaxDeviceBufferMib));
  }
  return aggregate.Validate();
}

int64_t BlockShape::ParametersPerBlock() const {
  const int64_t h = hidden;
  return 4 * h * h + 2 * h * Ffn() + 4 * h;
}

int64_t BlockShape::ParametersPerGpu() const {
  const int64_t h = hidden, hl = AttentionWidth(), fl = LocalFfn();
  return 3 * h * hl + h * hl + 2 * h * fl + 4 * h;
}

int64_t BlockShape::HiddenBytes(int microbatch) const {
  return int64_t{microbatch} * seq * hidden * 2;
}

int64_t BlockShape::ActivationBytes(int microbatch) const {
  const int64_t t = int64_t{microbatch} * seq, h = hidden, hl = AttentionWidth(), fl = LocalFfn();
  const int64_t probs = int64_t{microbatch} * LocalHeads() * seq * seq;
  return 2 * (3 * t * h + 4 * t * hl + 2 * t * fl + probs) + 4 * 4 * t;
}

int64_t BlockShape::WeightGradBytes(int microbatch) const {
  const int64_t t = int64_t{microbatch} * seq, h = hidden, hl = AttentionWidth(), fl = LocalFfn();
  return ActivationBytes(microbatch) + 2 * t * (fl + 3 * h + 3 * hl);
}

Status BlockShape::Validate() const {
  if (hidden < 1 || heads < 1 || seq < 1 || layers < 1 || ffn < 0) {
    return Status::InvalidArgument(fmt::format(
        "--hidden {}, --heads {}, --seq {} and --layers {} must be >= 1 (--ffn {} >= 0)", hidden,
        heads, seq, layers, ffn));
  }
  if (hidden % heads != 0) {
    return Status::InvalidArgument(
        fmt::format("--hidden {} is not divisible by --heads {}", hidden, heads));
  }
  if (tensor_parallel < 1 || heads % tensor_parallel != 0 || Ffn() % tensor_parallel != 0) {
    return Status::InvalidArgument(fmt::format(
        "--tensor-parallel {} must be >= 1 and divide --heads {} and the MLP width {}: each GPU "
        "holds whole heads and an equal share of the MLP",
        tensor_parallel, heads, Ffn()));
  }
  // One block's activations must stay far below any GPU's memory.
  if (static_cast<int64_t>(seq) * hidden > (int64_t{1} << 28) || hidden > 65536 || seq > 65536 ||
      Ffn() > 262144) {
    return Status::InvalidArgument(
        fmt::format("--seq {} x --hidden {} (--ffn {}) is too large for the built-in block", seq,
                    hidden, Ffn()));
  }
  return Status::Ok();
}

Status BuiltinOptions::Validate() const {
  PIPECAST_RETURN_IF_ERROR(shape.Validate());
  if (microbatch_sizes.empty()) {
    return Status::InvalidArgument("--microbatch-sizes: give at least one size");
  }
  std::set<int> seen;
  for (int b : microbatch_sizes) {
    if (b < 1 || b > 4096) {
      return Status::InvalidArgument(fmt::format("--microbatch-sizes: {} must be in [1, 4096]", b));
    }
    if (!seen.insert(b).second) {
      return Status::InvalidArgument(fmt::format("--microbatch-sizes: {} is given twice", b));
    }
  }
  if (device < 0) return Status::InvalidArgument(fmt::format("--device {} must be >= 0", device));
  std::set<int> degrees;
  for (int t : tensor_parallel) {
    if (!degrees.insert(t).second) {
      return Status::InvalidArgument(
          fmt::format("--tensor-parallel lists {} twice; give each degree once", t));
    }
    BlockShape at = shape;
    at.tensor_parallel = t;
    PIPECAST_RETURN_IF_ERROR(at.Validate());
  }
  return aggregate.Validate();
}

std::vector<int> BuiltinOptions::Degrees() const {
  std::set<int> degrees(tensor_parallel.begin(), tensor_parallel.end());
  degrees.insert(1);
  return {degrees.begin(), degrees.end()};
}

}  // namespace pipecast
