// The device allocations of training steps on one rank, as a sequence of
// mallocs and frees, built from the per-layer terms the memory model already
// has (LayerCost: what each layer keeps for its backward, what it rebuilds,
// its output and its workspace; MemoryConfig: the sharded state), and
// replayed through the caching allocator (sim/caching_allocator.h) to give
// what torch.cuda.max_memory_reserved() reports (docs/simulator.md, "The
// caching allocator's replay").
//
// The step it writes is one pipeline stage holding every layer (p = 1), one
// micro-batch, sharded data parallelism as FSDP2 runs it (torchtitan:
// fully_shard per block, the root group of embedding, final norm and output
// kept gathered from forward to backward, the last block not resharded
// after its forward), in PyTorch's order:
//   zero_grad sets the gradients to None (frees them);
//   forward, per layer: all-gather the unit (stream 1: the flat output,
//     kept until the next unit's all-gather), copy out the unsharded
//     parameters (stream 0), the layer's kept tensors, its transient ones
//     (rerun in the backward) made and freed, reshard;
//   with --loss pytorch the head writes bf16 logits, their fp32 copy and
//     log_softmax's fp32 output (kept), then frees the copy and the logits;
//   backward, last layer first: gather again where resharded, rebuild the
//     transient tensors, the input's gradient, the unsharded weight
//     gradients, free what the layer kept; reduce-scatter (stream 2: the
//     fp32 input, kept until the next reduce-scatter, and the sharded
//     gradient, kept until zero_grad);
//   optimizer step: Adam's two moments made at the first step
//     (torch.optim.Adam's lazy state), kept.
// Aggregates: each term is one allocation (a layer's kept tensors, its
// rebuilt tensors, its sharded state), not one per tensor PyTorch makes;
// the head's loss tensors are each one allocation.
//
// Units: bytes. Streams: 0 compute, 1 all-gather, 2 reduce-scatter.
#ifndef PIPECAST_SIM_STEP_TRACE_H_
#define PIPECAST_SIM_STEP_TRACE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "sim/caching_allocator.h"
#include "sim/memory.h"
#include "sim/model.h"

namespace pipecast {

struct TraceEvent {
  enum class Kind { kMalloc, kFree, kStepEnd };
  Kind kind = Kind::kMalloc;
  int64_t tensor = 0;  // the trace's own id of the tensor
  Bytes bytes = 0;     // kMalloc
  int stream = 0;      // kMalloc
  std::string what;    // "block 3 kept", for reading a trace
};

struct StepTraceOptions {
  int microbatch_size = 1;
  int data_parallel = 1;      // FSDP's shard group
  MemoryConfig memory;        // zero must be 3
  bool op_recompute = true;   // kept: op_saved_bytes; else activation_bytes
  bool pytorch_loss = false;  // the head's loss as --loss pytorch writes it
  int steps = 2;
  // Bytes per parameter of optimizer state made at the first step (Adam's
  // fp32 moments, 8), part of memory.optimizer_bytes_per_param.
  double lazy_optimizer_bytes_per_param = 8;
};

// The trace. InvalidArgument naming the setting when zero is not 3, a layer
// has no cost at the micro-batch size or the head's terms do not hold the
// pytorch loss's tensors.
[[nodiscard]] Result<std::vector<TraceEvent>> BuildStepTrace(const Model& model,
                                                             const StepTraceOptions& options);

struct ReplayResult {
  AllocatorStats first_step;  // peaks over step 1
  AllocatorStats last_step;   // peaks over the last step (reset after the one before)
  AllocatorStats run;         // peaks over the run: what max_memory_reserved reports
  // At the run's reserved peak (the first time it is reached): the allocated
  // bytes then and each stream's reserved bytes then.
  Bytes allocated_at_reserved_peak = 0;
  std::map<int, Bytes> reserved_by_stream_at_peak;
  std::map<int, Bytes> reserved_by_stream_end;  // each stream's after the run
};

// Replays `trace` through a CachingAllocator of `capacity` (0: unlimited).
// FailedPrecondition when it runs out of memory.
[[nodiscard]] Result<ReplayResult> ReplayTrace(const std::vector<TraceEvent>& trace,
                                               Bytes capacity = 0);

}  // namespace pipecast

#endif  // PIPECAST_SIM_STEP_TRACE_H_
