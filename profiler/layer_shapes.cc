// Architecture -> per-layer products, attention core and parameter counts
// (profiler/layer_shapes.h). docs/profiler.md, "Parameters", derives them.
#include "profiler/layer_shapes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pipecast {
namespace {

int64_t NormWidthParameters(NormKind kind, int64_t width) {
  return kind == NormKind::kLayerNorm ? 2 * width : width;  // scale (and shift)
}

// The parameters of `p` reached by one token: every copy it could go to
// counts once per copy it does go to.
int64_t ActiveParametersOf(const WeightProduct& p) {
  if (p.count <= 1) return p.ParametersAt(1);
  const int64_t per_copy = p.ParametersAt(1) / p.count;
  return std::llround(static_cast<double>(per_copy) * p.count * p.tokens_per_copy);
}

// The attention products of a block and its core.
void AddAttention(const TransformerSpec& spec, LayerShape* shape) {
  const int64_t h = spec.hidden;
  const int64_t a = spec.heads;
  AttentionCore& core = shape->attention;
  core.query_heads = spec.heads;
  if (spec.mla.Enabled()) {
    const MlaSpec& m = spec.mla;
    const int64_t qk = int64_t{m.qk_nope_head_dim} + m.qk_rope_head_dim;
    if (m.q_lora_rank > 0) {
      shape->products.push_back({.name = "q_a",
                                 .in = h,
                                 .out = m.q_lora_rank,
                                 .bias = spec.qkv_bias,
                                 .split = TpSplit::kReplicated});
      shape->products.push_back(
          {.name = "q_b", .in = m.q_lora_rank, .out = a * qk, .split = TpSplit::kColumn});
      shape->norm_parameters += m.q_lora_rank;  // RMSNorm of the query latent
    } else {
      shape->products.push_back(
          {.name = "q", .in = h, .out = a * qk, .bias = spec.qkv_bias, .split = TpSplit::kColumn});
    }
    // The key/value latent and the key's rotary part, one per token.
    shape->products.push_back({.name = "kv_a",
                               .in = h,
                               .out = int64_t{m.kv_lora_rank} + m.qk_rope_head_dim,
                               .bias = spec.qkv_bias,
                               .split = TpSplit::kReplicated});
    shape->products.push_back({.name = "kv_b",
                               .in = m.kv_lora_rank,
                               .out = a * (int64_t{m.qk_nope_head_dim} + m.v_head_dim),
                               .split = TpSplit::kColumn});
    shape->norm_parameters += m.kv_lora_rank;  // RMSNorm of the key/value latent
    shape->products.push_back({.name = "o",
                               .in = a * m.v_head_dim,
                               .out = h,
                               .bias = spec.output_bias,
                               .split = TpSplit::kRow});
    core.kv_heads = spec.heads;
    core.qk_dim = static_cast<int>(qk);
    core.v_dim = m.v_head_dim;
  } else {
    const int64_t d = spec.HeadDim();
    const int64_t kv = spec.KvHeads();
    shape->products.push_back({.name = "qkv",
                               .in = h,
                               .out = a * d + 2 * kv * d,
                               .bias = spec.qkv_bias,
                               .split = TpSplit::kColumn});
    shape->products.push_back(
        {.name = "o", .in = a * d, .out = h, .bias = spec.output_bias, .split = TpSplit::kRow});
    core.kv_heads = spec.KvHeads();
    core.qk_dim = static_cast<int>(d);
    core.v_dim = static_cast<int>(d);
    if (spec.qk_norm) shape->norm_parameters += 2 * d;  // one RMSNorm over a head, for Q and K
  }
}

// A (gated) MLP of width f as products named prefix_fc1, prefix_fc2.
void AddMlp(const TransformerSpec& spec, const std::string& prefix, int64_t f, int64_t count,
            double tokens_per_copy, LayerShape* shape) {
  const int64_t h = spec.hidden;
  const int64_t fc1_out = spec.gated_mlp ? 2 * f : f;  // gate and up side by side
  shape->products.push_back({.name = prefix + "fc1",
                             .in = h,
                             .out = fc1_out,
                             .bias = spec.mlp_bias,
                             .split = TpSplit::kColumn,
                             .count = count,
                             .tokens_per_copy = tokens_per_copy});
  shape->products.push_back({.name = prefix + "fc2",
                             .in = f,
                             .out = h,
                             .bias = spec.mlp_bias,
                             .split = TpSplit::kRow,
                             .count = count,
                             .tokens_per_copy = tokens_per_copy});
}

void AddMoe(const TransformerSpec& spec, LayerShape* shape) {
  const MoeSpec& moe = spec.moe;
  const int64_t h = spec.hidden;
  shape->moe = true;
  shape->products.push_back({.name = "router",
                             .in = h,
                             .out = moe.experts,
                             .bias = moe.router_bias,
                             .split = TpSplit::kReplicated});
  AddMlp(spec, "expert_", moe.expert_ffn, moe.experts,
         static_cast<double>(moe.experts_per_token) / moe.experts, shape);
  if (moe.shared_experts > 0) {
    const int64_t width = moe.shared_expert_ffn > 0 ? int64_t{moe.shared_expert_ffn}
                                                    : int64_t{moe.expert_ffn} * moe.shared_experts;
    AddMlp(spec, "shared_", width, 1, 1.0, shape);
    if (moe.shared_expert_gate) {
      shape->products.push_back(
          {.name = "shared_gate", .in = h, .out = 1, .split = TpSplit::kReplicated});
    }
  }
}

LayerShape BlockShape(const TransformerSpec& spec, bool sliding, bool moe) {
  LayerShape shape;
  shape.kind = "block";
  AddAttention(spec, &shape);
  if (moe) {
    AddMoe(spec, &shape);
  } else {
    AddMlp(spec, "", spec.FfnHidden(), 1, 1.0, &shape);
  }
  shape.norm_parameters += spec.block_norms * NormWidthParameters(spec.norm, spec.hidden);
  AttentionCore& core = shape.attention;
  const int64_t s = spec.sequence_length;
  const bool windowed = sliding && spec.sliding_window > 0 && spec.sliding_window < s;
  core.sliding = sliding && spec.sliding_window > 0;
  core.keys = windowed ? spec.sliding_window : s;
  const double channels = static_cast<double>(core.query_heads) * (core.qk_dim + core.v_dim);
  const double sd = static_cast<double>(s);
  const double w = static_cast<double>(core.keys);
  core.flops = 2 * sd * w * channels;
  // A causal kernel computes s^2/2 pairs without a window, s*w - w^2/2 with
  // one; as full-square FLOPs (twice that): s^2 and 2*s*w - w^2.
  core.causal_flops_as_full = windowed ? 2 * (2 * sd * w - w * w) * channels : core.flops;
  shape.description = fmt::format(
      "{} attention, {}",
      core.sliding ? fmt::format("sliding-window ({} keys)", spec.sliding_window) : "full",
      moe ? "MoE MLP" : "dense MLP");
  return shape;
}

void Total(int t, LayerShape* shape) {
  int64_t params = shape->norm_parameters + shape->table_parameters;
  int64_t active = params;
  for (const WeightProduct& p : shape->products) {
    params += p.ParametersAt(t);
    active += t == 1 ? ActiveParametersOf(p) : p.ParametersAt(t);
  }
  shape->parameters = params;
  shape->active_parameters = active;
}

std::string Count(int64_t n) {
  std::string digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return digits;
}

}  // namespace

