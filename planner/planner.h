// Planner: searches tensor-parallel, pipeline and data-parallel degrees
// (t x p x d = N), sequence parallelism, partition, schedule, micro-batch size and
// count, and activation recomputation for a model on N GPUs, and ranks what
// fits by simulated throughput (docs/planner.md).
//
// The search is a chain of named passes, each in its own file and testable
// alone:
//   enumerate  (enumerate.cc)  every (t, sp, p, d, schedule, micro-batch size,
//                              count, recompute) the GPU count, node and global
//                              batch allow
//   partition  (partition_pass.cc) memory-aware balanced split of the layers;
//                              rejects what cannot fit even when balanced for memory
//   prune      (prune.cc)      orders candidates by a lower bound on iteration
//                              time and drops those that cannot reach the top K
//   simulate   (simulate_pass.cc) runs the simulator on every survivor, on
//                              all cores; rejects what the simulated peak memory
//                              does not fit
//   rank       (rank.cc)       best throughput first; ties to less memory
//   sweep      (sweep.cc)      the chosen layout at other micro-batch counts
// RunPlanner() runs them in that order, partition, prune and simulate
// interleaved in lower-bound order (search_pass.cc: a candidate is bounded
// before it is partitioned, and partitioned and simulated only when its bound
// reaches the front). Libraries never print; see
// explain.h for the text and JSON views of a PlanReport.
//
// Thread-safety: RunPlanner may use several threads internally; the result is
// the same whatever the thread count.
#ifndef PIPECAST_PLANNER_PLANNER_H_
#define PIPECAST_PLANNER_PLANNER_H_

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/heap_optional.h"
#include "base/status.h"
#include "sim/cluster.h"
#include "sim/memory.h"
#include "sim/model.h"
#include "sim/partition.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/training_config.h"

