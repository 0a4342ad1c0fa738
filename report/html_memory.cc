// The HTML report's memory figure (MemoryHtml in report/html_report.h): a step
// chart per rank on the timeline's time axis, the capacity line, and the
// breakdown at each rank's peak.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "report/html_report.h"
#include "report/internal/html_util.h"

namespace pipecast {
namespace {

using internal::GiBWithUnit;
using internal::kAxisPx;
using internal::kGutterPx;
using internal::kSvgWidthPx;
using internal::TimeAxis;
using internal::UsAttr;

// Samples closer than this are drawn in one column (its highest and its last
// value), so a rank with thousands of changes stays a small polyline.
constexpr double kMemColumnPx = 2.0;
// Head room above the highest peak or capacity, for the peak label.
constexpr double kHeadroom = 1.08;
// Tick labels aimed for on a rank's memory axis, by chart height.
constexpr int kTicksTall = 5;
constexpr int kTicksShort = 2;
// A tick label's height (10 px font: its baseline this far under its line)
// and the gap it keeps above a line it sits on.
constexpr double kTickLabelPx = 10;
constexpr double kTickLabelGapPx = 2;

struct ChartSize {
  double h;    // one rank's chart
  double gap;  // before the next
};

ChartSize ChartSizeFor(int ranks) {
  if (ranks <= 8) return {80, 12};
  if (ranks <= 24) return {52, 8};
  return {34, 6};
}

// The static band: what the rank holds the whole step (StageResult::HeldAllStepBytes).
Bytes StaticBytes(const StageResult& s) { return s.HeldAllStepBytes(); }

Bytes Live(const MemorySample& m) { return m.activations + m.comm_buffers + m.workspace; }

// What a sample adds on the static band: its live set, and the gradients where the step makes
// them (--sharded-state fsdp2: from the rank's first backward's end on).
Bytes Above(const StageResult& s, const MemorySample& m) {
  return Live(m) + s.LateGradientsAt(m.time_ns);
}

// The first sample with the most above the static band (a zero sample when none).
MemorySample PeakSample(const StageResult& s) {
  MemorySample best;
  for (const MemorySample& m : s.memory_timeline) {
    if (Above(s, m) > Above(s, best)) best = m;
  }
  return best;
}

class MemoryChart {
 public:
  MemoryChart(const SimResult& r, const TimeAxis& axis)
      : r_(r), axis_(axis), size_(ChartSizeFor(r.ranks)) {
    // Each rank its own scale: 0 to the larger of its peak and the capacity,
    // so a rank far below the others is still readable; ticks say the scale.
    for (const StageResult& s : r.per_rank) {
      const Bytes top = std::max({r.memory_capacity_bytes, Bytes{1}, s.peak_memory_bytes,
                                  StaticBytes(s) + Above(s, PeakSample(s))});
      y_max_.push_back(static_cast<double>(top) * kHeadroom);
    }
  }

  std::string Svg() const {
    const double top = kAxisPx + 4;
    const double height = top + r_.ranks * (size_.h + size_.gap) + 2;
    std::string out = fmt::format(
        "<svg class=\"memory\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
        "viewBox=\"0 0 {0} {1}\" data-ranks=\"{2}\" data-capacity-bytes=\"{3}\" "
        "role=\"img\" aria-label=\"memory over time per rank\">\n",
        Px(kSvgWidthPx), Px(height), r_.ranks, r_.memory_capacity_bytes);
    out += internal::TimeAxisSvg(axis_, top, height - 2);
    for (const StageResult& s : r_.per_rank) {
      out += RankChart(s, top + s.rank * (size_.h + size_.gap));
    }
    return out + "</svg>\n";
  }

 private:
  double YMax(int rank) const {
    return rank >= 0 && rank < static_cast<int>(y_max_.size()) ? y_max_[rank] : 1.0;
  }
  double Y(double y0, Bytes b, int rank) const {
    return y0 + size_.h - static_cast<double>(b) / YMax(rank) * size_.h;
  }

