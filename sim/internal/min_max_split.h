// Splitting n layers into p contiguous stages so that the largest stage value
// is smallest, among splits whose every stage is allowed: the search behind
// the memory-aware partition (sim/memory_partition.h).
//
// The answer is defined by the O(p n^2) dynamic programme
//   best[k][i] = min over j < i of max(best[k-1][j], value(k-1, j, i-1)),
// over allowed (k-1, j, i-1), the smallest such j on ties, read back from
// (p, n) (MinMaxSplitReference() in sim/memory_partition_test.cc spells it
// out). MinMaxSplit() returns exactly the same split, faster: it runs the same
// programme capped at a bound U, where only the states with best <= U are
// kept, and grows U from a lower bound of the optimum until (p, n) is
// reached. Two range-monotone helpers per stage s bound the work:
//   lower(s, j, i) <= value(s, j, i), and never larger for a range inside
//     another (so it only grows as j falls);
//   filter(s, j, i) is true whenever s allows [j, i], and false for every
//     range around one where it is false.
// With them a state (k, i) looks back only over the j whose last stage
// [j, i-1] has lower <= U and passes the filter (about n/p layers when U is
// near the optimum), and only i that k stages can reach from the front and
// p-k stages from the back are visited. A state whose best is <= U is
// computed exactly from states that are themselves exact, so every state
// the read-back visits, and the tie-breaks among them, are those of the full
// programme. Without a cap (U = infinity) it is the full programme restricted
// by the filter, so "no split" answers stay exact too.
#ifndef PIPECAST_SIM_INTERNAL_MIN_MAX_SPLIT_H_
#define PIPECAST_SIM_INTERNAL_MIN_MAX_SPLIT_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "sim/partition.h"

