// Pass 1, enumerate: every configuration the GPU count and global batch allow.
#include <fmt/format.h>

#include "planner/passes.h"

namespace pipecast::passes {

std::vector<Candidate> Enumerate(const Model& model, const PlannerOptions& options,
                                 int64_t global_batch, std::vector<Rejection>* rejected) {
  std::vector<Candidate> out;
  const int layers = static_cast<int>(model.layers.size());
  std::vector<bool> recompute_modes;
  if (options.recompute != RecomputeMode::kOn) recompute_modes.push_back(false);
  if (options.recompute != RecomputeMode::kOff) recompute_modes.push_back(true);
  for (int p = 1; p <= std::min(options.gpus, layers); ++p) {
    if (options.gpus % p != 0) continue;
    const int d = options.gpus / p;
    for (int size : options.microbatch_sizes) {
      for (ScheduleKind schedule : options.schedules) {
        for (bool recompute : recompute_modes) {
          Candidate c;
          c.pipeline_stages = p;
          c.data_parallel = d;
          c.schedule = schedule;
          c.microbatch_size = size;
          c.recompute = recompute;
          const int64_t per_step = int64_t{size} * d;
          if (global_batch % per_step != 0) {
            c.microbatches = 0;
            rejected->push_back(Rejection{
                RejectReason::kBatchNotDivisible, c,
                fmt::format("global batch {} is not a multiple of micro-batch size {} x "
                            "data-parallel {}",
                            global_batch, size, d),
                0});
            continue;
          }
          c.microbatches = static_cast<int>(global_batch / per_step);
          out.push_back(std::move(c));
        }
      }
    }
  }
  return out;
}

}  // namespace pipecast::passes
