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
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "formats/formats.h"
#include "profiler/attention_rates.h"
#include "profiler/matmul_model.h"
#include "sim/cluster.h"

namespace pipecast {
namespace {

using json = nlohmann::json;

// Upper bounds on the architecture, far past any real model: they keep int
// arithmetic (4 * hidden) exact and the layer list a sane size.
constexpr int kMaxLayers = 100'000;
constexpr int kMaxWidth = 1 << 20;           // hidden, ffn_hidden
constexpr int kMaxVocab = 1 << 24;           // 16.7M tokens, 65x the largest LLM vocabularies
constexpr int kMaxSequenceLength = 1 << 24;  // 16.7M tokens per sample
constexpr int kMaxMicrobatchSize = 1 << 20;  // model.json's own limit (formats/formats.cc)

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
  double s;             // sequence length
  double h;             // hidden
  double a;             // attention heads
  double hkv;           // key/value width: kv_heads * h / a
  double f;             // MLP width
  double v;             // vocabulary
  double e;             // bytes per element (B)
  double mlp_matrices;  // 2, or 3 for a gated (SwiGLU) MLP
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
  double traffic_bytes = 0;           // forward element-wise HBM traffic
  double output_bytes = 0;            // sent to the next layer
  Bytes workspace_bytes = 0;
  bool has_input_gradient = true;             // false: the whole backward is weight gradient
  std::vector<ProductShape> weight_products;  // forward products with a weight
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

Status CheckRange(const char* flag, int64_t value, int64_t min, int64_t max, const char* about) {
  if (value < min) {
    return Status::InvalidArgument(
        fmt::format("{} {} must be at least {} ({})", flag, value, min, about));
  }
  if (value > max) {
    return Status::InvalidArgument(
        fmt::format("{} {} is over the limit of {} ({})", flag, value, max, about));
  }
  return Status::Ok();
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

// Rows of a vocabulary-parallel table on one GPU: V/t rounded up (Megatron-LM
// pads the vocabulary to a multiple of t).
int64_t VocabRows(const TransformerSpec& spec, int t) { return (int64_t{spec.vocab} + t - 1) / t; }

SampleCost EmbeddingCost(const TransformerSpec& spec, const Dims& d, const Split& x) {
  const double tables = spec.learned_positions ? 2 : 1;
  const int t = static_cast<int>(x.t);
  SampleCost c;
  // Vocabulary-parallel token table; the position table is replicated.
  c.parameters = VocabRows(spec, t) * spec.hidden +
                 (spec.learned_positions ? int64_t{spec.sequence_length} * spec.hidden : 0);
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
  const double table_bytes =
      (static_cast<double>(VocabRows(spec, t)) * d.h + (spec.learned_positions ? d.s * d.h : 0)) *
      d.e;
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

// The memory-bound kernels of a block, per sample on one GPU of the group
// (docs/profiler.md, "Time"). Full-width tensors (norms, residual adds,
// dropout) are replicated over the group, or 1/t of the tokens with sequence
// parallelism; the attention and MLP insides are split over t. GPT-style
// blocks (a plain MLP) have LayerNorm, GeLU and biases; LLaMA-style ones (a
// gated MLP) RMSNorm, SwiGLU and no biases (the norms move the same bytes);
// rotary positions add a kernel on Q and K in each direction.
void AddBlockKernels(const TransformerSpec& spec, const Dims& d, bool flash, const Split& x,
                     SampleCost* c) {
  const double full = x.Replicated() * d.s * d.h * d.e;  // one full-width tensor
  const double mask = x.Replicated() * d.s * d.h * kMaskBytes;
  const double e_split = d.s * d.e / x.t;  // bytes per split column
  const bool biases = !spec.gated_mlp;
  const double norm = 2 * full;                     // read x, write y
  const double norm_backward = 3 * full;            // read x and dy, write dx
  const double residual_dropout = 3 * full + mask;  // read two, write one and the mask
  const double dropout_backward = 2 * full + mask;  // read dy and the mask, write dx
  const double residual_backward = 3 * full;        // add the two branches' gradients
  const double activation =
      spec.gated_mlp ? 3 * d.f * e_split : 2 * d.f * e_split;  // SwiGLU: gate, up -> out
  const double activation_backward = spec.gated_mlp ? 5 * d.f * e_split : 3 * d.f * e_split;
  const double rotary = spec.learned_positions ? 0 : 2 * (d.h + d.hkv) * e_split;
  c->forward_kernels = {{norm}, {residual_dropout}, {norm}, {activation}, {residual_dropout}};
  if (rotary > 0) c->forward_kernels.push_back({rotary});
  c->backward_kernels = {{dropout_backward},  {activation_backward}, {norm_backward},
                         {residual_backward}, {dropout_backward},    {norm_backward},
                         {residual_backward}};
  if (rotary > 0) c->backward_kernels.push_back({rotary});
  if (biases) {  // the bias gradients: a reduction over the tokens of each output gradient
    for (double bytes : {full, d.f * e_split, full, (d.h + 2 * d.hkv) * e_split}) {
      c->backward_kernels.push_back({.bytes_per_sample = bytes, .weight_gradient = true});
    }
  }
  if (flash) {
    // The backward's first kernel: the row sums of dO * O.
    c->backward_kernels.push_back({2 * d.h * e_split});
    return;
  }
  // Eager attention: scaled, masked softmax of the scores and its dropout,
  // a/t heads of s x s; their backward.
  const double scores = d.a * d.s * d.s / x.t;
  c->core_kernels = {{2 * scores * d.e}, {scores * (2 * d.e + kMaskBytes)}};
  c->backward_kernels.push_back({scores * (2 * d.e + kMaskBytes)});
  c->backward_kernels.push_back({3 * scores * d.e});
}

SampleCost BlockCost(const TransformerSpec& spec, const Dims& d, Attention kind, const Split& x) {
  const int64_t h = spec.hidden;
  const int64_t f = spec.FfnHidden();
  const int64_t t = static_cast<int64_t>(x.t);
  const int64_t hkv = int64_t{spec.KvHeads()} * (h / spec.heads);
  // Column-parallel QKV and fc1 (weights and biases split), row-parallel
  // projection and fc2 (weights split, biases replicated), layernorms
  // replicated (Megatron-LM ColumnParallelLinear / RowParallelLinear).
  const int64_t split_attention = h * (h + 2 * hkv) + (h + 2 * hkv) + h * h;
  const int64_t split_mlp = spec.gated_mlp ? 3 * h * f + 2 * f : 2 * h * f + f;
  SampleCost c;
  c.parameters = (split_attention + split_mlp) / t + h + h + 4 * h;
  const double fc1_outputs = spec.gated_mlp ? 2 * d.f : d.f;
  c.weight_products = {{d.s, (d.h + 2 * d.hkv) / x.t, d.h},  // QKV
                       {d.s, d.h, d.h / x.t},                // attention output projection
                       {d.s, fc1_outputs / x.t, d.h},        // fc1 (gate and up for SwiGLU)
                       {d.s, d.h, d.f / x.t}};               // fc2
  c.weight_flops = 2 * d.s * (2 * d.h * d.h + 2 * d.h * d.hkv + d.mlp_matrices * d.h * d.f) / x.t;
  c.other_flops = 4 * d.s * d.s * d.h / x.t;
  c.layer_flops = c.weight_flops * x.t + c.other_flops * x.t;
  const bool flash = kind != Attention::kEager;
  const double head_dim = d.h / d.a;
  if (flash) {
    c.flash_flops = c.other_flops;
  } else {
    c.core_products = {{d.s, d.s, head_dim, d.a / x.t},   // Q*K^T
                       {d.s, head_dim, d.s, d.a / x.t}};  // softmax(.)*V
  }
  // Korthikanti et al. 2022 sec. 4.1-4.2, generalised to B, f, h_kv and
  // SwiGLU: the QKV input, the two layernorm inputs, the fc1 input and the
  // two dropout masks are replicated without sequence parallelism (10sbh
  // for 16-bit); the rest is split over t (24sbh + 5as^2b).
  const double core = (2 * d.e + kMaskBytes) * d.a * d.s * d.s / x.t;
  const double replicated =
      d.s * (d.e * d.h + kMaskBytes * d.h + d.e * d.h + kMaskBytes * d.h + 2 * d.e * d.h);
  const double split = d.s * d.e * (2 * d.h + 2 * d.hkv + fc1_outputs + d.f) / x.t;
  c.activation_bytes =
      x.Replicated() * replicated + split + (flash ? kLogsumexpBytes * d.a * d.s / x.t : core);
  if (flash) c.fixed_activation_bytes = kFlashRngStateBytes;
  c.attention_core_bytes = flash ? 0 : core;
  c.attention_core_flops = flash ? 0 : c.other_flops;
  c.traffic_bytes = kTrafficPerActivationByte * c.activation_bytes;
  AddBlockKernels(spec, d, flash, x, &c);
  c.checkpoint_bytes = x.Replicated() * d.s * d.h * d.e;  // the block input
  // What the weight products' gradients need: their inputs (QKV, output
  // projection, fc1: h each; fc2: f) and the gradients of their outputs
  // (h + 2*h_kv, h, fc1's outputs, h): 32sbh for 16-bit, f = 4h, h_kv = h.
  // The QKV and fc1 inputs and the projection and fc2 output gradients are
  // full-width (replicated, or 1/t of the tokens with sequence parallelism).
  c.weight_grad_bytes =
      d.s * d.e * (x.Replicated() * 4 * d.h + (2 * d.h + 2 * d.hkv + d.f + fc1_outputs) / x.t);
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

SampleCost HeadCost(const TransformerSpec& spec, const Dims& d, const Split& x) {
  const int t = static_cast<int>(x.t);
  const double rows = static_cast<double>(VocabRows(spec, t));
  SampleCost c;
  // Replicated final layernorm; vocabulary-parallel projection.
  c.parameters = 2 * int64_t{spec.hidden} +
                 (spec.tied_embeddings ? 0 : VocabRows(spec, t) * int64_t{spec.hidden});
  c.weight_products = {{d.s, rows, d.h}};
  c.weight_flops = 2 * d.s * d.h * rows;
  c.layer_flops = 2 * d.s * d.h * d.v;
  // Inputs of the final layernorm and of the projection, the logits, and the
  // fp32 softmax the loss keeps for its backward (vocabulary-parallel
  // cross-entropy: each GPU its V/t columns).
  c.activation_bytes =
      d.s * (x.Replicated() * 2 * d.e * d.h + d.e * rows + kLossSoftmaxBytes * rows);
  c.traffic_bytes = kTrafficPerActivationByte * c.activation_bytes;
  // The final norm; the cross-entropy reads the logits and writes the fp32
  // softmax it keeps, and its backward reads that and writes the logits'
  // gradient.
  const double norm = x.Replicated() * d.s * d.h * d.e;
  const double loss = d.s * rows * (d.e + kLossSoftmaxBytes);
  c.forward_kernels = {{2 * norm}, {loss}};
  c.backward_kernels = {{loss}, {3 * norm}};
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
// weight-gradient part of the backward, and the forward of the attention
// core that selective recomputation reruns.
struct LayerSeconds {
  double forward = 0, backward = 0, weight = 0, core = 0;
};

LayerSeconds FlatSeconds(const SampleCost& c, const Rates& r, int b) {
  LayerSeconds s;
  s.forward =
      b * ((c.weight_flops + c.other_flops) / r.flops_per_s + c.traffic_bytes / r.bytes_per_s);
  s.backward = kBackwardOverForward * s.forward;
  s.weight = c.has_input_gradient ? b * c.weight_flops / r.flops_per_s : s.backward;
  s.core = b * (c.attention_core_flops / r.flops_per_s +
                kTrafficPerActivationByte * c.attention_core_bytes / r.bytes_per_s);
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
  for (const ProductShape& p : c.weight_products) {
    const Gemm f = AtMicrobatch(p, b);
    s.forward += gemm(f);
    input_grad += gemm(Gemm{f.m, f.k, f.n, 1});
    s.weight += gemm(Gemm{f.k, f.n, f.m, 1});
  }
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
  for (const MemoryKernel& k : c.forward_kernels) s.forward += memory(k);
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
  p.workspace_bytes = c.workspace_bytes;
  p.checkpoint_bytes = std::min<Bytes>(p.activation_bytes, std::llround(b * c.checkpoint_bytes));
  p.attention_core_bytes = std::llround(b * c.attention_core_bytes);
  // The core's products and its element-wise traffic (written once, read
  // once); absent (0) where there is no core to rerun.
  if (c.attention_core_flops > 0) {
    p.attention_core_ns = std::min<TimeNs>(p.forward_ns, std::llround(sec.core * 1e9));
  }
  p.weight_grad_bytes = std::llround(b * c.weight_grad_bytes);
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
  const json architecture = {{"layers", spec.layers},
                             {"hidden", spec.hidden},
                             {"heads", spec.heads},
                             {"kv_heads", spec.KvHeads()},
                             {"ffn_hidden", spec.FfnHidden()},
                             {"gated_mlp", spec.gated_mlp},
                             {"sequence_length", spec.sequence_length},
                             {"vocab", spec.vocab},
                             {"tied_embeddings", spec.tied_embeddings},
                             {"learned_positions", spec.learned_positions}};
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
  source.details["architecture"] = JsonText(architecture);
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
                        {"head_dim", static_cast<double>(spec.hidden) / spec.heads},
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

Status TransformerSpec::Validate() const {
  if (name.empty()) return Status::InvalidArgument("--name is empty; give the model a name");
  PIPECAST_RETURN_IF_ERROR(CheckRange("--layers", layers, 1, kMaxLayers, "transformer blocks"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--hidden", hidden, 1, kMaxWidth, "the model width"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--heads", heads, 1, hidden, "attention heads"));
  if (hidden % heads != 0) {
    return Status::InvalidArgument(fmt::format(
        "--hidden {} is not divisible by --heads {}: each head needs hidden/heads channels", hidden,
        heads));
  }
  PIPECAST_RETURN_IF_ERROR(
      CheckRange("--kv-heads", kv_heads, 0, heads, "key/value heads; 0 means --heads"));
  if (heads % KvHeads() != 0) {
    return Status::InvalidArgument(fmt::format(
        "--heads {} is not divisible by --kv-heads {}: each key/value head serves a whole group "
        "of query heads",
        heads, kv_heads));
  }
  PIPECAST_RETURN_IF_ERROR(
      CheckRange("--ffn-hidden", ffn_hidden, 0, kMaxWidth, "the MLP width; 0 means 4 x --hidden"));
  PIPECAST_RETURN_IF_ERROR(
      CheckRange("--seq", sequence_length, 1, kMaxSequenceLength, "tokens per sample"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--vocab", vocab, 1, kMaxVocab, "the vocabulary size"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--global-batch", global_batch, 0, int64_t{1} << 30,
                                      "samples per iteration; 0 leaves it out"));
  if (microbatch_sizes.empty()) {
    return Status::InvalidArgument("--microbatch-sizes is empty; give at least one, e.g. 1,2,4,8");
  }
  std::set<int> seen;
  for (int b : microbatch_sizes) {
    if (b < 1 || b > kMaxMicrobatchSize) {
      return Status::InvalidArgument(
          fmt::format("--microbatch-sizes lists {}; sizes are samples per micro-batch, 1 to {}", b,
                      kMaxMicrobatchSize));
    }
    if (!seen.insert(b).second) {
      return Status::InvalidArgument(
          fmt::format("--microbatch-sizes lists {} twice; give each size once", b));
    }
  }
  return Status::Ok();
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
              .flash = {}};
  if (options.attention != Attention::kEager) {
    Result<FlashRates> flash =
        FlashRatesFor(*gpu, FlashKernelOf(options.attention), spec.sequence_length,
                      static_cast<double>(spec.hidden) / spec.heads, /*causal=*/true);
    if (!flash.ok()) return flash.status();
    rates.flash = *flash;
  }
  const Dims dims{.s = static_cast<double>(spec.sequence_length),
                  .h = static_cast<double>(spec.hidden),
                  .a = static_cast<double>(spec.heads),
                  .hkv = static_cast<double>(spec.KvHeads()) * (spec.hidden / spec.heads),
                  .f = static_cast<double>(spec.FfnHidden()),
                  .v = static_cast<double>(spec.vocab),
                  .e = static_cast<double>(options.bytes_per_element),
                  .mlp_matrices = spec.gated_mlp ? 3.0 : 2.0};
  const Split split{.t = static_cast<double>(tp.degree), .sp = tp.sequence_parallel};
  std::vector<int> sizes = spec.microbatch_sizes;
  std::sort(sizes.begin(), sizes.end());

  Model model;
  model.name = spec.name;
  model.source = MakeSource(spec, options, *gpu, device, rates);
  model.dtype = DtypeName(options.bytes_per_element);
  model.sequence_length = spec.sequence_length;
  if (spec.global_batch > 0) model.global_batch = spec.global_batch;

  const SampleCost embedding_cost = EmbeddingCost(spec, dims, split);
  const SampleCost block_cost = BlockCost(spec, dims, options.attention, split);
  const SampleCost head_cost = HeadCost(spec, dims, split);
  Result<Layer> embedding = ToLayer("embedding", embedding_cost, rates, sizes);
  if (!embedding.ok()) return embedding.status();
  model.layers.push_back(std::move(*embedding));
  // Every block has the same cost: estimate it once.
  Result<Layer> block = ToLayer("block.0", block_cost, rates, sizes);
  if (!block.ok()) return block.status();
  for (int i = 0; i < spec.layers; ++i) {
    model.layers.push_back(*block);
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
    costs->insert(costs->end(), spec.layers, cost(block_cost));
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
