// The built-in cluster presets (ClusterPresetNames, ClusterPreset). Each
// number carries its source; docs/formats.md has the same table (`local`:
// docs/validator.md). Bandwidths are per direction, in gigabytes (10^9
// bytes) per second.
#include "sim/cluster.h"

#include <string>
#include <vector>

namespace pipecast {
namespace {

// Latencies are the order of magnitude NCCL point-to-point shows for small
// messages, not a datasheet figure; they matter only for tiny transfers.
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
                  // Datasheet "80GB" HBM2e; the device has 80 GiB (81920 MiB
                  // in nvidia-smi), of which CUDA reserves a few hundred MiB.
                  .memory_bytes = 80 * kGiB,
                  .peak_tflops = 312,              // A100 datasheet: BF16 tensor, dense
                  .memory_bandwidth_gbps = 2039},  // A100 80GB SXM datasheet
          // NVLink 3: 12 links, 600 GB/s bidirectional = 300 GB/s each way.
          .intra_node = {.bandwidth_gbps = 300,
                         .latency_us = 2},  // NCCL p2p over NVLink, small msg
          // DGX A100: one 200 Gb/s HDR InfiniBand NIC per GPU = 25 GB/s.
          .inter_node = {.bandwidth_gbps = 25, .latency_us = 5},  // NCCL p2p over IB, small msg
      },
      {
          .name = "h100-sxm",
          .gpus_per_node = 8,  // DGX H100 / HGX H100 8-GPU board
          .gpu = {.name = "NVIDIA H100 80GB HBM3",
                  // Datasheet "80GB", taken as 80 GiB like the A100 (the
                  // device shows 81559 MiB, 0.4% less).
                  .memory_bytes = 80 * kGiB,
                  .peak_tflops = 989,              // H100 SXM datasheet: BF16, dense
                  .memory_bandwidth_gbps = 3350},  // H100 SXM datasheet
          // NVLink 4: 18 links, 900 GB/s bidirectional = 450 GB/s each way.
          .intra_node = {.bandwidth_gbps = 450,
                         .latency_us = 2},  // NCCL p2p over NVLink, small msg
          // DGX H100: one 400 Gb/s NDR InfiniBand NIC per GPU = 50 GB/s.
          .inter_node = {.bandwidth_gbps = 50, .latency_us = 5},  // NCCL p2p over IB, small msg
      },
      {
          .name = "h200",
          .gpus_per_node = 8,  // DGX H200 / HGX H200 8-GPU board
          .gpu = {.name = "NVIDIA H200",
                  // H200 datasheet "141GB", taken as 141 * 10^9 bytes (the
                  // device reports a little more; this errs on the safe side).
                  .memory_bytes = Bytes{141} * 1000 * 1000 * 1000,
                  .peak_tflops = 989,              // H200 SXM datasheet: BF16, dense
                  .memory_bandwidth_gbps = 4800},  // H200 SXM datasheet
          // NVLink 4: 900 GB/s bidirectional = 450 GB/s each way.
          .intra_node = {.bandwidth_gbps = 450,
                         .latency_us = 2},  // NCCL p2p over NVLink, small msg
          // DGX H200: one 400 Gb/s NDR InfiniBand NIC per GPU = 50 GB/s.
          .inter_node = {.bandwidth_gbps = 50, .latency_us = 5},  // NCCL p2p over IB, small msg
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
