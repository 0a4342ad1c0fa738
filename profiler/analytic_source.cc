// The analytic estimate (profiler/analytic.h): the model's `source`, the
// formulas, limitations and rates an estimate was made with, worded for the
// variant in use (docs/profiler.md derives every formula).
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "profiler/internal/analytic_cost.h"

namespace pipecast::internal {
namespace {

using json = nlohmann::json;

// The block's parameter and FLOP counts (shape-specific text replaces them
// where ShapeFormulas gives it).
void AddCountFormulas(const TransformerSpec& spec, std::map<std::string, std::string>* formulas) {
  const std::string mlp_params = spec.gated_mlp ? "3*h*f + 2*f + h (SwiGLU gate, up and down "
                                                  "matrices; biases counted though LLaMA has "
                                                  "none: under 0.01% of the block)"
                                                : "2*h*f + f + h (two matrices with biases)";
  const std::string mlp_flops = spec.gated_mlp ? "3*h*f" : "2*h*f";
  (*formulas)["symbols"] =
      "s sequence length, b micro-batch size, h hidden, a heads, h_kv = kv_heads*h/a, f ffn "
      "hidden, V vocabulary, B bytes per element";
  (*formulas)["parameter_formula"] =
      "block = h*(h + 2*h_kv) + (h + 2*h_kv) + h^2 + h [QKV and output projections with "
      "biases] + " +
      mlp_params +
      " + 4*h [two layernorms]; = 12*h^2 + 13*h for f = 4*h, h_kv = h, as in Narayanan et al., "
      "SC'21, sec. 5.1 (P = 12*l*h^2*(1 + 13/(12*h) + (V + s)/(12*l*h)) for the whole model)";
  (*formulas)["flops_formula"] =
      "forward, per sample (Narayanan et al., 'Efficient Large-Scale Language Model Training on "
      "GPU Clusters Using Megatron-LM', SC'21, appendix 'Floating-point operations': "
      "24*s*h^2 + 4*s^2*h per block, generalised to f and h_kv): block 2*s*(2*h^2 + 2*h*h_kv + " +
      mlp_flops +
      ") [products with a weight] + 4*s^2*h [scores Q*K^T and scores*V, full s x s, no causal "
      "saving]; lm_head 2*s*h*V; embedding 0 (a gather). Backward = 2 x forward; its "
      "weight-gradient part (backward_weight_us) = the forward products with a weight, the "
      "input-gradient part is the rest";
}

// What a block keeps for its backward, and what selective recomputation
// drops, under the attention in use.
void AddActivationFormulas(const TransformerSpec& spec, Attention attention,
                           std::map<std::string, std::string>* formulas) {
  const std::string mlp_bytes = spec.gated_mlp ? "B*(h + 2*f + f) + h [MLP: fc1 input, gate and "
                                                 "up outputs, down-projection input; mask]"
                                               : "B*(h + f + f) + h [MLP: fc1 input, GeLU input, "
                                                 "fc2 input; mask]";
  const std::string kept_by_blocks =
      "s*b*(B*(3*h + 2*h_kv) + h [attention: QKV input, Q, K, V, projection input; 1-byte "
      "dropout mask] + " +
      mlp_bytes + " + 2*B*h [two layernorm inputs])";
  if (attention == Attention::kEager) {
    (*formulas)["activation_formula"] =
        "block, bytes kept per micro-batch, eager attention (Korthikanti et al., 'Reducing "
        "Activation Recomputation in Large Transformer Models', 2022, sec. 4.1 and Table 2: "
        "s*b*h*(34 + 5*a*s/h) for 16-bit, f = 4*h, no tensor or sequence parallelism, no "
        "recomputation, dropout on, attention scores materialised), generalised to B, f and "
        "h_kv: " +
        kept_by_blocks +
        " + (2*B + 1)*a*s^2*b [softmax output, its dropout mask and dropout output]; "
        "output_bytes = B*s*b*h";
    (*formulas)["attention_core_formula"] =
        "attention_core_bytes = (2*B + 1)*a*s^2*b (the s x s tensors selective recomputation "
        "drops: 5*a*s^2*b for 16-bit, Korthikanti et al. 2022, sec. 5 and Table 2); "
        "attention_core_us = the forward of the core: its products (Q*K^T and scores*V) and "
        "its softmax and dropout kernels";
  } else {
    (*formulas)["activation_formula"] =
        "block, bytes kept per micro-batch, FlashAttention (Korthikanti et al. 2022, sec. 4.1, "
        "without the 5*a*s^2*b of the s x s softmax output, dropout mask and dropout output, "
        "which FlashAttention recomputes in its backward; plus what it saves for the backward "
        "besides Q, K, V and the output: the fp32 logsumexp of each query row and head, "
        "softmax_lse [b, a, s] float32, and a 2 x int64 RNG state, per "
        "Dao-AILab/flash-attention flash_attn_interface.py ctx.save_for_backward and "
        "FlashAttention-2 sec. 3.1.1): s*b*h*34 + 4*a*s*b + 16 for 16-bit, f = 4*h; "
        "generalised to B, f and h_kv: " +
        kept_by_blocks + " + 4*a*s*b [logsumexp] + 16 [RNG state]; output_bytes = B*s*b*h";
    (*formulas)["attention_core_formula"] =
        "attention_core_bytes = 0 and attention_core_us = 0: FlashAttention keeps no s x s "
        "tensors, so selective recomputation has nothing to drop";
  }
}

// What full, per-op and split-backward recomputation keep and rerun.
void AddRecomputeFormulas(std::map<std::string, std::string>* formulas) {
  (*formulas)["checkpoint_formula"] =
      "checkpoint_bytes (what full recomputation keeps, Megatron-LM --recompute-granularity full "
      "with one layer per checkpoint; Korthikanti et al. 2022 Table 2: 2*s*b*h per layer for "
      "16-bit): block B*s*b*h (its input); embedding and lm_head are not recomputed, so their "
      "checkpoint_bytes = activation_bytes";
  (*formulas)["op_formula"] =
      "op_saved_bytes and op_recompute_us (per-op recomputation, torchtitan's SelectiveAC 'op' "
      "policy, torchtitan/distributed/activation_checkpoint.py at pytorch/torchtitan@1f02964: "
      "the outputs of matmuls and of the attention kernel are saved, except every second matmul): "
      "block op_saved_bytes = B*s*b*h [its input] + B*s*b*(outputs of the 1st, 3rd, ... matmul "
      "in the order the model calls them, one per projection as torchtitan's models do: q, k, v, "
      "o, gate, up, down (a plain MLP fc1, fc2; MLA q_a, q_b, kv_a, kv_b, o; an MoE block's "
      "router gate, then its shared experts' gate, up, down)) + "
      "B*s*b*a*d_v [attention output] + 4*a*s*b [flash logsumexp] or 5*a*s^2*b [eager s x s "
      "tensors]; op_recompute_us = the forward of the 2nd, 4th, ... matmul, of the routed "
      "experts' products (torch._grouped_mm, neither counted nor saved; models/moe.py at "
      "pytorch/torchtitan@8a2686c4a) and of every element-wise forward kernel (norms, rotary, "
      "activation, residual adds, dropout, the router's and the permutations'); at ep > 1 the "
      "simulator adds the all-to-alls' outputs, which torchtitan's DeepSeek-V3 and Llama 4 lists "
      "save (2*k*h*B per token); embedding "
      "and lm_head are not wrapped: op_saved_bytes = activation_bytes, op_recompute_us = 0";
  (*formulas)["recompute_modules_formula"] =
      "layernorm_bytes/us, moe_act_bytes/us, mla_up_proj_bytes/us and mlp_bytes/us (Megatron-LM "
      "--recompute-granularity selective "
      "--recompute-modules, NVIDIA/Megatron-LM@d98e8a64 transformer_layer.py and "
      "moe/experts.py, output-discarding checkpoints): block layernorm_bytes = 2*s*b*h*B [the "
      "input and pre-MLP norms' outputs, the QKV and MLP inputs; replicated, /t with sequence "
      "parallelism; FP8: the bytes the products keep], layernorm_us = the forward of those two "
      "norm kernels; moe_act_bytes = s*b*k*f_e*B/t [the routed experts' activation output, fc2's "
      "input, at the busiest expert's share], moe_act_us = the forward of the experts' "
      "activation kernel; mla_up_proj_bytes = s*b*B*(2*a*(d_nope + d_rope) + a*d_v)/t [MLA's "
      "query, key and value, the up-projections' and rotary's outputs the attention keeps; "
      "multi_latent_attention.py, output-discarding], mla_up_proj_us = the forward of q_b (or q) "
      "and kv_b with their FP8 casts and the rotary kernel; mlp_bytes = s*b*h*B_in [fc1's input, "
      "replicated, /t with sequence parallelism] + s*b*(fc1 outputs*B + f*B_in)/t [a dense "
      "block's MLP inside; transformer_layer.py, a plain checkpoint, only in a block that is not "
      "MoE], mlp_us = the forward of fc1 and fc2 with their FP8 casts, the pre-MLP norm (fused "
      "into fc1) and the activation (the rerun's tensor-parallel collectives not charged); 0 "
      "where a layer has no such module (embedding, lm_head, moe_act or mlp in a block without "
      "routed experts or without a dense MLP, mla_up_proj without latent attention)";
  (*formulas)["weight_grad_formula"] =
      "weight_grad_bytes (what the weight-gradient op W keeps after the input-gradient op, Qi et "
      "al., 'Zero Bubble Pipeline Parallelism', ICLR 2024, Table 1: 32*s*b*h per block for "
      "16-bit, f = 4*h): block s*b*B*(6*h + 2*h_kv + f + fc1 outputs) [inputs of the QKV, "
      "output-projection, fc1 and fc2 products, and the gradients of their outputs]; embedding "
      "= its activation_bytes (its backward is all weight gradient); lm_head s*b*B*(h + V) "
      "[projection input, logits gradient]";
}

// How FLOPs and bytes become time, under the time model in use.
std::string TimeFormula(TimeModel time_model) {
  const std::string elementwise =
      "element-wise bytes / (memory_bandwidth_gbps*1e9*memory_efficiency); forward element-wise "
      "bytes = 2 x activation bytes (each tensor kept for the backward is written once and read "
      "once by a memory-bound kernel: layernorm, GeLU, softmax, dropout, residual add)";
  if (time_model == TimeModel::kFlat) {
    return "time model 'flat': time = FLOPs / (peak_tflops*1e12*matmul_efficiency) + " +
           elementwise + "; backward = 2 x forward; linear in b";
  }
  return "time model 'matmul' (docs/calibration.md, docs/profiler.md 'Time'): a layer is the "
         "kernels training runs, each at least 7 us (kMinKernelSeconds: one operator's launch and "
         "host cost). Products (QKV [b*s, h + 2*h_kv, h], projection [b*s, h, h], fc1 [b*s, fc1 "
         "outputs, h], fc2 [b*s, h, f], lm_head [b*s, V, h]; eager attention: b*a batched [s, s, "
         "h/a] and [s, h/a, s]) take gemm(m, n, k) = max(waves * 2*128*256*(k + 128) / "
         "(peak/SMs * mainloop_efficiency), B*(m*k + k*n + m*n) / HBM rate), waves = ceil(tiles "
         "/ SMs), tiles = ceil(m/128)*ceil(n/256) (or the transposed tiling, whichever has fewer "
         "waves); the backward has per product the input gradient gemm(m, k, n) and the weight "
         "gradient gemm(k, n, m). FlashAttention (causal: half of 4*s^2*h per sample forward, "
         "2.5x that backward) runs at its published TFLOP/s for s and h/a (attention_kernel). "
         "Memory-bound kernels move their bytes at memory_bandwidth_gbps*1e9*memory_efficiency: "
         "forward two norms (read, write), two residual adds with dropout (read 2, write 1 and a "
         "1-byte mask), the activation (GeLU read f, write f; SwiGLU read 2f, write f), rotary on "
         "Q and K without learned positions, eager attention's softmax and its dropout; backward "
         "their gradients (norm: read 2, write 1; activation: GeLU 3f, SwiGLU 5f; dropout: read "
         "2, write 1; the two branches' gradients added), the bias gradients of a GPT block "
         "(reductions over the tokens, part of the weight gradient), FlashAttention's dO*O row "
         "sums; embedding: gather and dropout forward, dropout and the table gradient backward "
         "(8*s*b + tables*s*b*h*B, plus 2*V*h*B per call); lm_head: the final norm and the "
         "cross-entropy (read the logits, write the fp32 softmax; backward read it, write the "
         "logits' gradient). backward_weight_us: the weight-gradient products and kernels. Not "
         "linear in b: larger micro-batches fill the SMs better";
}

// The embedding, the output head and the workspace.
void AddOuterLayerFormulas(const TransformerSpec& spec,
                           std::map<std::string, std::string>* formulas) {
  (*formulas)["embedding_formula"] =
      std::string("parameters V*h") + (spec.learned_positions ? " + s*h (learned positions)" : "") +
      "; FLOPs 0; forward traffic: 8*s*b bytes of int64 token ids, one B-byte row per token from "
      "each table, their sum written, dropout (read, write, 1-byte mask); activation = 8*s*b "
      "(token ids) + s*b*h (dropout mask); output_bytes = B*s*b*h; backward = 2 x forward, all "
      "of it weight gradient (token ids have no gradient)";
  (*formulas)["lm_head_formula"] =
      std::string("final layernorm 2*h parameters + projection ") +
      (spec.tied_embeddings ? "0 (tied: the token table is counted in the embedding)" : "V*h") +
      "; forward FLOPs 2*s*h*V per sample; activation = s*b*(2*B*h [layernorm and projection "
      "inputs] + B*V [logits] + 4*V [fp32 softmax the cross-entropy loss keeps]); output_bytes "
      "0 (last layer)";
  (*formulas)["workspace_formula"] =
      "32 MiB cuBLAS workspace on every block and on lm_head (what the cuBLAS documentation, "
      "cublasSetWorkspace, recommends for Hopper; 4 MiB would do before Hopper); 0 on the "
      "embedding";
}

// The assumption strings of `source`, worded for the variant in use.
std::map<std::string, std::string> Formulas(const TransformerSpec& spec,
                                            const AnalyticOptions& options) {
  std::map<std::string, std::string> formulas;
  AddCountFormulas(spec, &formulas);
  AddActivationFormulas(spec, options.attention, &formulas);
  AddRecomputeFormulas(&formulas);
  formulas["time_formula"] = TimeFormula(options.time_model);
  AddOuterLayerFormulas(spec, &formulas);
  if (std::optional<ShapeFormulaText> text = ShapeFormulas(spec)) {
    formulas["parameter_formula"] = text->parameters;
    formulas["flops_formula"] = text->flops;
    formulas["activation_formula"] += text->activation_note;
  }
  return formulas;
}

// JSON text of a value, as ModelSource::details holds it.
std::string JsonText(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// What an analytic estimate leaves out, worded for the time model in use.
json Limitations(const AnalyticOptions& options) {
  return {
      "an estimate from datasheet numbers, not a measurement; measure on the GPU when one is "
      "available (profiler cupti, planned)",
      options.time_model == TimeModel::kFlat
          ? "time model 'flat': linear in the micro-batch size; small micro-batches run below "
            "matmul_efficiency on real GPUs"
          : "time model 'matmul': calibrated against published measurements (docs/calibration.md: "
            "GEMM and FlashAttention benchmarks, MosaicML llm-foundry's MPT runs); fused kernels "
            "beyond FlashAttention and bias epilogues (fused norms, Transformer Engine) are not "
            "modelled",
      "profiles without tensor_parallel are for one GPU per stage (t = 1); profiler analytic "
      "--tensor-parallel adds per-GPU profiles for t > 1 (source.tensor_parallel); no context "
      "parallelism; recomputation and split-backward memory are given per layer (checkpoint_bytes, "
      "attention_core_bytes, weight_grad_bytes) for "
      "the simulator to apply",
      "communication and the optimizer step are not in the per-layer times",
      "tied embeddings: Megatron-LM with pipeline parallelism keeps a copy of the table on the "
      "last stage; this file counts the table once, in the embedding"};
}

// The GPU's rates the times were made with: its datasheet figures, the GEMM
// table and the attention kernel (matmul model) or the flat efficiency.
void AddRateDetails(const TransformerSpec& spec, const AnalyticOptions& options, const GpuSpec& gpu,
                    const Rates& rates, std::map<std::string, std::string>* details) {
  const GemmPreset& preset = rates.gemm.preset;
  (*details)["gpu"] = JsonText(gpu.name);
  (*details)["peak_tflops"] = JsonText(gpu.peak_tflops);
  (*details)["memory_bandwidth_gbps"] = JsonText(gpu.memory_bandwidth_gbps);
  (*details)["time_model"] = JsonText(TimeModelName(options.time_model));
  if (options.time_model == TimeModel::kFlat) {
    (*details)["matmul_efficiency"] = JsonText(options.matmul_efficiency);
  } else {
    (*details)["gemm_table"] = JsonText(json{{"gpu", preset.gpu},
                                             {"sms", preset.sms},
                                             {"tile", {kTileRows, kTileCols}},
                                             {"tile_overhead_k", kTileOverheadK},
                                             {"mainloop_efficiency", preset.mainloop_efficiency},
                                             {"source", preset.source}});
    (*details)["min_kernel_us"] = JsonText(std::llround(kMinKernelSeconds * 1e9) / 1e3);
    if (options.attention != Attention::kEager) {
      (*details)["attention_kernel"] =
          JsonText(json{{"kernel", AttentionName(options.attention)},
                        {"causal", true},
                        {"head_dim", AttentionHeadSize(spec)},
                        {"forward_tflops", rates.flash.forward_flops_per_s / 1e12},
                        {"backward_tflops", rates.flash.backward_flops_per_s / 1e12},
                        {"table", rates.flash.table},
                        {"source",
                         "published benchmark figures, interpolated in s and head size "
                         "(docs/calibration.md 'Attention')"}});
    }
  }
}

// FP8 estimates only: what runs in FP8, at what rate, and the casts.
void AddFp8Details(const AnalyticOptions& options, const GpuSpec& gpu, const Rates& rates,
                   std::map<std::string, std::string>* details) {
  if (options.fp8 == Fp8Recipe::kNone) return;  // bf16 files stay as they were
  const GemmPreset& fp8 = rates.fp8_gemm.preset;
  (*details)["precision"] = JsonText("fp8");
  (*details)["fp8_recipe"] = JsonText(Fp8RecipeName(options.fp8));
  (*details)["fp8"] = JsonText(
      json{{"recipe", Fp8RecipeName(options.fp8)},
           {"fp8_ops",
            "the blocks' weight products (QKV, output projection, MLP): forward, input gradient "
            "and weight gradient"},
           {"bf16_ops",
            "attention (FlashAttention), norms, activation, embedding, output head and loss, as "
            "Transformer Engine and torchao keep them"},
           {"peak_fp8_tflops", gpu.peak_fp8_tflops},
           {"mainloop_efficiency", fp8.mainloop_efficiency},
           {"source", fp8.source},
           {"quantisation",
            "per product a cast of its input (forward) and of its output's gradient (backward), "
            "memory-bound: read bf16, write FP8 and its transpose with scales; current scaling "
            "adds an amax pass; the weights' casts run once per step (the simulator's optimizer "
            "step)"},
           {"kept_for_backward",
            "the products' FP8 inputs (1 byte per element plus scales) instead of bf16"}});
}

// MoE estimates only: the expert counts, the imbalance and how experts run.
void AddMoeDetails(const TransformerSpec& spec, const AnalyticOptions& options,
                   std::map<std::string, std::string>* details) {
  if (spec.moe.MoeBlocks(spec.layers) == 0) return;  // dense files stay as they were
  const ParameterCount count = CountParameters(spec);
  json moe =
      json{{"moe_blocks", spec.moe.MoeBlocks(spec.layers)},
           {"parameters_total", count.total},
           {"parameters_active", count.active},
           {"imbalance", options.moe_imbalance},
           {"imbalance_source",
            "the busiest expert's tokens over the mean: default 1.08 from the per-layer expert "
            "loads published in shawntan/scattermoe#10 (docs/profiler.md 'Mixture of "
            "experts')"},
           {"routed_experts",
            "one grouped GEMM per expert product over k x s x imbalance token copies, as one GPU "
            "holding every expert runs it; permutation and unpermutation memory-bound; the "
            "all-to-all of expert parallelism is the simulator's"}};
  if (options.moe_dispatcher == ExpertDispatcher::kAllToAll) {
    moe["dispatcher"] =
        "alltoall: Megatron-LM's all-to-all dispatcher, the received rows sorted by local expert "
        "after the dispatch and back before the combine (two more passes of k rows each way)";
  } else if (options.moe_dispatcher == ExpertDispatcher::kAllGather) {
    moe["dispatcher"] =
        "allgather: Megatron-LM's all-gather dispatcher, the gathered rows of the local experts "
        "permuted once each side (costed as deepep); its all-gather and reduce-scatter are the "
        "simulator's";
  }
  if (options.moe_capacity_factor) {
    moe["capacity_factor"] = *options.moe_capacity_factor;
    moe["pad_to_capacity"] = options.moe_pad_to_capacity;
    moe["expert_imbalance"] = options.ExpertImbalance();
    moe["capacity_source"] =
        options.moe_pad_to_capacity
            ? "Megatron-LM's --moe-expert-capacity-factor with "
              "--moe-pad-expert-input-to-capacity: every expert computes exactly capacity_factor "
              "x the mean tokens; the routed experts are sized for expert_imbalance = "
              "capacity_factor"
            : "Megatron-LM's --moe-expert-capacity-factor: tokens past capacity_factor x the mean "
              "are dropped; the routed experts are sized for expert_imbalance = min(imbalance, "
              "capacity_factor)";
  }
  (*details)["moe"] = JsonText(moe);
}

}  // namespace

ModelSource MakeSource(const TransformerSpec& spec, const AnalyticOptions& options,
                       const GpuSpec& gpu, std::string device, const Rates& rates) {
  ModelSource source;
  source.method = "analytic";
  source.device = std::move(device);
  for (auto& [key, text] : Formulas(spec, options)) {
    source.details[key] = JsonText(text);
  }
  source.details["attention"] = JsonText(AttentionName(options.attention));
  if (options.loss == Loss::kPytorch) {
    source.details["loss"] = JsonText(
        "pytorch: cross_entropy(logits.float()); lm_head keeps s*b*4*V/t [fp32 log-softmax], "
        "not the bf16 logits, and holds 2 x s*b*4*V/t more at its backward's start [nll_loss's "
        "gradient and log_softmax's] as its workspace_bytes");
  } else if (options.loss == Loss::kCompiled) {
    source.details["loss"] = JsonText(
        "compiled: torch.compile(cross_entropy(logits.float())); lm_head keeps s*b*B*V/t [the "
        "bf16 logits, saved by the min-cut partitioner] + s*b*8 [each token's fp32 max and "
        "log-sum-exp], not the fp32 log-softmax, and holds s*b*B*V/t more at its backward "
        "[the bf16 gradient one fused kernel writes] as its workspace_bytes");
  }
  if (options.elementwise != Elementwise::kFused) {
    source.details["elementwise"] = JsonText(
        "eager: PyTorch eager mode's kernels, op by op (torchtitan's Llama code, "
        "profiler/eager_kernels.cc): RMSNorm 36 B/element forward in 8 kernels and 92 backward "
        "in 16, rotary 20 B/element each way over Q and K, SwiGLU 10 B per MLP element forward "
        "and 18 backward, repeat_kv's K and V copies, SDPA output's contiguous copy, and with "
        "--loss pytorch the logits' fp32 upcast");
  }
  source.details["architecture"] = ArchitectureJson(spec);
  if (!spec.from.empty()) source.details["architecture_from"] = JsonText(spec.from);
  source.architecture = ArchitectureOf(spec);
  source.details["limitations"] = JsonText(Limitations(options));
  AddRateDetails(spec, options, gpu, rates, &source.details);
  source.details["memory_efficiency"] = JsonText(options.memory_efficiency);
  source.details["bytes_per_element"] = JsonText(options.bytes_per_element);
  AddFp8Details(options, gpu, rates, &source.details);
  AddMoeDetails(spec, options, &source.details);
  source.details["workspace_bytes"] = JsonText(kMatmulWorkspaceBytes);
  return source;
}

}  // namespace pipecast::internal
