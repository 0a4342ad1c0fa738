// `profiler cpu`: registers the subcommand on the profiler's CLI11 app.
// Kept apart from profiler_main.cc so that each measurement method adds its
// subcommand with two lines there.
#ifndef PIPECAST_TOOLS_CPU_COMMAND_H_
#define PIPECAST_TOOLS_CPU_COMMAND_H_

#include <CLI/CLI.hpp>
#include <functional>

namespace pipecast {

// Adds `cpu` and its flags to `app`. The returned function runs the command
// once app.parse() has succeeded and `cpu` was given; it returns the exit
// code (0 ok, 1 bad value or failure). Usage errors (unknown flag, a value of
// the wrong type) are CLI11's and exit 2 through the caller's parse.
std::function<int()> AddCpuCommand(CLI::App& app);

}  // namespace pipecast

#endif  // PIPECAST_TOOLS_CPU_COMMAND_H_
