// The analytic estimate of a mixture-of-experts block's own parts
// (docs/profiler.md "Mixture of experts"): the token copies each product
// sees, the MLP widths a token passes, the router's and the permutation's
// memory-bound kernels, what the block keeps for its backward beyond a dense
// block, and the routing model.json records for the simulator.
#include <cmath>
#include <optional>

#include "profiler/internal/analytic_cost.h"

namespace pipecast::internal {

namespace {

// The router's scores, softmax (or sigmoid) and top-k run in fp32
// (Megatron-Core --moe-router-dtype fp32, as its MoE recipes set).
constexpr double kRouterScoreBytes = 4;

bool EndsWith(const std::string& s, const char* suffix) {
  const std::string tail(suffix);
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

double TokenCopies(const WeightProduct& p, double imbalance) {
  if (p.count <= 1) return p.tokens_per_copy;
  return static_cast<double>(p.count) * p.tokens_per_copy * imbalance;
}

MlpWidths MlpWidthsOf(const LayerShape& shape, double imbalance) {
  MlpWidths w;
  for (const WeightProduct& p : shape.products) {
    if (EndsWith(p.name, "fc1"))
      w.fc1_outputs += static_cast<double>(p.out) * TokenCopies(p, imbalance);
    if (EndsWith(p.name, "fc2"))
      w.fc2_inputs += static_cast<double>(p.in) * TokenCopies(p, imbalance);
  }
  return w;
}

double MoeKeptBytes(const TransformerSpec& spec, const LayerShape& shape, const Dims& d,
                    double imbalance) {
  if (!shape.moe) return 0;
  const double k = spec.moe.experts_per_token * imbalance;
  // The permuted tokens (the routed experts' fc1 input, kept for its weight
  // gradient) and the router's fp32 scores (kept for its softmax's backward).
  return d.s * (k * d.h * d.e + spec.moe.experts * kRouterScoreBytes);
}

void AddMoeKernels(const TransformerSpec& spec, const Dims& d, const Split& x, double imbalance,
                   SampleCost* c) {
  const double k = spec.moe.experts_per_token * imbalance;
  const double row = x.Replicated() * d.s * d.h * d.e;  // one full-width tensor
  const double scores = x.Replicated() * d.s * spec.moe.experts * kRouterScoreBytes;
  // Router: softmax (or sigmoid) and top-k read the scores and write the
  // weights; the backward reads the weights and their gradient, writes the
  // scores' gradient.
  c->forward_kernels.push_back({2 * scores});
  c->backward_kernels.push_back({3 * scores});
  // Permutation: each token copied to its k experts (read 1, write k);
  // unpermutation: the k results gathered back, weighted and summed (read k,
  // write 1). The backward runs both again.
  const double permute = (1 + k) * row;
  c->forward_kernels.push_back({permute});
  c->forward_kernels.push_back({permute});
  c->backward_kernels.push_back({permute});
  c->backward_kernels.push_back({permute});
}

void AddAllToAllSortKernels(const TransformerSpec& spec, const Dims& d, const Split& x,
                            double imbalance, SampleCost* c) {
  const double k = spec.moe.experts_per_token * imbalance;
  const double row = x.Replicated() * d.s * d.h * d.e;  // one full-width tensor
  const double sort = 2 * k * row;                      // read k rows, write k rows
  c->forward_kernels.push_back({sort});                 // after the dispatch
  c->forward_kernels.push_back({sort});                 // before the combine
  c->backward_kernels.push_back({sort});                // the combine's gradient, sorted
  c->backward_kernels.push_back({sort});                // the dispatch's gradient, unsorted
}

void AddMoeRouting(const TransformerSpec& spec, const LayerShape& whole, const Dims& d,
                   SampleCost* c) {
  MoeRouting r;
  r.experts = spec.moe.experts;
  r.top_k = spec.moe.experts_per_token;
  if (spec.moe.expert_groups > 0 && spec.moe.topk_groups > 0 &&
      spec.moe.experts % spec.moe.expert_groups == 0 &&
      spec.moe.topk_groups <= spec.moe.expert_groups) {
    r.expert_groups = spec.moe.expert_groups;
    r.topk_groups = spec.moe.topk_groups;
  }
  r.hidden = spec.hidden;
  for (const WeightProduct& p : whole.products) {
    if (p.count > 1) r.expert_parameters += p.ParametersAt(1);
  }
  r.bytes_per_element = static_cast<int>(d.e);
  r.group_gemm_ns = std::llround(kGroupedGemmGroupSeconds * 1e9);
  c->moe = r;
}

}  // namespace pipecast::internal
