// The analytic estimate's parts (profiler/analytic.h), shared by its files:
// the limits and element sizes of the formulas, one layer's cost for one
// sample (SampleCost, profiler/analytic_layer_cost.cc), the rates it is
// timed at and one micro-batch size's profile (profiler/analytic_time.cc),
// and the model's `source` (profiler/analytic_source.cc); profiler/analytic.cc
// puts them together. Internal: only profiler/ includes it.
#ifndef PIPECAST_PROFILER_INTERNAL_ANALYTIC_COST_H_
#define PIPECAST_PROFILER_INTERNAL_ANALYTIC_COST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "profiler/analytic.h"
#include "profiler/attention_rates.h"
#include "profiler/layer_shapes.h"
#include "profiler/matmul_model.h"
#include "sim/cluster.h"
#include "sim/memory.h"
#include "sim/model.h"

namespace pipecast::internal {

// What model.json accepts (formats/formats.cc); an estimate past these is refused.
constexpr double kMaxFileBytes = 1125899906842624.0;  // 2^50 bytes
constexpr double kMaxFileTimeNs = 1e15;               // 1e12 us
constexpr double kMaxFileFlops = 1e24;                // per sample
constexpr int64_t kMaxFileParameters = int64_t{1} << 50;

// Element sizes that do not follow bytes_per_element.
constexpr double kTokenIdBytes = 8;      // int64 token ids, PyTorch's index type
constexpr double kMaskBytes = 1;         // dropout masks, one byte per element (Korthikanti)
constexpr double kLossSoftmaxBytes = 4;  // fp32 softmax the cross-entropy loss keeps
// --loss compiled: the fp32 max and log-sum-exp of each token's row of
// logits, which the min-cut partitioner saves (reductions are never
// recomputed: should_ban_recomputation, torch/_functorch/partitioners.py).
constexpr double kCompiledLossRowStatBytes = 2 * 4;
// FlashAttention keeps the fp32 logsumexp of each query row of each head
// (softmax_lse, float32) and a 2 x int64 RNG state per call for its dropout
// (flash_attn_interface.py, ctx.save_for_backward).
constexpr double kLogsumexpBytes = 4;
constexpr double kFlashRngStateBytes = 16;
// The flat time model's forward element-wise HBM traffic per byte kept for
// the backward: every kept tensor is written once by one kernel and read
// once by the next.
constexpr double kTrafficPerActivationByte = 2;
// The flat time model's backward over forward: each forward matrix product
// has two in the backward (input gradient and weight gradient), Narayanan et
// al. SC'21, appendix.
constexpr double kBackwardOverForward = 2;
// Bytes per element of an FP8 tensor (scales aside).
constexpr double kFp8ElementBytes = 1;

// The architecture as the formulas' symbols, in double so that products of
// widths do not overflow (every value stays an exact integer below 2^53 for
// any estimate that model.json can hold).
struct Dims {
  double s;  // sequence length
  double h;  // hidden
  double v;  // vocabulary
  double e;  // bytes per element (B)
};

// A product of the layer, per sample: a weight product has m = tokens
// (scales with the micro-batch size b), a batched one (attention scores of
// each head) has `batch` products per sample (scales with b).
struct ProductShape {
  double m, n, k;
  double batch_per_sample = 0;  // 0: a weight product, m is per sample
};

// A memory-bound kernel of the matmul time model (a norm, an activation, a
// residual add with dropout, a bias gradient, softmax, cross-entropy, a
// gather): the bytes it reads and writes per sample, and per call whatever
// the micro-batch size (the embedding's table gradient).
struct MemoryKernel {
  double bytes_per_sample = 0;
  double bytes_per_call = 0;
  bool weight_gradient = false;  // a backward kernel that belongs to the weight gradient
};

// An MoE block's routed experts at one expert-tensor-parallel degree etp on
// one GPU of the t-way group (AddRoutedExpertsAtEtp): their grouped products
// ((etp / t) x the token copies of etp = t, 1/etp of each expert's width) and,
// with FP8, the casts of those products' inputs (forward) and output
// gradients (backward).
struct ExpertProductsAtEtp {
  int etp = 1;
  bool own = false;  // etp = t: the products above (weight_products) at these shapes
  std::vector<ProductShape> products;
  std::vector<MemoryKernel> forward_casts;
  std::vector<MemoryKernel> backward_casts;
};

// One layer's cost for one sample on one GPU of a t-way group; memory and
// FLOPs scale linearly to a micro-batch of b samples, times come from the
// product shapes at each b (ProfileAt).
struct SampleCost {
  int64_t parameters = 0;       // per GPU
  double weight_flops = 0;      // forward products with a weight; also the weight-gradient FLOPs
  double other_flops = 0;       // forward products without a weight (attention scores, values)
  double layer_flops = 0;       // the whole layer's forward FLOPs (all t GPUs together)
  double activation_bytes = 0;  // kept from forward to backward
  double fixed_activation_bytes = 0;  // kept per call, whatever the micro-batch size
  double checkpoint_bytes = 0;        // what full recomputation keeps
  double attention_core_bytes = 0;    // what selective recomputation drops
  double attention_core_flops = 0;    // its forward FLOPs (rerun by selective recomputation)
  double weight_grad_bytes = 0;       // what the weight-gradient op keeps
  // Per-op recomputation (torchtitan's SelectiveAC "op" policy), for a block
  // the policy wraps (op_wrapped): what the forward keeps, and which of
  // weight_products the backward reruns (every second one) with their FLOPs.
  bool op_wrapped = false;
  double op_saved_bytes = 0;
  std::vector<ProductShape> op_rerun_products;  // the mms the policy reruns
  double op_rerun_flops = 0;
  // Megatron-LM's selective recomputation by module (--recompute-modules):
  // what the layernorm, moe_act, mla_up_proj and mlp checkpoints drop, and the
  // forward products and kernels each reruns in the backward (docs/profiler.md).
  double layernorm_bytes = 0;
  double moe_act_bytes = 0;
  double mla_up_proj_bytes = 0;
  double mlp_bytes = 0;
  std::vector<MemoryKernel> layernorm_kernels;
  std::vector<MemoryKernel> moe_act_kernels;
  std::vector<ProductShape> mla_up_proj_products;  // weight products, per GPU
  std::vector<MemoryKernel> mla_up_proj_kernels;
  std::vector<ProductShape> mlp_products;
  std::vector<MemoryKernel> mlp_kernels;
  double traffic_bytes = 0;  // forward element-wise HBM traffic
  double output_bytes = 0;   // sent to the next layer
  Bytes workspace_bytes = 0;
  double workspace_bytes_per_sample = 0;      // held while the layer runs, per sample
  bool has_input_gradient = true;             // false: the whole backward is weight gradient
  std::vector<ProductShape> weight_products;  // forward products with a weight
  bool fp8_products = false;                  // the weight products run in FP8 (blocks only)
  std::vector<ProductShape> core_products;    // eager attention: Q*K^T and P*V per head
  double flash_flops = 0;                     // FlashAttention forward FLOPs (causal)
  // The matmul model's memory-bound kernels, one entry per kernel
  // (docs/profiler.md, "Time"): the forward's, the eager attention core's
  // (forward, rerun by selective recomputation) and the backward's.
  std::vector<MemoryKernel> forward_kernels;
  std::vector<MemoryKernel> core_kernels;
  std::vector<MemoryKernel> backward_kernels;
  TensorParallelCost tp;
  // A mixture-of-experts block's routing, written as the layer's `moe`.
  std::optional<MoeRouting> moe;
  // Its routed experts at each etp the profile times (`routed_experts`); one
  // of them at etp = t, whose products and casts are those above.
  std::vector<ExpertProductsAtEtp> routed_experts;
};

// Achievable throughput: FLOP/s for products, bytes/s for element-wise work
// (flat model), and the matmul model's rates.
struct Rates {
  double flops_per_s;
  double bytes_per_s;
  TimeModel model;
  GemmRates gemm;
  GemmRates fp8_gemm;  // FP8 products (Fp8Recipe set): the FP8 peak, 1-byte elements
  Fp8Recipe fp8 = Fp8Recipe::kNone;
  FlashRates flash;  // the matmul model's FlashAttention kernel at this s and head size
};

// The parallel layout one GPU's cost is worked out for.
struct Split {
  double t = 1;     // tensor-parallel degree
  bool sp = false;  // sequence parallelism
  // Tensors outside the split regions (layernorm and dropout inputs, the
  // block input): replicated without sequence parallelism, 1/t with it.
  double Replicated() const { return sp ? 1 / t : 1; }
};

// The query/key channels of one attention head, which the attention
// kernel's speed depends on: head_dim, hidden / heads, or MLA's nope + rope.
double AttentionHeadSize(const TransformerSpec& spec);

// One sample's cost of each kind of layer on one GPU of the split x
// (profiler/analytic_layer_cost.cc).
SampleCost EmbeddingCost(const TransformerSpec& spec, const LayerShape& shape, const Dims& d,
                         const Split& x);
// Mixture-of-experts blocks (profiler/analytic_moe.cc, docs/profiler.md
// "Mixture of experts").
// The token copies product `p` sees per token: 1 for a dense product, k x
// `imbalance` for the routed experts (count x tokens_per_copy = k).
double TokenCopies(const WeightProduct& p, double imbalance);
// The MLP widths a token passes, per token: fc1 outputs and fc2 inputs of
// every MLP of the block (dense, routed experts at TokenCopies, shared).
struct MlpWidths {
  double fc1_outputs = 0, fc2_inputs = 0;
};
MlpWidths MlpWidthsOf(const LayerShape& shape, double imbalance);
// Per sample, what an MoE block keeps beyond a dense block's tensors (the
// permuted tokens, the router's scores), before the t-way split: 0 for a
// dense block.
double MoeKeptBytes(const TransformerSpec& spec, const LayerShape& shape, const Dims& d,
                    double imbalance);
// The all-to-all dispatcher's second sort (sort_chunks_by_idxs): the k
// received rows per token reordered by local expert after the dispatch and
// back before the combine (read and write k rows each), again in the
// backward.
void AddAllToAllSortKernels(const TransformerSpec& spec, const Dims& d, const Split& x,
                            double imbalance, SampleCost* c);
// The router's and the token permutation's memory-bound kernels.
void AddMoeKernels(const TransformerSpec& spec, const Dims& d, const Split& x, double imbalance,
                   SampleCost* c);
// c->routed_experts: the routed experts' products (and FP8 casts) at etp =
// 1, 2, 4, 8 and t, those that divide every routed expert's split width
// (docs/profiler.md "Mixture of experts").
void AddRoutedExpertsAtEtp(const LayerShape& shape, const Dims& d, const Split& x, Fp8Recipe fp8,
                           double imbalance, SampleCost* c);
// c->moe: the routing model.json records (sim/model.h MoeRouting).
void AddMoeRouting(const TransformerSpec& spec, const LayerShape& whole, const Dims& d,
                   SampleCost* c);

// REQUIRES: `whole` is `shape` at t = 1. `imbalance`: the busiest expert's
// tokens over the mean (AnalyticOptions::moe_imbalance), for MoE blocks.
SampleCost BlockCost(const TransformerSpec& spec, const LayerShape& shape, const LayerShape& whole,
                     const Dims& d, Attention kind, const Split& x, Fp8Recipe fp8, double imbalance,
                     ExpertDispatcher dispatcher = ExpertDispatcher::kDeepEp,
                     Elementwise elementwise = Elementwise::kFused);
SampleCost HeadCost(const TransformerSpec& spec, const LayerShape& shape, const Dims& d,
                    const Split& x, Loss loss, Elementwise elementwise = Elementwise::kFused);

// The layer at each micro-batch size in `sizes`, timed at `r`
// (profiler/analytic_time.cc); refused past model.json's limits.
// REQUIRES: `sizes` sorted and unique.
Result<Layer> ToLayer(std::string name, const SampleCost& c, const Rates& r,
                      const std::vector<int>& sizes);

// The model's `source`: the formulas, limitations and rates behind the
// estimate (profiler/analytic_source.cc).
ModelSource MakeSource(const TransformerSpec& spec, const AnalyticOptions& options,
                       const GpuSpec& gpu, std::string device, const Rates& rates);

}  // namespace pipecast::internal

#endif  // PIPECAST_PROFILER_INTERNAL_ANALYTIC_COST_H_
