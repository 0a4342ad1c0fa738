// validator: runs a plan for real and compares it with the simulator's
// prediction (docs/validator.md). Thin by design: flags ->
// ValidatorToolOptions -> RunValidatorTool (tools/validator_tool.h) -> output
// and exit code.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "base/cli.h"
#include "base/exit_codes.h"
#include "base/flag_checks.h"
#include "base/terminal_text.h"
#include "formats/file_util.h"
#include "report/html_report.h"
#include "tools/validator_tool.h"

namespace {

constexpr double kMaxRecvTimeoutMs = 86'400'000;  // a day

int Run(const pipecast::ValidatorToolOptions& flags) {
  const pipecast::ValidatorToolResult r = pipecast::RunValidatorTool(flags);
  if (!r.error.empty()) {
    fmt::print(stderr, "validator: error: {}\n", pipecast::TerminalSafeLines(r.error));
  }
  std::fwrite(r.text.data(), 1, r.text.size(), stdout);
  return r.exit_code;
}

// The flags, in groups (docs/validator.md lists them). Each Add*Flags binds
// its group to `f`, which must outlive the parse.

// What runs: the plan, the model, the backend, the cluster and the counts.
void AddRunFlags(CLI::App& app, pipecast::ValidatorToolOptions* f) {
  pipecast::validate::ValidatorOptions& o = f->options;
  app.add_option("--plan", o.plan_path,
                 "plan.json (pipecast-plan/1), e.g. from planner --out; required, except that "
                 "--measured and --megatron-log without it summarise the run");
  app.add_option("--model", o.model_path, "the model.json the plan was made for (with --plan)");
  app.add_option("--backend", f->backend,
                 "cpu (threads), mpi (one process per stage under "
                 "mpirun) or cuda (GPUs)")
      ->check(pipecast::OneOf({"cpu", "mpi", "cuda"}))
      ->capture_default_str();
  app.add_option("--cluster", o.cluster,
                 "the cluster the prediction assumes (default: cpu/mpi the `local` preset with "
                 "the probed link; cuda the plan's cluster)");
  app.add_option("--warmup", o.runtime.warmup_iterations, "iterations run before measuring")
      ->check(pipecast::IntRange(0))
      ->capture_default_str();
  app.add_option("--iterations", o.runtime.iterations, "measured iterations; the median is shown")
      ->check(pipecast::IntRange(1))
      ->capture_default_str();
  app.add_option("--inject-fault", f->fault,
                 "test only: KIND:ACTION with KIND throw, stall, drop or oom, e.g. throw:1F2")
      ->group("Testing");
}

// How close is close enough, the memory each stage may take, and when a
// stage counts as stuck.
void AddLimitFlags(CLI::App& app, pipecast::ValidatorToolOptions* f, double* memory_gb) {
  pipecast::validate::ValidatorOptions& o = f->options;
  app.add_option("--tolerance", o.tolerances.time,
                 "relative tolerance of iteration time and throughput")
      ->check(pipecast::FiniteRange(1000, "relative error", 0, true))
      ->capture_default_str();
  app.add_option("--memory-tolerance", o.tolerances.memory,
                 "relative tolerance of per-stage peak memory")
      ->check(pipecast::FiniteRange(1000, "relative error", 0, true))
      ->capture_default_str();
  app.add_option("--bubble-tolerance", o.tolerances.bubble,
                 "absolute tolerance of the bubble ratio (0.15 = 15 points)")
      ->check(pipecast::FiniteRange(1, "bubble-ratio points", 0, true))
      ->capture_default_str();
  CLI::Option* limit_mb =
      app.add_option("--memory-limit-mb", o.memory_limit_mb,
                     "memory each stage may allocate, MiB (default: the cluster's GPU memory; 0 "
                     "= unlimited)")
          ->check(pipecast::MemorySize(pipecast::validate::kMaxMemoryLimitMb, "MiB", 1024.0 * 1024,
                                       "unlimited"));
  app.add_option("--memory-gb", *memory_gb,
                 "the same limit in GiB, as the simulator and the planner take it (0 = unlimited)")
      ->check(pipecast::MemorySize(pipecast::validate::kMaxMemoryLimitMb / 1024, "GiB",
                                   1024.0 * 1024 * 1024, "unlimited"))
      ->excludes(limit_mb);
  app.add_option("--watchdog-factor", o.runtime.watchdog_factor,
                 "an op running over this many times its predicted time (+0.5 s) is reported")
      ->check(pipecast::FiniteRange(1e6, "times", 1))
      ->capture_default_str();
  app.add_option("--recv-timeout-ms", f->recv_timeout_ms,
                 "how long a stage waits for a message, with no progress on any local rank, "
                 "before reporting it lost")
      ->check(pipecast::FiniteRange(kMaxRecvTimeoutMs, "ms", 0, true))
      ->capture_default_str();
}

// What is written: the trace, the report, JSON.
void AddOutputFlags(CLI::App& app, pipecast::ValidatorToolOptions* f) {
  app.add_option("--trace", f->trace, "write a Chrome trace: predicted and measured side by side")
      ->check(pipecast::OutputPath());
  app.add_option("--report", f->report,
                 "write an HTML report: the comparison and the predicted and measured timelines "
                 "one above the other")
      ->check(pipecast::OutputPath());
  app.add_flag("--json", f->json,
               "print one JSON object (pipecast-validation/1; with --measured "
               "pipecast-measured-run/1, or pipecast-measured-comparison/1 with --plan)");
}

// Comparing a real run instead of running the plan (docs/measured-runs.md).
void AddMeasuredFlags(CLI::App& app, pipecast::measured::MeasuredToolOptions* m) {
  app.add_option("--measured", m->traces,
                 "compare a real run instead of running the plan: PyTorch profiler (Kineto) "
                 "traces, one per pipeline rank in rank order, comma-separated (or a trace "
                 "pipecast wrote); without --plan, summarise them (docs/measured-runs.md)")
      ->delimiter(',')
      ->group("Measured runs");
  app.add_option("--megatron-log", m->megatron_log,
                 "compare a Megatron-LM training log (iteration time, TFLOP/s, memory) instead "
                 "of running the plan; without --plan, summarise it")
      ->group("Measured runs");
  app.add_option("--label", m->measure.label,
                 "with a pipecast trace: the processes to read (default: 'measured' when the "
                 "trace has them)")
      ->group("Measured runs");
  app.add_option("--skip-steps", m->measure.skip_steps,
                 "profiler steps (or logged iterations) to skip first, as warm-up")
      ->check(pipecast::IntRange(0))
      ->group("Measured runs");
  app.add_option("--megatron-rank-order", m->rank_order,
                 "how Megatron-LM numbered its ranks: tp-dp-pp (its default) or tp-pp-dp "
                 "(--use-tp-pp-dp-mapping)")
      ->check(pipecast::OneOf({"tp-dp-pp", "tp-pp-dp"}))
      ->capture_default_str()
      ->group("Measured runs");
}

}  // namespace

