// Pass 3, prune: a lower bound on each candidate's iteration time, so the
// simulate pass can visit the promising ones first and stop early.
//
// The bound reads the schedule's own shape: its placement (which rank holds
// each virtual stage), its paths (where a micro-batch enters, how many run
// each stage) and its traits (split backward, flush, overlapped F&B pairs),
// from ScheduleShape() and TraitsOf(), the homes MakeSchedule builds from.
// docs/planner.md ("prune") says why each term is a lower bound.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
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
// compute alone; `comm` is what the halves may hide (F's and B's). The layered
// rule (LayeredPairNs) hides no more: each half loses at most its own
// all-to-alls and the pair lasts at least its all-to-alls on the one stream.
struct OpFloors {
  TimeNs forward = 0, backward = 0;
  TimeNs comm = 0;
};

OpFloors FloorsOf(const StageCost& cost, bool overlapped_pairs, bool expert_comm) {
  OpFloors f{cost.forward_ns, cost.backward_ns, 0};
  if (overlapped_pairs) {
    // The layered rule hides only the all-to-alls (tensor-parallel collectives stay in the
    // compute): each half loses at most its own.
    const bool layered = expert_comm && !cost.pair_layers.empty();
    const TimeNs forward_comm =
        layered ? cost.ep_forward_ns : cost.PairCommNs(OpKind::kForward, expert_comm);
    const TimeNs backward_comm =
        layered ? cost.ep_backward_ns : cost.PairCommNs(OpKind::kBackward, expert_comm);
    f.forward = std::max<TimeNs>(0, f.forward - forward_comm);
    f.backward = std::max<TimeNs>(0, f.backward - backward_comm);
    f.comm = forward_comm + backward_comm;
  }
  return f;
}

// OverlappedPairNs of a forward of stage f beside a backward (B, or I) of stage b, each made
// once per bound: the layered rule replays the pair's layers, and the floors and the ranks'
// work ask for the same pairs. With `cache` (whose table made `costs` from `partition`) each
// is made once per search: the candidates of one table share their splits.
class PairHalvesMemo {
 public:
  PairHalvesMemo(const std::vector<StageCost>& costs, const PairOverlap& overlap,
                 const Candidate& c, const StageCostTable& table, PartitionCache* cache)
      : costs_(costs), overlap_(overlap), c_(c), table_(table), cache_(cache) {}

  const PairHalvesNs& Get(int f, int b, OpKind b_kind) {
    // Made at the first pair: most bounds ask for none (32 stages: 100 KB to fill).
    if (done_.empty()) done_.resize(costs_.size() * costs_.size() * kKinds);
    std::optional<PairHalvesNs>& slot =
        done_[(static_cast<size_t>(f) * costs_.size() + b) * kKinds + static_cast<size_t>(b_kind)];
    if (!slot) {
      slot = cache_ != nullptr ? cache_->PairHalves(table_, costs_[f], c_.partition[f], costs_[b],
                                                    c_.partition[b], b_kind, overlap_)
                               : OverlappedPairNs(costs_[f], costs_[b], b_kind, overlap_);
    }
    return *slot;
  }

 private:
  static constexpr size_t kKinds = 4;  // OpKind's values
  const std::vector<StageCost>& costs_;
  PairOverlap overlap_;
  const Candidate& c_;
  const StageCostTable& table_;  // made costs_ from c_.partition
  PartitionCache* cache_;        // table_'s, or none
  std::vector<std::optional<PairHalvesNs>> done_;
};

