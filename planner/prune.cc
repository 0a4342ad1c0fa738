// Pass 3, prune: a lower bound on each candidate's iteration time, so the
// simulate pass can visit the promising ones first and stop early.
//
// The bound reads the schedule's own shape: its placement (which rank holds
// each virtual stage), its paths (where a micro-batch enters, how many run
// each stage) and its traits (split backward, flush, overlapped F&B pairs),
// from ScheduleShape() and TraitsOf(), the homes MakeSchedule builds from.
// docs/planner.md ("prune") says why each term is a lower bound.
#include <algorithm>
#include <vector>

#include "planner/passes.h"
#include "sim/schedule.h"
#include "sim/schedule_traits.h"
#include "sim/stage_costs.h"

namespace pipecast::passes {

namespace {

// The least a forward and a whole backward (I + W) of one stage can run in
// the simulator: the stage-cost table's times, which the simulator's ops take
// or exceed (ZeRO's per-op collectives only lengthen them). A schedule with
// overlapped F&B pairs (DualPipe's, or Megatron-LM's combined 1F1B) hides each
// half's tensor-parallel communication, and with `expert_comm` its expert
// all-to-alls, behind the other half's compute (OverlappedPairNs, at the
// planner's overlap factor of 1), so there an op may be as short as its
// compute alone.
struct OpFloors {
  TimeNs forward = 0, backward = 0;
};

OpFloors FloorsOf(const StageCost& cost, bool overlapped_pairs, bool expert_comm) {
  OpFloors f{cost.forward_ns, cost.backward_ns};
  if (overlapped_pairs) {
    f.forward = std::max<TimeNs>(0, f.forward - cost.PairCommNs(OpKind::kForward, expert_comm));
    f.backward = std::max<TimeNs>(0, f.backward - cost.PairCommNs(OpKind::kBackward, expert_comm));
  }
  return f;
}

// A lower bound on the iteration time of `c`, counting communication, the
// data-parallel collectives and the optimizer step as 0. Every rank runs its
// ops one after another on its one stream, so it is busy for its work W_k
// (each of its stages' F + B times the micro-batches that run it), and it
// cannot start before the forwards that reach its first stage from its
// path's entry (fill_k). With whole backwards and one stage per rank, the
// backwards on the stages before it of the micro-batch whose backward ends
// its list follow (tail_k). An asynchronous schedule (no flush) repeats its
// steady state: the busiest rank's work alone. Naive runs one micro-batch
// at a time through every stage.
TimeNs LowerBound(const StageCostTable& table, const Candidate& c) {
  const ScheduleTraits& traits = TraitsOf(c.config.schedule);
  const Schedule shape = ScheduleShape(c.config.schedule, c.config.layout.pipeline_stages,
                                       c.config.microbatches, c.config.layout.chunks);
  const int stages = shape.num_stages;
  const int p = shape.num_ranks;
  std::vector<OpFloors> op(stages);
  for (int s = 0; s < stages; ++s) {
    op[s] = FloorsOf(table.Stage(c.partition[s]),
                     traits.overlapped_pairs || c.config.CombinesForwardBackward(),
                     c.config.ExpertOverlapOn());
  }
  if (c.config.schedule == ScheduleKind::kNaive) {
    TimeNs sum = 0;
    for (const OpFloors& o : op) sum += o.forward + o.backward;
    return TimeNs{c.config.microbatches} * sum;
  }
  // Per rank: its work, and the least fill and tail over its stages (the
  // forwards, and backwards, of the stages before each on its path).
  std::vector<TimeNs> work(p, 0), fill(p, -1), tail(p, -1);
  TimeNs path_forward = 0, path_backward = 0;
  for (int s = 0; s < stages; ++s) {
    if (shape.IsFirstStage(s)) path_forward = path_backward = 0;
    const int k = shape.stage_rank[s];
    work[k] += TimeNs{shape.MicrobatchesThrough(s)} * (op[s].forward + op[s].backward);
    fill[k] = fill[k] < 0 ? path_forward : std::min(fill[k], path_forward);
    tail[k] = tail[k] < 0 ? path_backward : std::min(tail[k], path_backward);
    path_forward += op[s].forward;
    path_backward += op[s].backward;
  }
  if (!traits.flush) return *std::max_element(work.begin(), work.end());
  const bool with_tail = c.config.layout.chunks == 1 && !traits.splits_backward;
  TimeNs best = 0;
  for (int k = 0; k < p; ++k) {
    best = std::max(best, fill[k] + work[k] + (with_tail ? tail[k] : 0));
  }
  return best;
}

}  // namespace

void Prune(const Model& model, const Cluster& cluster, std::vector<Candidate>* candidates,
           PartitionCache* cache) {
  PartitionCache own(model, cluster);
  if (cache == nullptr) cache = &own;
  for (Candidate& c : *candidates) {
    c.lower_bound_ns = LowerBound(cache->Table(c), c);
  }
  std::stable_sort(candidates->begin(), candidates->end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.lower_bound_ns != b.lower_bound_ns) {
                       return a.lower_bound_ns < b.lower_bound_ns;
                     }
                     return a.Label() < b.Label();
                   });
}

}  // namespace pipecast::passes
