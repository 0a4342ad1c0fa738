// model.json (formats/formats.h, docs/formats.md): its fields, ranges and cross-field rules
// (cluster files: formats/cluster_io.cc). The typed reads, the JSON parse and the wording of field
// errors come from the formats part's one JSON reader (formats/internal/json_reader.h):
// nlohmann::json exceptions are caught there and here, and every failure becomes a Status naming
// the file, the JSON path and what to do. The cluster presets live in cluster.cc.
#include "formats/formats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "base/units.h"
#include "formats/file_util.h"
#include "formats/internal/format_rules.h"
#include "formats/internal/json_reader.h"

namespace pipecast {
namespace {

using json = internal::Json;
using internal::Dump;
using internal::Element;
using internal::IntRule;
using internal::Join;
using internal::Member;
using internal::NumberRule;
using internal::ParseWith;
using internal::Shown;
using internal::WithoutExceptionId;
using Reader = internal::JsonReader;
using internal::kCapacityFactor;
using internal::kCollectives;
using internal::kGlobalBatch;
using internal::kLayerFlops;
using internal::kMaxExperts;
using internal::kMaxMoeHidden;
using internal::kMicrobatchSize;
using internal::kParameterCount;
using internal::kSampleFlops;
using internal::kSequenceLength;
using internal::kSizeBytes;
using internal::kSourceMethods;
using internal::kTensorParallel;
using internal::kTimeUs;

// ---------------------------------------------------------------------------
// model.json

Status ReadSource(const Reader& r, const json& v, ModelSource* source) {
  const std::string path = "source";
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(v, path));
  const std::vector<std::string_view> methods(std::begin(kSourceMethods), std::end(kSourceMethods));
  const std::string about = "the method, one of " + Join(methods);
  PIPECAST_RETURN_IF_ERROR(r.String(v, path, "method", about.c_str(), &source->method));
  if (std::find(methods.begin(), methods.end(), source->method) == methods.end()) {
    return r.Error(Member(path, "method"), fmt::format("\"{}\" is not a method; use one of {}",
                                                       source->method, Join(methods)));
  }
  std::optional<std::string> device;
  PIPECAST_RETURN_IF_ERROR(r.String(v, path, "device", &device));
  source->device = device.value_or("");
  source->details.clear();
  for (const auto& item : v.items()) {
    if (item.key() == "method" || item.key() == "device") continue;
    source->details[item.key()] = item.value().dump(-1, ' ', false, json::error_handler_t::replace);
  }
  source->architecture.reset();
  if (auto arch = v.find("architecture"); arch != v.end() && arch->is_object()) {
    auto count = [&](const char* key) -> int64_t {
      auto it = arch->find(key);
      return it != arch->end() && it->is_number_integer() ? it->get<int64_t>() : 0;
    };
    auto flag = [&](const char* key) -> std::optional<bool> {
      auto it = arch->find(key);
      if (it == arch->end() || !it->is_boolean()) return std::nullopt;
      return it->get<bool>();
    };
    ModelArchitecture a;
    a.hidden = count("hidden");
    a.sequence_length = count("sequence_length");
    a.heads = count("heads");
    a.kv_heads = count("kv_heads");
    a.layers = count("layers");
    a.ffn_hidden = count("ffn_hidden");
    a.vocab = count("vocab");
    a.head_dim = count("head_dim");
    a.block_norms = count("block_norms");
    a.sliding_window = count("sliding_window");
    if (auto it = arch->find("norm"); it != arch->end() && it->is_string()) {
      a.norm = it->get<std::string>();
    }
    a.gated_mlp = flag("gated_mlp");
    a.tied_embeddings = flag("tied_embeddings");
    a.learned_positions = flag("learned_positions");
    a.qk_norm = flag("qk_norm");
    a.qkv_bias = flag("qkv_bias");
    a.output_bias = flag("output_bias");
    a.mlp_bias = flag("mlp_bias");
    a.parallel_block = flag("parallel_block");
    a.moe = arch->contains("moe");
    a.mla = arch->contains("mla");
    source->architecture = std::move(a);
  }
  return Status::Ok();
}

// The optional memory fields of a profile (docs/formats.md): what full and
// selective recomputation keep and drop, and what the weight-gradient op keeps.
Status ReadMemoryFields(const Reader& r, const json& v, const std::string& path, LayerProfile* p) {
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(v, path, "checkpoint_bytes", kSizeBytes, &p->checkpoint_bytes));
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(v, path, "attention_core_bytes", kSizeBytes, &p->attention_core_bytes));
  PIPECAST_RETURN_IF_ERROR(r.Time(v, path, "attention_core_us", kTimeUs, &p->attention_core_ns));
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(v, path, "weight_grad_bytes", kSizeBytes, &p->weight_grad_bytes));
  PIPECAST_RETURN_IF_ERROR(r.Integer(v, path, "op_saved_bytes", kSizeBytes, &p->op_saved_bytes));
  PIPECAST_RETURN_IF_ERROR(r.Time(v, path, "op_recompute_us", kTimeUs, &p->op_recompute_ns));
  if (p->op_saved_bytes.has_value() != p->op_recompute_ns.has_value()) {
    return r.Error(
        path,
        "gives only one of op_saved_bytes and op_recompute_us; give both (docs/formats.md, "
        "per-op recomputation) or neither");
  }
  auto within_activations = [&](const char* key, const std::optional<Bytes>& bytes) {
    if (!bytes || *bytes <= p->activation_bytes) return Status::Ok();
    return r.Error(Member(path, key),
                   fmt::format("{} is more than activation_bytes ({}); it is part of what the "
                               "forward keeps, so it must be <= activation_bytes",
                               Shown(v[key]), Shown(v["activation_bytes"])));
  };
  PIPECAST_RETURN_IF_ERROR(within_activations("checkpoint_bytes", p->checkpoint_bytes));
  PIPECAST_RETURN_IF_ERROR(r.Integer(v, path, "tp_comm_bytes", kSizeBytes, &p->tp_comm_bytes));
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(v, path, "tp_forward_collectives", kCollectives, &p->tp_forward_collectives));
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(v, path, "tp_backward_collectives", kCollectives, &p->tp_backward_collectives));
  const bool any = p->tp_comm_bytes || p->tp_forward_collectives || p->tp_backward_collectives;
  const bool all = p->tp_comm_bytes && p->tp_forward_collectives && p->tp_backward_collectives;
  if (any && !all) {
    return r.Error(path,
                   "gives only some of tp_comm_bytes, tp_forward_collectives and "
                   "tp_backward_collectives; give all three (docs/formats.md, tensor "
                   "parallelism) or none");
  }
  PIPECAST_RETURN_IF_ERROR(within_activations("attention_core_bytes", p->attention_core_bytes));
  PIPECAST_RETURN_IF_ERROR(within_activations("op_saved_bytes", p->op_saved_bytes));
  auto within_forward = [&](const char* key, const std::optional<TimeNs>& ns) {
    if (!ns || *ns <= p->forward_ns) return Status::Ok();
    return r.Error(Member(path, key),
                   fmt::format("{} is more than forward_us ({}); it is part of the forward, so it "
                               "must be <= forward_us",
                               Shown(v[key]), Shown(v["forward_us"])));
  };
  PIPECAST_RETURN_IF_ERROR(within_forward("attention_core_us", p->attention_core_ns));
  PIPECAST_RETURN_IF_ERROR(within_forward("op_recompute_us", p->op_recompute_ns));
  return Status::Ok();
}