namespace pipecast {

// What the search tries: auto searches off, selective (skipped when the model
// has no attention core to drop), full and op (only when the model gives the
// per-op policy's fields, op_saved_bytes); kOff, kSelective and kFull pin
// one; kListed tries PlannerOptions::recompute_listed.
enum class RecomputeMode { kAuto, kOff, kSelective, kFull, kListed };

// One recomputation the search tries: its mode and numbers (every:K,
// Megatron-LM's method).
struct RecomputeChoice {
  Recompute recompute = Recompute::kOff;
  RecomputeLayers layers;
  auto operator<=>(const RecomputeChoice&) const = default;
};

// Where a search stands, for a progress display: `done` of `total`
// configurations through the partition pass (partitioned, or rejected for their
// static memory, in lower-bound order), then `done` of `total` partitioned ones
// through the simulate pass, then `done` of `total` micro-batch counts of the
// chosen layout through the sweep. Each pass ends with done == total.
struct SearchProgress {
  enum class Pass { kPartition, kSimulate, kSweep };
  Pass pass = Pass::kPartition;
  int done = 0;
  int total = 0;
  // Of `done`, those not partitioned (partition pass) or not simulated: configurations whose
  // lower bound cannot reach the top, sweep points over the search's simulation limit.
  int pruned = 0;
};

struct PlannerOptions {
  int gpus = 0;              // N, required
  int64_t global_batch = 0;  // 0: the model's global_batch
  // Empty: every built-in schedule except pipedream, which changes training
  // semantics and is searched only when named.
  std::vector<ScheduleKind> schedules;
  // Chunks per GPU tried for interleaved and looped-bfs schedules.
  std::vector<int> chunks = {2};
  std::vector<int> microbatch_sizes;               // empty: the sizes the model was measured at
  RecomputeMode recompute = RecomputeMode::kAuto;  // see RecomputeMode
  std::vector<RecomputeChoice> recompute_listed;   // with kListed, in order
  // ZeRO levels tried (MemoryConfig::zero); empty: 0, 1 and 3 when d > 1
  // (plain, Megatron's distributed optimizer, FSDP), 0 alone when d = 1.
  std::vector<int> zero_levels;
  // How ZeRO 2 and 3 run (ShardingConfig, sim/memory.h) and which settings the
  // search tries (docs/planner.md, "Sharded data parallelism"). kAuto tries
  // both; kOn and kOff pin one. The defaults search resharding after the
  // forward at ZeRO 3 (FSDP FULL_SHARD against SHARD_GRAD_OP) and, where the
  // replicas span nodes, hybrid sharding inside a node (HSDP); they keep
  // prefetch on and a reduce-scatter every micro-batch.
  enum class Choice { kAuto, kOn, kOff };
  struct ShardingSearch {
    Choice reshard_after_forward = Choice::kAuto;
    Choice reduce_every_microbatch = Choice::kOn;
    bool prefetch = true;
    // Replicas per shard group: -1 searches all d and, where the replicas span
    // nodes, those of one node; 0 pins all d; N > 0 pins N (candidates whose
    // d it does not divide are rejected).
    int shard_group = -1;
  };
  ShardingSearch sharding;
  int top_k = 3;  // runners-up kept, besides the choice
  // What every candidate's configuration shares (sim/training_config.h):
  // bytes per parameter (each candidate sets its own ZeRO level in it), the
  // overlap switches (tp_comm_overlap applies to every t > 1) and the
  // optimizer step.
  MemoryConfig memory;
  OverlapSettings overlap;
  OptimizerStep optimizer_step;
  int threads = 0;  // 0: every core
  // Called on the searching thread after each partitioned configuration and
  // each chunk of simulations; empty: no progress. It must not throw.
  std::function<void(const SearchProgress&)> progress;
  // Tensor-parallel degrees tried; empty: every t that divides the node's
  // GPUs, N and the model's attention heads (and key-value heads) where its
  // source.architecture gives them, for which the model has tensor-parallel
  // costs (per-t profiles or tp_comm_bytes, docs/planner.md).
  std::vector<int> tensor_parallel;
  // Context-parallel degrees tried (--context-parallel); empty: 1 below
  // kContextParallelFromTokens tokens per sample, and from there every power
  // of two cp whose 2 x cp divides the sequence and whose t x cp x p x d can
  // make N, where the model gives the attention shape (docs/planner.md).
  std::vector<int> context_parallel;
  // Expert-parallel degrees ep to try; empty: 1 for a dense model, and for an
  // MoE model every power of two up to N dividing its layers' experts
  // (docs/planner.md). Each (ep, etp) pair is tried where etp x ep divides a
  // stage's t x cp x d GPUs (Megatron-LM's parallel folding).
  std::vector<int> expert_parallel;
  // Expert-tensor-parallel degrees etp to try; empty: 1.
  std::vector<int> expert_tensor_parallel;
  CpAlgorithm cp_algorithm = CpAlgorithm::kRing;  // --cp-algorithm, for every cp > 1
  // Sequence parallelism at t > 1: auto tries off and on; on or off pins it.
  enum class SequenceParallel { kAuto, kOff, kOn };
  SequenceParallel sequence_parallel = SequenceParallel::kAuto;
  // p pinned (--pipeline-stages or --stages, Megatron's
  // --pipeline-model-parallel-size); 0: searched.
  int pipeline_stages = 0;
  int data_parallel = 0;  // d pinned; 0: searched
  int microbatches = 0;   // m pinned; 0: every m the global batch allows
  // The partition rules searched (--partition): balanced (pipecast's, the
  // default), even (Megatron-LM's, with `even`'s first/last-stage counts), or
  // both, each configuration tried with each (sim/partition.h).
  std::vector<PartitionRule> partition_rules = {PartitionRule::kBalanced};
  EvenSplitOptions even;
  // The expert all-to-all overlaps tried (--ep-overlap; OverlapSettings::
  // expert_overlap): auto alone by default (the schedule decides: on for
  // dualpipe and dualpipev), one pinned, or off and on ("both"), each
  // configuration tried with each. With more than one, on is tried only where
  // the configuration can take it (TrainingConfig::CheckExpertOverlap); with
  // on alone, the others are rejected with its reason.
  std::vector<ExpertOverlap> expert_overlaps = {ExpertOverlap::kAuto};
  // The expert dispatchers tried at ep > 1 or etp > 1 (--ep-dispatcher;
  // ParallelLayout::expert_dispatcher): DeepEP's alone by default,
  // Megatron-LM's all-to-all pinned, or both, each such configuration tried
  // with each. At ep = etp = 1 (nothing moves) a configuration is tried
  // once, with the first. The model's layer costs are the same for every
  // candidate: a profile made for one dispatcher (profiler analytic
  // --moe-dispatcher) is warned about when another is searched
  // (docs/planner.md).
  std::vector<ExpertDispatcher> expert_dispatchers = {ExpertDispatcher::kDeepEp};

