// The `profiler cupti` and `profiler builtin` subcommands: flags to options,
// one library call (profiler/cupti_profile.h), status to exit code. Kept
// apart from profiler_main.cc so the CUPTI part and the other subcommands
// change independently.
#ifndef PIPECAST_TOOLS_CUPTI_COMMANDS_H_
#define PIPECAST_TOOLS_CUPTI_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <string>

#include "profiler/cupti_profile.h"

namespace pipecast {

class CuptiCommands {
 public:
  // Registers both subcommands on `app`; `app` must outlive this object.
  explicit CuptiCommands(CLI::App& app);
  // The exit code of the subcommand that was parsed, or -1 when neither was.
  int RunIfParsed();

 private:
  int RunCupti();
  int RunBuiltin();

  CLI::App* cupti_ = nullptr;
  CLI::App* builtin_ = nullptr;
  CuptiCommandOptions cupti_options_;
  BuiltinOptions builtin_options_;
  std::string cupti_out_;
  std::string builtin_out_;
};

}  // namespace pipecast

#endif  // PIPECAST_TOOLS_CUPTI_COMMANDS_H_
