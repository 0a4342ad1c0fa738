// Chrome trace-event JSON (opens in Perfetto and chrome://tracing) of one
// timeline: a process per rank/GPU (pids from 1: pid 0 is the idle process
// to trace viewers), a "compute" thread with one complete event per op, a
// thread per destination ("send → rank 3") with one event per transfer, a
// second one where sends to one destination overlap, flow arrows from each
// send to the op that consumes it, a "data parallel" thread with the
// gradient all-reduce and the optimizer step, a "critical path" thread when
// the result has one, and counters of memory (static + the live set) and of
// the capacity.
//
// The same writer serves predicted and measured timelines: `pid_offset`
// shifts process ids so two timelines can sit side by side in one file.
#ifndef PIPECAST_REPORT_TRACE_H_
#define PIPECAST_REPORT_TRACE_H_

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "sim/simulator.h"

namespace pipecast {

struct TraceOptions {
  std::string label = "predicted";  // prefixed to process names
  int pid_offset = 0;
};

// A complete trace file (`{"traceEvents": [...], ...}`).
// REQUIRES: result was simulated with record_timeline.
std::string TraceJson(const SimResult& result, const TraceOptions& options = {});

// The same text handed to `sink` in pieces (a line each) as it is made, so
// that writing a large trace holds neither the text nor a JSON value per
// event: about 40 bytes per event besides the result (docs/report.md).
// REQUIRES: as TraceJson().
void WriteTraceJson(const SimResult& result, const TraceOptions& options,
                    const std::function<void(std::string_view)>& sink);

// The same trace as a JSON value ({traceEvents, displayTimeUnit, otherData}),
// for callers that merge traces. Strings are kept as they are: dump with
// error_handler_t::replace where they may not be UTF-8.
nlohmann::ordered_json TraceJsonValue(const SimResult& result, const TraceOptions& options = {});

}  // namespace pipecast

#endif  // PIPECAST_REPORT_TRACE_H_
