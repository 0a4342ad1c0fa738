// Cluster: the hardware a plan runs on: GPUs grouped in nodes, a fast link
// inside a node and NICs between nodes (`pipecast-cluster/1`, see
// docs/formats.md), and how NCCL's collectives run over them
// (sim/collectives.h). Presets: ideal, a100-80gb, h100-sxm, h200.
//
// `ideal` has no communication cost and unlimited memory, for teaching and for
// checking closed forms. A bandwidth of 0 means "infinite", a memory of 0
// means "unlimited".
//
// Memory a plan may use on one GPU (MemoryLimitBytes): the capacity the GPU
// exposes to applications (cudaMemGetInfo's total, not the datasheet figure),
// less a runtime reserve taken before training allocates anything (CUDA
// context, cuBLAS workspaces, NCCL buffers), less an allocator margin, a
// fraction of the capacity, for the caching allocator's fragmentation and
// temporaries. Presets carry their figures with sources (sim/cluster.cc).
#ifndef PIPECAST_SIM_CLUSTER_H_
#define PIPECAST_SIM_CLUSTER_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "base/units.h"

namespace pipecast {

// One kind of link: NVLink inside a node, or one NIC between nodes. The first
// two fields are a point-to-point transfer's: `bytes / bandwidth + latency`.
// The rest say how NCCL's collectives run over it (sim/collectives.h); their
// defaults give the plain model (a ring at the full bandwidth, the point-to-
// point latency per step), which is what a cluster file without them means.
// Bits of Link::nccl_algos, NCCL_ALGO's names: "Ring", "Tree", "NVLS",
// "NVLSTree".
constexpr unsigned kNcclAlgoRing = 1;
constexpr unsigned kNcclAlgoTree = 2;
constexpr unsigned kNcclAlgoNvls = 4;
constexpr unsigned kNcclAlgoNvlsTree = 8;
constexpr unsigned kNcclAlgoDefault = kNcclAlgoRing | kNcclAlgoNvls | kNcclAlgoNvlsTree;

struct Link {
  double bandwidth_gbps = 0;  // gigabytes (10^9 bytes) per second; 0 = infinite
  double latency_us = 0;
  // The share of bandwidth_gbps a collective's ring reaches (its bus
  // bandwidth / the line rate: NCCL's protocol overhead), in (0, 1].
  double efficiency = 1;
  // Latency of one step of a ring over this link; negative = latency_us.
  double step_latency_us = -1;
  // Fixed cost of one collective whose group uses this link (NCCL's launch
  // and base latency): the intra-node link's for a group inside one node,
  // the inter-node link's for a group spanning nodes.
  double collective_latency_us = 0;
  // Intra-node only: NVLink SHARP (NVLS), the all-reduce done by the NVSwitch
  // itself, as its algorithm bandwidth (bytes all-reduced per second) in a
  // full node; 0 = none (A100, PCIe).
  double nvls_bandwidth_gbps = 0;
  // The protocols NCCL may run besides Simple on a collective whose group
  // uses this link (as collective_latency_us: the intra-node link's inside a
  // node, the inter-node link's across nodes), as NCCL_PROTO allows them;
  // they apply where collective_latency_us is given (sim/collectives.h).
  bool protocol_ll = true;
  bool protocol_ll128 = true;
  // The algorithms NCCL may run on a collective whose group uses this link
  // (the link chosen as for the protocols), as NCCL_ALGO (and
  // NCCL_NVLS_ENABLE=0) allow them: a mask of kNcclAlgo* bits, Ring always
  // among them. The default is the model's own choice (ring, NVLS, NVLS tree:
  // NCCL's plain tree is timed only where a cluster file names it;
  // sim/collectives.h).
  unsigned nccl_algos = kNcclAlgoDefault;

