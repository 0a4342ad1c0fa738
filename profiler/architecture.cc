// The architecture (TransformerSpec in profiler/analytic.h): its checks, which
// blocks slide or have experts, and its record in model.json's
// source.architecture.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "profiler/analytic.h"
#include "profiler/layer_shapes.h"

namespace pipecast {
namespace {

using json = nlohmann::json;

constexpr int kMaxMicrobatchSize = 1 << 20;  // model.json's own limit (formats/formats.cc)

Status CheckRange(const char* flag, int64_t value, int64_t min, int64_t max, const char* about) {
  if (value < min) {
    return Status::InvalidArgument(
        fmt::format("{} {} must be at least {} ({})", flag, value, min, about));
  }
  if (value > max) {
    return Status::InvalidArgument(
        fmt::format("{} {} is over the limit of {} ({})", flag, value, max, about));
  }
  return Status::Ok();
}

// Block indices: each in [0, layers), sorted, once.
Status CheckBlockList(const char* what, const std::vector<int>& blocks, int layers) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i] < 0 || blocks[i] >= layers) {
      return Status::InvalidArgument(
          fmt::format("{} lists block {}; blocks are 0 to {} (--layers {})", what, blocks[i],
                      layers - 1, layers));
    }
    if (i > 0 && blocks[i] <= blocks[i - 1]) {
      return Status::InvalidArgument(
          fmt::format("{} must list blocks in increasing order, each once", what));
    }
  }
  return Status::Ok();
}