bool ClassicShape(const TransformerSpec& spec) {
  return (spec.head_dim == 0 || int64_t{spec.head_dim} * spec.heads == spec.hidden) &&
         (spec.max_positions == 0 || spec.max_positions == spec.sequence_length) &&
         spec.norm == NormKind::kLayerNorm && spec.block_norms == 2 && !spec.qk_norm &&
         spec.qkv_bias && spec.output_bias && spec.mlp_bias && !spec.parallel_block &&
         spec.sliding_window == 0 && !spec.mla.Enabled() && spec.moe.experts == 0;
}

std::optional<ShapeFormulaText> ShapeFormulas(const TransformerSpec& spec) {
  if (ClassicShape(spec)) return std::nullopt;
  const ModelShapes shapes = ShapesOf(spec, 1);
  std::string blocks;
  for (const LayerShape& kind : shapes.block_kinds) {
    std::string products;
    for (const WeightProduct& p : kind.products) {
      products += fmt::format("{}{} {}x{}{}", products.empty() ? "" : ", ", p.name, p.in, p.out,
                              p.bias ? " + bias" : "");
    }
    const AttentionCore& c = kind.attention;
    blocks += fmt::format(
        "{}{}: products {}; norms {} parameters; attention core {} query heads x ({} + {}) "
        "channels over {} keys",
        blocks.empty() ? "" : "; ", kind.description, products, kind.norm_parameters, c.query_heads,
        c.qk_dim, c.v_dim, c.keys);
  }
  ShapeFormulaText text;
  text.parameters = fmt::format(
      "each product with a weight maps in to out features per token: in*out weights, + out "
      "biases where the architecture has them; norms {} ({} per h-wide norm), {} per block{}{}. "
      "Blocks: {}. embedding V*h{}; lm_head final norm{}",
      NormKindName(spec.norm), spec.norm == NormKind::kLayerNorm ? "2*h" : "h", spec.block_norms,
      spec.qk_norm ? " + a query and a key norm over head_dim" : "",
      spec.mla.Enabled() ? " + the norms of the query and key/value latents" : "", blocks,
      spec.learned_positions ? " + max_positions*h" : "",
      spec.tied_embeddings ? " (projection tied to the token table)" : " + V*h projection");
  text.flops =
      "forward, per sample (Narayanan et al., SC'21, appendix 'Floating-point operations', "
      "generalised to the products above): block 2*s*sum(in*out) over its products + "
      "2*s*keys*a*(d_qk + d_v) for the scores Q*K^T and their product with V (keys = s, or the "
      "sliding window; the full s x keys matrix, no causal saving); lm_head 2*s*h*V; embedding 0. "
      "Backward = 2 x forward; its weight-gradient part (backward_weight_us) = the forward "
      "products with a weight";
  text.activation_note =
      "; generalised per block: Q, K, V and the projection input are a*d_qk, kv*d_qk, kv*d_v and "
      "a*d_v wide (MLA: keys and values per head), plus the inputs of the query/key norms, the "
      "latents of MLA twice (norm input and up-projection input) and one h-wide input per "
      "block norm; the QKV and fc1 inputs are one tensor when attention and MLP run side by "
      "side on one norm";
  return text;
}

