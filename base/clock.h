// Clock: where pipecast reads measured time. The validator reads every op's
// start and end, every transfer and every memory change of one run from one
// Clock, so they share an origin (for MPI, rank 0 shifts the other ranks'
// records onto its own clock: validate/mpi/mpi_backend.cc); the CPU profiler
// times each layer with one.
//
// SteadyClock is the real one (std::chrono::steady_clock). FakeClock is for
// tests: time moves only when a test (or a fake op) advances it. Both are
// thread-safe. Units: ns.
#ifndef PIPECAST_BASE_CLOCK_H_
#define PIPECAST_BASE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <string>

#include "base/units.h"

namespace pipecast {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic; the origin is arbitrary but fixed for the clock's life.
  virtual TimeNs NowNs() const = 0;
  // What the clock is, as written into a profile's `source` ("steady_clock").
  virtual std::string Name() const = 0;
};

class SteadyClock final : public Clock {
 public:
  TimeNs NowNs() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  std::string Name() const override { return "steady_clock"; }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimeNs start_ns = 0) : now_(start_ns) {}
  TimeNs NowNs() const override { return now_.load(); }
  std::string Name() const override { return "fake"; }
  void Advance(TimeNs ns) { now_.fetch_add(ns); }

 private:
  std::atomic<TimeNs> now_;
};

}  // namespace pipecast

#endif  // PIPECAST_BASE_CLOCK_H_