  Status Validate() const;
};

// One configuration the search considers.
struct Candidate {
  // Everything the search chose (t, sequence parallelism, p, d, v, the
  // micro-batch size and count, the schedule, recomputation and the ZeRO
  // level in config.memory.zero), with every layout field stated, and what
  // PlannerOptions gives every candidate (memory, overlap, optimizer step).
  // By default p = v = m = 1.
  TrainingConfig config = [] {
    TrainingConfig c;
    c.layout.pipeline_stages = c.layout.chunks = c.microbatches = 1;
    return c;
  }();
  std::vector<StageLayers> partition;  // filled by the partition pass
  TimeNs lower_bound_ns = 0;           // filled by the prune pass
  // Filled by the simulate pass; on the heap, since a search holds many candidates and
  // simulates few (base/heap_optional.h).
  HeapOptional<SimResult> result;

  // "p=4 d=2 1f1b mbs=2 m=16 recompute=off zero=1", "interleaved v=2";
  // with tensor parallelism prefixed "t=8 sp " (or "t=8 ").
  std::string Label() const;
  int VirtualStages() const { return config.layout.pipeline_stages * config.layout.chunks; }
  // Stages of the model partition: VirtualStages(), or p for a bidirectional schedule (DualPipe),
  // whose virtual stage p+k is a second copy of model stage k.
  int ModelStages() const;
  Bytes PeakMemory() const;  // largest per-rank peak; REQUIRES: result
};

// Why a candidate (or a group of them) was not chosen.
enum class RejectReason {
  kBatchNotDivisible,   // global batch not a multiple of size x d
  kOutOfMemory,         // no partition fits in memory (partition or simulate pass)
  kPruned,              // its lower bound cannot reach the top K
  kSimulationError,     // the simulator refused it
  kScheduleConstraint,  // the schedule cannot run this shape (m vs p, layers vs p·v, no W split)
};
const char* RejectReasonName(RejectReason reason);

struct Rejection {
  Rejection() = default;
  Rejection(RejectReason why, Candidate rejected, std::string said, double ratio = 0)
      : reason(why), candidate(std::move(rejected)), detail(std::move(said)), memory_ratio(ratio) {}

  RejectReason reason = RejectReason::kScheduleConstraint;
  Candidate candidate;
  // "stage 0 needs 97.3 GiB of the 73.3 GiB limit; largest part: optimizer state 38.4 GiB —
  // try --zero 1". Read it with Detail(): empty for a candidate the bound-order search pruned,
  // whose words `pruned` keeps.
  std::string detail;
  // For kOutOfMemory: needed / capacity of the worst stage, for "closest miss".
  double memory_ratio = 0;
  // For kOutOfMemory: `detail` and `memory_ratio` are a floor on the simulated peak
  // (passes::SimulatedMemoryFloor), the candidate not simulated; RunPlanner simulates those the
  // report shows, which then hold the simulated figures.
  bool memory_floor = false;
  // A candidate the bound-order search pruned (kPruned; top > 0): its bound is
  // candidate.lower_bound_ns, over `top_ns`, the iteration time of the `top`-th best found. Its
  // detail is made only when read: a search prunes tens of thousands (DeepSeek-V3 on 2048 GPUs:
  // 71,029) and the report prints one or four.
  struct Pruned {
    TimeNs top_ns = 0;
    int top = 0;               // 0: not pruned by the search; `detail` says why
    bool partitioned = false;  // bounded with its partition, or before partitioning
  };
  Pruned pruned;
  // A kPruned rejection whose detail is made when read.
  static Rejection PrunedBelow(Candidate c, Pruned pruned) {
    Rejection r(RejectReason::kPruned, std::move(c), std::string());
    r.pruned = pruned;
    return r;
  }

