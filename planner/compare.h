// --compare-to: how much faster the planner expects its choice to be than a
// configuration the user names — a published run's, or what a framework runs
// by default — where that configuration is in the search space
// (docs/planner.md, "Against a given configuration").
//
// The configuration is given as words (the words Candidate::Label writes, so a
// label the planner printed can be pasted back) or as a plan.json. It is
// searched alone, through the same passes as the search (enumerate,
// partition, prune, simulate, rank), with every field it names pinned; a field
// it does not name is searched as usual, so `zero=3` compares with the best
// FSDP plan the search finds.
#ifndef PIPECAST_PLANNER_COMPARE_H_
#define PIPECAST_PLANNER_COMPARE_H_

#include <string>

#include "base/status.h"
#include "formats/plan.h"
#include "planner/planner.h"

namespace pipecast {

// `base` with the fields `words` names pinned. Words, separated by spaces:
// t=N, sp (sequence parallelism on; sp=off pins it off), p=N, d=N, v=N,
// mbs=N, m=N, a schedule's name or schedule=NAME, recompute=SPEC (off,
// selective, full, op, every:K), zero=N, partition=balanced|even,
// reshard=on|off, prefetch=on|off, reduce=once|every, shard-group=N.
// InvalidArgument naming --compare-to and the word otherwise.
[[nodiscard]] Result<PlannerOptions> PinConfiguration(const PlannerOptions& base,
                                                      const std::string& words);

// `base` pinned to the configuration of `plan` (its t, sp, p, d, v, size, m,
// schedule, recomputation, ZeRO level, sharding and partition rule).
PlannerOptions PinPlan(const PlannerOptions& base, const PlanFile& plan);

// Searches `pinned` and compares its best with `report`'s choice (ranked[0]).
// The comparison's `compared` is empty, with `why_not`, when nothing of the
// pinned search runs. REQUIRES: report.Feasible().
[[nodiscard]] Result<ConfigurationComparison> CompareWithChoice(const Model& model,
                                                                const Cluster& cluster,
                                                                const PlannerOptions& pinned,
                                                                const PlanReport& report,
                                                                std::string given);

}  // namespace pipecast

#endif  // PIPECAST_PLANNER_COMPARE_H_
