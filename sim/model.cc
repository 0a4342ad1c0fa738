#include "sim/model.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

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

const RoutedExpertsCost* RoutedExpertsAt(const LayerProfile& p, int etp) {
  for (const RoutedExpertsCost& e : p.routed_experts) {
    if (e.expert_tensor_parallel == etp) return &e;
  }
  return nullptr;
}

// The profile's costs with its routed experts at `etp` (> 0): its entry at
// etp in place of the one at its own t, which its times hold.
void RecostExperts(const LayerProfile& p, int etp, LayerCost* cost) {
  if (etp <= 0 || p.routed_experts.empty()) return;
  const RoutedExpertsCost* at = RoutedExpertsAt(p, etp);
  const RoutedExpertsCost* own = RoutedExpertsAt(p, p.tensor_parallel);
  if (at == nullptr || own == nullptr) {
    cost->experts_etp_kept = true;
    return;
  }
  const TimeNs forward = at->forward_ns - own->forward_ns;
  const TimeNs backward = at->backward_ns - own->backward_ns;
  const TimeNs weight = at->backward_weight_ns - own->backward_weight_ns;
  cost->forward_ns = std::max<TimeNs>(0, cost->forward_ns + forward);
  cost->backward_ns = std::max<TimeNs>(0, cost->backward_ns + backward);
  if (cost->has_backward_split) {
    cost->backward_weight_ns =
        std::clamp<TimeNs>(cost->backward_weight_ns + weight, 0, cost->backward_ns);
  }
  // torchtitan's op policy reruns the routed experts (their grouped products are not saved).
  if (cost->op_recompute_ns) {
    cost->op_recompute_ns =
        std::clamp<TimeNs>(*cost->op_recompute_ns + forward, 0, cost->forward_ns);
  }
  cost->experts_etp_forward_ns = forward;
  cost->experts_etp_backward_ns = backward;
  cost->experts_etp_recosted = true;
}

