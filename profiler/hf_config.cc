// HuggingFace config.json -> TransformerSpec (profiler/hf_config.h). The one
// file of the reader that touches nlohmann-json: its exceptions stop here.
// Each family's keys follow transformers' configuration and modeling classes
// of that model_type; docs/profiler.md ("--hf-config") lists them.
#include "profiler/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/json_depth.h"
#include "formats/file_util.h"

namespace pipecast {
namespace {

using json = nlohmann::json;

enum class Family {
  kLlama,
  kMistral,
  kMixtral,
  kQwen2,
  kQwen2Moe,
  kQwen3,
  kQwen3Moe,
  kGemma2,
  kGemma3Text,
  kGpt2,
  kGptNeox,
  kFalcon,
  kPhi3,
  kDeepseekV2,
  kDeepseekV3,
};

struct KnownType {
  const char* name;
  Family family;
};
// "gemma3" (multimodal) is read through its text_config, as gemma3_text.
constexpr KnownType kKnownTypes[] = {
    {"deepseek_v2", Family::kDeepseekV2},
    {"deepseek_v3", Family::kDeepseekV3},
    {"falcon", Family::kFalcon},
    {"gemma2", Family::kGemma2},
    {"gemma3_text", Family::kGemma3Text},
    {"gpt2", Family::kGpt2},
    {"gpt_neox", Family::kGptNeox},
    {"llama", Family::kLlama},
    {"mistral", Family::kMistral},
    {"mixtral", Family::kMixtral},
    {"phi3", Family::kPhi3},
    {"qwen2", Family::kQwen2},
    {"qwen2_moe", Family::kQwen2Moe},
    {"qwen3", Family::kQwen3},
    {"qwen3_moe", Family::kQwen3Moe},
};

// nlohmann's message without its "[json.exception.parse_error.101] " tag.
std::string WithoutExceptionId(const std::string& what) {
  const size_t tag = what.find("] ");
  return tag == std::string::npos ? what : what.substr(tag + 2);
}

// A JSON value as a short text for an error message.
std::string Shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

// Reads keys of one JSON object, naming the file and the key (with its
// parent, "text_config.head_dim") in every error. A key whose value is null
// counts as absent, as transformers treats it.
class Keys {
 public:
  Keys(const json& object, std::string file, std::string prefix)
      : object_(object), file_(std::move(file)), prefix_(std::move(prefix)) {}

  bool Has(const char* key) const {
    auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }

  Status Error(const char* key, const std::string& what) const {
    return Status::InvalidArgument(fmt::format("{}: {}{} {}", file_, prefix_, key, what));
  }
  Status Error(const std::string& what) const {
    return Status::InvalidArgument(fmt::format("{}: {}", file_, what));
  }
  std::string Name(const char* key) const { return prefix_ + key; }

  // An integer in [min, max]; `about` says what it is. Absent: `*out` keeps
  // its value, or an error when `required`.
  Status Int(const char* key, bool required, int64_t min, int64_t max, const char* about,
             int* out) const {
    if (!Has(key)) {
      if (!required) return Status::Ok();
      return Error(key, fmt::format("is missing: it gives {}", about));
    }
    const json& v = object_.at(key);
    int64_t value = 0;
    if (v.is_number_integer()) {
      value = v.get<int64_t>();
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
               v.get<double>() == std::floor(v.get<double>()) &&
               std::fabs(v.get<double>()) < 1e15) {
      value = static_cast<int64_t>(v.get<double>());
    } else {
      return Error(key, fmt::format("must be a whole number ({}), got {}", about, Shown(v)));
    }
    if (value < min || value > max) {
      return Error(key, fmt::format("{} is out of range: {} is {} to {}", value, about, min, max));
    }
    *out = static_cast<int>(value);
    return Status::Ok();
  }

  Status Bool(const char* key, bool* out) const {
    if (!Has(key)) return Status::Ok();
    const json& v = object_.at(key);
    if (!v.is_boolean()) return Error(key, "must be true or false, got " + Shown(v));
    *out = v.get<bool>();
    return Status::Ok();
  }

  Status Number(const char* key, double* out) const {
    if (!Has(key)) return Status::Ok();
    const json& v = object_.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      return Error(key, "must be a number, got " + Shown(v));
    }
    *out = v.get<double>();
    return Status::Ok();
  }

