// Pass 5, rank: best throughput first. All candidates share the global
// batch, so that is shortest iteration first; ties go to less peak memory,
// then fewer stages, then the label, so the order is total and stable.
#include <algorithm>

#include "planner/passes.h"

namespace pipecast::passes {

void Rank(std::vector<Candidate>* candidates) {
  std::stable_sort(candidates->begin(), candidates->end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.result->samples_per_s != b.result->samples_per_s) {
                       return a.result->samples_per_s > b.result->samples_per_s;
                     }
                     if (a.PeakMemory() != b.PeakMemory()) return a.PeakMemory() < b.PeakMemory();
                     if (a.config.layout.pipeline_stages != b.config.layout.pipeline_stages) {
                       return a.config.layout.pipeline_stages < b.config.layout.pipeline_stages;
                     }
                     return a.Label() < b.Label();
                   });
}

}  // namespace pipecast::passes