LayerCost FromProfile(const LayerProfile& p, int etp) {
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
  cost.op_saved_bytes = p.op_saved_bytes;
  cost.op_recompute_ns = p.op_recompute_ns;
  cost.layernorm_bytes = p.layernorm_bytes;
  cost.layernorm_ns = p.layernorm_ns;
  cost.moe_act_bytes = p.moe_act_bytes;
  cost.moe_act_ns = p.moe_act_ns;
  cost.mla_up_proj_bytes = p.mla_up_proj_bytes;
  cost.mla_up_proj_ns = p.mla_up_proj_ns;
  cost.mlp_bytes = p.mlp_bytes;
  cost.mlp_ns = p.mlp_ns;
  cost.tp_comm_bytes = p.tp_comm_bytes;
  cost.tp_forward_collectives = p.tp_forward_collectives.value_or(0);
  cost.tp_backward_collectives = p.tp_backward_collectives.value_or(0);
  RecostExperts(p, etp, &cost);
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

using ProfileIt = std::vector<LayerProfile>::const_iterator;

// The profiles at (t, sp): a sorted run of layer.profiles, perhaps empty.
std::pair<ProfileIt, ProfileIt> ProfilesAt(const Layer& layer, int t, bool sp) {
  auto lower = [](const LayerProfile& p, std::pair<int, bool> key) {
    return std::pair(p.tensor_parallel, p.sequence_parallel) < key;
  };
  auto upper = [](std::pair<int, bool> key, const LayerProfile& p) {
    return key < std::pair(p.tensor_parallel, p.sequence_parallel);
  };
  const std::pair<int, bool> key(t, sp);
  return {std::lower_bound(layer.profiles.begin(), layer.profiles.end(), key, lower),
          std::upper_bound(layer.profiles.begin(), layer.profiles.end(), key, upper)};
}

// `c` with every time and size that grows with the tokens a layer handles scaled by f (the
// workspace aside: callers decide), the weight-gradient part kept within the backward. One list
// for extrapolating past the measured micro-batch sizes and for context parallelism's 1/cp.
LayerCost ScaleTokenCosts(LayerCost c, double f) {
  c.forward_ns = Scale(c.forward_ns, f);
  c.backward_ns = Scale(c.backward_ns, f);
  c.backward_weight_ns = std::min(Scale(c.backward_weight_ns, f), c.backward_ns);
  c.activation_bytes = Scale(c.activation_bytes, f);
  c.output_bytes = Scale(c.output_bytes, f);
  c.checkpoint_bytes = Scale(c.checkpoint_bytes, f);
  c.attention_core_bytes = Scale(c.attention_core_bytes, f);
  c.attention_core_ns = Scale(c.attention_core_ns, f);
  c.weight_grad_bytes = Scale(c.weight_grad_bytes, f);
  c.op_saved_bytes = Scale(c.op_saved_bytes, f);
  c.op_recompute_ns = Scale(c.op_recompute_ns, f);
  c.layernorm_bytes = Scale(c.layernorm_bytes, f);
  c.layernorm_ns = Scale(c.layernorm_ns, f);
  c.moe_act_bytes = Scale(c.moe_act_bytes, f);
  c.moe_act_ns = Scale(c.moe_act_ns, f);
  c.mla_up_proj_bytes = Scale(c.mla_up_proj_bytes, f);
  c.mla_up_proj_ns = Scale(c.mla_up_proj_ns, f);
  c.mlp_bytes = Scale(c.mlp_bytes, f);
  c.mlp_ns = Scale(c.mlp_ns, f);
  c.tp_comm_bytes = Scale(c.tp_comm_bytes, f);
  c.experts_etp_forward_ns = Scale(c.experts_etp_forward_ns, f);
  c.experts_etp_backward_ns = Scale(c.experts_etp_backward_ns, f);
  return c;
}

// CostAt() over one (t, sp)'s profiles [first, last), non-empty.
LayerCost CostIn(ProfileIt first, ProfileIt last, int microbatch_size, int etp) {
  auto it = std::lower_bound(first, last, microbatch_size, [](const LayerProfile& p, int size) {
    return p.microbatch_size < size;
  });
  if (it != last && it->microbatch_size == microbatch_size) return FromProfile(*it, etp);

  if (it == first || it == last) {
    // Outside the measured range: proportional to the nearest measured size.
    const LayerProfile& near = (it == first) ? *first : *(last - 1);
    double f = static_cast<double>(microbatch_size) / near.microbatch_size;
    LayerCost c = ScaleTokenCosts(FromProfile(near, etp), f);
    c.workspace_bytes = Scale(c.workspace_bytes, f);
    c.origin = CostOrigin::kExtrapolated;
    return c;
  }
  const LayerProfile& lo = *(it - 1);
  const LayerProfile& hi = *it;
  double t = static_cast<double>(microbatch_size - lo.microbatch_size) /
             (hi.microbatch_size - lo.microbatch_size);
  LayerCost a = FromProfile(lo, etp);
  LayerCost b = FromProfile(hi, etp);
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
  c.op_saved_bytes = Lerp(a.op_saved_bytes, b.op_saved_bytes, t);
  c.op_recompute_ns = Lerp(a.op_recompute_ns, b.op_recompute_ns, t);
  c.layernorm_bytes = Lerp(a.layernorm_bytes, b.layernorm_bytes, t);
  c.layernorm_ns = Lerp(a.layernorm_ns, b.layernorm_ns, t);
  c.moe_act_bytes = Lerp(a.moe_act_bytes, b.moe_act_bytes, t);
  c.moe_act_ns = Lerp(a.moe_act_ns, b.moe_act_ns, t);
  c.mla_up_proj_bytes = Lerp(a.mla_up_proj_bytes, b.mla_up_proj_bytes, t);
  c.mla_up_proj_ns = Lerp(a.mla_up_proj_ns, b.mla_up_proj_ns, t);
  c.mlp_bytes = Lerp(a.mlp_bytes, b.mlp_bytes, t);
  c.mlp_ns = Lerp(a.mlp_ns, b.mlp_ns, t);
  c.tp_comm_bytes = Lerp(a.tp_comm_bytes, b.tp_comm_bytes, t);
  c.tp_forward_collectives = a.tp_forward_collectives;
  c.tp_backward_collectives = a.tp_backward_collectives;
  c.experts_etp_forward_ns = Lerp(a.experts_etp_forward_ns, b.experts_etp_forward_ns, t);
  c.experts_etp_backward_ns = Lerp(a.experts_etp_backward_ns, b.experts_etp_backward_ns, t);
  c.experts_etp_recosted = a.experts_etp_recosted && b.experts_etp_recosted;
  c.experts_etp_kept = a.experts_etp_kept || b.experts_etp_kept;
  c.origin = CostOrigin::kInterpolated;
  return c;
}

}  // namespace

bool HasTensorParallelCosts(const Layer& layer, int tensor_parallel, bool sequence_parallel) {
  auto [first, last] = ProfilesAt(layer, tensor_parallel, sequence_parallel);
  if (first != last) return true;
  auto [first1, last1] = ProfilesAt(layer, 1, false);
  return first1 != last1;
}

