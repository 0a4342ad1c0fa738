// ReferenceSimulate: the event-queue engine Simulate() used before its
// dataflow replay, kept for the equivalence test (sim/simulator_equivalence_test.cc).
// Test-only: compiled into sim_test, not into pipecast_sim.
#ifndef PIPECAST_SIM_INTERNAL_REFERENCE_SIMULATOR_H_
#define PIPECAST_SIM_INTERNAL_REFERENCE_SIMULATOR_H_

#include "sim/simulator.h"

namespace pipecast::internal {

// Same contract and results as Simulate(): the same preparation and metrics
// around the old event-queue engine.
Result<SimResult> ReferenceSimulate(const Model& model, const Cluster& cluster,
                                    const Schedule& schedule, const SimOptions& options);

}  // namespace pipecast::internal

#endif  // PIPECAST_SIM_INTERNAL_REFERENCE_SIMULATOR_H_
