// The analytic estimate (profiler/analytic.h): one layer's profile at each
// micro-batch size, timed from its per-sample cost by the flat or the matmul
// time model (docs/profiler.md, "Time"), within model.json's limits.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "profiler/internal/analytic_cost.h"

namespace pipecast::internal {
namespace {

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
  // The forward products and kernels Megatron-LM's layernorm, moe_act,
  // mla_up_proj and mlp checkpoints rerun.
  double layernorm = 0, moe_act = 0, mla_up_proj = 0, mlp = 0;
};

// A module's rerun on the flat model: its products' FLOPs at the flat rate and
// its kernels' bytes at the memory rate.
double FlatRerun(const std::vector<ProductShape>& products,
                 const std::vector<MemoryKernel>& kernels, const Rates& r, int b) {
  double flops = 0, bytes = 0;
  for (const ProductShape& p : products) flops += 2 * p.m * p.n * p.k;
  for (const MemoryKernel& k : kernels) bytes += k.bytes_per_sample;
  return b * (flops / r.flops_per_s + bytes / r.bytes_per_s);
}

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
  for (const MemoryKernel& k : c.layernorm_kernels) s.layernorm += b * k.bytes_per_sample;
  for (const MemoryKernel& k : c.moe_act_kernels) s.moe_act += b * k.bytes_per_sample;
  s.layernorm /= r.bytes_per_s;
  s.moe_act /= r.bytes_per_s;
  s.mla_up_proj = FlatRerun(c.mla_up_proj_products, c.mla_up_proj_kernels, r, b);
  s.mlp = FlatRerun(c.mlp_products, c.mlp_kernels, r, b);
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
  for (const MemoryKernel& k : c.layernorm_kernels) s.layernorm += memory(k);
  for (const MemoryKernel& k : c.moe_act_kernels) s.moe_act += memory(k);
  // mla_up_proj and mlp rerun weight products as the forward runs them (FP8
  // where the block's products are).
  for (const ProductShape& p : c.mla_up_proj_products)
    s.mla_up_proj += weight_gemm(AtMicrobatch(p, b));
  for (const MemoryKernel& k : c.mla_up_proj_kernels) s.mla_up_proj += memory(k);
  for (const ProductShape& p : c.mlp_products) s.mlp += weight_gemm(AtMicrobatch(p, b));
  for (const MemoryKernel& k : c.mlp_kernels) s.mlp += memory(k);
  s.backward = input_grad + s.weight + core_backward + other_backward;
  if (c.attention_core_flops > 0) s.core = core_forward;
  return s;
}

// The routed experts at one etp for one micro-batch of b samples, as MatmulSeconds times the
// same products and casts (the flat model: their FLOPs at its rate, twice that backward).
RoutedExpertsCost ExpertsAt(const SampleCost& c, const ExpertProductsAtEtp& at, const Rates& r,
                            int b) {
  double forward = 0, input_grad = 0, weight = 0;
  if (r.model == TimeModel::kFlat) {
    for (const ProductShape& p : at.products) forward += b * 2 * p.m * p.n * p.k / r.flops_per_s;
    input_grad = weight = forward;
  } else {
    auto kernel = [](double seconds) { return std::max(seconds, kMinKernelSeconds); };
    const GemmRates& wg = c.fp8_products && r.fp8 != Fp8Recipe::kNone ? r.fp8_gemm : r.gemm;
    auto gemm = [&](const Gemm& product) { return kernel(TimeGemm(wg, product).seconds); };
    auto memory = [&](const MemoryKernel& k) {
      return kernel((b * k.bytes_per_sample + k.bytes_per_call) / r.bytes_per_s);
    };
    for (const ProductShape& p : at.products) {
      const Gemm f = AtMicrobatch(p, b);
      forward += gemm(f);
      input_grad += gemm(Gemm{f.m, f.k, f.n, 1});
      weight += gemm(Gemm{f.k, f.n, f.m, 1});
    }
    for (const MemoryKernel& k : at.forward_casts) forward += memory(k);
    for (const MemoryKernel& k : at.backward_casts) input_grad += memory(k);
  }
  RoutedExpertsCost e;
  e.expert_tensor_parallel = at.etp;
  e.forward_ns = std::llround(forward * 1e9);
  e.backward_weight_ns = std::llround(weight * 1e9);
  e.backward_ns = std::llround(input_grad * 1e9) + e.backward_weight_ns;
  return e;
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
  // Megatron-LM's modules (0 in a layer without them: embedding, head, moe_act
  // or mlp in a block without routed experts or without a dense MLP,
  // mla_up_proj without latent attention).
  p.layernorm_bytes = std::min<Bytes>(p.activation_bytes, std::llround(b * c.layernorm_bytes));
  p.layernorm_ns = std::min<TimeNs>(p.forward_ns, std::llround(sec.layernorm * 1e9));
  p.moe_act_bytes = std::min<Bytes>(p.activation_bytes, std::llround(b * c.moe_act_bytes));
  p.moe_act_ns = std::min<TimeNs>(p.forward_ns, std::llround(sec.moe_act * 1e9));
  p.mla_up_proj_bytes = std::min<Bytes>(p.activation_bytes, std::llround(b * c.mla_up_proj_bytes));
  p.mla_up_proj_ns = std::min<TimeNs>(p.forward_ns, std::llround(sec.mla_up_proj * 1e9));
  p.mlp_bytes = std::min<Bytes>(p.activation_bytes, std::llround(b * c.mlp_bytes));
  p.mlp_ns = std::min<TimeNs>(p.forward_ns, std::llround(sec.mlp * 1e9));
  // The weight gradient keeps its etp = t time at every etp: a grouped kernel writes one gradient
  // per local expert (in x out / etp each, over that expert's rows), so etp's shapes have 1/etp
  // of the tiles of etp = 1 over etp x their k, the same waves x k while the tiles fill the GPU;
  // the one product of all rows the profile times would shrink to a single expert's tiles (32 at
  // etp 4 for Qwen3-30B-A3B) and charge wave quantisation a grouped kernel does not see.
  TimeNs own_weight = 0;
  for (const ExpertProductsAtEtp& at : c.routed_experts) {
    p.routed_experts.push_back(ExpertsAt(c, at, r, b));
    if (at.own) own_weight = p.routed_experts.back().backward_weight_ns;
  }
  for (RoutedExpertsCost& e : p.routed_experts) {
    e.backward_ns += own_weight - e.backward_weight_ns;
    e.backward_weight_ns = own_weight;
  }
  return p;
}

}  // namespace

// REQUIRES: `sizes` sorted and unique.
Result<Layer> ToLayer(std::string name, const SampleCost& c, const Rates& r,
                      const std::vector<int>& sizes) {
  Layer layer;
  layer.name = std::move(name);
  layer.parameters = c.parameters;
  layer.forward_flops = c.layer_flops;
  layer.moe = c.moe;
  if (c.parameters > kMaxFileParameters || *layer.forward_flops > kMaxFileFlops) {
    return Status::FailedPrecondition(fmt::format(
        "{}: {} parameters and {:.4g} forward FLOPs per sample; model.json holds at most 2^50 "
        "and 1e24: check --hidden, --ffn-hidden, --seq and --vocab",
        layer.name, c.parameters, *layer.forward_flops));
  }
  for (int b : sizes) {
    PIPECAST_ASSIGN_OR_RETURN(LayerProfile p, ProfileAt(layer.name, c, r, b));
    layer.profiles.push_back(p);
  }
  return layer;
}

}  // namespace pipecast::internal
