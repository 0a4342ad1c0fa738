// The device allocations of torchtitan's Llama training step under FSDP2,
// tensor by tensor, for replaying through PyTorch's caching allocator
// (sim/caching_allocator.h, ReplayTrace in sim/step_trace.h) to give what
// torch.cuda.max_memory_reserved() reports (docs/calibration-memory.md, "A
// per-tensor replay of torchtitan's FSDP2 step").
//
// The step is torchtitan @ 9dec370's `train.py` with its Llama model
// (`torchtitan/models/llama/model.py`, RMSNorm of `models/norms.py`), FSDP2
// as `parallelize_llama.py` applies it (fully_shard per block, the last block
// not resharded after its forward, the root group of tok_embeddings, norm and
// output; bf16 parameters, fp32 reduce), op-level selective activation
// checkpointing (`_save_list`: every mm output but every second one per
// block, and the flash attention's outputs), the `--loss pytorch` loss
// (cross_entropy on the fp32 copy of the logits, `del pred`), gradient
// clipping and AdamW (foreach). FSDP2's order is that of
// torch/distributed/fsdp/_fully_shard (`_fsdp_param_group.py`,
// `_fsdp_collectives.py`, `_fsdp_state.py`): the all-gather's flat bf16 input
// and output on the copy-in stream, the output kept in the forward until the
// next group's copy-out and freed at once in the backward; the unsharded
// parameters one allocation each on the compute stream; the backward
// prefetching the next group at each pre-backward; the reduce-scatter's fp32
// input on the compute stream (kept until the next group's post-backward or
// the final callback) and its output, the sharded gradients, on the
// reduce-scatter stream until zero_grad. Each op's outputs are allocated
// when the op runs and freed when the last reference goes (Python locals at
// return, autograd's saved tensors after their node, SAC's cache when the
// recompute pops it). The assumptions where the code is not read here are
// listed in the .cc file and in the doc.
//
// Units: bytes. Streams: 0 compute, 1 all-gather copy-in, 2 reduce-scatter.
#ifndef PIPECAST_SIM_FSDP_TRACE_H_
#define PIPECAST_SIM_FSDP_TRACE_H_

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "sim/step_trace.h"

namespace pipecast {

// torchtitan's Llama: `ModelArgs` (dim, n_layers, n_heads, n_kv_heads,
// vocab_size) and the feed-forward's hidden size after its multipliers.
struct LlamaShape {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t ffn = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t vocab = 0;
};

struct FsdpTraceOptions {
  int64_t batch = 1;      // local batch size
  int64_t seq = 1;        // sequence length
  int data_parallel = 1;  // FSDP's shard group
  int steps = 2;
};

// The trace: the model's initialisation (sharded fp32 parameters and the
// rotary table) then `steps` training steps, each closed by kStepEnd.
// InvalidArgument naming the field when a size is not positive or the heads
// do not divide the hidden size or the kv heads the heads.
[[nodiscard]] Result<std::vector<TraceEvent>> BuildTorchtitanFsdpTrace(
    const LlamaShape& shape, const FsdpTraceOptions& options);

}  // namespace pipecast

#endif  // PIPECAST_SIM_FSDP_TRACE_H_
