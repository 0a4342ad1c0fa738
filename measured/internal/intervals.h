// Sets of time intervals as sorted, disjoint lists: the unions, lengths and
// overlaps measured/ computes GPU busy time with. Half-open [start, end) in ns.
// Pure functions; thread-safe.
#ifndef PIPECAST_MEASURED_INTERNAL_INTERVALS_H_
#define PIPECAST_MEASURED_INTERNAL_INTERVALS_H_

#include <algorithm>
#include <utility>
#include <vector>

#include "base/units.h"

namespace pipecast::measured::internal {

using Interval = std::pair<TimeNs, TimeNs>;

// The union of `intervals` as sorted, disjoint intervals (empty ones dropped;
// touching ones joined).
inline std::vector<Interval> Union(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end());
  std::vector<Interval> out;
  for (const Interval& i : intervals) {
    if (i.second <= i.first) continue;
    if (!out.empty() && i.first <= out.back().second) {
      out.back().second = std::max(out.back().second, i.second);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

// Total length of disjoint intervals.
inline TimeNs Length(const std::vector<Interval>& set) {
  TimeNs sum = 0;
  for (const Interval& i : set) sum += i.second - i.first;
  return sum;
}

// Length of the intersection of two sorted, disjoint sets.
inline TimeNs OverlapLength(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  TimeNs sum = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const TimeNs lo = std::max(a[i].first, b[j].first);
    const TimeNs hi = std::min(a[i].second, b[j].second);
    if (hi > lo) sum += hi - lo;
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return sum;
}

}  // namespace pipecast::measured::internal

#endif  // PIPECAST_MEASURED_INTERNAL_INTERVALS_H_