  // Grid lines and labels in GiB inside a rank's chart, at round values.
  // A label hangs under its line, or sits on it where hanging would cross
  // the chart's bottom edge (into the next rank's chart, or past the
  // figure's for the last rank, where it was cut off).
  std::string Ticks(int rank, double y0, double x0, double x1) const {
    const double top_gib = YMax(rank) / static_cast<double>(kGiB);
    std::string out;
    for (double t : NiceTicks(top_gib, size_.h >= 60 ? kTicksTall : kTicksShort)) {
      if (t <= 0 || t > top_gib) continue;
      const double y = y0 + size_.h - t / top_gib * size_.h;
      const double hanging = y + kTickLabelPx;
      const double baseline = hanging <= y0 + size_.h ? hanging : y - kTickLabelGapPx;
      out += fmt::format(
          "<line class=\"mem-grid\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>"
          "<text class=\"mem-tick\" data-gib=\"{:g}\" x=\"{}\" y=\"{}\">{:g} GiB</text>\n",
          Px(x0), Px(y), Px(x1), Px(y), t, Px(x1 - 3), Px(baseline), t);
    }
    return out;
  }

  // The step line of static + live bytes over time, as SVG points.
  std::string Points(const StageResult& s, double y0) const {
    const Bytes base = StaticBytes(s);
    std::string pts;
    double last_x = -1, last_y = -1;
    auto add = [&](double x, double y) {
      if (x == last_x && y == last_y) return;
      pts += (pts.empty() ? "" : " ") + Px(x) + "," + Px(y);
      last_x = x;
      last_y = y;
    };
    double y_prev = Y(y0, base, s.rank);
    add(axis_.X(0), y_prev);
    // One pass over the levels (the timeline holds changes; its iterator sums them).
    const MemoryTimeline& tl = s.memory_timeline;
    for (auto it = tl.begin(); it != tl.end();) {
      const double x = axis_.X(it->time_ns);
      const long column = static_cast<long>((x - kGutterPx) / kMemColumnPx);
      Bytes high = Above(s, *it);
      Bytes last = high;
      for (++it; it != tl.end() &&
                 static_cast<long>((axis_.X(it->time_ns) - kGutterPx) / kMemColumnPx) == column;
           ++it) {
        last = Above(s, *it);
        high = std::max(high, last);
      }
      add(x, y_prev);
      add(x, Y(y0, base + high, s.rank));
      y_prev = Y(y0, base + last, s.rank);
      add(x, y_prev);
    }
    add(axis_.X(axis_.end_ns()), y_prev);
    return pts;
  }

