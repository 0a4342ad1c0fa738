// `profiler trace`: per-layer costs measured from PyTorch profiler (Kineto)
// traces of a run a team already has, written as a model.json with
// source.method "trace" -- the CUPTI profiler's attribution and aggregation
// (profiler/attribution.h, aggregate.h) fed from the trace instead of from
// CUPTI's records.
//
// The program marks its layers as profiler cupti expects, with
// record_function ranges named pipecast:<layer>:forward | backward |
// weight_grad [:params=N] [:out=BYTES] (docs/profiler.md); ProfilerStep#N
// ranges are its iterations. A kernel belongs to the innermost layer range
// open on the thread that launched it (joined by correlation id). With
// profile_memory=True, PyTorch's "[memory]" events are the allocations: an
// allocation belongs to the range open on its thread when it was made, so a
// layer's activation_bytes are what its forward allocated and still held at
// its end.
//
// Thread-safe functions.
#ifndef PIPECAST_MEASURED_TRACE_PROFILE_H_
#define PIPECAST_MEASURED_TRACE_PROFILE_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "measured/trace_file.h"
#include "profiler/activity.h"
#include "profiler/aggregate.h"
#include "sim/model.h"

namespace pipecast::measured {

struct TraceProfileOptions {
  std::string name;                 // the model's name (required)
  std::vector<std::string> traces;  // one per process; traces of one size pool their samples
  // The micro-batch size each trace ran: one value for all, or one per trace.
  std::vector<int> microbatch_sizes = {1};
  AggregateOptions aggregate;  // --warmup, --iterations
  Status Validate() const;
};

// The trace as the CUPTI profiler's records: kernels, copies and sets with
// their launches, layer ranges and ProfilerStep ranges (as pipecast:step) as
// markers, "[memory]" events as allocations and releases. InvalidArgument
// naming the file for a time before the clock's zero.
Result<ActivityTrace> ActivityFromTrace(const TraceFile& trace);

// Reads the traces and builds the model. Errors name the trace: no layer
// range (says how to add them), too few iterations (--warmup, --iterations).
Result<Model> TraceProfileModel(const TraceProfileOptions& options);

}  // namespace pipecast::measured

#endif  // PIPECAST_MEASURED_TRACE_PROFILE_H_