  Status String(const char* key, std::string* out) const {
    if (!Has(key)) return Status::Ok();
    const json& v = object_.at(key);
    if (!v.is_string()) return Error(key, "must be a string, got " + Shown(v));
    *out = v.get<std::string>();
    return Status::Ok();
  }

  // A list of block indices, each in [0, layers).
  Status BlockList(const char* key, int layers, std::vector<int>* out) const {
    if (!Has(key)) return Status::Ok();
    const json& v = object_.at(key);
    if (!v.is_array()) return Error(key, "must be a list of layer indices, got " + Shown(v));
    for (const json& item : v) {
      if (!item.is_number_integer() || item.get<int64_t>() < 0 || item.get<int64_t>() >= layers) {
        return Error(key, fmt::format("lists {}; layers are 0 to {} (num_hidden_layers {})",
                                      Shown(item), layers - 1, layers));
      }
      out->push_back(static_cast<int>(item.get<int64_t>()));
    }
    return Status::Ok();
  }

  // The object under `key` (rope_scaling, text_config); null when absent.
  Status Object(const char* key, const json** out) const {
    *out = nullptr;
    if (!Has(key)) return Status::Ok();
    const json& v = object_.at(key);
    if (!v.is_object()) return Error(key, "must be an object, got " + Shown(v));
    *out = &v;
    return Status::Ok();
  }

  const json& object() const { return object_; }
  const std::string& file() const { return file_; }
  const std::string& prefix() const { return prefix_; }

