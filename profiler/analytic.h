// Analytic profiler: estimates a model.json (`pipecast-model/1`) for a
// GPT-style decoder-only transformer from its architecture and a GPU's
// datasheet, for people who have no GPU to measure on.
//
// The model is the usual stack: "embedding" (token table, optional learned
// position table), `layers` blocks "block.0" .. "block.N-1" (pre-layernorm
// attention + MLP), and "lm_head" (final layernorm + vocabulary projection).
// Every number is a closed form, each with its source (docs/profiler.md):
//   - parameters: weight matrices, biases and layernorms counted exactly;
//   - FLOPs: Narayanan et al., SC'21 (Megatron-LM), appendix: 24sh^2 + 4s^2h
//     per block and sample;
//   - activation bytes: Korthikanti et al. 2022, "Reducing Activation
//     Recomputation in Large Transformer Models", sec. 4.1, no parallelism,
//     with eager attention; with FlashAttention (the default) the s x s
//     tensors are not kept and its fp32 logsumexp and RNG state are
//     (Dao-AILab/flash-attention, flash_attn_interface.py);
//   - recomputation and split-backward memory: each layer's checkpoint (its
//     input), the attention core selective recomputation drops, and what the
//     weight-gradient op keeps (Qi et al. 2024, "Zero Bubble Pipeline
//     Parallelism", Table 1: 32sbh of a block's activations);
//   - time (TimeModel::kMatmul, the default): a block as the kernels
//     training runs: each matrix product timed from its (m, n, k) by
//     profiler/matmul_model.h (roofline, wave quantisation over the SMs, a
//     per-GPU table), the attention kernel at its published speed for the
//     sequence length and head size (profiler/attention_rates.h), each
//     memory-bound kernel (norms, activation, residual add and dropout, bias
//     gradients, softmax, cross-entropy, gathers) over a share of HBM
//     bandwidth, every kernel at least kMinKernelSeconds; calibrated in
//     docs/calibration.md. A larger micro-batch fills the GPU better.
//     TimeModel::kFlat is the earlier model: all FLOPs at one share of
//     peak, linear in the micro-batch size.
//   - tensor parallelism of degree t (Megatron-LM; Korthikanti et al. 2022):
//     per-GPU times of the t-times smaller products and per-GPU memory,
//     with or without sequence parallelism (EstimateTransformerAt).
// Every assumption is written into the model's `source`.
//
// Units: FLOPs per sample, bytes, ns (model.h). Stateless functions; safe to
// call from several threads.
#ifndef PIPECAST_PROFILER_ANALYTIC_H_
#define PIPECAST_PROFILER_ANALYTIC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "sim/model.h"

namespace pipecast {

// The architecture. Defaults describe GPT-2/GPT-3 (learned positions, plain
// GeLU MLP, multi-head attention); LLaMA-style models set gated_mlp,
// kv_heads and learned_positions = false.
struct TransformerSpec {
  std::string name;                   // the model's name in model.json
  int layers = 0;                     // transformer blocks
  int hidden = 0;                     // h, the model width
  int heads = 0;                      // a, attention (query) heads; must divide hidden
  int ffn_hidden = 0;                 // MLP width; 0 = 4 * hidden
  int sequence_length = 0;            // s, tokens per sample
  int vocab = 0;                      // V
  bool tied_embeddings = false;       // lm_head reuses the token table: 0 extra parameters
  bool learned_positions = true;      // a learned s x h position table (GPT); false for RoPE
  bool gated_mlp = false;             // SwiGLU: three h x ffn matrices instead of two (LLaMA)
  int kv_heads = 0;                   // key/value heads (GQA); 0 = heads; must divide heads
  std::vector<int> microbatch_sizes;  // sizes to write a profile for; unique
  int global_batch = 0;               // written as the planner's default; 0 = omit

  // OK, or InvalidArgument naming the command-line flag of the first bad
  // field (e.g. "--hidden 100 is not divisible by --heads 3").
  [[nodiscard]] Status Validate() const;

