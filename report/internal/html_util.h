// Helpers shared by the HTML report's files (html_report.cc, html_timeline.cc,
// html_memory.cc): number formats, the page geometry and the time axis that
// the timeline and the memory charts share, so their x positions line up.
// Private to the sim part.
#ifndef PIPECAST_REPORT_INTERNAL_HTML_UTIL_H_
#define PIPECAST_REPORT_INTERNAL_HTML_UTIL_H_

#include <fmt/format.h>

#include <string>

#include "base/text_table.h"
#include "base/units.h"
#include "sim/simulator.h"

namespace pipecast::internal {

// Chart width: fits a 1400 px browser window with the page's margins.
inline constexpr double kSvgWidthPx = 1300;
// Left gutter for "rank 63" and its numbers.
inline constexpr double kGutterPx = 118;
// Right margin, so the last tick label is not clipped.
inline constexpr double kRightPadPx = 22;
inline constexpr double kPlotWidthPx = kSvgWidthPx - kGutterPx - kRightPadPx;
// Height of the time axis labels above a chart.
inline constexpr double kAxisPx = 22;
// Ticks aimed for on the time axis: a label every ~100 px.
inline constexpr int kTimeTicks = 11;

// Exact microseconds for a data attribute: integer ns as "1234.567".
inline std::string UsAttr(TimeNs ns) {
  const char* sign = ns < 0 ? "-" : "";
  const TimeNs a = ns < 0 ? -ns : ns;
  return fmt::format("{}{}.{:03d}", sign, a / 1000, static_cast<int>(a % 1000));
}
inline std::string GiBWithUnit(Bytes b) { return fmt::format("{:.2f} GiB", ToGiB(b)); }

// The x axis of the timeline and memory charts: time 0 at the gutter's edge,
// `end_ns` at the right end of the plot.
class TimeAxis {
 public:
  explicit TimeAxis(TimeNs end_ns) : end_ns_(end_ns > 0 ? end_ns : 1) {}
  TimeNs end_ns() const { return end_ns_; }
  double PxPerNs() const { return kPlotWidthPx / static_cast<double>(end_ns_); }
  double X(TimeNs t) const { return kGutterPx + static_cast<double>(t) * PxPerNs(); }
  // Times are shown in ms from 1 ms of span up, else in µs.
  bool InMs() const { return end_ns_ >= 1'000'000; }
  const char* Unit() const { return InMs() ? "ms" : "µs"; }
  std::string Time(TimeNs t) const {
    return InMs() ? fmt::format("{:.3f} ms", static_cast<double>(t) / 1e6)
                  : fmt::format("{:.3f} µs", static_cast<double>(t) / 1e3);
  }

 private:
  TimeNs end_ns_;
};

// The axis both charts use: the end of the last op or transfer, extended by
// each rank's all-reduce tail for schedules with a flush.
TimeAxis TimeAxisFor(const SimResult& result);

// Vertical grid lines from y_top to y_bottom and tick labels above y_top, in
// the axis unit (`<g class="axis">`).
std::string TimeAxisSvg(const TimeAxis& axis, double y_top, double y_bottom);

}  // namespace pipecast::internal

#endif  // PIPECAST_REPORT_INTERNAL_HTML_UTIL_H_