 private:
  const json& object_;
  std::string file_;
  std::string prefix_;
};

bool IsMoe(Family f) {
  return f == Family::kMixtral || f == Family::kQwen2Moe || f == Family::kQwen3Moe ||
         f == Family::kDeepseekV2 || f == Family::kDeepseekV3;
}
bool IsDeepseek(Family f) { return f == Family::kDeepseekV2 || f == Family::kDeepseekV3; }
bool IsQwen(Family f) {
  return f == Family::kQwen2 || f == Family::kQwen2Moe || f == Family::kQwen3 ||
         f == Family::kQwen3Moe;
}
bool IsGemma(Family f) { return f == Family::kGemma2 || f == Family::kGemma3Text; }

// The shape every family has: layers, width, heads, vocabulary. GPT-2 names
// them differently (n_layer, n_embd, n_head); Falcon's old names are aliases.
Status ReadCore(const Keys& k, Family f, TransformerSpec* s) {
  const bool gpt2 = f == Family::kGpt2;
  const bool falcon = f == Family::kFalcon;
  const char* layers = gpt2 ? "n_layer" : "num_hidden_layers";
  const char* hidden = gpt2 ? "n_embd" : "hidden_size";
  const char* heads = gpt2 ? "n_head" : "num_attention_heads";
  if (falcon && !k.Has(layers) && k.Has("n_layer")) layers = "n_layer";
  if (falcon && !k.Has(heads) && k.Has("n_head")) heads = "n_head";
  // Gemma3TextConfig defaults (transformers); the published gemma-3 text
  // configs leave vocab_size and head_dim to them.
  if (f == Family::kGemma3Text) {
    s->vocab = 262'208;
    s->head_dim = 256;
  }
  if (f == Family::kGemma2) s->head_dim = 256;                           // Gemma2Config's default
  if (f == Family::kQwen3 || f == Family::kQwen3Moe) s->head_dim = 128;  // Qwen3(Moe)Config's
  PIPECAST_RETURN_IF_ERROR(
      k.Int(layers, true, 1, kMaxSpecLayers, "the transformer blocks", &s->layers));
  PIPECAST_RETURN_IF_ERROR(k.Int(hidden, true, 1, kMaxSpecWidth, "the model width", &s->hidden));
  PIPECAST_RETURN_IF_ERROR(
      k.Int(heads, true, 1, kMaxSpecWidth, "the attention (query) heads", &s->heads));
  PIPECAST_RETURN_IF_ERROR(k.Int("vocab_size", f != Family::kGemma3Text, 1, kMaxSpecVocab,
                                 "the vocabulary size", &s->vocab));
  if (s->heads > s->hidden) {
    return k.Error(
        fmt::format("{} {} is more than {} {}: a head needs at least one channel of "
                    "the model width",
                    k.Name(heads), s->heads, k.Name(hidden), s->hidden));
  }
  return Status::Ok();
}

// Key/value heads and head width, and their consistency with the heads.
Status ReadHeads(const Keys& k, Family f, TransformerSpec* s) {
  const char* heads_key = f == Family::kGpt2 ? "n_head" : "num_attention_heads";
  const char* hidden_key = f == Family::kGpt2 ? "n_embd" : "hidden_size";
  const char* kv_key = "num_key_value_heads";
  if (f == Family::kFalcon) {
    kv_key = "num_kv_heads";
    bool multi_query = true, new_arch = false;
    PIPECAST_RETURN_IF_ERROR(k.Bool("multi_query", &multi_query));
    PIPECAST_RETURN_IF_ERROR(k.Bool("new_decoder_architecture", &new_arch));
    // FalconAttention: num_kv_heads with the new architecture or without
    // multi-query; one key/value head with multi-query.
    if (!new_arch && multi_query) {
      s->kv_heads = 1;
      kv_key = nullptr;
    }
  }
  if (f == Family::kGpt2) kv_key = nullptr;
  if (kv_key != nullptr) {
    PIPECAST_RETURN_IF_ERROR(
        k.Int(kv_key, false, 1, kMaxSpecWidth, "the key/value heads", &s->kv_heads));
  }
  if (!IsDeepseek(f) && f != Family::kGpt2 && f != Family::kGptNeox && f != Family::kFalcon &&
      f != Family::kPhi3) {
    PIPECAST_RETURN_IF_ERROR(
        k.Int("head_dim", false, 1, kMaxSpecWidth, "channels per attention head", &s->head_dim));
  }
  if (s->head_dim == 0 && !IsDeepseek(f) && s->hidden % s->heads != 0) {
    return k.Error(fmt::format(
        "{} {} is not divisible by {} {}, and head_dim is not given: each head needs "
        "{}/{} channels; fix the file or give head_dim",
        k.Name(hidden_key), s->hidden, k.Name(heads_key), s->heads, hidden_key, heads_key));
  }
  if (s->kv_heads > 0 && s->heads % s->kv_heads != 0) {
    return k.Error(fmt::format(
        "{} {} is not divisible by {} {}: each key/value head serves a whole group of query "
        "heads",
        k.Name(heads_key), s->heads, k.Name(kv_key != nullptr ? kv_key : "num_kv_heads"),
        s->kv_heads));
  }
  if (s->kv_heads > s->heads) {
    return k.Error(fmt::format("{} {} is more than {} {}",
                               k.Name(kv_key != nullptr ? kv_key : "num_kv_heads"), s->kv_heads,
                               k.Name(heads_key), s->heads));
  }
  return Status::Ok();
}

// DeepSeek's multi-head latent attention.
Status ReadMla(const Keys& k, TransformerSpec* s) {
  MlaSpec& m = s->mla;
  PIPECAST_RETURN_IF_ERROR(k.Int("kv_lora_rank", true, 1, kMaxSpecWidth,
                                 "the width of the key/value latent (MLA)", &m.kv_lora_rank));
  PIPECAST_RETURN_IF_ERROR(k.Int("q_lora_rank", false, 1, kMaxSpecWidth,
                                 "the width of the query latent (MLA); null: none",
                                 &m.q_lora_rank));
  PIPECAST_RETURN_IF_ERROR(k.Int("qk_nope_head_dim", true, 0, kMaxSpecWidth,
                                 "query/key channels per head without rotary",
                                 &m.qk_nope_head_dim));
  PIPECAST_RETURN_IF_ERROR(k.Int("qk_rope_head_dim", true, 0, kMaxSpecWidth,
                                 "query/key channels per head with rotary", &m.qk_rope_head_dim));
  PIPECAST_RETURN_IF_ERROR(
      k.Int("v_head_dim", true, 1, kMaxSpecWidth, "value channels per head", &m.v_head_dim));
  if (m.qk_nope_head_dim + m.qk_rope_head_dim < 1) {
    return k.Error(fmt::format("{} and {} are both 0: a query head needs channels",
                               k.Name("qk_nope_head_dim"), k.Name("qk_rope_head_dim")));
  }
  return Status::Ok();
}

// DeepSeek-V2/V3's shared experts, dense leading blocks, routing and
// multi-token prediction.
Status ReadDeepseekMoe(const Keys& k, TransformerSpec* s, std::vector<int>* dense,
                       std::vector<std::string>* notes) {
  MoeSpec& m = s->moe;
  PIPECAST_RETURN_IF_ERROR(k.Int("n_shared_experts", false, 0, kMaxSpecExperts,
                                 "the shared experts", &m.shared_experts));
  int first_dense = 0, period = 1;
  PIPECAST_RETURN_IF_ERROR(k.Int("first_k_dense_replace", false, 0, s->layers,
                                 "the leading blocks with a dense MLP", &first_dense));
  PIPECAST_RETURN_IF_ERROR(
      k.Int("moe_layer_freq", false, 1, kMaxSpecLayers, "every how many blocks", &period));
  // DeepseekV2/V3DecoderLayer: experts where layer >= first_k_dense_replace
  // and layer % moe_layer_freq == 0.
  for (int i = 0; i < s->layers; ++i) {
    if (i < first_dense || i % period != 0) dense->push_back(i);
  }
  PIPECAST_RETURN_IF_ERROR(k.String("scoring_func", &m.scoring));
  PIPECAST_RETURN_IF_ERROR(k.String("topk_method", &m.topk_method));
  PIPECAST_RETURN_IF_ERROR(k.Number("routed_scaling_factor", &m.routed_scaling_factor));
  PIPECAST_RETURN_IF_ERROR(
      k.Int("n_group", false, 0, kMaxSpecExperts, "the expert groups", &m.expert_groups));
  PIPECAST_RETURN_IF_ERROR(
      k.Int("topk_group", false, 0, kMaxSpecExperts, "the groups a token may use", &m.topk_groups));
  // DeepSeek-V3's aux-loss-free balancing keeps a score bias per expert.
  m.router_bias = m.topk_method == "noaux_tc";
  int mtp = 0;
  PIPECAST_RETURN_IF_ERROR(k.Int("num_nextn_predict_layers", false, 0, kMaxSpecLayers,
                                 "multi-token prediction modules", &mtp));
  if (mtp > 0) {
    notes->push_back(fmt::format(
        "num_nextn_predict_layers {}: the multi-token prediction module(s) are not counted or "
        "estimated (DeepSeek's published 671B for V3 excludes them)",
        mtp));
  }
  return Status::Ok();
}

// Qwen2/3-MoE's sparse step, dense blocks and (Qwen2) gated shared expert.
Status ReadQwenMoe(const Keys& k, Family f, TransformerSpec* s, std::vector<int>* dense) {
  MoeSpec& m = s->moe;
  int step = 1;
  PIPECAST_RETURN_IF_ERROR(k.Int("decoder_sparse_step", false, 1, kMaxSpecLayers,
                                 "every how many blocks has experts", &step));
  std::vector<int> mlp_only;
  PIPECAST_RETURN_IF_ERROR(k.BlockList("mlp_only_layers", s->layers, &mlp_only));
  // Qwen2/3-MoE decoder layer: experts unless in mlp_only_layers, and
  // where (layer + 1) % decoder_sparse_step == 0.
  for (int i = 0; i < s->layers; ++i) {
    const bool listed = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
    if (listed || (i + 1) % step != 0) dense->push_back(i);
  }
  if (f == Family::kQwen2Moe) {
    PIPECAST_RETURN_IF_ERROR(k.Int("shared_expert_intermediate_size", false, 0, kMaxSpecWidth,
                                   "the shared expert's MLP width", &m.shared_expert_ffn));
    if (m.shared_expert_ffn > 0) {
      m.shared_experts = 1;
      m.shared_expert_gate = true;  // Qwen2MoeSparseMoeBlock.shared_expert_gate, h -> 1
    }
  }
  return Status::Ok();
}

// The experts of the MoE families, and which blocks have them.
Status ReadMoe(const Keys& k, Family f, TransformerSpec* s, std::vector<std::string>* notes) {
  MoeSpec& m = s->moe;
  const char* experts_key = f == Family::kMixtral ? "num_local_experts"
                            : IsDeepseek(f)       ? "n_routed_experts"
                                                  : "num_experts";
  PIPECAST_RETURN_IF_ERROR(
      k.Int(experts_key, true, 1, kMaxSpecExperts, "the routed experts per MoE block", &m.experts));
  PIPECAST_RETURN_IF_ERROR(k.Int("num_experts_per_tok", true, 1, kMaxSpecExperts,
                                 "the routed experts each token goes to", &m.experts_per_token));
  if (m.experts_per_token > m.experts) {
    return k.Error(
        fmt::format("num_experts_per_tok {} is more than {} {}: a token cannot go to "
                    "more experts than there are",
                    m.experts_per_token, k.Name(experts_key), m.experts));
  }
  if (f == Family::kMixtral) {
    m.expert_ffn = s->ffn_hidden;  // Mixtral's intermediate_size is each expert's width
    m.norm_topk_prob = true;       // MixtralSparseMoeBlock renormalises the top-k weights
  } else {
    PIPECAST_RETURN_IF_ERROR(k.Int("moe_intermediate_size", true, 1, kMaxSpecWidth,
                                   "each routed expert's MLP width", &m.expert_ffn));
    PIPECAST_RETURN_IF_ERROR(k.Bool("norm_topk_prob", &m.norm_topk_prob));
  }
  PIPECAST_RETURN_IF_ERROR(
      k.Number(IsDeepseek(f) ? "aux_loss_alpha" : "router_aux_loss_coef", &m.router_aux_loss_coef));
  std::vector<int> dense;
  if (IsDeepseek(f)) {
    PIPECAST_RETURN_IF_ERROR(ReadDeepseekMoe(k, s, &dense, notes));
  } else if (f == Family::kQwen2Moe || f == Family::kQwen3Moe) {
    PIPECAST_RETURN_IF_ERROR(ReadQwenMoe(k, f, s, &dense));
  }
  m.dense_layers = std::move(dense);
  return Status::Ok();
}

// Which blocks attend within a sliding window, per family.
Status ReadWindow(const Keys& k, Family f, TransformerSpec* s) {
  const auto all_but = [&](auto is_full) {
    s->full_attention_layers.clear();
    for (int i = 0; i < s->layers; ++i) {
      if (is_full(i)) s->full_attention_layers.push_back(i);
    }
  };
  if (IsQwen(f)) {
    bool use = false;
    PIPECAST_RETURN_IF_ERROR(k.Bool("use_sliding_window", &use));
    if (!use) return Status::Ok();  // sliding_window is ignored without it (Qwen2Config)
    PIPECAST_RETURN_IF_ERROR(k.Int("sliding_window", true, 1, kMaxSpecSequence,
                                   "the keys a query attends to", &s->sliding_window));
    int full = s->layers;  // Qwen2Config's default max_window_layers is 28; files give it
    PIPECAST_RETURN_IF_ERROR(k.Int("max_window_layers", false, 0, kMaxSpecLayers,
                                   "the leading blocks with full attention", &full));
    all_but([&](int i) { return i < full; });
  } else if (f == Family::kMistral || f == Family::kMixtral || f == Family::kPhi3) {
    PIPECAST_RETURN_IF_ERROR(k.Int("sliding_window", false, 1, kMaxSpecSequence,
                                   "the keys a query attends to", &s->sliding_window));
  } else if (IsGemma(f)) {
    s->sliding_window = 4096;  // Gemma2Config's and Gemma3TextConfig's default
    PIPECAST_RETURN_IF_ERROR(k.Int("sliding_window", false, 1, kMaxSpecSequence,
                                   "the keys a query attends to", &s->sliding_window));
    int pattern = 2;  // Gemma 2: even blocks slide, odd ones see everything
    if (f == Family::kGemma3Text) {
      pattern = 6;  // Gemma3TextConfig: one global block in six
      PIPECAST_RETURN_IF_ERROR(k.Int("sliding_window_pattern", false, 1, kMaxSpecLayers,
                                     "one block in how many has full attention", &pattern));
    }
    all_but([&](int i) { return (i + 1) % pattern == 0; });
  }
  // Newer files spell every block out; they win over the rules above.
  if (k.Has("layer_types")) {
    const json& types = k.object().at("layer_types");
    if (!types.is_array() || static_cast<int>(types.size()) != s->layers) {
      return k.Error("layer_types", fmt::format("must list one type per block ({}), got {}",
                                                s->layers, Shown(types)));
    }
    std::vector<int> full;
    for (int i = 0; i < s->layers; ++i) {
      const json& t = types[i];
      if (t == "full_attention") {
        full.push_back(i);
      } else if (t != "sliding_attention") {
        return k.Error(
            "layer_types",
            fmt::format("[{}] is {}; known: full_attention, sliding_attention", i, Shown(t)));
      }
    }
    if (s->sliding_window > 0) s->full_attention_layers = std::move(full);
  }
  return Status::Ok();
}

// rope_scaling changes positions, not costs: checked and recorded.
Status ReadRopeScaling(const Keys& k, std::vector<std::string>* notes) {
  const json* rope = nullptr;
  PIPECAST_RETURN_IF_ERROR(k.Object("rope_scaling", &rope));
  if (rope == nullptr) return Status::Ok();
  Keys r(*rope, k.file(), k.Name("rope_scaling."));
  std::string type;
  PIPECAST_RETURN_IF_ERROR(r.String("rope_type", &type));
  if (type.empty()) PIPECAST_RETURN_IF_ERROR(r.String("type", &type));
  double factor = 0;
  PIPECAST_RETURN_IF_ERROR(r.Number("factor", &factor));
  int original = 0;
  PIPECAST_RETURN_IF_ERROR(r.Int("original_max_position_embeddings", false, 1, kMaxSpecSequence,
                                 "the context before scaling", &original));
  notes->push_back(fmt::format(
      "rope_scaling {}{}{}: positions only; no change to parameters, FLOPs or memory",
      type.empty() ? "(no type)" : type, factor > 0 ? fmt::format(" factor {}", factor) : "",
      original > 0 ? fmt::format(" from {} positions", original) : ""));
  return Status::Ok();
}

// The defaults a family sets before its keys: norm, gated MLP, biases,
// norms per block, qk-norm, tied embeddings, activation.
Status ReadFamilyDefaults(const Keys& k, Family f, TransformerSpec* s) {
  s->learned_positions = f == Family::kGpt2;
  // Families with RMSNorm, a gated MLP and no biases unless a key adds them.
  const bool llama_like = f != Family::kGpt2 && f != Family::kGptNeox && f != Family::kFalcon;
  s->norm = llama_like ? NormKind::kRmsNorm : NormKind::kLayerNorm;
  s->gated_mlp = llama_like;
  s->qkv_bias = s->output_bias = s->mlp_bias = !llama_like;
  s->block_norms = IsGemma(f) ? 4 : 2;  // Gemma: a norm before and after attention and MLP
  s->qk_norm = f == Family::kQwen3 || f == Family::kQwen3Moe || f == Family::kGemma3Text;
  s->tied_embeddings = IsGemma(f) || f == Family::kGpt2 || f == Family::kFalcon;
  PIPECAST_RETURN_IF_ERROR(k.Bool("tie_word_embeddings", &s->tied_embeddings));
  s->activation = llama_like ? (IsGemma(f) ? "gelu_pytorch_tanh" : "silu") : "gelu";
  PIPECAST_RETURN_IF_ERROR(
      k.String(IsGemma(f) ? "hidden_activation" : "hidden_act", &s->activation));
  return Status::Ok();
}

// GPT-2's MLP width and activation.
Status ReadGpt2Block(const Keys& k, TransformerSpec* s) {
  PIPECAST_RETURN_IF_ERROR(
      k.Int("n_inner", false, 1, kMaxSpecWidth, "the MLP width; null: 4 x n_embd", &s->ffn_hidden));
  PIPECAST_RETURN_IF_ERROR(k.String("activation_function", &s->activation));
  if (!k.Has("activation_function")) s->activation = "gelu_new";
  return Status::Ok();
}

// GPT-NeoX's MLP width, parallel residual, attention biases and rotary share.
Status ReadGptNeoxBlock(const Keys& k, TransformerSpec* s, std::vector<std::string>* notes) {
  PIPECAST_RETURN_IF_ERROR(
      k.Int("intermediate_size", true, 1, kMaxSpecWidth, "the MLP width", &s->ffn_hidden));
  s->parallel_block = true;  // GPTNeoXConfig's use_parallel_residual default
  PIPECAST_RETURN_IF_ERROR(k.Bool("use_parallel_residual", &s->parallel_block));
  bool attention_bias = true;
  PIPECAST_RETURN_IF_ERROR(k.Bool("attention_bias", &attention_bias));
  s->qkv_bias = s->output_bias = attention_bias;
  double rotary = 0;
  PIPECAST_RETURN_IF_ERROR(k.Number("rotary_pct", &rotary));
  if (rotary > 0) {
    notes->push_back(
        fmt::format("rotary_pct {}: rotary positions on part of each head; no "
                    "parameters",
                    rotary));
  }
  return Status::Ok();
}

// Falcon's MLP width, biases, activation and block layout.
Status ReadFalconBlock(const Keys& k, TransformerSpec* s, std::vector<std::string>* notes) {
  s->ffn_hidden = 0;  // FalconConfig: ffn_hidden_size defaults to 4 x hidden_size
  PIPECAST_RETURN_IF_ERROR(
      k.Int("ffn_hidden_size", false, 1, kMaxSpecWidth, "the MLP width", &s->ffn_hidden));
  bool bias = false, parallel = true, new_arch = false, alibi = false;
  PIPECAST_RETURN_IF_ERROR(k.Bool("bias", &bias));
  PIPECAST_RETURN_IF_ERROR(k.Bool("parallel_attn", &parallel));
  PIPECAST_RETURN_IF_ERROR(k.Bool("new_decoder_architecture", &new_arch));
  PIPECAST_RETURN_IF_ERROR(k.Bool("alibi", &alibi));
  s->qkv_bias = s->output_bias = s->mlp_bias = bias;
  s->activation = "gelu";
  PIPECAST_RETURN_IF_ERROR(k.String("activation", &s->activation));
  // FalconDecoderLayer: the new architecture has ln_attn and ln_mlp
  // (num_ln_in_parallel_attn 2); a parallel block otherwise one input
  // norm; a sequential one two.
  int parallel_norms = 2;
  PIPECAST_RETURN_IF_ERROR(
      k.Int("num_ln_in_parallel_attn", false, 1, 2, "norms of a parallel block", &parallel_norms));
  s->parallel_block = parallel || new_arch;
  s->block_norms = new_arch ? parallel_norms : (parallel ? 1 : 2);
  if (!k.Has("max_position_embeddings")) s->max_positions = 2048;  // FalconConfig default
  if (alibi) notes->push_back("alibi: linear attention biases instead of rotary; no parameters");
  return Status::Ok();
}

// The LLaMA-like families' MLP width and biases.
Status ReadLlamaLikeBlock(const Keys& k, Family f, TransformerSpec* s) {
  const char* ffn_about = f == Family::kMixtral ? "each expert's MLP width" : "the MLP width";
  PIPECAST_RETURN_IF_ERROR(
      k.Int("intermediate_size", true, 1, kMaxSpecWidth, ffn_about, &s->ffn_hidden));
  if (f == Family::kQwen2 || f == Family::kQwen2Moe) {
    s->qkv_bias = true;  // Qwen2Attention: q, k and v with biases, o without
  } else {
    bool attention_bias = false;
    PIPECAST_RETURN_IF_ERROR(k.Bool("attention_bias", &attention_bias));
    s->qkv_bias = s->output_bias = attention_bias;
  }
  if (f == Family::kLlama) PIPECAST_RETURN_IF_ERROR(k.Bool("mlp_bias", &s->mlp_bias));
  return Status::Ok();
}

// The block's own keys, per family.
Status ReadBlock(const Keys& k, Family f, TransformerSpec* s, std::vector<std::string>* notes) {
  switch (f) {
    case Family::kGpt2:
      return ReadGpt2Block(k, s);
    case Family::kGptNeox:
      return ReadGptNeoxBlock(k, s, notes);
    case Family::kFalcon:
      return ReadFalconBlock(k, s, notes);
    default:
      return ReadLlamaLikeBlock(k, f, s);
  }
}

// Everything of one model_type's object.
Status ReadFamily(const Keys& k, Family f, TransformerSpec* s, std::vector<std::string>* notes) {
  PIPECAST_RETURN_IF_ERROR(ReadCore(k, f, s));
  PIPECAST_RETURN_IF_ERROR(ReadHeads(k, f, s));
  PIPECAST_RETURN_IF_ERROR(ReadFamilyDefaults(k, f, s));
  const char* positions = f == Family::kGpt2 ? "n_positions" : "max_position_embeddings";
  PIPECAST_RETURN_IF_ERROR(k.Int(positions, f == Family::kGpt2, 1, kMaxSpecSequence,
                                 "the model's context", &s->max_positions));
  PIPECAST_RETURN_IF_ERROR(ReadRopeScaling(k, notes));

  PIPECAST_RETURN_IF_ERROR(ReadBlock(k, f, s, notes));
  if (IsDeepseek(f)) PIPECAST_RETURN_IF_ERROR(ReadMla(k, s));
  if (IsMoe(f)) PIPECAST_RETURN_IF_ERROR(ReadMoe(k, f, s, notes));
  PIPECAST_RETURN_IF_ERROR(ReadWindow(k, f, s));
  if (IsGemma(f)) {
    notes->push_back(
        "Gemma: embeddings scaled by sqrt(hidden_size), logit soft-capping where "
        "set: element-wise, not counted");
  }
  return Status::Ok();
}

std::string KnownList() {
  std::string list;
  for (const std::string& name : KnownHfModelTypes()) list += (list.empty() ? "" : ", ") + name;
  return list;
}

}  // namespace

