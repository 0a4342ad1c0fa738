// ExecPlan: a plan.json turned into what each rank's worker does, op by op:
// which message to wait for before the op, how much activation memory and
// workspace to allocate, what to free at its end, and which message to send.
// Built once, before anything runs; plain data, safe to share between threads.
//
// Memory follows the simulator's stage-cost model (sim/stage_costs.h), by the
// same code, so measured and predicted peaks count the same things: a
// forward allocates its stage's activations (with recomputation what the
// granularity keeps), freed at the end of the backward (B) or weight-gradient
// op (W), or at the end of the input-gradient op (I) but for what W keeps,
// when the model gives it; a backward with recomputation re-allocates what it
// rebuilds; each op holds the stage's largest layer workspace while it runs. Activations go forward
// and gradients back as messages of the boundary stage's output_bytes; stages on one rank hand over
// without a message. With tensor parallelism every op runs on t workers
// (ExecPlan::tensor_parallel), memory per worker as the simulator counts one
// GPU of the group.
//
// Overlapped F&B pairs (Action::overlapped, dualpipev and dualpipe) stay two
// ExecOps, next to each other on their rank's list, each with its own
// duration (the simulator's half), memory and messages; the runtime runs them
// as one pair. Bidirectional schedules (dualpipe) have 2p virtual stages over
// p model stages: every first/last/next/previous-stage rule follows the
// schedule's paths (Schedule::IsFirstStage, IsLastStage), a virtual stage's
// costs are its model stage's, and each rank ends the iteration with the copy
// reduce (ExecStage::copy_exchanges). Units: ns, bytes.
#ifndef PIPECAST_VALIDATE_EXEC_PLAN_H_
#define PIPECAST_VALIDATE_EXEC_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/plan.h"
#include "sim/collectives.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"

namespace pipecast::validate {

struct Message {
  int peer_rank = -1;  // -1: no message
  int64_t tag = 0;
  Bytes bytes = 0;
  bool gradient = false;  // false: an activation going forward
  int src_stage = 0;
  int dst_stage = 0;
  int microbatch = 0;
  bool present() const { return peer_rank >= 0; }
};

// One collective of an MoE layer's dispatch or combine over the stage's ep
// workers, for the backends that run their own ops (cuda).
struct ExpertCollective {
  enum class Kind { kAllToAll, kAllGather, kReduceScatter };
  Kind kind = Kind::kAllToAll;
  // kAllToAll: the bytes one GPU sends in all; kAllGather: one GPU's
  // contribution (it receives ep times as many); kReduceScatter: the whole
  // buffer each GPU reduces (it keeps 1/ep of it).
  Bytes bytes = 0;
  bool operator==(const ExpertCollective&) const = default;
};

struct ExecOp {
  Action action;
  TimeNs predicted_ns = 0;     // the simulator's duration of this op
  Bytes activation_bytes = 0;  // allocated at the start (F: kept; B/I: recomputed)
  Bytes workspace_bytes = 0;   // held while the op runs
  bool frees_activations =
      false;  // B and W (and I, see above) free the (stage, micro-batch)'s activations
  Bytes kept_after_bytes = 0;  // allocated again once they are freed: what W keeps, after I
  Message recv;                // waited for before the op starts
  Message send;                // sent when the op ends
  // Tensor parallelism: the all-reduces the op runs, each entry one
  // collective's unsharded bytes, in layer order (F: each layer's forward
  // collectives; B and I: the backward's; W none), and the time the
  // simulator gives them inside predicted_ns (StageCost::TpCommNs). Empty
  // and 0 at t = 1. Backends that run their own ops (cuda) run these.
  std::vector<Bytes> tp_collectives;
  TimeNs tp_comm_ns = 0;
  // Expert parallelism: the dispatch and combine collectives the op runs, in
  // layer order, and the time the simulator gives them inside predicted_ns
  // (StageCost::ep_forward_ns for F, ep_backward_ns for B and I). Per MoE
  // layer, with the all-to-all dispatchers (deepep, alltoall), a dispatch and
  // a combine all-to-all of the bytes one GPU sends as the simulator counts
  // them, in F and again in B and I; with the all-gather dispatcher
  // (Megatron-LM's MoEAllGatherTokenDispatcher) F all-gathers the routing map
  // (tokens x experts x 1 B), the probs and the hidden states (x bytes per
  // element) and reduce-scatters the output (ep x tokens x hidden x bytes per
  // element), and B and I run their gradients' collectives: an all-gather of
  // the output gradient, a reduce-scatter of the input gradient and one of
  // the probs' gradient. None in W. Empty and 0 at ep = 1. Backends that run
  // their own ops (cuda) run these.
  std::vector<ExpertCollective> ep_collectives;
  TimeNs ep_comm_ns = 0;
};

// One exchange of a bidirectional schedule's copy reduce: after its last op of
// the iteration (before the iteration barrier) the rank sends the gradients of
// the model stages whose other copy `peer_rank` holds, `bytes` of them (the
// simulator's copy_reduce bytes: their parameters x gradient bytes per
// parameter, sharded as the plan shards them), and receives as many back: a
// ring all-reduce of two moves each byte once each way (docs/simulator.md,
// "Bidirectional schedules").
struct CopyExchange {
  int peer_rank = -1;
  Bytes bytes = 0;
  int64_t send_tag = 0;  // CopyReduceTag(this rank)
  int64_t recv_tag = 0;  // CopyReduceTag(peer_rank)
};

struct ExecStage {
  int rank = 0;
  std::vector<ExecOp> ops;  // the plan's action list, in order
  // Held the whole run: weights + gradients + optimizer state (+ stashed weights, ZeRO-3's
  // gathered copies); StageResult::HeldAllStepBytes.
  Bytes static_bytes = 0;
  // --sharded-state fsdp2: the gradients, not in static_bytes, allocated at the end of the
  // rank's first backward (B, or W where split) of each iteration and freed at its end, where
  // the simulator makes them (StageResult::gradients_from_ns); else 0.
  Bytes gradient_bytes_made_in_step = 0;
  // Bidirectional schedules: one per partner rank, in rank order (DualPipe's V: rank p-1-r,
  // none for a middle rank that holds both copies); empty otherwise.
  std::vector<CopyExchange> copy_exchanges;
  TimeNs predicted_copy_reduce_ns = 0;  // the simulator's StageResult::copy_reduce_ns
};

struct ExecPlan {
  int ranks = 0;
  int num_stages = 0;
  int microbatches = 0;  // across the `iterations` the lists cover
  int iterations = 1;    // > 1 for schedules without a flush (PipeDream)
  // t: the workers of each rank that split its layers (tensor parallelism).
  // Worker w = rank·t + j is tensor rank j of `rank`; it runs per_rank[rank]'s
  // ops, and its messages go to tensor rank j of the peer rank (world rank
  // peer·t + j). Each worker holds one GPU's share: static_bytes and the op
  // memory are per worker.
  int tensor_parallel = 1;
  // ep: the workers of each rank that hold its MoE layers' experts ep ways
  // (expert parallelism over data-parallel replicas, t = 1): worker
  // w = rank·ep + j is expert rank j, a replica of its own with its own
  // micro-batches, exchanging tokens with the rank's other workers by
  // all-to-all. Messages go to expert rank j of the peer rank, as with t.
  // With expert tensor parallelism (etp > 1, t = 1) the rank's expert group
  // is ep x etp workers, worker w = rank·ep·etp + j·etp + r being member
  // (j, r) (etp innermost, as Megatron-LM lays it): expert_parallel holds
  // ep x etp, the workers of the group, and expert_tensor_parallel etp.
  int expert_parallel = 1;
  int expert_tensor_parallel = 1;
  // How the ep workers exchange tokens (plan.json's ep_dispatcher): the
  // all-to-alls of DeepEP's count or Megatron-LM's rows, or Megatron-LM's
  // all-gathers and reduce-scatters (ExecOp::ep_collectives).
  ExpertDispatcher ep_dispatcher = ExpertDispatcher::kDeepEp;
  std::vector<ExecStage> per_rank;

