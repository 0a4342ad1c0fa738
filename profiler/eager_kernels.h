// The element-wise kernels a block and the output layer launch, by
// --elementwise (docs/profiler.md, "Element-wise kernel sets"): fused (one
// kernel per norm, activation and rotary embedding in each direction, as
// Megatron-LM, llm-foundry and torch.compile run them; the default) or eager
// (PyTorch eager mode running torchtitan's Llama code op by op, every ATen
// operator its own kernel reading and writing HBM). Internal: only profiler/
// includes it.
#ifndef PIPECAST_PROFILER_EAGER_KERNELS_H_
#define PIPECAST_PROFILER_EAGER_KERNELS_H_

#include <vector>

#include "profiler/internal/analytic_cost.h"

namespace pipecast::internal {

// The block's kernels that --elementwise decides, forward and backward, each
// a list of kernels in launch order.
struct ElementwiseKernels {
  std::vector<MemoryKernel> norm, norm_backward;              // one h-wide norm
  std::vector<MemoryKernel> activation, activation_backward;  // the MLP's activation
  std::vector<MemoryKernel> rotary, rotary_backward;          // empty without rotary positions
  // eager: repeat_kv's copies (GQA) and the copy of SDPA's output to
  // contiguous; empty when fused
  std::vector<MemoryKernel> repeat_kv, repeat_kv_backward;
};

// The eager kernels of torchtitan's unfused RMSNorm over `elements` values
// per sample (tokens x width) with e-byte elements: 8 forward and 12
// backward kernels, 2 of them the weight gradient (eager_kernels.cc derives
// each). `rows` is the tokens per sample: the per-row kernels move 4 bytes a
// row each way.
std::vector<MemoryKernel> EagerRmsNorm(double elements, double rows, double e);
std::vector<MemoryKernel> EagerRmsNormBackward(double elements, double rows, double e);

// torchtitan's repeat_kv (K and V expanded from kv_heads to heads, each a
// copy): bytes per sample of the forward copies and of the backward's sums,
// zero when kv_heads == heads (repeat_kv returns x).
std::vector<MemoryKernel> RepeatKv(const AttentionCore& attention, double e_split);
std::vector<MemoryKernel> RepeatKvBackward(const AttentionCore& attention, double e_split);

// The eager kernel set of a block. `full` and `rows` are a full-width tensor's
// elements and its tokens per sample on this GPU (1/t of them with sequence
// parallelism); `e_split` is bytes per split column (s * e / t); `f` the MLP
// width. RMSNorm models only get the eager norm (nn.LayerNorm is one ATen
// kernel each way, eager or not); a plain MLP's GeLU is one kernel each way
// and MLA's rotary channels keep the fused count.
// REQUIRES: mode is eager.
ElementwiseKernels EagerBlockKernels(const TransformerSpec& spec, const AttentionCore& attention,
                                     double full, double rows, double e, double e_split, double f,
                                     const ElementwiseKernels& fused);

// The output layer's final norm and loss kernels in eager mode: the eager
// RMSNorm (RMSNorm models), and with --loss pytorch the fp32 upcast of the
// logits and log_softmax / nll_loss as separate kernels (`logits` = s *
// V/t per sample). Replaces `forward` and `backward`'s lists.
void EagerHeadKernels(const TransformerSpec& spec, Loss loss, double full, double rows, double e,
                      double logits, std::vector<MemoryKernel>* forward,
                      std::vector<MemoryKernel>* backward);

}  // namespace pipecast::internal

#endif  // PIPECAST_PROFILER_EAGER_KERNELS_H_
