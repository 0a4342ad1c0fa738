// The built-in cluster presets (ClusterPresetNames, ClusterPreset). Each
// number carries its source; docs/formats.md has the same table (`local`:
// docs/validator.md). Bandwidths are per direction, in gigabytes (10^9
// bytes) per second.
#include "sim/cluster.h"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace pipecast {
namespace {

// The runtime reserve of a GPU (GpuSpec::memory_reserve_bytes), summed from
// published figures (docs/research/memory-sources.md section 3):
// CUDA context with lazy module loading: 287 MB (PyTorch PR #86509) to about
// 400-430 MiB (pytorch#109888, unsloth-zoo PR #1053); no Hopper figure is
// published, so round up to 512 MiB.
constexpr Bytes kCudaContextBytes = kPresetCudaContextBytes;
// PyTorch's default cuBLAS workspace per (handle, stream), CublasHandlePool.cpp:
// 32 MiB on sm90 (NVIDIA's recommendation for Hopper), 4096 KiB x 2 + 16 KiB
// x 8 elsewhere; two streams (compute and the backward/communication stream).
constexpr Bytes kCublasStreams = 2;
constexpr Bytes kCublasWorkspaceHopper = 32 * kMiB;
constexpr Bytes kCublasWorkspaceAmpere = 4096 * kKiB * 2 + 16 * kKiB * 8;
// NCCL buffers: 688 MB per communicator measured on A100 NVLink groups of
// more than 2 GPUs (NVIDIA/nccl#964); a plan opens two, the pipeline's
// point-to-point and the data-parallel group. NVIDIA publishes no formula.
constexpr Bytes kNcclCommunicatorBytes = Bytes{688} * 1000 * 1000;
constexpr Bytes kNcclCommunicators = 2;
constexpr Bytes ReserveBytes(Bytes cublas_workspace) {
  return kCudaContextBytes + kCublasStreams * cublas_workspace +
         kNcclCommunicators * kNcclCommunicatorBytes;
}
// Allocator margin: 5% of capacity, Megatron-LM's overhead_factor = 1.05
// ("buffer for optimizer and miscellaneous temporaries",
// theoretical_memory_usage.py). 13 published allocated/reserved pairs put the
// allocator's cache at a median of 5.4%, quartiles 1.9% and 13.8%: too spread
// to fit one figure, so 5% is kept (docs/calibration.md, "The allocator's cache
// against published allocated-and-reserved pairs").
constexpr double kAllocatorHeadroom = 0.05;

// Latencies are the order of magnitude NCCL point-to-point shows for small
// messages, not a datasheet figure; they matter only for tiny transfers.
//
// How NCCL's collectives run on the presets (sim/collectives.h; the figures
// and their sources are docs/research/nccl-tests.md, the check is
// docs/calibration.md "Collectives against nccl-tests"):
// A ring's bus bandwidth over NVLink is 80% of the line rate: 365-370 GB/s
// of H100's 450 (NVIDIA/nccl#1455, NVIDIA/nccl-tests#212: "with the protocol
// overhead (~20%)"), 232.5 GB/s of A100's 300 (NVIDIA/nccl#1048).
constexpr double kNvlinkEfficiency = 0.8;
// A NIC reaches 95% of its line rate: 46-49 GB/s of NDR's 50
// (NVIDIA/nccl-tests#290, #267), 24 GB/s of HDR's 25 (NVIDIA/nccl-tests#119,
// #160, #252).
constexpr double kNicEfficiency = 0.95;
// NVLink SHARP all-reduce on 8 H100s: algorithm bandwidth 273 GB/s (bus
// bandwidth 480; NVIDIA/nccl#1455, NVIDIA/nccl-tests#212).
constexpr double kHopperNvlsGbps = 273;
// NCCL's own tuning model for its Simple protocol (src/graph/tuning.cc in
// NVIDIA/nccl, ncclTunerConstantsDefaults): a ring's base latency 8.4 us,
// 3.4 us per step over NVLink, 14 us per step over the network.
constexpr double kCollectiveBaseUs = 8.4;
constexpr double kNvlinkStepUs = 3.4;
constexpr double kNetworkStepUs = 14;
const std::vector<Cluster>& Presets() {
  static const auto* const kPresets = new std::vector<Cluster>{
      {
          .name = "ideal",
          .gpus_per_node = 8,  // any value: links are free either way
          .gpu = {.name = "ideal",
                  .memory_bytes = 0,            // 0 = unlimited memory
                  .peak_tflops = 0,             // 0 = unknown: no MFU
                  .memory_bandwidth_gbps = 0},  // 0 = unknown
          .intra_node = {.bandwidth_gbps = 0,   // 0 = infinite
                         .latency_us = 0},      // no latency
          .inter_node = {.bandwidth_gbps = 0,   // 0 = infinite
                         .latency_us = 0},      // no latency
      },
      {
          .name = "a100-80gb",
          .gpus_per_node = 8,  // DGX A100 / HGX A100 8-GPU board
          .gpu = {.name = "NVIDIA A100-SXM4-80GB",
                  // Exposed to applications: cudaMemGetInfo's total, 79.15
                  // GiB in PyTorch's out-of-memory messages (nvidia-smi shows
                  // 81920 MiB; totalGlobalMem 81051 MiB on driver 12.2).
                  .memory_bytes = 81049 * kMiB,
                  .memory_reserve_bytes = ReserveBytes(kCublasWorkspaceAmpere),
                  .memory_headroom = kAllocatorHeadroom,
                  .peak_tflops = 312,             // A100 datasheet: BF16 tensor, dense
                  .memory_bandwidth_gbps = 2039,  // A100 80GB SXM datasheet
                  .sms = 108},                    // A100 SXM4: 108 SMs (whitepaper)
          // NVLink 3: 12 links, 600 GB/s bidirectional = 300 GB/s each way.
          .intra_node = {.bandwidth_gbps = 300,
                         .latency_us = 2,  // NCCL p2p over NVLink, small msg
                         .efficiency = kNvlinkEfficiency,
                         .step_latency_us = kNvlinkStepUs,
                         .collective_latency_us = kCollectiveBaseUs},
          // DGX A100: one 200 Gb/s HDR InfiniBand NIC per GPU = 25 GB/s.
          .inter_node = {.bandwidth_gbps = 25,
                         .latency_us = 5,  // NCCL p2p over IB, small msg
                         .efficiency = kNicEfficiency,
                         .step_latency_us = kNetworkStepUs,
                         .collective_latency_us = kCollectiveBaseUs},
          .nics_per_node = 8,  // rail-optimized, one per GPU
      },
      {
          .name = "h100-sxm",
          .gpus_per_node = 8,  // DGX H100 / HGX H100 8-GPU board
          .gpu = {.name = "NVIDIA H100 80GB HBM3",
                  // Exposed to applications: nvidia-smi's 81559 MiB total less
                  // its 551 MiB "Reserved" = 81008 MiB, PyTorch's "total
                  // capacity of 79.11 GiB" (vllm#27508).
                  .memory_bytes = 81008 * kMiB,
                  .memory_reserve_bytes = ReserveBytes(kCublasWorkspaceHopper),
                  .memory_headroom = kAllocatorHeadroom,
                  .peak_tflops = 989,             // H100 SXM datasheet: BF16, dense
                  .memory_bandwidth_gbps = 3350,  // H100 SXM datasheet
                  .peak_fp8_tflops = 1979,        // H100 SXM datasheet: FP8, dense
                  .sms = 132},                    // H100 SXM5: 132 SMs (whitepaper)
          // NVLink 4: 18 links, 900 GB/s bidirectional = 450 GB/s each way.
          .intra_node = {.bandwidth_gbps = 450,
                         .latency_us = 2,  // NCCL p2p over NVLink, small msg
                         .efficiency = kNvlinkEfficiency,
                         .step_latency_us = kNvlinkStepUs,
                         .collective_latency_us = kCollectiveBaseUs,
                         .nvls_bandwidth_gbps = kHopperNvlsGbps},  // NVSwitch 3
          // DGX H100: one 400 Gb/s NDR InfiniBand NIC per GPU = 50 GB/s.
          .inter_node = {.bandwidth_gbps = 50,
                         .latency_us = 5,  // NCCL p2p over IB, small msg
                         .efficiency = kNicEfficiency,
                         .step_latency_us = kNetworkStepUs,
                         .collective_latency_us = kCollectiveBaseUs},
          .nics_per_node = 8,  // rail-optimized, one per GPU
      },
      {
          .name = "h200",
          .gpus_per_node = 8,  // DGX H200 / HGX H200 8-GPU board
          .gpu = {.name = "NVIDIA H200",
                  // Exposed to applications: cudaMemGetInfo's total, 139.80
                  // GiB = 143155 MiB (nvidia-smi shows 143771 MiB;
                  // totalGlobalMem 143156 MiB).
                  .memory_bytes = 143155 * kMiB,
                  .memory_reserve_bytes = ReserveBytes(kCublasWorkspaceHopper),
                  .memory_headroom = kAllocatorHeadroom,
                  .peak_tflops = 989,             // H200 SXM datasheet: BF16, dense
                  .memory_bandwidth_gbps = 4800,  // H200 SXM datasheet
                  .peak_fp8_tflops = 1979,        // H200 SXM datasheet: FP8, dense
                  .sms = 132},                    // H200: the H100 SXM's GH100 die, 132 SMs
          // NVLink 4: 900 GB/s bidirectional = 450 GB/s each way.
          .intra_node = {.bandwidth_gbps = 450,
                         .latency_us = 2,  // NCCL p2p over NVLink, small msg
                         .efficiency = kNvlinkEfficiency,
                         .step_latency_us = kNvlinkStepUs,
                         .collective_latency_us = kCollectiveBaseUs,
                         .nvls_bandwidth_gbps = kHopperNvlsGbps},  // NVSwitch 3
          // DGX H200: one 400 Gb/s NDR InfiniBand NIC per GPU = 50 GB/s.
          .inter_node = {.bandwidth_gbps = 50,
                         .latency_us = 5,  // NCCL p2p over IB, small msg
                         .efficiency = kNicEfficiency,
                         .step_latency_us = kNetworkStepUs,
                         .collective_latency_us = kCollectiveBaseUs},
          .nics_per_node = 8,  // rail-optimized, one per GPU
      },
      {
          // This machine, for the validator's cpu and mpi backends: each
          // "GPU" is a worker (thread or process) on the CPU. Nominal figures
          // for planning; `validator` replaces the links with a probe's
          // measurement and the memory with this machine's RAM per stage.
          .name = "local",
          .gpus_per_node = 64,  // every worker on one machine
          .gpu = {.name = "CPU worker",
                  .memory_bytes = 16 * kGiB,  // nominal share of a small machine's RAM
                  .peak_tflops = 0,           // unknown: no MFU
                  .memory_bandwidth_gbps =
                      0},  // unknown
                           // A memory copy between workers: order of a single core's memcpy
                           // rate, and of a thread hand-over (condition variable) wake-up.
          .intra_node = {.bandwidth_gbps = 5, .latency_us = 20},
          .inter_node = {.bandwidth_gbps = 5, .latency_us = 20},
      },
  };
  return *kPresets;
}

}  // namespace

