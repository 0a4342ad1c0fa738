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
struct BlockShape {
  int hidden = 1024;  // h; a multiple of heads
  int heads = 16;     // a
  int ffn = 0;        // MLP width; 0 = 4 * hidden
  int seq = 512;      // tokens per sample
  int layers = 2;     // blocks, each with its own weights

  int Ffn() const { return ffn > 0 ? ffn : 4 * hidden; }
  // Weights: QKV 3h^2, output projection h^2, MLP 2hf, two layernorms 4h.
  int64_t ParametersPerBlock() const;
  [[nodiscard]] Status Validate() const;  // names --hidden, --heads, ...
};

struct BuiltinOptions {
  std::string name = "builtin-block";
  BlockShape shape;
  std::vector<int> microbatch_sizes = {1, 2};
  AggregateOptions aggregate;
  int device = 0;  // CUDA device ordinal
  [[nodiscard]] Status Validate() const;
};

// Profiles the built-in block at each micro-batch size through the same
// injection path as ProfileCommand (one child process per size).
[[nodiscard]] Result<Model> ProfileBuiltin(const BuiltinOptions& options, std::string* report);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_CUPTI_PROFILE_H_
