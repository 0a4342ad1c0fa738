// The simulator's engine (the engine step of Simulate(), see
// sim/internal/simulate_steps.h): a dataflow replay in two passes, pass 1
// (times) in sim/internal/engine_times.cc and pass 2 (memory) in
// sim/internal/engine_memory.cc; the driver, the records and the totals in
// sim/internal/engine.cc. Internal: only sim/ includes it.
#ifndef PIPECAST_SIM_INTERNAL_ENGINE_H_
#define PIPECAST_SIM_INTERNAL_ENGINE_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "sim/cluster.h"
#include "sim/internal/large_array.h"
#include "sim/internal/live_memory.h"
#include "sim/internal/simulate_steps.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"

namespace pipecast::internal {

// The engine: a dataflow replay in two passes, with no global event queue
// (docs/simulator.md, section 2).
//
// Pass 1 (times). An op starts at max(its rank's previous op end, the arrival
// of its input from another rank); a transfer starts at max(its producer's
// end, its link's previous transfer's start + serialisation). Every transfer
// on a link comes from the link's one sending rank, in that rank's order, so
// each rank's list can be replayed on its own as far as its inputs are known:
// a worklist of ranks advances each one until its next op waits for an
// input no rank has produced yet, and a rank that produces that input wakes
// it. When no rank can advance and ops remain, the schedule deadlocks.
//
// The event order. Times alone do not fix everything the old event-queue
// engine reported: several changes of one rank's memory can fall on one
// instant, and their order decides the peaks and the memory timeline. That
// engine processed events by (time, insertion order), an event being
// inserted while the one that caused it was processed. So each event records its cause (`parent`):
// an op's end was inserted when the op started, i.e. by the later-processed of its rank's previous
// op end and its input's arrival; a transfer's arrival by the later-processed of its producer's end
// and the previous arrival on its link (a link's queue holds one arrival event at a time); the
// first op of each rank, when it needs no input, by the start (in rank order). An event's place in
// the processing order is then (time, place of its parent, order within the parent's handling: an
// overlapped pair's forward transfer, then any other transfer, then the op end).
//
// Ties are decided two ways, with the same answers. Walking (TieBefore(),
// TryTieBefore()): compare the parents' times, and while they are equal
// their parents', and so on; with real links a walk ends in a step or two,
// but on the ideal cluster, where whole wavefronts of a pipeline share an
// instant, it goes back O(p + m) events. Ranking (RankEvents(),
// sim/internal/engine_order.cc): times do not depend on ties, so pass 1 can
// keep a tie's candidate causes (`hop` below) instead of choosing; the
// ranking step then replays the old queue with the times known (a radix sort
// gives each instant its block of places; an event is inserted when its last
// candidate is processed, which is its parent) and numbers every event, and
// from then on a comparison is two loads. The engine walks until its walks
// have cost kWalkStepsPerEvent steps per event, then ranks, in pass 1 or in
// pass 2, with a timeline or without: the records (ops and transfers) are
// rank by rank and need no processing order (RecordTimeline()).
//
// Pass 2 (memory). Each rank's memory changes come from its own ops and
// from the arrivals on the links into and out of it: each of those streams
// is already in processing order, so one small merge per rank replays the
// changes in exactly the old order, with an op's start applied right after
// the event that caused it.
class Engine {
 public:
  Engine(const Cluster& cluster, const Schedule& schedule, const std::vector<StageCost>& costs,
         const SimOptions& options, SimResult* result)
      : cluster_(cluster), sched_(schedule), costs_(costs), options_(options), out_(result) {}

  // Fills `totals` (sim/internal/simulate_steps.h) and the result.
  Status Run(EngineTotals* totals);