LayerCost ScaleToTensorParallel(const LayerCost& c, int tensor_parallel, bool sequence_parallel) {
  if (tensor_parallel <= 1) return c;
  const double f = 1.0 / tensor_parallel;
  LayerCost s = c;
  s.forward_ns = Scale(c.forward_ns, f);
  s.backward_ns = Scale(c.backward_ns, f);
  s.backward_weight_ns = std::min(Scale(c.backward_weight_ns, f), s.backward_ns);
  s.attention_core_ns = Scale(c.attention_core_ns, f);
  if (s.attention_core_ns) s.attention_core_ns = std::min(*s.attention_core_ns, s.forward_ns);
  Bytes replicated = 0;
  if (!sequence_parallel) {
    replicated =
        std::min<Bytes>(c.activation_bytes,
                        std::llround(kReplicatedActivationPerCollective * c.tp_forward_collectives *
                                     static_cast<double>(c.tp_comm_bytes.value_or(0))));
  }
  s.activation_bytes = replicated + Scale(c.activation_bytes - replicated, f);
  if (sequence_parallel) {
    s.output_bytes = Scale(c.output_bytes, f);
    s.checkpoint_bytes = Scale(c.checkpoint_bytes, f);
  }
  if (s.checkpoint_bytes) s.checkpoint_bytes = std::min(*s.checkpoint_bytes, s.activation_bytes);
  s.attention_core_bytes = Scale(c.attention_core_bytes, f);
  s.weight_grad_bytes = Scale(c.weight_grad_bytes, f);
  s.workspace_bytes = Scale(c.workspace_bytes, f);
  s.op_recompute_ns = Scale(c.op_recompute_ns, f);
  if (s.op_recompute_ns) s.op_recompute_ns = std::min(*s.op_recompute_ns, s.forward_ns);
  s.experts_etp_forward_ns = Scale(c.experts_etp_forward_ns, f);
  s.experts_etp_backward_ns = Scale(c.experts_etp_backward_ns, f);
  if (c.op_saved_bytes) {
    // Like the activations: with sequence parallelism all / t, else the
    // layer's input (its checkpoint) stays whole and the rest divides.
    const Bytes whole =
        sequence_parallel ? 0 : std::min(*c.op_saved_bytes, c.checkpoint_bytes.value_or(0));
    s.op_saved_bytes = std::min(s.activation_bytes, whole + Scale(*c.op_saved_bytes - whole, f));
  }
  // The norms' outputs are whole on every GPU without sequence parallelism
  // (1/t of the tokens with it); the experts' activations divide, and so do
  // MLA's query, key and value and the MLP's inside (its input, whole on every
  // GPU without sequence parallelism, is divided with the rest: an estimate).
  if (sequence_parallel) s.layernorm_bytes = Scale(c.layernorm_bytes, f);
  s.moe_act_bytes = Scale(c.moe_act_bytes, f);
  s.mla_up_proj_bytes = Scale(c.mla_up_proj_bytes, f);
  s.mlp_bytes = Scale(c.mlp_bytes, f);
  for (std::optional<TimeNs>* ns : {&s.layernorm_ns, &s.moe_act_ns, &s.mla_up_proj_ns, &s.mlp_ns}) {
    *ns = Scale(*ns, f);
    if (*ns) **ns = std::min(**ns, s.forward_ns);
  }
  s.tp_scaled = true;
  return s;
}

LayerCost ScaleToContextParallel(const LayerCost& c, int context_parallel) {
  if (context_parallel <= 1) return c;
  // The workspace is per kernel, not per token: it stays.
  return ScaleTokenCosts(c, 1.0 / context_parallel);
}

LayerCost CostAt(const Layer& layer, int microbatch_size, int tensor_parallel,
                 bool sequence_parallel, int expert_tensor_parallel) {
  auto [first, last] = ProfilesAt(layer, tensor_parallel, sequence_parallel);
  const bool measured = first != last;
  if (!measured) std::tie(first, last) = ProfilesAt(layer, 1, false);
  LayerCost c = CostIn(first, last, microbatch_size, expert_tensor_parallel);
  if (!c.tp_comm_bytes && layer.tp_comm_estimate) {
    const TpCommEstimate& e = *layer.tp_comm_estimate;
    c.tp_comm_bytes = e.bytes_per_sample * microbatch_size;
    c.tp_forward_collectives = e.forward_collectives;
    c.tp_backward_collectives = e.backward_collectives;
    c.tp_comm_estimated = true;
  }
  if (!measured) c = ScaleToTensorParallel(c, tensor_parallel, sequence_parallel);
  return c;
}

}  // namespace pipecast
