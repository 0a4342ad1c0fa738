// ScheduleTraits: everything the rest of pipecast needs to know about one schedule kind, in one
// record per kind: its name, its source, whether it takes model chunks or splits the backward,
// where its virtual stages live, which micro-batch counts it accepts (and the error texts that
// say so), the in-flight bound the planner's partition pass estimates memory with, and the
// generator that fills its action lists.
//
// The records form one constant table (schedule_traits.cc), in ScheduleKind order. MakeSchedule,
// the planner's enumerate and partition passes and the tools read it instead of switching on the
// kind, so adding a schedule means one table row plus its generator.
//
// Thread-safe: the table is immutable.
#ifndef PIPECAST_SIM_SCHEDULE_TRAITS_H_
#define PIPECAST_SIM_SCHEDULE_TRAITS_H_

#include <span>
#include <string>

#include "base/status.h"
#include "sim/schedule.h"

namespace pipecast {

// Where virtual stage st of a p-rank pipeline lives.
enum class Placement {
  kLooped,  // rank st % p: chunk c of rank r is virtual stage c·p + r (Megatron's placement)
  kV,       // two chunks in a V: rank r holds stages r and 2p-1-r (Qi et al. 2024)
};

// The micro-batch counts m a schedule accepts on p ranks.
enum class MicrobatchRule {
  kAny,                 // every m >= 1
  kAtLeastStages,       // m >= p (looped BFS)
  kAtLeastTwiceStages,  // m >= 2p (DualPipeV: both chunks' warm-ups)
  kBidirectional,       // p even, m even and m >= 2p (DualPipe: m/2 from each end)
};

struct ScheduleTraits {
  ScheduleKind kind = ScheduleKind::kCustom;
  const char* name = "";           // the --schedule value and Schedule::name, e.g. "zb-h1"
  const char* rule_label = "";     // how constraint messages name it, e.g. "zb-h1 and zb-h2"
  bool rule_label_plural = false;  // "zb-h1 and zb-h2 need", not "needs"
  const char* source = "";         // paper or code the generator follows (docs/schedules.md)
  bool builtin = true;             // has a generator; false for custom schedule text
  bool planner_default = true;     // searched by the planner when --schedules is not given
  bool uses_chunks = false;        // takes v > 1 model chunks per rank
  int default_chunks = 1;          // v when the tools are not given --chunks
  int fixed_chunks = 0;            // > 0: the only v the kind takes (the V family: 2)
  bool splits_backward = false;    // backward split into I and W (needs backward_weight_us)
  bool flush = true;               // false: asynchronous, no flush between iterations
  // Two paths, micro-batches entering at both ends (Schedule::bidirectional): 2p virtual
  // stages in the V placement over a partition of p stages, each held by two ranks.
  bool bidirectional = false;
  // Its generator pairs a forward with a backward as one overlapped op (Action::overlapped,
  // DualPipe's chunk overlap), whose halves hide their tensor-parallel communication behind
  // each other's compute (OverlappedPairNs, sim/stage_costs.h).
  bool overlapped_pairs = false;
  Placement placement = Placement::kLooped;
  MicrobatchRule microbatch_rule = MicrobatchRule::kAny;
  // For kAtLeastStages: why fewer micro-batches do not work, in CheckShape's message.
  const char* too_few_microbatches_why = "";
  // Activation micro-batches stage `stage` of p holds at its peak with m micro-batches: the
  // planner's estimate before it simulates (chunked kinds: m, refined by the simulate pass).
  int (*inflight_microbatches)(int stage, int p, int m) = nullptr;
  // For split-backward kinds: how many of those have not run their input gradient (I) yet; the
  // others hold only what W keeps. nullptr: all of them (whole backwards).
  int (*before_input_gradient)(int stage, int p, int m) = nullptr;
  // Fills the action lists of a Schedule that MakeSchedule sized (ranks, virtual stages,
  // micro-batches, stage_rank). nullptr when builtin is false.
  // REQUIRES: CheckShape() accepted the schedule's shape.
  void (*generate)(Schedule& s) = nullptr;
  // For cost-driven kinds (zb-auto, zb-v-auto): fills the action lists from per-stage costs and
  // a memory limit (MakeSchedule with ScheduleCosts; `generate` is this with the default costs).
  // REQUIRES: as generate; costs sized to the virtual stages, memory_limit >= 1 (resolved).
  // Internal when the heuristic cannot keep within the limit (never seen: docs/schedules.md).
  Status (*generate_from_costs)(Schedule& s, const ScheduleCosts& costs) = nullptr;
  // For cost-driven kinds: the memory limit (ScheduleCosts::memory_limit) on p ranks when
  // none is given.
  double (*default_memory_limit)(int p) = nullptr;
};

// The record of `kind`. Never fails: every kind has a row.
const ScheduleTraits& TraitsOf(ScheduleKind kind);

// Every record, in ScheduleKind order (custom last).
std::span<const ScheduleTraits> AllScheduleTraits();

// The rank that owns virtual stage `stage` of a `ranks`-rank pipeline.
int StageRank(Placement placement, int stage, int ranks);

// Checks that `kind` can run on `ranks` GPUs with `microbatches` micro-batches per iteration
// and `chunks` model chunks per GPU. Ok when it can; otherwise InvalidArgument naming the flag
// to change (--stages, --microbatches, --chunks). Checks the counts, the chunks against
// uses_chunks, the size limit of the action lists and the kind's micro-batch rule, in that order.
[[nodiscard]] Status CheckShape(ScheduleKind kind, int ranks, int microbatches, int chunks);

// The planner's terse form of the kind's micro-batch rule for p stages and m micro-batches
// ("looped BFS needs m (3) >= p (4)"), or "" when m fits. Same rule as CheckShape.
std::string MicrobatchRuleConflict(ScheduleKind kind, int p, int m);

}  // namespace pipecast

#endif  // PIPECAST_SIM_SCHEDULE_TRAITS_H_
