// Which cluster a tool runs on: the one `--cluster` names (a preset or a
// cluster JSON file), else the preset of the GPU the model was measured on,
// else `ideal`; then `--memory-gb` overrides its GPU memory. One rule for the
// simulator, the planner and whoever else takes those flags.
// Pure apart from reading a cluster file; thread-safe.
#ifndef PIPECAST_FORMATS_CLUSTER_SELECT_H_
#define PIPECAST_FORMATS_CLUSTER_SELECT_H_

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/cluster.h"
#include "sim/collectives.h"
#include "sim/model.h"

namespace pipecast {

// How the cluster was chosen.
enum class ClusterSource {
  kFlag,            // --cluster named it
  kMeasuredDevice,  // the preset named by the model's source.device
  kIdeal,           // the model names no preset device: ideal
};

struct ClusterSelection {
  Cluster cluster;
  ClusterSource source = ClusterSource::kFlag;
  // When chosen by default: a sentence saying how, for the user ("cluster
  // 'ideal' chosen by default (...); choose with --cluster", with the
  // --memory-gb override appended when there is one). Empty for kFlag.
  std::string note;
};

// The cluster preset of the GPU the model's costs were made for: its
// source.device when that is a preset name (profiler analytic's --gpu), else
// the preset profiler cupti matched to the driver's name; empty when neither.
std::string ModelGpuPreset(const Model& model);

// When the model's costs were made for another GPU than the chosen cluster's
// (ModelGpuPreset names a preset whose GPU differs by name): a warning
// naming both and what to do; empty otherwise. A warning, not an error: a
// user may mean to see another GPU's costs on this cluster's links and
// memory, and CheckCostsWithinPeak (sim/stage_costs.h) refuses the case
// that gives impossible numbers (docs/errors.md).
std::string ModelGpuMismatch(const Model& model, const Cluster& cluster);

// The expert dispatcher the model's layer costs were made for: profiler analytic writes
// source.details["moe"] for an MoE model, with a "dispatcher" entry starting "alltoall" for
// --moe-dispatcher alltoall (the second sort charged), "allgather" for --moe-dispatcher
// allgather (costed as deepep) and none for deepep. nullopt when the
// model does not say (a dense model, a measured or hand-written one).
std::optional<ExpertDispatcher> ModelExpertDispatcher(const Model& model);

// The expert capacity the model's layer costs were made for: profiler analytic
// --moe-capacity-factor writes "capacity_factor" (and "pad_to_capacity") in
// source.details["moe"]. factor unset when the model does not say (dropless).
struct ModelCapacity {
  std::optional<double> factor;
  bool pad = false;
};
ModelCapacity ModelExpertCapacity(const Model& model);

// When the run uses (or the search tries) a dispatcher the model's costs were not made for
// (ModelExpertDispatcher, at ep > 1) and whose costs differ (alltoall against either other;
// deepep and allgather cost the same): a warning naming both and what to do; empty otherwise. A
// warning, not an error: the second sort is a small memory-bound term, and `both` must compare
// the two dispatchers on one model file (docs/planner.md, "Expert dispatcher").
// `used`: the dispatchers run at ep > 1 (empty: no expert parallelism, no warning).
std::string ModelDispatcherMismatch(const Model& model, const std::string& model_path,
                                    const std::vector<ExpertDispatcher>& used);

// `cluster_flag`: the --cluster value (empty: choose by default).
// `memory_gb`: the --memory-gb value, in GiB; < 0 keeps the cluster's.
// On failure (unknown preset, unreadable or bad file) the status message
// starts with "--cluster".
[[nodiscard]] Result<ClusterSelection> SelectCluster(const std::string& cluster_flag,
                                                     const Model& model, double memory_gb);

// --memory-reserve-gb and --memory-headroom over the chosen cluster (a
// negative value keeps the cluster's own), then ValidateGpuMemory: an error
// naming both flags when reserve and margin leave nothing of the GPU.
[[nodiscard]] Status OverrideGpuMemory(double reserve_gb, double headroom, Cluster* cluster);

}  // namespace pipecast

#endif  // PIPECAST_FORMATS_CLUSTER_SELECT_H_
