// StageCostTable::Notes: what the stage costs tell the user about figures
// that were estimated rather than measured (costs at an unprofiled
// micro-batch size or t, tensor-parallel collectives from the model's
// source, context parallelism's exchange) and about memory the model does not
// give for the chosen recomputation or split backward. Each step adds its
// notes in the order users have always read them; the arithmetic is in
// stage_costs.cc.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/units.h"
#include "sim/stage_costs.h"

namespace pipecast {

std::vector<std::string> StageCostTable::Notes() const {
  std::vector<std::string> notes;
  AddCostOriginNotes(&notes);
  AddTensorParallelNotes(&notes);
  AddContextParallelNote(&notes);
  AddExpertDispatcherNote(&notes);
  AddExpertTensorParallelNote(&notes);
  AddRoutedExpertsNote(&notes);
  AddRecomputeNotes(&notes);
  AddSplitBackwardNote(&notes);
  return notes;
}

void StageCostTable::AddCostOriginNotes(std::vector<std::string>* notes) const {
  int interpolated = 0, extrapolated = 0;
  for (const LayerCost& c : layers_) {
    interpolated += c.origin == CostOrigin::kInterpolated;
    extrapolated += c.origin == CostOrigin::kExtrapolated;
  }
  const int n = NumLayers();
  const int size = options_.microbatch_size;
  if (interpolated > 0) {
    notes->push_back(fmt::format(
        "micro-batch size {} was not measured for {} of {} layers: their costs are interpolated "
        "linearly between the nearest measured sizes",
        size, interpolated, n));
  }
  if (extrapolated > 0) {
    notes->push_back(fmt::format(
        "micro-batch size {} is outside the measured sizes for {} of {} layers: their costs are "
        "extrapolated in proportion to the nearest measured size",
        size, extrapolated, n));
  }
}

void StageCostTable::AddTensorParallelNotes(std::vector<std::string>* notes) const {
  const Prefix& all = prefix_.back();
  const int n = NumLayers();
  const int t = options_.tensor_parallel;
  if (all.tp_scaled > 0) {
    notes->push_back(fmt::format(
        "tensor_parallel {}{} was not profiled for {} of {} layers: their costs are estimated "
        "from the t = 1 profiles (times / t; weights, gradients and optimizer state / t; "
        "activations by Korthikanti et al. 2022, {}); re-profile with `profiler analytic "
        "--tensor-parallel` to replace the estimate",
        t, options_.sequence_parallel ? " with sequence parallelism" : "", all.tp_scaled, n,
        options_.sequence_parallel ? "all of them / t" : "only the part not replicated / t"));
  }
  if (t > 1 && all.tp_comm_estimated > 0) {
    notes->push_back(
        fmt::format("{} of {} layers give no tp_comm_bytes: their tensor-parallel collectives are "
                    "estimated from the model's source (b*s*h*bytes per element; {})",
                    all.tp_comm_estimated, n, tp_estimate_from_));
  }
}

void StageCostTable::AddContextParallelNote(std::vector<std::string>* notes) const {
  if (options_.context_parallel <= 1 || !cp_comm_) return;
  const int cp = options_.context_parallel;
  const CpAttentionComm& k = *cp_comm_;
  notes->push_back(fmt::format(
      "context parallelism cp {} ({}): each GPU holds s / {} of every sample's tokens; the "
      "layers' times and activations are the cp = 1 ones / {} (causal attention balanced "
      "over {} chunks); each attention layer exchanges {:.2f} MiB K/V blocks per micro-batch, "
      "{:.1f} us on the link in the forward ({:.1f} us exposed) and {:.1f} us in the backward "
      "({:.1f} us exposed), estimated from {}; the kernel runs once per K/V block and its "
      "partial outputs are merged ({}): {:.1f} us forward and {:.1f} us backward over HBM{}",
      cp, CpAlgorithmName(options_.cp_algorithm), cp, cp, 2 * cp,
      static_cast<double>(k.kv_block_bytes) / (1 << 20), NsToUs(k.forward_comm_ns),
      NsToUs(k.forward_exposed_ns), NsToUs(k.backward_comm_ns), NsToUs(k.backward_exposed_ns),
      cp_from_,
      options_.cp_algorithm == CpAlgorithm::kAllGather
          ? "PyTorch's context-parallel SDPA, eager fp32 merges"
          : "Transformer Engine's ring, fused corrections",
      NsToUs(cp_merge_ns_.first), NsToUs(cp_merge_ns_.second),
      options_.hbm_bytes_per_s > 0 ? "" : " (not charged: the GPU's HBM bandwidth is unknown)"));
}

void StageCostTable::AddExpertDispatcherNote(std::vector<std::string>* notes) const {
  if (options_.expert_parallel <= 1 || !ep_comm_ ||
      options_.ep_dispatcher == ExpertDispatcher::kDeepEp) {
    return;
  }
  const ExpertAllToAll& a = *ep_comm_;
  if (options_.ep_dispatcher == ExpertDispatcher::kAllGather) {
    notes->push_back(fmt::format(
        "--ep-dispatcher allgather: Megatron-LM's all-gather dispatcher moves every token of the "
        "etp x ep group whatever its routing, {:.0f} bytes of hidden states per token each way "
        "({:.0f} over NVLink, {:.0f} over the network) and {:.0f} of routing map and probs in "
        "the dispatch; each MoE layer's dispatch (three all-gathers) takes {:.1f} us and its "
        "combine (a reduce-scatter) {:.1f} us per micro-batch; its gathered buffers, {} bytes, "
        "are the layer's workspace (docs/simulator.md \"Expert parallelism\")",
        a.bytes_per_token, a.nvlink_bytes_per_token, a.network_bytes_per_token,
        a.routing_bytes_per_token, NsToUs(a.dispatch_ns), NsToUs(a.combine_ns), a.workspace_bytes));
    return;
  }
  notes->push_back(fmt::format(
      "--ep-dispatcher alltoall: Megatron-LM's NCCL all-to-all sends one row per token and "
      "expert, {:.0f} bytes per token each way ({:.0f} over NVLink, {:.0f} over the network, "
      "the rest to the GPU itself); each MoE layer's dispatch and combine take {:.1f} us each "
      "per micro-batch at NCCL's link rates (docs/simulator.md \"Expert parallelism\")",
      a.bytes_per_token, a.nvlink_bytes_per_token, a.network_bytes_per_token,
      NsToUs(a.dispatch_ns)));
}

void StageCostTable::AddExpertTensorParallelNote(std::vector<std::string>* notes) const {
  const int etp = options_.expert_tensor_parallel;
  if (etp <= 1 || !ep_comm_) return;
  const ExpertAllToAll& a = *ep_comm_;
  std::string comm;
  switch (options_.ep_dispatcher) {
    case ExpertDispatcher::kAllToAll:
      comm = fmt::format(
          "each MoE layer all-gathers the rows it received and their probs over the {} GPUs "
          "({:.0f} bytes per token dispatched, {:.1f} us) and reduce-scatters the experts' "
          "partial outputs ({:.1f} us) per micro-batch, the backward both again, on the compute "
          "stream (--ep-overlap does not hide them)",
          etp, a.etp_bytes_per_token, NsToUs(a.etp_gather_ns), NsToUs(a.etp_scatter_ns));
      break;
    case ExpertDispatcher::kDeepEp:
      comm = fmt::format(
          "DeepEP (Megatron-LM's flex dispatcher) sends each token to the {} GPUs of every rank "
          "holding one of its experts and sums their partial outputs in the combine, {:.0f} "
          "bytes per token each way",
          etp, a.bytes_per_token);
      break;
    case ExpertDispatcher::kAllGather:
      comm = fmt::format("the all-gather dispatcher's group is the {} x {} GPUs", etp,
                         options_.expert_parallel);
      break;
  }
  notes->push_back(fmt::format(
      "--expert-tensor-parallel {}: {} (docs/simulator.md \"Expert parallelism\")", etp, comm));
}

void StageCostTable::AddRoutedExpertsNote(std::vector<std::string>* notes) const {
  int moe = 0, recosted = 0, kept = 0, grouped = 0;
  const LayerCost* first = nullptr;  // the first re-costed MoE layer
  const LayerCost* with_groups = nullptr;
  for (const LayerCost& c : layers_) {
    if (c.experts_etp_recosted && first == nullptr) first = &c;
    if (c.expert_groups_forward_ns > 0 && with_groups == nullptr) with_groups = &c;
    recosted += c.experts_etp_recosted;
    kept += c.experts_etp_kept;
    grouped += c.expert_groups_forward_ns > 0;
  }
  moe = moe_layer_count_;
  if (moe == 0) return;
  const int etp = std::max(1, options_.expert_tensor_parallel);
  const int t = options_.tensor_parallel;
  const int ep = std::max(1, options_.expert_parallel);
  if (etp != t) {
    if (recosted == moe && first != nullptr) {
      notes->push_back(fmt::format(
          "the routed experts run at etp {}'s shapes ({}/{} x the rows of etp = t, 1/{} of each "
          "expert's width), re-costed from the profile's routed_experts: {:+.1f} us forward and "
          "{:+.1f} us backward per MoE layer and micro-batch against the profile's shapes, those "
          "of etp = t = {} (docs/simulator.md \"Expert parallelism\")",
          etp, etp, t, etp, NsToUs(first->experts_etp_forward_ns),
          NsToUs(first->experts_etp_backward_ns), t));
    } else if (kept > 0) {
      notes->push_back(fmt::format(
          "{} of {} MoE layers give no routed_experts time at etp {} (the profiler times etp 1, "
          "2, 4, 8 and t where they divide each expert's width): their routed experts keep the "
          "profile's shapes, those of etp = t = {}, the same FLOPs per GPU",
          kept, moe, etp, t));
    } else if (recosted < moe) {
      notes->push_back(fmt::format(
          "{} of {} MoE layers give no routed_experts (a model.json from before they were "
          "written): their routed experts keep the profile's time, the same FLOPs per GPU at the "
          "shapes of etp = t = {} rather than etp {}'s; re-profile (profiler analytic) to re-cost "
          "them at etp",
          moe - recosted, moe, t, etp));
    }
  }
  if (with_groups != nullptr) {
    notes->push_back(fmt::format(
        "the routed experts' grouped GEMMs pay a fixed cost per local expert and call "
        "(moe.group_gemm_us, TransformerEngine#2045's H100 bf16 fit, taken for FP8 too): 2 calls "
        "forward, 2 input-gradient and 2 weight-gradient x {} local experts (experts / ep {}) = "
        "{:.1f} us per MoE layer and micro-batch",
        first_local_experts_, ep,
        NsToUs(with_groups->expert_groups_forward_ns + with_groups->expert_groups_input_ns +
               with_groups->expert_groups_weight_ns)));
  }
  if (grouped < moe) {
    notes->push_back(fmt::format(
        "{} of {} MoE layers give no moe.group_gemm_us (a model.json from before it was "
        "written): no per-expert cost of their grouped GEMMs is charged; re-profile (profiler "
        "analytic) to charge it",
        moe - grouped, moe));
  }
}

void StageCostTable::AddRecomputeNotes(std::vector<std::string>* notes) const {
  const Prefix& all = prefix_.back();
  const int n = NumLayers();
  if (ChunkedMode() && all.no_checkpoint > 0) {
    notes->push_back(fmt::format(
        "{} of {} layers give no checkpoint_bytes: --recompute {} takes each such layer's input "
        "(the previous layer's output_bytes) as its checkpoint and counts it as a block; "
        "re-profile to get the layers' checkpoints",
        all.no_checkpoint, n, RecomputeSpec(options_.recompute, options_.recompute_layers)));
  }
  if (options_.recompute == Recompute::kOp && all.no_op > 0) {
    notes->push_back(fmt::format(
        "{} of {} layers give no op_saved_bytes and op_recompute_us: per-op recomputation leaves "
        "them as off (all their activations kept, no rerun); re-profile (profiler analytic) to "
        "get what the per-op policy keeps",
        all.no_op, n));
  }
  if (options_.recompute == Recompute::kFull && !ChunkedMode() && all.no_checkpoint > 0) {
    notes->push_back(fmt::format(
        "{} of {} layers give no checkpoint_bytes: full recomputation is estimated by the "
        "whole-stage rule (each stage keeps only its input and rebuilds all its layers' "
        "activations at once in the backward); re-profile to get layer-by-layer figures",
        all.no_checkpoint, n));
  }
  if (options_.recompute != Recompute::kSelective) return;
  const unsigned modules = options_.recompute_layers.modules;
  if (modules != 0) {
    const std::string listed = RecomputeModulesName(modules);
    if (all.no_attention_core > 0) {
      notes->push_back(
          fmt::format("{} of {} layers do not give what --recompute-modules {} drops and reruns "
                      "(layernorm_bytes/us, moe_act_bytes/us, mla_up_proj_bytes/us, mlp_bytes/us, "
                      "attention_core_bytes): they are left as off; "
                      "re-profile (profiler analytic) to get the modules' figures",
                      all.no_attention_core, n, listed));
    } else if (all.attention_core_bytes == 0) {
      notes->push_back(fmt::format(
          "--recompute-modules {} changes nothing here: no layer keeps an output of those "
          "modules (e.g. moe_act in a dense model, mla_up_proj without latent attention, mlp "
          "in an MoE model, core_attn with FlashAttention)",
          listed));
    }
    return;
  }
  if (all.no_attention_core > 0) {
    notes->push_back(fmt::format(
        "{} of {} layers give no attention_core_bytes: selective recomputation is estimated "
        "as off (nothing dropped, no extra time); re-profile to get the attention core's bytes",
        all.no_attention_core, n));
  } else if (all.attention_core_bytes == 0) {
    notes->push_back(
        "selective recomputation changes nothing here: the model's attention keeps no s x s "
        "tensors (attention_core_bytes 0, e.g. FlashAttention), so there is nothing to "
        "recompute");
  }
}

void StageCostTable::AddSplitBackwardNote(std::vector<std::string>* notes) const {
  const Prefix& all = prefix_.back();
  if (options_.split_backward && all.no_weight_grad > 0) {
    notes->push_back(fmt::format(
        "{} of {} layers give no weight_grad_bytes: the split backward is estimated to keep "
        "the whole activation until W ends (the input-gradient op frees nothing)",
        all.no_weight_grad, NumLayers()));
  }
}

}  // namespace pipecast
