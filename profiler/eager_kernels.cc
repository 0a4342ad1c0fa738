// The eager element-wise kernel set (profiler/eager_kernels.h): torchtitan's
// Llama code (pytorch/torchtitan @ 9dec370; the lines read at the stored
// versions 026e23a of torchtitan/models/norms.py and 0199cbc of
// torchtitan/models/llama/model.py, whose functions are the same text) run
// by PyTorch eager mode, one kernel per ATen operator and autograd formula.
// Bytes per element: bf16 2 (e), fp32 4. Views (reshape of a contiguous
// tensor, view_as_complex, view_as_real, flatten, transpose, expand) launch
// nothing.
#include "profiler/eager_kernels.h"

namespace pipecast::internal {
namespace {

constexpr double kFp32 = 4;  // bytes of an fp32 element

void Append(std::vector<MemoryKernel>* to, const std::vector<MemoryKernel>& kernels) {
  to->insert(to->end(), kernels.begin(), kernels.end());
}

}  // namespace

// norms.py RMSNorm (toml norm_type = "rmsnorm"):
//   _norm(x) = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
//   forward(x) = self._norm(x.float()).type_as(x) * self.weight
// Per element (E = elements, e-byte input, fp32 inside):
//   x.float()          read e, write 4       (e + 4)
//   .pow(2)            read 4, write 4       8
//   .mean(-1)          read 4, a row out     4      (+ 4 per row)
//   + eps              a row in and out             8 per row
//   torch.rsqrt        a row in and out             8 per row
//   x * rsqrt(...)     read 4, write 4       8      (+ 4 per row)
//   .type_as(x)        read 4, write e       (4 + e)
//   * self.weight      read e, write e       2e     (the weight: h elements, left out)
// = 36 B/element at e = 2 (the fused kernel: 2e = 4).
std::vector<MemoryKernel> EagerRmsNorm(double elements, double rows, double e) {
  return {{elements * (e + kFp32)}, {elements * 2 * kFp32}, {elements * kFp32 + rows * kFp32},
          {rows * 2 * kFp32},       {rows * 2 * kFp32},     {elements * 2 * kFp32 + rows * kFp32},
          {elements * (kFp32 + e)}, {elements * 2 * e}};
}

// Its autograd backward, in the order autograd runs the formulas
// (tools/autograd/derivatives.yaml: mul, _to_copy, mean, pow, rsqrt):
//   out = nb * w:     d_nb = dy * w          read e, write e          2e
//                     d_w = sum(dy * nb)     mul: read 2e, write e    3e   (weight gradient)
//                                            sum over tokens: read e  e    (weight gradient)
//   nb = n.type_as:   d_n = d_nb.float()     read e, write 4          (e + 4)
//   n = xf * r:       d_n * r                read 4, write 4          8
//                     d_r = sum(d_n * xf)    mul: read 8, write 4     12
//                                            sum over the row: read 4 4
//   r = rsqrt(m2):    -0.5 * d_r * r^3       three per-row kernels (pow, mul, mul), 8 per row each
//   m = mean(p):      d_m.expand / N         read a row, write 4      4
//   p = xf.pow(2):    pow_backward: grad * (2 * xf.pow(1)): pow(1) copies (read 4, write 4),
//                     2 * (read 4, write 4), grad * (read 8, write 4)   8 + 8 + 12 = 28
//   xf:               the two branches' sum  read 8, write 4          12
//   xf = x.float():   d_x = d_xf.to(bf16)    read 4, write e          (4 + e)
// = 92 B/element at e = 2 (the fused kernel: 3e = 6). Uncertain: whether
// pow_backward's pow(1) and scalar multiply run as two kernels (PyTorch 2.5's
// FunctionsManual.cpp pow_backward: `grad * (exponent * self.pow(exponent -
// 1))`; pow with exponent 1 copies) and the per-row kernels' count.
std::vector<MemoryKernel> EagerRmsNormBackward(double elements, double rows, double e) {
  return {{elements * 2 * e},
          {.bytes_per_sample = elements * 3 * e, .weight_gradient = true},
          {.bytes_per_sample = elements * e, .weight_gradient = true},
          {elements * (e + kFp32)},
          {elements * 2 * kFp32},
          {elements * 3 * kFp32},
          {elements * kFp32},
          {rows * 2 * kFp32},
          {rows * 2 * kFp32},
          {rows * 2 * kFp32},
          {elements * kFp32 + rows * kFp32},
          {elements * 2 * kFp32},
          {elements * 2 * kFp32},
          {elements * 3 * kFp32},
          {elements * 3 * kFp32},
          {elements * (kFp32 + e)}};
}

// model.py repeat_kv: unsqueeze(x, 3).expand(..., n_rep, ...).reshape(...)
// copies K and V from kv_heads to heads (reshape of an expanded view
// materialises it): read kv_heads * d, write heads * d per token, each. Its
// backward (expand's) sums the n_rep copies back: read heads * d, write
// kv_heads * d. n_rep == 1 returns x: nothing.
std::vector<MemoryKernel> RepeatKv(const AttentionCore& attention, double e_split) {
  if (attention.kv_heads >= attention.query_heads) return {};
  const double a = attention.query_heads, kv = attention.kv_heads;
  return {{(kv + a) * attention.qk_dim * e_split}, {(kv + a) * attention.v_dim * e_split}};
}
std::vector<MemoryKernel> RepeatKvBackward(const AttentionCore& attention, double e_split) {
  return RepeatKv(attention, e_split);  // the same reads and writes, reversed
}

ElementwiseKernels EagerBlockKernels(const TransformerSpec& spec, const AttentionCore& attention,
                                     double full, double rows, double e, double e_split, double f,
                                     const ElementwiseKernels& fused) {
  ElementwiseKernels k = fused;
  if (spec.norm == NormKind::kRmsNorm) {
    k.norm = EagerRmsNorm(full, rows, e);
    k.norm_backward = EagerRmsNormBackward(full, rows, e);
  }
  // model.py FeedForward.forward: self.w2(F.silu(self.w1(x)) * self.w3(x)):
  // silu (read e, write e) and mul (read 2e, write e): 2e + 3e per element
  // of f, against the fused kernel's 3e. Backward: mul's two products
  // (dy * w3x and dy * silu, read 2e, write e each) and silu_backward (read
  // the gradient and w1x, write e): 3 x 3e, against the fused 5e.
  if (spec.gated_mlp) {
    k.activation = {{2 * f * e_split}, {3 * f * e_split}};
    k.activation_backward = {{3 * f * e_split}, {3 * f * e_split}, {3 * f * e_split}};
  }
  // model.py apply_rotary_emb, for xq and for xk apart: x.float() (read e,
  // write 4), the complex product with freqs_cis (read 4, write 4; the
  // table is s x d/2 complex, left out), .type_as(x) (read 4, write e):
  // 2e + 16 B per element, at e = 2 20 B (fused: 2e = 4). The backward runs
  // the same three in reverse (to fp32, times conj(freqs_cis), to bf16).
  // MLA keeps the fused count.
  if (!spec.learned_positions && !spec.mla.Enabled()) {
    const double per = 1.0 / e;  // e_split is s * e / t: elements = width * e_split / e
    k.rotary.clear();
    for (double width : {static_cast<double>(attention.query_heads) * attention.qk_dim,
                         static_cast<double>(attention.kv_heads) * attention.qk_dim}) {
      const double elements = width * e_split * per;
      Append(&k.rotary,
             {{elements * (e + kFp32)}, {elements * 2 * kFp32}, {elements * (kFp32 + e)}});
    }
    k.rotary_backward = k.rotary;
  }
  k.repeat_kv = RepeatKv(attention, e_split);
  k.repeat_kv_backward = RepeatKvBackward(attention, e_split);
  // model.py Attention.forward: output.transpose(1, 2).contiguous() copies
  // SDPA's output (read e, write e over heads * v_dim). Its backward hands
  // SDPA a transposed view of the gradient, which the flash backward takes
  // as it is (stride 1 in the last dimension): counted forward only
  // (uncertain).
  k.repeat_kv.push_back(
      {2 * static_cast<double>(attention.query_heads) * attention.v_dim * e_split});
  return k;
}

void EagerHeadKernels(const TransformerSpec& spec, Loss loss, double full, double rows, double e,
                      double logits, std::vector<MemoryKernel>* forward,
                      std::vector<MemoryKernel>* backward) {
  // The fused lists are {norm, loss} forward and {loss, norm_backward}.
  std::vector<MemoryKernel> norm = {forward->front()};
  std::vector<MemoryKernel> norm_backward = {backward->back()};
  std::vector<MemoryKernel> loss_forward = {(*forward)[1]};
  std::vector<MemoryKernel> loss_backward = {backward->front()};
  if (spec.norm == NormKind::kRmsNorm) {
    norm = EagerRmsNorm(full, rows, e);
    norm_backward = EagerRmsNormBackward(full, rows, e);
  }
  // train.py loss_fn: cross_entropy(pred.flatten(0, 1).float(), labels):
  // the upcast (read e, write 4 per logit), log_softmax (read 4, write 4;
  // its max and sum passes re-read the row, which a row of V values may
  // serve from cache: counted once, uncertain) and nll_loss (a value per
  // row). Backward: nll_loss_backward (zero-fill and scatter: write 4),
  // _log_softmax_backward_data (read the gradient and the output, write:
  // 12) and the cast back (read 4, write e).
  if (loss == Loss::kPytorch) {
    loss_forward = {{logits * (e + kFp32)}, {logits * 2 * kFp32}, {rows * 2 * kFp32}};
    loss_backward = {{logits * kFp32}, {logits * 3 * kFp32}, {logits * (kFp32 + e)}};
  }
  forward->clear();
  Append(forward, norm);
  Append(forward, loss_forward);
  backward->clear();
  Append(backward, loss_backward);
  Append(backward, norm_backward);
}

}  // namespace pipecast::internal
