// Memory as the GPU reports it, from a replay of the step's own requests
// through PyTorch's caching allocator (sim/caching_allocator.h) instead of
// the flat allocator margin (DeviceMemoryFor's `memory_headroom`): the
// simulator's --memory-replay (docs/simulator.md, "Memory as the GPU reports
// it"; docs/calibration-memory.md, "A per-tensor replay of torchtitan's FSDP2
// step").
//
// One replay exists: torchtitan's eager Llama step under FSDP2
// (sim/fsdp_trace.h, BuildTorchtitanFsdpTrace), tensor by tensor on its
// three streams, two steps. It describes one configuration and no other:
// one pipeline stage of one chunk, one micro-batch per step, t = cp = ep =
// 1, ZeRO-3 over all d replicas with resharding after the forward,
// op-level selective recomputation, bf16 parameters with fp32 gradients and
// AdamW (18 B per parameter as pipecast counts them), a Llama-shaped model
// (RMSNorm, SwiGLU, rotary positions, no biases, untied embeddings, no
// experts) whose shape model.json's source.architecture states, and a GPU
// with a memory size. Anything else is refused, naming the setting or the
// field and what to do; nothing is approximated.
#ifndef PIPECAST_SIM_MEMORY_REPLAY_H_
#define PIPECAST_SIM_MEMORY_REPLAY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/units.h"
#include "sim/cluster.h"
#include "sim/fsdp_trace.h"
#include "sim/model.h"
#include "sim/training_config.h"

namespace pipecast {

enum class MemoryReplay { kOff, kTorchtitanFsdp2 };
// "off", "torchtitan-fsdp2".
const char* MemoryReplayName(MemoryReplay replay);
// The replay named so; nullopt for anything else.
std::optional<MemoryReplay> ParseMemoryReplay(std::string_view name);

struct ReplayedMemory {
  MemoryReplay replay = MemoryReplay::kOff;
  LlamaShape shape;
  int64_t batch = 0;  // the local batch (the micro-batch size)
  int64_t seq = 0;
  // Over the replayed steps, without the cuBLAS workspaces (DeviceMemory
  // adds them): max_memory_allocated and max_memory_reserved.
  Bytes allocated_peak = 0;
  Bytes reserved_peak = 0;
  Bytes capacity = 0;    // the allocator's: the GPU's memory less the runtime terms
  int64_t requests = 0;  // mallocs replayed
  int64_t retries = 0;   // cudaMalloc retries after releasing the cache
};

// The shape torchtitan's Llama step needs, from model.source.architecture.
// InvalidArgument naming the field (source.architecture.vocab) when it is
// missing (a file written before the profiler recorded it, or by hand) or
// when the model is not Llama-shaped.
[[nodiscard]] Result<LlamaShape> TorchtitanLlamaShape(const Model& model);

// OK when `config` is the step the torchtitan FSDP2 trace describes;
// InvalidArgument naming the flag and the value it needs otherwise.
[[nodiscard]] Status CheckTorchtitanFsdp2Config(const TrainingConfig& config);

// Both checks, then the trace replayed on one GPU of `cluster`: the
// allocator's capacity is the GPU's memory less the CUDA context, cuBLAS and
// NCCL terms (DeviceMemoryFor at p = 1). InvalidArgument when the GPU's
// memory is unlimited; FailedPrecondition when the step does not fit even
// after the allocator releases its cache.
[[nodiscard]] Result<ReplayedMemory> ReplayTorchtitanFsdp2(const Model& model,
                                                           const Cluster& cluster,
                                                           const TrainingConfig& config);

// One line for the outputs' notes: what was replayed and what it gives.
std::string ReplayedMemoryNote(const ReplayedMemory& replay, Bytes cublas_bytes);

}  // namespace pipecast

#endif  // PIPECAST_SIM_MEMORY_REPLAY_H_
