#include "validate/exec_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

namespace pipecast::validate {
namespace {

struct StageBytes {
  Bytes held = 0;        // kept from F until B/W
  Bytes recomputed = 0;  // rebuilt at B/I with recomputation
  Bytes output = 0;      // the last layer's output
  Bytes workspace = 0;   // largest layer workspace
};

Result<std::vector<StageBytes>> StageBytesOf(const Model& model, const PlanFile& plan) {
  std::vector<StageBytes> out(plan.partition.size());
  for (size_t s = 0; s < plan.partition.size(); ++s) {
    const StageLayers& part = plan.partition[s];
    if (part.first_layer < 0 || part.last_layer >= static_cast<int>(model.layers.size()) ||
        part.first_layer > part.last_layer) {
      return Status::InvalidArgument(fmt::format(
          "plan partition stage {} holds layers {}-{} but the model '{}' has layers 0-{}: "
          "pass the model the plan was made for (--model)",
          s, part.first_layer, part.last_layer, model.name, model.layers.size() - 1));
    }
    Bytes activations = 0;
    for (int l = part.first_layer; l <= part.last_layer; ++l) {
      const LayerCost c = CostAt(model.layers[l], plan.microbatch_size);
      activations += c.activation_bytes;
      out[s].output = c.output_bytes;
      out[s].workspace = std::max(out[s].workspace, c.workspace_bytes);
    }
    out[s].held = activations;
    if (plan.recompute) {
      out[s].held = s > 0 ? out[s - 1].output : 0;
      out[s].recomputed = activations;
    }
  }
  return out;
}

}  // namespace

int64_t MessageTag(int dst_stage, int microbatch, bool gradient, int num_stages) {
  return (int64_t{microbatch} * num_stages + dst_stage) * 2 + (gradient ? 1 : 0);
}

Result<ExecPlan> BuildExecPlan(const Model& model, const PlanFile& plan, const Schedule& schedule,
                               const SimResult& predicted) {
  if (static_cast<int>(plan.partition.size()) != schedule.num_stages) {
    return Status::InvalidArgument(
        fmt::format("the plan has {} partition stages but {} virtual "
                    "stages in its actions",
                    plan.partition.size(), schedule.num_stages));
  }
  Result<std::vector<StageBytes>> bytes = StageBytesOf(model, plan);
  if (!bytes.ok()) return bytes.status();
  std::map<std::pair<int, int64_t>, TimeNs> duration;  // (rank, action key) -> ns
  auto key = [&](const Action& a) {
    return (int64_t{a.microbatch} * schedule.num_stages + a.stage) * 4 + static_cast<int>(a.kind);
  };
  for (const OpRecord& op : predicted.ops) {
    duration[{op.rank, key(op.action)}] = op.end_ns - op.start_ns;
  }
  if (static_cast<int>(predicted.per_rank.size()) != schedule.num_ranks) {
    return Status::Internal("the prediction has a different number of ranks than the plan");
  }
  ExecPlan ep;
  ep.ranks = schedule.num_ranks;
  ep.num_stages = schedule.num_stages;
  ep.microbatches = schedule.num_microbatches;
  ep.iterations = schedule.iterations;
  const int last = schedule.num_stages - 1;
  for (int r = 0; r < schedule.num_ranks; ++r) {
    ExecStage st;
    st.rank = r;
    const MemoryBreakdown& m = predicted.per_rank[r].memory;
    st.static_bytes = m.weights + m.gradients + m.optimizer + m.stashed_weights;
    for (const Action& a : schedule.actions[r]) {
      ExecOp op;
      op.action = a;
      auto it = duration.find({r, key(a)});
      if (it == duration.end()) {
        return Status::Internal(
            fmt::format("op {} of rank {} is missing from the prediction", ActionName(a), r));
      }
      op.predicted_ns = it->second;
      const StageBytes& sb = (*bytes)[a.stage];
      op.workspace_bytes = sb.workspace;
      switch (a.kind) {
        case OpKind::kForward:
          op.activation_bytes = sb.held;
          if (a.stage > 0 && schedule.stage_rank[a.stage - 1] != r) {
            op.recv = Message{schedule.stage_rank[a.stage - 1],
                              MessageTag(a.stage, a.microbatch, false, ep.num_stages),
                              (*bytes)[a.stage - 1].output,
                              false,
                              a.stage - 1,
                              a.stage,
                              a.microbatch};
          }
          if (a.stage < last && schedule.stage_rank[a.stage + 1] != r) {
            op.send = Message{schedule.stage_rank[a.stage + 1],
                              MessageTag(a.stage + 1, a.microbatch, false, ep.num_stages),
                              sb.output,
                              false,
                              a.stage,
                              a.stage + 1,
                              a.microbatch};
          }
          break;
        case OpKind::kBackward:
        case OpKind::kBackwardInput:
          op.activation_bytes = sb.recomputed;
          op.frees_activations = a.kind == OpKind::kBackward;
          if (a.stage < last && schedule.stage_rank[a.stage + 1] != r) {
            op.recv = Message{schedule.stage_rank[a.stage + 1],
                              MessageTag(a.stage, a.microbatch, true, ep.num_stages),
                              sb.output,
                              true,
                              a.stage + 1,
                              a.stage,
                              a.microbatch};
          }
          if (a.stage > 0 && schedule.stage_rank[a.stage - 1] != r) {
            op.send = Message{schedule.stage_rank[a.stage - 1],
                              MessageTag(a.stage - 1, a.microbatch, true, ep.num_stages),
                              (*bytes)[a.stage - 1].output,
                              true,
                              a.stage,
                              a.stage - 1,
                              a.microbatch};
          }
          break;
        case OpKind::kBackwardWeight:
          op.frees_activations = true;
          break;
      }
      st.ops.push_back(op);
    }
    ep.per_rank.push_back(std::move(st));
  }
  return ep;
}

}  // namespace pipecast::validate
