#include "validate/work.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <ctime>

namespace pipecast::validate {
namespace {

// Calibration spins this long (thread CPU time) per round and keeps the
// fastest of kCalibrationRounds rounds (cache or frequency warm-up only ever
// makes a round look slower).
constexpr TimeNs kCalibrationNs = 10'000'000;  // 10 ms
constexpr int kCalibrationRounds = 3;
// Units between looks at the abort flag: small enough to stop within
// ~0.1 ms, large enough that the look costs nothing.
constexpr int64_t kUnitsPerSlice = 1 << 14;

volatile uint64_t g_sink = 0;  // keeps the spin's result alive

}  // namespace

uint64_t SpinUnits(uint64_t state, int64_t units) {
  for (int64_t i = 0; i < units; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;  // Knuth's LCG
  }
  return state;
}

namespace {
TimeNs ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return TimeNs{ts.tv_sec} * kNsPerS + ts.tv_nsec;
}
}  // namespace

BusyWork::BusyWork() {
  double best = 0;
  for (int round = 0; round < kCalibrationRounds; ++round) {
    const TimeNs start = ThreadCpuNs();
    int64_t units = 0;
    uint64_t state = 1;
    while (ThreadCpuNs() - start < kCalibrationNs) {
      state = SpinUnits(state, kUnitsPerSlice);
      units += kUnitsPerSlice;
    }
    g_sink = state;
    const TimeNs took = ThreadCpuNs() - start;
    best = std::max(best, static_cast<double>(units) / static_cast<double>(took));
  }
  units_per_ns_ = best;
}

BusyWork::BusyWork(double units_per_ns) : units_per_ns_(units_per_ns) {}

Status BusyWork::Run(const OpCall& call) {
  int64_t left = static_cast<int64_t>(static_cast<double>(call.predicted_ns) * units_per_ns_);
  uint64_t state = 1;
  for (const std::byte b : call.input.first(std::min<size_t>(call.input.size(), 64))) {
    state += static_cast<uint64_t>(b);
  }
  while (left > 0) {
    if (call.abort != nullptr && call.abort->load(std::memory_order_relaxed)) {
      return Status::FailedPrecondition("aborted");
    }
    const int64_t n = std::min(left, kUnitsPerSlice);
    state = SpinUnits(state, n);
    left -= n;
  }
  g_sink = state;
  // Something of the result travels on, so the copy is of computed bytes.
  if (!call.output.empty()) {
    std::memcpy(call.output.data(), &state, std::min(call.output.size(), sizeof(state)));
  }
  return Status::Ok();
}

std::string BusyWork::Description() const {
  return fmt::format(
      "ops are busy-work of the profiled durations, not real layers (calibrated at {:.3f} "
      "work units per ns of CPU time)",
      units_per_ns_);
}

}  // namespace pipecast::validate