  std::string RankChart(const StageResult& s, double y0) const {
    const Bytes base = StaticBytes(s);
    const MemorySample peak = PeakSample(s);
    const Bytes drawn_peak = base + Above(s, peak);
    const double x0 = kGutterPx, x1 = axis_.X(axis_.end_ns());
    const std::string pts = Points(s, y0);
    std::string out =
        fmt::format("<g class=\"mem-rank\" data-rank=\"{}\" data-scale-bytes=\"{:.0f}\">\n", s.rank,
                    YMax(s.rank));
    out +=
        fmt::format("<rect class=\"chart-frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n",
                    Px(x0), Px(y0), Px(x1 - x0), Px(size_.h));
    out += Ticks(s.rank, y0, x0, x1);
    out += fmt::format(
        "<rect class=\"mem-static\" data-rank=\"{}\" data-bytes=\"{}\" x=\"{}\" y=\"{}\" "
        "width=\"{}\" height=\"{}\"><title>rank {}: static {} (weights, {}optimizer "
        "state{})</title></rect>\n",
        s.rank, base, Px(x0), Px(Y(y0, base, s.rank)), Px(x1 - x0),
        Px(y0 + size_.h - Y(y0, base, s.rank)), s.rank, GiBWithUnit(base),
        s.gradients_from_ns > 0 ? "" : "gradients, ",
        s.memory.stashed_weights > 0 ? ", stashed weight versions" : "");
    if (s.gradients_from_ns > 0) {
      // --sharded-state fsdp2: the gradients, from the first backward's end to the step's end.
      const double xg = axis_.X(s.gradients_from_ns);
      const double yg = Y(y0, base + s.memory.gradients, s.rank);
      out += fmt::format(
          "<rect class=\"mem-static mem-grads\" data-rank=\"{}\" data-bytes=\"{}\" "
          "data-from-us=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>rank {}: "
          "gradients {}, made at the first backward's end ({}) and held to the step's end "
          "(--sharded-state fsdp2)</title></rect>\n",
          s.rank, s.memory.gradients, UsAttr(s.gradients_from_ns), Px(xg), Px(yg),
          Px(std::max(0.0, x1 - xg)), Px(Y(y0, base, s.rank) - yg), s.rank,
          GiBWithUnit(s.memory.gradients), axis_.Time(s.gradients_from_ns));
    }
    // The dot is the simulator's peak; it sits above the line when the peak
    // was an allocation made and freed within one instant (see MemoryHtml).
    out += fmt::format(
        "<polyline class=\"mem\" data-rank=\"{}\" data-peak-bytes=\"{}\" "
        "data-drawn-peak-bytes=\"{}\" data-static-bytes=\"{}\" data-samples=\"{}\" "
        "points=\"{}\"><title>rank {}: peak {}</title></polyline>\n",
        s.rank, s.peak_memory_bytes, drawn_peak, base, s.memory_timeline.size(), pts, s.rank,
        GiBWithUnit(s.peak_memory_bytes));
    out += fmt::format(
        "<circle class=\"mem-peak\" data-rank=\"{}\" data-bytes=\"{}\" data-time-us=\"{}\" "
        "cx=\"{}\" cy=\"{}\" r=\"2.5\"><title>rank {}: peak {} at {}</title></circle>\n",
        s.rank, s.peak_memory_bytes, UsAttr(peak.time_ns), Px(axis_.X(peak.time_ns)),
        Px(Y(y0, s.peak_memory_bytes, s.rank)), s.rank, GiBWithUnit(s.peak_memory_bytes),
        axis_.Time(peak.time_ns));
    if (r_.memory_capacity_bytes > 0) {
      const double yc = Y(y0, r_.memory_capacity_bytes, s.rank);
      out += fmt::format(
          "<line class=\"capacity\" data-rank=\"{}\" data-bytes=\"{}\" x1=\"{}\" y1=\"{}\" "
          "x2=\"{}\" y2=\"{}\"><title>capacity {}</title></line>\n",
          s.rank, r_.memory_capacity_bytes, Px(x0), Px(yc), Px(x1), Px(yc),
          GiBWithUnit(r_.memory_capacity_bytes));
    }
    out += fmt::format("<text class=\"rank-label\" x=\"8\" y=\"{}\">rank {}</text>",
                       Px(y0 + std::min(14.0, size_.h / 2)), s.rank);
    if (size_.h >= 40) {
      out += fmt::format("<text class=\"rank-note\" x=\"8\" y=\"{}\">peak {}</text>", Px(y0 + 28),
                         GiBWithUnit(s.peak_memory_bytes));
    }
    if (size_.h >= 60 && r_.memory_capacity_bytes > 0) {
      out += fmt::format("<text class=\"rank-note\" x=\"8\" y=\"{}\">{} of capacity</text>",
                         Px(y0 + 41),
                         PercentText(static_cast<double>(s.peak_memory_bytes) /
                                     static_cast<double>(r_.memory_capacity_bytes)));
    }
    return out + "\n</g>\n";
  }

