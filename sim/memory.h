// Memory model: the bytes a training run keeps per parameter on each GPU, by
// precision, main-gradient precision, optimizer and how far the
// data-parallel replicas shard that state (ZeRO level). Units: bytes per
// parameter (doubles: shards divide by d).
//
// The unsharded figures (MemoryConfig) follow Megatron-LM's mixed-precision
// optimizer: model parameters in the training precision, main gradients in
// --grad-dtype (fp32 by default, Megatron's default for bf16 training), fp32
// main parameters and Adam's two fp32 moments; with half-precision main
// gradients the optimizer step also keeps a 4-byte fp32 copy of them. The
// default is bf16 parameters, fp32 main gradients, Adam, ZeRO level 0:
// 2 + 4 + 12 = 18 bytes per parameter, Megatron's figure without the
// distributed optimizer (docs/simulator.md, "Memory", lists every figure
// and its source).
//
// Sharding over d data-parallel replicas (ShardedBytesPerParam):
//   level 0  nothing sharded                         (Megatron, plain DDP)
//   level 1  optimizer state, fp32 main parameters   (Megatron's distributed
//            and the fp32 gradient copy               optimizer, ZeRO-1)
//   level 2  also the main gradients                 (ZeRO-2)
//   level 3  also the model parameters               (ZeRO-3, FSDP)
// Levels 0 and 1 equal Megatron-LM's table (docs/source/distrib_optimizer.md):
// fp16/fp16 20 and 4 + 16/d, bf16/fp32 18 and 6 + 12/d, fp32/fp32 16 and
// 8 + 8/d. Levels 2 and 3 follow Rajbhandari et al. 2020 (ZeRO, §5), whose
// K = 12 of mixed-precision Adam has no fp32 gradient copy: fp16/fp16
// 2 + 14/d and 16/d, and per dtype W + (G + K)/d and (W + G + K)/d.
#ifndef PIPECAST_SIM_MEMORY_H_
#define PIPECAST_SIM_MEMORY_H_

#include <string>

#include "base/status.h"

namespace pipecast {

// The highest ZeRO level: 3 shards parameters, gradients and optimizer state.
inline constexpr int kMaxZeroLevel = 3;

struct MemoryConfig {
  double weight_bytes_per_param = 2;      // bf16 model parameters
  double gradient_bytes_per_param = 4;    // fp32 main gradients (--grad-dtype)
  double optimizer_bytes_per_param = 12;  // fp32 main parameters + Adam m + v
  // The fp32 copy of half-precision main gradients that the optimizer step
  // reads (Megatron's 20 bytes for fp16/fp16): 4 with --grad-dtype bf16 or
  // fp16 under mixed precision, else 0. Counted at ZeRO levels 0 and 1 only.
  double gradient_copy_bytes_per_param = 0;
  int zero = 0;  // ZeRO level, 0-3 (see above)

  // InvalidArgument naming the setting for a negative byte count or a level
  // outside 0-3.
  Status Validate() const;
};

// What one GPU keeps per parameter of its stages, after sharding.
struct ShardedBytes {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;  // optimizer state, fp32 main parameters, gradient copy
  double Total() const { return weights + gradients + optimizer; }
};

// What one GPU of a t-way tensor-parallel group keeps per parameter of its
// stage: every byte count / t (the layers split t ways; ZeRO over d applies
// on top). The one rule for the simulator, its default partition and the
// planner's estimate. REQUIRES: t >= 1.
MemoryConfig TensorParallelShare(const MemoryConfig& memory, int t);

// The bytes per parameter one of `data_parallel` replicas keeps at
// `memory.zero`. REQUIRES: memory.Validate() is OK and data_parallel >= 1.
ShardedBytes ShardedBytesPerParam(const MemoryConfig& memory, int data_parallel);

// Bytes per parameter for a training precision, a main-gradient precision
// and an optimizer, at ZeRO level 0:
//   precision bf16 or fp16 (mixed): 2 B parameters and a 4 B fp32 main copy;
//     fp32: 4 B parameters, no main copy;
//   grad_dtype fp32: 4 B main gradients; bf16 or fp16: 2 B, plus the 4 B
//     fp32 copy the optimizer step reads; fp32 precision needs fp32;
//   optimizer adam: 8 B state (fp32 m and v); sgd: 4 B (fp32 momentum);
//     sgd-nomomentum: none.
// So bf16 + fp32 + adam = 2 + 4 + 12 = 18 B (the default), fp16 + fp16 +
// adam = 2 + 2 + 16 = 20 B, fp32 + fp32 + adam = 4 + 4 + 8 = 16 B.
// InvalidArgument names the flag otherwise.
Result<MemoryConfig> MemoryConfigFor(const std::string& precision, const std::string& optimizer,
                                     const std::string& grad_dtype = "fp32");

}  // namespace pipecast

#endif  // PIPECAST_SIM_MEMORY_H_
