// Clock: where the validator reads time. Every op's start and end, every
// transfer and every memory change of one run is read from one Clock, so they
// share an origin (for MPI, rank 0 shifts the other ranks' records onto its
// own clock: see mpi/mpi_backend.cc).
//
// SteadyClock is the real one (std::chrono::steady_clock). FakeClock is for
// tests: time moves only when a test (or a fake op) advances it.
// Both are thread-safe. Units: ns.
#ifndef PIPECAST_VALIDATE_CLOCK_H_
#define PIPECAST_VALIDATE_CLOCK_H_

#include <atomic>

#include "base/units.h"

namespace pipecast::validate {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic; the origin is arbitrary but fixed for the clock's life.
  virtual TimeNs NowNs() const = 0;
};

class SteadyClock final : public Clock {
 public:
  TimeNs NowNs() const override;
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimeNs start_ns = 0) : now_(start_ns) {}
  TimeNs NowNs() const override { return now_.load(); }
  void Advance(TimeNs ns) { now_.fetch_add(ns); }

 private:
  std::atomic<TimeNs> now_;
};

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_CLOCK_H_
