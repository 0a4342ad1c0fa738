// TrainingConfig: one training run's settings as one value — how the GPUs
// are laid out (ParallelLayout: t, sequence parallelism, p, d, v, and room
// for context and expert degrees), the batch, the schedule, the memory
// settings and the overlap switches. The simulator's options (SimOptions),
// the planner's candidates (Candidate) and the plan file (PlanFile) embed it
// whole; the tools fill it from their flags in one function
// (tools/training_flags.h). It is validated in one place, Validate(), and the
// rules that follow from it are derived here once: one GPU's share of the
// parameter bytes (PerGpuMemory), the stage-cost options
// (StageCostOptionsFor), the GPU count (ParallelLayout::Gpus) and whether the
// layout fits a node (CheckTensorParallelFitsNode).
//
// The GPU's memory limits (capacity, runtime reserve, allocator margin) are
// not here: they describe the GPU and live with the cluster (Cluster::gpu,
// formats/cluster_select.h applies --memory-gb, --memory-reserve-gb and
// --memory-headroom), which every plan embeds.
//
// A plain value: copy it freely; no method has side effects. Units: ns.
#ifndef PIPECAST_SIM_TRAINING_CONFIG_H_
#define PIPECAST_SIM_TRAINING_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/units.h"
#include "sim/cluster.h"
#include "sim/collectives.h"
#include "sim/memory.h"
#include "sim/partition.h"
#include "sim/schedule.h"
#include "sim/stage_costs.h"

namespace pipecast {

// The largest TrainingConfig::overlap_factor accepted: a pair twice as slow as its halves in
// turn.
inline constexpr double kMaxOverlapFactor = 2.0;
// The largest context-parallel degree accepted: 2 x cp chunks of a 16M-token
// sequence (kMaxSpecSequence) still hold one token each.
inline constexpr int kMaxContextParallel = 1 << 16;
// The largest expert-parallel and expert-tensor-parallel degrees accepted:
// kMaxSpecExperts (profiler/analytic.h), so one expert per GPU at most.
inline constexpr int kMaxExpertParallel = 1 << 16;

// How the GPUs of one run are laid out. Rank order t, cp, p, d (Megatron-LM's
// default order, tp-cp-ep-dp-pp with the pipeline outside the data-parallel
// groups folded in): the t GPUs of a tensor-parallel group are adjacent, the
// cp groups of t next, then the pipeline ranks, then the replicas
// (sim/simulator.h).
struct ParallelLayout {
  // t: GPUs of one node that split every layer of a stage, Megatron-style.
  int tensor_parallel = 1;
  // Megatron-LM --sequence-parallel over the t GPUs: layernorm and dropout
  // split over the sequence, activations / t. Only with t > 1.
  bool sequence_parallel = false;
  // p, pipeline ranks. 0: not stated; the simulator takes it from the
  // schedule it replays (a stated p must match it).
  int pipeline_stages = 0;
  int data_parallel = 1;  // d, replicas
  // v, model chunks per rank (2 for a V schedule). 0: not stated, as p.
  int chunks = 0;
  // cp: each sample's sequence split over cp GPUs (Megatron-LM
  // --context-parallel-size; docs/simulator.md "Context parallelism"):
  // activations and compute / cp, weights whole on each, gradients reduced
  // (and ZeRO shards spread) over the d x cp GPUs holding the same weights.
  int context_parallel = 1;
  // How the cp GPUs exchange keys and values (--cp-algorithm).
  CpAlgorithm cp_algorithm = CpAlgorithm::kRing;
  // Mixture-of-experts layers (docs/simulator.md "Expert parallelism"),
  // Megatron-LM's parallel folding: the experts are laid over the same
  // t x cp x d GPUs of a stage as etp x ep x edp, so etp x ep must divide
  // t x cp x d and edp = t x cp x d / (etp x ep). Dense layers ignore both.
  int expert_parallel = 1;         // ep: each GPU holds experts / ep of a layer's experts
  int expert_tensor_parallel = 1;  // etp: each expert split over etp GPUs
  // How the ep GPUs exchange tokens (--ep-dispatcher; sim/collectives.h):
  // DeepEP's kernels (one copy per destination rank or node) or Megatron-LM's
  // NCCL all-to-all (--moe-token-dispatcher-type alltoall: one row per
  // token and expert) or its all-gather (allgather: every token of the
  // etp x ep group gathered, the output reduce-scattered). Used only at
  // ep > 1.
  ExpertDispatcher expert_dispatcher = ExpertDispatcher::kDeepEp;

