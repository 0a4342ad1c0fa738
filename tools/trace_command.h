// `profiler trace`: registers the subcommand on the profiler's CLI11 app
// (per-layer costs from PyTorch profiler traces, measured/trace_profile.h).
// Kept apart from profiler_main.cc, as each measurement method's command is.
#ifndef PIPECAST_TOOLS_TRACE_COMMAND_H_
#define PIPECAST_TOOLS_TRACE_COMMAND_H_

#include <CLI/CLI.hpp>
#include <functional>

namespace pipecast {

// Adds `trace` and its flags to `app`. The returned function runs the
// command once app.parse() has succeeded and `trace` was given; it returns
// the exit code (0 ok, 1 bad input).
std::function<int()> AddTraceCommand(CLI::App& app);

}  // namespace pipecast

#endif  // PIPECAST_TOOLS_TRACE_COMMAND_H_
