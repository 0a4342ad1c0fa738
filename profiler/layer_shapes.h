// The shape side of the analytic profiler: from an architecture
// (TransformerSpec) to each layer's weight matrix products, its attention
// core and its parameter counts, total and active per token, on one GPU of a
// t-way tensor-parallel group. The time and memory model (analytic_layer_cost.cc)
// consumes these; `profiler analytic --describe` prints them.
//
// Conventions (docs/profiler.md, "Parameters" and "FLOPs"):
//   - a weight product maps `in` features to `out` features per token
//     (y = x W + b: in x out weights, out biases), split over the t GPUs as
//     Megatron-LM splits it (TpSplit);
//   - an MoE block's routed experts are `count` copies of a product each
//     token reaches `tokens_per_copy` of the time (top-k / experts);
//   - the attention core's FLOPs count the full s x s score matrix (or s x w
//     with a sliding window of w keys), as Narayanan et al. (SC'21) do.
//
// Units: features, parameters, FLOPs per sample. Pure functions of their
// arguments; safe from several threads.
#ifndef PIPECAST_PROFILER_LAYER_SHAPES_H_
#define PIPECAST_PROFILER_LAYER_SHAPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "profiler/analytic.h"

namespace pipecast {

// How Megatron-LM lays one product out over a t-way tensor-parallel group.
enum class TpSplit {
  kColumn,      // output features / t, biases / t (QKV, fc1, MLA up-projections)
  kRow,         // input features / t, biases whole on every GPU (output projection, fc2)
  kReplicated,  // whole on every GPU (MLA down-projections, the MoE router)
  kVocab,       // ceil(V / t) rows of the vocabulary (lm_head)
};

// One weight product of a layer, per token.
struct WeightProduct {
  std::string name;  // "qkv", "q", "q_a", "q_b", "kv_a", "kv_b", "o", "fc1", "fc2", "router", ...
  int64_t in = 0;    // input features (k of the GEMM)
  int64_t out = 0;   // output features (n of the GEMM)
  bool bias = false;
  TpSplit split = TpSplit::kColumn;
  int64_t count = 1;             // identical copies (routed experts)
  double tokens_per_copy = 1.0;  // share of the layer's tokens each copy sees (top-k / experts)

  // Weights and biases of all copies on one GPU of a t-way group.
  int64_t ParametersAt(int t) const;
  // Output features on one GPU of a t-way group (column: out / t; vocab: ceil(out / t)).
  double OutAt(int t) const;
  // Input features on one GPU of a t-way group (row: in / t).
  double InAt(int t) const;
};

// The attention core of a block: scores Q K^T and their product with V.
struct AttentionCore {
  int query_heads = 0;
  int kv_heads = 0;  // key/value heads (GQA); MLA: query_heads (keys are per head)
  int qk_dim = 0;    // channels per query/key head (MLA: nope + rope)
  int v_dim = 0;     // channels per value head
  int64_t keys = 0;  // keys one query attends to, s or min(s, sliding window)
  bool sliding = false;
  // Forward FLOPs per sample, whole layer: 2 * s * keys * heads * (qk_dim + v_dim);
  // = 4 s^2 h for multi-head attention without a window (Narayanan et al.).
  double flops = 0;
  // The same for a causal kernel as "full-square" FLOPs, i.e. twice what a
  // causal kernel does (FlashSeconds halves it): = flops without a window;
  // 2 * s * w - w^2 keys-pairs per head-channel with a window w < s.
  double causal_flops_as_full = 0;
};

// One layer kind's shapes and parameters on one GPU of a t-way group.
struct LayerShape {
  std::string kind;                     // "embedding", "block" or "lm_head"
  std::string description;              // e.g. "full attention, dense MLP"
  std::vector<WeightProduct> products;  // in the order they run
  AttentionCore attention;              // blocks only
  int64_t norm_parameters = 0;          // norms (replicated over t)
  int64_t table_parameters = 0;         // embedding tables on this GPU
  int64_t parameters = 0;               // everything, on this GPU
  int64_t active_parameters = 0;        // reached by one token: routed experts at top-k of E
  bool moe = false;                     // has routed experts
  // Forward FLOPs per sample of the products with a weight on this GPU:
  // 2 * s * sum(in * out * count * tokens_per_copy) (per GPU sizes).
  double WeightFlopsPerToken(int t) const;
};

// Every layer of the model: the embedding, one shape per distinct block
// kind with each block's kind, and the lm_head.
struct ModelShapes {
  LayerShape embedding;
  std::vector<LayerShape> block_kinds;
  std::vector<int> kind_of_block;  // per block, an index into block_kinds
  LayerShape head;
  int64_t TotalParameters() const;
  int64_t ActiveParameters() const;
};

// The shapes of `spec` on one GPU of a t-way group (t = 1: the whole model).
// REQUIRES: spec.Validate() is OK and t divides the heads, key/value heads and
// every MLP width (ValidateTensorParallel in analytic.cc).
ModelShapes ShapesOf(const TransformerSpec& spec, int t = 1);

// Parameter counts of the whole model (t = 1).
struct ParameterCount {
  int64_t total = 0;
  int64_t active = 0;     // per token: routed experts at top-k, everything else whole
  int64_t embedding = 0;  // token (and position) tables
  int64_t head = 0;       // the untied output projection (0 when tied); the final norm is in total
  int64_t NonEmbedding() const;  // total - token/position tables - untied output projection
};
// REQUIRES: spec.Validate() is OK.
ParameterCount CountParameters(const TransformerSpec& spec);

// Whether `spec` has only the shape the flags described before --hf-config:
// GPT/LLaMA blocks with h = a*d, two LayerNorms, biases everywhere, no
// window, no latent attention, no experts. The estimate keeps its fixed
// formulas (and, for a gated MLP, no bias-gradient kernels) for it.
bool ClassicShape(const TransformerSpec& spec);

// The strings model.json's source gives for a shape beyond the GPT/LLaMA
// block its fixed formulas describe (docs/profiler.md, "What goes into
// source"): the parameter and FLOP formulas from the products, and a
// sentence the activation formula gains. nullopt for that classic block
// (h = a*d, two LayerNorms, biases everywhere, no window, MLA or experts).
struct ShapeFormulaText {
  std::string parameters, flops, activation_note;
};
std::optional<ShapeFormulaText> ShapeFormulas(const TransformerSpec& spec);

// A few lines for people: the parameter counts and, per block kind, its
// products (in x out), attention core and parameters.
// REQUIRES: spec.Validate() is OK.
std::string DescribeShapes(const TransformerSpec& spec);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_LAYER_SHAPES_H_
