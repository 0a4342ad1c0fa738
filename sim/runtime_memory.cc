#include "sim/runtime_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/text_table.h"

namespace pipecast {
namespace {

// cuMem's granule on Hopper: NCCL's 9,633,792 B connection rounds up to 10 MiB.
constexpr Bytes kCuMemGranule = 2 * kMiB;
// The measured communicator sizes (runtime_memory.h gives their sources).
constexpr double kA100CollectiveBytes = 688e6;
constexpr double kA100PairBytes = 544e6;
constexpr double kHopperCollectiveBytes = 1.06e9;
constexpr double kHopperPairBytes = (4.34e9 - 1.06e9) / 7;
// PyTorch's cuBLAS workspace per (handle, stream) (aten/src/ATen/cuda/CublasHandlePool.cpp):
// 32 MiB on sm90, else 4096 KiB x 2 + 16 KiB x 8; cuBLASLt shares it
// (TORCH_CUBLASLT_UNIFIED_WORKSPACE). Two streams: the compute stream and the one the backward
// or the communication runs on.
constexpr Bytes kCublasHopperBytes = 32 * kMiB;
constexpr Bytes kCublasOtherBytes = 4096 * kKiB * 2 + 16 * kKiB * 8;
constexpr int kCublasStreams = 2;

int Connections(double measured_bytes, Bytes connection_bytes) {
  return static_cast<int>(std::lround(measured_bytes / static_cast<double>(connection_bytes)));
}

}  // namespace

Bytes DeviceMemory::Total() const {
  Bytes total = 0;
  for (const DeviceMemoryTerm& t : terms) total += t.bytes;
  return total;
}

Bytes DeviceMemory::RuntimeBytes() const {
  Bytes total = 0;
  for (size_t i = 2; i < terms.size(); ++i) total += terms[i].bytes;
  return total;
}

Bytes DeviceMemory::ReservedBytes() const {
  Bytes total = 0;
  for (const DeviceMemoryTerm& t : terms) {
    if (t.reserved) total += t.bytes;
  }
  return total;
}

bool IsHopper(const GpuSpec& gpu) {
  return gpu.name.find("H100") != std::string::npos || gpu.name.find("H200") != std::string::npos;
}

Bytes NcclConnectionBytes(const GpuSpec& gpu) {
  if (!IsHopper(gpu)) return kNcclConnectionBytes;
  return (kNcclConnectionBytes + kCuMemGranule - 1) / kCuMemGranule * kCuMemGranule;
}

int NcclCollectiveConnections(const GpuSpec& gpu, int ranks) {
  if (ranks < 2) return 0;
  const Bytes connection = NcclConnectionBytes(gpu);
  if (IsHopper(gpu)) return Connections(kHopperCollectiveBytes, connection);
  return Connections(ranks == 2 ? kA100PairBytes : kA100CollectiveBytes, connection);
}

int NcclPairConnections(const GpuSpec& gpu) {
  const Bytes connection = NcclConnectionBytes(gpu);
  return Connections(IsHopper(gpu) ? kHopperPairBytes : kA100PairBytes, connection);
}

DeviceMemory DeviceMemoryFor(const Cluster& cluster, const TrainingConfig& config, Bytes allocated,
                             int pipeline_neighbours) {
  DeviceMemory out;
  out.terms.push_back({"allocated (simulated peak)", allocated, false,
                       "weights, gradients, optimizer state, activations, buffers", true});
  const GpuSpec& gpu = cluster.gpu;
  if (gpu.memory_bytes <= 0) return out;
  out.terms.push_back(
      {"allocator cache (reserved - allocated)",
       std::llround(gpu.memory_headroom * static_cast<double>(allocated)), true,
       fmt::format("{:g}% of allocated, the GPU's allocator margin (--memory-headroom)",
                   100 * gpu.memory_headroom),
       true});
  out.terms.push_back({"CUDA context", kPresetCudaContextBytes, true,
                       "lazy loading: 287 MB (pytorch#86509) to 430 MiB published; no Hopper "
                       "figure, 512 MiB"});
  const Bytes cublas = IsHopper(gpu) ? kCublasHopperBytes : kCublasOtherBytes;
  out.terms.push_back({"cuBLAS workspaces", kCublasStreams * cublas, false,
                       fmt::format("{} streams x {:.3g} MiB (PyTorch CublasHandlePool.cpp)",
                                   kCublasStreams, static_cast<double>(cublas) / kMiB),
                       true});
  const Bytes connection = NcclConnectionBytes(gpu);
  auto nccl = [&](const std::string& group, int connections) {
    out.terms.push_back({"NCCL: " + group, connections * connection, true,
                         fmt::format("{} connections x {:.3g} MiB (SIMPLE 4 MiB + LL128 + LL{})",
                                     connections, static_cast<double>(connection) / kMiB,
                                     IsHopper(gpu) ? ", cuMem 2 MiB granules" : "")});
  };
  const ParallelLayout& l = config.layout;
  const int d = l.data_parallel, t = l.tensor_parallel;
  const int group = config.memory.zero >= 2 && config.memory.sharding.shard_group > 0 &&
                            config.memory.sharding.shard_group < d
                        ? config.memory.sharding.shard_group
                        : d;
  if (group > 1) {
    nccl(fmt::format("data-parallel group ({} GPUs)", group),
         NcclCollectiveConnections(gpu, group));
  }
  if (group < d) {
    nccl(fmt::format("replica group ({} GPUs, hybrid sharding)", d / group),
         NcclCollectiveConnections(gpu, d / group));
  }
  if (t > 1) {
    nccl(fmt::format("tensor-parallel group ({} GPUs)", t), NcclCollectiveConnections(gpu, t));
  }
  if (pipeline_neighbours > 0) {
    nccl(fmt::format("pipeline neighbours ({})", pipeline_neighbours),
         pipeline_neighbours * NcclPairConnections(gpu));
  }
  const int64_t gpus = int64_t{t} * std::max(1, l.pipeline_stages) * d * l.context_parallel;
  if (gpus > 1) {
    nccl(fmt::format("default group ({} GPUs)", gpus),
         NcclCollectiveConnections(gpu, static_cast<int>(std::min<int64_t>(gpus, 1 << 20))));
  }
  return out;
}

DeviceMemory DeviceMemoryFromReplay(const Cluster& cluster, const TrainingConfig& config,
                                    Bytes allocated, Bytes reserved, const std::string& what,
                                    int pipeline_neighbours) {
  DeviceMemory out = DeviceMemoryFor(cluster, config, allocated, pipeline_neighbours);
  out.terms[0] = {"allocated (replayed peak)", allocated, false,
                  what + ": max_memory_allocated over two steps", true};
  if (out.terms.size() > 1) {
    out.terms[1] = {"allocator cache (reserved - allocated)", reserved - allocated, false,
                    what +
                        ": max_memory_reserved - max_memory_allocated, PyTorch's allocator "
                        "rules (sim/caching_allocator.h)",
                    true};
  }
  return out;
}

std::string DeviceMemoryText(const DeviceMemory& memory) {
  TextTable table;
  table.AddColumn("term", TextTable::kLeft);
  table.AddColumn("GiB", TextTable::kRight);
  table.AddColumn("", TextTable::kLeft);
  table.AddColumn("basis", TextTable::kLeft);
  for (const DeviceMemoryTerm& t : memory.terms) {
    table.AddRow(
        {t.name, fmt::format("{:.2f}", ToGiB(t.bytes)), t.estimated ? "estimated" : "", t.basis});
  }
  table.AddRow({"total (as nvidia-smi reports it)", fmt::format("{:.2f}", ToGiB(memory.Total())),
                "estimated", "the sum"});
  return table.Render();
}

}  // namespace pipecast
