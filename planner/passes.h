// The planner's passes, one function each, in the order RunPlanner() chains
// them. Internal to the planner part (tests use them one by one).
#ifndef PIPECAST_PLANNER_PASSES_H_
#define PIPECAST_PLANNER_PASSES_H_

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "planner/planner.h"
#include "sim/memory_partition.h"

namespace pipecast::passes {

// Every candidate the options allow: p divides gpus and p <= layers; each
// schedule, micro-batch size, recomputation granularity (RecomputeModes()) and
// ZeRO level (the pinned ones, else 0, 1 and 3 when d > 1); m = global / (size
// * d). Sizes that do not divide the global batch become kBatchNotDivisible.
std::vector<Candidate> Enumerate(const Model& model, const Cluster& cluster,
                                 const PlannerOptions& options, int64_t global_batch,
                                 std::vector<Rejection>* rejected,
                                 std::vector<std::string>* notes = nullptr);

// The context-parallel degrees the search tries (PlannerOptions::context_parallel).
std::vector<int> ContextParallelDegrees(const Model& model, const PlannerOptions& options);
// The expert-parallel degrees the search tries (PlannerOptions::expert_parallel):
// the listed ones, else 1 for a model without MoE layers and, with them, every
// power of two up to N that divides every MoE layer's experts.
std::vector<int> ExpertParallelDegrees(const Model& model, const PlannerOptions& options);
// (ep, etp) pairs folded over a stage's `stage_gpus` = t x cp x d GPUs: those
// of the searched lists whose product divides stage_gpus.
std::vector<std::pair<int, int>> ExpertLayouts(const PlannerOptions& options, int64_t stage_gpus);
// The tensor-parallel degrees the search tries (PlannerOptions::tensor_parallel),
// with a note in `notes` (when given) for what limited them.
std::vector<int> TensorParallelDegrees(const Model& model, const Cluster& cluster,
                                       const PlannerOptions& options,
                                       std::vector<std::string>* notes);

// True when some layer profile gives attention_core_bytes > 0: selective
// recomputation has something to drop.
bool HasAttentionCore(const Model& model);
// The recomputation granularities `mode` searches for `model`: one when
// pinned; auto gives off, selective and full, less selective when
// !HasAttentionCore(model) (it would be off at a higher price).
std::vector<RecomputeChoice> RecomputeModes(const Model& model, const PlannerOptions& options);
// True when some layer profile gives op_saved_bytes: per-op recomputation can
// be costed, and auto searches it.
bool HasOpPolicy(const Model& model);

// The activation micro-batches stage s of p holds at its peak under a schedule
// with m micro-batches, from the schedule's traits row (sim/schedule_traits.h):
// naive 1, GPipe m, 1F1B and PipeDream min(p - s, m), ZB-H1 min(p, m)
// (deferred W ops keep activations), ZB-H2 min(2p-1, m).
int InflightMicrobatches(ScheduleKind schedule, int stage, int p, int m);

// Estimated peak bytes of layers [first, last] as stage `stage` of the
// candidate: static state sharded at the candidate's ZeRO level (with the
// gathered parameters at level 3) + in-flight activations + workspace + comm
// buffers. The simulate pass checks the exact, simulated peak afterwards.
Bytes EstimateStageMemory(const Model& model, const Cluster& cluster, const Candidate& c, int stage,
                          int first, int last);

// One stage's peak memory by part, for the explanations of rejections.
using MemoryParts = StageMemoryParts;

// The largest part of `parts` and what would shrink it for `c`, e.g.
// "largest part: optimizer state 38.4 GiB — try --zero 1 (Megatron's
// distributed optimizer keeps 1/d of it)".
std::string BindingPart(const MemoryParts& parts, const Candidate& c);

// One kind of op on a rank and how many times its list runs it (CountRankOps): an op alone, or
// an overlapped pair, counted by its forward (stage, OpKind::kForward) with `partner` its
// backward's stage and `partner_kind` that backward's kind (B or I).
struct RankOpCount {
  int stage = 0;
  OpKind kind = OpKind::kForward;
  int partner = -1;  // -1: the op runs alone
  OpKind partner_kind = OpKind::kBackward;
  int64_t count = 0;
};
// Per rank, the ops of `c`'s schedule (as SetUpCandidate builds it) counted by kind, for a
// candidate with overlapped F&B pairs (dualpipe, dualpipev, the combined 1F1B); empty for
// others, and for the kinds whose order comes from the stage costs.
std::vector<std::vector<RankOpCount>> CountRankOps(const Candidate& c);

// What the partition and prune passes reuse across candidates of one search:
// the stage-cost table per (micro-batch size, recomputation) and the
// time-balanced split per (size, recomputation, virtual stages). Not
// thread-safe; the passes that take it run on one thread.
class PartitionCache {
 public:
  // What a cost table depends on besides the model: micro-batch size,
  // recomputation, t, sequence parallelism, TP overlap, cp and its
  // algorithm, ep, etp and the expert dispatcher (the cluster's links are one
  // per run).
  using Key = std::tuple<int, Recompute, RecomputeLayers, int, bool, bool, int, CpAlgorithm, int,
                         int, ExpertDispatcher>;
  // `model` and `cluster` must outlive the cache.
  PartitionCache(const Model& model, const Cluster& cluster) : model_(model), cluster_(cluster) {}
  // A temporary would dangle: refused at compile time.
  PartitionCache(const Model&&, const Cluster&) = delete;
  PartitionCache(const Model&, const Cluster&&) = delete;
  // StageCostTable(model, StageCostOptionsFor(c.config, cluster)).
  const StageCostTable& Table(const Candidate& c);
  // Table() of every candidate of `candidates` made at once, the tables spread over `threads`
  // threads (each is a function of its key alone): the same tables as made one by one.
  void MakeTables(const std::vector<Candidate>& candidates, int threads);
  const std::vector<StageLayers>& TimeBalanced(const Candidate& c, int stages);
  // Table(c).Stage() of every layer at once: the whole model as one stage, for the bounds
  // before partitioning.
  const StageCost& Whole(const Candidate& c);
  // CountRankOps(c), kept per schedule shape (kind, p, m, v and whether F and B combine).
  const std::vector<std::vector<RankOpCount>>& RankOps(const Candidate& c);
  // OverlappedPairNs of `table`'s stages `f` (forward) and `b` (a backward of `b_kind`) under
  // `overlap`: a function of the table and the two layer ranges alone, which the candidates of
  // one table repeat (the split does not depend on d, m or ZeRO); under the layered rule each
  // is a two-stream replay of the pair's layers. REQUIRES: `table` is one of this cache's
  // (Table()), which live as long as it: the memo is keyed by its address.
  PairHalvesNs PairHalves(const StageCostTable& table, const StageCost& f, StageLayers f_layers,
                          const StageCost& b, StageLayers b_layers, OpKind b_kind,
                          const PairOverlap& overlap);

