#include "sim/model.h"

#include <algorithm>
#include <cmath>

namespace pipecast {

int64_t Model::TotalParameters() const {
  int64_t total = 0;
  for (const Layer& layer : layers) total += layer.parameters;
  return total;
}

std::optional<double> Model::ForwardFlopsPerSample() const {
  if (flops_per_sample) return flops_per_sample;
  double sum = 0;
  for (const Layer& layer : layers) {
    if (!layer.forward_flops) return std::nullopt;
    sum += *layer.forward_flops;
  }
  if (layers.empty()) return std::nullopt;
  return sum;
}

const char* CostOriginName(CostOrigin origin) {
  switch (origin) {
    case CostOrigin::kMeasured:
      return "measured";
    case CostOrigin::kInterpolated:
      return "interpolated";
    case CostOrigin::kExtrapolated:
      return "extrapolated";
  }
  return "?";
}

namespace {

// a + (b - a) * t, rounded to the nearest integer.
int64_t Lerp(int64_t a, int64_t b, double t) {
  return a + static_cast<int64_t>(std::llround(static_cast<double>(b - a) * t));
}

int64_t Scale(int64_t a, double factor) {
  return static_cast<int64_t>(std::llround(static_cast<double>(a) * factor));
}

LayerCost FromProfile(const LayerProfile& p) {
  LayerCost cost;
  cost.forward_ns = p.forward_ns;
  cost.backward_ns = p.backward_ns;
  cost.has_backward_split = p.backward_weight_ns.has_value();
  cost.backward_weight_ns = p.backward_weight_ns.value_or(0);
  cost.activation_bytes = p.activation_bytes;
  cost.output_bytes = p.output_bytes;
  cost.workspace_bytes = p.workspace_bytes;
  cost.checkpoint_bytes = p.checkpoint_bytes;
  cost.attention_core_bytes = p.attention_core_bytes;
  cost.attention_core_ns = p.attention_core_ns;
  cost.weight_grad_bytes = p.weight_grad_bytes;
  return cost;
}

std::optional<int64_t> Scale(const std::optional<int64_t>& a, double factor) {
  if (!a) return std::nullopt;
  return Scale(*a, factor);
}

// Both ends given: linear between them; otherwise absent.
std::optional<int64_t> Lerp(const std::optional<int64_t>& a, const std::optional<int64_t>& b,
                            double t) {
  if (!a || !b) return std::nullopt;
  return Lerp(*a, *b, t);
}

}  // namespace

LayerCost CostAt(const Layer& layer, int microbatch_size) {
  const std::vector<LayerProfile>& ps = layer.profiles;
  auto it =
      std::lower_bound(ps.begin(), ps.end(), microbatch_size,
                       [](const LayerProfile& p, int size) { return p.microbatch_size < size; });
  if (it != ps.end() && it->microbatch_size == microbatch_size) return FromProfile(*it);

  if (it == ps.begin() || it == ps.end()) {
    // Outside the measured range: proportional to the nearest measured size.
    const LayerProfile& near = (it == ps.begin()) ? ps.front() : ps.back();
    double f = static_cast<double>(microbatch_size) / near.microbatch_size;
    LayerCost c = FromProfile(near);
    c.forward_ns = Scale(c.forward_ns, f);
    c.backward_ns = Scale(c.backward_ns, f);
    c.backward_weight_ns = std::min(Scale(c.backward_weight_ns, f), c.backward_ns);
    c.activation_bytes = Scale(c.activation_bytes, f);
    c.output_bytes = Scale(c.output_bytes, f);
    c.workspace_bytes = Scale(c.workspace_bytes, f);
    c.checkpoint_bytes = Scale(c.checkpoint_bytes, f);
    c.attention_core_bytes = Scale(c.attention_core_bytes, f);
    c.attention_core_ns = Scale(c.attention_core_ns, f);
    c.weight_grad_bytes = Scale(c.weight_grad_bytes, f);
    c.origin = CostOrigin::kExtrapolated;
    return c;
  }
  const LayerProfile& lo = *(it - 1);
  const LayerProfile& hi = *it;
  double t = static_cast<double>(microbatch_size - lo.microbatch_size) /
             (hi.microbatch_size - lo.microbatch_size);
  LayerCost a = FromProfile(lo);
  LayerCost b = FromProfile(hi);
  LayerCost c;
  c.forward_ns = Lerp(a.forward_ns, b.forward_ns, t);
  c.backward_ns = Lerp(a.backward_ns, b.backward_ns, t);
  c.has_backward_split = a.has_backward_split && b.has_backward_split;
  c.backward_weight_ns =
      c.has_backward_split
          ? std::min(Lerp(a.backward_weight_ns, b.backward_weight_ns, t), c.backward_ns)
          : 0;
  c.activation_bytes = Lerp(a.activation_bytes, b.activation_bytes, t);
  c.output_bytes = Lerp(a.output_bytes, b.output_bytes, t);
  c.workspace_bytes = Lerp(a.workspace_bytes, b.workspace_bytes, t);
  c.checkpoint_bytes = Lerp(a.checkpoint_bytes, b.checkpoint_bytes, t);
  c.attention_core_bytes = Lerp(a.attention_core_bytes, b.attention_core_bytes, t);
  c.attention_core_ns = Lerp(a.attention_core_ns, b.attention_core_ns, t);
  c.weight_grad_bytes = Lerp(a.weight_grad_bytes, b.weight_grad_bytes, t);
  c.origin = CostOrigin::kInterpolated;
  return c;
}

}  // namespace pipecast
