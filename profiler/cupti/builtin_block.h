// pipecast's own CUDA transformer block: the workload behind `profiler
// builtin`, and the ground truth the validator's cuda backend can run.
//
// A pre-layernorm GPT block in bf16 with fp32 accumulation:
//   y = x1 + W2 · gelu(W1 · ln2(x1)),  x1 = x + Wo · attn(Wqkv · ln1(x))
// with causal softmax attention over `heads` heads and no biases. Matrix
// products use cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx); layer
// norm, softmax, GELU, head reshapes and residual adds are small kernels.
// The three passes run separately, as split-backward schedules need them:
//   Forward         x -> y; allocates what the backward needs (cudaMalloc,
//                   so CUPTI's MEMORY2 records see the activation memory)
//   BackwardInput   dy -> dx; keeps what the weight gradient needs
//   BackwardWeight  accumulates the weight gradients; frees everything
// Activations are allocated and freed per call: the simple, honest
// baseline (no caching allocator hiding them).
//
// Units: elements and bytes. Not thread-safe; one block per thread/stream.
// REQUIRES: a current CUDA device (cudaSetDevice) for every call.
#ifndef PIPECAST_PROFILER_CUPTI_BUILTIN_BLOCK_H_
#define PIPECAST_PROFILER_CUPTI_BUILTIN_BLOCK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "profiler/cupti_profile.h"  // BlockShape

struct CUstream_st;

namespace pipecast {

class TransformerBlock {
 public:
  // Allocates the weights (random, fixed seed), their gradients and a cuBLAS
  // handle bound to `stream` (nullptr: the default stream). Unavailable
  // when CUDA or cuBLAS fail (naming the call), InvalidArgument for a bad
  // shape.
  static Result<std::unique_ptr<TransformerBlock>> Create(const BlockShape& shape, uint64_t seed,
                                                          CUstream_st* stream = nullptr);
  ~TransformerBlock();
  TransformerBlock(const TransformerBlock&) = delete;
  TransformerBlock& operator=(const TransformerBlock&) = delete;

  // Bytes of one [microbatch * seq, hidden] bf16 tensor: the block's input,
  // output and their gradients.
  int64_t HiddenBytes(int microbatch) const;
  // Bytes Forward keeps allocated until BackwardWeight (the activation
  // memory), by the list in builtin_block.cu.
  int64_t ActivationBytes(int microbatch) const;
  // Bytes BackwardWeight needs once BackwardInput is done: this block frees
  // nothing at the input gradient, so all of ActivationBytes plus what
  // BackwardInput saves (dfc1 [T,f], dln2, dx1, dln1 [T,h], dqkv [T,3h]).
  int64_t WeightGradBytes(int microbatch) const;
  int64_t Parameters() const { return shape_.ParametersPerBlock(); }

  // REQUIRES: x and y device buffers of HiddenBytes(microbatch); no
  // forward pending. x must stay valid until BackwardWeight.
  [[nodiscard]] Status Forward(const void* x, void* y, int microbatch);
  // REQUIRES: Forward done; dy and dx of HiddenBytes. dy must stay valid
  // until BackwardWeight.
  [[nodiscard]] Status BackwardInput(const void* dy, void* dx);
  // REQUIRES: BackwardInput done.
  [[nodiscard]] Status BackwardWeight();

 private:
  struct State;
  TransformerBlock(BlockShape shape, std::unique_ptr<State> state);
  BlockShape shape_;
  std::unique_ptr<State> state_;
};

// Fills a device buffer of `bytes` (bf16 elements) with a fixed pattern in
// [-scale, scale]; for inputs and output gradients.
[[nodiscard]] Status FillDeviceBf16(void* buffer, int64_t bytes, float scale, uint64_t seed,
                                    CUstream_st* stream = nullptr);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_CUPTI_BUILTIN_BLOCK_H_