  // What was wrong: `detail`, or a pruned candidate's bound against the top's iteration time.
  std::string Detail() const;
};

// One point of the micro-batch count trade-off for the chosen layout.
struct SweepPoint {
  int microbatches = 0;
  int64_t global_batch = 0;
  TimeNs iteration_ns = 0;
  double samples_per_s = 0;
  double bubble_ratio = 0;
  double bubble_fraction_of_ideal = 0;
  Bytes peak_memory_bytes = 0;
  bool fits = true;
};

// --compare-to (planner/compare.h): a configuration the user gives (a published run's, a
// framework's), searched alone with the search's own passes, against the choice.
struct ConfigurationComparison {
  std::string given;  // as the user gave it: words or a plan file's path
  // The compared configuration as simulated, when it runs (fits, its batch divides).
  std::optional<Candidate> compared;
  // Why it does not run, when it does not: the pinned search's first rejection.
  std::string why_not;
  // The choice is the compared configuration (same label): nothing to beat.
  bool same_as_choice = false;
  // The choice's samples/s over the compared configuration's, less 1 (0.25: 25% faster).
  double expected_gain = 0;
};

struct PlanReport {
  int gpus = 0;
  int64_t global_batch = 0;
  Cluster cluster;
  std::vector<Candidate> ranked;  // fits in memory, best first; [0] is the choice
  std::vector<Rejection> rejected;
  std::vector<SweepPoint> sweep;  // for ranked[0]
  int enumerated = 0;
  int simulated = 0;
  std::vector<std::string> notes;  // interpolated costs, assumptions
  // When nothing fits: what would (more GPUs, recompute, smaller micro-batches).
  std::vector<std::string> suggestions;
  std::optional<ConfigurationComparison> comparison;  // --compare-to

  bool Feasible() const { return !ranked.empty(); }
};

// The global batch a search divides: --global-batch (options.global_batch)
// when given, else the model file's global_batch. InvalidArgument naming
// both ways to give one when neither does: there is no default, since the
// global batch is the training recipe's choice (it sets the optimizer's
// step), not something a plan may pick. Tools check it before they search.
Result<int64_t> GlobalBatchFor(const Model& model, const PlannerOptions& options);

// Runs every pass. InvalidArgument for bad options (gpus < 1, no global batch
// (GlobalBatchFor), a global batch that no micro-batch size divides, unknown
// sizes). When nothing fits the
// result is OK with ranked empty, rejected and suggestions filled.
Result<PlanReport> RunPlanner(const Model& model, const Cluster& cluster,
                              const PlannerOptions& options);

// InvalidArgument when the tensor-parallel degrees to try (--tensor-parallel)
// cannot run on `gpus` GPUs (each t must be at least 1 and divide N: t x p x
// d = N), or when --sequence-parallel on or --tp-comm-overlap needs a t above
// 1 that the list does not allow. The one check of these flags, for
// PlannerOptions::Validate and the planner tool's usage check.
// The sequence length from which the planner searches context parallelism by
// itself: Megatron-LM recommends it from 8k tokens (docs/planner.md).
inline constexpr int kContextParallelFromTokens = 8192;

// InvalidArgument when a context-parallel degree to try (--context-parallel)
// is below 1 or does not divide `gpus` (t x cp x p x d = N).
[[nodiscard]] Status CheckContextParallelChoices(const std::vector<int>& context_parallel,
                                                 int gpus);

[[nodiscard]] Status CheckTensorParallelChoices(const std::vector<int>& tensor_parallel, int gpus,
                                                PlannerOptions::SequenceParallel sequence_parallel,
                                                bool tp_comm_overlap);

// The SimOptions that replay a candidate exactly: its configuration and
// partition.
SimOptions CandidateSimOptions(const Candidate& candidate);

// What replays a candidate: its schedule and its SimOptions
// (CandidateSimOptions, record_timeline as asked).
struct CandidateSetup {
  Schedule schedule;
  SimOptions options;
};
// The cost-driven kinds (zb-auto, zb-v-auto) are built from the candidate's stage costs under
// the micro-batch activations every rank can afford beside its static memory, at most m
// (docs/planner.md). Fails, unprefixed, when the schedule cannot be built for the candidate's
// shape.
[[nodiscard]] Result<CandidateSetup> SetUpCandidate(const Model& model, const Cluster& cluster,
                                                    const Candidate& candidate,
                                                    bool record_timeline);

// Candidate -> schedule + options -> simulation: the one way every pass and
// tool simulates a candidate. Errors come from MakeSchedule or Simulate, unprefixed.
[[nodiscard]] Result<SimResult> SimulateCandidate(const Model& model, const Cluster& cluster,
                                                  const Candidate& candidate, bool record_timeline);

}  // namespace pipecast

#endif  // PIPECAST_PLANNER_PLANNER_H_
