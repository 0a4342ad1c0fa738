// profiler: writes a model.json with the per-layer costs of a model.
//   profiler analytic ...  estimate a GPT-style transformer from its shape (flags or a
//                          HuggingFace config.json) and a GPU preset
//   profiler cupti ...     measure an unmodified CUDA program on an NVIDIA GPU
//   profiler builtin ...   measure pipecast's own CUDA transformer block
//   profiler cpu ...       measure the built-in CPU workload layer by layer
//   profiler trace ...     per-layer costs from PyTorch profiler traces of a real run
// Thin by design: each subcommand's flags and run are in the tools library
// (tools/analytic_command.h, tools/cupti_commands.h, tools/cpu_command.h,
// tools/trace_command.h);
// this file picks the one parsed and returns its exit code.
#include <CLI/CLI.hpp>
#include <functional>

#include "base/cli.h"
#include "base/exit_codes.h"
#include "formats/file_util.h"
#include "tools/analytic_command.h"
#include "tools/cpu_command.h"
#include "tools/cupti_commands.h"
#include "tools/trace_command.h"

int main(int argc, char** argv) {
  CLI::App app{
      "profiler: write a model.json (pipecast-model/1) with the per-layer time and memory of a "
      "model.\nExample: profiler analytic --name gpt-7b --layers 32 --hidden 4096 --heads 32 "
      "--seq 2048 --vocab 50257 --gpu h100-sxm --out gpt-7b.json"};
  app.require_subcommand(1);
  const std::function<int()> run_analytic = pipecast::AddAnalyticCommand(app);
  pipecast::CuptiCommands cupti_commands(app);  // cupti, builtin
  const std::function<int()> run_cpu = pipecast::AddCpuCommand(app);
  const std::function<int()> run_trace = pipecast::AddTraceCommand(app);
  if (auto code = pipecast::ParseToolFlags(app, argc, argv, "profiler")) return *code;
  pipecast::RemoveTempFilesOnSignal();
  if (app.got_subcommand("analytic")) return run_analytic();
  if (const int code = cupti_commands.RunIfParsed(); code >= 0) return code;
  if (app.got_subcommand("cpu")) return run_cpu();
  if (app.got_subcommand("trace")) return run_trace();
  return pipecast::kExitUsage;  // unreachable: require_subcommand(1) and every one is handled
}