// Megatron-LM's selective recomputation by module (docs/formats.md): what
// the layernorm, moe_act, mla_up_proj and mlp checkpoints drop and rerun, each pair whole or
// absent, within the activations and the forward.
Status ReadModuleFields(const Reader& r, const json& v, const std::string& path, LayerProfile* p) {
  struct Pair {
    const char* bytes_key;
    const char* us_key;
    std::optional<Bytes>* bytes;
    std::optional<TimeNs>* ns;
  };
  for (const Pair& m :
       {Pair{"layernorm_bytes", "layernorm_us", &p->layernorm_bytes, &p->layernorm_ns},
        Pair{"moe_act_bytes", "moe_act_us", &p->moe_act_bytes, &p->moe_act_ns},
        Pair{"mla_up_proj_bytes", "mla_up_proj_us", &p->mla_up_proj_bytes, &p->mla_up_proj_ns},
        Pair{"mlp_bytes", "mlp_us", &p->mlp_bytes, &p->mlp_ns}}) {
    PIPECAST_RETURN_IF_ERROR(r.Integer(v, path, m.bytes_key, kSizeBytes, m.bytes));
    PIPECAST_RETURN_IF_ERROR(r.Time(v, path, m.us_key, kTimeUs, m.ns));
    if (m.bytes->has_value() != m.ns->has_value()) {
      return r.Error(path, fmt::format("gives only one of {} and {}; give both (docs/formats.md, "
                                       "recomputation by module) or neither",
                                       m.bytes_key, m.us_key));
    }
    if (*m.bytes && **m.bytes > p->activation_bytes) {
      return r.Error(Member(path, m.bytes_key),
                     fmt::format("{} is more than activation_bytes ({}); it is part of what the "
                                 "forward keeps, so it must be <= activation_bytes",
                                 Shown(v[m.bytes_key]), Shown(v["activation_bytes"])));
    }
    if (*m.ns && **m.ns > p->forward_ns) {
      return r.Error(Member(path, m.us_key),
                     fmt::format("{} is more than forward_us ({}); it is part of the forward, so "
                                 "it must be <= forward_us",
                                 Shown(v[m.us_key]), Shown(v["forward_us"])));
    }
  }
  return Status::Ok();
}