Status ValidateMla(const MlaSpec& m) {
  if (!m.Enabled()) {
    if (m.q_lora_rank != 0 || m.qk_nope_head_dim != 0 || m.qk_rope_head_dim != 0 ||
        m.v_head_dim != 0) {
      return Status::InvalidArgument(
          "multi-head latent attention needs kv_lora_rank above 0 when its other sizes are set");
    }
    return Status::Ok();
  }
  PIPECAST_RETURN_IF_ERROR(
      CheckRange("kv_lora_rank", m.kv_lora_rank, 1, kMaxSpecWidth, "the key/value latent"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("q_lora_rank", m.q_lora_rank, 0, kMaxSpecWidth,
                                      "the query latent; 0 projects queries from h"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("qk_nope_head_dim", m.qk_nope_head_dim, 0, kMaxSpecWidth,
                                      "query/key channels per head without rotary"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("qk_rope_head_dim", m.qk_rope_head_dim, 0, kMaxSpecWidth,
                                      "query/key channels per head with rotary"));
  if (m.qk_nope_head_dim + m.qk_rope_head_dim < 1) {
    return Status::InvalidArgument(
        "qk_nope_head_dim + qk_rope_head_dim is 0: a query head needs channels");
  }
  return CheckRange("v_head_dim", m.v_head_dim, 1, kMaxSpecWidth, "value channels per head");
}

Status ValidateMoe(const MoeSpec& moe, int layers) {
  PIPECAST_RETURN_IF_ERROR(
      CheckRange("--experts", moe.experts, 0, kMaxSpecExperts, "0: dense MLPs"));
  if (moe.experts == 0) return Status::Ok();
  PIPECAST_RETURN_IF_ERROR(
      CheckRange("--experts", moe.experts, 1, kMaxSpecExperts, "routed experts per block"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--experts-per-token", moe.experts_per_token, 1, moe.experts,
                                      "routed experts each token goes to, at most --experts"));
  PIPECAST_RETURN_IF_ERROR(
      CheckRange("--expert-ffn", moe.expert_ffn, 1, kMaxSpecWidth, "each expert's MLP width"));
  PIPECAST_RETURN_IF_ERROR(
      CheckRange("--shared-experts", moe.shared_experts, 0, kMaxSpecExperts, "shared experts"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--shared-expert-ffn", moe.shared_expert_ffn, 0,
                                      kMaxSpecWidth, "the shared experts' width; 0: expert_ffn"));
  return CheckBlockList("the dense blocks (--first-dense-layers)", moe.dense_layers, layers);
}

}  // namespace

const char* NormKindName(NormKind kind) {
  return kind == NormKind::kRmsNorm ? "rmsnorm" : "layernorm";
}

bool MoeSpec::IsMoeBlock(int block) const {
  return experts > 0 && !std::binary_search(dense_layers.begin(), dense_layers.end(), block);
}

int MoeSpec::MoeBlocks(int layers) const {
  int n = 0;
  for (int i = 0; i < layers; ++i) n += IsMoeBlock(i) ? 1 : 0;
  return n;
}

bool TransformerSpec::IsSlidingBlock(int block) const {
  return sliding_window > 0 &&
         !std::binary_search(full_attention_layers.begin(), full_attention_layers.end(), block);
}

Status TransformerSpec::Validate() const {
  if (name.empty()) return Status::InvalidArgument("--name is empty; give the model a name");
  PIPECAST_RETURN_IF_ERROR(CheckRange("--layers", layers, 1, kMaxSpecLayers, "transformer blocks"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--hidden", hidden, 1, kMaxSpecWidth, "the model width"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--heads", heads, 1, hidden, "attention heads"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--head-dim", head_dim, 0, kMaxSpecWidth,
                                      "channels per head; 0 means --hidden / --heads"));
  if (head_dim == 0 && !mla.Enabled() && hidden % heads != 0) {
    return Status::InvalidArgument(fmt::format(
        "--hidden {} is not divisible by --heads {}: each head needs hidden/heads channels (or "
        "give --head-dim)",
        hidden, heads));
  }
  PIPECAST_RETURN_IF_ERROR(
      CheckRange("--kv-heads", kv_heads, 0, heads, "key/value heads; 0 means --heads"));
  if (heads % KvHeads() != 0) {
    return Status::InvalidArgument(fmt::format(
        "--heads {} is not divisible by --kv-heads {}: each key/value head serves a whole group "
        "of query heads",
        heads, kv_heads));
  }
  PIPECAST_RETURN_IF_ERROR(CheckRange("--ffn-hidden", ffn_hidden, 0, kMaxSpecWidth,
                                      "the MLP width; 0 means 4 x --hidden"));
  PIPECAST_RETURN_IF_ERROR(
      CheckRange("--seq", sequence_length, 1, kMaxSpecSequence, "tokens per sample"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--vocab", vocab, 1, kMaxSpecVocab, "the vocabulary size"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("max_positions", max_positions, 0, kMaxSpecSequence,
                                      "the model's context; 0 means --seq"));
  if (learned_positions && sequence_length > MaxPositions()) {
    return Status::InvalidArgument(fmt::format(
        "--seq {} is over the model's {} positions: a learned position table has one row per "
        "position; give --seq {} or less",
        sequence_length, MaxPositions(), MaxPositions()));
  }
  PIPECAST_RETURN_IF_ERROR(CheckRange("block_norms", block_norms, 0, 8, "h-wide norms per block"));
  PIPECAST_RETURN_IF_ERROR(CheckRange("--sliding-window", sliding_window, 0, kMaxSpecSequence,
                                      "keys a query attends to; 0 means none"));
  PIPECAST_RETURN_IF_ERROR(CheckBlockList("full_attention_layers", full_attention_layers, layers));
  PIPECAST_RETURN_IF_ERROR(ValidateMla(mla));
  PIPECAST_RETURN_IF_ERROR(ValidateMoe(moe, layers));
  // Every width is in range; their products may still pass what counts hold.
  // One block's count fits int64 whatever the widths (each product is below
  // 2^62); the sum over blocks is taken in double.
  const ModelShapes shapes = ShapesOf(*this, 1);
  double total = static_cast<double>(shapes.embedding.parameters) +
                 static_cast<double>(shapes.head.parameters);
  for (int kind : shapes.kind_of_block) {
    total += static_cast<double>(shapes.block_kinds[kind].parameters);
  }
  if (total > kMaxSpecParameters) {
    return Status::InvalidArgument(fmt::format(
        "the architecture has {:.3g} parameters, past the 2^53 pipecast counts exactly; check "
        "--layers, --hidden, --heads, --head-dim and the MLP widths",
        total));
  }
  PIPECAST_RETURN_IF_ERROR(CheckRange("--global-batch", global_batch, 0, int64_t{1} << 30,
                                      "samples per iteration; 0 leaves it out"));
  if (microbatch_sizes.empty()) {
    return Status::InvalidArgument("--microbatch-sizes is empty; give at least one, e.g. 1,2,4,8");
  }
  std::set<int> seen;
  for (int b : microbatch_sizes) {
    if (b < 1 || b > kMaxMicrobatchSize) {
      return Status::InvalidArgument(
          fmt::format("--microbatch-sizes lists {}; sizes are samples per micro-batch, 1 to {}", b,
                      kMaxMicrobatchSize));
    }
    if (!seen.insert(b).second) {
      return Status::InvalidArgument(
          fmt::format("--microbatch-sizes lists {} twice; give each size once", b));
    }
  }
  return Status::Ok();
}

std::string ArchitectureJson(const TransformerSpec& spec) {
  // The keys files have always had, then the rest.
  json a = {{"layers", spec.layers},
            {"hidden", spec.hidden},
            {"heads", spec.heads},
            {"kv_heads", spec.KvHeads()},
            {"ffn_hidden", spec.FfnHidden()},
            {"gated_mlp", spec.gated_mlp},
            {"sequence_length", spec.sequence_length},
            {"vocab", spec.vocab},
            {"tied_embeddings", spec.tied_embeddings},
            {"learned_positions", spec.learned_positions},
            {"head_dim", spec.HeadDim()},
            {"max_positions", spec.MaxPositions()},
            {"norm", NormKindName(spec.norm)},
            {"block_norms", spec.block_norms},
            {"qk_norm", spec.qk_norm},
            {"qkv_bias", spec.qkv_bias},
            {"output_bias", spec.output_bias},
            {"mlp_bias", spec.mlp_bias},
            {"activation", spec.activation},
            {"parallel_block", spec.parallel_block},
            {"sliding_window", spec.sliding_window}};
  if (spec.sliding_window > 0) a["full_attention_layers"] = spec.full_attention_layers;
  if (spec.mla.Enabled()) {
    const MlaSpec& m = spec.mla;
    a["mla"] = {{"q_lora_rank", m.q_lora_rank},
                {"kv_lora_rank", m.kv_lora_rank},
                {"qk_nope_head_dim", m.qk_nope_head_dim},
                {"qk_rope_head_dim", m.qk_rope_head_dim},
                {"v_head_dim", m.v_head_dim}};
  }
  if (spec.moe.experts > 0) {
    const MoeSpec& m = spec.moe;
    a["moe"] = {{"experts", m.experts},
                {"experts_per_token", m.experts_per_token},
                {"expert_ffn", m.expert_ffn},
                {"shared_experts", m.shared_experts},
                {"shared_expert_ffn", m.shared_expert_ffn},
                {"shared_expert_gate", m.shared_expert_gate},
                {"dense_layers", m.dense_layers},
                {"router_bias", m.router_bias},
                {"scoring", m.scoring},
                {"norm_topk_prob", m.norm_topk_prob},
                {"routed_scaling_factor", m.routed_scaling_factor},
                {"expert_groups", m.expert_groups},
                {"topk_groups", m.topk_groups},
                {"router_aux_loss_coef", m.router_aux_loss_coef},
                {"topk_method", m.topk_method}};
  }
  return a.dump(-1, ' ', false, json::error_handler_t::replace);
}

ModelArchitecture ArchitectureOf(const TransformerSpec& spec) {
  ModelArchitecture a;
  a.hidden = spec.hidden;
  a.sequence_length = spec.sequence_length;
  a.heads = spec.heads;
  a.kv_heads = spec.KvHeads();
  a.layers = spec.layers;
  a.ffn_hidden = spec.FfnHidden();
  a.vocab = spec.vocab;
  a.head_dim = spec.HeadDim();
  a.block_norms = spec.block_norms;
  a.sliding_window = spec.sliding_window;
  a.norm = NormKindName(spec.norm);
  a.gated_mlp = spec.gated_mlp;
  a.tied_embeddings = spec.tied_embeddings;
  a.learned_positions = spec.learned_positions;
  a.qk_norm = spec.qk_norm;
  a.qkv_bias = spec.qkv_bias;
  a.output_bias = spec.output_bias;
  a.mlp_bias = spec.mlp_bias;
  a.parallel_block = spec.parallel_block;
  a.moe = spec.moe.experts > 0;
  a.mla = spec.mla.Enabled();
  return a;
}

}  // namespace pipecast