 private:
  // Events are an op's end or a transfer's arrival. Ids: ops [0, num_ops_)
  // numbered rank by rank in list order, then transfers link by link in send
  // order. Each has a time and a parent, the event that inserted it; a parent
  // below 0 is the start of the simulation: -1 - rank.
  // What an op of one (stage, kind) does, precomputed.
  struct OpCost {
    TimeNs duration = 0;
    Bytes start_act = 0;  // activations added at start
    Bytes end_act = 0;    // activations freed at end (<= 0)
    Bytes recv_free = 0;  // receive buffer of its input freed at end (<= 0)
    Bytes send = 0;       // send buffer of its output (0: none or same rank)
    Bytes workspace = 0;
  };
  // Per (stage, micro-batch), 8 bytes: the state of its activation input
  // and F (f), and of its gradient input and B or I (b): kNotDelivered (not
  // delivered), kHandedOver (delivered on the same rank), the arrival event
  // (>= 0), or kDone once the op that consumes it is computed.
  static constexpr int32_t kNotDelivered = -1;
  static constexpr int32_t kHandedOver = -2;
  static constexpr int32_t kDone = -3;
  struct Cell {
    int32_t f = kNotDelivered;
    int32_t b = kNotDelivered;
  };
  struct LinkState {
    int src = 0, dst = 0;
    int32_t first = 0;  // id of its first transfer
    int32_t count = 0;  // transfers sent so far
    TimeNs free = 0;    // when its last transfer stops occupying it
    Bytes bytes = -1;   // every transfer's size when they all cross one hop, else -1
  };
  struct RankState {
    int32_t next = 0;                  // next op in the list to compute
    int32_t prev = 0;                  // event of the previous op's end (or -1 - rank)
    TimeNs prev_end = 0;               // its time
    int64_t waiting_on = kNotWaiting;  // input key that would let it advance
    TimeNs busy = 0;
  };
  static constexpr int64_t kNotWaiting = -1;
  // How far ahead pass 1 prefetches, one cache line: actions of a rank's
  // list (12 bytes), events of a stream (16) and cells of a stage (8).
  static constexpr int32_t kPrefetchOps = 6;
  static constexpr int32_t kPrefetchEvents = 4;
  static constexpr int32_t kPrefetchCells = 8;

