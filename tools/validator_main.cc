// validator: runs a plan for real and compares it with the simulator's
// prediction (docs/validator.md). Thin by design: flags -> options ->
// RunValidation -> output and exit code.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "base/cli.h"
#include "base/exit_codes.h"
#include "base/flag_checks.h"
#include "base/terminal_text.h"
#include "formats/file_util.h"
#include "measured/measured_tool.h"
#include "measured/report_html.h"
#include "validate/validator.h"

namespace {

constexpr double kMaxRecvTimeoutMs = 86'400'000;  // a day

struct Flags {
  pipecast::validate::ValidatorOptions options;
  pipecast::measured::MeasuredToolOptions measured;  // --measured, --megatron-log
  std::string backend = "cpu";
  std::string trace;
  std::string fault;
  double recv_timeout_ms = 10'000;
  bool json = false;
};

int Fail(const pipecast::Status& st) {
  fmt::print(stderr, "validator: error: {}\n", pipecast::TerminalSafeLines(st.message()));
  return pipecast::kExitBadInput;
}

// --measured / --megatron-log: real runs against the plan (docs/measured-runs.md).
int RunMeasured(Flags& f) {
  pipecast::measured::MeasuredToolOptions& m = f.measured;
  m.plan_path = f.options.plan_path;
  m.model_path = f.options.model_path;
  m.cluster = f.options.cluster;
  m.tolerances = f.options.tolerances;
  m.trace_out = f.trace;
  m.json = f.json;
  if (pipecast::Status st = m.Validate(); !st.ok()) {
    fmt::print(stderr, "validator: error: {}\nRun with --help for more information.\n",
               st.message());
    return pipecast::kExitUsage;
  }
  pipecast::Result<pipecast::measured::MeasuredToolResult> r = RunMeasuredTool(m);
  if (!r.ok()) return Fail(r.status());
  std::fwrite(r->text.data(), 1, r->text.size(), stdout);
  return r->within_tolerance ? pipecast::kExitOk : pipecast::kExitCheckFailed;
}

int Run(Flags& f) {
  using namespace pipecast::validate;
  if (!f.measured.traces.empty() || !f.measured.megatron_log.empty()) return RunMeasured(f);
  for (const char* flag : {"--plan", "--model"}) {
    if ((flag[2] == 'p' ? f.options.plan_path : f.options.model_path).empty()) {
      fmt::print(stderr,
                 "validator: error: {} is required\nRun with --help for more information.\n", flag);
      return pipecast::kExitUsage;
    }
  }
  // In range (the flag's check): the cast to integer ns is defined.
  f.options.runtime.recv_timeout_ns = static_cast<pipecast::TimeNs>(f.recv_timeout_ms * 1e6);
  if (!f.fault.empty()) {
    pipecast::Result<Fault> fault = ParseFault(f.fault);
    if (!fault.ok()) return Fail(fault.status());
    f.options.runtime.fault = *fault;
  }
  std::unique_ptr<Backend> backend;
  if (f.backend == "cpu") {
    backend = MakeCpuBackend();
  } else {
    pipecast::Result<std::unique_ptr<Backend>> made =
        f.backend == "mpi" ? MakeMpiBackend(nullptr, nullptr) : MakeCudaBackend(0);
    if (!made.ok()) return Fail(made.status());
    backend = std::move(*made);
  }
  // Before the run, which may take minutes: a trace the root cannot write is
  // found now, not after; every process learns it and exits alike.
  if (!f.trace.empty()) {
    pipecast::Status writable = backend->Agree(
        backend->is_root()
            ? pipecast::CheckOutputs({{"--trace", f.trace}}, {{"--plan", f.options.plan_path},
                                                              {"--model", f.options.model_path}})
            : pipecast::Status::Ok());
    if (!writable.ok()) return backend->is_root() ? Fail(writable) : pipecast::kExitBadInput;
  }
  if (!f.measured.report_out.empty()) {
    pipecast::Status writable = backend->Agree(
        backend->is_root() ? pipecast::CheckOutputs({{"--report", f.measured.report_out}},
                                                    {{"--plan", f.options.plan_path},
                                                     {"--model", f.options.model_path}})
                           : pipecast::Status::Ok());
    if (!writable.ok()) return backend->is_root() ? Fail(writable) : pipecast::kExitBadInput;
  }
  pipecast::Result<ValidationResult> result = RunValidation(f.options, backend.get());
  pipecast::Status agreed = backend->Agree(result.ok() ? pipecast::Status::Ok() : result.status());
  if (!backend->is_root()) return agreed.ok() ? pipecast::kExitOk : pipecast::kExitBadInput;
  if (!result.ok()) return Fail(result.status());
  if (!f.trace.empty()) {
    const ValidationResult& r = *result;
    pipecast::Status st = pipecast::WriteFileAtomic(
        f.trace, SideBySideTrace(r.predicted,
                                 MeasuredTimeline(r.exec, r.runs, r.comparison.median_iteration)));
    if (!st.ok()) return Fail(st.WithPrefix("--trace"));
  }
  if (!f.measured.report_out.empty()) {
    pipecast::Status st = pipecast::WriteFileAtomic(
        f.measured.report_out,
        pipecast::measured::ValidationReportHtml(*result, f.measured.command_line));
    if (!st.ok()) return Fail(st.WithPrefix("--report"));
  }
  const std::string text = f.json ? ValidationJson(*result) : ValidationText(*result);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return result->comparison.within_tolerance ? pipecast::kExitOk : pipecast::kExitCheckFailed;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  pipecast::validate::ValidatorOptions& o = f.options;
  CLI::App app{
      "validator: run a plan (plan.json) for real, one worker per pipeline stage, and compare "
      "measured iteration time, bubble ratio, peak memory and throughput with the simulator's "
      "prediction.\n"
      "Example: validator --plan plan.json --model model.json --backend cpu\n"
      "         mpirun -np 2 validator --plan plan.json --model model.json --backend mpi\n"
      "Exit codes: 0 within tolerance, 1 failure (bad input, a fault during the run), 2 usage, "
      "3 a metric beyond tolerance."};
  app.add_option("--plan", o.plan_path,
                 "plan.json (pipecast-plan/1), e.g. from planner --out; required, except that "
                 "--measured and --megatron-log without it summarise the run");
  app.add_option("--model", o.model_path, "the model.json the plan was made for (with --plan)");
  app.add_option("--backend", f.backend,
                 "cpu (threads), mpi (one process per stage under "
                 "mpirun) or cuda (GPUs)")
      ->check(pipecast::OneOf({"cpu", "mpi", "cuda"}))
      ->capture_default_str();
  app.add_option("--cluster", o.cluster,
                 "the cluster the prediction assumes (default: cpu/mpi the `local` preset with "
                 "the probed link; cuda the plan's cluster)");
  app.add_option("--warmup", o.runtime.warmup_iterations, "iterations run before measuring")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--iterations", o.runtime.iterations, "measured iterations; the median is shown")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
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
  app.add_option("--memory-limit-mb", o.memory_limit_mb,
                 "memory each stage may allocate, MiB (default: the cluster's GPU memory; 0 = "
                 "unlimited)")
      ->check(pipecast::FiniteRange(pipecast::validate::kMaxMemoryLimitMb, "MiB"));
  app.add_option("--watchdog-factor", o.runtime.watchdog_factor,
                 "an op running over this many times its predicted time (+0.5 s) is reported")
      ->check(pipecast::FiniteRange(1e6, "times", 1))
      ->capture_default_str();
  app.add_option("--recv-timeout-ms", f.recv_timeout_ms,
                 "how long a stage waits for a message, with no progress on any local rank, "
                 "before reporting it lost")
      ->check(pipecast::FiniteRange(kMaxRecvTimeoutMs, "ms", 0, true))
      ->capture_default_str();
  app.add_option("--trace", f.trace, "write a Chrome trace: predicted and measured side by side")
      ->check(pipecast::OutputPath());
  app.add_option("--report", f.measured.report_out,
                 "write an HTML report: the comparison and the predicted and measured timelines "
                 "one above the other")
      ->check(pipecast::OutputPath());
  app.add_flag("--json", f.json, "print one JSON object (pipecast-validation/1)");
  pipecast::measured::MeasuredToolOptions& m = f.measured;
  app.add_option("--measured", m.traces,
                 "compare a real run instead of running the plan: PyTorch profiler (Kineto) "
                 "traces, one per pipeline rank in rank order, comma-separated (or a trace "
                 "pipecast wrote); without --plan, summarise them (docs/measured-runs.md)")
      ->delimiter(',')
      ->group("Measured runs");
  app.add_option("--megatron-log", m.megatron_log,
                 "compare a Megatron-LM training log (iteration time, TFLOP/s, memory) instead "
                 "of running the plan; without --plan, summarise it")
      ->group("Measured runs");
  app.add_option("--label", m.measure.label,
                 "with a pipecast trace: the processes to read (default: 'measured' when the "
                 "trace has them)")
      ->group("Measured runs");
  app.add_option("--skip-steps", m.measure.skip_steps,
                 "profiler steps (or logged iterations) to skip first, as warm-up")
      ->check(CLI::NonNegativeNumber)
      ->group("Measured runs");
  app.add_option("--megatron-rank-order", m.rank_order,
                 "how Megatron-LM numbered its ranks: tp-dp-pp (its default) or tp-pp-dp "
                 "(--use-tp-pp-dp-mapping)")
      ->check(pipecast::OneOf({"tp-dp-pp", "tp-pp-dp"}))
      ->capture_default_str()
      ->group("Measured runs");
  app.add_option("--inject-fault", f.fault,
                 "test only: KIND:ACTION with KIND throw, stall, drop or oom, e.g. throw:1F2")
      ->group("Testing");
  if (auto code = pipecast::ParseToolFlags(app, argc, argv, "validator")) return *code;
  std::vector<std::string> args(argv, argv + argc);
  m.command_line = pipecast::QuoteCommandLine(args);
  pipecast::RemoveTempFilesOnSignal();
  return Run(f);
}
