#include "formats/cluster_select.h"

#include <fmt/format.h>

#include "base/units.h"
#include "formats/formats.h"

namespace pipecast {

Result<ClusterSelection> SelectCluster(const std::string& cluster_flag, const Model& model,
                                       double memory_gb) {
  ClusterSelection s;
  std::string spec = cluster_flag;
  if (spec.empty()) {
    spec = "ideal";
    for (const std::string& name : ClusterPresetNames()) {
      if (name == model.source.device) spec = name;
    }
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
