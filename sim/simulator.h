// Simulator: a deterministic discrete-event replay of one training iteration
// of a pipeline schedule on a cluster (docs/simulator.md).
//
// Model. Each rank (GPU) has one compute stream that runs its actions in the
// schedule's order. An action starts when the stream is free, the previous
// action of its rank has ended and its inputs are present: F(s,m) needs the
// activation of F(s-1,m); B(s,m)/I(s,m) need F(s,m) and the gradient from
// B/I(s+1,m); W(s,m) needs I(s,m). Between ranks, activations and gradients
// travel as transfers on the directed link between the two GPUs: a transfer
// starts when its producer ends and the link is free (links are FIFO: one
// transfer serialises at a time), occupies the link for bytes/bandwidth, and
// arrives latency + bytes/bandwidth after it starts. Transfers run on a
// communication stream and overlap compute. Stages on the same rank hand data
// over at no cost.
//
// Memory per rank: static weights, gradients and optimizer state (from
// MemoryConfig, sharded over the d replicas by its ZeRO level, see
// sim/memory.h), plus a live set over time: activations of a (stage,
// micro-batch) from its F start until its B (or W) ends; a send buffer from the
// producer's end until the transfer arrives; a receive buffer from arrival
// until the consuming op ends; the stage's workspace while an op runs.
//
// A bidirectional schedule (DualPipe, sim/schedule.h) keeps two copies of each
// model chunk, on ranks k and p-1-k: after both ranks' last ops the pair
// all-reduces its gradients (ring of 2 on the link between them), reported as
// copy_reduce_ns, before the data-parallel collectives below.
//
// After the pipeline, each stage's gradients are all-reduced across the
// data-parallel replicas (ring: 2(d-1) latency + 2(d-1)/d · bytes/bandwidth,
// on the intra-node link when the whole group is in one node, else the
// inter-node link), starting when that rank's last op ends; then the optimizer
// step. Replicas are identical; one is simulated. Replica r's rank k sits on
// GPU r·ranks + k.
//
// Sharded data parallelism (MemoryConfig::zero, docs/simulator.md):
//   level 1: a ring reduce-scatter of the gradients ((d-1) latency +
//     (d-1)/d · bytes/bandwidth) replaces the all-reduce, and a ring
//     all-gather of the updated parameters follows the optimizer step;
//   level 2: gradients are reduce-scattered as each backward produces them
//     (sharded gradients cannot accumulate over micro-batches), then the
//     parameter all-gather after the optimizer step;
//   level 3 (FSDP): before each F and each B (or I) the stage's parameters
//     are all-gathered layer by layer, and after each B (or W) its gradients
//     are reduce-scattered. Prefetch streams layer l+1's gather during layer
//     l's compute, so an op lasts the longer of its compute and its link
//     time: F max(f, ag), I max(i, ag), W max(w, rs), B max(b, ag + rs).
//     What exceeds compute is reported as sharding_exposed_ns; the gathered
//     parameters of two layers (the current and the prefetched one) are held
//     besides the shards. No all-reduce after the pipeline.
// The latency is paid (d-1) times per layer for per-op collectives.
//
// Tensor parallelism (ParallelLayout::tensor_parallel = t, docs/simulator.md
// "Tensor parallelism"): each rank is a group of t GPUs in one node that
// split every layer Megatron-style; one GPU of the group is simulated. Its
// op times carry the layer's tensor-parallel collectives on the intra-node
// link (sim/stage_costs.h), reported per rank as tp_comm_ns; weights,
// gradients and optimizer state divide by t (and by d on top under ZeRO).
// Placement is tp innermost, then pipeline, then data parallel (Megatron-LM's
// --use-tp-pp-dp-mapping order): GPU (r·ranks + k)·t + j is tensor rank j of
// rank k of replica r, so at t = 1 it is the placement above. Pipeline sends
// go from each GPU of a group to the same tensor rank of the next group,
// each on its own link at its per-GPU bytes; a data-parallel group joins the
// same tensor rank of every replica. Both therefore see the node as holding
// gpus_per_node / t groups.
//
// Context parallelism (ParallelLayout::context_parallel = cp, docs/simulator.md
// "Context parallelism"): each rank is a group of t x cp GPUs, cp of them
// holding s / cp of every sample's tokens; one GPU is simulated, its layers'
// costs / cp with the attention's K/V exchange (sim/stage_costs.h). Rank order
// t, cp, p, d (Megatron-LM's): GPU ((r·ranks + k)·cp + c)·t + j is tensor rank
// j of context rank c of pipeline rank k of replica r, so the node holds
// gpus_per_node / (t·cp) groups (a group past a node spans whole nodes). The
// cp GPUs hold the same weights: gradients reduce, and ZeRO shards spread,
// over the d·cp GPUs of the same tensor and pipeline rank
// (ParallelLayout::GradientReplicas); the global batch stays m·b·d samples.
//
// Time is integer ns; events tie-break by (time, insertion order), computed by a dataflow replay
// (docs/simulator.md section 4), so the same input gives the same output, bit for bit. No globals;
// Simulate() is a pure function and is safe to call from several threads.
#ifndef PIPECAST_SIM_SIMULATOR_H_
#define PIPECAST_SIM_SIMULATOR_H_

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "sim/cluster.h"
#include "sim/critical_path.h"
#include "sim/memory.h"
#include "sim/memory_timeline.h"
#include "sim/model.h"
#include "sim/partition.h"
#include "sim/schedule.h"
#include "sim/stage_costs.h"
#include "sim/training_config.h"