Bytes MemoryHeadroomBytes(const GpuSpec& gpu) {
  return std::llround(gpu.memory_headroom * static_cast<double>(gpu.memory_bytes));
}

Bytes MemoryLimitBytes(const GpuSpec& gpu) {
  if (gpu.memory_bytes <= 0) return 0;
  const Bytes limit = gpu.memory_bytes - gpu.memory_reserve_bytes - MemoryHeadroomBytes(gpu);
  return limit < 1 ? 1 : limit;
}

std::string MemoryLimitText(const GpuSpec& gpu) {
  if (gpu.memory_bytes <= 0) return "unlimited";
  return fmt::format(
      "{:.2f} GiB = {:.2f} GiB capacity - {:.2f} GiB runtime reserve (CUDA context, cuBLAS, "
      "NCCL) - {:.2f} GiB allocator margin ({:g}% of capacity)",
      ToGiB(MemoryLimitBytes(gpu)), ToGiB(gpu.memory_bytes), ToGiB(gpu.memory_reserve_bytes),
      ToGiB(MemoryHeadroomBytes(gpu)), 100 * gpu.memory_headroom);
}

Status ValidateGpuMemory(const GpuSpec& gpu) {
  if (gpu.memory_reserve_bytes < 0) {
    return Status::InvalidArgument(fmt::format("--memory-reserve-gb is {:.2f} GiB: must be >= 0",
                                               ToGiB(gpu.memory_reserve_bytes)));
  }
  if (!(gpu.memory_headroom >= 0 && gpu.memory_headroom < 1)) {
    return Status::InvalidArgument(
        fmt::format("--memory-headroom is {}: expected a fraction of the GPU's memory in [0, 1), "
                    "e.g. 0.05 for 5%",
                    gpu.memory_headroom));
  }
  if (gpu.memory_bytes > 0 &&
      gpu.memory_reserve_bytes + MemoryHeadroomBytes(gpu) >= gpu.memory_bytes) {
    return Status::InvalidArgument(fmt::format(
        "the runtime reserve {:.2f} GiB (--memory-reserve-gb) and allocator margin {:.2f} GiB "
        "(--memory-headroom {}) leave nothing of the {:.2f} GiB GPU (--memory-gb)",
        ToGiB(gpu.memory_reserve_bytes), ToGiB(MemoryHeadroomBytes(gpu)), gpu.memory_headroom,
        ToGiB(gpu.memory_bytes)));
  }
  return Status::Ok();
}

