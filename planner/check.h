// The CI regression check (`planner --check baseline.json`): compares a
// stored plan (the baseline) with what the planner finds now, and with the
// baseline's own configuration replayed on the current model and cluster.
//
// The check fails when any of these holds:
//   - nothing fits now (the report is not feasible);
//   - throughput regressed: now's best predicted samples/s is below
//     baseline × (1 − tolerance): a *relative* drop;
//   - the bubble grew: now's best bubble_ratio is above baseline
//     bubble_ratio + tolerance: an *absolute* rise in ratio units (0.02 is
//     two percentage points of the pipeline span);
//   - the baseline configuration, re-simulated with the current model and
//     cluster, no longer runs or no longer fits in memory (any rank over
//     MemoryLimitBytes(cluster.gpu): capacity - reserve - margin): the diff
//     names the rank and by how much.
// A changed model hash or name is reported but never fails the check.
//
// Thread-safety: pure functions of their arguments.
#ifndef PIPECAST_PLANNER_CHECK_H_
#define PIPECAST_PLANNER_CHECK_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "formats/plan.h"
#include "planner/planner.h"
#include "sim/cluster.h"
#include "sim/model.h"

namespace pipecast {

struct CheckOptions {
  // Relative for throughput, absolute (ratio units) for bubble_ratio.
  double tolerance = 0.02;
  // ModelHash() of the current model file; empty: the hashes are not compared.
  std::string model_hash;

  // InvalidArgument unless 0 <= tolerance < 1.
  Status Validate() const;
};

struct CheckOutcome {
  bool passed = false;
  // A readable table (metric, baseline, now, change, verdict), the notes
  // (model hash changed, configurations compared) and one line per failure.
  std::string diff;
  // One sentence per reason the check failed; empty when it passed.
  std::vector<std::string> failures;
};

// Compares. OK with passed=false for a regression; InvalidArgument only for
// bad options.
Result<CheckOutcome> CheckAgainstBaseline(const PlanFile& baseline, const PlanReport& now,
                                          const Model& model, const Cluster& cluster,
                                          const CheckOptions& options);

}  // namespace pipecast

#endif  // PIPECAST_PLANNER_CHECK_H_