// An MoE layer's `routed_experts` (RoutedExpertsCost in sim/model.h): one entry per
// expert-tensor-parallel degree, each with its forward, whole backward and weight-gradient time,
// one of them at the profile's own tensor_parallel (what its times hold, within them).
Status ReadRoutedExperts(const Reader& r, const json& v, const std::string& path, LayerProfile* p) {
  const json* list = nullptr;
  PIPECAST_RETURN_IF_ERROR(r.Find(v, path, "routed_experts", "", false, &list));
  if (list == nullptr) return Status::Ok();
  const std::string where = Member(path, "routed_experts");
  if (!list->is_array() || list->empty()) {
    return r.Error(where,
                   "must be a non-empty list of {expert_tensor_parallel, forward_us, backward_us, "
                   "backward_weight_us} (the routed experts at each etp), got " +
                       Shown(*list) + "; drop it to keep the profile's own times");
  }
  p->routed_experts.assign(list->size(), RoutedExpertsCost{});
  for (size_t i = 0; i < list->size(); ++i) {
    const json& e = (*list)[i];
    const std::string at = Element(where, i);
    RoutedExpertsCost& c = p->routed_experts[i];
    PIPECAST_RETURN_IF_ERROR(r.CheckObject(e, at));
    PIPECAST_RETURN_IF_ERROR(r.CheckKeys(
        e, at, {"expert_tensor_parallel", "forward_us", "backward_us", "backward_weight_us"}));
    PIPECAST_RETURN_IF_ERROR(
        r.Integer(e, at, "expert_tensor_parallel",
                  IntRule{1, internal::kMaxTensorParallel, "2^16",
                          "an expert-tensor-parallel degree etp (GPUs splitting each expert)"},
                  &c.expert_tensor_parallel));
    PIPECAST_RETURN_IF_ERROR(r.Time(e, at, "forward_us", kTimeUs, &c.forward_ns));
    PIPECAST_RETURN_IF_ERROR(r.Time(e, at, "backward_us", kTimeUs, &c.backward_ns));
    PIPECAST_RETURN_IF_ERROR(r.Time(e, at, "backward_weight_us", kTimeUs, &c.backward_weight_ns));
    if (c.backward_weight_ns > c.backward_ns) {
      return r.Error(Member(at, "backward_weight_us"),
                     fmt::format("{} is more than backward_us ({}); it is the weight-gradient "
                                 "part of the experts' backward, so it must be <= backward_us",
                                 Shown(e["backward_weight_us"]), Shown(e["backward_us"])));
    }
    for (size_t j = 0; j < i; ++j) {
      if (p->routed_experts[j].expert_tensor_parallel == c.expert_tensor_parallel) {
        return r.Error(Member(at, "expert_tensor_parallel"),
                       fmt::format("{} is already given in {}; keep one entry per etp",
                                   c.expert_tensor_parallel, Element(where, j)));
      }
    }
  }
  std::sort(p->routed_experts.begin(), p->routed_experts.end(),
            [](const RoutedExpertsCost& a, const RoutedExpertsCost& b) {
              return a.expert_tensor_parallel < b.expert_tensor_parallel;
            });
  const auto own = std::find_if(
      p->routed_experts.begin(), p->routed_experts.end(),
      [&](const RoutedExpertsCost& c) { return c.expert_tensor_parallel == p->tensor_parallel; });
  if (own == p->routed_experts.end()) {
    return r.Error(where, fmt::format("has no entry at expert_tensor_parallel {} (the profile's "
                                      "tensor_parallel): the profile's times hold the routed "
                                      "experts at etp = t, and the other entries replace it",
                                      p->tensor_parallel));
  }
  if (own->forward_ns > p->forward_ns || own->backward_ns > p->backward_ns ||
      (p->backward_weight_ns && own->backward_weight_ns > *p->backward_weight_ns)) {
    return r.Error(
        where, fmt::format("the entry at expert_tensor_parallel {} ({} / {} / {} us) is more "
                           "than the profile's forward_us, backward_us or backward_weight_us; "
                           "it is part of them",
                           p->tensor_parallel, NsToUs(own->forward_ns), NsToUs(own->backward_ns),
                           NsToUs(own->backward_weight_ns)));
  }
  return Status::Ok();
}

