// Cluster: the hardware a plan runs on: GPUs grouped in nodes, a fast link
// inside a node and a slower one between nodes (`pipecast-cluster/1`, see
// docs/formats.md). Presets: ideal, a100-80gb, h100-sxm, h200.
//
// `ideal` has no communication cost and unlimited memory, for teaching and for
// checking closed forms. A bandwidth of 0 means "infinite", a memory of 0
// means "unlimited".
#ifndef PIPECAST_SIM_CLUSTER_H_
#define PIPECAST_SIM_CLUSTER_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "base/units.h"

namespace pipecast {

struct Link {
  double bandwidth_gbps = 0;  // gigabytes (10^9 bytes) per second; 0 = infinite
  double latency_us = 0;
  TimeNs LatencyNs() const { return UsToNs(latency_us); }
};

struct GpuSpec {
  std::string name;
  Bytes memory_bytes = 0;            // 0 = unlimited
  double peak_tflops = 0;            // dense bf16 peak, for MFU; 0 = unknown
  double memory_bandwidth_gbps = 0;  // HBM, used by the analytic profiler
};

struct Cluster {
  std::string name;
  int gpus_per_node = 8;
  GpuSpec gpu;
  Link intra_node;
  Link inter_node;

  bool SameNode(int gpu_a, int gpu_b) const {
    return gpu_a / gpus_per_node == gpu_b / gpus_per_node;
  }
  // The link between two distinct GPUs.
  const Link& LinkBetween(int gpu_a, int gpu_b) const {
    return SameNode(gpu_a, gpu_b) ? intra_node : inter_node;
  }
};

// Names of the built-in presets, in a stable order.
std::vector<std::string> ClusterPresetNames();
// The preset called `name`, or NotFound listing the presets.
Result<Cluster> ClusterPreset(const std::string& name);

}  // namespace pipecast

#endif  // PIPECAST_SIM_CLUSTER_H_
