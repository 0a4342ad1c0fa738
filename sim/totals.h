// Totals: the up-front check that every sum the simulator forms stays inside
// 64-bit integers. Each field of a model or cluster file has its own limit
// (docs/formats.md: 10^12 us per op, 2^50 bytes, 2^50 parameters), but limits
// on single fields cannot protect a sum: 9,224 ops of 10^12 us each pass
// 2^63 ns, and a sum past it wraps silently (negative peaks, an iteration
// faster than with free links, a planner that fits a model on one GPU).
// CheckTotals bounds, from the inputs alone and before anything is summed, the
// whole run's compute time, transfer time, live bytes and static bytes, and
// refuses a configuration whose bound passes kMaxTotal, naming the fields.
// Every sum the engine forms (a rank's busy time, an op's end, a stage's
// activations, a peak) is at most one of these bounds, so nothing downstream
// needs its own overflow check.
//
// Units: ns and bytes. Pure function; thread-safe.
#ifndef PIPECAST_SIM_TOTALS_H_
#define PIPECAST_SIM_TOTALS_H_

#include <cstdint>

#include "base/status.h"
#include "sim/cluster.h"
#include "sim/memory.h"
#include "sim/model.h"

namespace pipecast {

// 2^62: half of int64's range, so that a total plus any other total (the
// pipeline time plus the all-reduce plus the optimizer step) is still below
// 2^63. 2^62 ns is 146 years; 2^62 bytes is 4 EiB.
inline constexpr int64_t kMaxTotal = int64_t{1} << 62;

struct TotalsInput {
  int microbatch_size = 1;
  // Micro-batches the action lists run, over all their iterations.
  int64_t microbatches = 1;
  int stages = 1;  // virtual stages: weight stashing keeps up to this many versions
  MemoryConfig memory;
  TimeNs optimizer_step_ns = 0;
};

// OK when the bounds below stay within kMaxTotal; InvalidArgument otherwise,
// naming the fields whose sum is too large and the bound's value:
//  - time: sum over layers of (2 x forward_us + backward_us + attention_core_us)
//    at the micro-batch size (the largest profile scaled by the largest
//    extrapolation factor), times the micro-batches, plus the optimizer step;
//  - transfers: sum over layers of output_bytes over the slowest link, plus its
//    latency, twice (activation and gradient) per layer and micro-batch; and
//    the parameters' gradient bytes over the slowest link (the all-reduce);
//  - live bytes: sum over layers of every activation, output and workspace
//    field, times the micro-batches;
//  - static bytes: the parameters times the bytes per parameter, times the
//    stages (stashed weight versions).
Status CheckTotals(const Model& model, const Cluster& cluster, const TotalsInput& input);

}  // namespace pipecast

#endif  // PIPECAST_SIM_TOTALS_H_
