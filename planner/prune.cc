// Pass 3, prune: a lower bound on each candidate's iteration time, so the
// simulate pass can visit the promising ones first and stop early.
#include <algorithm>

#include "planner/passes.h"

namespace pipecast::passes {

namespace {

TimeNs LowerBound(const Model& model, const Candidate& c) {
  const int p = c.pipeline_stages;
  std::vector<TimeNs> fwd(p, 0), bwd(p, 0);
  for (int s = 0; s < p; ++s) {
    for (int l = c.partition[s].first_layer; l <= c.partition[s].last_layer; ++l) {
      LayerCost lc = CostAt(model.layers[l], c.microbatch_size);
      fwd[s] += lc.forward_ns;
      bwd[s] += lc.backward_ns + (c.recompute ? lc.forward_ns : 0);
    }
  }
  const TimeNs m = c.microbatches;
  if (c.schedule == ScheduleKind::kNaive) {
    TimeNs sum = 0;
    for (int s = 0; s < p; ++s) sum += fwd[s] + bwd[s];
    return m * sum;
  }
  TimeNs best = 0, before = 0;
  for (int k = 0; k < p; ++k) {
    best = std::max(best, before + m * (fwd[k] + bwd[k]));
    before += fwd[k] + bwd[k];  // stages before k: one forward and one backward each
  }
  return best;
}

}  // namespace

void Prune(const Model& model, std::vector<Candidate>* candidates) {
  for (Candidate& c : *candidates) c.lower_bound_ns = LowerBound(model, c);
  std::stable_sort(candidates->begin(), candidates->end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.lower_bound_ns != b.lower_bound_ns) {
                       return a.lower_bound_ns < b.lower_bound_ns;
                     }
                     return a.Label() < b.Label();
                   });
}

}  // namespace pipecast::passes