namespace pipecast {

// What Simulate() needs besides the model, the cluster and the schedule.
struct SimOptions {
  // The run's settings (sim/training_config.h): layout, micro-batch size,
  // memory, overlap, optimizer step. Its p, v and m, when stated, must
  // match the schedule replayed; t must divide the cluster's gpus_per_node.
  TrainingConfig config;
  // Layers of each virtual stage; empty = the partition config.partition's
  // rule makes, as the simulator tool and the planner make it
  // (DefaultPartition, sim/memory_partition.h: by default pipecast's
  // balanced split, on time among the splits that fit the GPU's memory).
  std::vector<StageLayers> partition;
  // Keep every op, transfer and memory change (needed for traces); off in
  // planner searches to save time and memory.
  bool record_timeline = true;
  // With record_timeline: also find the critical path (SimResult::critical_path), a walk back
  // over the records. Off: critical_path stays empty; the tools set it where they print or
  // write the path (docs/simulator.md "Critical path").
  bool critical_path = false;

  // config.Validate(), and the critical path without the timeline.
  [[nodiscard]] Status Validate() const;
};

struct OpRecord {
  int rank = 0;
  Action action;
  TimeNs start_ns = 0;
  TimeNs end_ns = 0;
};

struct TransferRecord {
  int src_rank = 0;
  int dst_rank = 0;
  int src_stage = 0;
  int dst_stage = 0;
  int microbatch = 0;
  bool gradient = false;  // false: activation going forward
  Bytes bytes = 0;
  TimeNs ready_ns = 0;  // producer ended
  TimeNs start_ns = 0;  // link became free
  TimeNs end_ns = 0;    // arrived
};

struct MemoryBreakdown {
  Bytes weights = 0;
  Bytes gradients = 0;
  Bytes optimizer = 0;
  Bytes activations_peak = 0;   // peak of the activation live set alone
  Bytes comm_buffers_peak = 0;  // peak of send + receive buffers alone
  Bytes workspace_peak = 0;
  // Extra weight versions PipeDream stashes for in-flight micro-batches
  // ((versions - 1) x weights); 0 for schedules with a flush.
  Bytes stashed_weights = 0;
  // ZeRO-3: the unsharded parameters of two layers (the largest of the
  // rank's), gathered for the running op and prefetched for the next; else 0.
  Bytes gathered_weights = 0;
  // FP8 training: the FP8 weight copies, a part of `weights` (0 without FP8).
  Bytes fp8_weights = 0;
};

struct StageResult {
  int rank = 0;
  std::vector<int> stages;          // virtual stages on this rank
  std::vector<StageLayers> layers;  // their layers, same order
  int64_t parameters = 0;           // of those stages, unsharded
  TimeNs busy_ns = 0;
  TimeNs first_start_ns = 0;
  TimeNs last_end_ns = 0;
  double bubble_ratio = 0;              // 1 - busy / pipeline span
  double bubble_fraction_of_ideal = 0;  // (span - busy) / busy
  int peak_inflight_microbatches = 0;   // (stage, micro-batch) activations held
  Bytes peak_memory_bytes = 0;          // static + peak of the live set
  bool fits_memory = true;              // peak <= SimResult::memory_limit_bytes (or unlimited)
  MemoryBreakdown memory;
  TimeNs allreduce_ns = 0;  // after the last op: all-reduce (ZeRO 0) or reduce-scatter (1)
  TimeNs allgather_ns = 0;  // ZeRO 1-2: parameter all-gather after the optimizer step
  // Bidirectional schedules: the all-reduce of the two parameter copies' gradients with rank
  // p-1-r, after both ranks' last ops and before allreduce_ns (docs/simulator.md); else 0.
  TimeNs copy_reduce_ns = 0;
  // ZeRO 2-3: time the per-op gathers and reduce-scatters added to this
  // rank's ops beyond their compute (inside busy_ns and the pipeline span).
  TimeNs sharding_exposed_ns = 0;
  // Tensor-parallel communication inside this rank's ops, per iteration
  // (inside busy_ns); 0 at t = 1.
  TimeNs tp_comm_ns = 0;
  // Of the gradient reduction, the time hidden behind the backward when
  // overlap_grad_reduce (allreduce_ns is the exposed rest), and its buckets.
  TimeNs allreduce_hidden_ns = 0;
  int grad_buckets = 0;
  TimeNs optimizer_ns = 0;         // this rank's optimizer step
  int weight_versions = 1;         // weight versions held at once (PipeDream: p - s)
  MemoryTimeline memory_timeline;  // when record_timeline
  // When memory.gradients join the rank's memory: 0, held the whole step; under
  // --sharded-state fsdp2 the end of the rank's first backward (B, or W where the backward is
  // split), from which they are held to the step's end. Not in memory_timeline.
  TimeNs gradients_from_ns = 0;