Status ReadProfile(const Reader& r, const json& v, const std::string& path, LayerProfile* p) {
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(v, path));
  PIPECAST_RETURN_IF_ERROR(r.CheckKeys(v, path,
                                       {"microbatch_size",
                                        "tensor_parallel",
                                        "sequence_parallel",
                                        "forward_us",
                                        "backward_us",
                                        "backward_weight_us",
                                        "activation_bytes",
                                        "output_bytes",
                                        "workspace_bytes",
                                        "checkpoint_bytes",
                                        "attention_core_bytes",
                                        "attention_core_us",
                                        "weight_grad_bytes",
                                        "op_saved_bytes",
                                        "op_recompute_us",
                                        "tp_comm_bytes",
                                        "tp_forward_collectives",
                                        "tp_backward_collectives",
                                        "layernorm_bytes",
                                        "layernorm_us",
                                        "moe_act_bytes",
                                        "moe_act_us",
                                        "mla_up_proj_bytes",
                                        "mla_up_proj_us",
                                        "mlp_bytes",
                                        "mlp_us",
                                        "routed_experts"}));
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(v, path, "microbatch_size", kMicrobatchSize, &p->microbatch_size));
  std::optional<int> t;
  PIPECAST_RETURN_IF_ERROR(r.Integer(v, path, "tensor_parallel", kTensorParallel, &t));
  p->tensor_parallel = t.value_or(1);
  if (v.contains("sequence_parallel")) {
    PIPECAST_RETURN_IF_ERROR(r.Bool(v, path, "sequence_parallel", &p->sequence_parallel));
  }
  if (p->sequence_parallel && p->tensor_parallel == 1) {
    return r.Error(Member(path, "sequence_parallel"),
                   "is true but tensor_parallel is 1: sequence parallelism splits over the "
                   "tensor-parallel group, so give tensor_parallel > 1 or drop it");
  }
  PIPECAST_RETURN_IF_ERROR(r.Time(v, path, "forward_us", kTimeUs, &p->forward_ns));
  PIPECAST_RETURN_IF_ERROR(r.Time(v, path, "backward_us", kTimeUs, &p->backward_ns));
  PIPECAST_RETURN_IF_ERROR(r.Time(v, path, "backward_weight_us", kTimeUs, &p->backward_weight_ns));
  if (p->backward_weight_ns && *p->backward_weight_ns > p->backward_ns) {
    return r.Error(Member(path, "backward_weight_us"),
                   fmt::format("{} is more than backward_us ({}); it is the "
                               "weight-gradient part of the whole backward, "
                               "so it must be <= backward_us",
                               Shown(v["backward_weight_us"]), Shown(v["backward_us"])));
  }
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(v, path, "activation_bytes", kSizeBytes, &p->activation_bytes));
  PIPECAST_RETURN_IF_ERROR(r.Integer(v, path, "output_bytes", kSizeBytes, &p->output_bytes));
  std::optional<Bytes> workspace;
  PIPECAST_RETURN_IF_ERROR(r.Integer(v, path, "workspace_bytes", kSizeBytes, &workspace));
  p->workspace_bytes = workspace.value_or(0);
  PIPECAST_RETURN_IF_ERROR(ReadMemoryFields(r, v, path, p));
  PIPECAST_RETURN_IF_ERROR(ReadModuleFields(r, v, path, p));
  return ReadRoutedExperts(r, v, path, p);
}

