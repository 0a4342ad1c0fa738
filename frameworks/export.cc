// The frameworks' exports (frameworks/export.h): the names and sources of the three
// frameworks, the plan's shape and label every export starts from, which layers are
// transformer blocks, and ExportPlan's choice of exporter. Each framework's settings are
// in its own file: export_megatron.cc, export_torchtitan.cc, export_deepspeed.cc.
#include "frameworks/export.h"

#include <fmt/format.h>

#include <cctype>
#include <string>
#include <vector>

#include "frameworks/internal/export_shape.h"
#include "sim/stage_costs.h"

namespace pipecast {
namespace {

// docs/frameworks.md names these commits; the tests' Megatron flag list is from the first.
constexpr char kMegatronSource[] =
    "github.com/NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553 "
    "(megatron/training/arguments.py)";
constexpr char kTorchtitanSource[] =
    "github.com/pytorch/torchtitan v0.2.2 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce "
    "(torchtitan/config/job_config.py, torchtitan/distributed/pipeline_parallel.py)";
constexpr char kDeepSpeedSource[] =
    "github.com/deepspeedai/DeepSpeed 0.19.6 edaa7221267243c7be7fb49c5d5f5c4fb97b4641 "
    "(deepspeed/runtime/config.py, constants.py, zero/config.py, pipe/engine.py)";

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

namespace internal {

LayerRoles RolesOf(const std::vector<std::string>& names) {
  LayerRoles roles;
  if (names.size() >= 2) {
    roles.has_embedding = Lower(names.front()).find("embed") != std::string::npos;
    const std::string last = Lower(names.back());
    roles.has_output =
        last.find("head") != std::string::npos || last.find("output") != std::string::npos;
  }
  return roles;
}

bool IsTransformerLayer(int layer, int num_layers, const LayerRoles& roles) {
  if (layer == 0 && roles.has_embedding) return false;
  if (layer == num_layers - 1 && roles.has_output) return false;
  return true;
}

Shape ShapeOf(const PlanFile& plan) {
  const TrainingConfig& c = plan.config;
  Shape s{};
  s.t = c.layout.tensor_parallel;
  s.p = c.layout.pipeline_stages;
  s.d = c.layout.data_parallel;
  s.v = c.layout.chunks;
  s.mbs = c.microbatch_size;
  s.m = c.microbatches;
  s.zero = c.memory.zero;
  s.global_batch = plan.global_batch;  // size x m x d, checked when the plan was read or made
  s.sp = c.layout.sequence_parallel;
  s.kind = c.schedule;
  s.schedule_name = plan.schedule_name;
  s.bidirectional = plan.schedule.bidirectional;
  const std::vector<int>& ranks = plan.schedule.stage_rank;
  s.looped = !s.bidirectional;
  s.v_placement = !s.bidirectional && s.v == 2 && static_cast<int>(ranks.size()) == 2 * s.p;
  for (size_t st = 0; st < ranks.size(); ++st) {
    const int i = static_cast<int>(st);
    if (ranks[st] != i % s.p) s.looped = false;
    if (ranks[st] != (i < s.p ? i : 2 * s.p - 1 - i)) s.v_placement = false;
  }
  if (s.p == 1) s.v_placement = false;
  return s;
}

std::string PlanLabel(const PlanFile& plan, const Shape& s) {
  const int cp = plan.config.layout.context_parallel;
  return fmt::format("{}: t={}{}{} p={} d={} {} v={} mbs={} m={} zero={} recompute={}",
                     plan.model_name, s.t, s.sp ? " sp" : "",
                     cp > 1 ? fmt::format(" cp={}", cp) : "", s.p, s.d, s.schedule_name, s.v, s.mbs,
                     s.m, s.zero, RecomputeName(plan.config.recompute));
}

}  // namespace internal

const char* FrameworkName(Framework framework) {
  switch (framework) {
    case Framework::kMegatron:
      return "megatron";
    case Framework::kTorchtitan:
      return "torchtitan";
    case Framework::kDeepSpeed:
      return "deepspeed";
  }
  return "";
}

std::vector<std::string> FrameworkNames() { return {"megatron", "torchtitan", "deepspeed"}; }

Result<Framework> ParseFramework(std::string_view name) {
  for (Framework f : {Framework::kMegatron, Framework::kTorchtitan, Framework::kDeepSpeed}) {
    if (name == FrameworkName(f)) return f;
  }
  return Status::InvalidArgument(
      fmt::format("unknown framework '{}': expected megatron, torchtitan or deepspeed", name));
}

const char* FrameworkSource(Framework framework) {
  switch (framework) {
    case Framework::kMegatron:
      return kMegatronSource;
    case Framework::kTorchtitan:
      return kTorchtitanSource;
    case Framework::kDeepSpeed:
      return kDeepSpeedSource;
  }
  return "";
}

std::vector<int> TransformerLayersPerStage(const PlanFile& plan,
                                           const std::vector<std::string>& layer_names) {
  const internal::LayerRoles roles = internal::RolesOf(layer_names);
  const int num_layers = static_cast<int>(layer_names.size());
  std::vector<int> out;
  for (const StageLayers& st : plan.partition) {
    int n = 0;
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      n += internal::IsTransformerLayer(l, num_layers, roles);
    }
    out.push_back(n);
  }
  return out;
}

FrameworkExport ExportPlan(Framework framework, const PlanFile& plan,
                           const ExportRequest& request) {
  switch (framework) {
    case Framework::kMegatron:
      return internal::ExportMegatron(plan, request);
    case Framework::kTorchtitan:
      return internal::ExportTorchtitan(plan, request);
    case Framework::kDeepSpeed:
      return internal::ExportDeepSpeed(plan, request);
  }
  return {};
}

}  // namespace pipecast
