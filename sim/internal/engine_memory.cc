// Pass 2 of the engine (sim/internal/engine.h): each rank's memory changes
// replayed in the old engine's processing order, for the peaks and the
// memory timeline.
#include <algorithm>
#include <cassert>
#include <limits>
#include <new>

#include "sim/internal/engine.h"
#include "sim/internal/live_memory.h"

namespace pipecast::internal {

// Replays `rank`'s memory changes in processing order: its op starts and
// ends (a send buffer allocated just before its producer's end is applied)
// and the arrivals into and out of it. The streams (its ops' ends, and the
// arrivals on each link into or out of it) are each in processing order and
// few (two to five for the built-in schedules), so each step takes the
// earliest head by a scan of their times, and breaks ties by TieBefore().
// An op's end is pending only once the op has started.
// With a timeline: every rank's changes in one block, rank by rank (one
// allocation per rank faulted its pages in 4 KiB at a time). A rank's count
// is exact: two per op (start, end), one per send (an overlapped pair sends
// its forward half's output too, counted on that half) and one per arrival
// into or out of the rank; each is one Change() of the sweep.
void Engine::SizeMemoryTimelines() {
  const int p = sched_.num_ranks;
  change_first_.assign(static_cast<size_t>(p) + 1, 0);
  for (int r = 0; r < p; ++r) {
    const std::vector<Action>& list = sched_.actions[r];
    size_t samples = 2 * list.size();
    for (int li : rank_links_[r]) samples += links_[li].count;
    // Not the out-links' counts again: a send of 0 bytes is no change.
    for (const Action& a : list) samples += CostOf(a).send != 0;
    change_first_[r + 1] = change_first_[r] + samples;
  }
  // A large block as the engine's own tables get theirs (huge pages, and a
  // block a finished simulation freed where one is kept): the timelines'
  // pages were a third of a fresh timeline simulation's page faults. It is
  // freed when the last timeline lets go of it, kept for the freeing
  // thread's next simulation like the engine's tables.
  const size_t bytes = sizeof(MemoryTimeline::Change) * std::max<size_t>(change_first_[p], 1);
  auto* changes = static_cast<MemoryTimeline::Change*>(AllocateLarge(bytes));
  if (changes == nullptr) throw std::bad_alloc();
  change_block_.reset(changes, [bytes](MemoryTimeline::Change* c) { FreeLarge(c, bytes); });
}

void Engine::SweepMemory(int rank) {
  options_.record_timeline ? SweepRank<0, true>(rank) : SweepRank<0, false>(rank);
}

// kWidth: streams scanned per step (unused ones never come first), or 0 for
// as many as the rank has.
//
// This stays one function of about 130 lines on purpose: its loop is the
// memory sweep's hot path, one turn per op end and per arrival of every rank,
// and its state (the live memory `mem`, the in-flight count, the ops started
// and the event that starts the next) lives in locals that the `start` lambda
// shares, where the compiler can keep them in registers. Moving the body into
// member functions would put that state behind pointers (moving the ties'
// handling into one cost DualPipe and ZB-V about 2% of their instructions). The
// steps that do not touch it are already their own functions (IndexOpDeltas,
// OpenStreams, SortLinkHeads, NextArrival, SortTiedHeads, RiseAt,
// ArrivalDelta).
//
// Ties without a timeline: only the peaks are kept, so an instant whose
// changes cannot reach over any peak in any order (InstantFits()) needs no
// order; its heads are taken as they stand, the op end first (an arrival
// that starts the next op must follow it). Such ties are decided only where
// they are cheap (a walk's first step) or could move a peak.
template <int kWidth, bool kRecord>
void Engine::SweepRank(int rank) {
  const std::vector<Action>& list = sched_.actions[rank];
  const int32_t first = op_first_[rank];
  const int32_t size = static_cast<int32_t>(list.size());
  LiveMemory<kRecord> mem;
  size_t samples = 0;
  if constexpr (kRecord) {
    // The rank's changes are written through a plain pointer into its slice
    // of the block SizeMemoryTimelines() made (a push_back per change was
    // not inlined; sizing a vector first wrote each fresh line twice, zeros
    // then the changes).
    samples = change_first_[rank + 1] - change_first_[rank];
    mem.next = change_block_.get() + change_first_[rank];
    IndexOpDeltas(rank);
  }
  int inflight = 0, peak_inflight = 0;
  // --sharded-state fsdp2: the rank's sharded gradients, made at its first
  // backward's end (B, or W where the backward is split), kept to the step's end.
  Bytes grads_pending = options_.config.memory.Fsdp2() ? out_->per_rank[rank].memory.gradients : 0;

  // Stream 0 is the rank's ops; stream j > 0 is the link rank_links_[r][j-1].
  const int k = kWidth > 0 ? kWidth : static_cast<int>(rank_links_[rank].size()) + 1;
  OpenStreams(rank, k, kRecord);
  Stream* const streams = streams_.data();
  TimeNs* const head_time = head_time_.data();

  int32_t started = 0;  // ops whose start is applied; the next one's end is head 0
  // The event that starts the next op (kNoTrigger once all have started).
  constexpr int32_t kNoTrigger = std::numeric_limits<int32_t>::min();
  int32_t trigger = size > 0 ? ev_[first].parent : kNoTrigger;
  auto start = [&](TimeNs now) __attribute__((always_inline)) {
    const Action& a = list[started];
    const OpCost& oc = CostOf(a);
    if (a.kind == OpKind::kForward) peak_inflight = std::max(peak_inflight, ++inflight);
    mem.Change(now, oc.start_act, 0, oc.workspace, DeltaOf<kRecord>(a, kOpStart));
    const int32_t id = first + started;
    streams[0].next = id;
    head_time[0] = ev_[id].time;
    ++started;
    trigger = started < size ? ev_[id + 1].parent : kNoTrigger;
  };
  if (trigger < 0 && trigger != kNoTrigger) start(0);  // started at the outset
  // The links with arrivals left, in the processing order of their heads:
  // a link that advances sinks back into place (usually to the end, as the
  // links take turns), so the earliest is always first.
  int n = SortLinkHeads<kRecord>(k);
  const int* const order = order_.data();
  // Without a timeline a tie is decided only where its order can move a peak
  // (InstantFits()); the state of that (tie_) lives in the engine, not in
  // locals, as only ties read it.
  tie_ = TieState{};
  while (true) {
    int best = n > 0 ? order[0] : 0;
    TimeNs t = head_time[best];
    const TimeNs own = head_time[0];
    if constexpr (kRecord) {
      if (own < t || (own == t && best != 0 && TieBefore(streams[0].next, streams[best].next))) {
        best = 0;
        t = own;
      }
    } else if (own < t) {
      best = 0;
      t = own;
    } else if (n > 0 && (own == t || t >= tie_.next)) {
      if (t != tie_.at) {
        if (own == t || (n > 1 && head_time[order[1]] == t)) {
          // Ties that a walk's first step decides are decided (as cheaply as
          // the test would be); the others only when the instant does not
          // fit under the peaks.
          tie_.at = t;
          tie_.fits = false;
          if (!SortTiedHeads<true>(n, t) ||
              (own == t && QuickTieBefore(streams[0].next, streams[order[0]].next) == kUnknown)) {
            const bool own_at = own == t || TimeOf(trigger) == t;
            tie_.fits =
                InstantFits(Headroom(mem), RiseAt(rank, t, n, started, own_at, grads_pending));
            if (!tie_.fits) SortTiedHeads<false>(n, t);
          }
          best = order[0];
        } else {
          tie_.next = FirstLinkTie(n);  // none at t
        }
      }
      // Fitting: the op end first (an arrival that starts the next op must
      // follow it), the links as they stand.
      if (own == t && t == tie_.at &&
          (tie_.fits || TieBefore(streams[0].next, streams[best].next))) {
        best = 0;
      }
    }
    if (t == kNoHead) break;
    Stream& st = streams[best];
    const int32_t id = st.next;
    if (best == 0) {  // an op's end
      const Action& a = list[id - first];
      const OpCost& oc = CostOf(a);
      ForEachSendAtEnd(list, id - first, [&](int32_t j) {
        mem.Change(t, 0, CostOf(list[j]).send, 0, DeltaOf<kRecord>(list[j], kOpSend));
      });
      const bool weight_grads = a.kind == OpKind::kBackward || a.kind == OpKind::kBackwardWeight;
      if (weight_grads) --inflight;
      mem.Change(t, oc.end_act, oc.recv_free, -oc.workspace, DeltaOf<kRecord>(a, kOpEnd));
      if (weight_grads && grads_pending > 0) {
        mem.AddGradients(grads_pending);
        grads_pending = 0;
        out_->per_rank[rank].gradients_from_ns = t;
      }
      head_time[0] = kNoHead;
      if (trigger == id) start(t);
      continue;
    }
    n = NextArrival<kRecord>(best, n);
    int32_t delta = 0;
    Bytes bytes = st.bytes;
    if (bytes < 0) {
      const int hop = HopOf(ev_[id].hop);
      bytes = costs_[hop].output_bytes;
      if constexpr (kRecord) delta = ArrivalDelta(hop, st.out, bytes);
    } else if constexpr (kRecord) {
      delta = st.delta;
    }
    if (st.out) {  // sent from here: the send buffer is freed
      mem.Change(t, 0, -bytes, 0, delta);
    } else {  // received here: held until the consuming op ends
      mem.Change(t, 0, bytes, 0, delta);
      if (trigger == id) start(t);
    }
  }
  if constexpr (kRecord) {
    // The count above is exact; a shortfall would be a bug in the sweep.
    assert(mem.next == change_block_.get() + change_first_[rank] + samples);
    out_->per_rank[rank].memory_timeline =
        MemoryTimeline(deltas_, change_block_, change_first_[rank], samples);
  }
  RankTotals& totals = totals_->ranks[rank];
  totals.peak_activations = mem.peak_act;
  totals.peak_comm = mem.peak_comm;
  totals.peak_workspace = mem.peak_ws;
  totals.peak_live = mem.peak_total;
  out_->per_rank[rank].peak_inflight_microbatches = peak_inflight;
}

// An arrival's delta on a link whose transfers differ in size (recorded timelines only): one per
// (hop, direction), made on first use.
int32_t Engine::ArrivalDelta(int hop, bool out, Bytes bytes) {
  int32_t& d = hop_delta_[2 * hop + out];
  if (d < 0) {
    d = static_cast<int32_t>(deltas_.size());
    deltas_.push_back(MemoryDelta{0, out ? -bytes : bytes, 0});
  }
  return d;
}

// The rank's deltas for a recorded timeline: three per (stage, kind, overlapped) of its stages
// (kOpStart, kOpEnd, kOpSend), and the arrivals' as they come (hop_delta_, filled on first use).
void Engine::IndexOpDeltas(int rank) {
  deltas_.clear();
  for (const int s : out_->per_rank[rank].stages) {
    for (int c = s * 8; c < s * 8 + 8; ++c) {
      const OpCost& oc = op_cost_[c];
      cost_delta_[c] = static_cast<int32_t>(deltas_.size());
      deltas_.push_back(MemoryDelta{oc.start_act, 0, oc.workspace});
      deltas_.push_back(MemoryDelta{oc.end_act, oc.recv_free, -oc.workspace});
      deltas_.push_back(MemoryDelta{0, oc.send, 0});
    }
  }
  hop_delta_.assign(2 * static_cast<size_t>(sched_.num_stages), -1);
}

// `k` streams: 0 for the rank's ops (its head set as ops start), j > 0 for the link
// rank_links_[rank][j-1] with its first arrival's time as head; with `record`, a link whose
// transfers have one size gets one delta.
void Engine::OpenStreams(int rank, int k, bool record) {
  const std::vector<int>& links = rank_links_[rank];
  streams_.assign(k, Stream{});
  head_time_.assign(k, kNoHead);
  for (size_t j = 1; j <= links.size(); ++j) {
    const LinkState& l = links_[links[j - 1]];
    streams_[j] = Stream{l.first, l.first + l.count, l.src == rank, 0, l.bytes};
    if (record && l.bytes >= 0) {
      streams_[j].delta = static_cast<int32_t>(deltas_.size());
      deltas_.push_back(MemoryDelta{0, l.src == rank ? -l.bytes : l.bytes, 0});
    }
    if (l.count > 0) head_time_[j] = ev_[l.first].time;
  }
}

// Moves link stream `j` (order_[0]) past its head arrival: it sinks back into place among the n
// links with arrivals left (usually to the end, as the links take turns), or leaves the order when
// it has none; returns how many are left. kExact (with a timeline): ties with the other heads are
// decided (TieBefore()) as it sinks; else only a tie at the instant whose ties are being decided
// (tie_), and it sinks past the other heads of its time, to be ordered if their instant needs it
// (SortTiedHeads()), lowering tie_.next to that time.
template <bool kExact>
__attribute__((always_inline)) inline int Engine::NextArrival(int j, int n) {
  Stream& st = streams_[j];
  const int32_t next = ++st.next;
  int* const order = order_.data();
  if (next >= st.end) {  // this link is done
    head_time_[j] = kNoHead;
    --n;
    for (int pos = 0; pos < n; ++pos) order[pos] = order[pos + 1];
    return n;
  }
  const TimeNs head = head_time_[j] = ev_[next].time;
  int pos = 0;
  while (pos + 1 < n) {
    const int x = order[pos + 1];
    const TimeNs hx = head_time_[x];
    if (hx > head) break;
    if (hx == head) {
      if (kExact || (head == tie_.at && !tie_.fits)) {
        if (!TieBefore(streams_[x].next, next)) break;
      } else {
        tie_.next = std::min(tie_.next, head);
      }
    }
    order[pos] = x;
    ++pos;
  }
  order[pos] = j;
  return n;
}

// The links with arrivals left, in order_ by their heads (time, then, with kExact, TieBefore; else
// ties stay in link order until SortTiedHeads()); returns how many.
template <bool kExact>
int Engine::SortLinkHeads(int k) {
  order_.resize(k);
  int n = 0;
  for (int j = 1; j < k; ++j) {
    if (head_time_[j] == kNoHead) continue;
    int pos = n++;
    while (pos > 0 && (head_time_[j] < head_time_[order_[pos - 1]] ||
                       (kExact && head_time_[j] == head_time_[order_[pos - 1]] &&
                        TieBefore(streams_[j].next, streams_[order_[pos - 1]].next)))) {
      order_[pos] = order_[pos - 1];
      --pos;
    }
    order_[pos] = j;
  }
  return n;
}

// The earliest time two of the n link heads in order_ share, or kNoHead.
TimeNs Engine::FirstLinkTie(int n) const {
  for (int i = 1; i < n; ++i) {
    if (head_time_[order_[i]] == head_time_[order_[i - 1]]) return head_time_[order_[i]];
  }
  return kNoHead;
}

// Orders the links whose heads are at `t`, the first of the n in order_, by TieBefore(); with
// kQuick only as far as a walk's first step decides (QuickTieBefore()), returning false at the
// first pair it does not (the heads at t are then partly sorted, which leaves them in an order).
template <bool kQuick>
bool Engine::SortTiedHeads(int n, TimeNs t) {
  int* const order = order_.data();
  for (int i = 1; i < n && head_time_[order[i]] == t; ++i) {
    const int j = order[i];
    int pos = i;
    while (pos > 0) {
      const int32_t x = streams_[j].next, y = streams_[order[pos - 1]].next;
      int before;
      if constexpr (kQuick) {
        before = QuickTieBefore(x, y);
        if (before == kUnknown) {
          order[pos] = j;  // back in the order, where it got to
          return false;
        }
      } else {
        before = TieBefore(x, y);
      }
      if (!before) break;
      order[pos] = order[pos - 1];
      --pos;
    }
    order[pos] = j;
  }
  return true;
}

// What `rank`'s changes left at instant `t` can add (InstantRise): the arrivals into it at t on
// the links whose heads are at t (the first of the n in order_; an arrival out of it frees its send
// buffer) and, with `own_at` (its pending op end is at t or its next op starts at t), that op end
// (with `grads_pending`, the gradients its end makes when it is a backward) and that op's start.
// The sweep is at t: no event before it is left.
InstantRise Engine::RiseAt(int rank, TimeNs t, int n, int32_t started, bool own_at,
                           Bytes grads_pending) const {
  const int* const order = order_.data();
  const TimeNs* const head = head_time_.data();
  const Event* const ev = ev_.data();
  InstantRise rise;
  Bytes in = 0;
  for (int i = 0; i < n && head[order[i]] == t; ++i) {
    const Stream& st = streams_[order[i]];
    if (st.out) continue;
    int32_t e = st.next;
    do {  // its head, and any more arrivals at t
      in += st.bytes >= 0 ? st.bytes : costs_[HopOf(ev[e].hop)].output_bytes;
    } while (++e < st.end && ev[e].time == t);
  }
  rise.comm = rise.total = in;
  if (!own_at) return rise;
  const std::vector<Action>& list = sched_.actions[rank];
  const int32_t first = op_first_[rank];
  const int32_t size = static_cast<int32_t>(list.size());
  if (head[0] == t) {  // the pending op end: its sends, and its frees
    const int32_t end = streams_[0].next - first;
    ForEachSendAtEnd(list, end, [&](int32_t j) { rise.Add(0, CostOf(list[j]).send, 0); });
    const OpCost& oc = CostOf(list[end]);
    rise.Add(oc.end_act, oc.recv_free, -oc.workspace);
    const OpKind kind = list[end].kind;
    if (grads_pending > 0 && (kind == OpKind::kBackward || kind == OpKind::kBackwardWeight)) {
      rise.total += grads_pending;
    }
  }
  // The next op, when it starts at t. Only it can: the ops after it start
  // after its end, unless it has no duration (InstantRise::ordered).
  if (started < size && TimeOf(ev[first + started].parent) == t) {
    const OpCost& oc = CostOf(list[started]);
    rise.Add(oc.start_act, 0, oc.workspace);
    rise.ordered = ev[first + started].time == t;
  }
  return rise;
}

}  // namespace pipecast::internal