// A layer's `moe` object (MoeRouting in sim/model.h).
Status ReadMoe(const Reader& r, const json& v, const std::string& path, int64_t parameters,
               MoeRouting* m) {
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(v, path));
  PIPECAST_RETURN_IF_ERROR(r.CheckKeys(
      v, path,
      {"experts", "top_k", "expert_groups", "topk_groups", "hidden", "expert_parameters",
       "bytes_per_element", "capacity_factor", "pad_to_capacity", "group_gemm_us"}));
  PIPECAST_RETURN_IF_ERROR(r.Int(v, path, "experts", 1, kMaxExperts, &m->experts));
  PIPECAST_RETURN_IF_ERROR(r.Int(v, path, "top_k", 1, m->experts, &m->top_k));
  std::optional<int> groups, topk_groups, bytes;
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(v, path, "expert_groups", IntRule{0, m->experts, nullptr, ""}, &groups));
  m->expert_groups = groups.value_or(0);
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(v, path, "topk_groups", IntRule{0, m->expert_groups, nullptr, ""}, &topk_groups));
  m->topk_groups = topk_groups.value_or(0);
  if ((m->expert_groups > 0) != (m->topk_groups > 0)) {
    return r.Error(Member(path, "topk_groups"),
                   "and expert_groups go together: give both (node-limited routing) or neither");
  }
  if (m->expert_groups > 0 && m->experts % m->expert_groups != 0) {
    return r.Error(Member(path, "expert_groups"),
                   fmt::format("{} does not divide experts {}: groups hold equal shares",
                               m->expert_groups, m->experts));
  }
  PIPECAST_RETURN_IF_ERROR(r.Int(v, path, "hidden", 1, kMaxMoeHidden, &m->hidden));
  PIPECAST_RETURN_IF_ERROR(
      r.Int(v, path, "expert_parameters", 0, parameters, &m->expert_parameters));
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(v, path, "bytes_per_element", IntRule{1, 4, nullptr, ""}, &bytes));
  m->bytes_per_element = bytes.value_or(2);
  std::optional<double> capacity;
  PIPECAST_RETURN_IF_ERROR(r.Number(v, path, "capacity_factor", kCapacityFactor, &capacity));
  m->capacity_factor = capacity.value_or(0);
  if (v.contains("pad_to_capacity")) {
    PIPECAST_RETURN_IF_ERROR(r.Bool(v, path, "pad_to_capacity", &m->pad_to_capacity));
  }
  if (m->pad_to_capacity && m->capacity_factor <= 0) {
    return r.Error(Member(path, "pad_to_capacity"),
                   "needs capacity_factor: each expert is padded to capacity_factor x its mean "
                   "tokens (Megatron-LM's --moe-expert-capacity-factor)");
  }
  // A fixed cost per group of one grouped GEMM call: microseconds at most (2.19 us measured).
  return r.Time(v, path, "group_gemm_us",
                NumberRule{0, false, 1e3, "1000 us",
                           "the fixed cost of one group (local expert) in one grouped GEMM call"},
                &m->group_gemm_ns);
}

Status ReadLayer(const Reader& r, const json& v, const std::string& path, Layer* layer) {
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(v, path));
  PIPECAST_RETURN_IF_ERROR(
      r.CheckKeys(v, path, {"name", "parameters", "forward_flops", "profiles", "moe"}));
  PIPECAST_RETURN_IF_ERROR(r.String(v, path, "name", "the layer's name", &layer->name));
  PIPECAST_RETURN_IF_ERROR(r.Integer(v, path, "parameters", kParameterCount, &layer->parameters));
  PIPECAST_RETURN_IF_ERROR(r.Number(v, path, "forward_flops", kLayerFlops, &layer->forward_flops));
  const json* moe = nullptr;
  PIPECAST_RETURN_IF_ERROR(r.Find(v, path, "moe", "", false, &moe));
  if (moe != nullptr) {
    PIPECAST_RETURN_IF_ERROR(
        ReadMoe(r, *moe, Member(path, "moe"), layer->parameters, &layer->moe.emplace()));
  }
  const json* profiles = nullptr;
  PIPECAST_RETURN_IF_ERROR(
      r.Find(v, path, "profiles", "a list of per-micro-batch-size profiles", true, &profiles));
  const std::string list = Member(path, "profiles");
  if (!profiles->is_array()) {
    return r.Error(list, "must be a list of profiles, got " + Shown(*profiles));
  }
  if (profiles->empty()) {
    return r.Error(list,
                   "is empty; add one profile per measured micro-batch "
                   "size");
  }
  layer->profiles.assign(profiles->size(), LayerProfile{});
  for (size_t i = 0; i < profiles->size(); ++i) {
    PIPECAST_RETURN_IF_ERROR(ReadProfile(r, (*profiles)[i], Element(list, i), &layer->profiles[i]));
    for (size_t j = 0; j < i; ++j) {
      const LayerProfile& a = layer->profiles[j];
      const LayerProfile& b = layer->profiles[i];
      if (a.microbatch_size == b.microbatch_size && a.tensor_parallel == b.tensor_parallel &&
          a.sequence_parallel == b.sequence_parallel) {
        return r.Error(Member(Element(list, i), "microbatch_size"),
                       fmt::format("{} was already measured in {}; keep one profile per "
                                   "micro-batch size{}",
                                   b.microbatch_size, Element(list, j),
                                   b.tensor_parallel > 1 ? " and (tensor_parallel, "
                                                           "sequence_parallel)"
                                                         : ""));
      }
    }
    // Interpolating between a split and an unsplit backward would lose the split.
    if (layer->profiles[i].backward_weight_ns.has_value() !=
        layer->profiles[0].backward_weight_ns.has_value()) {
      const bool has = layer->profiles[i].backward_weight_ns.has_value();
      return r.Error(
          Element(list, i),
          fmt::format("{} backward_weight_us but {} {}; give it in every profile "
                      "of a layer or in none",
                      has ? "has" : "has no", Element(list, 0), has ? "does not" : "does"));
    }
  }
  std::sort(layer->profiles.begin(), layer->profiles.end(),
            [](const LayerProfile& a, const LayerProfile& b) {
              return std::tuple(a.tensor_parallel, a.sequence_parallel, a.microbatch_size) <
                     std::tuple(b.tensor_parallel, b.sequence_parallel, b.microbatch_size);
            });
  return Status::Ok();
}