  // ffn_hidden, or 4 * hidden when it is 0.
  int FfnHidden() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  // kv_heads, or heads when it is 0.
  int KvHeads() const { return kv_heads > 0 ? kv_heads : heads; }
};

// Share of the GPU's dense peak reached by the matrix products of training:
// Megatron-LM sustains 44-52% of A100 peak on GPT models from 1.7B to 1T
// parameters (Narayanan et al. SC'21, table 1), so 0.5 is what a tuned
// framework reaches.
inline constexpr double kDefaultMatmulEfficiency = 0.5;
// Share of the HBM datasheet bandwidth reached by the memory-bound kernels
// of training (norms, activations, residual adds, softmax, cross-entropy):
// 0.70, what PyTorch's operators reach on H100 (meta-pytorch/autoparallel's
// compute_estimation.py, fitted to measured runtimes; docs/calibration.md);
// hand-tuned kernels reach 0.90 (Dao-AILab/quack), torch.compile's softmax
// 0.60.
inline constexpr double kDefaultMemoryEfficiency = 0.7;
// The least time one kernel takes in the matmul time model: the launch and
// host cost of one PyTorch operator, 7 us (meta-pytorch/autoparallel's
// compute_estimation.py, fitted on H100; docs/calibration.md).
inline constexpr double kMinKernelSeconds = 7e-6;
// cuBLAS workspace held while a matrix-product layer runs: the cuBLAS
// documentation (cublasSetWorkspace) recommends 32 MiB on Hopper and 4 MiB
// before it; 32 MiB is used for every GPU, erring on the safe side.
inline constexpr Bytes kMatmulWorkspaceBytes = 32 * kMiB;

// How attention runs, and so what it keeps for the backward and how fast it
// is (profiler/attention_rates.h). Every FlashAttention kernel keeps Q, K, V,
// the output, an fp32 logsumexp and an RNG state, no s x s tensors.
enum class Attention {
  kFlash2,  // FlashAttention-2 (CUDA), the default
  kFlash3,  // FlashAttention-3, Hopper only
  kTriton,  // FlashAttention's Triton kernel, as llm-foundry's MPT runs ran it
  kEager,   // softmax output, its dropout mask and output, s x s per head (Korthikanti)
};
// "flash2", "flash3", "triton" or "eager".
const char* AttentionName(Attention attention);
// The Attention a name means ("flash" is FlashAttention-2, the default), or
// InvalidArgument naming --attention.
[[nodiscard]] Result<Attention> ParseAttention(const std::string& name);

// How layer times are worked out (--time-model).
enum class TimeModel {
  kMatmul,  // each product from its shape (profiler/matmul_model.h); the default
  kFlat,    // every FLOP at matmul_efficiency x peak: linear in the micro-batch size
};
// "matmul" or "flat".
const char* TimeModelName(TimeModel model);

struct AnalyticOptions {
  // A cluster preset (sim/cluster.h) or a cluster JSON file; its GPU's
  // peak_tflops and memory_bandwidth_gbps must both be set.
  std::string gpu_preset = "h100-sxm";
  TimeModel time_model = TimeModel::kMatmul;            // --time-model
  double matmul_efficiency = kDefaultMatmulEfficiency;  // in (0, 1]; kFlat only
  double memory_efficiency = kDefaultMemoryEfficiency;  // in (0, 1]
  // Size of one activation or weight element: 2 (bf16, the default), 1
  // (fp8) or 4 (fp32). Dropout masks are 1 byte whatever this is.
  int bytes_per_element = 2;
  Attention attention = Attention::kFlash2;  // --attention

  // OK, or InvalidArgument naming the flag of the first bad field.
  [[nodiscard]] Status Validate() const;
};

// The estimated model: layers "embedding", "block.0".."block.N-1",
// "lm_head", one profile per micro-batch size (sorted), forward_flops per
// layer and flops_per_sample (forward FLOPs of one sample), method
// "analytic", device = options.gpu_preset.
// Fails with InvalidArgument for a bad spec or options (naming the flag),
// NotFound for an unknown GPU preset or unreadable cluster file, and
// FailedPrecondition when the GPU lacks a peak or a bandwidth (e.g. `ideal`)
// or an estimate is past what model.json can hold.
[[nodiscard]] Result<Model> EstimateTransformer(const TransformerSpec& spec,
                                                const AnalyticOptions& options);

// Megatron-LM tensor parallelism of one stage's layers over t GPUs.
struct TensorParallelism {
  int degree = 1;                  // t; must divide heads, kv_heads and ffn_hidden
  bool sequence_parallel = false;  // Korthikanti et al. 2022; only with degree > 1
};

// What one GPU of the t-way group holds and does per layer, besides its
// profile (parameters live on the layer in model.json; at t > 1 they are
// per GPU and written to `source`, docs/profiler.md).
struct TensorParallelCost {
  int64_t parameters = 0;  // per GPU
  // Bytes of the full activation one TP collective moves: B*s*b*h per sample
  // (multiply by b), and the collectives per micro-batch in all-reduce
  // equivalents (an all-gather + reduce-scatter pair with sequence
  // parallelism): block 2 and 2; embedding 1 and 0; lm_head 0 and 1.
  double comm_bytes_per_sample = 0;
  int forward_collectives = 0;
  int backward_collectives = 0;
};

// The model as one GPU of a t-way tensor-parallel group runs it: per-GPU
// parameters (layer.parameters), times (TP communication excluded) and
// memory; layer forward_flops stay the whole layer's. `costs`, when given,
// receives one entry per layer. degree 1 without sequence parallelism equals
// EstimateTransformer.
// Fails as EstimateTransformer does, and with InvalidArgument naming
// --tensor-parallel when t does not divide the heads, key/value heads or MLP
// width, or sequence parallelism is asked for at t = 1.
[[nodiscard]] Result<Model> EstimateTransformerAt(const TransformerSpec& spec,
                                                  const AnalyticOptions& options,
                                                  const TensorParallelism& tp,
                                                  std::vector<TensorParallelCost>* costs = nullptr);

// The model.json text of the estimate with profiles for every degree in
// `degrees` (1 is always written; t > 1 with sequence_parallel false and
// true), each t > 1 profile carrying tensor_parallel, sequence_parallel,
// tp_comm_bytes, tp_forward_collectives and tp_backward_collectives
// (docs/formats.md), and per-GPU parameters in source.tensor_parallel.
// degrees {1} gives exactly ModelToJson(EstimateTransformer(...)).
// Fails as EstimateTransformerAt does for any degree, and with
// InvalidArgument naming --tensor-parallel for a degree listed twice or < 1.
[[nodiscard]] Result<std::string> EstimateTransformerJson(const TransformerSpec& spec,
                                                          const AnalyticOptions& options,
                                                          const std::vector<int>& degrees);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_ANALYTIC_H_
