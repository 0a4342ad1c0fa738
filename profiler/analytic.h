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
//   - shapes: each layer's products, attention core and parameters come
//     from profiler/layer_shapes.h (head widths, grouped-query and
//     multi-head latent attention, norms, biases, sliding windows, mixture
//     of experts: the router, the routed experts as one grouped GEMM over
//     their token copies at the busiest expert's share, the permutation's
//     memory-bound kernels, shared experts; docs/profiler.md "Mixture of
//     experts");
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
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "sim/collectives.h"
#include "sim/memory.h"
#include "sim/model.h"

namespace pipecast {

// How a block normalises its input.
enum class NormKind {
  kLayerNorm,  // scale and shift: 2 x width parameters (GPT-2, GPT-NeoX, Falcon)
  kRmsNorm,    // scale only: width parameters (LLaMA, Mistral, Qwen, Gemma, Phi-3, DeepSeek)
};
// "layernorm" or "rmsnorm".
const char* NormKindName(NormKind kind);

// Multi-head latent attention (DeepSeek-V2/V3): keys and values are
// up-projected per head from one kv_lora_rank-wide latent per token, queries
// from a q_lora_rank-wide latent (or straight from h when q_lora_rank is 0).
// Each head's query and key have qk_nope_head_dim channels without and
// qk_rope_head_dim channels with rotary positions (the key's rotary part is
// one per token, shared by the heads); values have v_head_dim channels.
struct MlaSpec {
  int q_lora_rank = 0;       // 0: queries projected from h directly (DeepSeek-V2-Lite)
  int kv_lora_rank = 0;      // > 0 turns MLA on
  int qk_nope_head_dim = 0;  // per head
  int qk_rope_head_dim = 0;  // per head
  int v_head_dim = 0;        // per head
  bool Enabled() const { return kv_lora_rank > 0; }
};

// Mixture-of-experts MLPs (Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3), as read
// from a HuggingFace configuration or given by the flags (--experts ...): the
// parameter counts (total and active per token) and the time and memory
// model (docs/profiler.md "Mixture of experts") use them.
struct MoeSpec {
  int experts = 0;            // routed experts per MoE block; 0: every MLP is dense
  int experts_per_token = 0;  // top-k routed experts each token goes to
  int expert_ffn = 0;         // width of each routed expert's (gated) MLP
  // Shared experts every token goes through: DeepSeek's n_shared_experts, each
  // expert_ffn wide, or Qwen2-MoE's one shared expert shared_expert_ffn wide
  // with a sigmoid gate (an h x 1 product).
  int shared_experts = 0;
  int shared_expert_ffn = 0;  // 0: expert_ffn
  bool shared_expert_gate = false;
  // Blocks whose MLP is dense (ffn_hidden wide), sorted: DeepSeek's first
  // first_k_dense_replace blocks, Qwen-MoE's mlp_only_layers and the blocks
  // decoder_sparse_step skips; every other block is an MoE block.
  std::vector<int> dense_layers;
  // The router (gate) and how it picks; expert_groups and topk_groups give
  // the simulator node-limited routing (MoeRouting in sim/model.h).
  bool router_bias = false;  // a per-expert score bias (DeepSeek-V3's noaux_tc): E parameters
  std::string scoring = "softmax";   // softmax or sigmoid (DeepSeek-V3)
  bool norm_topk_prob = false;       // the top-k weights renormalised to sum to 1
  double routed_scaling_factor = 1;  // DeepSeek: routed output scale
  int expert_groups = 0;             // DeepSeek n_group: experts in groups (node-limited routing)
  int topk_groups = 0;               // DeepSeek topk_group: groups a token may use
  double router_aux_loss_coef = 0;   // load-balancing loss weight
  std::string topk_method;           // DeepSeek's topk_method, as written
  // Blocks with experts: experts > 0 and not in dense_layers.
  bool IsMoeBlock(int block) const;
  // MoE blocks among `layers`.
  int MoeBlocks(int layers) const;
};

// The architecture: every field the cost model reads, in one place; model.json
// records it as source.architecture (docs/profiler.md). Defaults describe
// GPT-2/GPT-3 (learned positions, plain GeLU MLP, multi-head attention,
// LayerNorm, biases everywhere); LLaMA-style models set gated_mlp, kv_heads,
// learned_positions = false; a HuggingFace config.json sets the rest
// (profiler/hf_config.h).
struct TransformerSpec {
  std::string name;         // the model's name in model.json
  int layers = 0;           // transformer blocks
  int hidden = 0;           // h, the model width
  int heads = 0;            // a, attention (query) heads; must divide hidden unless head_dim is set
  int ffn_hidden = 0;       // MLP width (dense blocks); 0 = 4 * hidden
  int sequence_length = 0;  // s, tokens per sample
  int vocab = 0;            // V
  bool tied_embeddings = false;   // lm_head reuses the token table: 0 extra parameters
  bool learned_positions = true;  // a learned position table (GPT); false for RoPE or ALiBi
  bool gated_mlp = false;         // SwiGLU/GeGLU: three h x ffn matrices instead of two (LLaMA)
  int kv_heads = 0;               // key/value heads (GQA); 0 = heads; must divide heads
  int head_dim = 0;       // channels per attention head; 0 = hidden / heads (Gemma, Qwen3 differ)
  int max_positions = 0;  // the model's context; learned-table rows; 0 = sequence_length
  NormKind norm = NormKind::kLayerNorm;  // of the blocks and the final norm
  int block_norms = 2;              // h-wide norms per block: 2 pre-norm; 4 Gemma 2/3; 1 Falcon-7B
  bool qk_norm = false;             // an RMSNorm over each query and key head (Qwen3, Gemma 3)
  bool qkv_bias = true;             // biases on the query, key and value projections (GPT-2, Qwen2)
  bool output_bias = true;          // a bias on the attention output projection
  bool mlp_bias = true;             // biases on the MLP matrices
  std::string activation = "gelu";  // the MLP's activation as the config names it (recorded only)
  bool parallel_block =
      false;               // attention and MLP read the same input side by side (GPT-NeoX, Falcon)
  int sliding_window = 0;  // keys one query attends to in sliding layers; 0 = none
  std::vector<int> full_attention_layers =
      {};                             // with sliding_window: blocks that see every key (sorted)
  MlaSpec mla = {};                   // DeepSeek's latent attention; off by default
  MoeSpec moe = {};                   // experts; none by default
  std::vector<int> microbatch_sizes;  // sizes to write a profile for; unique
  int global_batch = 0;               // written as the planner's default; 0 = omit
  // Where the architecture came from, written as source.architecture_from
  // (e.g. "HuggingFace config.json examples/hf/llama-3.1-8b.json, model_type
  // llama"); empty: the command-line flags.
  std::string from = {};