// Megatron-LM's tensor-parallel all-reduces per micro-batch of the analytic
// profiler's layers (forward, backward): a block's attention and MLP each
// end in a row-parallel product (forward all-reduce) and begin with a
// column-parallel one (backward all-reduce); the vocabulary-parallel
// embedding all-reduces its output; the LM head's column-parallel product
// all-reduces its input gradient.
struct LayerCollectives {
  int forward = 0, backward = 0;
};
std::optional<LayerCollectives> AnalyticCollectives(const std::string& name) {
  if (name == "embedding") return LayerCollectives{1, 0};
  if (name == "lm_head") return LayerCollectives{0, 1};
  if (name.rfind("block.", 0) == 0) return LayerCollectives{2, 2};
  return std::nullopt;
}

// For an analytic model: each known layer's TpCommEstimate from
// source.architecture (hidden, sequence_length) and source.bytes_per_element,
// used where a profile gives no tp_comm_bytes (docs/formats.md).
void DeriveTpComm(Model* model) {
  const ModelSource& src = model->source;
  auto bytes_it = src.details.find("bytes_per_element");
  if (src.method != "analytic" || !src.architecture || bytes_it == src.details.end()) return;
  const json bytes = json::parse(bytes_it->second, nullptr, false);
  if (!bytes.is_number()) return;
  const int64_t h = src.architecture->hidden;
  const int64_t s = src.architecture->sequence_length;
  const double b = bytes.get<double>();
  if (h <= 0 || s <= 0 || b <= 0) return;
  const Bytes per_sample = std::llround(static_cast<double>(h * s) * b);
  const std::string from = fmt::format(
      "source.architecture hidden {} x sequence_length {} x {} bytes per element per sample; "
      "Megatron-LM's all-reduces: a block 2 forward and 2 backward, the vocabulary-parallel "
      "embedding 1 and 0, the LM head 0 and 1",
      h, s, b);
  for (Layer& layer : model->layers) {
    if (auto c = AnalyticCollectives(layer.name)) {
      layer.tp_comm_estimate = TpCommEstimate{per_sample, c->forward, c->backward, from};
    }
  }
}

