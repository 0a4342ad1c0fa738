// Generators of the built-in schedules beyond naive, GPipe and 1F1B. Private
// to the sim part: MakeSchedule() (schedule.cc) sizes the Schedule — ranks,
// virtual stages (chunk c of rank r is virtual stage c·p + r), micro-batches,
// stage_rank, empty action lists — and calls one of these to fill
// `actions`. Each cites its source next to its code (schedule_zoo.cc).
#ifndef PIPECAST_SIM_INTERNAL_SCHEDULE_BUILDERS_H_
#define PIPECAST_SIM_INTERNAL_SCHEDULE_BUILDERS_H_

#include "base/status.h"
#include "sim/schedule.h"

namespace pipecast::internal {

// Megatron-LM interleaved 1F1B (v = ChunksPerRank() chunks). InvalidArgument
// when m is not a multiple of p, as Megatron requires.
Status BuildInterleaved1F1B(Schedule& s);
// Zero bubble ZB-H1 and ZB-H2 (Qi et al., ICLR'24): I and W ops.
Status BuildZBH1(Schedule& s);
Status BuildZBH2(Schedule& s);
// Breadth-first looped schedule (Lamy-Poirier 2022), v chunks per rank.
Status BuildLoopedBFS(Schedule& s);

}  // namespace pipecast::internal

#endif  // PIPECAST_SIM_INTERNAL_SCHEDULE_BUILDERS_H_