int64_t WeightProduct::ParametersAt(int t) const {
  if (split == TpSplit::kVocab) {
    const int64_t rows = (out + t - 1) / t;
    return rows * in + (bias ? rows : 0);
  }
  int64_t weights = in * out;
  int64_t biases = bias ? out : 0;
  switch (split) {
    case TpSplit::kColumn:
      weights /= t;
      biases /= t;
      break;
    case TpSplit::kRow:
      weights /= t;
      break;
    default:
      break;
  }
  return count * (weights + biases);
}

double WeightProduct::OutAt(int t) const {
  if (split == TpSplit::kColumn) return static_cast<double>(out) / t;
  if (split == TpSplit::kVocab) return static_cast<double>((out + t - 1) / t);
  return static_cast<double>(out);
}

double WeightProduct::InAt(int t) const {
  return split == TpSplit::kRow ? static_cast<double>(in) / t : static_cast<double>(in);
}

double LayerShape::WeightFlopsPerToken(int t) const {
  double flops = 0;
  for (const WeightProduct& p : products) {
    flops += 2 * p.InAt(t) * p.OutAt(t) * static_cast<double>(p.count) * p.tokens_per_copy;
  }
  return flops;
}

int64_t ModelShapes::TotalParameters() const {
  int64_t total = embedding.parameters + head.parameters;
  for (int kind : kind_of_block) total += block_kinds[kind].parameters;
  return total;
}

int64_t ModelShapes::ActiveParameters() const {
  int64_t total = embedding.active_parameters + head.active_parameters;
  for (int kind : kind_of_block) total += block_kinds[kind].active_parameters;
  return total;
}