  // The static memory held the whole step: weights, stashed weight versions, ZeRO-3's gathered
  // copies, optimizer state, and the gradients unless they are made in the step.
  Bytes HeldAllStepBytes() const {
    return memory.weights + memory.stashed_weights + memory.gathered_weights + memory.optimizer +
           (gradients_from_ns > 0 ? 0 : memory.gradients);
  }
  // The gradients held at time `t` of the step.
  Bytes GradientsAt(TimeNs t) const { return t >= gradients_from_ns ? memory.gradients : 0; }
  // The gradients made in the step, not held from its start (0 when held the whole step).
  Bytes LateGradientsAt(TimeNs t) const { return gradients_from_ns > 0 ? GradientsAt(t) : 0; }
};

struct SimResult {
  std::string schedule_name;
  int ranks = 0;
  int stages = 0;
  int microbatches = 0;
  int microbatch_size = 0;
  int data_parallel = 1;
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;
  int context_parallel = 1;  // cp, with its algorithm
  CpAlgorithm cp_algorithm = CpAlgorithm::kRing;
  int expert_parallel = 1;  // ep and etp (docs/simulator.md "Expert parallelism")
  int expert_tensor_parallel = 1;
  ExpertDispatcher ep_dispatcher = ExpertDispatcher::kDeepEp;  // --ep-dispatcher
  // The expert-parallel all-to-alls of the busiest rank, with etp's
  // all-gathers and reduce-scatters, per iteration (0 at ep = etp = 1).
  TimeNs ep_comm_ns = 0;
  // The expert all-to-alls hide in overlapped F&B pairs
  // (TrainingConfig::ExpertOverlapOn), and the order is Megatron-LM's
  // combined 1F1B (TrainingConfig::CombinesForwardBackward).
  bool ep_overlap = false;
  bool ep_combined_1f1b = false;
  int64_t global_batch = 0;