// For an analytic model with a FlashAttention kernel: each block's
// CpAttentionEstimate from source.architecture (sequence_length, heads,
// kv_heads), source.attention_kernel (head_dim, forward_tflops,
// backward_tflops: the kernel's speed at the model's s) and
// source.bytes_per_element (docs/simulator.md, "Context parallelism").
// Forward FLOPs per sample 4 x s^2 x heads x head_dim x 1/2 (causal), the
// backward 2.5x (profiler/attention_rates.h's convention).
void DeriveCpAttention(Model* model) {
  const ModelSource& src = model->source;
  auto bytes_it = src.details.find("bytes_per_element");
  auto kernel_it = src.details.find("attention_kernel");
  if (src.method != "analytic" || !src.architecture || bytes_it == src.details.end() ||
      kernel_it == src.details.end()) {
    return;
  }
  const json bytes = json::parse(bytes_it->second, nullptr, false);
  const json kernel = json::parse(kernel_it->second, nullptr, false);
  if (!bytes.is_number() || !kernel.is_object()) return;
  auto number = [&](const char* key) {
    auto it = kernel.find(key);
    return it != kernel.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  const double head_dim = number("head_dim"), forward_tflops = number("forward_tflops");
  const double backward_tflops = number("backward_tflops");
  const ModelArchitecture& a = *src.architecture;
  const int64_t kv_heads = a.kv_heads > 0 ? a.kv_heads : a.heads;
  const double e = bytes.get<double>();
  if (a.sequence_length <= 0 || a.heads <= 0 || kv_heads <= 0 || head_dim <= 0 || e <= 0 ||
      forward_tflops <= 0 || backward_tflops <= 0) {
    return;
  }
  const double s = static_cast<double>(a.sequence_length);
  const double forward_flops = 4 * s * s * static_cast<double>(a.heads) * head_dim * 0.5;
  CpAttentionEstimate estimate;
  estimate.kv_bytes_per_sample = std::llround(2 * s * static_cast<double>(kv_heads) * head_dim * e);
  estimate.kv_heads = kv_heads;
  estimate.forward_ns_per_sample = forward_flops / (forward_tflops * 1e12) * 1e9;
  estimate.backward_ns_per_sample = 2.5 * forward_flops / (backward_tflops * 1e12) * 1e9;
  estimate.out_elements_per_sample = s * static_cast<double>(a.heads) * head_dim;
  estimate.query_elements_per_sample = estimate.out_elements_per_sample;
  estimate.kv_elements_per_sample = 2 * s * static_cast<double>(kv_heads) * head_dim;
  if (auto it = src.details.find("memory_efficiency"); it != src.details.end()) {
    const json efficiency = json::parse(it->second, nullptr, false);
    if (efficiency.is_number()) estimate.memory_efficiency = efficiency.get<double>();
  }
  estimate.from = fmt::format(
      "source.architecture sequence_length {}, heads {}, kv_heads {}; attention_kernel head_dim "
      "{:g} at {:g} / {:g} TFLOP/s forward / backward",
      a.sequence_length, a.heads, kv_heads, head_dim, forward_tflops, backward_tflops);
  for (Layer& layer : model->layers) {
    if (layer.name.rfind("block.", 0) == 0) layer.cp_attention = estimate;
  }
}

Status ReadModel(const Reader& r, const json& root, Model* model) {
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(root, ""));
  PIPECAST_RETURN_IF_ERROR(r.Format(root, kModelFormat));
  PIPECAST_RETURN_IF_ERROR(r.CheckKeys(root, "",
                                       {"format", "name", "source", "dtype", "sequence_length",
                                        "flops_per_sample", "global_batch", "layers"}));
  PIPECAST_RETURN_IF_ERROR(r.String(root, "", "name", "the model's name", &model->name));
  if (auto it = root.find("source"); it != root.end()) {
    PIPECAST_RETURN_IF_ERROR(ReadSource(r, *it, &model->source));
  }
  std::optional<std::string> dtype;
  PIPECAST_RETURN_IF_ERROR(r.String(root, "", "dtype", &dtype));
  model->dtype = dtype.value_or("");
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(root, "", "sequence_length", kSequenceLength, &model->sequence_length));
  PIPECAST_RETURN_IF_ERROR(
      r.Number(root, "", "flops_per_sample", kSampleFlops, &model->flops_per_sample));
  PIPECAST_RETURN_IF_ERROR(r.Integer(root, "", "global_batch", kGlobalBatch, &model->global_batch));
  const json* layers = nullptr;
  PIPECAST_RETURN_IF_ERROR(
      r.Find(root, "", "layers", "the list of layers, in order", true, &layers));
  if (!layers->is_array()) {
    return r.Error("layers", "must be a list of layers, got " + Shown(*layers));
  }
  if (layers->empty()) {
    return r.Error("layers", "is empty; add the model's layers, in order");
  }
  model->layers.assign(layers->size(), Layer{});
  for (size_t i = 0; i < layers->size(); ++i) {
    PIPECAST_RETURN_IF_ERROR(ReadLayer(r, (*layers)[i], Element("layers", i), &model->layers[i]));
  }
  DeriveTpComm(model);
  DeriveCpAttention(model);
  return Status::Ok();
}

}  // namespace

Result<Model> ParseModel(const std::string& text, const std::string& origin) {
  return ParseWith<Model>(text, origin, ReadModel);
}

Result<Model> LoadModel(const std::string& path) {
  PIPECAST_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseModel(text, path);
}

