#include "report/search_progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace pipecast {

std::string SearchProgressText(const SearchProgress& progress) {
  const bool sweep = progress.pass == SearchProgress::Pass::kSweep;
  if (progress.pruned > 0) {
    const bool partition = progress.pass == SearchProgress::Pass::kPartition;
    return fmt::format("{}/{} {} done: {} {}, {} skipped ({})", progress.done, progress.total,
                       sweep ? "micro-batch counts of the chosen layout" : "configurations",
                       progress.done - progress.pruned, partition ? "partitioned" : "simulated",
                       progress.pruned,
                       sweep       ? "over the search's simulation limit"
                       : partition ? "their lower bound cannot reach the top before partitioning"
                                   : "their lower bound cannot reach the top");
  }
  if (sweep) {
    return fmt::format("{}/{} micro-batch counts of the chosen layout simulated", progress.done,
                       progress.total);
  }
  return fmt::format(
      "{}/{} configurations {}", progress.done, progress.total,
      progress.pass == SearchProgress::Pass::kPartition ? "partitioned" : "simulated");
}

SearchProgressDisplay::SearchProgressDisplay(const Clock& clock, SearchProgressStyle style,
                                             std::function<void(const std::string&)> write)
    : clock_(clock), style_(std::move(style)), write_(std::move(write)), start_ns_(clock.NowNs()) {}

void SearchProgressDisplay::Update(const SearchProgress& progress) {
  const TimeNs now = clock_.NowNs();
  if (now - start_ns_ < style_.after_ns) return;
  const bool new_pass = !shown_any_ || progress.pass != last_.pass;
  const bool pass_done = progress.done >= progress.total;
  const TimeNs every = style_.bar ? style_.bar_every_ns : style_.line_every_ns;
  // The end of a pass is shown once, as soon as it is known.
  const bool repeat = shown_any_ && progress.pass == last_.pass && progress.done == last_.done;
  if (repeat || (!new_pass && !pass_done && now - shown_ns_ < every)) return;
  if (new_pass && bar_open_) Finish();
  shown_ns_ = now;
  Show(progress);
}

void SearchProgressDisplay::Show(const SearchProgress& progress) {
  shown_any_ = true;
  last_ = progress;
  // The time since the search began, so a long pass shows it is alive.
  const std::string text = fmt::format("{} ({:.1f} s)", SearchProgressText(progress),
                                       static_cast<double>(clock_.NowNs() - start_ns_) / 1e9);
  if (!style_.bar) {
    write_(style_.prefix + text + "\n");
    return;
  }
  const int width = std::max(1, style_.bar_width);
  const int filled = progress.total > 0 ? static_cast<int>(int64_t{width} *
                                                           std::min(progress.done, progress.total) /
                                                           progress.total)
                                        : width;
  std::string line = style_.prefix + "[" + std::string(filled, '#') +
                     std::string(width - filled, '.') + "] " + text;
  const size_t length = line.size();
  if (length < bar_length_) line += std::string(bar_length_ - length, ' ');
  bar_length_ = length;
  write_("\r" + line);
  bar_open_ = true;
}

void SearchProgressDisplay::Finish() {
  if (!bar_open_) return;
  write_("\n");
  bar_open_ = false;
  bar_length_ = 0;
}

}  // namespace pipecast
