#include "validate/exec_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "sim/collectives.h"
#include "sim/memory.h"
#include "sim/stage_costs.h"

namespace pipecast::validate {
namespace {

// The plan's model stages: its partition, or for a bidirectional schedule
// whose partition lists every virtual stage the first p entries (virtual stage
// p+k repeats stage k; the plan reader and the simulator hold it to that).
// InvalidArgument for a partition of any other size.
Result<std::vector<StageLayers>> ModelPartition(const PlanFile& plan, const Schedule& schedule) {
  const int stages = static_cast<int>(plan.partition.size());
  const int model_stages = schedule.NumModelStages();
  if (stages != schedule.num_stages && stages != model_stages) {
    return Status::InvalidArgument(
        fmt::format("the plan has {} partition stages but {} virtual stages in its actions{}",
                    stages, schedule.num_stages,
                    schedule.bidirectional ? fmt::format(" ({} model stages)", model_stages) : ""));
  }
  return std::vector<StageLayers>(plan.partition.begin(), plan.partition.begin() + model_stages);
}

// The plan's model stages costed by the simulator's own model
// (sim/stage_costs.h), so measured and predicted memory count the same bytes.
Result<std::vector<StageCost>> StageCostsOf(const Model& model, const PlanFile& plan,
                                            const std::vector<StageLayers>& partition,
                                            const Cluster& cluster) {
  for (size_t s = 0; s < partition.size(); ++s) {
    const StageLayers& part = partition[s];
    if (part.first_layer < 0 || part.last_layer >= static_cast<int>(model.layers.size()) ||
        part.first_layer > part.last_layer) {
      return Status::InvalidArgument(fmt::format(
          "plan partition stage {} holds layers {}-{} but the model '{}' has layers 0-{}: "
          "pass the model the plan was made for (--model)",
          s, part.first_layer, part.last_layer, model.name, model.layers.size() - 1));
    }
  }
  const StageCostTable table(model, StageCostOptionsFor(plan.config, cluster));
  return table.Stages(partition);
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
// gradient of their output and send the gradient of their input. "Previous"
// and "next" are along the micro-batch's path (Schedule::IsFirstStage,
// IsLastStage): in a bidirectional schedule stage p (direction b's first)
// receives no activation and stage p-1 (direction a's last) sends none.
void SetCostsAndMessages(const Schedule& schedule, int rank, const StageCost& sc, ExecOp* op) {
  const Action& a = op->action;
  const int s = a.stage, mb = a.microbatch;
  const bool first = schedule.IsFirstStage(s), last = schedule.IsLastStage(s);
  op->workspace_bytes = sc.workspace_bytes;
  op->activation_bytes = sc.ActivationsAtStart(a.kind);
  op->frees_activations = sc.FreesActivations(a.kind);
  op->kept_after_bytes = sc.KeptAfter(a.kind);
  switch (a.kind) {
    case OpKind::kForward:
      if (!first) {
        op->recv = MessageWith(schedule, rank, s - 1, s - 1, s, mb, false, sc.input_bytes);
      }
      if (!last) {
        op->send = MessageWith(schedule, rank, s + 1, s, s + 1, mb, false, sc.output_bytes);
      }
      break;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      if (!last) {
        op->recv = MessageWith(schedule, rank, s + 1, s + 1, s, mb, true, sc.output_bytes);
      }
      if (!first) {
        op->send = MessageWith(schedule, rank, s - 1, s, s - 1, mb, true, sc.input_bytes);
      }
      break;
    case OpKind::kBackwardWeight:
      break;
  }
}

// Each stage's all-reduces per op kind, from its layers' costs at the plan's
// t, and its expert collectives at the plan's ep (ExecOp::ep_collectives):
// per MoE layer, with an all-to-all dispatcher, a dispatch and a combine,
// each the bytes one GPU sends as the simulator counts them
// (ExpertAllToAllOf: bytes per token x the tokens a GPU dispatches), in the
// forward and again in the backward; with the all-gather dispatcher its
// all-gathers and reduce-scatter forward, their gradients' backward.
struct StageCollectives {
  std::vector<Bytes> forward, backward;
  std::vector<ExpertCollective> expert_forward, expert_backward;
};

// One MoE layer's collectives under the all-gather dispatcher, per GPU of a
// group of g dispatching `tokens` tokens.
void AddAllGatherDispatch(const MoeRouting& m, double tokens, int g, StageCollectives* out) {
  using Kind = ExpertCollective::Kind;
  const double b = m.bytes_per_element;
  const auto bytes = [&](double per_token) { return Bytes{std::llround(tokens * per_token)}; };
  const Bytes hidden = bytes(static_cast<double>(m.hidden) * b);
  out->expert_forward.push_back({Kind::kAllGather, bytes(m.experts * 1.0)});  // routing map
  out->expert_forward.push_back({Kind::kAllGather, bytes(m.experts * b)});    // probs
  out->expert_forward.push_back({Kind::kAllGather, hidden});
  out->expert_forward.push_back({Kind::kReduceScatter, g * hidden});
  out->expert_backward.push_back({Kind::kAllGather, hidden});  // the output's gradient
  out->expert_backward.push_back({Kind::kReduceScatter, g * hidden});
  out->expert_backward.push_back({Kind::kReduceScatter, g * bytes(m.experts * b)});
}
std::vector<StageCollectives> CollectivesOf(const Model& model, const PlanFile& plan,
                                            const std::vector<StageLayers>& partition,
                                            const Cluster& cluster) {
  std::vector<StageCollectives> out(partition.size());
  if (plan.config.layout.expert_parallel * plan.config.layout.expert_tensor_parallel > 1) {
    const StageCostOptions o = StageCostOptionsFor(plan.config, cluster);
    const double tokens = ExpertTokensPerGpu(model, o);
    const ExpertAllToAllGroup group =
        ExpertGroupOf(o.expert_parallel, o.expert_tensor_parallel, o.gpus_per_node);
    for (size_t s = 0; s < partition.size(); ++s) {
      for (int l = partition[s].first_layer; l <= partition[s].last_layer; ++l) {
        if (!model.layers[l].moe) continue;
        const MoeRouting& m = *model.layers[l].moe;
        const ExpertAllToAll a =
            ExpertAllToAllOf(o.ep_intra_node, o.ep_inter_node, o.ep_network_gbps_per_gpu, group,
                             m.experts, m.top_k, m.expert_groups, m.topk_groups, m.hidden,
                             m.bytes_per_element, tokens, o.ep_dispatcher, ExpertRowsPerRoute(m));
        if (o.ep_dispatcher == ExpertDispatcher::kAllGather) {
          AddAllGatherDispatch(m, tokens, group.ranks * std::max(1, group.tensor), &out[s]);
          continue;
        }
        const ExpertCollective one{ExpertCollective::Kind::kAllToAll,
                                   std::llround(a.bytes_per_token * tokens)};
        for (auto* list : {&out[s].expert_forward, &out[s].expert_backward}) {
          list->insert(list->end(), 2, one);  // dispatch, combine
        }
      }
    }
  }
  if (plan.config.layout.tensor_parallel <= 1) return out;
  for (size_t s = 0; s < partition.size(); ++s) {
    for (int l = partition[s].first_layer; l <= partition[s].last_layer; ++l) {
      const LayerCost c =
          CostAt(model.layers[l], plan.config.microbatch_size, plan.config.layout.tensor_parallel,
                 plan.config.layout.sequence_parallel);
      const Bytes bytes = c.tp_comm_bytes.value_or(0);
      out[s].forward.insert(out[s].forward.end(), c.tp_forward_collectives, bytes);
      out[s].backward.insert(out[s].backward.end(), c.tp_backward_collectives, bytes);
    }
  }
  return out;
}

// A bidirectional schedule's copy reduce, the bytes the simulator times
// (CopyReduceBytes, sim/stage_costs.h): a rank sends one message per
// partner of all the stages they share.
void AddCopyExchanges(const PlanFile& plan, const Schedule& schedule,
                      const std::vector<StageCost>& costs, std::vector<ExecStage>* per_rank) {
  if (!schedule.bidirectional) return;
  const int p = schedule.num_ranks;
  const std::vector<std::map<int, Bytes>> shared = CopyReduceBytes(
      schedule, costs,
      ShardedBytesPerParam(plan.config.memory, plan.config.layout.data_parallel).gradients);
  for (int r = 0; r < p; ++r) {
    for (const auto& [partner, bytes] : shared[r]) {
      (*per_rank)[r].copy_exchanges.push_back(CopyExchange{.peer_rank = partner,
                                                           .bytes = bytes,
                                                           .send_tag = CopyReduceTag(r),
                                                           .recv_tag = CopyReduceTag(partner)});
    }
  }
}

}  // namespace

int64_t CopyReduceTag(int src_rank) { return kCopyReduceTagBase + src_rank; }

ExecPlan ExpandTensorParallel(const ExecPlan& plan) {
  const int t = std::max(plan.workers_per_rank(), 1);
  ExecPlan out = plan;
  out.ranks = plan.ranks * t;
  out.tensor_parallel = 1;
  out.expert_parallel = 1;
  out.expert_tensor_parallel = 1;
  out.per_rank.clear();
  for (int w = 0; w < plan.ranks * t; ++w) {
    ExecStage st = plan.per_rank[w / t];
    st.rank = w;
    for (ExecOp& op : st.ops) {
      if (op.recv.present()) op.recv.peer_rank = op.recv.peer_rank * t + w % t;
      if (op.send.present()) op.send.peer_rank = op.send.peer_rank * t + w % t;
    }
    for (CopyExchange& x : st.copy_exchanges) x.peer_rank = x.peer_rank * t + w % t;
    out.per_rank.push_back(std::move(st));
  }
  return out;
}

Status RefuseExpertTensorParallel(const ExecPlan& plan) {
  if (plan.expert_tensor_parallel <= 1) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "the plan has expert_tensor_parallel {}, which the cuda backend does not run (its NCCL "
      "communicator spans a stage's whole expert group, with none for the etp or ep "
      "sub-groups); validate it with --backend cpu or mpi",
      plan.expert_tensor_parallel));
}

