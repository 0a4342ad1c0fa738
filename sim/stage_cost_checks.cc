// The checks a model passes before it is costed at a layout: that expert,
// context and tensor parallelism find what they need in the model (experts,
// sequence, attention shape, heads, t profiles and tp_comm_bytes) and that
// its costs are possible on the GPU (CheckCostsWithinPeak). Each returns the
// InvalidArgument users see, naming the flag and the fix; the arithmetic they
// guard is in stage_costs.cc, the notes on estimated figures in
// stage_cost_notes.cc.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>

#include "sim/stage_costs.h"

namespace pipecast {

Status CheckExpertParallelCosts(const Model& model, int expert_parallel,
                                int expert_tensor_parallel) {
  if (expert_parallel <= 1 && expert_tensor_parallel <= 1) return Status::Ok();
  const Layer* first = nullptr;
  for (const Layer& l : model.layers) {
    if (!l.moe) continue;
    if (first == nullptr) first = &l;
    if (l.moe->experts % expert_parallel != 0) {
      return Status::InvalidArgument(fmt::format(
          "--expert-parallel {} does not divide the {} experts of layer {}: each GPU of the "
          "expert-parallel group holds experts / ep whole experts; use a divisor of {}",
          expert_parallel, l.moe->experts, l.name, l.moe->experts));
    }
  }
  if (first == nullptr) {
    return Status::InvalidArgument(fmt::format(
        "{} {}: the model has no mixture-of-experts layer (no layer gives `moe` in model.json); "
        "leave it at 1, or profile an MoE model with `profiler analytic --hf-config` or "
        "--experts",
        expert_parallel > 1 ? "--expert-parallel" : "--expert-tensor-parallel",
        expert_parallel > 1 ? expert_parallel : expert_tensor_parallel));
  }
  // The tokens each GPU dispatches follow from the sequence: none without it.
  if (ExpertTokensPerGpu(model, StageCostOptions{}) <= 0) {
    return Status::InvalidArgument(fmt::format(
        "{} {}: the model gives no sequence_length, so the tokens each GPU dispatches are "
        "unknown; add sequence_length to model.json or profile it with `profiler analytic --seq`",
        expert_parallel > 1 ? "--expert-parallel" : "--expert-tensor-parallel",
        expert_parallel > 1 ? expert_parallel : expert_tensor_parallel));
  }
  return Status::Ok();
}

Status CheckContextParallelCosts(const Model& model, int context_parallel) {
  const int cp = context_parallel;
  if (cp <= 1) return Status::Ok();
  int64_t s = model.sequence_length.value_or(0);
  if (s <= 0 && model.source.architecture) s = model.source.architecture->sequence_length;
  if (s <= 0) {
    return Status::InvalidArgument(fmt::format(
        "--context-parallel {}: the model gives no sequence_length to split over the {} GPUs; "
        "add sequence_length to model.json or profile it with `profiler analytic --seq`",
        cp, cp));
  }
  if (s % (2 * cp) != 0) {
    return Status::InvalidArgument(fmt::format(
        "--context-parallel {}: the sequence of {} tokens does not split into 2 x cp = {} equal "
        "chunks (causal load balancing gives each GPU chunks i and 2cp-1-i); use a cp whose 2 x "
        "cp divides {}",
        cp, s, 2 * cp, s));
  }
  const bool any = std::any_of(model.layers.begin(), model.layers.end(),
                               [](const Layer& l) { return l.cp_attention.has_value(); });
  if (!any) {
    return Status::InvalidArgument(fmt::format(
        "--context-parallel {}: the model gives no attention shape (its key-value bytes and "
        "FlashAttention speed), so the K/V exchange cannot be timed; use a model from `profiler "
        "analytic` with a FlashAttention kernel (--attention flash2|flash3|triton)",
        cp));
  }
  return Status::Ok();
}

Status CheckTensorParallelHeads(const Model& model, int tensor_parallel) {
  if (!model.source.architecture || tensor_parallel <= 1) return Status::Ok();
  const ModelArchitecture& a = *model.source.architecture;
  for (const auto& [count, what] : {std::pair<int64_t, const char*>{a.heads, "attention heads"},
                                    {a.kv_heads, "key-value heads"}}) {
    if (count > 0 && count % tensor_parallel != 0) {
      return Status::InvalidArgument(fmt::format(
          "--tensor-parallel {} does not divide the model's {} {} (source.architecture): each "
          "GPU of a tensor-parallel group holds whole heads; use a t that divides {}",
          tensor_parallel, count, what, count));
    }
  }
  return Status::Ok();
}

Status CheckCostsWithinPeak(const Model& model, const GpuSpec& gpu, const std::string& gpu_label,
                            const std::string& model_gpu) {
  const double peak_tflops = std::max(gpu.peak_tflops, gpu.peak_fp8_tflops);
  if (peak_tflops <= 0) return Status::Ok();
  const std::string peak_name = gpu.peak_fp8_tflops > gpu.peak_tflops ? "dense FP8" : "dense bf16";
  const std::string made_for =
      model_gpu.empty() ? "check the model's times and FLOPs"
                        : fmt::format(
                              "the model's costs were made for {}: re-estimate them for this GPU "
                              "(profiler analytic --gpu {}) or run on --cluster {}",
                              model_gpu, gpu_label, model_gpu);
  auto refuse = [&](const std::string& what, double tflops) {
    return Status::InvalidArgument(fmt::format(
        "{} implies {:.4g} TFLOP/s per GPU, above the {:g} TFLOP/s {} peak of {} ({}): costs "
        "faster than the GPU would give an MFU of {:.0f}%; {}",
        what, tflops, peak_tflops, peak_name, gpu_label, gpu.name,
        100 * tflops / (gpu.peak_tflops > 0 ? gpu.peak_tflops : peak_tflops), made_for));
  };
  // Per layer, where the layer gives its FLOPs.
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const Layer& layer = model.layers[l];
    if (!layer.forward_flops || *layer.forward_flops <= 0) continue;
    for (const LayerProfile& p : layer.profiles) {
      if (p.forward_ns <= 0) continue;
      const double tflops = *layer.forward_flops * p.microbatch_size /
                            std::max(1, p.tensor_parallel) /
                            (static_cast<double>(p.forward_ns) * 1e-9) / 1e12;
      if (tflops > peak_tflops) {
        return refuse(fmt::format("layer {} ('{}') at micro-batch size {} and t = {}: {:.4g} "
                                  "GFLOP in a {:.4g} us forward",
                                  l, layer.name, p.microbatch_size, p.tensor_parallel,
                                  *layer.forward_flops * p.microbatch_size / 1e9,
                                  static_cast<double>(p.forward_ns) / 1e3),
                      tflops);
      }
    }
  }
  // The whole model, where only it gives its FLOPs: the layers' forwards at
  // t = 1 and the first layer's first micro-batch size, where every layer
  // has that profile.
  const std::optional<double> flops = model.ForwardFlopsPerSample();
  if (!flops || *flops <= 0 || model.layers.empty() || model.layers[0].profiles.empty()) {
    return Status::Ok();
  }
  const int size = model.layers[0].profiles[0].microbatch_size;
  double forward_ns = 0;
  for (const Layer& layer : model.layers) {
    const auto it =
        std::find_if(layer.profiles.begin(), layer.profiles.end(), [&](const LayerProfile& p) {
          return p.tensor_parallel == 1 && !p.sequence_parallel && p.microbatch_size == size;
        });
    if (it == layer.profiles.end()) return Status::Ok();
    forward_ns += static_cast<double>(it->forward_ns);
  }
  if (forward_ns <= 0) return Status::Ok();
  const double tflops = *flops * size / (forward_ns * 1e-9) / 1e12;
  if (tflops > peak_tflops) {
    return refuse(fmt::format("the model's forward ({:.4g} GFLOP per sample at micro-batch size "
                              "{} in {:.4g} us over its layers)",
                              *flops / 1e9, size, forward_ns / 1e3),
                  tflops);
  }
  return Status::Ok();
}