  TimeNs LatencyNs() const { return UsToNs(latency_us); }
  TimeNs StepLatencyNs() const {
    return UsToNs(step_latency_us < 0 ? latency_us : step_latency_us);
  }
  TimeNs CollectiveLatencyNs() const { return UsToNs(collective_latency_us); }
};

struct GpuSpec {
  std::string name;
  Bytes memory_bytes = 0;  // exposed to applications; 0 = unlimited
  // Taken by the runtime before training allocates: CUDA context, cuBLAS
  // workspaces, NCCL buffers (--memory-reserve-gb).
  Bytes memory_reserve_bytes = 0;
  // Allocator margin as a fraction of memory_bytes, in [0, 1)
  // (--memory-headroom).
  double memory_headroom = 0;
  double peak_tflops = 0;            // dense bf16 peak, for MFU; 0 = unknown
  double memory_bandwidth_gbps = 0;  // HBM, used by the analytic profiler
  // Dense FP8 (E4M3/E5M2) tensor-core peak; 0 = the GPU has no FP8 tensor
  // cores (A100), and --precision fp8 is refused on it.
  double peak_fp8_tflops = 0;
  // Tensor cores that scale FP8 in blocks of 32 in hardware (MXFP8,
  // Blackwell); --fp8-recipe mxfp8 needs it. No preset has it.
  bool mxfp8 = false;
  // Streaming multiprocessors (datasheet); 0 = unknown. The layered expert overlap takes the
  // communication kernels' SMs from it (ExpertCommSmShare, sim/stage_costs.h).
  int sms = 0;
};

struct Cluster {
  std::string name;
  int gpus_per_node = 8;
  GpuSpec gpu;
  Link intra_node;
  // One NIC: its bandwidth per direction and latency.
  Link inter_node;
  // NICs of a node for inter-node traffic, rail-optimized (NIC i of every
  // node on one rail, GPU i's traffic through its nearest NIC); 0 = one per
  // GPU. A GPU's share of the network is nics_per_node x the NIC bandwidth /
  // gpus_per_node (NetworkGbpsPerGpu).
  int nics_per_node = 0;
  // The simulator's folded cluster only (one simulated GPU per t x cp group,
  // sim/simulator.cc): the nodes one simulated GPU spans when its t x cp GPUs
  // are more than a node holds; 1 otherwise. Never read from or written to a
  // cluster file.
  int nodes_per_gpu = 1;

  bool SameNode(int gpu_a, int gpu_b) const {
    return gpu_a / gpus_per_node == gpu_b / gpus_per_node;
  }
  // One GPU's share of its node's NICs, GB/s per direction; 0 = infinite.
  double NetworkGbpsPerGpu() const {
    if (nics_per_node <= 0) return inter_node.bandwidth_gbps;
    return inter_node.bandwidth_gbps * nics_per_node / gpus_per_node;
  }
  // The link a point-to-point transfer between two distinct GPUs sees: the
  // intra-node link as given; between nodes, the GPU's share of the NICs at
  // the NIC's efficiency (every GPU of a pipeline stage sends at once).
  Link LinkBetween(int gpu_a, int gpu_b) const {
    if (SameNode(gpu_a, gpu_b)) return intra_node;
    Link link = inter_node;
    link.bandwidth_gbps = NetworkGbpsPerGpu();
    if (inter_node.efficiency != 1) link.bandwidth_gbps *= inter_node.efficiency;
    return link;
  }
};

// InvalidArgument naming the setting when a link's efficiency is outside
// (0, 1], a latency or bandwidth is negative, the inter-node link claims
// NVLS, or nics_per_node is negative.
Status ValidateClusterLinks(const Cluster& cluster);

// Bytes of headroom: memory_headroom x memory_bytes, rounded to nearest.
Bytes MemoryHeadroomBytes(const GpuSpec& gpu);
// memory_bytes - memory_reserve_bytes - MemoryHeadroomBytes, at least 1 byte
// when memory_bytes > 0 (so "limited" stays limited); 0 = unlimited.
Bytes MemoryLimitBytes(const GpuSpec& gpu);
// "73.31 GiB = 79.11 GiB capacity - 1.84 GiB runtime reserve (CUDA context,
// cuBLAS, NCCL) - 3.96 GiB allocator margin (5% of capacity)", or
// "unlimited" when memory_bytes is 0: what every memory table says of its limit.
std::string MemoryLimitText(const GpuSpec& gpu);
// InvalidArgument naming the setting when the reserve or headroom is
// negative, the headroom is not below 1, or together they leave nothing of a
// limited capacity.
Status ValidateGpuMemory(const GpuSpec& gpu);

// The CUDA context's share of each preset's memory_reserve_bytes (the rest
// is cuBLAS workspaces and NCCL buffers): replaced by the measured figure
// when a model profiled on the preset's GPU carries one (SelectCluster).
inline constexpr Bytes kPresetCudaContextBytes = 512 * kMiB;

// The preset for a GPU as the driver names it (cuDeviceGetName), or "" when
// none is that GPU: "NVIDIA H200" -> h200, "NVIDIA H100 80GB HBM3" (SXM) ->
// h100-sxm, "NVIDIA A100-SXM4-80GB" -> a100-80gb. PCIe and NVL boards have
// other links and are not matched.
std::string PresetForGpuName(const std::string& device_name);

// Names of the built-in presets, in a stable order.
std::vector<std::string> ClusterPresetNames();
// The preset called `name`, or NotFound listing the presets.
Result<Cluster> ClusterPreset(const std::string& name);

}  // namespace pipecast

#endif  // PIPECAST_SIM_CLUSTER_H_