Status ValidateClusterLinks(const Cluster& cluster) {
  if (cluster.nics_per_node < 0) {
    return Status::InvalidArgument(fmt::format(
        "nics_per_node is {}: must be >= 1 (or 0 for one NIC per GPU)", cluster.nics_per_node));
  }
  for (const auto& [key, link] :
       {std::pair<const char*, const Link*>{"intra_node", &cluster.intra_node},
        {"inter_node", &cluster.inter_node}}) {
    if (!(link->efficiency > 0 && link->efficiency <= 1)) {
      return Status::InvalidArgument(fmt::format(
          "{}.efficiency is {}: expected the share of the bandwidth a collective reaches, in "
          "(0, 1], e.g. 0.8",
          key, link->efficiency));
    }
    if (link->bandwidth_gbps < 0 || link->latency_us < 0 || link->collective_latency_us < 0 ||
        link->nvls_bandwidth_gbps < 0) {
      return Status::InvalidArgument(fmt::format("{}: bandwidths and latencies must be >= 0", key));
    }
  }
  if (cluster.inter_node.nvls_bandwidth_gbps != 0) {
    return Status::InvalidArgument(
        "inter_node.nvls_bandwidth_gbps: NVLink SHARP runs inside a node; give it on intra_node");
  }
  return Status::Ok();
}

std::string PresetForGpuName(const std::string& device_name) {
  const auto has = [&](const char* part) { return device_name.find(part) != std::string::npos; };
  if (has("PCIe") || has("NVL")) return "";
  if (has("H200")) return "h200";
  if (has("H100") && (has("HBM3") || has("SXM"))) return "h100-sxm";
  if (has("A100-SXM4-80GB") || (has("A100") && has("SXM") && has("80GB"))) return "a100-80gb";
  return "";
}

std::vector<std::string> ClusterPresetNames() {
  std::vector<std::string> names;
  for (const Cluster& preset : Presets()) names.push_back(preset.name);
  return names;
}

Result<Cluster> ClusterPreset(const std::string& name) {
  for (const Cluster& preset : Presets()) {
    if (preset.name == name) return preset;
  }
  std::string names;
  for (const std::string& n : ClusterPresetNames()) {
    names += names.empty() ? n : ", " + n;
  }
  return Status::NotFound("unknown cluster preset '" + name + "'; presets: " + names);
}

}  // namespace pipecast
