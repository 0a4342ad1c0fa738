// The engine's ranking step (sim/internal/engine.h, "The event order"): the
// events numbered in the old engine's processing order, with the causes
// pass 1 left open chosen on the way.
#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "sim/internal/engine.h"

namespace pipecast::internal {

namespace {

// Radix sort digits: at most 15 bits, so times up to 2^30 ns (1.07 s, the
// p=64 m=1024 iterations) sort in two passes rather than three of 11 bits;
// a pass's counts (128 KiB) and its scattered writes stay in the L2 cache.
// With a timeline the sort was an eighth of the call: one pass fewer cut
// that by a third, more than the L1 misses of the counts cost.
constexpr int kMaxDigitBits = 15;
// Below this many events a comparison sort of the packed keys beats the
// radix sort, whose two passes each clear and sum 2^15 counts (256 KiB)
// whatever n is: at DualPipe's p = 8, m = 64 (about 1 800 events, ranked
// because its two directions tie) that fixed cost was a seventh of a
// simulation.
constexpr int32_t kComparisonSortMax = 1 << 14;

// An event and its time: packed into one word (time above, id below) when
// the times fit 32 bits, as they do up to 4.29 s; else a pair.
struct Keyed {
  uint64_t time;
  int32_t id;
};
uint64_t TimeOfKey(uint64_t k) { return k >> 32; }
int32_t IdOfKey(uint64_t k) { return static_cast<int32_t>(k & 0xffffffffu); }
uint64_t TimeOfKey(const Keyed& k) { return k.time; }
int32_t IdOfKey(const Keyed& k) { return k.id; }

// Sorts src[0, n) by time, stably (LSD radix over `bits` bits); returns the
// buffer that holds the result, src or dst.
template <typename T>
T* SortByTime(T* src, T* dst, int32_t n, int bits) {
  const int passes = (bits + kMaxDigitBits - 1) / kMaxDigitBits;
  if (passes == 0) return src;
  const int digit = (bits + passes - 1) / passes;
  const size_t buckets = size_t{1} << digit;
  const uint64_t mask = buckets - 1;
  std::vector<uint32_t> count(buckets * passes, 0);
  for (int32_t i = 0; i < n; ++i) {
    const uint64_t t = TimeOfKey(src[i]);
    for (int k = 0; k < passes; ++k) ++count[k * buckets + ((t >> (k * digit)) & mask)];
  }
  for (int k = 0; k < passes; ++k) {
    uint32_t* c = count.data() + k * buckets;
    uint32_t sum = 0;
    for (size_t d = 0; d < buckets; ++d) sum += std::exchange(c[d], sum);
    const int shift = k * digit;
    for (int32_t i = 0; i < n; ++i) dst[c[(TimeOfKey(src[i]) >> shift) & mask]++] = src[i];
    std::swap(src, dst);
  }
  return src;
}

}  // namespace

// Fills `out` with `e`'s candidate causes (one when decided) and returns how many.
int Engine::Candidates(int32_t e, int32_t out[3]) const {
  const Event& ev = ev_[e];
  out[0] = ev.parent;
  if (e < num_ops_) {
    if (ev.hop == kNoAlternative) return 1;
    if (ev.hop >= 0) {
      out[1] = ev.hop;
      return 2;
    }
    const std::pair<int32_t, int32_t>& more = alternatives_[-2 - ev.hop];
    out[1] = more.first;
    out[2] = more.second;
    return 3;
  }
  if ((ev.hop & kTiedArrival) == 0) return 1;
  out[1] = e - 1;
  return 2;
}

// TryTieBefore() past its first step. Ties whose causes tie for several
// steps come from schedules whose ops run in step across ranks: DualPipe's
// two directions, with equal costs, send over each link both ways at one
// instant (rank r's arrival from r + 1 against its own send to r + 1), and
// the causes of the two arrivals tie back through both ranks' ops. The next
// tie of the same two streams walks back into the pairs this one visited:
// each pair a walk visits has the walk's answer (it is the same comparison
// one step further up), so the pairs are remembered and a later walk stops
// at the first it finds. Without the memo DualPipe's walks spent the budget
// (one step per event) and the engine ranked every event, two fifths of its
// time. The answers are the walk's; the memo changes only the cost.
int Engine::LongWalk(int32_t x, int32_t y) {
  if (partner_.data() == nullptr) {
    partner_.Reset(static_cast<size_t>(num_events_));
    std::memset(partner_.data(), 0xff, sizeof(uint32_t) * static_cast<size_t>(num_events_));
  }
  // The walk's steps and the pairs it visits in locals: with a vector's
  // growth (a call) in the loop the budget went back to memory every step.
  // A walk remembers its first kWalkPathMemo pairs, those nearest the ties
  // to come; past them it only walks.
  int64_t budget = walk_budget_ + kLongWalkAllowance;
  struct Pair {
    int32_t x, y;
  } path[kWalkPathMemo];  // not initialised: only [0, visited) is read
  int visited = 0;
  int answer = kUnknown;
  for (; budget > 0; --budget) {
    if (x >= 0 && y >= 0) {
      // The pair is remembered at its lower id: the higher one, and above
      // it whether the lower came first. A remembered pair was decided when
      // its walk passed, and a decided event stays decided.
      const uint32_t seen = partner_[std::min(x, y)];
      if ((seen & kPartnerId) == static_cast<uint32_t>(std::max(x, y))) {
        answer = (seen >> 31) != (x > y);
        break;
      }
      if (visited < kWalkPathMemo) path[visited++] = {x, y};
    }
    answer = WalkStep(&x, &y);
    if (answer != kStepUp) break;
    answer = kUnknown;
  }
  walk_budget_ = budget;
  if (answer == kUnknown) return kUnknown;
  for (int i = 0; i < visited; ++i) {
    const auto [a, b] = path[i];
    const uint32_t lower_first = (answer == 1) != (a > b);
    partner_[std::min(a, b)] = static_cast<uint32_t>(std::max(a, b)) | lower_first << 31;
  }
  return answer;
}

// Replays the old engine's event queue with the times known: an event is
// inserted when the last of its candidate causes is processed (that one is
// its parent), at the end of its instant's insertions so far, and an
// instant's events are processed in insertion order. The instants come from
// one sort by time (LSD radix: the tables are far too large for a
// comparison sort to be cheap), each with its block of places; nothing else
// is compared.
void Engine::RankEvents() {
  const int32_t n = num_events_;
  const int p = sched_.num_ranks;
  const size_t size = static_cast<size_t>(std::max(n, 1));
  // The processing order being built: place k holds the event processed k-th
  // after the p starts. Scratch: only each event's rank stays.
  LargeArray<int32_t> places;
  places.Reset(size);
  int32_t* const place = places.data();
  std::memset(place, 0xff, sizeof(int32_t) * static_cast<size_t>(n));
  node_.Reset(size);
  rank_.Reset(size);
  const std::vector<int32_t> start_waiter = LinkWaiters();
  NumberAllInstants();
  int32_t* const fill = group_.data();
  auto insert = [&](int32_t e, int32_t parent) __attribute__((always_inline)) {
    if (node_[e].open_at_start > 1) {  // tied: the parent is chosen now
      Event& ev = ev_[e];
      ev.parent = parent;
      if (e < num_ops_) {
        ev.hop = kNoAlternative;
      } else {
        ev.hop &= ~kTiedArrival;
      }
    }
    place[fill[node_[e].instant]++] = e;
  };
  for (int r = 0; r < p; ++r) {
    const int32_t e = start_waiter[r];
    if (e >= 0 && --node_[e].open == 0) insert(e, -1 - r);
  }
  for (int32_t k = 0; k < n; ++k) {
    // The places ahead are mostly filled by now: fetch their nodes, and the
    // nodes and events of their waiters, while this one is handled.
    if (k + kPrefetchPlaces < n && place[k + kPrefetchPlaces] >= 0) {
      __builtin_prefetch(&node_[place[k + kPrefetchPlaces]]);
    }
    if (k + kPrefetchPlaces / 2 < n && place[k + kPrefetchPlaces / 2] >= 0) {
      for (int32_t w : node_[place[k + kPrefetchPlaces / 2]].waiter) {
        if (w >= 0) {
          __builtin_prefetch(&node_[w], 1);
          __builtin_prefetch(&ev_[w], 1);
        }
      }
    }
    const int32_t x = place[k];
    const RankNode& nx = node_[x];
    rank_[x] = p + k;
    for (int32_t w : nx.waiter) {
      if (w >= 0 && --node_[w].open == 0) insert(w, x);
    }
  }
  // Only the ranks stay. With a timeline the records come next and need
  // the memory more than the next simulation does.
  if (options_.record_timeline) {
    node_.ReleaseToSystem();
    places.ReleaseToSystem();
  } else {
    node_.Reset(0);
  }
  ranked_ = true;
}

// Each event's candidate causes learn it as a waiter (node_[c].waiter, at its sibling order), and
// it counts them (open); returns, per rank, the event waiting for that rank's start (or -1).
std::vector<int32_t> Engine::LinkWaiters() {
  const int32_t n = num_events_;
  std::memset(node_.data(), 0xff, sizeof(RankNode) * static_cast<size_t>(n));
  std::vector<int32_t> start_waiter(sched_.num_ranks, -1);
  for (int32_t e = 0; e < n; ++e) {
    int32_t c[3];
    const int nc = Candidates(e, c);
    node_[e].open = static_cast<int16_t>(nc);
    node_[e].open_at_start = static_cast<int16_t>(nc);
    const int sib = SiblingOrder(e);
    for (int i = 0; i < nc; ++i) {
      if (c[i] < 0) {
        start_waiter[-1 - c[i]] = e;
        continue;
      }
      int32_t* slot = &node_[c[i]].waiter[sib];
      if (*slot >= 0) ++slot;  // the second op end
      *slot = e;
    }
  }
  return start_waiter;
}

// The events sorted by time, then numbered by instant with each instant's block of places
// (NumberInstants): in one word each when the times fit 32 bits, else a key and an id apiece.
void Engine::NumberAllInstants() {
  const int32_t n = num_events_;
  const size_t size = static_cast<size_t>(std::max(n, 1));
  LargeArray<uint64_t> a, b;
  uint64_t all = 0;
  for (int32_t e = 0; e < n; ++e) all |= static_cast<uint64_t>(ev_[e].time);
  int bits = all == 0 ? 0 : 64 - __builtin_clzll(all);
  const uint64_t* sorted = bits <= 32 ? SortKeys(&a, &b, &bits) : nullptr;
  group_.clear();
  if (sorted != nullptr) {
    NumberInstants(sorted, n);
    if (options_.record_timeline) {
      a.ReleaseToSystem();
      b.ReleaseToSystem();
    }
    return;
  }
  a.ReleaseToSystem();
  b.ReleaseToSystem();
  LargeArray<Keyed> wide, wide_tmp;
  wide.Reset(size);
  wide_tmp.Reset(size);
  for (int32_t e = 0; e < n; ++e) wide[e] = Keyed{static_cast<uint64_t>(ev_[e].time), e};
  NumberInstants(SortByTime(wide.data(), wide_tmp.data(), n, bits), n);
  if (options_.record_timeline) {
    wide.ReleaseToSystem();
    wide_tmp.ReleaseToSystem();
  }
}

// The events as (time << 32 | id), sorted, in *a or *b; *bits: the times'
// width. Null when the times need more than 32 bits (the replay's wide keys).
const uint64_t* Engine::SortKeys(LargeArray<uint64_t>* a, LargeArray<uint64_t>* b, int* bits) {
  const int32_t n = num_events_;
  const size_t size = static_cast<size_t>(std::max(n, 1));
  a->Reset(size);
  b->Reset(size);
  // The keys and the times' width in one pass over the events.
  uint64_t all = 0;
  for (int32_t e = 0; e < n; ++e) {
    const uint64_t t = static_cast<uint64_t>(ev_[e].time);
    all |= t;
    (*a)[e] = t << 32 | static_cast<uint32_t>(e);
  }
  *bits = all == 0 ? 0 : 64 - __builtin_clzll(all);
  if (*bits > 32) return nullptr;
  if (n <= kComparisonSortMax) {
    // The keys are distinct (the id is in them): the order is the radix
    // sort's, time then id.
    std::sort(a->data(), a->data() + n);
    return a->data();
  }
  return SortByTime(a->data(), b->data(), n, *bits);
}

// Each event's instant (its index in `group_`, which holds each instant's
// first place) from the events sorted by time.
template <typename T>
void Engine::NumberInstants(const T* sorted, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    if (i == 0 || TimeOfKey(sorted[i]) != TimeOfKey(sorted[i - 1])) group_.push_back(i);
    node_[IdOfKey(sorted[i])].instant = static_cast<int32_t>(group_.size()) - 1;
  }
}

}  // namespace pipecast::internal