int main(int argc, char** argv) {
  pipecast::ValidatorToolOptions f;
  CLI::App app{
      "validator: run a plan (plan.json) for real, one worker per pipeline stage, and compare "
      "measured iteration time, bubble ratio, peak memory and throughput with the simulator's "
      "prediction.\n"
      "Example: validator --plan plan.json --model model.json --backend cpu\n"
      "         mpirun -np 2 validator --plan plan.json --model model.json --backend mpi\n"
      "Exit 3: a metric beyond tolerance."};
  double memory_gb = -1;
  AddRunFlags(app, &f);
  AddLimitFlags(app, &f, &memory_gb);
  AddOutputFlags(app, &f);
  AddMeasuredFlags(app, &f.measured);
  if (auto code = pipecast::ParseToolFlags(app, argc, argv, "validator")) return *code;
  if (memory_gb >= 0) f.options.memory_limit_mb = memory_gb * 1024;
  f.command_line = pipecast::QuoteCommandLine(std::vector<std::string>(argv, argv + argc));
  pipecast::RemoveTempFilesOnSignal();
  // A worker stuck in an op that cannot be interrupted (a GPU kernel) after
  // a failure: the diagnosis is printed and the process ends, which is the
  // only way to leave a thread that cannot be stopped (validate/runtime.h).
  f.options.runtime.on_workers_stuck = [](const pipecast::Status& st) {
    fmt::print(stderr, "validator: error: {}\n", pipecast::TerminalSafeLines(st.message()));
    std::fflush(stderr);
    std::_Exit(pipecast::kExitBadInput);
  };
  try {
    return Run(f);
  } catch (const std::bad_alloc&) {
    // Outside the stages' pools (which report their own out of memory): the
    // plan or its prediction did not fit in this process's memory.
    fmt::print(stderr,
               "validator: error: out of memory: the system refused the validator memory outside "
               "the stages' pools (std::bad_alloc); give it more memory (ulimit -v, the machine) "
               "or validate a smaller plan\n");
    return pipecast::kExitBadInput;
  }
}