  int64_t CellIndex(int stage, int mb) const {
    return int64_t{stage} * sched_.num_microbatches + mb;
  }
  // Per (stage, kind, overlapped): an overlapped half's memory and sends; its duration is
  // pair_ns_'s.
  static int CostIndex(const Action& a) {
    return (a.stage * 4 + static_cast<int>(a.kind)) * 2 + a.overlapped;
  }
  const OpCost& CostOf(const Action& a) const { return op_cost_[CostIndex(a)]; }
  // Calls f(j) for each op j of `list` whose output leaves when op i ends: i
  // itself when it sends, or for an overlapped pair's backward half the
  // forward half (i - 1) and then i (docs/simulator.md, "Overlapped F&B"); a
  // pair's forward half sends nothing at its own end.
  template <typename F>
  __attribute__((always_inline)) void ForEachSendAtEnd(const std::vector<Action>& list, int32_t i,
                                                       F f) const {
    const Action& a = list[i];
    if (a.overlapped) {
      if (a.kind == OpKind::kForward) return;
      if (CostOf(list[i - 1]).send != 0) f(i - 1);
    }
    if (CostOf(a).send != 0) f(i);
  }
  // With a timeline (kRecord), in the memory sweep: the index in the rank's
  // deltas of an op's start, end or send (SweepRank()); without one, 0 (the
  // table is empty then and is not read).
  enum DeltaKind { kOpStart = 0, kOpEnd = 1, kOpSend = 2 };
  template <bool kRecord>
  int32_t DeltaOf(const Action& a, DeltaKind k) const {
    if constexpr (kRecord) return cost_delta_[CostIndex(a)] + k;
    return 0;
  }
  // Processing order of two distinct events (or starts) at one time.
  // Ranks the events (RankEvents()) when a walk of its parents would be long.
  bool TieBefore(int32_t x, int32_t y);
  // TieBefore() by walking up decided parents: 1 or 0, or kUnknown at an
  // undecided parent or once the walks of this simulation have taken
  // kWalkStepsPerEvent steps per event. Either way the answer is the same;
  // only the cost differs.
  int TryTieBefore(int32_t x, int32_t y);
  static constexpr int kUnknown = -1;
  // A walk's first step alone (no budget spent): 1 or 0, or kUnknown when
  // the tie goes on past it.
  [[gnu::always_inline]] int QuickTieBefore(int32_t x, int32_t y) const {
    const int answer = WalkStep(&x, &y);
    return answer == kStepUp ? kUnknown : answer;
  }
  // One step of a walk, shared by TryTieBefore() and LongWalk(): the answer
  // (1, 0 or kUnknown) when x and y, or their parents, decide it; else
  // kStepUp, with x and y moved up to their parents (tied in time).
  static constexpr int kStepUp = 2;
  int WalkStep(int32_t* x, int32_t* y) const;
  // A walk still tied after kShortWalk steps (engine_order.cc): it looks
  // each pair up in the walks' memo and records the pairs it visits. Real
  // links end almost every walk in its first step, which never reaches the
  // memo; a walk past it is one of a wavefront of ties whose next pairs
  // earlier walks have usually visited.
  int LongWalk(int32_t x, int32_t y);
  static constexpr int kShortWalk = 1;
  // Each long walk adds this many steps to the budget.
  static constexpr int64_t kLongWalkAllowance = 16;
  // Real links end a walk in a step or two; wavefronts of equal times (the
  // ideal cluster) make walks of O(p + m) steps, which ranking the events
  // (tens of ns per event) beats.
  static constexpr int64_t kWalkStepsPerEvent = 1;
  // Whether `e`'s parent is chosen. Without a branch on the event's kind: a
  // walk alternates op ends and arrivals as it pleases, and a branch on it
  // was mispredicted once a step or so. An arrival's `hop` is never
  // kNoAlternative.
  bool Decided(int32_t e) const {
    if (e < 0) return true;
    const int32_t hop = ev_[e].hop;
    return (hop == kNoAlternative) | ((e >= num_ops_) & ((hop & kTiedArrival) == 0));
  }
  bool Before(int32_t x, int32_t y) {
    if (ranked_) return RankOf(x) < RankOf(y);
    const TimeNs tx = TimeOf(x), ty = TimeOf(y);
    return tx != ty ? tx < ty : TieBefore(x, y);
  }
  TimeNs TimeOf(int32_t e) const { return e < 0 ? -1 : ev_[e].time; }
  // Place in the processing order, once ranked: the starts are 0..p-1.
  int32_t RankOf(int32_t e) const { return e < 0 ? -1 - e : rank_[e]; }
  // Order among the events one event inserted (see "The event order").
  int SiblingOrder(int32_t e) const { return e < num_ops_ ? 2 : (ev_[e].hop >> 1) & 1; }
  // An arrival's `hop` field: the boundary crossed, whether it carries a
  // gradient and whether its parent is still to choose (kTiedArrival: its
  // producer or the previous arrival on its link).
  static int32_t ArrivalHop(int hop, bool gradient) { return hop << 2 | int32_t{gradient} << 1; }
  static int HopOf(int32_t packed) { return packed >> 2; }
  static constexpr int32_t kTiedArrival = 1;
  // An op end's `hop` field: kNoAlternative, another candidate cause (an
  // arrival, >= 0), or -2 - i for the two more in alternatives_[i].
  static constexpr int32_t kNoAlternative = -1;

