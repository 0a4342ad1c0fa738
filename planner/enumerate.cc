// Pass 1, enumerate: every configuration the GPU count and global batch allow.
#include <fmt/format.h>

#include <algorithm>

#include "base/text_table.h"
#include "planner/passes.h"
#include "sim/schedule_traits.h"

namespace pipecast::passes {

namespace {

bool HasWeightGradientSplit(const Model& model) {
  return std::all_of(model.layers.begin(), model.layers.end(), [](const Layer& l) {
    return l.profiles.front().backward_weight_ns.has_value();
  });
}

// Why `c` cannot run as its schedule requires, or "" when it can. The schedule's rules come from
// its traits row; the chunk and layer limits are the planner's own.
std::string ScheduleConstraint(const Candidate& c, int layers, bool split) {
  const ScheduleTraits& traits = TraitsOf(c.schedule);
  const int p = c.pipeline_stages, m = c.microbatches;
  if (traits.uses_chunks) {
    if (p < 2) return "chunked schedules need at least 2 stages";
    if (c.VirtualStages() > layers) {
      return fmt::format("{} chunks x {} stages exceeds the model's {}", c.chunks, p,
                         Count(layers, "layer", "layers"));
    }
  }
  if (traits.splits_backward && !split) {
    return fmt::format("{} split the backward: the model needs backward_weight_us",
                       traits.rule_label);
  }
  return MicrobatchRuleConflict(c.schedule, p, m);
}

// The ZeRO levels tried at data-parallel degree d: the pinned ones, else 0,
// 1 and 3 (plain data parallelism, Megatron's distributed optimizer, FSDP)
// when there are replicas to shard over. Level 2 is searched only when
// named: at d > 1 it sits between 1 and 3 in memory and needs per-backward
// reduce-scatters like 3.
std::vector<int> ZeroLevels(const PlannerOptions& options, int d) {
  if (!options.zero_levels.empty()) return options.zero_levels;
  if (d <= 1) return {0};
  return {0, 1, 3};
}

}  // namespace

bool HasAttentionCore(const Model& model) {
  return std::any_of(model.layers.begin(), model.layers.end(), [](const Layer& l) {
    return std::any_of(l.profiles.begin(), l.profiles.end(), [](const LayerProfile& p) {
      return p.attention_core_bytes.value_or(0) > 0;
    });
  });
}

std::vector<Recompute> RecomputeModes(const Model& model, RecomputeMode mode) {
  switch (mode) {
    case RecomputeMode::kOff:
      return {Recompute::kOff};
    case RecomputeMode::kSelective:
      return {Recompute::kSelective};
    case RecomputeMode::kFull:
      return {Recompute::kFull};
    case RecomputeMode::kAuto:
      break;
  }
  // Selective recomputation that drops nothing is off at a higher price.
  if (!HasAttentionCore(model)) return {Recompute::kOff, Recompute::kFull};
  return {Recompute::kOff, Recompute::kSelective, Recompute::kFull};
}

std::vector<Candidate> Enumerate(const Model& model, const PlannerOptions& options,
                                 int64_t global_batch, std::vector<Rejection>* rejected) {
  std::vector<Candidate> out;
  const int layers = static_cast<int>(model.layers.size());
  const bool split = HasWeightGradientSplit(model);
  const std::vector<Recompute> recompute_modes = RecomputeModes(model, options.recompute);
  for (int p = 1; p <= std::min(options.gpus, layers); ++p) {
    if (options.gpus % p != 0) continue;
    if (options.pipeline_stages > 0 && p != options.pipeline_stages) continue;
    const int d = options.gpus / p;
    for (int size : options.microbatch_sizes) {
      for (ScheduleKind schedule : options.schedules) {
        const std::vector<int> chunk_counts =
            TraitsOf(schedule).uses_chunks ? options.chunks : std::vector<int>{1};
        for (int v : chunk_counts) {
          for (Recompute recompute : recompute_modes) {
            for (int zero : ZeroLevels(options, d)) {
              Candidate c;
              c.pipeline_stages = p;
              c.data_parallel = d;
              c.schedule = schedule;
              c.chunks = v;
              c.microbatch_size = size;
              c.recompute = recompute;
              c.zero = zero;
              const int64_t per_step = int64_t{size} * d;
              if (global_batch % per_step != 0) {
                rejected->push_back(Rejection{
                    RejectReason::kBatchNotDivisible, c,
                    fmt::format("global batch {} is not a multiple of micro-batch size {} x "
                                "data-parallel {}",
                                global_batch, size, d),
                    0});
                continue;
              }
              c.microbatches = static_cast<int>(global_batch / per_step);
              if (std::string why = ScheduleConstraint(c, layers, split); !why.empty()) {
                rejected->push_back(Rejection{RejectReason::kScheduleConstraint, c, why, 0});
                continue;
              }
              out.push_back(std::move(c));
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace pipecast::passes
