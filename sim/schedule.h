// Schedule: the ordered list of compute actions each pipeline rank (GPU)
// executes in one training iteration.
//
// Actions follow PyTorch pipelining's notation `<stage><kind><microbatch>`:
// `stage` is the *virtual* stage (model chunk) index, 0..num_stages-1, kinds
// are F (forward), B (whole backward), I (input-gradient backward) and W
// (weight-gradient backward). With one chunk per rank, stage == rank. With v
// chunks per rank, num_stages = v * num_ranks and `stage_rank` says which rank
// owns each virtual stage.
//
// Paths. A micro-batch runs the forwards of a run of consecutive virtual
// stages, first to last, and the backwards the other way. Normally every
// micro-batch runs all of them, 0..num_stages-1. A bidirectional schedule
// (DualPipe, Schedule::bidirectional) has two paths: num_stages = 2p, direction
// a (micro-batches [0, m/2), entering at rank 0) runs stages 0..p-1 and
// direction b (micro-batches [m/2, m), entering at rank p-1) runs stages
// p..2p-1; stage p+k is model chunk k again, a second copy of its parameters.
// Every rule about the first, last, previous or next stage asks the Schedule's
// path methods (IsFirstStage, IsLastStage, OnPath) instead of 0 and
// num_stages-1.
//
// The built-in generators implement the schedules of docs/schedules.md;
// each cites its source next to its code.
#ifndef PIPECAST_SIM_SCHEDULE_H_
#define PIPECAST_SIM_SCHEDULE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/units.h"

namespace pipecast {

enum class OpKind : uint8_t { kForward, kBackward, kBackwardInput, kBackwardWeight };
char OpKindLetter(OpKind kind);  // F, B, I, W

// Iterations simulated for PipeDream's asynchronous steady state: the first
// holds the warm-up, the later ones repeat the steady state.
inline constexpr int kPipeDreamIterations = 4;

struct Action {
  int stage = 0;  // virtual stage
  OpKind kind = OpKind::kForward;
  int microbatch = 0;
  // True for both halves of an overlapped F&B op (PyTorch's `(0F7;7B3)OVERLAP_F_B`,
  // DualPipe's chunk overlap): a forward and, next on its rank's list, a backward (B or I) of
  // another (stage, micro-batch), run together. ValidateSchedule checks the pairs. The
  // simulator replays a pair as its two halves back to back, each lasting OverlappedPairNs'
  // share (sim/stage_costs.h; docs/simulator.md, "Overlapped F&B").
  bool overlapped = false;
  bool operator==(const Action&) const = default;
};
std::string ActionName(const Action& action);  // e.g. "2B5"
struct Schedule;
// The name the schedule text gives it: ActionName, or for a bidirectional schedule the
// direction and its local stage and micro-batch ("b3F0": direction b, its stage 3 = virtual
// stage p+3, its micro-batch 0 = micro-batch m/2).
std::string ActionName(const Schedule& schedule, const Action& action);

enum class ScheduleKind {
  kNaive,            // "naive": one micro-batch at a time through the pipeline
  kGPipe,            // "gpipe": all forwards, then all backwards
  k1F1B,             // "1f1b": PipeDream-Flush / Megatron non-interleaved
  kInterleaved1F1B,  // "interleaved": interleaved 1F1B (PyTorch's order), v chunks per rank
  kPipeDream,        // "pipedream": asynchronous 1F1B, weight stashing, no flush
  kZBH1,             // "zb-h1": zero bubble, 1F1B memory
  kZBH2,             // "zb-h2": zero bubble, about twice the memory
  kLoopedBFS,        // "looped-bfs": breadth-first, v chunks per rank
  kZBV,              // "zb-v": zero bubble in a V, 1F1B memory (Qi et al. 2024)
  kVHalf,            // "v-half": V placement, about half of 1F1B's activations
  kVMin,             // "v-min": V placement, about a third of 1F1B's activations
  kInterleavedZB,    // "interleaved-zb": PyTorch's interleaved zero bubble, v chunks per rank
  kDualPipeV,        // "dualpipev": DeepSeek's DualPipeV, V placement, overlapped F&B pairs
  kZBAuto,           // "zb-auto": zero bubble built from the stage costs under a memory limit
  kZBVAuto,          // "zb-v-auto": ZB-V's greedy from the stage costs under a memory limit
  kDualPipe,         // "dualpipe": DeepSeek's bidirectional DualPipe, two parameter copies
  kCustom,           // "custom": schedule text
};
// The facts about each kind (name, chunks, split backward, shape rules, generator) live in one
// record per kind, sim/schedule_traits.h; the functions below read it.
const char* ScheduleKindName(ScheduleKind kind);
// Parses a --schedule value: a pipecast name, or the name of the PyTorch
// pipelining class that runs the same order (below); InvalidArgument listing
// the known names.
Result<ScheduleKind> ParseScheduleKind(const std::string& name);
// The kind of a PyTorch pipelining schedule class, named as
// torch.distributed.pipelining's get_schedule_class takes it: "ScheduleGPipe",
// "Interleaved1F1B", "zbvzerobubble" (the "Schedule" prefix optional, any
// case); nullopt for any other name.
std::optional<ScheduleKind> PyTorchScheduleKind(std::string_view name);
// "ScheduleGPipe", "Schedule1F1B", ...: the classes PyTorchScheduleKind knows.
std::vector<std::string> PyTorchScheduleClassNames();
// Every built-in kind, in a stable order.
std::vector<ScheduleKind> BuiltinScheduleKinds();
// Their names, in the same order ("naive", "gpipe", ...): the --schedule choices.
std::vector<std::string> BuiltinScheduleNames();
// True for kinds that take v > 1 chunks per rank (interleaved, looped BFS, the V family).
bool UsesChunks(ScheduleKind kind);
// True for kinds that split the backward into I and W (zero bubble).
bool SplitsBackward(ScheduleKind kind);

struct Schedule {
  std::string name;
  int num_ranks = 0;
  int num_stages = 0;  // virtual stages; == num_ranks without chunks
  int num_microbatches = 0;
  std::vector<int> stage_rank;               // rank owning each stage
  std::vector<std::vector<Action>> actions;  // per rank, in execution order
  // True when the schedule splits the backward into I and W.
  bool split_backward = false;
  // Training iterations the action lists cover. 1, except for asynchronous
  // schedules without a flush (PipeDream), whose micro-batches are numbered
  // across iterations: iteration k holds micro-batches [k·m, (k+1)·m) with
  // m = num_microbatches / iterations.
  int iterations = 1;
  bool flush = true;  // false: no pipeline flush between iterations
  // Two paths (see the top of this file): num_stages == 2 * num_ranks, micro-batches
  // [0, m/2) run stages 0..p-1 and [m/2, m) stages p..2p-1 (m even).
  bool bidirectional = false;

