// validator: runs a plan for real and compares it with the simulator's
// prediction (docs/validator.md). Thin by design: flags -> options ->
// RunValidation -> output and exit code.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>

#include "base/cli.h"
#include "base/exit_codes.h"
#include "base/flag_checks.h"
#include "base/terminal_text.h"
#include "formats/file_util.h"
#include "validate/validator.h"

namespace {

constexpr double kMaxRecvTimeoutMs = 86'400'000;  // a day

struct Flags {
  pipecast::validate::ValidatorOptions options;
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

int Run(Flags& f) {
  using namespace pipecast::validate;
  // In range (the flag's check): the cast to integer ns is defined.
  f.options.runtime.recv_timeout_ns = static_cast<pipecast::TimeNs>(f.recv_timeout_ms * 1e6);
  if (!f.fault.empty()) {
    pipecast::Result<Fault> fault = ParseFault(f.fault);
    if (!fault.ok()) return Fail(fault.status());
    f.options.runtime.fault = *fault;
  }
  // A worker stuck in an op that cannot be interrupted (a GPU kernel) after
  // a failure: the diagnosis is printed and the process ends, which is the
  // only way to leave a thread that cannot be stopped (runtime.h).
  f.options.runtime.on_workers_stuck = [](const pipecast::Status& st) {
    Fail(st);
    std::fflush(stderr);
    std::_Exit(pipecast::kExitBadInput);
  };
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
  app.add_option("--plan", o.plan_path, "plan.json (pipecast-plan/1), e.g. from planner --out")
      ->required();
  app.add_option("--model", o.model_path, "the model.json the plan was made for")->required();
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
  app.add_flag("--json", f.json, "print one JSON object (pipecast-validation/1)");
  app.add_option("--inject-fault", f.fault,
                 "test only: KIND:ACTION with KIND throw, stall, drop or oom, e.g. throw:1F2")
      ->group("Testing");
  if (auto code = pipecast::ParseToolFlags(app, argc, argv, "validator")) return *code;
  pipecast::RemoveTempFilesOnSignal();
  try {
    return Run(f);
  } catch (const std::bad_alloc&) {
    // Outside the stages' pools (which report their own out of memory): the
    // plan or its prediction did not fit in this process's memory.
    return Fail(pipecast::Status::FailedPrecondition(
        "out of memory: the system refused the validator memory outside the stages' pools "
        "(std::bad_alloc); give it more memory (ulimit -v, the machine) or validate a smaller "
        "plan"));
  }
}