// The layered rule's floors (LayeredPairNs, docs/planner.md "prune"): with the expert overlap
// on, a pair of two stages that both have pair_layers lasts what OverlappedPairNs gives for
// those two stages, and its halves' hidden parts come from the stages' layers alone, which the
// simulator's per-op collectives (ZeRO 2 and 3) never change: they lengthen F and B, and the
// halves with them. A pair's partner is on the same rank (a rank runs a pair on its one
// stream), so each stage's forward lasts at least the least of its whole F and its halves
// beside the backward (B, or I then W) of every stage on its rank, and its backward likewise.
// A pair under the whole-compute rule (a partner without pair_layers) keeps the generic floors,
// which do not depend on the partner.
void TightenLayeredFloors(const std::vector<StageCost>& costs, const Schedule& shape,
                          const Candidate& c, PairHalvesMemo* memo, std::vector<OpFloors>* op) {
  const bool may_split = TraitsOf(c.config.schedule).splits_backward;
  const int stages = shape.num_stages;
  std::vector<TimeNs> forward(stages), backward(stages);
  for (int s = 0; s < stages; ++s) {
    forward[s] = costs[s].forward_ns;
    backward[s] = costs[s].backward_ns;
  }
  for (int f = 0; f < stages; ++f) {
    if (costs[f].pair_layers.empty()) continue;
    for (int b = 0; b < stages; ++b) {
      if (shape.stage_rank[b] != shape.stage_rank[f] || costs[b].pair_layers.empty()) continue;
      const PairHalvesNs& whole = memo->Get(f, b, OpKind::kBackward);
      forward[f] = std::min(forward[f], whole.forward);
      backward[b] = std::min(backward[b], whole.backward);
      if (!may_split) continue;
      const PairHalvesNs& input = memo->Get(f, b, OpKind::kBackwardInput);
      forward[f] = std::min(forward[f], input.forward);
      backward[b] = std::min(backward[b], input.backward + costs[b].backward_weight_ns);
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (costs[s].pair_layers.empty()) continue;
    // Beside a partner without pair_layers the whole-compute rule: F - Fc and B - Bc at most.
    bool whole_rule_partner = false;
    for (int o = 0; o < stages; ++o) {
      whole_rule_partner |=
          shape.stage_rank[o] == shape.stage_rank[s] && costs[o].pair_layers.empty();
    }
    OpFloors& fl = (*op)[s];
    if (whole_rule_partner) {
      fl.forward = std::max<TimeNs>(
          0,
          std::min(forward[s], costs[s].forward_ns - costs[s].PairCommNs(OpKind::kForward, true)));
      fl.backward = std::max<TimeNs>(
          0, std::min(backward[s],
                      costs[s].backward_ns - costs[s].PairCommNs(OpKind::kBackward, true)));
    } else {
      fl.forward = std::max<TimeNs>(0, forward[s]);
      fl.backward = std::max<TimeNs>(0, backward[s]);
    }
  }
}

// Whether `c` runs overlapped pairs, and whether their halves hide at most their partner's
// compute in full (overlap factor 1, the planner's), so that a pair lasts at least the two
// halves' communication: F + B - min(Fc, B - Bc) - min(Bc, F - Fc) >= Fc + Bc
// (OverlappedPairNs).
bool Pairs(const Candidate& c) {
  return TraitsOf(c.config.schedule).overlapped_pairs || c.config.CombinesForwardBackward();
}
bool PairCommFloor(const Candidate& c) {
  return Pairs(c) && c.config.overlap.overlap_factor >= 1.0;
}

// The least an overlapped pair of a forward of `f` and a backward of kind `b_kind` of `b` lasts
// in the simulator, both halves: under the layered rule its two halves (OverlappedPairNs, exact
// but for the per-op collectives, which only lengthen them); under the whole-compute rule each
// half at least its compute less what it may hide (F - Fc, B - Bc). REQUIRES: overlap factor 1
// or more.
TimeNs PairFloorNs(const std::vector<StageCost>& costs, int f_stage, int b_stage, OpKind b_kind,
                   const PairOverlap& overlap, PairHalvesMemo* memo) {
  const StageCost& f = costs[f_stage];
  const StageCost& b = costs[b_stage];
  if (overlap.expert_comm && !f.pair_layers.empty() && !b.pair_layers.empty()) {
    const PairHalvesNs& halves = memo->Get(f_stage, b_stage, b_kind);
    return halves.forward + halves.backward;
  }
  return std::max<TimeNs>(0, f.DurationNs(OpKind::kForward) -
                                 f.PairCommNs(OpKind::kForward, overlap.expert_comm)) +
         std::max<TimeNs>(0, b.DurationNs(b_kind) - b.PairCommNs(b_kind, overlap.expert_comm));
}

// A rank's work: its ops (CountRankOps) each at the least the simulator runs it for, an op
// alone its stage-cost time, a pair PairFloorNs.
TimeNs RankWork(const std::vector<RankOpCount>& ops, const std::vector<StageCost>& costs,
                const PairOverlap& overlap, PairHalvesMemo* memo) {
  TimeNs work = 0;
  for (const RankOpCount& o : ops) {
    const TimeNs each = o.partner < 0
                            ? costs[o.stage].DurationNs(o.kind)
                            : PairFloorNs(costs, o.stage, o.partner, o.partner_kind, overlap, memo);
    work += o.count * each;
  }
  return work;
}

}  // namespace

