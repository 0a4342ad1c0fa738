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
//   - time: matrix-product FLOPs over a share of peak TFLOP/s plus the
//     element-wise traffic over a share of HBM bandwidth.
// The estimate is linear in the micro-batch size (no small-batch
// inefficiency). Every assumption is written into the model's `source`.
//
// Units: FLOPs per sample, bytes, ns (model.h). Stateless functions; safe to
// call from several threads.
#ifndef PIPECAST_PROFILER_ANALYTIC_H_
#define PIPECAST_PROFILER_ANALYTIC_H_

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
// Share of the HBM datasheet bandwidth reached by element-wise kernels
// (layernorm, GeLU, softmax, dropout): streaming kernels such as BabelStream
// reach about 80-90% of datasheet bandwidth on A100 and H100.
inline constexpr double kDefaultMemoryEfficiency = 0.8;
// cuBLAS workspace held while a matrix-product layer runs: the cuBLAS
// documentation (cublasSetWorkspace) recommends 32 MiB on Hopper and 4 MiB
// before it; 32 MiB is used for every GPU, erring on the safe side.
inline constexpr Bytes kMatmulWorkspaceBytes = 32 * kMiB;

// How attention keeps its tensors for the backward.
enum class Attention {
  kFlash,  // FlashAttention: Q, K, V, output, fp32 logsumexp, RNG state; no s x s tensors
  kEager,  // softmax output, its dropout mask and output, s x s per head (Korthikanti)
};
// "flash" or "eager".
const char* AttentionName(Attention attention);

struct AnalyticOptions {
  // A cluster preset (sim/cluster.h) or a cluster JSON file; its GPU's
  // peak_tflops and memory_bandwidth_gbps must both be set.
  std::string gpu_preset = "h100-sxm";
  double matmul_efficiency = kDefaultMatmulEfficiency;  // in (0, 1]
  double memory_efficiency = kDefaultMemoryEfficiency;  // in (0, 1]
  // Size of one activation or weight element: 2 (bf16, the default), 1
  // (fp8) or 4 (fp32). Dropout masks are 1 byte whatever this is.
  int bytes_per_element = 2;
  Attention attention = Attention::kFlash;  // --attention

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

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_ANALYTIC_H_
