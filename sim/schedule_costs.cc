#include "sim/schedule_costs.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "sim/schedule_traits.h"
#include "sim/stage_costs.h"

namespace pipecast {
namespace {

Result<std::vector<StageCost>> CostStages(const Model& model, const Cluster& cluster,
                                          const SimOptions& options, int ranks, int chunks) {
  const int stages = ranks * chunks;
  if (static_cast<int>(options.partition.size()) != stages) {
    return Status::InvalidArgument(
        fmt::format("the partition has {} stages for {} ranks x {} chunks",
                    options.partition.size(), ranks, chunks));
  }
  PIPECAST_RETURN_IF_ERROR(CheckTensorParallelCosts(model, options.config.layout.tensor_parallel,
                                                    options.config.layout.sequence_parallel));
  for (const StageLayers& st : options.partition) {
    if (st.first_layer < 0 || st.last_layer < st.first_layer ||
        st.last_layer >= static_cast<int>(model.layers.size())) {
      return Status::InvalidArgument(
          fmt::format("partition stage {}..{} is outside the model's {} layers", st.first_layer,
                      st.last_layer, model.layers.size()));
    }
  }
  const StageCostTable table(model, StageCostOptionsFor(options.config, cluster));
  return table.Stages(options.partition);
}

}  // namespace

Result<ScheduleCosts> ScheduleCostsFor(const Model& model, const Cluster& cluster,
                                       const SimOptions& options, ScheduleKind kind, int ranks,
                                       int chunks, double memory_limit) {
  PIPECAST_ASSIGN_OR_RETURN(auto stages, CostStages(model, cluster, options, ranks, chunks));
  ScheduleCosts costs;
  costs.memory_limit = memory_limit;
  const Placement placement = TraitsOf(kind).placement;
  const int n = static_cast<int>(stages.size());
  for (int st = 0; st < n; ++st) {
    const StageCost& c = stages[st];
    costs.forward_ns.push_back(c.DurationNs(OpKind::kForward));
    costs.input_grad_ns.push_back(c.DurationNs(OpKind::kBackwardInput));
    costs.weight_grad_ns.push_back(c.DurationNs(OpKind::kBackwardWeight));
    double kept = 1.0;
    if (c.weight_grad_known && c.held_bytes > 0) {
      kept = std::min(1.0,
                      static_cast<double>(c.weight_grad_bytes) / static_cast<double>(c.held_bytes));
    }
    costs.kept_after_input.push_back(kept);
    if (st + 1 < n) {
      const int a = StageRank(placement, st, ranks), b = StageRank(placement, st + 1, ranks);
      if (a == b) continue;
      const Link& link = cluster.LinkBetween(a, b);
      costs.comm_ns = std::max(costs.comm_ns,
                               link.LatencyNs() + TransferNs(c.output_bytes, link.bandwidth_gbps));
    }
  }
  return costs;
}

Result<Bytes> LargestRankActivationBytes(const Model& model, const Cluster& cluster,
                                         const SimOptions& options, ScheduleKind kind, int ranks,
                                         int chunks) {
  PIPECAST_ASSIGN_OR_RETURN(auto stages, CostStages(model, cluster, options, ranks, chunks));
  std::vector<Bytes> per_rank(ranks, 0);
  const Placement placement = TraitsOf(kind).placement;
  for (int st = 0; st < static_cast<int>(stages.size()); ++st) {
    per_rank[StageRank(placement, st, ranks)] += stages[st].held_bytes;
  }
  return *std::max_element(per_rank.begin(), per_rank.end());
}

}  // namespace pipecast