std::vector<std::vector<RankOpCount>> CountRankOps(const Candidate& c) {
  const TrainingConfig& config = c.config;
  const ScheduleTraits& traits = TraitsOf(config.schedule);
  if (!Pairs(c) || traits.generate_from_costs != nullptr) return {};
  Result<Schedule> schedule = MakeSchedule(config.schedule, config.layout.pipeline_stages,
                                           config.microbatches, config.layout.chunks);
  if (!schedule.ok()) return {};
  if (config.CombinesForwardBackward() && !CombineForwardBackward(&*schedule).ok()) return {};
  std::vector<std::vector<RankOpCount>> out(schedule->num_ranks);
  for (int k = 0; k < schedule->num_ranks; ++k) {
    const std::vector<Action>& list = schedule->actions[k];
    std::map<std::tuple<int, OpKind, int, OpKind>, int64_t> counts;
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.overlapped && a.kind == OpKind::kForward && i + 1 < list.size()) {
        ++counts[{a.stage, a.kind, list[i + 1].stage, list[i + 1].kind}];
        ++i;  // the pair's backward half
      } else {
        ++counts[{a.stage, a.kind, -1, OpKind::kBackward}];
      }
    }
    for (const auto& [key, n] : counts) {
      const auto& [stage, kind, partner, partner_kind] = key;
      out[k].push_back(RankOpCount{stage, kind, partner, partner_kind, n});
    }
  }
  return out;
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
//
// With overlapped pairs a rank's ops also last at least their communication (PairCommFloor):
// a pair of F of stage a and B of stage b at least Fc_a + Bc_b, an op outside a pair its whole
// length; so W_k is also at least the sum over its stages of m_s·(Fc_s + Bc_s), and the bound
// takes the larger sum. And W_k is at least its ops as its schedule runs them (CountRankOps,
// RankWork): alone at their full time, in pairs at PairFloorNs.

TimeNs LowerBound(const StageCostTable& table, const Candidate& c, PartitionCache* cache) {
  const ScheduleTraits& traits = TraitsOf(c.config.schedule);
  const Schedule shape = ScheduleShape(c.config.schedule, c.config.layout.pipeline_stages,
                                       c.config.microbatches, c.config.layout.chunks);
  const int stages = shape.num_stages;
  const int p = shape.num_ranks;
  std::vector<OpFloors> op(stages);
  std::vector<StageCost> costs = table.Stages(c.partition);
  for (int s = 0; s < stages; ++s) {
    op[s] = FloorsOf(costs[s], Pairs(c), c.config.ExpertOverlapOn());
  }
  // The search-wide memo only where `table` is the cache's own for `c` (its key names it).
  PairHalvesMemo memo(costs, c.config.Pairs(), c, table,
                      cache != nullptr && &cache->Table(c) == &table ? cache : nullptr);
  if (Pairs(c) && c.config.ExpertOverlapOn()) TightenLayeredFloors(costs, shape, c, &memo, &op);
  const bool comm_floor = PairCommFloor(c);
  if (c.config.schedule == ScheduleKind::kNaive) {
    TimeNs sum = 0;
    for (const OpFloors& o : op) sum += o.forward + o.backward;
    return TimeNs{c.config.microbatches} * sum;
  }
  // Per rank: its work, and the least fill and tail over its stages (the
  // forwards, and backwards, of the stages before each on its path).
  std::vector<TimeNs> work(p, 0), comm(p, 0), fill(p, -1), tail(p, -1);
  TimeNs path_forward = 0, path_backward = 0;
  for (int s = 0; s < stages; ++s) {
    if (shape.IsFirstStage(s)) path_forward = path_backward = 0;
    const int k = shape.stage_rank[s];
    work[k] += TimeNs{shape.MicrobatchesThrough(s)} * (op[s].forward + op[s].backward);
    if (comm_floor) comm[k] += TimeNs{shape.MicrobatchesThrough(s)} * op[s].comm;
    fill[k] = fill[k] < 0 ? path_forward : std::min(fill[k], path_forward);
    tail[k] = tail[k] < 0 ? path_backward : std::min(tail[k], path_backward);
    path_forward += op[s].forward;
    path_backward += op[s].backward;
  }
  for (int k = 0; k < p; ++k) work[k] = std::max(work[k], comm[k]);
  if (comm_floor) {
    // The pairs' own schedule: each rank's ops alone and in pairs, counted.
    std::vector<std::vector<RankOpCount>> own;
    if (cache == nullptr) own = CountRankOps(c);
    const std::vector<std::vector<RankOpCount>>& ops = cache != nullptr ? cache->RankOps(c) : own;
    for (int k = 0; k < static_cast<int>(ops.size()) && k < p; ++k) {
      work[k] = std::max(work[k], RankWork(ops[k], costs, c.config.Pairs(), &memo));
    }
  }
  if (!traits.flush) return *std::max_element(work.begin(), work.end());
  const bool with_tail = c.config.layout.chunks == 1 && !traits.splits_backward;
  TimeNs best = 0;
  for (int k = 0; k < p; ++k) {
    best = std::max(best, fill[k] + work[k] + (with_tail ? tail[k] : 0));
  }
  return best;
}

