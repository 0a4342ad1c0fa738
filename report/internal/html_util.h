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
// The timeline's zoom levels (html_timeline.cc, ZoomCss): the chart drawn
// again this many times wider, in a frame that scrolls sideways. 1 is the
// page's default; at 16 x a 128-micro-batch timeline's ops are ~20 px wide.
inline constexpr int kZoomLevels[] = {1, 4, 16};
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
  // `zoom`: the plot drawn this many times wider than kPlotWidthPx.
  explicit TimeAxis(TimeNs end_ns, int zoom = 1)
      : end_ns_(end_ns > 0 ? end_ns : 1), zoom_(zoom > 0 ? zoom : 1) {}
  TimeNs end_ns() const { return end_ns_; }
  int zoom() const { return zoom_; }
  TimeAxis Zoomed(int zoom) const { return TimeAxis(end_ns_, zoom); }
  double PlotWidthPx() const { return kPlotWidthPx * zoom_; }
  double SvgWidthPx() const { return kSvgWidthPx + kPlotWidthPx * (zoom_ - 1); }
  double PxPerNs() const { return PlotWidthPx() / static_cast<double>(end_ns_); }
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
  int zoom_;
};

// The CSS that makes the zoom buttons work without script: each level's chart
// sits in its own frame after the buttons, and the checked button shows its
// frame and hides the others (`input:checked ~ frame`).
inline std::string ZoomCss() {
  std::string out =
      ".zoom>input{position:absolute;opacity:0;width:1px;height:1px;margin:0}\n"
      ".zoom>label{display:inline-block;font-size:12px;padding:1px 9px;margin:0 4px 6px 0;"
      "border:1px solid #c3c9d0;border-radius:4px;cursor:pointer;background:#fff}\n"
      ".zoom>input:checked+label{background:#1f2933;border-color:#1f2933;color:#fff}\n"
      ".zoom>input:focus-visible+label{outline:2px solid #0072b2;outline-offset:1px}\n"
      ".tl-scroll{overflow-x:auto;max-width:100%}\n"
      ".tl-scroll>svg.timeline-zoomed{max-width:none}\n";
  for (int z : kZoomLevels) {
    if (z != 1) out += fmt::format(".zoom>.tl-z{}{{display:none}}\n", z);
  }
  for (int z : kZoomLevels) {
    if (z == 1) continue;
    out += fmt::format(
        "#tl-zoom-{0}:checked~.tl-scroll{{display:none}}"
        "#tl-zoom-{0}:checked~.tl-z{0}{{display:block}}\n",
        z);
  }
  return out;
}

// The axis both charts use: the end of the last op or transfer, extended by
// each rank's all-reduce tail for schedules with a flush.
TimeAxis TimeAxisFor(const SimResult& result);

// Vertical grid lines from y_top to y_bottom and tick labels above y_top, in
// the axis unit (`<g class="axis">`).
std::string TimeAxisSvg(const TimeAxis& axis, double y_top, double y_bottom);

}  // namespace pipecast::internal

#endif  // PIPECAST_REPORT_INTERNAL_HTML_UTIL_H_
