// OpWork: what an op of the plan does while the validator runs it.
//
// BusyWork runs calibrated arithmetic for the op's profiled duration: once, at
// construction, it measures how many work units the CPU does per ns of the
// calibrating thread's CPU time (CLOCK_THREAD_CPUTIME_ID, so a preempted
// calibration still finds the core's true rate); each op then does a fixed
// number of units (duration x rate), so an op that is preempted or shares its
// core takes longer in wall-clock time, as real work would. It is what the validator runs for
// models that were not measured by `profiler cpu` (their layers cannot run here), and it says so in
// its output. The layer workload (ops that run the profiler's CPU layers) is a second
// implementation.
//
// Run may be called from several threads at once. Units: ns.
#ifndef PIPECAST_VALIDATE_WORK_H_
#define PIPECAST_VALIDATE_WORK_H_

#include <atomic>
#include <cstddef>
#include <span>
#include <string>

#include "base/clock.h"
#include "base/status.h"
#include "base/units.h"
#include "sim/schedule.h"
#include "validate/memory_pool.h"
#include "validate/tensor_group.h"

namespace pipecast::validate {

struct OpCall {
  int rank = 0;
  Action action;
  TimeNs predicted_ns = 0;                   // the op's profiled (simulated) duration
  std::span<const std::byte> input;          // received activation or gradient; may be empty
  std::span<std::byte> output;               // what the op sends on; may be empty
  MemoryPool* pool = nullptr;                // the stage's, for work that charges its own memory
  const std::atomic<bool>* abort = nullptr;  // stop early when it becomes true
  // Tensor parallelism: this worker's tensor rank and its rank's group (null
  // at t = 1); work that all-reduces adds the time its all-reduces took to
  // *collective_ns (may be null).
  int tensor_rank = 0;
  TensorGroup* tensor_group = nullptr;
  // Expert parallelism: this worker's expert rank and its rank's group (null
  // at ep = 1), whose all-to-alls work that runs MoE layers times into
  // *collective_ns likewise.
  int expert_rank = 0;
  TensorGroup* expert_group = nullptr;
  TimeNs* collective_ns = nullptr;
};

class OpWork {
 public:
  virtual ~OpWork() = default;
  // Does the op. FailedPrecondition "aborted" when *call.abort became true
  // first; other errors name the op.
  virtual Status Run(const OpCall& call) = 0;
  // True when Run allocates the op's activations itself and charges them to
  // call.pool; the runtime then allocates none for it.
  virtual bool ManagesActivations() const { return false; }
  // One line for the report: what the ops are.
  virtual std::string Description() const = 0;
};

class BusyWork final : public OpWork {
 public:
  // Calibrates (about kCalibrationRounds x kCalibrationNs of spinning).
  BusyWork();
  // A given rate (work units per ns), for tests.
  explicit BusyWork(double units_per_ns);

  Status Run(const OpCall& call) override;
  std::string Description() const override;
  double units_per_ns() const { return units_per_ns_; }

 private:
  double units_per_ns_ = 0;
};

// One unit of busy work on `state` (a few dependent multiply-adds the
// compiler cannot remove). Exposed for the calibration test.
uint64_t SpinUnits(uint64_t state, int64_t units);

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_WORK_H_
