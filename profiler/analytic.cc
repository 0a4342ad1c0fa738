// The analytic estimate (profiler/analytic.h): its options' checks, and the
// model put together from its parts (profiler/internal/analytic_cost.h).
// Each layer's cost is first worked out for one sample (SampleCost, closed
// forms only), then scaled to every requested micro-batch size.
// docs/profiler.md derives every formula.
#include "profiler/analytic.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "formats/formats.h"
#include "profiler/attention_rates.h"
#include "profiler/internal/analytic_cost.h"
#include "profiler/layer_shapes.h"
#include "profiler/matmul_model.h"
#include "sim/cluster.h"

namespace pipecast {
namespace {

using internal::AttentionHeadSize;
using internal::BlockCost;
using internal::Dims;
using internal::EmbeddingCost;
using internal::HeadCost;
using internal::kFp8ElementBytes;
using internal::kMaxFileFlops;
using internal::MakeSource;
using internal::Rates;
using internal::SampleCost;
using internal::Split;
using internal::ToLayer;

FlashKernel FlashKernelOf(Attention attention) {
  switch (attention) {
    case Attention::kFlash3:
      return FlashKernel::kFlash3;
    case Attention::kTriton:
      return FlashKernel::kTriton;
    case Attention::kSdpaFlash2:
      return FlashKernel::kSdpaFlash2;
    default:
      return FlashKernel::kFlash2;
  }
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
  if (spec.moe.experts > 0) {
    PIPECAST_RETURN_IF_ERROR(divides(spec.moe.expert_ffn, "--expert-ffn", "expert's MLP width"));
    const int shared = spec.moe.shared_expert_ffn > 0
                           ? spec.moe.shared_expert_ffn
                           : spec.moe.expert_ffn * spec.moe.shared_experts;
    PIPECAST_RETURN_IF_ERROR(divides(shared, "--shared-expert-ffn", "shared experts' MLP width"));
    // Every block may be an MoE block: the dense width matters only where one is dense.
    if (spec.moe.MoeBlocks(spec.layers) == spec.layers) return Status::Ok();
  }
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

// The rates the estimate times its kernels at: the flat rates, the GEMM
// table, FP8's (checked against the GPU) and the attention kernel's.
Result<Rates> RatesFor(const TransformerSpec& spec, const AnalyticOptions& options,
                       const GpuSpec& gpu) {
  const double bytes_per_s = gpu.memory_bandwidth_gbps * 1e9 * options.memory_efficiency;
  Rates rates{.flops_per_s = gpu.peak_tflops * 1e12 * options.matmul_efficiency,
              .bytes_per_s = bytes_per_s,
              .model = options.time_model,
              .gemm = GemmRates{.peak_flops_per_s = gpu.peak_tflops * 1e12,
                                .hbm_bytes_per_s = bytes_per_s,
                                .element_bytes = static_cast<double>(options.bytes_per_element),
                                .preset = GemmPresetFor(gpu)},
              .fp8_gemm = {},
              .fp8 = options.fp8,
              .flash = {}};
  if (options.fp8 != Fp8Recipe::kNone) {
    // LoadGpu has checked the bf16 peak, so a GPU without an FP8 peak is refused here.
    PIPECAST_RETURN_IF_ERROR(CheckFp8Support(options.fp8, gpu));
    rates.fp8_gemm = GemmRates{.peak_flops_per_s = gpu.peak_fp8_tflops * 1e12,
                               .hbm_bytes_per_s = bytes_per_s,
                               .element_bytes = kFp8ElementBytes,
                               .preset = Fp8GemmPresetFor(gpu)};
  }
  if (options.attention != Attention::kEager) {
    PIPECAST_ASSIGN_OR_RETURN(
        rates.flash, FlashRatesFor(gpu, FlashKernelOf(options.attention), spec.sequence_length,
                                   AttentionHeadSize(spec), /*causal=*/true));
  }
  return rates;
}

// The layers (embedding, blocks, lm_head) at the micro-batch sizes, and each
// layer's tensor-parallel cost where `costs` is given.
Status AddLayers(const TransformerSpec& spec, const AnalyticOptions& options,
                 const TensorParallelism& tp, const Rates& rates, Model* model,
                 std::vector<TensorParallelCost>* costs) {
  const Dims dims{.s = static_cast<double>(spec.sequence_length),
                  .h = static_cast<double>(spec.hidden),
                  .v = static_cast<double>(spec.vocab),
                  .e = static_cast<double>(options.bytes_per_element)};
  const Split split{.t = static_cast<double>(tp.degree), .sp = tp.sequence_parallel};
  std::vector<int> sizes = spec.microbatch_sizes;
  std::sort(sizes.begin(), sizes.end());

  const ModelShapes shapes = ShapesOf(spec, tp.degree);
  const ModelShapes whole = tp.degree == 1 ? shapes : ShapesOf(spec, 1);
  const SampleCost embedding_cost = EmbeddingCost(spec, shapes.embedding, dims, split);
  const SampleCost head_cost =
      HeadCost(spec, shapes.head, dims, split, options.loss, options.elementwise);
  PIPECAST_ASSIGN_OR_RETURN(Layer embedding, ToLayer("embedding", embedding_cost, rates, sizes));
  model->layers.push_back(std::move(embedding));
  // Blocks of one kind (window, experts) have the same cost: estimate each
  // kind once.
  std::vector<SampleCost> kind_costs;
  std::vector<Layer> kind_layers;
  for (size_t k = 0; k < shapes.block_kinds.size(); ++k) {
    kind_costs.push_back(BlockCost(spec, shapes.block_kinds[k], whole.block_kinds[k], dims,
                                   options.attention, split, options.fp8, options.ExpertImbalance(),
                                   options.moe_dispatcher, options.elementwise));
    PIPECAST_ASSIGN_OR_RETURN(Layer block, ToLayer("block.0", kind_costs.back(), rates, sizes));
    if (block.moe && options.moe_capacity_factor) {  // what the all-to-all dispatcher sends
      block.moe->capacity_factor = *options.moe_capacity_factor;
      block.moe->pad_to_capacity = options.moe_pad_to_capacity;
    }
    kind_layers.push_back(std::move(block));
  }
  for (int i = 0; i < spec.layers; ++i) {
    model->layers.push_back(kind_layers[shapes.kind_of_block[i]]);
    model->layers.back().name = fmt::format("block.{}", i);
  }
  PIPECAST_ASSIGN_OR_RETURN(Layer head, ToLayer("lm_head", head_cost, rates, sizes));
  model->layers.push_back(std::move(head));
  if (costs != nullptr) {
    costs->clear();
    auto cost = [](const SampleCost& c) {
      TensorParallelCost out = c.tp;
      out.parameters = c.parameters;
      return out;
    };
    costs->push_back(cost(embedding_cost));
    for (int i = 0; i < spec.layers; ++i)
      costs->push_back(cost(kind_costs[shapes.kind_of_block[i]]));
    costs->push_back(cost(head_cost));
  }
  return Status::Ok();
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
    case Attention::kSdpaFlash2:
      return "sdpa-flash2";
    default:
      return "flash2";
  }
}

Result<Attention> ParseAttention(const std::string& name) {
  if (name == "flash" || name == "flash2") return Attention::kFlash2;
  if (name == "flash3") return Attention::kFlash3;
  if (name == "triton") return Attention::kTriton;
  if (name == "eager") return Attention::kEager;
  if (name == "sdpa-flash2") return Attention::kSdpaFlash2;
  return Status::InvalidArgument(
      fmt::format("--attention {}: use flash2 (FlashAttention-2; also 'flash'), flash3 "
                  "(FlashAttention-3, Hopper), triton (FlashAttention's Triton kernel, as "
                  "llm-foundry ran it), eager or sdpa-flash2 (PyTorch SDPA's flash backend)",
                  name));
}

const char* LossName(Loss loss) {
  switch (loss) {
    case Loss::kPytorch:
      return "pytorch";
    case Loss::kCompiled:
      return "compiled";
    case Loss::kFused:
      break;
  }
  return "fused";
}

Result<Loss> ParseLoss(const std::string& name) {
  for (Loss l : {Loss::kFused, Loss::kPytorch, Loss::kCompiled}) {
    if (name == LossName(l)) return l;
  }
  return Status::InvalidArgument(fmt::format(
      "--loss is '{}': expected fused (Megatron-LM's vocabulary-parallel cross-entropy, the "
      "default), pytorch (torch.nn.functional.cross_entropy on fp32 logits, as torchtitan runs "
      "it) or compiled (the same under torch.compile, as torchtitan runs it with "
      "--training.compile)",
      name));
}

const char* ElementwiseName(Elementwise elementwise) {
  return elementwise == Elementwise::kEager ? "eager" : "fused";
}

Result<Elementwise> ParseElementwise(const std::string& name) {
  for (Elementwise e : {Elementwise::kFused, Elementwise::kEager}) {
    if (name == ElementwiseName(e)) return e;
  }
  return Status::InvalidArgument(fmt::format(
      "--elementwise is '{}': expected fused (one kernel per norm, activation and rotary "
      "embedding, the default) or eager (PyTorch eager mode, op by op, as torchtitan runs "
      "without torch.compile)",
      name));
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
  if (fp8 != Fp8Recipe::kNone && time_model == TimeModel::kFlat) {
    return Status::InvalidArgument(
        "--precision fp8 needs --time-model matmul: the flat model has one rate for every FLOP");
  }
  if (fp8 != Fp8Recipe::kNone && bytes_per_element != 2) {
    return Status::InvalidArgument(fmt::format(
        "--precision fp8 with --bytes-per-element {}: FP8 training keeps bf16 outside the weight "
        "products; leave --bytes-per-element at 2",
        bytes_per_element));
  }
  if (!(moe_imbalance >= 1 && moe_imbalance <= kMaxMoeImbalance)) {
    return Status::InvalidArgument(fmt::format(
        "--moe-imbalance {} must be from 1 (every expert gets the mean) to {}: the busiest "
        "expert's tokens over the mean",
        moe_imbalance, kMaxMoeImbalance));
  }
  if (moe_capacity_factor &&
      !(*moe_capacity_factor > 0 && *moe_capacity_factor <= kMaxMoeImbalance)) {
    return Status::InvalidArgument(fmt::format(
        "--moe-capacity-factor {} must be above 0 and at most {}: each expert's token capacity "
        "over the mean (Megatron-LM's --moe-expert-capacity-factor)",
        *moe_capacity_factor, kMaxMoeImbalance));
  }
  if (moe_pad_to_capacity && !moe_capacity_factor) {
    return Status::InvalidArgument(
        "--moe-pad-to-capacity needs --moe-capacity-factor: the capacity each expert is padded "
        "to");
  }
  if (bytes_per_element != 1 && bytes_per_element != 2 && bytes_per_element != 4) {
    return Status::InvalidArgument(fmt::format(
        "--bytes-per-element {} must be 1 (fp8), 2 (bf16) or 4 (fp32)", bytes_per_element));
  }
  return Status::Ok();
}

double AnalyticOptions::ExpertImbalance() const {
  if (!moe_capacity_factor) return moe_imbalance;
  return moe_pad_to_capacity ? *moe_capacity_factor : std::min(moe_imbalance, *moe_capacity_factor);
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
  PIPECAST_ASSIGN_OR_RETURN(GpuSpec gpu, LoadGpu(options.gpu_preset, &device));
  PIPECAST_ASSIGN_OR_RETURN(const Rates rates, RatesFor(spec, options, gpu));

  Model model;
  model.name = spec.name;
  model.source = MakeSource(spec, options, gpu, device, rates);
  model.dtype = DtypeName(options.bytes_per_element);
  model.sequence_length = spec.sequence_length;
  if (spec.global_batch > 0) model.global_batch = spec.global_batch;
  PIPECAST_RETURN_IF_ERROR(AddLayers(spec, options, tp, rates, &model, costs));

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
