// The planner's progress on stderr while it searches: nothing for a search
// that ends within `after_ns` (2 s by default, --progress-after), then a bar
// redrawn in place on a terminal, or plain lines ("planner: 1200/5600
// configurations simulated (3.2 s)", with the time since the search began)
// when stderr is a file or a pipe. A pass that pruning ends early still ends
// at 100%, counting what it skipped. Never on
// stdout, so --json output stays one JSON object (docs/planner.md,
// "Progress").
#ifndef PIPECAST_REPORT_SEARCH_PROGRESS_H_
#define PIPECAST_REPORT_SEARCH_PROGRESS_H_

#include <functional>
#include <string>

#include "base/clock.h"
#include "base/units.h"
#include "planner/planner.h"

namespace pipecast {

// "1200/5600 configurations simulated", "300/5600 configurations partitioned".
std::string SearchProgressText(const SearchProgress& progress);

struct SearchProgressStyle {
  bool bar = false;  // redraw one line in place (a terminal) instead of printing lines
  TimeNs after_ns = 2'000'000'000;  // show nothing before the search has run this long
  // At most one update per interval: often enough for a bar to move, rarely
  // enough for a log file.
  TimeNs bar_every_ns = 100'000'000;
  TimeNs line_every_ns = 2'000'000'000;
  int bar_width = 30;  // characters inside the brackets
  std::string prefix = "planner: ";
};

// Turns the search's updates into text for `write` (stderr in the tool), by
// `clock`. Not thread-safe: the planner calls it from its searching thread.
class SearchProgressDisplay {
 public:
  SearchProgressDisplay(const Clock& clock, SearchProgressStyle style,
                        std::function<void(const std::string& text)> write);
  void Update(const SearchProgress& progress);
  // Ends the bar's line (before other output on stderr); nothing in line mode.
  void Finish();

 private:
  void Show(const SearchProgress& progress);

  const Clock& clock_;
  SearchProgressStyle style_;
  std::function<void(const std::string&)> write_;
  TimeNs start_ns_ = 0;
  TimeNs shown_ns_ = 0;
  bool shown_any_ = false;
  bool bar_open_ = false;  // a bar line without its newline yet
  SearchProgress last_;
  size_t bar_length_ = 0;  // of the bar line last drawn, to blank what is left of it
};

}  // namespace pipecast

#endif  // PIPECAST_REPORT_SEARCH_PROGRESS_H_
