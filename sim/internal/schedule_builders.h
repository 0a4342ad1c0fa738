// Generators of the built-in schedules, one per ScheduleKind that has one. Private to the sim
// part: each kind's row in the traits table (schedule_traits.cc) points at its generator.
// MakeSchedule() (schedule.cc) checks the shape with CheckShape(), sizes the Schedule — ranks,
// virtual stages (chunk c of rank r is virtual stage c·p + r), micro-batches, stage_rank, empty
// action lists — and calls the generator to fill `actions`. Each cites its source next to its
// code (schedule_zoo.cc).
//
// REQUIRES (every generator): CheckShape() accepted the kind with s's ranks, micro-batches and
// chunks; the generators do not check again.
#ifndef PIPECAST_SIM_INTERNAL_SCHEDULE_BUILDERS_H_
#define PIPECAST_SIM_INTERNAL_SCHEDULE_BUILDERS_H_

#include "sim/schedule.h"

namespace pipecast::internal {

// Naive model parallelism: one micro-batch at a time through the pipeline.
void BuildNaive(Schedule& s);
// GPipe: all forwards, then all backwards.
void BuildGPipe(Schedule& s);
// 1F1B with flush (PipeDream-Flush, Megatron-LM without interleaving).
void Build1F1B(Schedule& s);
// PipeDream asynchronous 1F1B: sets s.iterations and s.flush and numbers micro-batches across
// the iterations.
void BuildPipeDream(Schedule& s);
// Interleaved 1F1B (v = ChunksPerRank() chunks) in PyTorch's order, any m >= 1
// (schedule_zoo_interleaved.cc).
void BuildInterleaved1F1B(Schedule& s);
// PyTorch's ScheduleInterleavedZeroBubble: interleaved with I and W ops, any m >= 1.
void BuildInterleavedZB(Schedule& s);
// Zero bubble ZB-H1 and ZB-H2 (Qi et al., ICLR'24): I and W ops; m >= p.
void BuildZBH1(Schedule& s);
void BuildZBH2(Schedule& s);
// Breadth-first looped schedule (Lamy-Poirier 2022), v chunks per rank; m >= p.
void BuildLoopedBFS(Schedule& s);
// The V family of Qi et al. 2024 (schedule_zoo_v.cc), two chunks per rank in a V (rank r holds
// virtual stages r and 2p-1-r), I and W ops, any m >= 1: ZB-V, V-Half and V-Min.
void BuildZBV(Schedule& s);
void BuildVHalf(Schedule& s);
void BuildVMin(Schedule& s);
// DualPipeV (deepseek-ai/DualPipe dualpipev.py): V placement (2 chunks), m >= 2p, overlapped
// F&B pairs and zero-bubble I/W ops (schedule_zoo_dualpipe.cc).
void BuildDualPipeV(Schedule& s);
// Cost-driven zero bubble under a memory limit (ScheduleCosts): zb-auto (schedule_zoo_auto.cc,
// sail-sg zb.py's heuristic, one chunk) and zb-v-auto (ZB-V's greedy with these costs,
// schedule_zoo_v.cc). REQUIRES: costs sized to the virtual stages, memory_limit >= 1.
// zb-auto: Internal if its order overruns the limit (never seen); zb-v-auto: InvalidArgument
// naming --memory-limit when ZB-V's greedy cannot keep within it.
Status BuildZBAutoFromCosts(Schedule& s, const ScheduleCosts& costs);
Status BuildZBVAutoFromCosts(Schedule& s, const ScheduleCosts& costs);
// The cost-driven kinds' `generate` (their order from the shape alone): every op 1 ms, free
// communication, the kind's default memory limit (schedule.cc).
void BuildFromDefaultCosts(Schedule& s, ScheduleKind kind);
inline void BuildZBAuto(Schedule& s) { BuildFromDefaultCosts(s, ScheduleKind::kZBAuto); }
inline void BuildZBVAuto(Schedule& s) { BuildFromDefaultCosts(s, ScheduleKind::kZBVAuto); }
// DualPipe (deepseek-ai/DualPipe dualpipe.py): bidirectional, 2p virtual stages in the V
// placement, p even, m even and >= 2p, overlapped F&B pairs.
void BuildDualPipe(Schedule& s);

}  // namespace pipecast::internal

#endif  // PIPECAST_SIM_INTERNAL_SCHEDULE_BUILDERS_H_