  // OK, or InvalidArgument naming the command-line flag of the first bad
  // field (e.g. "--hidden 100 is not divisible by --heads 3").
  [[nodiscard]] Status Validate() const;

  // ffn_hidden, or 4 * hidden when it is 0.
  int FfnHidden() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  // kv_heads, or heads when it is 0.
  int KvHeads() const { return kv_heads > 0 ? kv_heads : heads; }
  // head_dim, or hidden / heads when it is 0.
  int HeadDim() const { return head_dim > 0 ? head_dim : (heads > 0 ? hidden / heads : 0); }
  // max_positions, or sequence_length when it is 0.
  int MaxPositions() const { return max_positions > 0 ? max_positions : sequence_length; }
  // Whether block `block` attends within sliding_window rather than to every key.
  bool IsSlidingBlock(int block) const;
};

// Upper bounds on the architecture, far past any real model: they keep int
// arithmetic (4 * hidden) exact and the layer list a sane size.
inline constexpr int kMaxSpecLayers = 100'000;
inline constexpr int kMaxSpecWidth = 1 << 20;     // hidden, MLP widths, head and latent widths
inline constexpr int kMaxSpecVocab = 1 << 24;     // 16.7M tokens, 65x the largest LLM vocabularies
inline constexpr int kMaxSpecSequence = 1 << 24;  // tokens per sample, positions, windows
inline constexpr int kMaxSpecExperts = 1 << 16;   // routed experts per block
// Parameters of the whole model: 2^53 (9e15, 4000x the largest models), so
// every count stays exact in int64 and in double.
inline constexpr double kMaxSpecParameters = 9007199254740992.0;

// source.architecture of model.json: every field of `spec` that shapes the
// model (defaults resolved), as JSON text (docs/profiler.md, "What goes into
// source"). Readers take the keys they know: heads, kv_heads, hidden and
// sequence_length are there since files first had them.
std::string ArchitectureJson(const TransformerSpec& spec);
// The same fields typed, as the model reader gives them back from that JSON
// (formats/formats.h): what the simulator reads of the shape.
ModelArchitecture ArchitectureOf(const TransformerSpec& spec);

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

// The busiest expert's tokens over the mean in an MoE layer trained with a
// load-balancing loss: 1.08, the mean over 16 layers of max / mean of the
// per-expert token counts published in shawntan/scattermoe#10 (model A,
// 8 experts, 5120 token copies per layer, the busiest 652-781 against a
// mean of 640; docs/profiler.md "Mixture of experts").
inline constexpr double kDefaultMoeImbalance = 1.08;
// Qwen3-235B-A22B trained dropless (Megatron-Core, aux-loss coefficient 1e-3,
// no --moe-router-force-load-balancing): 1.77, fitted, not the default.
// Source: yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md
// @ 020b8136, "Long Context", the same runs (256 H100s, t 4, ep 8, p 8, v 4)
// with forced balance and dropless at 16k-128k tokens. The 2.78-22.19 s per
// step that dropless adds is what 1.98-2.02 adds in pipecast, every length
// alike; the excess over 1 is then divided by 1.295, by which the runs'
// `moe` recomputation (the MoE forward rerun, not modelled) grows the
// imbalance-scaled work (docs/calibration-moe.md "Dropless imbalance").
// Applied to a GPU's whole grouped GEMM, it is a rank-level figure (16
// experts per GPU at ep 8) and carries the all-to-all's share of the cost.
inline constexpr double kQwen3DroplessMoeImbalance = 1.77;
// Past this, --moe-imbalance is refused: every token on one of 64 experts.
inline constexpr double kMaxMoeImbalance = 64;

// How attention runs, and so what it keeps for the backward and how fast it
// is (profiler/attention_rates.h). Every FlashAttention kernel keeps Q, K, V,
// the output, an fp32 logsumexp and an RNG state, no s x s tensors.
enum class Attention {
  kFlash2,  // FlashAttention-2 (CUDA), the default
  kFlash3,  // FlashAttention-3, Hopper only
  kTriton,  // FlashAttention's Triton kernel, as llm-foundry's MPT runs ran it
  kEager,   // softmax output, its dropout mask and output, s x s per head (Korthikanti)
  // PyTorch SDPA's flash backend (its vendored FlashAttention-2): kFlash2's
  // memory, at FlashKernel::kSdpaFlash2's speed (profiler/attention_rates.h)
  kSdpaFlash2,
};
// "flash2", "flash3", "triton", "eager" or "sdpa-flash2".
const char* AttentionName(Attention attention);
// The Attention a name means ("flash" is FlashAttention-2, the default), or
// InvalidArgument naming --attention.
[[nodiscard]] Result<Attention> ParseAttention(const std::string& name);

// How the loss over the vocabulary is computed (--loss): what the output
// layer keeps for its backward and holds while its backward starts
// (docs/profiler.md, "Memory").
enum class Loss {
  // Megatron-LM's vocabulary-parallel cross-entropy on fp32 logits
  // (megatron/core/tensor_parallel/cross_entropy.py): the fp32 softmax kept,
  // its gradient written in place, and the bf16 logits (their gradient's
  // copy in the backward). The default.
  kFused,
  // torch.nn.functional.cross_entropy(logits.float(), labels), as
  // torchtitan's train.py calls it (@ 9dec370, loss_fn): the fp32
  // log-softmax kept (the bf16 logits are freed, `del pred`), and the
  // backward's start holds two more fp32 copies of the logits at once
  // (nll_loss's gradient, then log_softmax's), as the head's workspace.
  kPytorch,
  // The same call under torch.compile, as torchtitan runs it with
  // --training.compile (build_cross_entropy_loss, torchtitan/components/
  // loss.py @ e7c0cae): AOTAutograd's min-cut partitioner saves the bf16
  // logits (a graph input) and the per-token max and log-sum-exp (reductions,
  // never recomputed), not the fp32 log-softmax (pointwise, recomputed), and
  // the backward is one fused kernel writing the bf16 gradient (inductor's
  // scatter_upon_const_tensor turns nll_loss's zero-and-scatter into a
  // pointwise where): the bf16 logits kept, one bf16 copy at the backward.
  kCompiled,
};
// "fused", "pytorch" or "compiled".
const char* LossName(Loss loss);
// The Loss a name means, or InvalidArgument naming --loss.
[[nodiscard]] Result<Loss> ParseLoss(const std::string& name);

// Which element-wise kernels a block and the output layer launch
// (--elementwise; docs/profiler.md "Element-wise kernel sets").
enum class Elementwise {
  // One kernel per norm, activation, rotary embedding and residual add in
  // each direction (Megatron-LM's and llm-foundry's fused kernels,
  // torch.compile). The default.
  kFused,
  // PyTorch eager mode running torchtitan's Llama code op by op (torchtitan
  // @ 9dec370 with norm_type = "rmsnorm"): RMSNorm as 8 kernels forward and
  // 16 backward in fp32, rotary embeddings through fp32 complex numbers,
  // SwiGLU as silu and mul, repeat_kv's copies of K and V, and with --loss
  // pytorch the logits' fp32 upcast (profiler/eager_kernels.cc).
  kEager,
};
// "fused" or "eager".
const char* ElementwiseName(Elementwise elementwise);
// The Elementwise a name means, or InvalidArgument naming --elementwise.
[[nodiscard]] Result<Elementwise> ParseElementwise(const std::string& name);

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
  Attention attention = Attention::kFlash2;       // --attention
  Loss loss = Loss::kFused;                       // --loss
  Elementwise elementwise = Elementwise::kFused;  // --elementwise
  // --precision fp8 --fp8-recipe R: the blocks' weight products (QKV,
  // output projection, MLP) run in FP8 at the GPU's FP8 peak with the
  // recipe's quantisation kernels and keep their FP8 inputs for the
  // backward; attention, norms, embedding and head stay bf16
  // (docs/profiler.md "FP8"). kNone: bf16 throughout (the default). Needs
  // the matmul time model, bytes_per_element 2 and a GPU with an FP8 peak
  // (CheckFp8Support).
  Fp8Recipe fp8 = Fp8Recipe::kNone;
  // Mixture-of-experts blocks: the busiest expert's tokens over the mean
  // (--moe-imbalance, in [1, kMaxMoeImbalance]); the routed experts' grouped
  // GEMMs, activation kernels and kept activations are sized for it.
  double moe_imbalance = kDefaultMoeImbalance;
  // The dispatcher the run uses (--moe-dispatcher; sim/collectives.h):
  // deepep (the default) permutes each token's rows once on each side;
  // alltoall (Megatron-LM's MoEAlltoAllTokenDispatcher) also sorts the rows
  // it receives by local expert after the dispatch and back before the
  // combine, two more memory-bound passes of k rows each way; allgather
  // (MoEAllGatherTokenDispatcher) permutes its gathered rows once on each
  // side, as deepep (docs/profiler.md "Mixture of experts").
  ExpertDispatcher moe_dispatcher = ExpertDispatcher::kDeepEp;
  // Megatron-LM's --moe-expert-capacity-factor C (--moe-capacity-factor):
  // each expert takes at most C x the mean tokens and drops the rest, so the
  // busiest expert's share is min(moe_imbalance, C); unset: dropless. With
  // --moe-pad-to-capacity (--moe-pad-expert-input-to-capacity) every expert
  // computes exactly C x the mean. In (0, kMaxMoeImbalance].
  std::optional<double> moe_capacity_factor;
  bool moe_pad_to_capacity = false;
  // The busiest expert's tokens over the mean that the routed experts'
  // GEMMs, kernels and kept activations are sized for: moe_imbalance,
  // bounded by the capacity factor (or equal to it when padded).
  double ExpertImbalance() const;

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
// or an estimate is past what model.json can hold. A mixture-of-experts
// block's layer carries its routing (Layer::moe).
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