  void Prepare();
  void NumberOps();
  int64_t NumberLinks();
  void KeepPairDurations();
  void TabulateOpCosts();
  void Advance(int rank);
  void Deliver(int dst_stage, int mb, bool gradient, int32_t producer, TimeNs end);
  Status Deadlock() const;
  int Candidates(int32_t e, int32_t out[3]) const;
  void RankEvents();
  std::vector<int32_t> LinkWaiters();
  void NumberAllInstants();
  const uint64_t* SortKeys(LargeArray<uint64_t>* a, LargeArray<uint64_t>* b, int* bits);
  template <typename T>
  void NumberInstants(const T* sorted, int32_t n);
  // How far ahead in the processing order the ranking step prefetches.
  static constexpr int32_t kPrefetchPlaces = 16;
  void SizeMemoryTimelines();
  void SweepMemory(int rank);
  template <int kWidth, bool kRecord>
  void SweepRank(int rank);
  void IndexOpDeltas(int rank);
  void OpenStreams(int rank, int k, bool record);
  template <bool kExact>
  int SortLinkHeads(int k);
  template <bool kExact>
  int NextArrival(int j, int n);
  TimeNs FirstLinkTie(int n) const;
  template <bool kQuick>
  bool SortTiedHeads(int n, TimeNs t);
  InstantRise RiseAt(int rank, TimeNs t, int n, int32_t started, bool own_at,
                     Bytes grads_pending) const;
  int32_t ArrivalDelta(int hop, bool out, Bytes bytes);
  // A sweep stream with nothing left.
  static constexpr TimeNs kNoHead = std::numeric_limits<TimeNs>::max();
  void RecordTimeline();
  void Totals();

  const Cluster& cluster_;
  const Schedule& sched_;
  const std::vector<StageCost>& costs_;
  const SimOptions& options_;
  SimResult* out_;
  EngineTotals* totals_ = nullptr;