  TimeNs iteration_ns = 0;         // pipeline span + all-reduce tail + optimizer + all-gather
  TimeNs pipeline_ns = 0;          // first op start to last pipeline op end
  TimeNs allreduce_ns = 0;         // longest per-rank all-reduce (or reduce-scatter)
  TimeNs allgather_ns = 0;         // longest per-rank parameter all-gather (ZeRO 1-2)
  TimeNs copy_reduce_ns = 0;       // longest per-rank copy_reduce_ns (bidirectional schedules)
  bool bidirectional = false;      // the schedule's paths run from both ends (DualPipe)
  TimeNs sharding_exposed_ns = 0;  // largest per-rank sharding_exposed_ns (ZeRO 2-3)
  TimeNs tp_comm_ns = 0;           // largest per-rank tp_comm_ns
  int zero = 0;                    // the ZeRO level simulated
  // FP8 training (MemoryConfig::fp8_recipe): the recipe, kNone without FP8,
  // and whether parameters are gathered in FP8.
  Fp8Recipe fp8_recipe = Fp8Recipe::kNone;
  bool fp8_param_gather = false;
  // How level 3 kept its shards (--sharded-state, MemoryConfig::sharded_state).
  ShardedState sharded_state = ShardedState::kZero;
  TimeNs optimizer_ns = 0;
  bool optimizer_estimated = false;     // optimizer_ns estimated from HBM bandwidth
  TimeNs allreduce_hidden_ns = 0;       // largest per-rank allreduce_hidden_ns
  bool overlap_grad_reduce = false;     // the gradient reduction overlapped the backward
  double bubble_ratio = 0;              // mean over ranks of 1 - busy/span (R1)
  double bubble_fraction_of_ideal = 0;  // sum idle / sum busy (Megatron, R2)
  // The zero-bubble paper's bubble rate (Qi et al. ICLR'24; sail-sg's simulator), R3: 1 - the
  // busiest rank's work / the longest per-rank span, from that rank's first op start to its
  // last op end; with equal stages 1 - m(F+B+W) / longest span. Unlike R1 it does not count
  // the fill before a late rank's first op, so skewed schedules (ZB-H2, ZB-V) score lower.
  double zb_bubble_rate = 0;
  double samples_per_s = 0;
  std::optional<double> tokens_per_s;
  std::optional<double> tflops_per_gpu;
  std::optional<double> mfu;
  Bytes memory_capacity_bytes = 0;  // exposed by the GPU; 0 = unlimited
  Bytes memory_reserve_bytes = 0;   // runtime reserve (CUDA context, cuBLAS, NCCL)
  double memory_headroom = 0;       // allocator margin, fraction of capacity
  Bytes memory_headroom_bytes = 0;  // the same in bytes
  // capacity - reserve - margin: what a rank's peak may reach; 0 = unlimited.
  Bytes memory_limit_bytes = 0;
  // With --memory-replay (sim/memory_replay.h; the simulator tool fills them
  // after the simulation): the replay's name ("" without one), and per GPU
  // what it gives as PyTorch reports it: max_memory_reserved with the cuBLAS
  // workspaces (DeviceMemory::ReservedBytes) and max_memory_allocated.
  std::string memory_replay;
  Bytes replay_reserved_peak_bytes = 0;
  Bytes replay_allocated_peak_bytes = 0;
  bool costs_measured = true;      // false when any cost was estimated or interpolated
  std::vector<std::string> notes;  // e.g. which costs were interpolated

  // Asynchronous schedules (PipeDream) simulate several iterations without a
  // flush; iteration and pipeline times are then the steady state:
  // (end of the last iteration - end of the first) / (iterations - 1).
  int iterations_simulated = 1;
  TimeNs first_iteration_ns = 0;  // PipeDream: the first, with its warm-up

  std::vector<StageResult> per_rank;
  // When record_timeline and SimOptions::critical_path: the chain of ops and
  // transfers that sets the pipeline's length.
  std::optional<CriticalPath> critical_path;
  // When record_timeline: rank by rank (ranks ascending), each rank's ops in
  // the order they run (its schedule list; every op starts when the one
  // before it ended or later), and the transfers by sending rank, each
  // rank's in the order it sends them (a link's FIFO order). Not sorted by
  // time across ranks: a consumer that needs that order sorts (the start
  // times tie often). The validator's measured results keep this order too.
  std::vector<OpRecord> ops;
  std::vector<TransferRecord> transfers;

  int64_t NumOps() const;
  // Whether every rank's peak is within memory_limit_bytes (or memory is unlimited).
  bool FitsMemory() const;
};

// Runs the simulation.
// REQUIRES: nothing; every precondition is checked.
// InvalidArgument for a bad option, partition or schedule (not a complete
// iteration), or a configuration whose stated p, v or m is not the
// schedule's; FailedPrecondition naming the cycle of waiting ops when the
// schedule's order can never finish.
Result<SimResult> Simulate(const Model& model, const Cluster& cluster, const Schedule& schedule,
                           const SimOptions& options);

// What a critical-path step was, for people: "2B5", "send act 0->1 mb3", "wait".
// REQUIRES: `step` is from result.critical_path.
std::string CriticalStepName(const SimResult& result, const CriticalStep& step);

}  // namespace pipecast

#endif  // PIPECAST_SIM_SIMULATOR_H_