Status CheckTensorParallelCosts(const Model& model, int tensor_parallel, bool sequence_parallel) {
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const Layer& layer = model.layers[l];
    if (!HasTensorParallelCosts(layer, tensor_parallel, sequence_parallel)) {
      return Status::InvalidArgument(fmt::format(
          "layer {} ('{}') has no profiles at tensor_parallel {}{} nor at tensor_parallel 1 to "
          "scale from: add t = 1 profiles (profiler analytic --tensor-parallel 1,...) or run at a "
          "profiled --tensor-parallel",
          l, layer.name, tensor_parallel, sequence_parallel ? " with sequence_parallel" : ""));
    }
    if (tensor_parallel > 1 &&
        !CostAt(layer, 1, tensor_parallel, sequence_parallel).tp_comm_bytes.has_value()) {
      return Status::InvalidArgument(fmt::format(
          "layer {} ('{}') gives no tp_comm_bytes, so its tensor-parallel communication at "
          "--tensor-parallel {} is unknown: re-profile with `profiler analytic --tensor-parallel "
          "1,2,4,8` or add tp_comm_bytes, tp_forward_collectives and tp_backward_collectives to "
          "its profiles (docs/formats.md)",
          l, layer.name, tensor_parallel));
    }
  }
  return Status::Ok();
}

}  // namespace pipecast