  int32_t num_ops_ = 0;
  std::vector<int32_t> op_first_;  // per rank: id of its first op
  std::vector<TimeNs> pair_ns_;    // per op id: an overlapped half's duration (else unused)
  struct Event {
    TimeNs time;
    int32_t parent;  // a candidate cause until ranked, when tied
    int32_t hop;     // arrivals: ArrivalHop(); op ends: the other candidate causes
  };
  // Advance()'s steps for one op: its inputs, its start, its completion.
  bool InputsOf(RankState& st, const std::vector<Action>& list, int32_t i, const Cell& c,
                int32_t* in_event, int32_t* in_event_2);
  Event StartOf(TimeNs prev_end, int32_t prev, int32_t in_event, int32_t in_event_2);
  void Finish(const std::vector<Action>& list, int32_t i, Cell& c, int32_t id, TimeNs end,
              int* deferred_stage);
  int32_t num_events_ = 0;
  LargeArray<Event> ev_;  // per event, one cache line holds four
  // Ties pass 1 left open (op ends with three candidate causes: two more each).
  std::vector<std::pair<int32_t, int32_t>> alternatives_;
  int64_t ties_ = 0;     // events whose cause pass 1 left open
  bool ranked_ = false;  // rank_ holds the processing order
  // Every event's parent is chosen: after pass 1, which leaves ties open
  // only where ranking follows (and ranking chooses them all).
  bool all_decided_ = false;
  int64_t walk_budget_ = 0;  // TryTieBefore()'s steps left
  // The long walks' memo, per event: the other event of the last walked pair
  // it was the lower id of (kPartnerId's bits; all ones: none) and, in the
  // top bit, whether it came first; sized with the first long walk. A walk
  // remembers at most its first kWalkPathMemo pairs.
  LargeArray<uint32_t> partner_;
  static constexpr uint32_t kPartnerId = 0x7fffffffu;
  static constexpr int kWalkPathMemo = 64;
  // Per event, for the ranking step: the events waiting on it (one per
  // sibling order, and a second op end: an arrival both halves of an
  // overlapped pair wait on), its instant, its candidates not yet processed
  // (and at first); 24 bytes.
  struct RankNode {
    int32_t waiter[4];
    int32_t instant;
    int16_t open;
    int16_t open_at_start;
  };
  LargeArray<RankNode> node_;
  LargeArray<int32_t> rank_;     // per event: its place, once ranked
  std::vector<int32_t> group_;   // the ranking step's next free place per instant
  std::vector<OpCost> op_cost_;  // per (stage, kind, overlapped)
  LargeArray<Cell> cells_;
  std::vector<LinkState> links_;
  // Per stage s: the link carrying s's activations to s+1 and the one
  // carrying the gradients back from s+1 (-1 when both are on one rank), and
  // their serialisation and latency.
  struct HopCost {
    int link = -1;
    TimeNs serial = 0;
    TimeNs latency = 0;
  };
  std::vector<HopCost> hops_;  // [2 * s]: forward over boundary s, [2 * s + 1]: backward
  const HopCost& Hop(int boundary, bool gradient) const { return hops_[2 * boundary + gradient]; }
  std::vector<std::vector<int>> rank_links_;  // per rank: links into or out of it
  std::vector<RankState> ranks_;
  std::vector<int> worklist_;
  std::vector<TimeNs> iteration_end_;  // per iteration (PipeDream)
  int mb_per_iteration_ = 1;
  // The sweep's streams: the next event of each, where it ends, whether it
  // leaves the rank, and its transfers' size (-1: they differ, look up).
  struct Stream {
    int32_t next = 0, end = 0;
    bool out = false;
    int32_t delta = 0;  // with a timeline and one size: its arrivals' delta
    Bytes bytes = 0;
  };
  std::vector<Stream> streams_;
  std::vector<TimeNs> head_time_;
  // With a timeline, every rank's memory changes, rank by rank (each rank's
  // MemoryTimeline holds its slice), and where each rank's begin.
  std::shared_ptr<MemoryTimeline::Change[]> change_block_;
  std::vector<size_t> change_first_;
  // One rank's deltas as the sweep writes them.
  std::vector<MemoryDelta> deltas_;
  std::vector<int32_t> cost_delta_;  // per op_cost_ entry: its first delta (this rank's)
  std::vector<int32_t> hop_delta_;   // per (hop, out): an arrival's delta, or -1
  std::vector<int> order_;
  // A sweep without a timeline (SweepRank()): no two link heads tie before
  // `next` (NextArrival() lowers it when it leaves two tied); `at`: the last
  // instant whose ties were looked at, and `fits`: whether its changes fit
  // under the peaks (InstantFits(): then its ties stay undecided).
  struct TieState {
    TimeNs next = 0;
    TimeNs at = -1;
    bool fits = false;
  };
  TieState tie_;
};

inline bool Engine::TieBefore(int32_t x, int32_t y) {
  if (ranked_) return RankOf(x) < RankOf(y);
  const int order = TryTieBefore(x, y);
  if (order != kUnknown) return order == 1;
  // A wavefront of equal times (every parent is decided, or the events would
  // be ranked already): number the events once, then compare in O(1).
  RankEvents();
  return RankOf(x) < RankOf(y);
}

[[gnu::always_inline]] inline int Engine::WalkStep(int32_t* x, int32_t* y) const {
  if (*x < 0 || *y < 0) return *x < 0 && *y < 0 ? *x > *y : *x < 0;
  if (!all_decided_ && !(Decided(*x) & Decided(*y))) return kUnknown;
  const int32_t px = ev_[*x].parent, py = ev_[*y].parent;
  if (px == py) return SiblingOrder(*x) < SiblingOrder(*y);
  const TimeNs tx = TimeOf(px), ty = TimeOf(py);
  if (tx != ty) return tx < ty;
  *x = px;
  *y = py;
  return kStepUp;
}

inline int Engine::TryTieBefore(int32_t x, int32_t y) {
  for (int step = 0; step < kShortWalk && walk_budget_ > 0; ++step) {
    const int answer = WalkStep(&x, &y);
    if (answer != kStepUp) return answer;
    --walk_budget_;
  }
  return walk_budget_ > 0 ? LongWalk(x, y) : kUnknown;
}

}  // namespace pipecast::internal

#endif  // PIPECAST_SIM_INTERNAL_ENGINE_H_
