// `profiler trace`: flags -> TraceProfileOptions -> TraceProfileModel -> model.json.
#include "tools/trace_command.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>

#include "base/cli.h"
#include "base/exit_codes.h"
#include "base/terminal_text.h"
#include "formats/file_util.h"
#include "formats/formats.h"
#include "measured/trace_profile.h"

namespace pipecast {

std::function<int()> AddTraceCommand(CLI::App& app) {
  struct Flags {
    measured::TraceProfileOptions options;
    std::string out;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "trace",
      "per-layer costs measured from PyTorch profiler (Kineto) traces of a run you already have, "
      "its layers marked with record_function(\"pipecast:<layer>:forward\") ranges "
      "(docs/measured-runs.md)");
  cmd->add_option("traces", f->options.traces, "trace files (JSON), one per process")->required();
  cmd->add_option("--name", f->options.name, "the model's name")->required();
  cmd->add_option("--microbatch-sizes", f->options.microbatch_sizes,
                  "the micro-batch size each trace ran: one for all, or one per trace")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--warmup", f->options.aggregate.warmup, "profiler steps skipped first")
      ->capture_default_str();
  cmd->add_option("--iterations", f->options.aggregate.iterations,
                  "profiler steps aggregated after them (median)")
      ->capture_default_str();
  cmd->add_option("--out", f->out, "write model.json here (default: stdout)")->check(OutputPath());
  return [cmd, f]() -> int {
    if (!cmd->parsed()) return kExitUsage;
    if (!f->out.empty()) {
      std::vector<NamedPath> inputs;
      for (const std::string& t : f->options.traces) inputs.push_back({"trace", t});
      if (Status st = CheckOutputs({{"--out", f->out}}, inputs); !st.ok()) {
        fmt::print(stderr, "profiler: error: {}\n", TerminalSafeLines(st.message()));
        return kExitBadInput;
      }
    }
    Result<Model> model = measured::TraceProfileModel(f->options);
    if (!model.ok()) {
      fmt::print(stderr, "profiler: error: {}\n", TerminalSafeLines(model.status().message()));
      return kExitBadInput;
    }
    const std::string text = ModelToJson(*model);
    if (f->out.empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      return kExitOk;
    }
    if (Status st = WriteFileAtomic(f->out, text); !st.ok()) {
      fmt::print(stderr, "profiler: error: {}\n", st.WithPrefix("--out").message());
      return kExitBadInput;
    }
    fmt::print(stderr, "profiler: wrote {}: {}, {} layers measured from {} trace{}\n", f->out,
               model->name, model->layers.size(), f->options.traces.size(),
               f->options.traces.size() == 1 ? "" : "s");
    return kExitOk;
  };
}

}  // namespace pipecast
