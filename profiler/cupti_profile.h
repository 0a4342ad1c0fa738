// Entry points of `profiler cupti` (profile an unmodified CUDA program) and
// `profiler builtin` (profile pipecast's own CUDA transformer block). Both
// need a CUDA build and an NVIDIA GPU; in a build without CUDA (and on a
// machine without a driver or device) they return Unavailable saying so.
// The implementation is chosen by file in CMake: profiler/cupti/ with CUDA,
// profiler/cupti_unavailable.cc without.
//
// Not thread-safe: they start child processes and set their environment.
#ifndef PIPECAST_PROFILER_CUPTI_PROFILE_H_
#define PIPECAST_PROFILER_CUPTI_PROFILE_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "profiler/aggregate.h"
#include "sim/model.h"

namespace pipecast {

struct CuptiCommandOptions {
  std::vector<std::string> command;  // the program and its arguments; required
  std::string name;                  // model name; empty: the program's file name
  int microbatch_size = 1;           // the micro-batch size the program runs
  AggregateOptions aggregate;        // --warmup, --iterations
  // CUPTI's device timestamp buffer (CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE)
  // in MiB; 0 keeps CUPTI's default (3.2 MB, about 100k records).
  int device_buffer_mib = 0;
  // Where the injection library writes its records files. Empty: a fresh
  // temporary folder, removed afterwards; otherwise kept for inspection.
  std::string records_dir;

  // OK, or InvalidArgument naming the flag.
  [[nodiscard]] Status Validate() const;
};

// Runs the command with CUDA_INJECTION64_PATH set to pipecast's injection
// library (libpipecast_inject.so) and NVTX_INJECTION64_PATH to libcupti, then
// builds the model from the records it wrote. On success `report` gets a
// summary for stderr. Fails with Unavailable without CUDA, driver or device;
// FailedPrecondition when the command fails or the trace is unusable (too
// many lost records, too few iterations, no layer ranges).
[[nodiscard]] Result<Model> ProfileCommand(const CuptiCommandOptions& options, std::string* report);

// The built-in block's shape: a pre-layernorm GPT block (docs/profiler.md).
// With tensor_parallel t > 1 it is one GPU's shard of a Megatron-LM block:
// QKV and fc1 column-parallel (a/t heads, f/t MLP columns), the attention
// projection and fc2 row-parallel, the layernorms and the residual stream
// [T, h] whole. The shard's outputs are partial sums that Megatron-LM
// all-reduces over the t GPUs (2 in the forward, 2 in the backward); one GPU
// runs no collective, so the shard measures the per-GPU compute and memory
// and the model states the collectives' bytes (tp_comm_bytes) instead.
struct BlockShape {
  int hidden = 1024;        // h; a multiple of heads
  int heads = 16;           // a
  int ffn = 0;              // MLP width; 0 = 4 * hidden
  int seq = 512;            // tokens per sample
  int layers = 2;           // blocks, each with its own weights
  int tensor_parallel = 1;  // t: the shard of one of t GPUs; divides heads and Ffn()

  int Ffn() const { return ffn > 0 ? ffn : 4 * hidden; }
  int LocalHeads() const { return heads / tensor_parallel; }  // a/t
  int LocalFfn() const { return Ffn() / tensor_parallel; }    // f/t
  // The shard's attention width (q, k, v and the context): (a/t) x (h/a).
  int AttentionWidth() const { return hidden / tensor_parallel; }
  // Weights of the whole block (t = 1): QKV 3h^2, output projection h^2,
  // MLP 2hf, two layernorms 4h.
  int64_t ParametersPerBlock() const;
  // Weights one GPU holds at t: the four products / t, the layernorms whole.
  int64_t ParametersPerGpu() const;
  // Bytes of one [microbatch * seq, hidden] bf16 tensor: the block's input,
  // output and their gradients.
  int64_t HiddenBytes(int microbatch) const;
  // Bytes the forward keeps allocated until the weight gradient (the
  // activation memory), per GPU: ln1, x1, ln2 [T,h]; q, k, v, ctx [T,h/t];
  // fc1, gelu [T,f/t]; the attention probabilities b(a/t)s^2, all bf16; four
  // fp32 [T] layernorm statistics.
  int64_t ActivationBytes(int microbatch) const;
  // Bytes the weight gradient needs once the input gradient is done: all of
  // ActivationBytes (the block frees nothing at the input gradient) plus
  // what the input gradient saves (dfc1 [T,f/t], dln2, dx1, dln1 [T,h],
  // dqkv [T,3h/t]).
  int64_t WeightGradBytes(int microbatch) const;
  [[nodiscard]] Status Validate() const;  // names --hidden, --heads, --tensor-parallel, ...
};

struct BuiltinOptions {
  std::string name = "builtin-block";
  BlockShape shape;  // shape.tensor_parallel is ignored: see tensor_parallel
  std::vector<int> microbatch_sizes = {1, 2};
  // Degrees t to measure the block's shard at; 1 is always measured. Each
  // t > 1 adds profiles with tensor_parallel t (docs/formats.md).
  std::vector<int> tensor_parallel = {1};
  AggregateOptions aggregate;
  int device = 0;  // CUDA device ordinal
  [[nodiscard]] Status Validate() const;
  // The degrees to run, 1 first, then the others in increasing order.
  std::vector<int> Degrees() const;
};

// Profiles the built-in block at each micro-batch size through the same
// injection path as ProfileCommand (one child process per size).
[[nodiscard]] Result<Model> ProfileBuiltin(const BuiltinOptions& options, std::string* report);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_CUPTI_PROFILE_H_
