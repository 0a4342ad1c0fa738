// The three steps of Simulate(): preparation (options and model into a
// checked partition, per-stage costs and the result's static fields), an
// engine (the replay of the schedule: records and per-rank totals), and
// metrics (spans, bubbles, peak memory, all-reduce, throughput, notes). The
// dataflow engine (sim/internal/engine.h) and the test-only reference engine
// (sim/internal/reference_simulator.cc) are two engines behind one
// preparation and one metrics step, so they differ only where they replay.
// Internal: only sim/ includes it. Stateless functions, safe from several
// threads. Units: ns, bytes.
#ifndef PIPECAST_SIM_INTERNAL_SIMULATE_STEPS_H_
#define PIPECAST_SIM_INTERNAL_SIMULATE_STEPS_H_

#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"

namespace pipecast::internal {

// What an engine measured on one rank, over every simulated iteration.
struct RankTotals {
  TimeNs busy_ns = 0;  // summed over all iterations
  TimeNs first_start_ns = 0;
  TimeNs last_end_ns = 0;
  Bytes peak_activations = 0;  // peak of the activation live set alone
  Bytes peak_comm = 0;         // peak of send + receive buffers alone
  Bytes peak_workspace = 0;
  Bytes peak_live = 0;  // peak of the three together
};

struct EngineTotals {
  std::vector<RankTotals> ranks;  // per rank
  // Per simulated iteration: when its last op ended. An engine may leave
  // it at 0 for a single iteration (the metrics take the span then).
  std::vector<TimeNs> iteration_end_ns;
};

// An engine. REQUIRES: the inputs passed preparation; `result` holds the
// static fields and per-rank entries. On success it has filled the records
// (ops, transfers, memory timelines when options.record_timeline) and each
// rank's peak_inflight_microbatches, and `totals`; FailedPrecondition naming
// the cycle when the schedule deadlocks.
using EngineFn = Status (*)(const Cluster& cluster, const Schedule& schedule,
                            const std::vector<StageCost>& costs, const SimOptions& options,
                            SimResult* result, EngineTotals* totals);

// The dataflow engine that Simulate() uses (sim/internal/engine.h).
Status RunDataflowEngine(const Cluster& cluster, const Schedule& schedule,
                         const std::vector<StageCost>& costs, const SimOptions& options,
                         SimResult* result, EngineTotals* totals);

// Preparation, `engine`, metrics: Simulate() with another engine. Same
// contract as Simulate().
Result<SimResult> SimulateWith(EngineFn engine, const Model& model, const Cluster& cluster,
                               const Schedule& schedule, const SimOptions& options);

}  // namespace pipecast::internal

#endif  // PIPECAST_SIM_INTERNAL_SIMULATE_STEPS_H_
