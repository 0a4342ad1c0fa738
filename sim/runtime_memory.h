// Memory as the GPU reports it: what nvidia-smi shows for one rank of a plan,
// beside the bytes the plan's tensors take (the simulated peak, PyTorch's
// max_memory_allocated). Each term is named, says where its figure comes from
// and whether it is estimated (docs/simulator.md, "Memory as the GPU reports
// it"; docs/calibration-memory.md, "Memory as the GPU reports it"):
//   allocated        the simulated peak (weights, gradients, optimizer state,
//                    activations, communication buffers, workspace)
//   allocator cache  reserved - allocated: PyTorch's caching allocator keeps
//                    freed blocks and rounds each request (estimated: the
//                    GPU's allocator margin, GpuSpec::memory_headroom, of the
//                    allocated peak; 13 published pairs: median 5.4%,
//                    quartiles 1.9% and 13.8%)
//   CUDA context     the driver's context with lazy module loading (estimated)
//   cuBLAS           one workspace per (handle, stream) PyTorch uses
//   NCCL             buffers per communicator the plan creates: the data-
//                    parallel group (two under hybrid sharding), the tensor-
//                    parallel group, the pipeline's point-to-point pairs and
//                    the default (world) group (estimated: measured
//                    communicator sizes, NCCL publishes no formula)
// The plan's memory limit (MemoryLimitBytes) is not this: it keeps the
// preset's fixed runtime reserve so that what fits does not move; the
// held-out rows put the allocator's cache at 15-20% and published pairs at
// 0.8-52%, against the 5% either assumes (docs/calibration.md, "The memory
// limit stays the flat reserve").
#ifndef PIPECAST_SIM_RUNTIME_MEMORY_H_
#define PIPECAST_SIM_RUNTIME_MEMORY_H_

#include <string>
#include <vector>

#include "base/units.h"
#include "sim/cluster.h"
#include "sim/training_config.h"

namespace pipecast {

// NCCL's buffers for one connection of one channel, from its defaults
// (src/init.cc, src/include/device.h): SIMPLE NCCL_BUFFSIZE 4 MiB, LL 8 lines
// x 512 threads x 8 steps x 16 B = 512 KiB, LL128 120 elements x 640 threads
// x 8 steps x 8 B = 4,915,200 B: 9,633,792 B.
inline constexpr Bytes kNcclSimpleBufferBytes = Bytes{1} << 22;
inline constexpr Bytes kNcclLlBufferBytes = Bytes{8} * 512 * 8 * 16;
inline constexpr Bytes kNcclLl128BufferBytes = Bytes{120} * 640 * 8 * 8;
inline constexpr Bytes kNcclConnectionBytes =
    kNcclSimpleBufferBytes + kNcclLlBufferBytes + kNcclLl128BufferBytes;

// One term of a rank's device memory.
struct DeviceMemoryTerm {
  std::string name;  // "NCCL: data-parallel group (8 GPUs)"
  Bytes bytes = 0;
  bool estimated = false;  // not a figure from a component's source or the simulation
  std::string basis;       // how the figure is made and its source, short
  bool reserved = false;   // held by PyTorch's caching allocator (ReservedBytes)
};

struct DeviceMemory {
  std::vector<DeviceMemoryTerm> terms;  // allocated first
  Bytes Total() const;
  // The terms' sum without the allocated peak and the allocator's cache: what
  // the runtime holds before training allocates.
  Bytes RuntimeBytes() const;
  // What PyTorch's caching allocator reserves (reserved_bytes.all.peak,
  // torch.cuda.max_memory_reserved, torchtitan's max_reserved): the allocated
  // peak, the allocator's cache and the cuBLAS workspaces (PyTorch allocates
  // them through the caching allocator), not the CUDA context or NCCL's
  // buffers.
  Bytes ReservedBytes() const;
};

// Hopper (H100, H200: the GPU's name says so). NCCL maps its buffers with
// cuMem there (NCCL 2.19 on), in 2 MiB granules: a connection takes 10 MiB
// (NVIDIA/nccl#1685's ALLOC log: 10,485,760 B buffers on 8 H100s).
bool IsHopper(const GpuSpec& gpu);
// One connection's bytes on `gpu`: kNcclConnectionBytes, 10 MiB on Hopper.
Bytes NcclConnectionBytes(const GpuSpec& gpu);
// Connections in one collective communicator of `ranks` GPUs, per GPU: the
// measured size over NcclConnectionBytes, rounded. A100: 688 MB for more
// than 2 ranks, 544 MB for 2 (NVIDIA/nccl#964: 4 A100s with NVLink, a 4 MB
// all-reduce per group): 71 and 56; Hopper: 1.06 GB (NVIDIA/nccl#1685: 8
// H100s, the collective communicator before the first all-to-all): 101.
// Other GPUs: the A100 counts.
int NcclCollectiveConnections(const GpuSpec& gpu, int ranks);
// Connections one pipeline neighbour (a point-to-point pair) adds per GPU:
// A100 the 2-rank group's 56 (nccl#964); Hopper (4.34 - 1.06 GB) / 7 peers
// = 469 MB: 45 (nccl#1685: an all-to-all over 8 H100s, 32 channels per
// pair).
int NcclPairConnections(const GpuSpec& gpu);

// The device memory of a rank that allocates `allocated` bytes at its peak
// and holds `pipeline_neighbours` point-to-point pairs (0, 1 or 2), in a run
// with `config` on `cluster`. Nothing but `allocated` when the GPU's memory is
// unlimited (memory_bytes 0: `ideal`).
DeviceMemory DeviceMemoryFor(const Cluster& cluster, const TrainingConfig& config, Bytes allocated,
                             int pipeline_neighbours);

// The same terms with the allocated peak and the allocator's cache from a
// replay of the step's own requests through the caching allocator
// (sim/memory_replay.h, --memory-replay) in place of the simulated peak and
// the flat margin: `allocated` and `reserved` are the replay's
// max_memory_allocated and max_memory_reserved (without cuBLAS), `what`
// names the replay. REQUIRES: reserved >= allocated.
DeviceMemory DeviceMemoryFromReplay(const Cluster& cluster, const TrainingConfig& config,
                                    Bytes allocated, Bytes reserved, const std::string& what,
                                    int pipeline_neighbours);

// The table of terms, GiB, one line each with "estimated" where it is.
std::string DeviceMemoryText(const DeviceMemory& memory);

}  // namespace pipecast

#endif  // PIPECAST_SIM_RUNTIME_MEMORY_H_