int64_t MessageTag(int dst_stage, int microbatch, bool gradient, int num_stages) {
  return (int64_t{microbatch} * num_stages + dst_stage) * 2 + (gradient ? 1 : 0);
}

Result<ExecPlan> BuildExecPlan(const Model& model, const PlanFile& plan, const Schedule& schedule,
                               const SimResult& predicted, const Cluster& cluster) {
  PIPECAST_ASSIGN_OR_RETURN(std::vector<StageLayers> partition, ModelPartition(plan, schedule));
  // The runtime relies on the pairs being whole (a forward, then its B or I):
  // the schedule's own rules, checked again for a schedule edited after its
  // prediction.
  PIPECAST_RETURN_IF_ERROR(ValidateSchedule(schedule));
  PIPECAST_ASSIGN_OR_RETURN(std::vector<StageCost> costs,
                            StageCostsOf(model, plan, partition, cluster));
  const std::vector<StageCollectives> collectives = CollectivesOf(model, plan, partition, cluster);
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
  ep.tensor_parallel = std::max(plan.config.layout.tensor_parallel, 1);
  ep.expert_tensor_parallel = std::max(plan.config.layout.expert_tensor_parallel, 1);
  ep.expert_parallel = std::max(plan.config.layout.expert_parallel, 1) * ep.expert_tensor_parallel;
  ep.ep_dispatcher = plan.config.layout.expert_dispatcher;
  for (int r = 0; r < schedule.num_ranks; ++r) {
    ExecStage st;
    st.rank = r;
    const StageResult& predicted_rank = predicted.per_rank[r];
    st.static_bytes = predicted_rank.HeldAllStepBytes();
    if (predicted_rank.gradients_from_ns > 0) {
      st.gradient_bytes_made_in_step = predicted_rank.memory.gradients;
    }
    for (const Action& a : schedule.actions[r]) {
      ExecOp op;
      op.action = a;
      auto it = duration.find({r, key(a)});
      if (it == duration.end()) {
        return Status::Internal(
            fmt::format("op {} of rank {} is missing from the prediction", ActionName(a), r));
      }
      op.predicted_ns = it->second;
      const int model_stage = schedule.ModelStage(a.stage);
      SetCostsAndMessages(schedule, r, costs[model_stage], &op);
      op.tp_comm_ns = costs[model_stage].TpCommNs(a.kind);
      // The dispatcher's collectives and etp's all-gathers and reduce-scatters.
      const StageCost& sc = costs[model_stage];
      op.ep_comm_ns = a.kind == OpKind::kForward          ? sc.ep_forward_ns + sc.etp_forward_ns
                      : a.kind == OpKind::kBackwardWeight ? 0
                                                          : sc.ep_backward_ns + sc.etp_backward_ns;
      if (a.kind == OpKind::kForward) op.tp_collectives = collectives[model_stage].forward;
      if (a.kind == OpKind::kBackward || a.kind == OpKind::kBackwardInput) {
        op.tp_collectives = collectives[model_stage].backward;
      }
      if (a.kind == OpKind::kForward) op.ep_collectives = collectives[model_stage].expert_forward;
      if (a.kind == OpKind::kBackward || a.kind == OpKind::kBackwardInput) {
        op.ep_collectives = collectives[model_stage].expert_backward;
      }
      st.ops.push_back(op);
    }
    st.predicted_copy_reduce_ns = predicted.per_rank[r].copy_reduce_ns;
    ep.per_rank.push_back(std::move(st));
  }
  AddCopyExchanges(plan, schedule, costs, &ep.per_rank);
  return ep;
}

}  // namespace pipecast::validate
