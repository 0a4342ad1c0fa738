// The stage costs' expert parts (sim/stage_costs.h): an MoE layer's expert-parallel
// exchange (AddExpertParallelComm: the dispatcher's all-to-alls or all-gathers, etp's
// collectives, the rows kept for the weight gradient) and its grouped GEMMs' fixed cost
// (AddExpertGroupCost), the all-to-all bytes an op policy saves, and the halves of an overlapped
// F&B pair (OverlappedPairNs: the layered rule of the expert all-to-alls, LayeredPairHalvesNs, or
// the whole-compute rule). The table itself, the per-layer tensor- and context-parallel costs
// and the stage sums are in stage_costs.cc.
#include <algorithm>
#include <cmath>

#include "sim/collectives.h"
#include "sim/stage_costs.h"

namespace pipecast {

namespace {

TimeNs Scaled(TimeNs d, double factor) {
  if (factor == 1.0) return d;
  return static_cast<TimeNs>(std::llround(static_cast<double>(d) * factor));
}

}  // namespace

// The layered rule (LayeredPairNs): what the two-stream replay of the pair's layers saves
// against running them in turn, shared between the halves in proportion to their all-to-alls.
PairHalvesNs LayeredPairHalvesNs(const StageCost& f, const StageCost& b, OpKind b_kind,
                                 const PairOverlap& overlap) {
  const bool b_weight = b_kind == OpKind::kBackward;
  TimeNs in_turn = 0, f_comm = 0, b_comm = 0;
  for (const PairLayerCost& l : f.pair_layers) {
    in_turn += l.pre_forward + l.expert_forward + l.dispatch + l.combine;
    f_comm += l.dispatch + l.combine;
  }
  for (const PairLayerCost& l : b.pair_layers) {
    in_turn += l.pre_backward + l.expert_backward + l.dispatch + l.combine;
    if (b_weight) in_turn += l.pre_backward_weight + l.expert_backward_weight;
    b_comm += l.dispatch + l.combine;
  }
  const TimeNs hidden = std::max<TimeNs>(
      0,
      in_turn - LayeredPairNs(f.pair_layers, b.pair_layers, b_weight,
                              overlap.combined_1f1b ? kCombined1F1BComputeLossBesideDeepEp : -1));
  const TimeNs comm = f_comm + b_comm;
  const TimeNs f_hidden = comm > 0 ? static_cast<TimeNs>(std::llround(static_cast<double>(hidden) *
                                                                      static_cast<double>(f_comm) /
                                                                      static_cast<double>(comm)))
                                   : 0;
  return PairHalvesNs{
      .forward = Scaled(f.DurationNs(OpKind::kForward) - f_hidden, overlap.factor),
      .backward = Scaled(b.DurationNs(b_kind) - (hidden - f_hidden), overlap.factor)};
}

PairHalvesNs OverlappedPairNs(const StageCost& f, const StageCost& b, OpKind b_kind,
                              const PairOverlap& overlap) {
  if (overlap.expert_comm && !f.pair_layers.empty() && !b.pair_layers.empty() &&
      b_kind != OpKind::kBackwardWeight) {
    return LayeredPairHalvesNs(f, b, b_kind, overlap);
  }
  const TimeNs f_ns = f.DurationNs(OpKind::kForward);
  const TimeNs f_comm = f.PairCommNs(OpKind::kForward, overlap.expert_comm);
  const TimeNs b_ns = b.DurationNs(b_kind), b_comm = b.PairCommNs(b_kind, overlap.expert_comm);
  return PairHalvesNs{.forward = Scaled(f_ns - std::min(f_comm, b_ns - b_comm), overlap.factor),
                      .backward = Scaled(b_ns - std::min(b_comm, f_ns - f_comm), overlap.factor)};
}

TimeNs ActionDurationNs(const std::vector<StageCost>& costs, const std::vector<Action>& list,
                        size_t i, const PairOverlap& overlap) {
  const Action& a = list[i];
  if (!a.overlapped) return costs[a.stage].DurationNs(a.kind);
  const bool forward = a.kind == OpKind::kForward;
  const Action& f = forward ? a : list[i - 1];
  const Action& b = forward ? list[i + 1] : a;
  const PairHalvesNs halves = OverlappedPairNs(costs[f.stage], costs[b.stage], b.kind, overlap);
  return forward ? halves.forward : halves.backward;
}

Bytes OpSavedAllToAllBytes(const MoeRouting& routing, double tokens) {
  return std::llround(2.0 * tokens * routing.top_k * static_cast<double>(routing.hidden) *
                      routing.bytes_per_element);
}

// Per local expert, the grouped GEMMs' fixed cost (moe.group_gemm_us): each of the routed
// experts' two grouped products (fc1, fc2) runs one grouped call in the forward, one for its input
// gradient and one for its weight gradient (Transformer Engine's GroupedLinear, one
// general_grouped_gemm each: NVIDIA/TransformerEngine @ 0069563f,
// transformer_engine/pytorch/module/grouped_linear.py), over the experts / ep experts each GPU
// holds (Megatron-LM's num_local_experts; etp splits each of them, not their count). Per
// micro-batch whatever its size; after cp's 1/cp (a call's cost is not per token).
void StageCostTable::AddExpertGroupCost(const pipecast::Layer& layer, LayerCost* c) const {
  if (!layer.moe || !layer.moe->group_gemm_ns || layer.moe->experts <= 0) return;
  const int64_t local = layer.moe->experts / std::max(1, options_.expert_parallel);
  const TimeNs two_calls = 2 * local * *layer.moe->group_gemm_ns;
  c->expert_groups_forward_ns = two_calls;
  c->expert_groups_input_ns = two_calls;
  c->forward_ns += two_calls;
  c->backward_ns += 2 * two_calls;
  if (c->has_backward_split) {
    c->expert_groups_weight_ns = two_calls;
    c->backward_weight_ns += two_calls;
  }
  // torchtitan's op policy reruns the routed experts' forward (not saved).
  if (c->op_recompute_ns) *c->op_recompute_ns += two_calls;
}

void StageCostTable::AddExpertParallelComm(const pipecast::Layer& layer, double tokens,
                                           LayerCost* c) {
  if (!layer.moe) return;
  const MoeRouting& m = *layer.moe;
  const StageCostOptions& o = options_;
  const ExpertAllToAll a =
      ExpertAllToAllOf(o.ep_intra_node, o.ep_inter_node, o.ep_network_gbps_per_gpu,
                       ExpertGroupOf(o.expert_parallel, o.expert_tensor_parallel, o.gpus_per_node),
                       m.experts, m.top_k, m.expert_groups, m.topk_groups, m.hidden,
                       m.bytes_per_element, tokens, o.ep_dispatcher, ExpertRowsPerRoute(m));
  if (!ep_comm_) ep_comm_ = a;
  // The all-gather dispatcher's gathered buffers, held while the layer runs.
  c->workspace_bytes += a.workspace_bytes;
  // etp's whole rows kept for the weight gradient: fc1's input, then fc2's output gradient too.
  c->activation_bytes += a.etp_kept_bytes;
  if (c->weight_grad_bytes) *c->weight_grad_bytes += 2 * a.etp_kept_bytes;
  c->ep_dispatch_ns = a.dispatch_ns;
  c->ep_combine_ns = a.combine_ns;
  // The routed experts' share of the layer's compute (the layered overlap's
  // "mlp" node): their forward FLOPs, 2 x tokens x k x one expert's
  // parameters, over the layer's; time taken as proportional to FLOPs.
  if (layer.forward_flops && *layer.forward_flops > 0 && model_sequence_ > 0 && m.experts > 0) {
    const double expert_flops =
        2.0 * model_sequence_ * m.top_k * static_cast<double>(m.expert_parameters) / m.experts;
    c->expert_compute_share = std::min(1.0, expert_flops / *layer.forward_flops);
  }
  // The forward dispatches and combines; the backward runs their adjoints
  // (the same two ways, or the all-gather dispatcher's three, sim/collectives.h).
  c->ep_forward_ns = a.dispatch_ns + a.combine_ns;
  c->ep_backward_ns = a.backward_ns;
  // etp's all-gather and reduce-scatter (the all-to-all dispatcher): the backward runs each
  // collective's adjoint (a reduce-scatter for the all-gather and back), the same bytes.
  c->etp_forward_ns = a.etp_gather_ns + a.etp_scatter_ns;
  c->etp_backward_ns = a.etp_gather_ns + a.etp_scatter_ns;
  c->forward_ns += c->ep_forward_ns + c->etp_forward_ns;
  c->backward_ns += c->ep_backward_ns + c->etp_backward_ns;
}

}  // namespace pipecast
