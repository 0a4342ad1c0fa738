// Chrome trace-event JSON (opens in Perfetto and chrome://tracing) of one
// timeline: a process per rank/GPU, a "compute" thread with one complete
// event per op, a "comm" thread with one event per transfer, flow arrows from
// each send to its receive, and counter events of live memory.
//
// The same writer serves predicted and measured timelines: `pid_offset`
// shifts process ids so two timelines can sit side by side in one file.
#ifndef PIPECAST_REPORT_TRACE_H_
#define PIPECAST_REPORT_TRACE_H_

#include <nlohmann/json.hpp>
#include <string>

#include "sim/simulator.h"

namespace pipecast {

struct TraceOptions {
  std::string label = "predicted";  // prefixed to process names
  int pid_offset = 0;
};

// A complete trace file (`{"traceEvents": [...], ...}`).
// REQUIRES: result was simulated with record_timeline.
std::string TraceJson(const SimResult& result, const TraceOptions& options = {});

// The same trace as a JSON value ({traceEvents, displayTimeUnit, otherData}),
// for callers that merge traces. Strings are kept as they are: dump with
// error_handler_t::replace where they may not be UTF-8.
nlohmann::ordered_json TraceJsonValue(const SimResult& result, const TraceOptions& options = {});

}  // namespace pipecast

#endif  // PIPECAST_REPORT_TRACE_H_
