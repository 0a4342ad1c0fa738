// The records file (`pipecast-activity/1`): how the injection library hands
// one process's decoded activity to `profiler cupti`. JSON lines: a header
// object (format, pid, CUPTI version, loss counters, errors, devices), then
// one object per event, keyed by "k" (docs/profiler.md, "Records file").
// Line-oriented so a file of a million kernels parses in one pass without a
// document tree.
//
// Stateless functions; safe from any thread.
#ifndef PIPECAST_PROFILER_ACTIVITY_FILE_H_
#define PIPECAST_PROFILER_ACTIVITY_FILE_H_

#include <string>
#include <string_view>

#include "base/status.h"
#include "profiler/activity.h"

namespace pipecast {

inline constexpr char kActivityFormat[] = "pipecast-activity/1";

// The whole file's text, ending with a newline.
std::string ActivityTraceToText(const ActivityTrace& trace);

// Parses a records file. Fails with InvalidArgument naming `origin`, the line
// and the key ("x.jsonl: line 12: key 's' must be an unsigned integer").
[[nodiscard]] Result<ActivityTrace> ParseActivityTrace(std::string_view text,
                                                       const std::string& origin);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_ACTIVITY_FILE_H_