 private:
  const Model& model_;
  const Cluster& cluster_;
  std::map<Key, std::unique_ptr<StageCostTable>> tables_;
  std::map<std::pair<Key, int>, std::vector<StageLayers>> splits_;
  std::map<Key, StageCost> whole_;
  std::map<std::tuple<ScheduleKind, int, int, int, bool>, std::vector<std::vector<RankOpCount>>>
      rank_ops_;
  std::map<std::tuple<const StageCostTable*, int, int, int, int, OpKind, double, bool, bool>,
           PairHalvesNs>
      pair_halves_;
};

// Fills candidate.partition by its configuration's rule (PartitionFor,
// sim/memory_partition.h): balanced, the time-balanced split whose every
// stage fits in `capacity` (the memory limit, capacity - reserve - margin;
// 0 = unlimited); even, Megatron-LM's split; each at the candidate's per-GPU
// memory (TrainingConfig::PerGpuMemory). Returns false and fills `rejection`
// when no balanced split fits or the even split has a stage over (kOutOfMemory,
// with the closest miss and the part that binds), or the even split cannot be
// made (kScheduleConstraint, saying why). `cache`, when given, keeps the tables and
// time-balanced splits for the next candidates.
bool PartitionForMemory(const Model& model, const Cluster& cluster, Bytes capacity,
                        Candidate* candidate, Rejection* rejection,
                        PartitionCache* cache = nullptr);

// PartitionForMemory with the candidate's stage-cost table and, for the balanced rule, its
// time-balanced split (PartitionCache::TimeBalanced; null: made here) given: reads nothing
// else, so that the search runs it on several threads over the cache's tables.
bool PartitionWith(const Model& model, const StageCostTable& table,
                   const std::vector<StageLayers>* time_balanced, Bytes capacity,
                   Candidate* candidate, Rejection* rejection);

// The most configurations a search enumerates. Each is held in memory while
// the search runs (a 240-byte candidate, about 1 KB with its rejection:
// DeepSeek-V3 on 2048 GPUs, 134,004 configurations in 140 MB), and only those
// whose bound reaches the top are partitioned (about 14 us each): 500 000 is
// about 0.5 GB (100 000 before issue 26, when a candidate was 816 bytes and
// every one was partitioned). Past it the planner refuses at once, before
// allocating anything (a list flag of 10^4 values once ran into
// std::bad_alloc and std::terminate after 8-28 s).
inline constexpr int64_t kMaxConfigurations = 500'000;

// How many configurations Enumerate() will produce, rejected ones included,
// without producing them (saturating at INT64_MAX); with both partition rules
// an upper count (a one-stage layout is tried once, and a batch that does not
// divide is one rejection for both rules).
int64_t CountConfigurations(const Model& model, const Cluster& cluster,
                            const PlannerOptions& options);

// The largest simulation a search runs, in ops and transfers (the engine's
// events): 2^23, about 0.5 GB of the engine's tables and a second or two of
// simulation on one core, so that the search, which simulates on two
// threads, stays near 1 GB. 1024 stages x 1024 micro-batches of ZB-H1 is
// 5.2 million. Larger candidates are rejected unsimulated, saying so, and the
// micro-batch sweep stops below the bound; the simulator runs them alone.
inline constexpr int64_t kMaxSearchEvents = int64_t{1} << 23;

// An upper estimate of the events `c`'s simulation has, computed without
// building its schedule (generating one can itself take long): each of the
// p·v virtual stages runs F and B (or F, I and W) per micro-batch, and each
// stage boundary carries an activation and a gradient per micro-batch;
// PipeDream's steady state is simulated over its iterations.
int64_t SimulationEvents(const Candidate& c);

// A lower bound on `c`'s simulated iteration (docs/planner.md, "prune"), from its partition and
// `table` (the candidate's stage-cost table, PartitionCache::Table). With overlapped pairs a
// rank's work counts its schedule's own ops (CountRankOps), kept in `cache` when given.
TimeNs LowerBound(const StageCostTable& table, const Candidate& c, PartitionCache* cache = nullptr);

// A lower bound on `c`'s simulated iteration whatever its partition: at most LowerBound() for
// every split of the layers (docs/planner.md, "Bounds before partitioning"): the busiest rank's
// work at least the average, every layer's F + B (or, with overlapped pairs, its communication,
// whichever is more) times the micro-batches that run it, over p ranks; for gpipe and 1f1b, the
// fill and tail weighted over the ranks, T / (1 - (1 - 1/m)^p); naive m·T. 0 where it cannot
// tell (a chunked recomputation's rerun).
// `whole`: table.Stage() of every layer (PartitionCache::Whole), computed when not given.
TimeNs UnpartitionedLowerBound(const StageCostTable& table, const Candidate& c,
                               const StageCost* whole = nullptr);

// A lower bound on the bytes of weights, gradients and optimizer state that `c`'s fullest rank
// holds, whatever its partition: the whole model's (twice for a bidirectional schedule's two
// copies), sharded as the simulator shards them (TrainingConfig::PerGpuMemory, the gradient
// replicas, the expert shards), averaged over the p ranks, less the per-stage rounding. Every
// rank's estimated and simulated peak include these bytes, so a candidate whose floor is over
// the memory limit cannot fit in any split.
Bytes StaticMemoryFloor(const StageCostTable& table, const Candidate& c,
                        const StageCost* whole = nullptr);

// What SearchInBoundOrder() leaves: the candidates simulated that fit (unranked) and how many
// were simulated.
struct SearchOutcome {
  std::vector<Candidate> fitting;
  int simulated = 0;
};

// The partition, prune and simulate passes over `candidates` in lower-bound order, best first
// (docs/planner.md, "Bounds before partitioning"): each candidate is first bounded without a
// partition (UnpartitionedLowerBound) and rejected as out of memory when its StaticMemoryFloor
// is over the limit; a candidate is partitioned (PartitionForMemory) only when its bound reaches
// the front, then bounded again with its partition (the larger bound kept) and queued for the
// simulator; the simulator takes the front's partitioned candidates in chunks of 16 over
// `options.threads`. Once top_k + 1 fitting candidates are simulated, the search stops at the
// first bound over the (top_k + 1)-th best iteration: what is left cannot enter the top, and
// goes to `rejected` as kPruned, saying whether it was partitioned. Candidates that tie in bound
// go in enumeration order. The outcome (the fitting candidates' set, and so the ranking) does
// not depend on the thread count, and the top_k + 1 best are those of simulating every candidate.
SearchOutcome SearchInBoundOrder(const Model& model, const Cluster& cluster,
                                 const PlannerOptions& options, std::vector<Candidate> candidates,
                                 PartitionCache* cache, std::vector<Rejection>* rejected);

// Fills lower_bound_ns for each candidate and sorts by it (ties by label).
// The bound never exceeds the candidate's simulated iteration: from the
// schedule's own placement, paths and traits (ScheduleShape, TraitsOf), each
// rank k runs its work W_k (m_s·(F+B) over its stages) after the forwards
// that reach its first stage, then, for gpipe and 1f1b, the backwards of the
// stages before it; naive m·sum of F+B; pipedream the busiest W_k. F and B
// are the stage-cost table's, less the tensor-parallel collectives for kinds
// whose overlapped pairs hide them (docs/planner.md, "prune").
void Prune(const Model& model, const Cluster& cluster, std::vector<Candidate>* candidates,
           PartitionCache* cache = nullptr);

// Simulates candidates in lower-bound order, in fixed chunks spread over
// `options.threads` threads, until the next lower bound exceeds the
// iteration time of the (top_k+1)-th best fitting candidate so far: the rest
// cannot enter the top and go to `rejected` as kPruned. Candidates whose
// simulated peak memory exceeds the capacity go to `rejected` as
// kOutOfMemory (over MemoryLimitBytes). The outcome does not depend on the
// thread count.
// Before each candidate is simulated its memory floor (SimulatedMemoryFloor) is checked: over
// the limit, it is rejected as kOutOfMemory unsimulated (Rejection::memory_floor). `cache`,
// when given, lends the floors its tables.
void SimulateAll(const Model& model, const Cluster& cluster, const PlannerOptions& options,
                 std::vector<Candidate>* candidates, std::vector<Rejection>* rejected,
                 PartitionCache* cache = nullptr);

// A floor on the peak memory the simulator finds for `c` run as `schedule` (SetUpCandidate's),
// on its fullest rank: per rank the weights, gradients and optimizer state as Simulate() shards
// them, ZeRO-3's gathered parameters, and the activations and workspace of its ops at their
// fullest, replayed in the rank's list order (an op adds ActivationsAtStart and its workspace
// when it starts and frees ActivationsFreedAtEnd and its workspace when it ends). The engine's
// memory sweep applies the same changes in the same order, with communication buffers, which
// only add, between them; so every rank's simulated peak (StageResult::peak_memory_bytes) is at
// least its floor here (docs/planner.md, "The memory floor before simulating"). `parts` is the
// fullest rank's, for BindingPart. Zero when the partition does not match the schedule.
struct MemoryFloor {
  Bytes bytes = 0;
  int rank = 0;
  MemoryParts parts;
};
// `table`: the candidate's stage-cost table (PartitionCache::Table), made when not given.
MemoryFloor SimulatedMemoryFloor(const Model& model, const Cluster& cluster, const Candidate& c,
                                 const Schedule& schedule, const StageCostTable* table = nullptr);

// The out-of-memory rejection of simulated `c` (its result's peak over `capacity`): the worst
// rank's simulated peak and the part that binds.
Rejection SimulatedOutOfMemory(Candidate c, Bytes capacity);

// The out-of-memory rejections whose figures are a memory floor (Rejection::memory_floor) and
// that the report shows (the closest miss and the examples, GroupRejections()), simulated so
// that their words and ratio are the simulated ones, until every one shown is simulated: the
// report is that of simulating every candidate the search sent to the simulator.
void SettleShownMemoryFloors(const Model& model, const Cluster& cluster,
                             std::vector<Rejection>* rejected);

// Best throughput first; ties: less peak memory, then fewer stages, then label.
void Rank(std::vector<Candidate>* candidates);

// The chosen layout at other micro-batch counts (1, 2, 4, ... up to 4x the
// chosen m, plus the chosen m itself), same p, d, size, schedule, partition.
std::vector<SweepPoint> Sweep(const Model& model, const Cluster& cluster,
                              const PlannerOptions& options, const Candidate& chosen);

}  // namespace pipecast::passes

#endif  // PIPECAST_PLANNER_PASSES_H_
