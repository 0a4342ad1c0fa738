// Pass 3, prune: a lower bound on each candidate's iteration time, so the
// simulate pass can visit the promising ones first and stop early.
#include <algorithm>

#include "planner/passes.h"
#include "sim/schedule_traits.h"
#include "sim/stage_costs.h"

namespace pipecast::passes {

namespace {

// A lower bound on the pipeline time of `c` with free communication.
// Every rank must do its m micro-batches of work after the forwards of
// micro-batch 0 on the virtual stages before its first one. With whole
// backwards and one chunk per rank, the backwards of the last micro-batch
// on the stages before it must follow as well (the flush).
TimeNs LowerBound(const StageCostTable& table, const Candidate& c) {
  const int stages = c.VirtualStages();
  const int p = c.config.layout.pipeline_stages;
  const ScheduleKind schedule = c.config.schedule;
  // The stages' times by the simulator's cost model (sim/stage_costs.h):
  // with recomputation the backward includes the rerun forward.
  std::vector<TimeNs> fwd(stages, 0), bwd(stages, 0);
  for (int s = 0; s < stages; ++s) {
    const StageCost sc = table.Stage(c.partition[s]);
    fwd[s] = sc.forward_ns;
    bwd[s] = sc.backward_ns;
  }
  const TimeNs m = c.config.microbatches;
  if (TraitsOf(schedule).bidirectional) {
    // Each copy runs half the micro-batches: rank k does m/2 of its two chunks' work, after the
    // forwards that reach it from the nearer end.
    std::vector<TimeNs> pair(p, 0);
    for (int s = 0; s < stages; ++s) {
      pair[StageRank(Placement::kV, s, p)] += fwd[s] + bwd[s];
    }
    TimeNs best = 0, fill_a = 0;
    for (int k = 0; k < p; ++k) {
      TimeNs fill_b = 0;
      for (int s = p; s < 2 * p - 1 - k; ++s) fill_b += fwd[s];
      best = std::max(best, std::min(fill_a, fill_b) + m / 2 * pair[k]);
      fill_a += fwd[k];
    }
    return best;
  }
  if (schedule == ScheduleKind::kNaive) {
    TimeNs sum = 0;
    for (int s = 0; s < stages; ++s) sum += fwd[s] + bwd[s];
    return m * sum;
  }
  std::vector<TimeNs> work(p, 0);
  for (int s = 0; s < stages; ++s) work[s % p] += fwd[s] + bwd[s];
  if (schedule == ScheduleKind::kPipeDream) {  // steady state: no fill, no flush
    return m * *std::max_element(work.begin(), work.end());
  }
  const bool with_tail = c.config.layout.chunks == 1 && !SplitsBackward(schedule) &&
                         schedule != ScheduleKind::kPipeDream;
  TimeNs best = 0, fill = 0, tail = 0;
  for (int k = 0; k < p; ++k) {
    best = std::max(best, fill + m * work[k] + (with_tail ? tail : 0));
    fill += fwd[k];
    tail += bwd[k];
  }
  return best;
}

}  // namespace

void Prune(const Model& model, const Cluster& cluster, std::vector<Candidate>* candidates,
           PartitionCache* cache) {
  PartitionCache own(model, cluster);
  if (cache == nullptr) cache = &own;
  for (Candidate& c : *candidates) {
    c.lower_bound_ns = LowerBound(cache->Table(c), c);
  }
  std::stable_sort(candidates->begin(), candidates->end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.lower_bound_ns != b.lower_bound_ns) {
                       return a.lower_bound_ns < b.lower_bound_ns;
                     }
                     return a.Label() < b.Label();
                   });
}

}  // namespace pipecast::passes
