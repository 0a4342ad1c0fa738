// The last step from model.json to plan.json: the planner's choice as a
// PlanFile, with what the tools need to present it (the schedule and options
// that replay it and, when asked, one replay with its timeline recorded —
// the search itself simulates without timelines).
// Thread-safety: pure functions of their arguments.
#ifndef PIPECAST_PLANNER_CHOSEN_PLAN_H_
#define PIPECAST_PLANNER_CHOSEN_PLAN_H_

#include <optional>
#include <string>

#include "base/status.h"
#include "formats/plan.h"
#include "planner/planner.h"

namespace pipecast {

struct ChosenPlan {
  PlanFile plan;          // the candidate with the search's prediction of it
  CandidateSetup replay;  // schedule and options (record_timeline off)
  // The replay's result with its timeline, when MakeChosenPlan was asked for it.
  std::optional<SimResult> timeline;
};

// REQUIRES: chosen.result (the candidate was simulated, as RunPlanner's
// ranked candidates are). `model_hash` is ModelHash() of the model file.
// Fails when the schedule cannot be built, or, prefixed "replaying the
// chosen plan", when the replay with the timeline fails.
[[nodiscard]] Result<ChosenPlan> MakeChosenPlan(const Model& model, const std::string& model_hash,
                                                const Cluster& cluster, const Candidate& chosen,
                                                bool with_timeline);

}  // namespace pipecast

#endif  // PIPECAST_PLANNER_CHOSEN_PLAN_H_