TimeNs UnpartitionedLowerBound(const StageCostTable& table, const Candidate& c,
                               const StageCost* whole) {
  // A chunked recomputation's rerun is not a sum over layers (StageCostTable::CheckpointedStage):
  // no bound before the split.
  const StageCostOptions& o = table.options();
  const bool chunked =
      o.recompute == Recompute::kEvery ||
      (o.recompute == Recompute::kFull && o.recompute_layers.method != RecomputeMethod::kEachLayer);
  if (table.NumLayers() == 0 || chunked) return 0;
  const Schedule shape = ScheduleShape(c.config.schedule, c.config.layout.pipeline_stages,
                                       c.config.microbatches, c.config.layout.chunks);
  const int p = shape.num_ranks;
  // Every time the bound reads is a difference of prefix sums over the layers, so the whole
  // model's is the sum of any partition's stages'; Selective's rerun, 0 over a range with a
  // layer that gives no attention core, is at most that sum.
  // `whole` read in place: a conditional of it and a temporary would copy it, pair layers and
  // all (a heap block per candidate).
  StageCost own;
  if (whole == nullptr) own = table.Stage(StageLayers{0, table.NumLayers() - 1});
  const OpFloors all =
      FloorsOf(whole != nullptr ? *whole : own, Pairs(c), c.config.ExpertOverlapOn());
  // The micro-batches that run each layer: those through each virtual stage that holds it,
  // summed over its copies (two in a bidirectional schedule); the least over the model stages.
  std::vector<int64_t> through(shape.NumModelStages(), 0);
  for (int s = 0; s < shape.num_stages; ++s) {
    through[shape.ModelStage(s)] += shape.MicrobatchesThrough(s);
  }
  const int64_t runs = *std::min_element(through.begin(), through.end());
  // Per layer and micro-batch: F + B at their floors, or with pairs at least their
  // communication; a stage's floors clamp at 0 each, so their sum is at least the clamped sum.
  TimeNs per_run = all.forward + all.backward;
  if (PairCommFloor(c)) per_run = std::max(per_run, all.comm);
  if (c.config.schedule == ScheduleKind::kNaive) return TimeNs{c.config.microbatches} * per_run;
  // The busiest rank's work is at least the average of all of it (W_k summed over k is the
  // work of every layer for every micro-batch that runs it).
  TimeNs bound = runs * per_run / p;
  const ScheduleTraits& traits = TraitsOf(c.config.schedule);
  bool one_stage_per_rank = shape.num_stages == p && !shape.bidirectional;
  for (int s = 0; one_stage_per_rank && s < p; ++s) one_stage_per_rank = shape.stage_rank[s] == s;
  if (traits.flush && one_stage_per_rank && !traits.splits_backward && c.config.microbatches > 0) {
    // gpipe and 1f1b: rank k ends no earlier than T_0..T_{k-1} + m·T_k (fill + work + tail, T =
    // F + B). Weighting rank k by L_k = (c/m)(1 - 1/m)^(p-1-k), which sum to 1, gives every
    // stage's T the weight m·L_j + sum_{k>j} L_k = c, so the largest rank's end is at least
    // c·sum T = T / (1 - (1 - 1/m)^p), whatever the split; (m + p - 1)·T/p's first-order part.
    const double m = c.config.microbatches;
    const double weight = 1.0 / (1.0 - std::pow(1.0 - 1.0 / m, p));
    // Rounded down, less a part in 10^9 for the floating point.
    const TimeNs weighted =
        static_cast<TimeNs>(static_cast<double>(all.forward + all.backward) * weight * (1 - 1e-9));
    bound = std::max(bound, weighted - 1);
  }
  return std::max<TimeNs>(0, bound);
}

void Prune(const Model& model, const Cluster& cluster, std::vector<Candidate>* candidates,
           PartitionCache* cache) {
  PartitionCache own(model, cluster);
  if (cache == nullptr) cache = &own;
  for (Candidate& c : *candidates) {
    c.lower_bound_ns = LowerBound(cache->Table(c), c, cache);
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
