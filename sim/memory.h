// Memory model: bytes a training run keeps per parameter, by precision and
// optimizer. Default: mixed-precision Adam as in Megatron-LM without a
// distributed optimizer — bf16 weights (2 B) and bf16 gradients (2 B), fp32
// master weights, Adam first and second moments (4 + 4 + 4 = 12 B):
// 16 bytes per parameter in all.
#ifndef PIPECAST_SIM_MEMORY_H_
#define PIPECAST_SIM_MEMORY_H_

namespace pipecast {

struct MemoryConfig {
  double weight_bytes_per_param = 2;      // bf16 weights
  double gradient_bytes_per_param = 2;    // bf16 gradients
  double optimizer_bytes_per_param = 12;  // fp32 master + Adam m + v
};

}  // namespace pipecast

#endif  // PIPECAST_SIM_MEMORY_H_
