// Memory model: bytes a training run keeps per parameter, by precision and
// optimizer. Default: mixed-precision Adam as in Megatron-LM without a
// distributed optimizer — bf16 weights (2 B) and bf16 gradients (2 B), fp32
// master weights, Adam first and second moments (4 + 4 + 4 = 12 B):
// 16 bytes per parameter in all.
#ifndef PIPECAST_SIM_MEMORY_H_
#define PIPECAST_SIM_MEMORY_H_

#include <string>

#include "base/status.h"

namespace pipecast {

struct MemoryConfig {
  double weight_bytes_per_param = 2;      // bf16 weights
  double gradient_bytes_per_param = 2;    // bf16 gradients
  double optimizer_bytes_per_param = 12;  // fp32 master + Adam m + v
};

// Bytes per parameter for a training precision and an optimizer:
//   precision bf16 or fp16 (mixed): 2 B weights, 2 B gradients, and the
//     optimizer keeps a 4 B fp32 master copy besides its state;
//   precision fp32: 4 B weights, 4 B gradients, no master copy;
//   optimizer adam: 8 B state (fp32 m and v); sgd: 4 B (fp32 momentum);
//     sgd-nomomentum: none.
// So bf16 + adam = 2 + 2 + 12 = 16 B (the default), fp32 + adam = 16 B,
// bf16 + sgd = 2 + 2 + 8 = 12 B. InvalidArgument names the flag otherwise.
Result<MemoryConfig> MemoryConfigFor(const std::string& precision, const std::string& optimizer);

}  // namespace pipecast

#endif  // PIPECAST_SIM_MEMORY_H_