namespace pipecast::internal {

inline constexpr int64_t kNoCap = std::numeric_limits<int64_t>::max();

// Largest i such that layers [0, i) split into `segments` ranges, range k
// passing ok(k, j, last) (range-monotone), greedily from the front: reach[k]
// for k = 0..segments. Greedy maximal ranges reach furthest for monotone ok.
template <class Ok>
std::vector<int> GreedyReach(int n, int segments, const Ok& ok) {
  std::vector<int> reach(segments + 1, 0);
  int start = 0;
  for (int k = 1; k <= segments; ++k) {
    int end = start;  // exclusive
    while (end < n && ok(k - 1, start, end)) ++end;
    reach[k] = end;
    start = end;
  }
  return reach;
}

// The same from the back for the last `segments` of p ranges: the smallest i
// such that layers [i, n) split into ranges p-k..p-1, each passing ok, as
// n - i, for k = 0..segments.
template <class Ok>
std::vector<int> GreedyReachFromBack(int n, int p, int segments, const Ok& ok) {
  std::vector<int> reach(segments + 1, 0);
  int end = n;  // exclusive
  for (int k = 1; k <= segments; ++k) {
    int start = end;
    while (start > 0 && ok(p - k, start - 1, end - 1)) --start;
    reach[k] = n - start;
    end = start;
  }
  return reach;
}

// One run of the programme capped at `cap`: the split (empty when (p, n) is
// not reached with best <= cap) and whether the cap left anything out (when
// it did not, a larger cap finds nothing more).
struct CappedSplit {
  std::vector<StageLayers> split;
  bool capped = false;
};

template <class Value, class Lower, class Allowed, class Filter>
CappedSplit CappedMinMaxSplit(int n, int p, int64_t cap, const Value& value, const Lower& lower,
                              const Allowed& allowed, const Filter& filter) {
  CappedSplit out;
  auto ok = [&](int s, int j, int last) {
    if (!filter(s, j, last)) return false;
    if (cap != kNoCap && lower(s, j, last) > cap) {
      out.capped = true;
      return false;
    }
    return true;
  };
  const std::vector<int> front = GreedyReach(n, p, ok);
  const std::vector<int> back = GreedyReachFromBack(n, p, p, ok);
  if (front[p] < n) return out;
  // Level k keeps i in [lo[k], hi[k]]: reachable by k ranges from the front
  // and leaving a rest that p - k ranges reach from the back.
  std::vector<int> lo(p + 1), hi(p + 1);
  for (int k = 0; k <= p; ++k) {
    lo[k] = std::max(k, n - back[p - k]);
    hi[k] = std::min(front[k], n - (p - k));
    if (hi[k] < lo[k]) return out;
  }
  std::vector<std::vector<int64_t>> best(p + 1);
  std::vector<std::vector<int>> cut(p + 1);
  best[0].assign(1, 0);
  cut[0].assign(1, -1);
  for (int k = 1; k <= p; ++k) {
    best[k].assign(hi[k] - lo[k] + 1, kNoCap);
    cut[k].assign(hi[k] - lo[k] + 1, -1);
    const std::vector<int64_t>& prev = best[k - 1];
    // suffix[x]: the least best of level k-1 at its x-th state or later. No
    // cut there can give less than it.
    std::vector<int64_t> suffix(prev.size() + 1, kNoCap);
    for (size_t x = prev.size(); x-- > 0;) suffix[x] = std::min(prev[x], suffix[x + 1]);
    const int j_min = std::max(k - 1, lo[k - 1]);
    for (int i = lo[k]; i <= hi[k]; ++i) {
      int64_t b = kNoCap;
      int at = -1;
      auto try_cut = [&](int j) {
        const int64_t before = prev[j - lo[k - 1]];
        if (before == kNoCap || before > b || !allowed(k - 1, j, i - 1)) return;
        const int64_t v = std::max(before, value(k - 1, j, i - 1));
        if (v > cap) {
          out.capped = true;
        } else if (v < b || (v == b && j < at)) {  // the smallest j on ties
          b = v;
          at = j;
        }
      };
      const int j_max = std::min(i - 1, hi[k - 1]);
      if (j_max < j_min) continue;  // best stays kNoCap
      // Start at the previous state's cut (optimal cuts mostly move forward
      // with i) and look both ways while a cut can still reach b.
      int pivot = j_max;
      if (i > lo[k] && cut[k][i - 1 - lo[k]] >= 0) {
        pivot = std::clamp(cut[k][i - 1 - lo[k]], j_min, j_max);
      }
      // Up: shorter last stages, until no later cut's previous best can reach b.
      for (int j = pivot; j <= j_max; ++j) {
        if (suffix[j - lo[k - 1]] > b) break;
        if (ok(k - 1, j, i - 1)) try_cut(j);
      }
      // Down: longer last stages, whose lower bound and filter only fail more.
      for (int j = pivot - 1; j >= j_min; --j) {
        if (b != kNoCap && lower(k - 1, j, i - 1) > b) break;
        if (!ok(k - 1, j, i - 1)) break;
        try_cut(j);
      }
      best[k][i - lo[k]] = b;
      cut[k][i - lo[k]] = at;
    }
  }
  if (best[p][n - lo[p]] == kNoCap) return out;
  out.split.resize(p);
  for (int k = p, end = n; k >= 1; --k) {
    const int j = cut[k][end - lo[k]];
    out.split[k - 1] = StageLayers{j, end - 1};
    end = j;
  }
  return out;
}

// A U, within 1/32 above the smallest, with which p ranges passing lower <=
// U and the filter cover the n layers: near a lower bound of the optimum
// (binary search on U, greedy check), where the capped runs start. kNoCap
// when even U = infinity does not cover them.
template <class Lower, class Filter>
int64_t LowestCap(int n, int p, const Lower& lower, const Filter& filter) {
  auto covers = [&](int64_t cap) {
    return GreedyReach(n, p, [&](int s, int j, int last) {
             return filter(s, j, last) && (cap == kNoCap || lower(s, j, last) <= cap);
           })[p] >= n;
  };
  if (!covers(kNoCap)) return kNoCap;
  // Every range's lower is at most the whole model's, so that cap covers.
  int64_t lo = 0, hi = 0;
  for (int s = 0; s < p; ++s) hi = std::max(hi, lower(s, 0, n - 1));
  while (lo < hi && hi - lo > hi / 32) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (covers(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return hi;
}

// The split of the programme described above; empty when no split has
// every stage allowed. REQUIRES: 1 <= p <= n; value, lower >= 0.
template <class Value, class Lower, class Allowed, class Filter>
std::vector<StageLayers> MinMaxSplit(int n, int p, const Value& value, const Lower& lower,
                                     const Allowed& allowed, const Filter& filter) {
  int64_t cap = LowestCap(n, p, lower, filter);
  if (cap == kNoCap) return {};
  // The cap grows by a step that doubles each round, until a run finds the
  // split or leaves nothing out.
  int64_t step = std::max<int64_t>(cap / 16, 1);
  while (true) {
    CappedSplit run = CappedMinMaxSplit(n, p, cap, value, lower, allowed, filter);
    if (!run.split.empty() || !run.capped || cap == kNoCap) return std::move(run.split);
    cap = cap > kNoCap - 1 - step ? kNoCap : cap + step;
    step = step > kNoCap / 4 ? step : step * 2;
  }
}

}  // namespace pipecast::internal

#endif  // PIPECAST_SIM_INTERNAL_MIN_MAX_SPLIT_H_
