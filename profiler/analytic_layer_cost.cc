// The analytic estimate (profiler/analytic.h): one layer's cost for one
// sample on one GPU of a tensor-parallel group (SampleCost, closed forms
// only): the embedding, a block with its memory-bound kernels and FP8 casts,
// and the output head. docs/profiler.md derives every formula.
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

#include "profiler/eager_kernels.h"
#include "profiler/internal/analytic_cost.h"

namespace pipecast::internal {

// The query/key channels of one attention head, which the attention
// kernel's speed depends on: head_dim, hidden / heads, or MLA's nope + rope.
double AttentionHeadSize(const TransformerSpec& spec) {
  if (spec.mla.Enabled()) return spec.mla.qk_nope_head_dim + spec.mla.qk_rope_head_dim;
  if (spec.head_dim > 0) return spec.head_dim;
  return static_cast<double>(spec.hidden) / spec.heads;
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

namespace {

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
KeptWidths WeightGradWidths(const LayerShape& shape, double imbalance) {
  KeptWidths w;
  for (const WeightProduct& p : shape.products) {
    // An MoE block's routed experts keep their inputs and output gradients
    // for each token copy they receive (TokenCopies); a dense product once.
    const double copies = TokenCopies(p, imbalance);
    const double in = static_cast<double>(p.in) * copies;
    const double out = static_cast<double>(p.out) * copies;
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

// The bias gradients' bytes: a reduction over the tokens of each output gradient (f: the
// MLP width a token passes, as AddBlockKernels takes it).
std::vector<double> BiasGradientBytes(const TransformerSpec& spec, const LayerShape& shape,
                                      const Dims& d, const Split& x, double f) {
  const AttentionCore& attention = shape.attention;
  const double q_width = static_cast<double>(attention.query_heads) * attention.qk_dim;
  const double kv_width = static_cast<double>(attention.kv_heads) * attention.qk_dim;
  const double full = x.Replicated() * d.s * d.h * d.e;
  const double e_split = d.s * d.e / x.t;
  std::vector<double> bias_bytes;
  if (ClassicShape(spec)) {
    if (!spec.gated_mlp) bias_bytes = {full, f * e_split, full, (q_width + 2 * kv_width) * e_split};
    return bias_bytes;
  }
  for (const WeightProduct& p : shape.products) {
    if (!p.bias) continue;
    const double out = static_cast<double>(p.out);
    bias_bytes.push_back(p.split == TpSplit::kColumn ? out * e_split
                         : p.split == TpSplit::kRow  ? x.Replicated() * d.s * out * d.e
                                                     : d.s * out * d.e);
  }
  return bias_bytes;
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
// --elementwise eager swaps the norms', the activation's and rotary's
// kernels for eager mode's and adds repeat_kv's (profiler/eager_kernels.h).
void AddBlockKernels(const TransformerSpec& spec, const LayerShape& shape, const Dims& d,
                     bool flash, const Split& x, double imbalance, Elementwise elementwise,
                     SampleCost* c) {
  const AttentionCore& attention = shape.attention;
  const double a = attention.query_heads;
  const double q_width = a * attention.qk_dim;
  const double kv_width = static_cast<double>(attention.kv_heads) * attention.qk_dim;
  // The MLP width, summed over the MLPs a token passes (an MoE block's k
  // routed experts at the busiest expert's share, and its shared experts).
  const double f = MlpWidthsOf(shape, imbalance).fc2_inputs;
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
  ElementwiseKernels k;
  k.norm = {{norm}};
  k.norm_backward = {{norm_backward}};
  k.activation = {{activation}};
  k.activation_backward = {{activation_backward}};
  if (rotary > 0) k.rotary = k.rotary_backward = {{rotary}};
  if (elementwise == Elementwise::kEager) {
    k = EagerBlockKernels(spec, attention, full / d.e, x.Replicated() * d.s, d.e, e_split, f, k);
  }
  auto add = [](std::vector<MemoryKernel>* to, const std::vector<MemoryKernel>& kernels) {
    to->insert(to->end(), kernels.begin(), kernels.end());
  };
  // Two norms: before attention and before the MLP; one (Falcon-7B) shares
  // the first; more (Gemma: after each as well) follow.
  c->forward_kernels = k.norm;
  c->forward_kernels.push_back({residual_dropout});
  if (spec.block_norms >= 2) add(&c->forward_kernels, k.norm);
  add(&c->forward_kernels, k.activation);
  c->forward_kernels.push_back({residual_dropout});
  for (int n = 2; n < spec.block_norms; ++n) add(&c->forward_kernels, k.norm);
  add(&c->forward_kernels, k.rotary);
  add(&c->forward_kernels, k.repeat_kv);
  c->backward_kernels = {{dropout_backward}};
  add(&c->backward_kernels, k.activation_backward);
  add(&c->backward_kernels, k.norm_backward);
  c->backward_kernels.push_back({residual_backward});
  c->backward_kernels.push_back({dropout_backward});
  if (spec.block_norms >= 2) add(&c->backward_kernels, k.norm_backward);
  c->backward_kernels.push_back({residual_backward});
  for (int n = 2; n < spec.block_norms; ++n) add(&c->backward_kernels, k.norm_backward);
  add(&c->backward_kernels, k.rotary_backward);
  add(&c->backward_kernels, k.repeat_kv_backward);
  if (shape.moe) AddMoeKernels(spec, d, x, imbalance, c);
  if (spec.qk_norm) {  // a norm over each query and key head
    c->forward_kernels.push_back({2 * (q_width + kv_width) * e_split});
    c->backward_kernels.push_back({3 * (q_width + kv_width) * e_split});
  }
  for (double bytes : BiasGradientBytes(spec, shape, d, x, f)) {
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

// A routed expert product (one of E copies): a grouped GEMM over the token
// copies the experts receive.
bool IsGroupedExpertProduct(const WeightProduct& p) { return p.count > 1; }

// The block's matrix products as the model calls them, one aten.mm each, per
// GPU: what torchtitan's op policy counts. torchtitan's models call one
// nn.Linear per projection (torchtitan/models/llama/model.py @ 9dec370:
// `self.wq(x), self.wk(x), self.wv(x)`, then wo; the MLP
// `self.w2(F.silu(self.w1(x)) * self.w3(x))`), so pipecast's fused "qkv"
// product is three mms (q, k, v by their widths) and a gated "fc1" or
// "shared_fc1" two (gate w1, then up w3; a mixture's shared experts are one
// FeedForward, torchtitan/models/moe.py @ 8a2686c4a); every other product is
// one mm. The routed experts are not: torchtitan runs them as
// torch._grouped_mm (`_run_experts_grouped_mm`, moe.py @ 8a2686c4a lines
// 105-122), which the policy neither counts nor saves (IsGroupedExpertProduct).
std::vector<ProductShape> OpPolicyMms(const TransformerSpec& spec, const LayerShape& shape,
                                      const std::vector<ProductShape>& per_gpu) {
  const AttentionCore& core = shape.attention;
  std::vector<ProductShape> mms;
  for (size_t i = 0; i < shape.products.size() && i < per_gpu.size(); ++i) {
    const std::string& name = shape.products[i].name;
    const ProductShape& p = per_gpu[i];
    if (IsGroupedExpertProduct(shape.products[i])) continue;
    if (name == "qkv") {
      const double q = static_cast<double>(core.query_heads) * core.qk_dim;
      const double k = static_cast<double>(core.kv_heads) * core.qk_dim;
      const double v = static_cast<double>(core.kv_heads) * core.v_dim;
      for (double width : {q, k, v}) mms.push_back({p.m, p.n * width / (q + k + v), p.k});
    } else if ((name == "fc1" || name == "shared_fc1") && spec.gated_mlp) {
      mms.push_back({p.m, p.n / 2, p.k});  // w1, the gate
      mms.push_back({p.m, p.n / 2, p.k});  // w3, the up projection
    } else {
      mms.push_back(p);
    }
  }
  return mms;
}

// The block's weight products and FLOPs, and its attention core's products
// (eager) or FLOPs (FlashAttention).
SampleCost BlockProducts(const LayerShape& shape, const LayerShape& whole, const Dims& d,
                         bool flash, const Split& x, double imbalance) {
  const AttentionCore& core_shape = shape.attention;
  const double a = core_shape.query_heads;
  const double t = x.t;
  SampleCost c;
  c.parameters = shape.parameters;
  for (const WeightProduct& p : shape.products) {
    // The routed experts run as one grouped GEMM over the token copies they
    // receive (docs/profiler.md "Mixture of experts"): k x s rows, sized for
    // the busiest expert.
    c.weight_products.push_back({d.s * TokenCopies(p, imbalance), p.OutAt(x.t), p.InAt(x.t)});
  }
  c.weight_flops = d.s * shape.WeightFlopsPerToken(x.t);
  c.other_flops = core_shape.flops / t;
  c.layer_flops = d.s * whole.WeightFlopsPerToken(1) + core_shape.flops;
  if (flash) {
    c.flash_flops = core_shape.causal_flops_as_full / t;
  } else {  // an eager kernel scores every key, then masks
    c.core_products = {{d.s, d.s, static_cast<double>(core_shape.qk_dim), a / t},  // Q*K^T
                       {d.s, static_cast<double>(core_shape.v_dim), d.s, a / t}};  // softmax(.)*V
  }
  return c;
}

// The bytes a block keeps for its backward, less what its attention kernel
// keeps (the s x s tensors, or FlashAttention's logsumexp).
double BlockKeptBytes(const TransformerSpec& spec, const LayerShape& shape, const Dims& d,
                      const Split& x, Fp8Recipe fp8, double imbalance) {
  const AttentionCore& core_shape = shape.attention;
  const double a = core_shape.query_heads;
  const double t = x.t;
  const MlpWidths mlp = MlpWidthsOf(shape, imbalance);
  const double fc1_outputs = mlp.fc1_outputs, f = mlp.fc2_inputs;
  // Korthikanti et al. 2022 sec. 4.1-4.2, generalised to B, f, head widths,
  // SwiGLU and MLA: the QKV input, the fc1 input (one tensor when a parallel
  // block has one norm), the norm inputs and the two dropout masks are
  // replicated without sequence parallelism (10sbh for 16-bit); Q, K, V,
  // the output projection's input, qk-norm inputs, fc1's outputs and fc2's
  // input are split over t (24sbh + 5as^2b); MLA's latents (the input of
  // their norm and of their up-projection) are replicated.
  const double qk = core_shape.qk_dim, v = core_shape.v_dim, kv = core_shape.kv_heads;
  const double product_inputs = spec.parallel_block && spec.block_norms == 1 ? 1 : 2;
  const double latents = 2.0 * (spec.mla.q_lora_rank + spec.mla.kv_lora_rank);
  // FP8: the inputs of the products keep their FP8 copy instead (the QKV
  // and fc1 inputs, fc2's input), and the output projection's FP8 input is
  // kept beside the bf16 attention output FlashAttention keeps.
  const bool fp8_on = fp8 != Fp8Recipe::kNone;
  const double e_input = fp8_on ? Fp8KeptBytes(fp8) : d.e;
  const double replicated = d.s * (d.e * spec.block_norms * d.h + e_input * product_inputs * d.h +
                                   d.e * latents + 2 * kMaskBytes * d.h) +
                            MoeKeptBytes(spec, shape, d, imbalance);
  const double qk_norm_inputs = spec.qk_norm ? a * qk + kv * qk : 0;
  const double split = d.s *
                       (d.e * (a * qk + kv * qk + kv * v + a * v + qk_norm_inputs + fc1_outputs) +
                        e_input * f + (fp8_on ? e_input * a * v : 0)) /
                       t;
  return x.Replicated() * replicated + split;
}

// Each weight product casts its input in the forward and the gradient of its
// output in the backward (per-GPU widths, whole sequence).
void AddProductCasts(Fp8Recipe fp8, const Dims& d, SampleCost* c) {
  c->fp8_products = true;
  for (const ProductShape& p : c->weight_products) {
    AddFp8Casts(fp8, p.m * p.k, d.e, &c->forward_kernels);
    AddFp8Casts(fp8, p.m * p.n, d.e, &c->backward_kernels);
  }
}

// What full recomputation, the weight-gradient op and the per-op policy keep
// (`attention_kept`: what the attention kernel keeps for its backward).
void AddRecomputeMemory(const TransformerSpec& spec, const LayerShape& shape,
                        const LayerShape& whole, const Dims& d, const Split& x, double imbalance,
                        double attention_kept, SampleCost* c) {
  const double a = shape.attention.query_heads;
  const double t = x.t;
  c->checkpoint_bytes = x.Replicated() * d.s * d.h * d.e;  // the block input
  // What the weight products' gradients need (WeightGradWidths): 32sbh for
  // 16-bit, f = 4h, multi-head attention (Qi et al. 2024, Table 1).
  const KeptWidths grad = WeightGradWidths(whole, imbalance);
  c->weight_grad_bytes = d.s * d.e * (x.Replicated() * grad.full + grad.split / t);
  // torchtitan's op policy (torchtitan/parallelisms/parallelize_llama.py @
  // 9dec370, _save_list and _custom_policy; docs/profiler.md): the block's
  // input, the outputs of the 1st, 3rd, ... aten.mm in the order the block
  // calls them (the 2nd, 4th, ... are rerun), and the attention kernel's
  // outputs (its output and, with flash, the logsumexp; eager attention's s x
  // s tensors) are kept; everything else (norms, rotary, activation, residual
  // adds, dropout) is rerun. The mms are counted as the model calls them
  // (OpPolicyMms): LLaMA's wq, wk, wv, wo, w1, w3, w2 keep wq, wv, w1, w2.
  // A mixture's routed experts (torch._grouped_mm, not aten.mm) are neither
  // counted nor kept: the backward reruns them. What torchtitan's DeepSeek-V3
  // and Llama 4 lists add at ep > 1, the all-to-alls' outputs, is the
  // simulator's (OpSavedAllToAllBytes, sim/stage_costs.h): no all-to-all
  // runs in a profile of one GPU holding every expert.
  c->op_wrapped = true;
  c->op_saved_bytes =
      c->checkpoint_bytes + d.s * d.e * a * shape.attention.v_dim / t + attention_kept;
  for (size_t i = 0; i < shape.products.size() && i < c->weight_products.size(); ++i) {
    if (!IsGroupedExpertProduct(shape.products[i])) continue;
    const ProductShape& p = c->weight_products[i];
    c->op_rerun_products.push_back(p);
    c->op_rerun_flops += 2 * p.m * p.n * p.k;
  }
  const std::vector<ProductShape> mms = OpPolicyMms(spec, shape, c->weight_products);
  for (size_t i = 0; i < mms.size(); ++i) {
    const ProductShape& p = mms[i];
    if (i % 2 == 1) {  // meta[mm_count] % 2 == 0: the 2nd, 4th, ... mm
      c->op_rerun_products.push_back(p);
      c->op_rerun_flops += 2 * p.m * p.n * p.k;
    } else {
      c->op_saved_bytes += p.m * p.n * d.e;
    }
  }
}

// Megatron-LM's selective recomputation by module (--recompute-modules;
// NVIDIA/Megatron-LM @ d98e8a64): both modules are output-discarding
// checkpoints (tensor_parallel.CheckpointWithoutOutput): the module's input
// is kept, its output is freed once the next op has consumed it, and the
// module's forward is rerun in the backward.
//   layernorm (transformer_layer.py, recompute_input_layernorm and
//   recompute_pre_mlp_layernorm): the outputs of the input and pre-MLP norms,
//   the QKV product's input and the MLP's (fc1, or the router's and the
//   dispatch's): BlockKeptBytes' product inputs, replicated (1/t with
//   sequence parallelism), in the bytes the products keep (with FP8,
//   Transformer Engine keeps the original input in place of its FP8 copy,
//   set_save_original_input, and that is what is freed). Gemma's post-norms
//   and the q/k norms are not in the module. Rerun: one norm kernel each.
//   moe_act (moe/experts.py, activation_checkpoint): the routed experts'
//   activation output, fc2's input (k copies per token at the busiest
//   expert's share; shared experts are a plain MLP, not in the module).
//   Rerun: the activation kernel over those copies.
// Two more use checkpoints of their own (NVIDIA/Megatron-LM @ d98e8a64):
//   mla_up_proj (multi_latent_attention.py lines 171-174, 983-988, 455-458):
//   an output-discarding checkpoint around qkv_up_proj_and_rope_apply, whose
//   inputs are the normed latents (kept as before: BlockKeptBytes' latents)
//   and whose outputs, the query, key and value the attention kernel keeps,
//   are freed once the attention has run: a*qk + a*qk + a*v per token / t in
//   bf16 (BlockKeptBytes' Q, K, V). Rerun: the up-projections (q_b, or q
//   without a query latent, and kv_b) with their FP8 input casts, and the
//   rotary kernel (Megatron's fused MLA rope, as AddBlockKernels times it).
//   mlp (transformer_layer.py lines 537-539, 992-1011): a plain checkpoint
//   (tensor_parallel.checkpoint, te_checkpoint with FP8) of the MLP of a
//   block that is NOT an MoE layer (`if not self.is_moe_layer`): in an MoE
//   block it does nothing. Its input is kept; with Transformer Engine's spec
//   the pre-MLP norm is fused into fc1 (gpt_layer_specs.py line 282,
//   pre_mlp_layernorm IdentityOp for a dense block), so that input is the
//   norm's input, which the block keeps anyway; freed: fc1's input (the norm
//   output, in the bytes the product keeps), fc1's outputs and fc2's input.
//   Rerun: fc1 and fc2 with their FP8 input casts, the norm and the
//   activation. The rerun's tensor-parallel collectives (sequence
//   parallelism's all-gather before fc1 and reduce-scatter after fc2; the
//   latents' gathers before the up-projections) are not charged.
void AddModuleRecompute(const TransformerSpec& spec, const LayerShape& shape, const Dims& d,
                        const Split& x, Fp8Recipe fp8, double imbalance, SampleCost* c) {
  const double e_input = fp8 != Fp8Recipe::kNone ? Fp8KeptBytes(fp8) : d.e;
  const double norms = spec.parallel_block && spec.block_norms == 1 ? 1 : 2;
  const double full = x.Replicated() * d.s * d.h * d.e;  // one full-width tensor
  const double e_split = d.s * d.e / x.t;                // bytes per split column
  c->layernorm_bytes = x.Replicated() * d.s * e_input * norms * d.h;
  c->layernorm_kernels.assign(static_cast<size_t>(norms), MemoryKernel{2 * full});
  // The rerun of a module's weight products i: the forward's shapes, and its
  // FP8 input casts.
  auto rerun = [&](size_t i, std::vector<ProductShape>* products,
                   std::vector<MemoryKernel>* kernels) {
    const ProductShape& p = c->weight_products[i];
    products->push_back(p);
    if (fp8 != Fp8Recipe::kNone) AddFp8Casts(fp8, p.m * p.k, d.e, kernels);
  };
  for (size_t i = 0; i < shape.products.size() && i < c->weight_products.size(); ++i) {
    const std::string& name = shape.products[i].name;
    if (spec.mla.Enabled() && (name == "q_b" || name == "q" || name == "kv_b")) {
      rerun(i, &c->mla_up_proj_products, &c->mla_up_proj_kernels);
    }
    if (!shape.moe && (name == "fc1" || name == "fc2")) {
      rerun(i, &c->mlp_products, &c->mlp_kernels);
    }
  }
  if (spec.mla.Enabled()) {
    const AttentionCore& core = shape.attention;
    const double a = core.query_heads, kv = core.kv_heads;
    c->mla_up_proj_bytes = e_split * (a * core.qk_dim + kv * core.qk_dim + kv * core.v_dim);
    const double rope = spec.mla.qk_rope_head_dim;
    if (!spec.learned_positions)
      c->mla_up_proj_kernels.push_back({2 * (a * rope + rope) * e_split});
  }
  if (!shape.moe) {
    const MlpWidths mlp = MlpWidthsOf(shape, imbalance);
    c->mlp_bytes = x.Replicated() * d.s * e_input * d.h + mlp.fc1_outputs * e_split +
                   e_input * mlp.fc2_inputs * d.s / x.t;
    c->mlp_kernels.push_back({2 * full});  // the pre-MLP norm, fused into fc1
    c->mlp_kernels.push_back({(spec.gated_mlp ? 3 : 2) * mlp.fc2_inputs * e_split});
  }
  double routed = 0;  // the routed experts' fc2 inputs per token, summed over its copies
  for (const WeightProduct& p : shape.products) {
    if (p.name == "expert_fc2") routed += static_cast<double>(p.in) * TokenCopies(p, imbalance);
  }
  if (routed == 0) return;
  c->moe_act_bytes = d.s * e_input * routed / x.t;
  c->moe_act_kernels = {{(spec.gated_mlp ? 3 : 2) * routed * e_split}};
}

}  // namespace

// The expert-tensor-parallel degrees a profile times its routed experts at (beside t): Megatron's
// etp runs inside an NVLink domain, 8 GPUs on the presets; others keep the profile's shapes.
constexpr int kRoutedExpertsEtps[] = {1, 2, 4, 8};

void AddRoutedExpertsAtEtp(const LayerShape& shape, const Dims& d, const Split& x, Fp8Recipe fp8,
                           double imbalance, SampleCost* c) {
  const int t = static_cast<int>(x.t);
  std::vector<int> etps(std::begin(kRoutedExpertsEtps), std::end(kRoutedExpertsEtps));
  if (std::find(etps.begin(), etps.end(), t) == etps.end()) etps.push_back(t);
  std::sort(etps.begin(), etps.end());
  for (int etp : etps) {
    // Megatron-LM splits each expert's fc1 by columns and fc2 by rows over etp (experts.py):
    // every routed product's split width must divide (t always does: the profile has it).
    ExpertProductsAtEtp at;
    at.etp = etp;
    at.own = etp == t;
    bool divides = true;
    for (const WeightProduct& p : shape.products) {
      if (!IsGroupedExpertProduct(p)) continue;
      const int64_t width = p.split == TpSplit::kRow ? p.in : p.out;
      if (etp != t && width % etp != 0) divides = false;
      // etp GPUs share the rows of etp / t tensor-parallel ranks' tokens (the etp all-gather).
      const double rows = d.s * TokenCopies(p, imbalance);
      at.products.push_back({etp == t ? rows : rows * etp / x.t, p.OutAt(etp), p.InAt(etp)});
    }
    if (!divides || at.products.empty()) continue;
    if (fp8 != Fp8Recipe::kNone) {
      for (const ProductShape& p : at.products) {
        AddFp8Casts(fp8, p.m * p.k, d.e, &at.forward_casts);
        AddFp8Casts(fp8, p.m * p.n, d.e, &at.backward_casts);
      }
    }
    c->routed_experts.push_back(std::move(at));
  }
}

// REQUIRES: `whole` is `shape` at t = 1.
SampleCost BlockCost(const TransformerSpec& spec, const LayerShape& shape, const LayerShape& whole,
                     const Dims& d, Attention kind, const Split& x, Fp8Recipe fp8, double imbalance,
                     ExpertDispatcher dispatcher, Elementwise elementwise) {
  const bool flash = kind != Attention::kEager;
  SampleCost c = BlockProducts(shape, whole, d, flash, x, imbalance);
  const double a = shape.attention.query_heads;
  const double t = x.t;
  const double core = (2 * d.e + kMaskBytes) * a * d.s * d.s / t;
  const double attention_kept = flash ? kLogsumexpBytes * a * d.s / t : core;
  c.activation_bytes = BlockKeptBytes(spec, shape, d, x, fp8, imbalance) + attention_kept;
  if (flash) c.fixed_activation_bytes = kFlashRngStateBytes;
  c.attention_core_bytes = flash ? 0 : core;
  c.attention_core_flops = flash ? 0 : c.other_flops;
  c.traffic_bytes = kTrafficPerActivationByte * c.activation_bytes;
  AddBlockKernels(spec, shape, d, flash, x, imbalance, elementwise, &c);
  if (shape.moe && dispatcher == ExpertDispatcher::kAllToAll) {
    AddAllToAllSortKernels(spec, d, x, imbalance, &c);
  }
  if (shape.moe) AddMoeRouting(spec, whole, d, &c);
  if (shape.moe) AddRoutedExpertsAtEtp(shape, d, x, fp8, imbalance, &c);
  if (fp8 != Fp8Recipe::kNone) AddProductCasts(fp8, d, &c);
  AddRecomputeMemory(spec, shape, whole, d, x, imbalance, attention_kept, &c);
  AddModuleRecompute(spec, shape, d, x, fp8, imbalance, &c);
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

SampleCost HeadCost(const TransformerSpec& spec, const LayerShape& shape, const Dims& d,
                    const Split& x, Loss loss, Elementwise elementwise) {
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
  // nll_loss's fp32 gradient and log_softmax's fp32 result beside it;
  // compiled, the bf16 logits and each token's fp32 max and log-sum-exp
  // (what the min-cut partitioner saves), and at the backward the bf16
  // gradient one fused kernel writes beside them.
  const bool pytorch = loss == Loss::kPytorch;
  const bool compiled = loss == Loss::kCompiled;
  const double per_token = pytorch    ? kLossSoftmaxBytes * rows
                           : compiled ? d.e * rows + kCompiledLossRowStatBytes
                                      : (d.e + kLossSoftmaxBytes) * rows;
  c.activation_bytes = d.s * (x.Replicated() * 2 * d.e * d.h + per_token);
  if (pytorch) c.workspace_bytes_per_sample = 2 * kLossSoftmaxBytes * d.s * rows;
  if (compiled) c.workspace_bytes_per_sample = d.e * d.s * rows;
  c.traffic_bytes = kTrafficPerActivationByte * c.activation_bytes;
  // The final norm; the cross-entropy reads the logits and writes the fp32
  // softmax it keeps, and its backward reads that and writes the logits'
  // gradient.
  const double norm = x.Replicated() * d.s * d.h * d.e;
  const double loss_bytes = d.s * rows * (d.e + kLossSoftmaxBytes);
  c.forward_kernels = {{2 * norm}, {loss_bytes}};
  c.backward_kernels = {{loss_bytes}, {3 * norm}};
  if (elementwise == Elementwise::kEager) {
    EagerHeadKernels(spec, loss, norm / d.e, x.Replicated() * d.s, d.e, d.s * rows,
                     &c.forward_kernels, &c.backward_kernels);
  }
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

}  // namespace pipecast::internal
