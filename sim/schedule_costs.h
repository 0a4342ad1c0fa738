// ScheduleCostsFor: the ScheduleCosts of one configuration (sim/schedule.h), what the
// cost-driven schedules (zb-auto, zb-v-auto) order their ops by, taken from the stage cost model
// the simulator then times them with (sim/stage_costs.h), so that the generator and the
// simulation agree on every op's time and on what the input gradient frees.
//
// Plain functions of their arguments; thread-safe.
#ifndef PIPECAST_SIM_SCHEDULE_COSTS_H_
#define PIPECAST_SIM_SCHEDULE_COSTS_H_

#include "base/status.h"
#include "base/units.h"
#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"

namespace pipecast {

// Each virtual stage of options.partition costed at options' micro-batch size, recomputation
// and tensor parallelism: F, I (the backward less its W part) and W; kept_after_input the
// stage's weight_grad_bytes over what its forward holds (1 when the model does not give them, or
// above 1); comm_ns the slowest point-to-point hop between neighbouring stages on different
// ranks of `kind`'s placement (latency + output bytes / bandwidth), and memory_limit as given.
// REQUIRES: options.partition holds ranks x chunks stages of the model's layers.
// InvalidArgument when it does not, or when the model lacks what the stage costs need (as
// Simulate says).
[[nodiscard]] Result<ScheduleCosts> ScheduleCostsFor(const Model& model, const Cluster& cluster,
                                                     const SimOptions& options, ScheduleKind kind,
                                                     int ranks, int chunks, double memory_limit);

// The activation bytes one micro-batch keeps on the rank that holds most (the sum of its
// virtual stages' held bytes): what --memory-limit in bytes is divided by to count micro-batch
// activations. Same REQUIRES and errors as ScheduleCostsFor.
[[nodiscard]] Result<Bytes> LargestRankActivationBytes(const Model& model, const Cluster& cluster,
                                                       const SimOptions& options, ScheduleKind kind,
                                                       int ranks, int chunks);

}  // namespace pipecast

#endif  // PIPECAST_SIM_SCHEDULE_COSTS_H_