ModelShapes ShapesOf(const TransformerSpec& spec, int t) {
  ModelShapes shapes;
  const int64_t h = spec.hidden;
  const int64_t vocab_rows =
      (int64_t{spec.vocab} + t - 1) / t;  // Megatron pads V to a multiple of t
  shapes.embedding.kind = "embedding";
  shapes.embedding.description =
      spec.learned_positions ? "token and position tables" : "token table";
  shapes.embedding.table_parameters =
      vocab_rows * h + (spec.learned_positions ? int64_t{spec.MaxPositions()} * h : 0);
  Total(t, &shapes.embedding);

  // Blocks differ only by window and experts: one shape per combination.
  std::vector<std::pair<bool, bool>> seen;
  for (int i = 0; i < spec.layers; ++i) {
    const std::pair<bool, bool> key{spec.IsSlidingBlock(i), spec.moe.IsMoeBlock(i)};
    auto it = std::find(seen.begin(), seen.end(), key);
    if (it == seen.end()) {
      seen.push_back(key);
      shapes.block_kinds.push_back(BlockShape(spec, key.first, key.second));
      Total(t, &shapes.block_kinds.back());
      it = seen.end() - 1;
    }
    shapes.kind_of_block.push_back(static_cast<int>(it - seen.begin()));
  }

  LayerShape& head = shapes.head;
  head.kind = "lm_head";
  head.description = spec.tied_embeddings ? "final norm; projection tied to the token table"
                                          : "final norm and projection";
  head.norm_parameters = NormWidthParameters(spec.norm, h);
  head.products.push_back(
      {.name = "lm_head", .in = h, .out = spec.vocab, .split = TpSplit::kVocab});
  Total(t, &head);
  if (spec.tied_embeddings) {  // the product runs on the embedding's weights
    head.parameters = head.norm_parameters;
    head.active_parameters = head.norm_parameters;
  }
  return shapes;
}

int64_t ParameterCount::NonEmbedding() const { return total - embedding - head; }

ParameterCount CountParameters(const TransformerSpec& spec) {
  const ModelShapes shapes = ShapesOf(spec, 1);
  ParameterCount count;
  count.total = shapes.TotalParameters();
  count.active = shapes.ActiveParameters();
  count.embedding = shapes.embedding.parameters;
  count.head = shapes.head.parameters - shapes.head.norm_parameters;
  return count;
}

std::string DescribeShapes(const TransformerSpec& spec) {
  const ModelShapes shapes = ShapesOf(spec, 1);
  const ParameterCount count = CountParameters(spec);
  std::string out = fmt::format(
      "{}: {} parameters ({:.3f}B); active per token {} ({:.3f}B); non-embedding {} ({:.3f}B)\n",
      spec.name, Count(count.total), count.total / 1e9, Count(count.active), count.active / 1e9,
      Count(count.NonEmbedding()), count.NonEmbedding() / 1e9);
  auto products = [](const LayerShape& shape) {
    std::string text;
    for (const WeightProduct& p : shape.products) {
      text += fmt::format("{}{} {}x{}{}", text.empty() ? "" : ", ", p.name, p.in, p.out,
                          p.bias ? "+b" : "");
      if (p.count > 1)
        text += fmt::format(" x{} (each token: {})", p.count,
                            std::llround(p.count * p.tokens_per_copy));
    }
    return text;
  };
  out += fmt::format("  embedding: {} parameters ({})\n", Count(shapes.embedding.parameters),
                     shapes.embedding.description);
  for (size_t k = 0; k < shapes.block_kinds.size(); ++k) {
    const LayerShape& shape = shapes.block_kinds[k];
    std::vector<int> blocks;
    for (int i = 0; i < spec.layers; ++i) {
      if (shapes.kind_of_block[i] == static_cast<int>(k)) blocks.push_back(i);
    }
    const AttentionCore& core = shape.attention;
    out += fmt::format(
        "  {} block{} ({}): {} parameters, {} active; norms {}\n"
        "    products (in x out per token): {}\n"
        "    attention: {} query heads, {} key/value heads, {} query/key and {} value channels "
        "per head, {} keys per query\n",
        blocks.size(), blocks.size() == 1 ? "" : "s", shape.description, Count(shape.parameters),
        Count(shape.active_parameters), Count(shape.norm_parameters), products(shape),
        core.query_heads, core.kv_heads, core.qk_dim, core.v_dim, core.keys);
  }
  out += fmt::format("  lm_head: {} parameters ({}); products: {}\n", Count(shapes.head.parameters),
                     shapes.head.description, products(shapes.head));
  return out;
}

}  // namespace pipecast
