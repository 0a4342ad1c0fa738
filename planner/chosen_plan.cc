#include "planner/chosen_plan.h"

#include <utility>

namespace pipecast {

Result<ChosenPlan> MakeChosenPlan(const Model& model, const std::string& model_hash,
                                  const Cluster& cluster, const Candidate& chosen,
                                  bool with_timeline) {
  PIPECAST_ASSIGN_OR_RETURN(auto setup,
                            SetUpCandidate(model, cluster, chosen, /*record_timeline=*/false));
  ChosenPlan c;
  c.replay = std::move(setup);
  c.plan = MakePlanFile(model.name, model_hash, cluster, c.replay.schedule, c.replay.options,
                        *chosen.result);
  if (with_timeline) {
    SimOptions sim = c.replay.options;
    sim.record_timeline = true;
    sim.critical_path = true;  // the report and the trace draw it
    auto replay = Simulate(model, cluster, c.replay.schedule, sim);
    if (!replay.ok()) return replay.status().WithPrefix("replaying the chosen plan");
    c.timeline = std::move(replay.value());
  }
  return c;
}

}  // namespace pipecast
