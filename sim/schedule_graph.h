// The op dependency graph of a schedule, and the search for a cycle in it:
// how the simulator names the ops of a schedule that can never finish.
//
// Nodes are the schedule's actions. An edge X -> Y means Y cannot start
// before X ends: the next action on the same rank (stream order), or a data
// dependency along the micro-batch's path (Schedule::IsFirstStage,
// IsLastStage) — F(s-1,m) -> F(s,m), B/I(s+1,m) -> B/I(s,m),
// F(s,m) -> B/I(s,m), I(s,m) -> W(s,m); and into the forward half of an
// overlapped pair, its backward half's inputs. A schedule finishes exactly
// when this graph is acyclic.
#ifndef PIPECAST_SIM_SCHEDULE_GRAPH_H_
#define PIPECAST_SIM_SCHEDULE_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/schedule.h"

namespace pipecast {

struct DependencyEdge {
  Action from;
  int from_rank = 0;
  Action to;
  int to_rank = 0;
  bool stream_order = false;  // true: same rank, list order; false: data
};

// A cycle of dependencies, in order (each edge's `to` is the next `from`),
// or empty when the schedule can finish.
// REQUIRES: ValidateSchedule(schedule).ok().
std::vector<DependencyEdge> FindDependencyCycle(const Schedule& schedule);

// "1F1 (rank 1) waits for 0F1 (rank 0), which runs after 0B0 on rank 0, ..."
std::string DescribeCycle(const std::vector<DependencyEdge>& cycle);

// The one diagnosis of a schedule that can never finish, as both engines
// report it: FailedPrecondition naming where each rank is stuck (`next[r]`,
// the index of the first op rank r has not completed; ranks whose lists are
// done are left out), then the cycle of dependencies that holds them, and
// what to do.
// REQUIRES: next.size() == schedule.num_ranks; ValidateSchedule(schedule).ok().
Status NeverFinishes(const Schedule& schedule, const std::vector<int64_t>& next);

}  // namespace pipecast

#endif  // PIPECAST_SIM_SCHEDULE_GRAPH_H_