std::string ModelToJson(const Model& model) {
  json root;
  root["format"] = kModelFormat;
  root["name"] = model.name;
  json source;
  source["method"] = model.source.method;
  if (!model.source.device.empty()) source["device"] = model.source.device;
  for (const auto& [key, text] : model.source.details) {
    if (key == "method" || key == "device") continue;
    json value = json::parse(text, nullptr, false);
    source[key] = value.is_discarded() ? json(text) : value;
  }
  root["source"] = std::move(source);
  if (!model.dtype.empty()) root["dtype"] = model.dtype;
  if (model.sequence_length) root["sequence_length"] = *model.sequence_length;
  if (model.flops_per_sample) root["flops_per_sample"] = *model.flops_per_sample;
  if (model.global_batch) root["global_batch"] = *model.global_batch;
  json layers = json::array();
  for (const Layer& layer : model.layers) {
    json l;
    l["name"] = layer.name;
    l["parameters"] = layer.parameters;
    if (layer.forward_flops) l["forward_flops"] = *layer.forward_flops;
    if (layer.moe) {
      const MoeRouting& m = *layer.moe;
      json moe = {{"experts", m.experts}, {"top_k", m.top_k}};
      if (m.expert_groups > 0) {
        moe["expert_groups"] = m.expert_groups;
        moe["topk_groups"] = m.topk_groups;
      }
      moe["hidden"] = m.hidden;
      moe["expert_parameters"] = m.expert_parameters;
      if (m.bytes_per_element != 2) moe["bytes_per_element"] = m.bytes_per_element;
      if (m.capacity_factor > 0) {
        moe["capacity_factor"] = m.capacity_factor;
        moe["pad_to_capacity"] = m.pad_to_capacity;
      }
      if (m.group_gemm_ns) moe["group_gemm_us"] = NsToUs(*m.group_gemm_ns);
      l["moe"] = std::move(moe);
    }
    json profiles = json::array();
    for (const LayerProfile& p : layer.profiles) {
      json j;
      j["microbatch_size"] = p.microbatch_size;
      if (p.tensor_parallel != 1) j["tensor_parallel"] = p.tensor_parallel;
      if (p.sequence_parallel) j["sequence_parallel"] = true;
      j["forward_us"] = NsToUs(p.forward_ns);
      j["backward_us"] = NsToUs(p.backward_ns);
      if (p.backward_weight_ns) {
        j["backward_weight_us"] = NsToUs(*p.backward_weight_ns);
      }
      j["activation_bytes"] = p.activation_bytes;
      j["output_bytes"] = p.output_bytes;
      if (p.workspace_bytes != 0) j["workspace_bytes"] = p.workspace_bytes;
      if (p.checkpoint_bytes) j["checkpoint_bytes"] = *p.checkpoint_bytes;
      if (p.attention_core_bytes) j["attention_core_bytes"] = *p.attention_core_bytes;
      if (p.attention_core_ns) j["attention_core_us"] = NsToUs(*p.attention_core_ns);
      if (p.weight_grad_bytes) j["weight_grad_bytes"] = *p.weight_grad_bytes;
      if (p.op_saved_bytes) j["op_saved_bytes"] = *p.op_saved_bytes;
      if (p.op_recompute_ns) j["op_recompute_us"] = NsToUs(*p.op_recompute_ns);
      if (p.tp_comm_bytes) j["tp_comm_bytes"] = *p.tp_comm_bytes;
      if (p.tp_forward_collectives) j["tp_forward_collectives"] = *p.tp_forward_collectives;
      if (p.tp_backward_collectives) j["tp_backward_collectives"] = *p.tp_backward_collectives;
      if (p.layernorm_bytes) j["layernorm_bytes"] = *p.layernorm_bytes;
      if (p.layernorm_ns) j["layernorm_us"] = NsToUs(*p.layernorm_ns);
      if (p.moe_act_bytes) j["moe_act_bytes"] = *p.moe_act_bytes;
      if (p.moe_act_ns) j["moe_act_us"] = NsToUs(*p.moe_act_ns);
      if (p.mla_up_proj_bytes) j["mla_up_proj_bytes"] = *p.mla_up_proj_bytes;
      if (p.mla_up_proj_ns) j["mla_up_proj_us"] = NsToUs(*p.mla_up_proj_ns);
      if (p.mlp_bytes) j["mlp_bytes"] = *p.mlp_bytes;
      if (p.mlp_ns) j["mlp_us"] = NsToUs(*p.mlp_ns);
      if (!p.routed_experts.empty()) {
        json experts = json::array();
        for (const RoutedExpertsCost& e : p.routed_experts) {
          experts.push_back({{"expert_tensor_parallel", e.expert_tensor_parallel},
                             {"forward_us", NsToUs(e.forward_ns)},
                             {"backward_us", NsToUs(e.backward_ns)},
                             {"backward_weight_us", NsToUs(e.backward_weight_ns)}});
        }
        j["routed_experts"] = std::move(experts);
      }
      profiles.push_back(std::move(j));
    }
    l["profiles"] = std::move(profiles);
    layers.push_back(std::move(l));
  }
  root["layers"] = std::move(layers);
  return Dump(root);
}

}  // namespace pipecast
