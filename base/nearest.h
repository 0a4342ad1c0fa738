// Suggestions for typos: the edit distance between two names and the nearest
// of a list, as used by "did you mean ...?" in file readers and tools.
// Pure functions; thread-safe.
#ifndef PIPECAST_BASE_NEAREST_H_
#define PIPECAST_BASE_NEAREST_H_

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace pipecast {

// Levenshtein distance: insertions, deletions and substitutions of one byte.
inline size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The candidate nearest to `name` within `max_distance` edits (the first on a
// tie), or "" when none is that close.
inline std::string NearestName(std::string_view name, const std::vector<std::string>& candidates,
                               size_t max_distance = 2) {
  std::string best;
  size_t best_distance = max_distance + 1;
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(name, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

}  // namespace pipecast

#endif  // PIPECAST_BASE_NEAREST_H_
