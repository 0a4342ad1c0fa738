// Pass 6, sweep: the chosen layout at other micro-batch counts — the
// trade-off between bubble (fewer, larger steps) and global batch a user is
// really choosing.
#include <algorithm>
#include <set>

#include "planner/passes.h"

namespace pipecast::passes {

std::vector<SweepPoint> Sweep(const Model& model, const Cluster& cluster,
                              const PlannerOptions& options, const Candidate& chosen) {
  const int chosen_m = chosen.config.microbatches;
  std::set<int> counts = {chosen_m};
  for (int m = 1; m <= 4 * chosen_m; m *= 2) counts.insert(m);
  counts.insert(chosen.config.layout.pipeline_stages);
  std::vector<SweepPoint> out;
  Candidate layout = chosen;  // the chosen layout, at each count in turn
  layout.result.reset();
  for (int m : counts) {
    layout.config.microbatches = m;
    if (SimulationEvents(layout) > kMaxSearchEvents) break;  // counts ascend: the rest too
    if (options.progress) {
      options.progress(SearchProgress{SearchProgress::Pass::kSweep, static_cast<int>(out.size()),
                                      static_cast<int>(counts.size())});
    }
    auto r = SimulateCandidate(model, cluster, layout, /*record_timeline=*/false);
    if (!r.ok()) continue;
    SweepPoint pt;
    pt.microbatches = m;
    pt.global_batch = r->global_batch;
    pt.iteration_ns = r->iteration_ns;
    pt.samples_per_s = r->samples_per_s;
    pt.bubble_ratio = r->bubble_ratio;
    pt.bubble_fraction_of_ideal = r->bubble_fraction_of_ideal;
    for (const StageResult& s : r->per_rank) {
      pt.peak_memory_bytes = std::max(pt.peak_memory_bytes, s.peak_memory_bytes);
    }
    const Bytes limit = MemoryLimitBytes(cluster.gpu);
    pt.fits = limit <= 0 || pt.peak_memory_bytes <= limit;
    out.push_back(pt);
  }
  if (options.progress) {  // the pass is over, counts past the limit skipped
    const int total = static_cast<int>(counts.size());
    options.progress(SearchProgress{SearchProgress::Pass::kSweep, total, total,
                                    total - static_cast<int>(out.size())});
  }
  return out;
}

}  // namespace pipecast::passes
