// Megatron-LM's selective recomputation by module (--recompute-modules):
// the names, and what a layer drops and reruns for a list of modules
// (sim/stage_costs.h, RecomputeModule; docs/simulator.md "Activation memory").
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

#include "sim/stage_costs.h"

namespace pipecast {
namespace {

struct ModuleName {
  unsigned bit;
  const char* name;
};
// The modules pipecast models, in RecomputeModule order.
constexpr ModuleName kModules[] = {{kRecomputeCoreAttn, "core_attn"},
                                   {kRecomputeLayernorm, "layernorm"},
                                   {kRecomputeMoeAct, "moe_act"},
                                   {kRecomputeMlaUpProj, "mla_up_proj"},
                                   {kRecomputeMlp, "mlp"}};
// Megatron-LM's other choices (transformer_config.py @ d98e8a64,
// recompute_modules): known, not modelled.
constexpr const char* kUnmodelled[] = {"moe",     "shared_experts", "gdn_norm_out",
                                       "gdp_qkv", "gdp_in_proj",    "mhc"};

// a + b when both are given, else absent.
std::optional<int64_t> Sum(std::optional<int64_t> a, std::optional<int64_t> b) {
  if (!a || !b) return std::nullopt;
  return *a + *b;
}

}  // namespace

std::string RecomputeModulesName(unsigned modules) {
  std::string out;
  for (const ModuleName& m : kModules) {
    if ((modules & m.bit) == 0) continue;
    if (!out.empty()) out += ",";
    out += m.name;
  }
  return out;
}

Result<unsigned> ParseRecomputeModules(std::string_view text) {
  unsigned modules = 0;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    start = comma + 1;
    const auto known = std::find_if(std::begin(kModules), std::end(kModules),
                                    [&](const ModuleName& m) { return item == m.name; });
    if (known != std::end(kModules)) {
      modules |= known->bit;
      continue;
    }
    if (std::find(std::begin(kUnmodelled), std::end(kUnmodelled), item) != std::end(kUnmodelled)) {
      return Status::InvalidArgument(fmt::format(
          "--recompute-modules {}: Megatron-LM's module '{}' is not modelled by pipecast; the "
          "modelled ones are core_attn, layernorm, moe_act, mla_up_proj and mlp",
          text, item));
    }
    return Status::InvalidArgument(fmt::format(
        "--recompute-modules {}: '{}' is not a module; expected a comma list of core_attn, "
        "layernorm, moe_act, mla_up_proj, mlp (Megatron-LM's names, e.g. --recompute-modules "
        "layernorm,moe_act)",
        text, item));
  }
  return modules;
}

void ApplyRecomputeModules(unsigned modules, LayerCost* c) {
  if (modules == 0) return;  // Megatron-LM's default, core_attn: the layer's own fields
  std::optional<Bytes> bytes = 0;
  std::optional<TimeNs> ns = 0;
  if (modules & kRecomputeCoreAttn) {
    bytes = Sum(bytes, c->attention_core_bytes);
    // FlashAttention's core keeps nothing and gives no time: nothing to rerun.
    ns = Sum(ns, c->attention_core_ns.value_or(0));
  }
  if (modules & kRecomputeLayernorm) {
    bytes = Sum(bytes, c->layernorm_bytes);
    ns = Sum(ns, c->layernorm_ns);
  }
  if (modules & kRecomputeMoeAct) {
    bytes = Sum(bytes, c->moe_act_bytes);
    ns = Sum(ns, c->moe_act_ns);
  }
  if (modules & kRecomputeMlaUpProj) {
    bytes = Sum(bytes, c->mla_up_proj_bytes);
    ns = Sum(ns, c->mla_up_proj_ns);
  }
  if (modules & kRecomputeMlp) {
    bytes = Sum(bytes, c->mlp_bytes);
    ns = Sum(ns, c->mlp_ns);
  }
  // Selective recomputation reads the attention core's pair: what the
  // modules drop and rerun stand in for it. Absent when a module's figure is.
  c->attention_core_bytes =
      bytes && ns ? std::optional(std::min(*bytes, c->activation_bytes)) : std::nullopt;
  c->attention_core_ns = bytes && ns ? std::optional(std::min(*ns, c->forward_ns)) : std::nullopt;
}

}  // namespace pipecast
