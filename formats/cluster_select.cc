#include "formats/cluster_select.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/units.h"
#include "formats/formats.h"

namespace pipecast {

namespace {

// The preset the model was measured on: source.device when it is a preset
// name (the analytic profiler's), else the preset profiler cupti matched
// to the driver's GPU name.
std::string MeasuredPresetOf(const Model& model) {
  for (const std::string& name : ClusterPresetNames()) {
    if (name == model.source.device) return name;
  }
  auto it = model.source.details.find(kGpuPresetKey);
  if (it == model.source.details.end()) return "";
  const nlohmann::json v = nlohmann::json::parse(it->second, nullptr, false);
  if (!v.is_string()) return "";
  for (const std::string& name : ClusterPresetNames()) {
    if (name == v.get<std::string>()) return name;
  }
  return "";
}

// The measured usable memory and CUDA context (profiler cupti) in place of
// the preset's published capacity and context estimate; cuBLAS and NCCL keep
// the preset's share. False when the model carries no measurement.
bool ApplyMeasuredMemory(const Model& model, Cluster* cluster, std::string* note) {
  auto it = model.source.details.find(kMeasuredMemoryKey);
  if (it == model.source.details.end() || cluster->gpu.memory_bytes <= 0) return false;
  const nlohmann::json v = nlohmann::json::parse(it->second, nullptr, false);
  if (!v.is_object()) return false;
  const auto usable = v.find("usable_bytes");
  const auto context = v.find("cuda_context_bytes");
  if (usable == v.end() || context == v.end() || !usable->is_number_unsigned() ||
      !context->is_number_unsigned()) {
    return false;
  }
  const auto u = usable->get<uint64_t>();
  const auto c = context->get<uint64_t>();
  constexpr uint64_t kMaxMeasuredBytes = uint64_t{1} << 50;  // 1 PiB: beyond any GPU
  if (u == 0 || u > kMaxMeasuredBytes || c >= u) return false;
  GpuSpec& gpu = cluster->gpu;
  gpu.memory_bytes = static_cast<Bytes>(u);
  gpu.memory_reserve_bytes =
      std::max<Bytes>(0, gpu.memory_reserve_bytes - kPresetCudaContextBytes) +
      static_cast<Bytes>(c);
  *note += fmt::format(
      "; its capacity {:.2f} GiB and CUDA context {:.2f} GiB are the ones profiler cupti "
      "measured on the model's GPU (cuBLAS and NCCL reserve from the preset)",
      ToGiB(gpu.memory_bytes), ToGiB(static_cast<Bytes>(c)));
  return true;
}

}  // namespace

std::string ModelGpuPreset(const Model& model) { return MeasuredPresetOf(model); }

std::string ModelGpuMismatch(const Model& model, const Cluster& cluster) {
  const std::string preset = ModelGpuPreset(model);
  if (preset.empty()) return "";
  auto made_for = LoadCluster(preset);
  if (!made_for.ok() || made_for->gpu.name == cluster.gpu.name) return "";
  return fmt::format(
      "warning: the model's costs were made for {} ({}) but the cluster '{}' has {}: its "
      "times and MFU are {}'s; re-estimate the model for this GPU (profiler analytic --gpu "
      "{}) or choose --cluster {}",
      preset, made_for->gpu.name, cluster.name, cluster.gpu.name, preset, cluster.name, preset);
}

std::optional<ExpertDispatcher> ModelExpertDispatcher(const Model& model) {
  auto it = model.source.details.find("moe");
  if (it == model.source.details.end()) return std::nullopt;
  const nlohmann::json moe = nlohmann::json::parse(it->second, nullptr, false);
  if (!moe.is_object()) return std::nullopt;
  const auto dispatcher = moe.find("dispatcher");
  if (dispatcher == moe.end()) return ExpertDispatcher::kDeepEp;
  if (!dispatcher->is_string()) return std::nullopt;
  const std::string text = dispatcher->get<std::string>();
  if (text.starts_with("alltoall")) return ExpertDispatcher::kAllToAll;
  if (text.starts_with("allgather")) return ExpertDispatcher::kAllGather;
  if (text.starts_with("deepep")) return ExpertDispatcher::kDeepEp;
  return std::nullopt;
}

ModelCapacity ModelExpertCapacity(const Model& model) {
  ModelCapacity c;
  auto it = model.source.details.find("moe");
  if (it == model.source.details.end()) return c;
  const nlohmann::json moe = nlohmann::json::parse(it->second, nullptr, false);
  if (!moe.is_object()) return c;
  const auto factor = moe.find("capacity_factor");
  if (factor == moe.end() || !factor->is_number()) return c;
  c.factor = factor->get<double>();
  const auto pad = moe.find("pad_to_capacity");
  c.pad = pad != moe.end() && pad->is_boolean() && pad->get<bool>();
  return c;
}

std::string ModelDispatcherMismatch(const Model& model, const std::string& model_path,
                                    const std::vector<ExpertDispatcher>& used) {
  const std::optional<ExpertDispatcher> made_for = ModelExpertDispatcher(model);
  if (!made_for) return "";
  // Only the all-to-all dispatcher's second sort changes the profiler's costs: deepep and
  // allgather costs are the same (one permutation each side).
  const auto sorts = [](ExpertDispatcher d) { return d == ExpertDispatcher::kAllToAll; };
  std::vector<ExpertDispatcher> others;
  for (ExpertDispatcher d : used) {
    if (sorts(d) != sorts(*made_for)) others.push_back(d);
  }
  if (others.empty()) return "";
  const bool alltoall_missing = others.front() == ExpertDispatcher::kAllToAll;
  return fmt::format(
      "warning: {}'s MoE layer costs were made for the {} dispatcher (profiler analytic{}), "
      "but {} uses --ep-dispatcher {} at ep > 1: those runs {} Megatron-LM's all-to-all "
      "dispatcher's second sort (its received rows ordered by local expert and back); "
      "re-profile with --moe-dispatcher {} for them (docs/planner.md, \"Expert dispatcher\")",
      model_path, ExpertDispatcherName(*made_for),
      *made_for == ExpertDispatcher::kDeepEp
          ? ""
          : fmt::format(" --moe-dispatcher {}", ExpertDispatcherName(*made_for)),
      used.size() > others.size() ? "part of the search" : "the run",
      ExpertDispatcherName(others.front()), alltoall_missing ? "lack" : "are charged",
      ExpertDispatcherName(others.front()));
}

Result<ClusterSelection> SelectCluster(const std::string& cluster_flag, const Model& model,
                                       double memory_gb) {
  ClusterSelection s;
  std::string spec = cluster_flag;
  if (spec.empty()) {
    spec = ModelGpuPreset(model);
    if (spec.empty()) spec = "ideal";
    s.source = spec == "ideal" ? ClusterSource::kIdeal : ClusterSource::kMeasuredDevice;
    s.note = fmt::format("cluster '{}' chosen by default ({}); choose with --cluster", spec,
                         s.source == ClusterSource::kIdeal
                             ? "the model names no preset device; ideal has no "
                               "communication cost and unlimited memory"
                             : "the GPU the model was measured on");
  }
  auto cluster = LoadCluster(spec);
  if (!cluster.ok()) return cluster.status().WithPrefix("--cluster");
  s.cluster = std::move(cluster.value());
  if (s.source == ClusterSource::kMeasuredDevice && memory_gb < 0) {
    ApplyMeasuredMemory(model, &s.cluster, &s.note);
  }
  if (memory_gb >= 0) {
    s.cluster.gpu.memory_bytes = static_cast<Bytes>(memory_gb * static_cast<double>(kGiB));
    if (!s.note.empty()) {
      s.note += fmt::format("; its GPU memory is set to {:g} GiB by --memory-gb", memory_gb);
    }
  }
  return s;
}

Status OverrideGpuMemory(double reserve_gb, double headroom, Cluster* cluster) {
  if (reserve_gb >= 0) {
    cluster->gpu.memory_reserve_bytes = static_cast<Bytes>(reserve_gb * static_cast<double>(kGiB));
  }
  if (headroom >= 0) cluster->gpu.memory_headroom = headroom;
  return ValidateGpuMemory(cluster->gpu);
}

}  // namespace pipecast
