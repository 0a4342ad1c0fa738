// `profiler analytic`: registers the subcommand on the profiler's CLI11 app,
// as tools/cpu_command.h does for `profiler cpu`.
#ifndef PIPECAST_TOOLS_ANALYTIC_COMMAND_H_
#define PIPECAST_TOOLS_ANALYTIC_COMMAND_H_

#include <CLI/CLI.hpp>
#include <functional>

namespace pipecast {

// Adds `analytic` and its flags to `app`. The returned function runs the
// command once app.parse() has succeeded and `analytic` was given; it returns
// the exit code (0 ok, 1 bad value or an unwritable --out).
std::function<int()> AddAnalyticCommand(CLI::App& app);

}  // namespace pipecast

#endif  // PIPECAST_TOOLS_ANALYTIC_COMMAND_H_