  const SimResult& r_;
  const TimeAxis& axis_;
  ChartSize size_;
  std::vector<double> y_max_;  // per rank, bytes
};

std::string Cell(Bytes b) { return fmt::format("<td>{:.2f}</td>", ToGiB(b)); }

std::string BreakdownTable(const SimResult& r) {
  bool stashed = false;
  for (const StageResult& s : r.per_rank) stashed = stashed || s.memory.stashed_weights > 0;
  std::string out =
      "<table class=\"memory-peak\"><tr><th>rank</th><th>weights</th>" +
      std::string(stashed ? "<th>stashed weights</th>" : "") +
      "<th>gradients</th><th>optimizer</th><th>activations</th><th>comm buffers</th>"
      "<th>workspace</th><th>total at peak</th><th>of limit</th><th>reserve</th><th>peak at</th>"
      "</tr>\n";
  const TimeAxis axis = internal::TimeAxisFor(r);
  for (const StageResult& s : r.per_rank) {
    const MemorySample peak = PeakSample(s);
    const bool over = r.memory_limit_bytes > 0 && s.peak_memory_bytes > r.memory_limit_bytes;
    out += fmt::format("<tr class=\"{}\" data-rank=\"{}\" data-peak-bytes=\"{}\"><td>{}</td>",
                       over ? "over" : "", s.rank, s.peak_memory_bytes, s.rank);
    out += Cell(s.memory.weights + s.memory.gathered_weights);
    if (stashed) out += Cell(s.memory.stashed_weights);
    out += Cell(s.GradientsAt(peak.time_ns)) + Cell(s.memory.optimizer) + Cell(peak.activations) +
           Cell(peak.comm_buffers) + Cell(peak.workspace) + Cell(s.peak_memory_bytes);
    out += r.memory_limit_bytes > 0
               ? fmt::format("<td>{}{}</td>",
                             PercentText(static_cast<double>(s.peak_memory_bytes) /
                                         static_cast<double>(r.memory_limit_bytes)),
                             over ? " OVER" : "")
               : "<td>unlimited</td>";
    out += Cell(r.memory_reserve_bytes);
    out += "<td>" + axis.Time(peak.time_ns) + "</td></tr>\n";
  }
  return out + "</table>\n";
}

}  // namespace

std::string MemoryHtml(const SimResult& r) {
  const TimeAxis axis = internal::TimeAxisFor(r);
  MemoryChart chart(r, axis);
  std::string caption =
      "Memory per rank on the timeline's time axis. The grey band is the static part: weights, "
      "gradients and optimizer state";
  bool stashed = false;
  for (const StageResult& s : r.per_rank) stashed = stashed || s.memory.stashed_weights > 0;
  if (stashed) caption += ", and the weight versions PipeDream stashes";
  bool late_grads = false;
  for (const StageResult& s : r.per_rank) late_grads = late_grads || s.gradients_from_ns > 0;
  if (late_grads) {
    caption +=
        " (under --sharded-state fsdp2 the gradients are not in it: FSDP2 makes them in the "
        "backward, so they join at each rank's first backward's end, the band's step, and are "
        "held to the step's end)";
  }
  caption +=
      "; the blue step line adds the live set: activations held for the backward, send and "
      "receive buffers, and the running op's workspace. The dot marks each rank's peak.";
  if (r.memory_capacity_bytes > 0) {
    caption += fmt::format(
        " The dashed red line is the GPU's capacity, {}. A rank fits under the limit of {}: "
        "capacity less the runtime's reserve of {} (CUDA context, cuBLAS, NCCL) and an "
        "allocator margin of {} ({:g}% of capacity).",
        GiBWithUnit(r.memory_capacity_bytes), GiBWithUnit(r.memory_limit_bytes),
        GiBWithUnit(r.memory_reserve_bytes), GiBWithUnit(r.memory_headroom_bytes),
        100 * r.memory_headroom);
  } else {
    caption += " The cluster has unlimited memory, so there is no capacity line.";
  }
  caption +=
      " Each rank's chart has its own scale, from 0 to the larger of its peak and the capacity, "
      "with grid lines labelled in GiB.";
  Bytes above = 0;
  for (const StageResult& s : r.per_rank) {
    above = std::max(above, s.peak_memory_bytes - StaticBytes(s) - Above(s, PeakSample(s)));
  }
  if (above > 0) {
    caption += fmt::format(
        " Where a dot sits above its line (by up to {:.1f} MiB here), the peak was an "
        "allocation made and freed within one instant, such as an op's output buffer next to "
        "its workspace as the op ends; the line keeps one sample per instant.",
        static_cast<double>(above) / static_cast<double>(kMiB));
  }
  std::string out =
      "<div class=\"legend\"><span><i class=\"sw sw-static\"></i>static</span>"
      "<span><i class=\"sw sw-mem\"></i>static + live</span>";
  if (r.memory_capacity_bytes > 0) out += "<span><i class=\"sw sw-cap\"></i>capacity</span>";
  out += "</div>\n<figure class=\"memory\">\n" + chart.Svg();
  out += "<figcaption>" + caption + "</figcaption>\n</figure>\n";
  out +=
      "<p class=\"sub\">Breakdown at each rank's peak, GiB: the static parts, the live set at "
      "the highest point of the line, and the simulator's peak total.</p>\n";
  out += BreakdownTable(r);
  return out;
}

}  // namespace pipecast
