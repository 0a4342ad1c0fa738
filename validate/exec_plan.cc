#include "validate/exec_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "sim/stage_costs.h"

namespace pipecast::validate {
namespace {

// The plan's stages costed by the simulator's own model (sim/stage_costs.h),
// so measured and predicted memory count the same bytes.
Result<std::vector<StageCost>> StageCostsOf(const Model& model, const PlanFile& plan,
                                            const Link& tp_link) {
  for (size_t s = 0; s < plan.partition.size(); ++s) {
    const StageLayers& part = plan.partition[s];
    if (part.first_layer < 0 || part.last_layer >= static_cast<int>(model.layers.size()) ||
        part.first_layer > part.last_layer) {
      return Status::InvalidArgument(fmt::format(
          "plan partition stage {} holds layers {}-{} but the model '{}' has layers 0-{}: "
          "pass the model the plan was made for (--model)",
          s, part.first_layer, part.last_layer, model.name, model.layers.size() - 1));
    }
  }
  StageCostOptions options{plan.microbatch_size, plan.recompute};
  options.tensor_parallel = plan.tensor_parallel;  // one GPU of the group's memory
  options.sequence_parallel = plan.sequence_parallel;
  options.tp_link = tp_link;
  const StageCostTable table(model, options);
  return table.Stages(plan.partition);
}

// The message between `rank`'s stage and `peer_stage` that carries
// micro-batch `mb` from `src_stage` to `dst_stage`; absent when both stages
// are on `rank` (a hand-over).
Message MessageWith(const Schedule& schedule, int rank, int peer_stage, int src_stage,
                    int dst_stage, int mb, bool gradient, Bytes bytes) {
  const int peer = schedule.stage_rank[peer_stage];
  if (peer == rank) return Message{};
  return Message{.peer_rank = peer,
                 .tag = MessageTag(dst_stage, mb, gradient, schedule.num_stages),
                 .bytes = bytes,
                 .gradient = gradient,
                 .src_stage = src_stage,
                 .dst_stage = dst_stage,
                 .microbatch = mb};
}

// An op's memory from the stage-cost model and its messages: F receives
// the previous stage's output and sends its own; B and I receive the
// gradient of their output and send the gradient of their input.
void SetCostsAndMessages(const Schedule& schedule, int rank, const StageCost& sc, ExecOp* op) {
  const Action& a = op->action;
  const int s = a.stage, mb = a.microbatch;
  const int last = schedule.num_stages - 1;
  op->workspace_bytes = sc.workspace_bytes;
  op->activation_bytes = sc.ActivationsAtStart(a.kind);
  op->frees_activations = sc.FreesActivations(a.kind);
  op->kept_after_bytes = sc.KeptAfter(a.kind);
  switch (a.kind) {
    case OpKind::kForward:
      if (s > 0) op->recv = MessageWith(schedule, rank, s - 1, s - 1, s, mb, false, sc.input_bytes);
      if (s < last) {
        op->send = MessageWith(schedule, rank, s + 1, s, s + 1, mb, false, sc.output_bytes);
      }
      break;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      if (s < last) {
        op->recv = MessageWith(schedule, rank, s + 1, s + 1, s, mb, true, sc.output_bytes);
      }
      if (s > 0) op->send = MessageWith(schedule, rank, s - 1, s, s - 1, mb, true, sc.input_bytes);
      break;
    case OpKind::kBackwardWeight:
      break;
  }
}

// Each stage's all-reduces per op kind, from its layers' costs at the plan's t.
struct StageCollectives {
  std::vector<Bytes> forward, backward;
};
std::vector<StageCollectives> CollectivesOf(const Model& model, const PlanFile& plan) {
  std::vector<StageCollectives> out(plan.partition.size());
  if (plan.tensor_parallel <= 1) return out;
  for (size_t s = 0; s < plan.partition.size(); ++s) {
    for (int l = plan.partition[s].first_layer; l <= plan.partition[s].last_layer; ++l) {
      const LayerCost c = CostAt(model.layers[l], plan.microbatch_size, plan.tensor_parallel,
                                 plan.sequence_parallel);
      const Bytes bytes = c.tp_comm_bytes.value_or(0);
      out[s].forward.insert(out[s].forward.end(), c.tp_forward_collectives, bytes);
      out[s].backward.insert(out[s].backward.end(), c.tp_backward_collectives, bytes);
    }
  }
  return out;
}

}  // namespace

ExecPlan ExpandTensorParallel(const ExecPlan& plan) {
  const int t = std::max(plan.tensor_parallel, 1);
  ExecPlan out = plan;
  out.ranks = plan.ranks * t;
  out.tensor_parallel = 1;
  out.per_rank.clear();
  for (int w = 0; w < plan.ranks * t; ++w) {
    ExecStage st = plan.per_rank[w / t];
    st.rank = w;
    for (ExecOp& op : st.ops) {
      if (op.recv.present()) op.recv.peer_rank = op.recv.peer_rank * t + w % t;
      if (op.send.present()) op.send.peer_rank = op.send.peer_rank * t + w % t;
    }
    out.per_rank.push_back(std::move(st));
  }
  return out;
}

int64_t MessageTag(int dst_stage, int microbatch, bool gradient, int num_stages) {
  return (int64_t{microbatch} * num_stages + dst_stage) * 2 + (gradient ? 1 : 0);
}

Result<ExecPlan> BuildExecPlan(const Model& model, const PlanFile& plan, const Schedule& schedule,
                               const SimResult& predicted, const Link& tp_link) {
  if (schedule.bidirectional) {
    // Checked first: its overlapped pairs and two paths would each be refused below, less
    // clearly (docs/validator.md).
    return Status::FailedPrecondition(fmt::format(
        "schedule '{}' is bidirectional (micro-batches enter at both ends; rank k and rank {}-k "
        "hold two copies of the same model chunks), which the validator cannot run yet: its "
        "workers keep one weight copy per stage, send along one path and do not sum the copies' "
        "gradients between ranks; simulate it with the simulator",
        schedule.name, schedule.num_ranks - 1));
  }
  if (static_cast<int>(plan.partition.size()) != schedule.num_stages) {
    return Status::InvalidArgument(
        fmt::format("the plan has {} partition stages but {} virtual "
                    "stages in its actions",
                    plan.partition.size(), schedule.num_stages));
  }
  for (int r = 0; r < schedule.num_ranks; ++r) {
    for (const Action& a : schedule.actions[r]) {
      if (!a.overlapped) continue;
      return Status::FailedPrecondition(fmt::format(
          "schedule '{}' has overlapped F&B pairs (rank {} starts one at {}), which the validator "
          "cannot run yet: its workers run one op at a time; simulate it with the simulator, or "
          "validate a schedule without pairs",
          schedule.name, r, ActionName(a)));
    }
  }
  Result<std::vector<StageCost>> costs = StageCostsOf(model, plan, tp_link);
  if (!costs.ok()) return costs.status();
  const std::vector<StageCollectives> collectives = CollectivesOf(model, plan);
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
  ep.tensor_parallel = std::max(plan.tensor_parallel, 1);
  for (int r = 0; r < schedule.num_ranks; ++r) {
    ExecStage st;
    st.rank = r;
    const MemoryBreakdown& m = predicted.per_rank[r].memory;
    st.static_bytes =
        m.weights + m.gradients + m.optimizer + m.stashed_weights + m.gathered_weights;
    for (const Action& a : schedule.actions[r]) {
      ExecOp op;
      op.action = a;
      auto it = duration.find({r, key(a)});
      if (it == duration.end()) {
        return Status::Internal(
            fmt::format("op {} of rank {} is missing from the prediction", ActionName(a), r));
      }
      op.predicted_ns = it->second;
      SetCostsAndMessages(schedule, r, (*costs)[a.stage], &op);
      op.tp_comm_ns = (*costs)[a.stage].TpCommNs(a.kind);
      if (a.kind == OpKind::kForward) op.tp_collectives = collectives[a.stage].forward;
      if (a.kind == OpKind::kBackward || a.kind == OpKind::kBackwardInput) {
        op.tp_collectives = collectives[a.stage].backward;
      }
      st.ops.push_back(op);
    }
    ep.per_rank.push_back(std::move(st));
  }
  return ep;
}

}  // namespace pipecast::validate
