// `profiler cpu`: measures the built-in CPU workload (profiler/cpu/workload.h)
// layer by layer and returns a Model ready for model.json.
//
// It runs warm-up rounds, then `iterations` timed ones; a round measures
// every layer at every micro-batch size once (round-robin, so that all of
// them sample the same stretch of a shared machine's load): a Forward, a
// BackwardInput and a BackwardWeight on fresh Saved buffers, reading a Clock
// before and after each pass. A profile holds the median of each pass (backward = median
// input gradient + median weight gradient), the activation bytes the counting
// allocator saw the forward keep, and the extra bytes a backward allocates
// while it runs (workspace). `source` records how: method "cpu", the CPU
// model, the clock, warm-up, iterations, per-layer spread and the workload.
// With tensor_parallel degrees beyond 1 each layer's shards are measured the
// same way, in the same rounds.
//
// Every pass runs on the calling thread, one layer at a time. Not
// thread-safe with other users of the workload's byte counters (it reads
// LiveWorkloadBytes() deltas).
#ifndef PIPECAST_PROFILER_CPU_PROFILE_H_
#define PIPECAST_PROFILER_CPU_PROFILE_H_

#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "base/units.h"
#include "profiler/cpu/workload.h"
#include "sim/model.h"

namespace pipecast::cpu {

struct CpuProfileOptions {
  std::string name = "cpu-mlp";  // the model's name
  WorkloadSpec workload;         // the layers to measure
  std::vector<int> microbatch_sizes = {1, 2, 4};
  int warmup = 2;                   // untimed iterations first, per layer and size
  int iterations = 10;              // timed iterations, per layer and size
  std::string device;               // empty: the CPU model from /proc/cpuinfo
  std::string note;                 // optional; written as source.note
  std::optional<int> global_batch;  // optional; the planner's default batch
  // Tensor-parallel degrees to measure (--tensor-parallel): t = 1 is the
  // whole block; each t > 1 adds profiles of worker 0's shard of a t-way
  // Megatron split (Block::Shard), per GPU and without its all-reduces, with
  // tensor_parallel t, tp_comm_bytes the whole output (4·T·H) and 1 forward
  // and 1 backward all-reduce. Every t must divide every layer's ffn.
  std::vector<int> tensor_parallel = {1};

  // OK, or InvalidArgument naming the flag (--layers, --microbatch-sizes...).
  Status Validate() const;
};

// Relative spread of one sample: (75th percentile - 25th) / median, linear
// interpolation between order statistics; 0 for fewer than 2 values or a
// zero median.
double RelativeSpread(std::vector<TimeNs> values);
// The median (mean of the two middle values when even). REQUIRES: non-empty.
TimeNs Median(std::vector<TimeNs> values);

struct CpuProfile {
  Model model;
  double worst_spread = 0;      // largest per-layer, per-size spread
  std::string worst_spread_at;  // "block2 at micro-batch 4"
};

// Measures every layer at every size. Fails with InvalidArgument when the
// options do not validate, Internal when the counted bytes disagree with the
// workload's stated sizes (a bug).
Result<CpuProfile> ProfileCpu(const CpuProfileOptions& options, const Clock& clock);

// The "model name" line of a /proc/cpuinfo-style file, or "unknown CPU"
// when it cannot be read or has none.
std::string CpuModelName(const std::string& cpuinfo_path = "/proc/cpuinfo");

// Spread above which the tool warns that the machine was too noisy for the
// numbers to be trusted (a quarter of the median).
inline constexpr double kNoisySpread = 0.25;

}  // namespace pipecast::cpu

#endif  // PIPECAST_PROFILER_CPU_PROFILE_H_