  // t x cp x d / (etp x ep): the GPUs holding the same experts, over which
  // expert gradients are reduced and their ZeRO shards spread (Megatron-LM's
  // expert-data-parallel group). REQUIRES: the folding rule above holds.
  int ExpertDataParallel() const {
    return static_cast<int>(int64_t{tensor_parallel} * context_parallel * data_parallel /
                            (int64_t{expert_parallel} * expert_tensor_parallel));
  }
  // ep x etp: the GPUs one layer's experts are spread over.
  int ExpertShards() const { return expert_parallel * expert_tensor_parallel; }

  // t x p x d x cp: the GPUs the layout occupies (experts reuse them).
  // REQUIRES: pipeline_stages > 0.
  int64_t Gpus() const {
    return int64_t{tensor_parallel} * pipeline_stages * data_parallel * context_parallel;
  }
  // d x cp: the GPUs holding the same weights, over which gradients are
  // reduced and ZeRO shards spread (Megatron-LM's data-parallel group with
  // context parallelism).
  int GradientReplicas() const { return data_parallel * context_parallel; }
};

// Whether the expert all-to-alls of one micro-batch hide behind another
// micro-batch's compute (--ep-overlap; docs/simulator.md "Expert all-to-all
// overlap"): auto lets the schedule decide (on for the kinds whose generator
// pairs a forward with a backward by design, DualPipe and DualPipeV; off
// elsewhere), on and off choose.
enum class ExpertOverlap { kAuto, kOn, kOff };
const char* ExpertOverlapName(ExpertOverlap overlap);  // "auto", "on", "off"
// "auto", "on" or "off"; nullopt for anything else.
std::optional<ExpertOverlap> ParseExpertOverlap(std::string_view name);

// The overlap switches: what runs beside what.
struct OverlapSettings {
  // Data-parallel gradient reduction overlapped with the backward in buckets
  // (Megatron-LM --overlap-grad-reduce; docs/simulator.md "Overlapped
  // gradient reduction"): each bucket's all-reduce (reduce-scatter at ZeRO 1)
  // starts when the last micro-batch's backward has produced it, on the
  // data-parallel link, while the rest of the backward runs; only the tail
  // past the rank's last op adds to the iteration. Off: one collective after
  // the rank's last op. Synchronous (flushing) schedules only.
  bool overlap_grad_reduce = true;
  // Parameters per bucket; 0 = Megatron-LM's default, max(40M, 1M x d)
  // (DistributedDataParallelConfig.bucket_size).
  int64_t grad_bucket_params = 0;
  // Megatron-LM --tp-comm-overlap: collectives chunked beside the matmuls
  // (sim/stage_costs.h states the model). Only with t > 1.
  bool tp_comm_overlap = false;
  // Overlapped F&B pairs (Action::overlapped, docs/simulator.md "Overlapped
  // F&B"): each half's tensor-parallel communication hides behind the other
  // half's compute (OverlappedPairNs), and what is left is scaled by
  // overlap_factor. 1: no further gain (at t = 1 the pair lasts F + B).
  // In (0, kMaxOverlapFactor].
  double overlap_factor = 1.0;
  // Expert all-to-alls hidden behind the other half of an overlapped F&B
  // pair (TrainingConfig::ExpertOverlapOn resolves auto). On with the 1F1B
  // kinds it is Megatron-LM's combined 1F1B
  // (--overlap-moe-expert-parallel-comm): TrainingConfig::
  // CombinesForwardBackward, CombineForwardBackward (sim/schedule.h).
  ExpertOverlap expert_overlap = ExpertOverlap::kAuto;
};

// The optimizer step's time.
struct OptimizerStep {
  // The step's time; 0 = estimated from HBM bandwidth when `estimate`
  // (docs/simulator.md, "Optimizer step"), else 0. --optimizer-step-us.
  TimeNs time_ns = 0;
  // With time_ns 0: estimate the step as the bytes Adam touches per
  // parameter (gradient read, main parameters and both moments read and
  // written, model parameters written: 30 bytes for bf16 / fp32 main
  // gradients / fp32 Adam) over 0.8 x the GPU's HBM bandwidth, per rank's
  // parameters (/ d with ZeRO >= 1). No estimate when the GPU has no
  // bandwidth. Off: the step costs 0.
  bool estimate = true;

  // InvalidArgument for a negative time (--optimizer-step-us).
  [[nodiscard]] Status Validate() const;
};

struct TrainingConfig {
  ParallelLayout layout;

