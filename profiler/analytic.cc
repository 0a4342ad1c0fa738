// The analytic estimate (profiler/analytic.h). Each layer's cost is first
// worked out for one sample (SampleCost, closed forms only), then scaled to
// every requested micro-batch size. docs/profiler.md derives every formula.
#include "profiler/analytic.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "formats/formats.h"
#include "profiler/attention_rates.h"
#include "profiler/layer_shapes.h"
#include "profiler/matmul_model.h"
#include "sim/cluster.h"

namespace pipecast {
namespace {

using json = nlohmann::json;

// What model.json accepts (formats/formats.cc); an estimate past these is refused.
constexpr double kMaxFileBytes = 1125899906842624.0;  // 2^50 bytes
constexpr double kMaxFileTimeNs = 1e15;               // 1e12 us
constexpr double kMaxFileFlops = 1e24;                // per sample
constexpr int64_t kMaxFileParameters = int64_t{1} << 50;

// Element sizes that do not follow bytes_per_element.
constexpr double kTokenIdBytes = 8;      // int64 token ids, PyTorch's index type
constexpr double kMaskBytes = 1;         // dropout masks, one byte per element (Korthikanti)
constexpr double kLossSoftmaxBytes = 4;  // fp32 softmax the cross-entropy loss keeps
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
double AttentionHeadSize(const TransformerSpec& spec) {
  if (spec.mla.Enabled()) return spec.mla.qk_nope_head_dim + spec.mla.qk_rope_head_dim;
  if (spec.head_dim > 0) return spec.head_dim;
  return static_cast<double>(spec.hidden) / spec.heads;
}

FlashKernel FlashKernelOf(Attention attention) {
  switch (attention) {
    case Attention::kFlash3:
      return FlashKernel::kFlash3;
    case Attention::kTriton:
      return FlashKernel::kTriton;
    default:
      return FlashKernel::kFlash2;
  }
}

SampleCost EmbeddingCost(const TransformerSpec& spec, const LayerShape& shape, const Dims& d,
                         const Split& x) {
  const double tables = spec.learned_positions ? 2 : 1;
  SampleCost c;
  // Vocabulary-parallel token table; the position table is replicated.
  c.parameters = shape.parameters;
  // Read the ids, gather one row per token from each table, write their sum;
  // dropout reads it and writes the output and its mask (on 1/t of the
  // tokens with sequence parallelism).
  const double gather = d.s * kTokenIdBytes + d.s * d.h * (tables * d.e + d.e);
  const double dropout = x.Replicated() * d.s * d.h * (2 * d.e + kMaskBytes);
  c.traffic_bytes = gather + dropout;
  c.forward_kernels = {{gather}, {dropout}};
  // Backward: dropout's (read the gradient and the mask, write), and the
  // table gradient: read the ids and the rows' gradients, and per call zero
  // the V/t x h gradient table and add it into the parameter's gradient
  // (PyTorch's embedding_dense_backward), the position table's with it.
  const double table_bytes = static_cast<double>(shape.table_parameters) * d.e;
  c.backward_kernels = {{.bytes_per_sample = dropout, .weight_gradient = true},
                        {.bytes_per_sample = d.s * kTokenIdBytes + tables * d.s * d.h * d.e,
                         .bytes_per_call = 2 * table_bytes,
                         .weight_gradient = true}};
  c.activation_bytes = d.s * kTokenIdBytes + x.Replicated() * d.s * d.h * kMaskBytes;
  c.checkpoint_bytes = c.activation_bytes;   // not recomputed
  c.weight_grad_bytes = c.activation_bytes;  // the whole backward is the weight gradient
  c.output_bytes = x.Replicated() * d.s * d.h * d.e;
  c.has_input_gradient = false;  // token ids have no gradient
  // The partial lookups are summed over the group: one all-reduce (a
  // reduce-scatter with sequence parallelism, whose backward all-gather
  // makes up the other half of an all-reduce's volume).
  c.tp = {.comm_bytes_per_sample = d.s * d.h * d.e,
          .forward_collectives = 1,
          .backward_collectives = 0};
  return c;
}

// Widths (features per token, whole layer) of what a block keeps for its
// backward, split by how tensor parallelism divides them: `full` is whole on
// every GPU (1/t of the tokens with sequence parallelism), `split` is / t.
struct KeptWidths {
  double full = 0, split = 0;
};

// What the weight-gradient products need: each product's input and the
// gradient of its output. A column-parallel product's input is full and its
// output split; a row-parallel one's the other way round; a replicated one
// (MLA's down-projections) has both full.
KeptWidths WeightGradWidths(const LayerShape& shape) {
  KeptWidths w;
  for (const WeightProduct& p : shape.products) {
    const double in = static_cast<double>(p.in), out = static_cast<double>(p.out);
    switch (p.split) {
      case TpSplit::kColumn:
        w.full += in;
        w.split += out;
        break;
      case TpSplit::kRow:
        w.split += in;
        w.full += out;
        break;
      default:
        w.full += in + out;
        break;
    }
  }
  return w;
}

// The memory-bound kernels of a block, per sample on one GPU of the group
// (docs/profiler.md, "Time"). Full-width tensors (norms, residual adds,
// dropout) are replicated over the group, or 1/t of the tokens with sequence
// parallelism; the attention and MLP insides are split over t. A kernel per
// norm of the block (RMSNorm and LayerNorm move the same bytes), the MLP's
// activation (SwiGLU: gate, up -> out), rotary positions on Q and K in each
// direction (MLA: on their rotary channels), the query/key norms, and a bias
// gradient per product with a bias. In the flags' classic shape
// (ClassicShape) GPT-style blocks (a plain MLP) have the bias gradients and
// LLaMA-style ones (a gated MLP) none, as those models are trained.
void AddBlockKernels(const TransformerSpec& spec, const LayerShape& shape, const Dims& d,
                     bool flash, const Split& x, SampleCost* c) {
  const AttentionCore& attention = shape.attention;
  const double a = attention.query_heads;
  const double q_width = a * attention.qk_dim;
  const double kv_width = static_cast<double>(attention.kv_heads) * attention.qk_dim;
  double f = 0;  // the MLP width
  for (const WeightProduct& p : shape.products) {
    if (p.name == "fc2") f = static_cast<double>(p.in);
  }
  const double full = x.Replicated() * d.s * d.h * d.e;  // one full-width tensor
  const double mask = x.Replicated() * d.s * d.h * kMaskBytes;
  const double e_split = d.s * d.e / x.t;           // bytes per split column
  const double norm = 2 * full;                     // read x, write y
  const double norm_backward = 3 * full;            // read x and dy, write dx
  const double residual_dropout = 3 * full + mask;  // read two, write one and the mask
  const double dropout_backward = 2 * full + mask;  // read dy and the mask, write dx
  const double residual_backward = 3 * full;        // add the two branches' gradients
  const double activation =
      spec.gated_mlp ? 3 * f * e_split : 2 * f * e_split;  // SwiGLU: gate, up -> out
  const double activation_backward = spec.gated_mlp ? 5 * f * e_split : 3 * f * e_split;
  const double rope = spec.mla.qk_rope_head_dim;
  const double rotary = spec.learned_positions ? 0
                        : spec.mla.Enabled()   ? 2 * (a * rope + rope) * e_split
                                               : 2 * (q_width + kv_width) * e_split;
  // Two norms: before attention and before the MLP; one (Falcon-7B) shares
  // the first; more (Gemma: after each as well) follow.
  c->forward_kernels = {{norm}, {residual_dropout}};
  if (spec.block_norms >= 2) c->forward_kernels.push_back({norm});
  c->forward_kernels.push_back({activation});
  c->forward_kernels.push_back({residual_dropout});
  for (int n = 2; n < spec.block_norms; ++n) c->forward_kernels.push_back({norm});
  if (rotary > 0) c->forward_kernels.push_back({rotary});
  c->backward_kernels = {{dropout_backward},
                         {activation_backward},
                         {norm_backward},
                         {residual_backward},
                         {dropout_backward}};
  if (spec.block_norms >= 2) c->backward_kernels.push_back({norm_backward});
  c->backward_kernels.push_back({residual_backward});
  for (int n = 2; n < spec.block_norms; ++n) c->backward_kernels.push_back({norm_backward});
  if (rotary > 0) c->backward_kernels.push_back({rotary});
  if (spec.qk_norm) {  // a norm over each query and key head
    c->forward_kernels.push_back({2 * (q_width + kv_width) * e_split});
    c->backward_kernels.push_back({3 * (q_width + kv_width) * e_split});
  }
  // The bias gradients: a reduction over the tokens of each output gradient.
  std::vector<double> bias_bytes;
  if (ClassicShape(spec)) {
    if (!spec.gated_mlp) bias_bytes = {full, f * e_split, full, (q_width + 2 * kv_width) * e_split};
  } else {
    for (const WeightProduct& p : shape.products) {
      if (!p.bias) continue;
      const double out = static_cast<double>(p.out);
      bias_bytes.push_back(p.split == TpSplit::kColumn ? out * e_split
                           : p.split == TpSplit::kRow  ? x.Replicated() * d.s * out * d.e
                                                       : d.s * out * d.e);
    }
  }
  for (double bytes : bias_bytes) {
    c->backward_kernels.push_back({.bytes_per_sample = bytes, .weight_gradient = true});
  }
  if (flash) {
    // The backward's first kernel: the row sums of dO * O.
    c->backward_kernels.push_back({2 * a * attention.v_dim * e_split});
    return;
  }
  // Eager attention: scaled, masked softmax of the scores and its dropout,
  // a/t heads of s x s; their backward.
  const double scores = a * d.s * d.s / x.t;
  c->core_kernels = {{2 * scores * d.e}, {scores * (2 * d.e + kMaskBytes)}};
  c->backward_kernels.push_back({scores * (2 * d.e + kMaskBytes)});
  c->backward_kernels.push_back({3 * scores * d.e});
}

// FP8 (docs/profiler.md "FP8"). Bytes per element of an FP8 tensor a
// quantisation kernel writes: the tensor and its transpose (Hopper's FP8
// GEMMs take only the TN layout, so the weight gradient reads the
// transposed copy; Transformer Engine's cast_transpose writes both), each
// with its scales: per tensor none, blockwise an fp32 scale per 1 x 128 tile
// (DeepSeek-V3 sec. 3.3.2), MXFP8 an E8M0 byte per 32 elements.
constexpr double kFp8ElementBytes = 1;
double Fp8ScaleBytes(Fp8Recipe recipe) {
  if (recipe == Fp8Recipe::kBlockwise) return 4.0 / 128;
  if (recipe == Fp8Recipe::kMxfp8) return 1.0 / 32;
  return 0;
}
// What the backward keeps of a product's FP8 input: one copy, the
// transposed one the weight gradient reads (TE's Linear saves it in place
// of the bf16 input).
double Fp8KeptBytes(Fp8Recipe recipe) { return kFp8ElementBytes + Fp8ScaleBytes(recipe); }

// The quantisation kernels of one bf16 tensor of `elements` per sample cast
// to FP8 for a product: delayed scaling casts in one kernel (read bf16,
// write the FP8 tensor and its transpose; the amax is taken in the same
// pass for the next step's scale); current scaling reads the tensor once
// more first for its amax (a kernel of its own); blockwise and MXFP8 take
// each block's amax inside the cast kernel.
void AddFp8Casts(Fp8Recipe recipe, double elements, double e, std::vector<MemoryKernel>* kernels) {
  if (recipe == Fp8Recipe::kCurrent) kernels->push_back({elements * e});  // amax
  kernels->push_back({elements * (e + 2 * Fp8KeptBytes(recipe))});
}

// The block's matrix products as the model calls them, one aten.mm each, per
// GPU: what torchtitan's op policy counts. torchtitan's models call one
// nn.Linear per projection (torchtitan/models/llama/model.py @ 9dec370:
// `self.wq(x), self.wk(x), self.wv(x)`, then wo; the MLP
// `self.w2(F.silu(self.w1(x)) * self.w3(x))`), so pipecast's fused "qkv"
// product is three mms (q, k, v by their widths) and a gated "fc1" two (gate
// w1, then up w3); every other product is one mm.
std::vector<ProductShape> OpPolicyMms(const TransformerSpec& spec, const LayerShape& shape,
                                      const std::vector<ProductShape>& per_gpu) {
  const AttentionCore& core = shape.attention;
  std::vector<ProductShape> mms;
  for (size_t i = 0; i < shape.products.size() && i < per_gpu.size(); ++i) {
    const std::string& name = shape.products[i].name;
    const ProductShape& p = per_gpu[i];
    if (name == "qkv") {
      const double q = static_cast<double>(core.query_heads) * core.qk_dim;
      const double k = static_cast<double>(core.kv_heads) * core.qk_dim;
      const double v = static_cast<double>(core.kv_heads) * core.v_dim;
      for (double width : {q, k, v}) mms.push_back({p.m, p.n * width / (q + k + v), p.k});
    } else if (name == "fc1" && spec.gated_mlp) {
      mms.push_back({p.m, p.n / 2, p.k});  // w1, the gate
      mms.push_back({p.m, p.n / 2, p.k});  // w3, the up projection
    } else {
      mms.push_back(p);
    }
  }
  return mms;
}

// REQUIRES: `shape` is a dense block (the time model refuses experts) and
// `whole` the same block at t = 1.
SampleCost BlockCost(const TransformerSpec& spec, const LayerShape& shape, const LayerShape& whole,
                     const Dims& d, Attention kind, const Split& x, Fp8Recipe fp8) {
  const AttentionCore& core_shape = shape.attention;
  const double a = core_shape.query_heads;
  const double t = x.t;
  SampleCost c;
  c.parameters = shape.parameters;
  double fc1_outputs = 0, f = 0;
  for (const WeightProduct& p : shape.products) {
    c.weight_products.push_back({d.s, p.OutAt(x.t), p.InAt(x.t)});
    if (p.name == "fc1") fc1_outputs = static_cast<double>(p.out);
    if (p.name == "fc2") f = static_cast<double>(p.in);
  }
  c.weight_flops = d.s * shape.WeightFlopsPerToken(x.t);
  c.other_flops = core_shape.flops / t;
  c.layer_flops = d.s * whole.WeightFlopsPerToken(1) + core_shape.flops;
  const bool flash = kind != Attention::kEager;
  if (flash) {
    c.flash_flops = core_shape.causal_flops_as_full / t;
  } else {  // an eager kernel scores every key, then masks
    c.core_products = {{d.s, d.s, static_cast<double>(core_shape.qk_dim), a / t},  // Q*K^T
                       {d.s, static_cast<double>(core_shape.v_dim), d.s, a / t}};  // softmax(.)*V
  }
  // Korthikanti et al. 2022 sec. 4.1-4.2, generalised to B, f, head widths,
  // SwiGLU and MLA: the QKV input, the fc1 input (one tensor when a parallel
  // block has one norm), the norm inputs and the two dropout masks are
  // replicated without sequence parallelism (10sbh for 16-bit); Q, K, V,
  // the output projection's input, qk-norm inputs, fc1's outputs and fc2's
  // input are split over t (24sbh + 5as^2b); MLA's latents (the input of
  // their norm and of their up-projection) are replicated.
  const double qk = core_shape.qk_dim, v = core_shape.v_dim, kv = core_shape.kv_heads;
  const double core = (2 * d.e + kMaskBytes) * a * d.s * d.s / t;
  const double product_inputs = spec.parallel_block && spec.block_norms == 1 ? 1 : 2;
  const double latents = 2.0 * (spec.mla.q_lora_rank + spec.mla.kv_lora_rank);
  // FP8: the inputs of the products keep their FP8 copy instead (the QKV
  // and fc1 inputs, fc2's input), and the output projection's FP8 input is
  // kept beside the bf16 attention output FlashAttention keeps.
  const bool fp8_on = fp8 != Fp8Recipe::kNone;
  const double e_input = fp8_on ? Fp8KeptBytes(fp8) : d.e;
  const double replicated = d.s * (d.e * spec.block_norms * d.h + e_input * product_inputs * d.h +
                                   d.e * latents + 2 * kMaskBytes * d.h);
  const double qk_norm_inputs = spec.qk_norm ? a * qk + kv * qk : 0;
  const double split = d.s *
                       (d.e * (a * qk + kv * qk + kv * v + a * v + qk_norm_inputs + fc1_outputs) +
                        e_input * f + (fp8_on ? e_input * a * v : 0)) /
                       t;
  c.activation_bytes =
      x.Replicated() * replicated + split + (flash ? kLogsumexpBytes * a * d.s / t : core);
  if (flash) c.fixed_activation_bytes = kFlashRngStateBytes;
  c.attention_core_bytes = flash ? 0 : core;
  c.attention_core_flops = flash ? 0 : c.other_flops;
  c.traffic_bytes = kTrafficPerActivationByte * c.activation_bytes;
  AddBlockKernels(spec, shape, d, flash, x, &c);
  if (fp8_on) {
    // Each weight product casts its input in the forward and the gradient
    // of its output in the backward (per-GPU widths, whole sequence).
    c.fp8_products = true;
    for (const ProductShape& p : c.weight_products) {
      AddFp8Casts(fp8, p.m * p.k, d.e, &c.forward_kernels);
      AddFp8Casts(fp8, p.m * p.n, d.e, &c.backward_kernels);
    }
  }
  c.checkpoint_bytes = x.Replicated() * d.s * d.h * d.e;  // the block input
  // What the weight products' gradients need (WeightGradWidths): 32sbh for
  // 16-bit, f = 4h, multi-head attention (Qi et al. 2024, Table 1).
  const KeptWidths grad = WeightGradWidths(whole);
  c.weight_grad_bytes = d.s * d.e * (x.Replicated() * grad.full + grad.split / t);
  // torchtitan's op policy (torchtitan/parallelisms/parallelize_llama.py @
  // 9dec370, _save_list and _custom_policy; docs/profiler.md): the block's
  // input, the outputs of the 1st, 3rd, ... aten.mm in the order the block
  // calls them (the 2nd, 4th, ... are rerun), and the attention kernel's
  // outputs (its output and, with flash, the logsumexp; eager attention's s x
  // s tensors) are kept; everything else (norms, rotary, activation, residual
  // adds, dropout) is rerun. The mms are counted as the model calls them
  // (OpPolicyMms): LLaMA's wq, wk, wv, wo, w1, w3, w2 keep wq, wv, w1, w2.
  c.op_wrapped = true;
  c.op_saved_bytes = c.checkpoint_bytes + d.s * d.e * a * core_shape.v_dim / t +
                     (flash ? kLogsumexpBytes * a * d.s / t : core);
  const std::vector<ProductShape> mms = OpPolicyMms(spec, shape, c.weight_products);
  for (size_t i = 0; i < mms.size(); ++i) {
    const ProductShape& p = mms[i];
    if (i % 2 == 1) {  // meta[mm_count] % 2 == 0: the 2nd, 4th, ... mm
      c.op_rerun_products.push_back(p);
      c.op_rerun_flops += 2 * p.m * p.n * p.k;
    } else {
      c.op_saved_bytes += p.m * p.n * d.e;
    }
  }
  c.output_bytes = x.Replicated() * d.s * d.h * d.e;
  c.workspace_bytes = kMatmulWorkspaceBytes;
  // Two all-reduces in the forward (after attention and after the MLP) and
  // two in the backward (Megatron-LM's f and g operators; with sequence
  // parallelism each is an all-gather + reduce-scatter pair of the same
  // volume).
  c.tp = {.comm_bytes_per_sample = d.s * d.h * d.e,
          .forward_collectives = 2,
          .backward_collectives = 2};
  return c;
}

SampleCost HeadCost(const LayerShape& shape, const Dims& d, const Split& x, Loss loss) {
  const double rows = shape.products.front().OutAt(x.t);
  SampleCost c;
  // Replicated final norm; vocabulary-parallel projection.
  c.parameters = shape.parameters;
  c.weight_products = {{d.s, rows, d.h}};
  c.weight_flops = 2 * d.s * d.h * rows;
  c.layer_flops = 2 * d.s * d.h * d.v;
  // Inputs of the final layernorm and of the projection, and what the loss
  // keeps for its backward (vocabulary-parallel cross-entropy: each GPU its
  // V/t columns): fused, the logits and the fp32 softmax; pytorch, the fp32
  // log-softmax only (log_softmax saves its output; the projection saves its
  // input, not the logits, which train.py frees), and at the backward's start
  // nll_loss's fp32 gradient and log_softmax's fp32 result beside it.
  const bool pytorch = loss == Loss::kPytorch;
  c.activation_bytes = d.s * (x.Replicated() * 2 * d.e * d.h + (pytorch ? 0 : d.e * rows) +
                              kLossSoftmaxBytes * rows);
  if (pytorch) c.workspace_bytes_per_sample = 2 * kLossSoftmaxBytes * d.s * rows;
  c.traffic_bytes = kTrafficPerActivationByte * c.activation_bytes;
  // The final norm; the cross-entropy reads the logits and writes the fp32
  // softmax it keeps, and its backward reads that and writes the logits'
  // gradient.
  const double norm = x.Replicated() * d.s * d.h * d.e;
  const double loss_bytes = d.s * rows * (d.e + kLossSoftmaxBytes);
  c.forward_kernels = {{2 * norm}, {loss_bytes}};
  c.backward_kernels = {{loss_bytes}, {3 * norm}};
  c.checkpoint_bytes = c.activation_bytes;                          // not recomputed
  c.weight_grad_bytes = d.s * d.e * (x.Replicated() * d.h + rows);  // projection input, logits grad
  c.output_bytes = 0;  // the last layer: only the loss leaves it
  c.workspace_bytes = kMatmulWorkspaceBytes;
  // The input is copied into the group (identity forward, all-reduce of its
  // gradient backward; with sequence parallelism an all-gather forward and a
  // reduce-scatter backward, counted as the one all-reduce they add up to).
  // The cross-entropy's three all-reduces of s*b fp32 values (max, sum,
  // target logit) are under 1/h of that and left out.
  c.tp = {.comm_bytes_per_sample = d.s * d.h * d.e,
          .forward_collectives = 0,
          .backward_collectives = 1};
  return c;
}

// An estimate past model.json's limits: a unit mistake or an absurd size.
Status OverLimit(const std::string& layer, int b, const char* what, double value,
                 const char* limit) {
  return Status::FailedPrecondition(fmt::format(
      "{} at micro-batch size {}: {} {:.4g} is over the {} model.json can hold; check --seq, "
      "--hidden, --vocab and --microbatch-sizes",
      layer, b, what, value, limit));
}

Gemm AtMicrobatch(const ProductShape& p, int b) {
  if (p.batch_per_sample > 0) return Gemm{p.m, p.n, p.k, b * p.batch_per_sample};
  return Gemm{b * p.m, p.n, p.k, 1};
}

// Seconds of one micro-batch of b samples: forward, whole backward, and the
// weight-gradient part of the backward, the forward of the attention core
// that selective recomputation reruns, and the forward of the ops the per-op
// policy reruns.
struct LayerSeconds {
  double forward = 0, backward = 0, weight = 0, core = 0, op = 0;
};

LayerSeconds FlatSeconds(const SampleCost& c, const Rates& r, int b) {
  LayerSeconds s;
  s.forward =
      b * ((c.weight_flops + c.other_flops) / r.flops_per_s + c.traffic_bytes / r.bytes_per_s);
  s.backward = kBackwardOverForward * s.forward;
  s.weight = c.has_input_gradient ? b * c.weight_flops / r.flops_per_s : s.backward;
  s.core = b * (c.attention_core_flops / r.flops_per_s +
                kTrafficPerActivationByte * c.attention_core_bytes / r.bytes_per_s);
  // The rerun products and the element-wise traffic but the core's.
  s.op =
      b * (c.op_rerun_flops / r.flops_per_s +
           (c.traffic_bytes - kTrafficPerActivationByte * c.attention_core_bytes) / r.bytes_per_s);
  return s;
}

// The matmul model: C = A[m x k] * W[k x n] has an input gradient dA = dC *
// W^T (m, k, n) and a weight gradient dW = A^T * dC (k, n, m); a product of
// two activations (the attention core) has both operands' gradients.
LayerSeconds MatmulSeconds(const SampleCost& c, const Rates& r, int b) {
  const GemmRates& g = r.gemm;
  // Every kernel lasts at least kMinKernelSeconds (the launch and host cost
  // of one operator).
  auto kernel = [](double seconds) { return std::max(seconds, kMinKernelSeconds); };
  auto gemm = [&](const Gemm& product) { return kernel(TimeGemm(g, product).seconds); };
  auto memory = [&](const MemoryKernel& k) {
    return kernel((b * k.bytes_per_sample + k.bytes_per_call) / r.bytes_per_s);
  };
  LayerSeconds s;
  double input_grad = 0;
  // FP8: the forward, input-gradient and weight-gradient products of a
  // block's weights all run on FP8 operands (Transformer Engine's fprop,
  // dgrad and wgrad GEMMs).
  const GemmRates& wg = c.fp8_products && r.fp8 != Fp8Recipe::kNone ? r.fp8_gemm : g;
  auto weight_gemm = [&](const Gemm& product) { return kernel(TimeGemm(wg, product).seconds); };
  for (size_t i = 0; i < c.weight_products.size(); ++i) {
    const Gemm f = AtMicrobatch(c.weight_products[i], b);
    s.forward += weight_gemm(f);
    input_grad += weight_gemm(Gemm{f.m, f.k, f.n, 1});
    s.weight += weight_gemm(Gemm{f.k, f.n, f.m, 1});
  }
  for (const ProductShape& p : c.op_rerun_products) s.op += weight_gemm(AtMicrobatch(p, b));
  double core_forward = 0, core_backward = 0;
  for (const ProductShape& p : c.core_products) {
    const Gemm f = AtMicrobatch(p, b);
    core_forward += gemm(f);
    core_backward += gemm(Gemm{f.m, f.k, f.n, f.batch}) + gemm(Gemm{f.k, f.n, f.m, f.batch});
  }
  for (const MemoryKernel& k : c.core_kernels) core_forward += memory(k);
  if (c.flash_flops > 0) {
    // Causal: the kernel skips the blocks above the diagonal, half the FLOPs.
    const double flops = b * c.flash_flops * kCausalShare;
    core_forward += kernel(flops / r.flash.forward_flops_per_s);
    core_backward += kernel(kFlashBackwardOverForward * flops / r.flash.backward_flops_per_s);
  }
  s.forward += core_forward;
  for (const MemoryKernel& k : c.forward_kernels) {
    s.forward += memory(k);
    s.op += memory(k);  // every element-wise forward kernel is rerun
  }
  double other_backward = 0;
  for (const MemoryKernel& k : c.backward_kernels) {
    (k.weight_gradient ? s.weight : other_backward) += memory(k);
  }
  s.backward = input_grad + s.weight + core_backward + other_backward;
  if (c.attention_core_flops > 0) s.core = core_forward;
  return s;
}

Result<LayerProfile> ProfileAt(const std::string& name, const SampleCost& c, const Rates& r,
                               int b) {
  const LayerSeconds sec =
      r.model == TimeModel::kFlat ? FlatSeconds(c, r, b) : MatmulSeconds(c, r, b);
  const double backward_ns = sec.backward * 1e9;
  const double activation = b * c.activation_bytes + c.fixed_activation_bytes;
  const double output = b * c.output_bytes;
  if (backward_ns > kMaxFileTimeNs) {
    return OverLimit(name, b, "backward ns", backward_ns, "1e12 us");
  }
  if (activation > kMaxFileBytes) return OverLimit(name, b, "activation bytes", activation, "2^50");
  if (output > kMaxFileBytes) return OverLimit(name, b, "output bytes", output, "2^50");
  LayerProfile p;
  p.microbatch_size = b;
  p.forward_ns = std::llround(sec.forward * 1e9);
  p.backward_ns = std::llround(backward_ns);
  p.backward_weight_ns = std::min<TimeNs>(p.backward_ns, std::llround(sec.weight * 1e9));
  p.activation_bytes = std::llround(activation);
  p.output_bytes = std::llround(output);
  p.workspace_bytes = c.workspace_bytes + std::llround(b * c.workspace_bytes_per_sample);
  p.checkpoint_bytes = std::min<Bytes>(p.activation_bytes, std::llround(b * c.checkpoint_bytes));
  p.attention_core_bytes = std::llround(b * c.attention_core_bytes);
  // The core's products and its element-wise traffic (written once, read
  // once); absent (0) where there is no core to rerun.
  if (c.attention_core_flops > 0) {
    p.attention_core_ns = std::min<TimeNs>(p.forward_ns, std::llround(sec.core * 1e9));
  }
  p.weight_grad_bytes = std::llround(b * c.weight_grad_bytes);
  // Layers the per-op policy does not wrap (embedding, head) keep everything
  // and rerun nothing.
  p.op_saved_bytes = p.activation_bytes;
  p.op_recompute_ns = 0;
  if (c.op_wrapped) {
    p.op_saved_bytes = std::min<Bytes>(p.activation_bytes, std::llround(b * c.op_saved_bytes));
    p.op_recompute_ns = std::min<TimeNs>(p.forward_ns, std::llround(sec.op * 1e9));
  }
  return p;
}

// REQUIRES: `sizes` sorted and unique.
Result<Layer> ToLayer(std::string name, const SampleCost& c, const Rates& r,
                      const std::vector<int>& sizes) {
  Layer layer;
  layer.name = std::move(name);
  layer.parameters = c.parameters;
  layer.forward_flops = c.layer_flops;
  if (c.parameters > kMaxFileParameters || *layer.forward_flops > kMaxFileFlops) {
    return Status::FailedPrecondition(fmt::format(
        "{}: {} parameters and {:.4g} forward FLOPs per sample; model.json holds at most 2^50 "
        "and 1e24: check --hidden, --ffn-hidden, --seq and --vocab",
        layer.name, c.parameters, *layer.forward_flops));
  }
  for (int b : sizes) {
    Result<LayerProfile> p = ProfileAt(layer.name, c, r, b);
    if (!p.ok()) return p.status();
    layer.profiles.push_back(*p);
  }
  return layer;
}

// The time and memory model covers dense MLPs only: an expert block's cost
// depends on routing, expert parallelism and the all-to-all, which are issue
// 26's (mixture of experts). Refusing beats writing a wrong number.
Status CheckDenseOnly(const TransformerSpec& spec) {
  const MoeSpec& moe = spec.moe;
  const int moe_blocks = moe.MoeBlocks(spec.layers);
  if (moe_blocks == 0) return Status::Ok();
  const ParameterCount count = CountParameters(spec);
  return Status::FailedPrecondition(fmt::format(
      "{} has mixture-of-experts MLPs ({} experts, top {}, in {} of {} blocks): the analytic "
      "time and memory model does not cover expert layers yet; expert parallelism, routing and "
      "the all-to-all are issue 26 (mixture of experts). Its parameters are counted: {:.3f}B "
      "total, {:.3f}B active per token (profiler analytic --describe prints them by layer)",
      spec.name, moe.experts, moe.experts_per_token, moe_blocks, spec.layers, count.total / 1e9,
      count.active / 1e9));
}

Status ValidateTensorParallel(const TransformerSpec& spec, const TensorParallelism& tp) {
  const int t = tp.degree;
  if (t < 1) {
    return Status::InvalidArgument(
        fmt::format("--tensor-parallel {} must be at least 1 (GPUs per tensor-parallel group)", t));
  }
  if (tp.sequence_parallel && t == 1) {
    return Status::InvalidArgument(
        "sequence parallelism needs --tensor-parallel above 1: it splits the tokens over the "
        "tensor-parallel group");
  }
  auto divides = [&](int value, const char* flag, const char* what) -> Status {
    if (value % t == 0) return Status::Ok();
    return Status::InvalidArgument(fmt::format(
        "--tensor-parallel {} does not divide {} {}: each GPU needs a whole share of the {}", t,
        flag, value, what));
  };
  PIPECAST_RETURN_IF_ERROR(divides(spec.heads, "--heads", "attention heads"));
  PIPECAST_RETURN_IF_ERROR(divides(spec.KvHeads(), "--kv-heads", "key/value heads"));
  return divides(spec.FfnHidden(), "--ffn-hidden", "MLP width");
}

Result<GpuSpec> LoadGpu(const std::string& spec, std::string* device) {
  Result<Cluster> cluster = LoadCluster(spec);
  if (!cluster.ok()) return cluster.status().WithPrefix("--gpu");
  const GpuSpec& gpu = cluster->gpu;
  if (gpu.peak_tflops <= 0 || gpu.memory_bandwidth_gbps <= 0) {
    return Status::FailedPrecondition(fmt::format(
        "--gpu {}: the GPU '{}' has no {}; the analytic estimate needs peak_tflops and "
        "memory_bandwidth_gbps: use a100-80gb, h100-sxm or h200, or a cluster file that sets both",
        spec, gpu.name, gpu.peak_tflops <= 0 ? "peak_tflops" : "memory_bandwidth_gbps"));
  }
  *device = cluster->name;
  return gpu;
}

const char* DtypeName(int bytes_per_element) {
  switch (bytes_per_element) {
    case 1:
      return "fp8";
    case 4:
      return "fp32";
    default:
      return "bf16";
  }
}

// The assumption strings of `source`, worded for the variant in use.
std::map<std::string, std::string> Formulas(const TransformerSpec& spec,
                                            const AnalyticOptions& options) {
  const Attention attention = options.attention;
  const std::string mlp_params = spec.gated_mlp ? "3*h*f + 2*f + h (SwiGLU gate, up and down "
                                                  "matrices; biases counted though LLaMA has "
                                                  "none: under 0.01% of the block)"
                                                : "2*h*f + f + h (two matrices with biases)";
  const std::string mlp_flops = spec.gated_mlp ? "3*h*f" : "2*h*f";
  const std::string mlp_bytes = spec.gated_mlp ? "B*(h + 2*f + f) + h [MLP: fc1 input, gate and "
                                                 "up outputs, down-projection input; mask]"
                                               : "B*(h + f + f) + h [MLP: fc1 input, GeLU input, "
                                                 "fc2 input; mask]";
  std::map<std::string, std::string> formulas;
  formulas["symbols"] =
      "s sequence length, b micro-batch size, h hidden, a heads, h_kv = kv_heads*h/a, f ffn "
      "hidden, V vocabulary, B bytes per element";
  formulas["parameter_formula"] =
      "block = h*(h + 2*h_kv) + (h + 2*h_kv) + h^2 + h [QKV and output projections with "
      "biases] + " +
      mlp_params +
      " + 4*h [two layernorms]; = 12*h^2 + 13*h for f = 4*h, h_kv = h, as in Narayanan et al., "
      "SC'21, sec. 5.1 (P = 12*l*h^2*(1 + 13/(12*h) + (V + s)/(12*l*h)) for the whole model)";
  formulas["flops_formula"] =
      "forward, per sample (Narayanan et al., 'Efficient Large-Scale Language Model Training on "
      "GPU Clusters Using Megatron-LM', SC'21, appendix 'Floating-point operations': "
      "24*s*h^2 + 4*s^2*h per block, generalised to f and h_kv): block 2*s*(2*h^2 + 2*h*h_kv + " +
      mlp_flops +
      ") [products with a weight] + 4*s^2*h [scores Q*K^T and scores*V, full s x s, no causal "
      "saving]; lm_head 2*s*h*V; embedding 0 (a gather). Backward = 2 x forward; its "
      "weight-gradient part (backward_weight_us) = the forward products with a weight, the "
      "input-gradient part is the rest";
  const std::string kept_by_blocks =
      "s*b*(B*(3*h + 2*h_kv) + h [attention: QKV input, Q, K, V, projection input; 1-byte "
      "dropout mask] + " +
      mlp_bytes + " + 2*B*h [two layernorm inputs])";
  if (attention == Attention::kEager) {
    formulas["activation_formula"] =
        "block, bytes kept per micro-batch, eager attention (Korthikanti et al., 'Reducing "
        "Activation Recomputation in Large Transformer Models', 2022, sec. 4.1 and Table 2: "
        "s*b*h*(34 + 5*a*s/h) for 16-bit, f = 4*h, no tensor or sequence parallelism, no "
        "recomputation, dropout on, attention scores materialised), generalised to B, f and "
        "h_kv: " +
        kept_by_blocks +
        " + (2*B + 1)*a*s^2*b [softmax output, its dropout mask and dropout output]; "
        "output_bytes = B*s*b*h";
    formulas["attention_core_formula"] =
        "attention_core_bytes = (2*B + 1)*a*s^2*b (the s x s tensors selective recomputation "
        "drops: 5*a*s^2*b for 16-bit, Korthikanti et al. 2022, sec. 5 and Table 2); "
        "attention_core_us = the forward of the core: its products (Q*K^T and scores*V) and "
        "its softmax and dropout kernels";
  } else {
    formulas["activation_formula"] =
        "block, bytes kept per micro-batch, FlashAttention (Korthikanti et al. 2022, sec. 4.1, "
        "without the 5*a*s^2*b of the s x s softmax output, dropout mask and dropout output, "
        "which FlashAttention recomputes in its backward; plus what it saves for the backward "
        "besides Q, K, V and the output: the fp32 logsumexp of each query row and head, "
        "softmax_lse [b, a, s] float32, and a 2 x int64 RNG state, per "
        "Dao-AILab/flash-attention flash_attn_interface.py ctx.save_for_backward and "
        "FlashAttention-2 sec. 3.1.1): s*b*h*34 + 4*a*s*b + 16 for 16-bit, f = 4*h; "
        "generalised to B, f and h_kv: " +
        kept_by_blocks + " + 4*a*s*b [logsumexp] + 16 [RNG state]; output_bytes = B*s*b*h";
    formulas["attention_core_formula"] =
        "attention_core_bytes = 0 and attention_core_us = 0: FlashAttention keeps no s x s "
        "tensors, so selective recomputation has nothing to drop";
  }
  formulas["checkpoint_formula"] =
      "checkpoint_bytes (what full recomputation keeps, Megatron-LM --recompute-granularity full "
      "with one layer per checkpoint; Korthikanti et al. 2022 Table 2: 2*s*b*h per layer for "
      "16-bit): block B*s*b*h (its input); embedding and lm_head are not recomputed, so their "
      "checkpoint_bytes = activation_bytes";
  formulas["op_formula"] =
      "op_saved_bytes and op_recompute_us (per-op recomputation, torchtitan's SelectiveAC 'op' "
      "policy, torchtitan/distributed/activation_checkpoint.py at pytorch/torchtitan@1f02964: "
      "the outputs of matmuls and of the attention kernel are saved, except every second matmul): "
      "block op_saved_bytes = B*s*b*h [its input] + B*s*b*(outputs of the 1st, 3rd, ... matmul "
      "in the order the model calls them, one per projection as torchtitan's models do: q, k, v, "
      "o, gate, up, down (a plain MLP fc1, fc2; MLA q_a, q_b, kv_a, kv_b, o)) + "
      "B*s*b*a*d_v [attention output] + 4*a*s*b [flash logsumexp] or 5*a*s^2*b [eager s x s "
      "tensors]; op_recompute_us = the forward of the 2nd, 4th, ... matmul and of every "
      "element-wise forward kernel (norms, rotary, activation, residual adds, dropout); embedding "
      "and lm_head are not wrapped: op_saved_bytes = activation_bytes, op_recompute_us = 0";
  formulas["weight_grad_formula"] =
      "weight_grad_bytes (what the weight-gradient op W keeps after the input-gradient op, Qi et "
      "al., 'Zero Bubble Pipeline Parallelism', ICLR 2024, Table 1: 32*s*b*h per block for "
      "16-bit, f = 4*h): block s*b*B*(6*h + 2*h_kv + f + fc1 outputs) [inputs of the QKV, "
      "output-projection, fc1 and fc2 products, and the gradients of their outputs]; embedding "
      "= its activation_bytes (its backward is all weight gradient); lm_head s*b*B*(h + V) "
      "[projection input, logits gradient]";
  const std::string elementwise =
      "element-wise bytes / (memory_bandwidth_gbps*1e9*memory_efficiency); forward element-wise "
      "bytes = 2 x activation bytes (each tensor kept for the backward is written once and read "
      "once by a memory-bound kernel: layernorm, GeLU, softmax, dropout, residual add)";
  if (options.time_model == TimeModel::kFlat) {
    formulas["time_formula"] =
        "time model 'flat': time = FLOPs / (peak_tflops*1e12*matmul_efficiency) + " + elementwise +
        "; backward = 2 x forward; linear in b";
  } else {
    formulas["time_formula"] =
        "time model 'matmul' (docs/calibration.md, docs/profiler.md 'Time'): a layer is the "
        "kernels training runs, each at least 7 us (kMinKernelSeconds: one operator's launch and "
        "host cost). Products (QKV [b*s, h + 2*h_kv, h], projection [b*s, h, h], fc1 [b*s, fc1 "
        "outputs, h], fc2 [b*s, h, f], lm_head [b*s, V, h]; eager attention: b*a batched [s, s, "
        "h/a] and [s, h/a, s]) take gemm(m, n, k) = max(waves * 2*128*256*(k + 128) / "
        "(peak/SMs * mainloop_efficiency), B*(m*k + k*n + m*n) / HBM rate), waves = ceil(tiles "
        "/ SMs), tiles = ceil(m/128)*ceil(n/256) (or the transposed tiling, whichever has fewer "
        "waves); the backward has per product the input gradient gemm(m, k, n) and the weight "
        "gradient gemm(k, n, m). FlashAttention (causal: half of 4*s^2*h per sample forward, "
        "2.5x that backward) runs at its published TFLOP/s for s and h/a (attention_kernel). "
        "Memory-bound kernels move their bytes at memory_bandwidth_gbps*1e9*memory_efficiency: "
        "forward two norms (read, write), two residual adds with dropout (read 2, write 1 and a "
        "1-byte mask), the activation (GeLU read f, write f; SwiGLU read 2f, write f), rotary on "
        "Q and K without learned positions, eager attention's softmax and its dropout; backward "
        "their gradients (norm: read 2, write 1; activation: GeLU 3f, SwiGLU 5f; dropout: read "
        "2, write 1; the two branches' gradients added), the bias gradients of a GPT block "
        "(reductions over the tokens, part of the weight gradient), FlashAttention's dO*O row "
        "sums; embedding: gather and dropout forward, dropout and the table gradient backward "
        "(8*s*b + tables*s*b*h*B, plus 2*V*h*B per call); lm_head: the final norm and the "
        "cross-entropy (read the logits, write the fp32 softmax; backward read it, write the "
        "logits' gradient). backward_weight_us: the weight-gradient products and kernels. Not "
        "linear in b: larger micro-batches fill the SMs better";
  }
  formulas["embedding_formula"] =
      std::string("parameters V*h") + (spec.learned_positions ? " + s*h (learned positions)" : "") +
      "; FLOPs 0; forward traffic: 8*s*b bytes of int64 token ids, one B-byte row per token from "
      "each table, their sum written, dropout (read, write, 1-byte mask); activation = 8*s*b "
      "(token ids) + s*b*h (dropout mask); output_bytes = B*s*b*h; backward = 2 x forward, all "
      "of it weight gradient (token ids have no gradient)";
  formulas["lm_head_formula"] =
      std::string("final layernorm 2*h parameters + projection ") +
      (spec.tied_embeddings ? "0 (tied: the token table is counted in the embedding)" : "V*h") +
      "; forward FLOPs 2*s*h*V per sample; activation = s*b*(2*B*h [layernorm and projection "
      "inputs] + B*V [logits] + 4*V [fp32 softmax the cross-entropy loss keeps]); output_bytes "
      "0 (last layer)";
  formulas["workspace_formula"] =
      "32 MiB cuBLAS workspace on every block and on lm_head (what the cuBLAS documentation, "
      "cublasSetWorkspace, recommends for Hopper; 4 MiB would do before Hopper); 0 on the "
      "embedding";
  if (std::optional<ShapeFormulaText> text = ShapeFormulas(spec)) {
    formulas["parameter_formula"] = text->parameters;
    formulas["flops_formula"] = text->flops;
    formulas["activation_formula"] += text->activation_note;
  }
  return formulas;
}

// JSON text of a value, as ModelSource::details holds it.
std::string JsonText(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

ModelSource MakeSource(const TransformerSpec& spec, const AnalyticOptions& options,
                       const GpuSpec& gpu, std::string device, const Rates& rates) {
  const GemmPreset& preset = rates.gemm.preset;
  ModelSource source;
  source.method = "analytic";
  source.device = std::move(device);
  for (auto& [key, text] : Formulas(spec, options)) {
    source.details[key] = JsonText(text);
  }
  source.details["attention"] = JsonText(AttentionName(options.attention));
  if (options.loss != Loss::kFused) {
    source.details["loss"] = JsonText(
        "pytorch: cross_entropy(logits.float()); lm_head keeps s*b*4*V/t [fp32 log-softmax], "
        "not the bf16 logits, and holds 2 x s*b*4*V/t more at its backward's start [nll_loss's "
        "gradient and log_softmax's] as its workspace_bytes");
  }
  const json limitations = {
      "an estimate from datasheet numbers, not a measurement; measure on the GPU when one is "
      "available (profiler cupti, planned)",
      options.time_model == TimeModel::kFlat
          ? "time model 'flat': linear in the micro-batch size; small micro-batches run below "
            "matmul_efficiency on real GPUs"
          : "time model 'matmul': calibrated against published measurements (docs/calibration.md: "
            "GEMM and FlashAttention benchmarks, MosaicML llm-foundry's MPT runs); fused kernels "
            "beyond FlashAttention and bias epilogues (fused norms, Transformer Engine) are not "
            "modelled",
      "profiles without tensor_parallel are for one GPU per stage (t = 1); profiler analytic "
      "--tensor-parallel adds per-GPU profiles for t > 1 (source.tensor_parallel); no context "
      "parallelism; recomputation and split-backward memory are given per layer (checkpoint_bytes, "
      "attention_core_bytes, weight_grad_bytes) for "
      "the simulator to apply",
      "communication and the optimizer step are not in the per-layer times",
      "tied embeddings: Megatron-LM with pipeline parallelism keeps a copy of the table on the "
      "last stage; this file counts the table once, in the embedding"};
  source.details["architecture"] = ArchitectureJson(spec);
  if (!spec.from.empty()) source.details["architecture_from"] = JsonText(spec.from);
  source.architecture =
      ModelArchitecture{spec.hidden, spec.sequence_length, spec.heads, spec.KvHeads()};
  source.details["limitations"] = JsonText(limitations);
  source.details["gpu"] = JsonText(gpu.name);
  source.details["peak_tflops"] = JsonText(gpu.peak_tflops);
  source.details["memory_bandwidth_gbps"] = JsonText(gpu.memory_bandwidth_gbps);
  source.details["time_model"] = JsonText(TimeModelName(options.time_model));
  if (options.time_model == TimeModel::kFlat) {
    source.details["matmul_efficiency"] = JsonText(options.matmul_efficiency);
  } else {
    source.details["gemm_table"] =
        JsonText(json{{"gpu", preset.gpu},
                      {"sms", preset.sms},
                      {"tile", {kTileRows, kTileCols}},
                      {"tile_overhead_k", kTileOverheadK},
                      {"mainloop_efficiency", preset.mainloop_efficiency},
                      {"source", preset.source}});
    source.details["min_kernel_us"] = JsonText(std::llround(kMinKernelSeconds * 1e9) / 1e3);
    if (options.attention != Attention::kEager) {
      source.details["attention_kernel"] =
          JsonText(json{{"kernel", AttentionName(options.attention)},
                        {"causal", true},
                        {"head_dim", AttentionHeadSize(spec)},
                        {"forward_tflops", rates.flash.forward_flops_per_s / 1e12},
                        {"backward_tflops", rates.flash.backward_flops_per_s / 1e12},
                        {"table", rates.flash.table},
                        {"source",
                         "published benchmark figures, interpolated in s and head size "
                         "(docs/calibration.md 'Attention')"}});
    }
  }
  source.details["memory_efficiency"] = JsonText(options.memory_efficiency);
  source.details["bytes_per_element"] = JsonText(options.bytes_per_element);
  if (options.fp8 != Fp8Recipe::kNone) {  // FP8 estimates only: bf16 files stay as they were
    const GemmPreset& fp8 = rates.fp8_gemm.preset;
    source.details["precision"] = JsonText("fp8");
    source.details["fp8_recipe"] = JsonText(Fp8RecipeName(options.fp8));
    source.details["fp8"] = JsonText(
        json{{"recipe", Fp8RecipeName(options.fp8)},
             {"fp8_ops",
              "the blocks' weight products (QKV, output projection, MLP): forward, input gradient "
              "and weight gradient"},
             {"bf16_ops",
              "attention (FlashAttention), norms, activation, embedding, output head and loss, as "
              "Transformer Engine and torchao keep them"},
             {"peak_fp8_tflops", gpu.peak_fp8_tflops},
             {"mainloop_efficiency", fp8.mainloop_efficiency},
             {"source", fp8.source},
             {"quantisation",
              "per product a cast of its input (forward) and of its output's gradient (backward), "
              "memory-bound: read bf16, write FP8 and its transpose with scales; current scaling "
              "adds an amax pass; the weights' casts run once per step (the simulator's optimizer "
              "step)"},
             {"kept_for_backward",
              "the products' FP8 inputs (1 byte per element plus scales) instead of bf16"}});
  }
  source.details["workspace_bytes"] = JsonText(kMatmulWorkspaceBytes);
  return source;
}

}  // namespace

const char* TimeModelName(TimeModel model) { return model == TimeModel::kFlat ? "flat" : "matmul"; }

const char* AttentionName(Attention attention) {
  switch (attention) {
    case Attention::kEager:
      return "eager";
    case Attention::kFlash3:
      return "flash3";
    case Attention::kTriton:
      return "triton";
    default:
      return "flash2";
  }
}

Result<Attention> ParseAttention(const std::string& name) {
  if (name == "flash" || name == "flash2") return Attention::kFlash2;
  if (name == "flash3") return Attention::kFlash3;
  if (name == "triton") return Attention::kTriton;
  if (name == "eager") return Attention::kEager;
  return Status::InvalidArgument(
      fmt::format("--attention {}: use flash2 (FlashAttention-2; also 'flash'), flash3 "
                  "(FlashAttention-3, Hopper), triton (FlashAttention's Triton kernel, as "
                  "llm-foundry ran it) or eager",
                  name));
}

const char* LossName(Loss loss) { return loss == Loss::kPytorch ? "pytorch" : "fused"; }

Result<Loss> ParseLoss(const std::string& name) {
  for (Loss l : {Loss::kFused, Loss::kPytorch}) {
    if (name == LossName(l)) return l;
  }
  return Status::InvalidArgument(fmt::format(
      "--loss is '{}': expected fused (Megatron-LM's vocabulary-parallel cross-entropy, the "
      "default) or pytorch (torch.nn.functional.cross_entropy on fp32 logits, as torchtitan runs "
      "it)",
      name));
}

Status AnalyticOptions::Validate() const {
  if (gpu_preset.empty()) {
    return Status::InvalidArgument("--gpu is empty; name a preset such as h100-sxm or a file");
  }
  if (!(matmul_efficiency > 0 && matmul_efficiency <= 1)) {
    return Status::InvalidArgument(
        fmt::format("--matmul-efficiency {} must be in (0, 1]: the share of peak TFLOP/s reached",
                    matmul_efficiency));
  }
  if (!(memory_efficiency > 0 && memory_efficiency <= 1)) {
    return Status::InvalidArgument(
        fmt::format("--memory-efficiency {} must be in (0, 1]: the share of HBM bandwidth reached",
                    memory_efficiency));
  }
  if (fp8 != Fp8Recipe::kNone && time_model == TimeModel::kFlat) {
    return Status::InvalidArgument(
        "--precision fp8 needs --time-model matmul: the flat model has one rate for every FLOP");
  }
  if (fp8 != Fp8Recipe::kNone && bytes_per_element != 2) {
    return Status::InvalidArgument(fmt::format(
        "--precision fp8 with --bytes-per-element {}: FP8 training keeps bf16 outside the weight "
        "products; leave --bytes-per-element at 2",
        bytes_per_element));
  }
  if (bytes_per_element != 1 && bytes_per_element != 2 && bytes_per_element != 4) {
    return Status::InvalidArgument(fmt::format(
        "--bytes-per-element {} must be 1 (fp8), 2 (bf16) or 4 (fp32)", bytes_per_element));
  }
  return Status::Ok();
}

Result<Model> EstimateTransformer(const TransformerSpec& spec, const AnalyticOptions& options) {
  return EstimateTransformerAt(spec, options, TensorParallelism{});
}

Result<Model> EstimateTransformerAt(const TransformerSpec& spec, const AnalyticOptions& options,
                                    const TensorParallelism& tp,
                                    std::vector<TensorParallelCost>* costs) {
  PIPECAST_RETURN_IF_ERROR(spec.Validate());
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  PIPECAST_RETURN_IF_ERROR(ValidateTensorParallel(spec, tp));
  PIPECAST_RETURN_IF_ERROR(CheckDenseOnly(spec));
  std::string device;
  Result<GpuSpec> gpu = LoadGpu(options.gpu_preset, &device);
  if (!gpu.ok()) return gpu.status();
  const double bytes_per_s = gpu->memory_bandwidth_gbps * 1e9 * options.memory_efficiency;
  Rates rates{.flops_per_s = gpu->peak_tflops * 1e12 * options.matmul_efficiency,
              .bytes_per_s = bytes_per_s,
              .model = options.time_model,
              .gemm = GemmRates{.peak_flops_per_s = gpu->peak_tflops * 1e12,
                                .hbm_bytes_per_s = bytes_per_s,
                                .element_bytes = static_cast<double>(options.bytes_per_element),
                                .preset = GemmPresetFor(*gpu)},
              .fp8_gemm = {},
              .fp8 = options.fp8,
              .flash = {}};
  if (options.fp8 != Fp8Recipe::kNone) {
    // LoadGpu has checked the bf16 peak, so a GPU without an FP8 peak is refused here.
    PIPECAST_RETURN_IF_ERROR(CheckFp8Support(options.fp8, *gpu));
    rates.fp8_gemm = GemmRates{.peak_flops_per_s = gpu->peak_fp8_tflops * 1e12,
                               .hbm_bytes_per_s = bytes_per_s,
                               .element_bytes = kFp8ElementBytes,
                               .preset = Fp8GemmPresetFor(*gpu)};
  }
  if (options.attention != Attention::kEager) {
    Result<FlashRates> flash =
        FlashRatesFor(*gpu, FlashKernelOf(options.attention), spec.sequence_length,
                      AttentionHeadSize(spec), /*causal=*/true);
    if (!flash.ok()) return flash.status();
    rates.flash = *flash;
  }
  const Dims dims{.s = static_cast<double>(spec.sequence_length),
                  .h = static_cast<double>(spec.hidden),
                  .v = static_cast<double>(spec.vocab),
                  .e = static_cast<double>(options.bytes_per_element)};
  const Split split{.t = static_cast<double>(tp.degree), .sp = tp.sequence_parallel};
  std::vector<int> sizes = spec.microbatch_sizes;
  std::sort(sizes.begin(), sizes.end());

  Model model;
  model.name = spec.name;
  model.source = MakeSource(spec, options, *gpu, device, rates);
  model.dtype = DtypeName(options.bytes_per_element);
  model.sequence_length = spec.sequence_length;
  if (spec.global_batch > 0) model.global_batch = spec.global_batch;

  const ModelShapes shapes = ShapesOf(spec, tp.degree);
  const ModelShapes whole = tp.degree == 1 ? shapes : ShapesOf(spec, 1);
  const SampleCost embedding_cost = EmbeddingCost(spec, shapes.embedding, dims, split);
  const SampleCost head_cost = HeadCost(shapes.head, dims, split, options.loss);
  Result<Layer> embedding = ToLayer("embedding", embedding_cost, rates, sizes);
  if (!embedding.ok()) return embedding.status();
  model.layers.push_back(std::move(*embedding));
  // Blocks of one kind (window, experts) have the same cost: estimate each
  // kind once.
  std::vector<SampleCost> kind_costs;
  std::vector<Layer> kind_layers;
  for (size_t k = 0; k < shapes.block_kinds.size(); ++k) {
    kind_costs.push_back(BlockCost(spec, shapes.block_kinds[k], whole.block_kinds[k], dims,
                                   options.attention, split, options.fp8));
    Result<Layer> block = ToLayer("block.0", kind_costs.back(), rates, sizes);
    if (!block.ok()) return block.status();
    kind_layers.push_back(std::move(*block));
  }
  for (int i = 0; i < spec.layers; ++i) {
    model.layers.push_back(kind_layers[shapes.kind_of_block[i]]);
    model.layers.back().name = fmt::format("block.{}", i);
  }
  Result<Layer> head = ToLayer("lm_head", head_cost, rates, sizes);
  if (!head.ok()) return head.status();
  model.layers.push_back(std::move(*head));
  if (costs != nullptr) {
    costs->clear();
    auto cost = [](const SampleCost& c) {
      TensorParallelCost out = c.tp;
      out.parameters = c.parameters;
      return out;
    };
    costs->push_back(cost(embedding_cost));
    for (int i = 0; i < spec.layers; ++i)
      costs->push_back(cost(kind_costs[shapes.kind_of_block[i]]));
    costs->push_back(cost(head_cost));
  }

  double flops = 0;
  for (const Layer& layer : model.layers) flops += layer.forward_flops.value_or(0);
  if (flops > kMaxFileFlops) {
    return Status::FailedPrecondition(fmt::format(
        "forward FLOPs per sample {:.4g} are over the 1e24 model.json can hold; check --layers",
        flops));
  }
  model.flops_per_sample = flops;
  return model;
}

}  // namespace pipecast