const std::vector<std::string>& KnownHfModelTypes() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out = {"gemma3"};
    for (const KnownType& t : kKnownTypes) out.emplace_back(t.name);
    std::sort(out.begin(), out.end());
    return out;
  }();
  return names;
}

Result<HfConfig> ParseHfConfig(std::string_view text, const std::string& file) {
  if (auto deep = JsonTooDeep(text)) {
    return Status::InvalidArgument(fmt::format("{}: {}", file, *deep));
  }
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return Status::InvalidArgument(
        fmt::format("{}: not valid JSON at byte {}: {}; give the model's config.json as published",
                    file, e.byte, WithoutExceptionId(e.what())));
  } catch (const json::exception& e) {  // e.g. out_of_range: 1e400
    return Status::InvalidArgument(
        fmt::format("{}: not valid JSON: {}", file, WithoutExceptionId(e.what())));
  }
  try {
    if (!root.is_object()) {
      return Status::InvalidArgument(fmt::format(
          "{}: must be a JSON object (a HuggingFace config.json), got {}", file, Shown(root)));
    }
    const Keys top(root, file, "");
    std::string type;
    PIPECAST_RETURN_IF_ERROR(top.String("model_type", &type));
    if (!top.Has("model_type")) {
      return top.Error("model_type",
                       "is missing: pipecast reads a config.json by its model_type (known: " +
                           KnownList() + ")");
    }
    HfConfig config;
    config.model_type = type;
    const json* object = &root;
    std::string prefix;
    if (type == "gemma3") {  // the multimodal file: the language model is text_config
      PIPECAST_RETURN_IF_ERROR(top.Object("text_config", &object));
      if (object == nullptr) {
        return top.Error("text_config",
                         "is missing: a gemma3 config.json holds its language model there");
      }
      type = "gemma3_text";
      prefix = "text_config.";
      config.model_type = "gemma3 (text_config: gemma3_text)";
      config.notes.push_back(
          "gemma3: the language model (text_config) only; the vision tower and the multimodal "
          "projector are not counted");
    }
    const KnownType* known = nullptr;
    for (const KnownType& t : kKnownTypes) {
      if (type == t.name) known = &t;
    }
    if (known == nullptr) {
      return top.Error("model_type", fmt::format("'{}' is not a model_type pipecast reads; known: "
                                                 "{}. Give the architecture with flags instead "
                                                 "(--layers, --hidden, --heads, ...)",
                                                 type, KnownList()));
    }
    const Keys keys(*object, file, prefix);
    PIPECAST_RETURN_IF_ERROR(ReadFamily(keys, known->family, &config.architecture, &config.notes));
    return config;
  } catch (const json::exception& e) {  // a field check missed a type: still a clean error
    return Status::InvalidArgument(
        fmt::format("{}: unexpected value: {}", file, WithoutExceptionId(e.what())));
  }
}

Result<HfConfig> LoadHfConfig(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status().WithPrefix("--hf-config");
  return ParseHfConfig(*text, path);
}

}  // namespace pipecast