  // --- The batch and the schedule.
  int microbatch_size = 1;  // samples per micro-batch
  // m, micro-batches per iteration. 0: not stated; the simulator takes it
  // from the schedule (a stated m must match it).
  int microbatches = 0;
  // The schedule's kind: what built the Schedule a simulation replays
  // (kCustom for a schedule text).
  ScheduleKind schedule = ScheduleKind::k1F1B;

  // --- Memory.
  // Activation recomputation (sim/stage_costs.h): off; selective (the
  // attention core, Korthikanti et al. 2022); full (Megatron-LM
  // --recompute-granularity full: each layer's input kept, layers rerun one
  // at a time in the backward); op (torchtitan's per-op policy); every:K
  // (torchtitan's every K-th block); full with a Megatron-LM method.
  Recompute recompute = Recompute::kOff;
  // K of every:K, Megatron-LM's --recompute-method and --recompute-num-layers
  // (CheckRecompute states which go together).
  RecomputeLayers recompute_layers;
  // Bytes per parameter by precision, main-gradient precision and optimizer,
  // and the ZeRO level over the d replicas (memory.zero); of whole
  // parameters, before the t-way split (PerGpuMemory()).
  MemoryConfig memory;

  OverlapSettings overlap;
  OptimizerStep optimizer_step;

  // --- The partition: the rule that splits the layers when no partition is
  // given (pipecast's balanced split, or Megatron-LM's even split and its
  // options; sim/partition.h, PartitionFor in sim/memory_partition.h).
  PartitionSetting partition;

  // InvalidArgument naming the flag that sets a field out of range or two
  // that contradict each other (--sequence-parallel or --tp-comm-overlap at
  // t = 1, a degree below 1, an overlap factor outside (0, 2], a byte count
  // or ZeRO level MemoryConfig::Validate refuses, a context degree below 1,
  // an expert degree below 1 or past kMaxExpertParallel, etp x ep not
  // dividing t x cp x d). The one check of these fields; the simulator calls it.
  [[nodiscard]] Status Validate() const;

  // What one GPU of a t-way group keeps per parameter: memory / t
  // (TensorParallelShare), at memory.zero.
  MemoryConfig PerGpuMemory() const;

  // Whether the expert all-to-alls hide in overlapped F&B pairs: --ep-overlap
  // on, or auto with a schedule whose generator makes the pairs by design
  // (ScheduleTraits::overlapped_pairs: dualpipe, dualpipev).
  bool ExpertOverlapOn() const;
  // True when the overlap is on and the schedule is 1F1B or interleaved
  // 1F1B: the run's order is Megatron-LM's combined 1F1B, which
  // CombineForwardBackward (sim/schedule.h) makes from the kind's lists.
  bool CombinesForwardBackward() const;
  // What an overlapped pair hides and its factor (OverlappedPairNs).
  PairOverlap Pairs() const {
    return PairOverlap{.factor = overlap.overlap_factor,
                       .expert_comm = ExpertOverlapOn(),
                       .combined_1f1b = CombinesForwardBackward()};
  }
  // InvalidArgument naming --ep-overlap when it is on where the run cannot
  // take it, as Megatron-LM refuses it (megatron/core/transformer/
  // transformer_config.py, docs/simulator.md): ep of 1, a schedule without
  // F&B pairs to make (other than 1f1b, interleaved, dualpipe, dualpipev,
  // custom), 1f1b over more than one stage (Megatron needs a virtual
  // pipeline), full recomputation with the combined 1F1B. Part of Validate.
  [[nodiscard]] Status CheckExpertOverlap() const;
};

// The stage-cost options a run with `config` on `cluster` uses: micro-batch
// size, recomputation and tensor parallelism, whose collectives run on the
// cluster's intra-node link (the t GPUs share a node). split_backward is the
// schedule's, left false here. The one way every part builds a cost table.
StageCostOptions StageCostOptionsFor(const TrainingConfig& config, const Cluster& cluster);
// The same with the tensor-parallel link given (the validator's probed link).
StageCostOptions StageCostOptionsFor(const TrainingConfig& config, const Link& tp_link);

// The link one hop of the context-parallel ring crosses: the intra-node link
// when a group's t x cp GPUs share a node (rank order t, cp, p, d), else the
// network's per-GPU share (Cluster::LinkBetween between nodes).
Link ContextParallelLink(const ParallelLayout& layout, const Cluster& cluster);

// InvalidArgument when t does not divide the GPUs of `cluster`'s node: a
// stage's tensor-parallel GPUs share a node.
[[nodiscard]] Status CheckTensorParallelFitsNode(int tensor_parallel, const Cluster& cluster);

}  // namespace pipecast

#endif  // PIPECAST_SIM_TRAINING_CONFIG_H_