  // The workers of one rank (its TensorGroup): t, or ep (one of them is 1).
  int workers_per_rank() const { return tensor_parallel * expert_parallel; }
  int workers() const { return ranks * workers_per_rank(); }
};

// The tag of the message into `dst_stage` for `microbatch`: unique per
// (stage, micro-batch, direction).
// The cuda backend's refusal of expert tensor parallelism (etp > 1):
// InvalidArgument naming the fix, since its NCCL communicator spans a stage's
// whole expert group, with none for the etp or ep sub-groups; OK otherwise.
Status RefuseExpertTensorParallel(const ExecPlan& plan);

int64_t MessageTag(int dst_stage, int microbatch, bool gradient, int num_stages);

// The tag of the copy-reduce message that `src_rank` sends: above every
// MessageTag a plan may use (the validator keeps those below 2^30) and the
// link probe's and the MPI clock's tags (2^30 + a few hundred), and below
// 2^31 - 1, the largest tag an int carries (the mpi backend passes tags as
// int, as it does the probe's).
inline constexpr int64_t kCopyReduceTagBase = int64_t{3} << 29;
int64_t CopyReduceTag(int src_rank);

// The same plan with each of its ranks' t (or ep) workers as a rank of its
// own: ranks·t ranks, tensor_parallel and expert_parallel 1, rank w = rank·t
// + j running its rank's ops with every message's peer_rank mapped to peer·t
// + j (the same tensor or expert rank of the peer); tags unchanged (each pair
// of workers has its own messages). For backends that place and connect
// ranks (cuda); the cpu and mpi backends run the plan as it is. REQUIRES:
// plan.workers_per_rank() >= 1.
ExecPlan ExpandTensorParallel(const ExecPlan& plan);

// REQUIRES: `predicted` is Simulate(model, ..., schedule, PlanSimOptions(plan))
// with record_timeline (op durations, static memory and copy_reduce_ns are
// read from it). InvalidArgument when the plan does not match the model
// (partition beyond its layers, a partition of neither the schedule's virtual
// stages nor, bidirectional, its model stages) or when an overlapped op is not
// half of an F then B/I pair. `cluster`: the one the prediction ran on, whose
// links its tensor-parallel collectives and expert-parallel all-to-alls used
// (ExecOp::tp_comm_ns, ep_comm_ns); the default's links are infinitely fast.
Result<ExecPlan> BuildExecPlan(const Model& model, const PlanFile& plan, const Schedule& schedule,
                               const SimResult& predicted, const Cluster& cluster = Cluster{});

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_EXEC_PLAN_H_