  int ChunksPerRank() const { return num_ranks ? num_stages / num_ranks : 0; }
  // The first stage of its micro-batches' path: no input from a previous stage.
  bool IsFirstStage(int stage) const { return stage == 0 || (bidirectional && stage == num_ranks); }
  // The last stage of its micro-batches' path: no output to a next stage, no gradient from one.
  bool IsLastStage(int stage) const {
    return stage == num_stages - 1 || (bidirectional && stage == num_ranks - 1);
  }
  // Whether micro-batch `mb` runs stage `stage`.
  bool OnPath(int stage, int mb) const {
    return !bidirectional || (stage >= num_ranks) == (mb >= num_microbatches / 2);
  }
  // How many micro-batches run stage `stage` (and cross its boundary to the next).
  int MicrobatchesThrough(int stage) const {
    if (!bidirectional) return num_microbatches;
    return stage >= num_ranks ? num_microbatches - num_microbatches / 2 : num_microbatches / 2;
  }
  // Stages of the model partition: num_stages, or p for a bidirectional schedule, whose stage
  // p+k holds partition stage k's layers (ModelStage).
  int NumModelStages() const { return bidirectional ? num_ranks : num_stages; }
  int ModelStage(int stage) const {
    return bidirectional && stage >= num_ranks ? stage - num_ranks : stage;
  }
  int64_t NumActions() const;
};

// Builds a built-in schedule with its traits row's generator (sim/schedule_traits.h). `chunks`
// (v) is the number of model chunks per rank for kinds that UsesChunks(); others require
// chunks == 1. Virtual stage c·p + r lives on rank r (Megatron's looped placement), except for
// the V family (zb-v, v-half, v-min: exactly 2 chunks, rank r holds stages r and 2p-1-r).
// InvalidArgument with CheckShape()'s message when the kind cannot take this shape (ranks < 1,
// microbatches < 1, chunks, the kind's micro-batch rule), and for kCustom.
Result<Schedule> MakeSchedule(ScheduleKind kind, int num_ranks, int num_microbatches,
                              int chunks = 1);

// The schedule MakeSchedule sizes before its generator fills it: name, ranks, virtual stages
// (ranks x chunks), micro-batches, stage_rank by the kind's placement, split_backward and
// bidirectional from its traits row (sim/schedule_traits.h), and one empty action list per rank.
// For what a shape's placement and paths say (stage_rank, IsFirstStage, MicrobatchesThrough)
// without building its order, as the planner's prune pass asks. iterations and flush keep their
// defaults: an asynchronous kind's generator sets them (ScheduleTraits::flush names the kinds).
// REQUIRES: CheckShape(kind, num_ranks, num_microbatches, chunks) is OK.
Schedule ScheduleShape(ScheduleKind kind, int num_ranks, int num_microbatches, int chunks = 1);

// What the cost-driven generators (zb-auto, zb-v-auto: ScheduleTraits::generate_from_costs)
// build their order from; the other kinds ignore it. Times in ns.
struct ScheduleCosts {
  // Per virtual stage (num_ranks x chunks entries), or empty: every op 1 ms (F = I = W).
  std::vector<TimeNs> forward_ns, input_grad_ns, weight_grad_ns;
  // Share of a forward's activations that its input gradient (I) leaves for W, per virtual
  // stage, in [0, 1]; empty: 1 (I frees nothing, W everything: the simulator's rule without
  // weight_grad_bytes). Qi et al.'s M_W / M_B.
  std::vector<double> kept_after_input;
  TimeNs comm_ns = 0;  // one point-to-point transfer between neighbouring stages
  // Activations of one micro-batch (all of a rank's layers) a rank may hold at once, counted
  // from F's start to W's end less what I frees (--memory-limit); 0: the kind's default
  // (ScheduleTraits::default_memory_limit: 2p for zb-auto, p for zb-v-auto). Otherwise >= 1.
  double memory_limit = 0;
};

// The memory limit a cost-driven kind uses for `costs` on `num_ranks` ranks: the given one or
// the kind's default. InvalidArgument naming --memory-limit when it is given and below 1.
Result<double> EffectiveMemoryLimit(ScheduleKind kind, int num_ranks, const ScheduleCosts& costs);

// MakeSchedule for any kind, with the costs a cost-driven kind orders its ops by (other kinds
// ignore them). InvalidArgument as above, for a memory limit below 1 (naming --memory-limit),
// or for cost vectors whose size is not the number of virtual stages.
Result<Schedule> MakeSchedule(ScheduleKind kind, int num_ranks, int num_microbatches, int chunks,
                              const ScheduleCosts& costs);

// Megatron-LM's combined 1F1B (--overlap-moe-expert-parallel-comm; docs/schedules.md
// "Combined 1F1B"): each rank of a 1F1B or interleaved 1F1B schedule runs one more warm-up
// forward (megatron/core/pipeline_parallel/schedules.py, get_pp_rank_microbatches), so that each
// steady-state step's forward and backward are of different micro-batches, and each such step
// becomes an overlapped F&B pair (Action::overlapped), the forward first. The forwards and the
// backwards keep their order. InvalidArgument when a rank's list is not warm-up forwards, steps
// of a forward then a whole backward (B), and cool-down backwards, or already has pairs.
Status CombineForwardBackward(Schedule* schedule);

// Checks that the schedule is a complete training iteration: every (stage,
// micro-batch) on the micro-batch's path has exactly one F and either one B or
// one I and one W, each on the rank that owns the stage, micro-batches in range,
// and no op off its path; a bidirectional schedule also needs 2p stages, an
// even m and one iteration. Does not check that
// the order can finish: the simulator reports deadlocks with the stuck ops.
Status ValidateSchedule(const Schedule& schedule);

}  // namespace pipecast

#endif  // PIPECAST_SIM_SCHEDULE_H_
