// The planner's HTML report (report/planner_report.h).
#include "report/planner_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "base/text_table.h"
#include "planner/explain.h"

namespace pipecast {
namespace {

// One sweep chart: three fit side by side in the 1300 px the timeline uses.
constexpr double kChartW = 420;
constexpr double kChartH = 250;
// Margins inside a chart: y labels on the left, m labels and title below/above.
constexpr double kLeftPx = 62;
constexpr double kRightPx = 14;
constexpr double kTopPx = 34;
constexpr double kBottomPx = 40;
// Y ticks aimed for: a label every ~40 px.
constexpr int kValueTicks = 5;
// Head room above the highest point.
constexpr double kHeadroom = 1.1;

struct Series {
  std::string id;     // data-series, e.g. "bubble_ratio"
  std::string name;   // legend text
  std::string color;  // stroke and point fill
  std::vector<double> values;
};

struct ChartSpec {
  std::string metric;  // data-metric of the <svg>
  std::string title;
  std::function<std::string(double)> label;  // y tick labels
  std::vector<Series> series;
  double capacity = 0;  // > 0: a capacity line at this value
  Bytes capacity_bytes = 0;
};

// Sweep points in order of m; x on a log2 scale (counts double).
class SweepChart {
 public:
  SweepChart(const std::vector<SweepPoint>& sweep, int chosen_m)
      : sweep_(sweep), chosen_(chosen_m) {
    lo_ = std::log2(std::max(1, sweep.front().microbatches));
    hi_ = std::log2(std::max(1, sweep.back().microbatches));
  }

  std::string Svg(const ChartSpec& spec) {
    double top = spec.capacity;
    for (const Series& s : spec.series) {
      for (double v : s.values) top = std::max(top, v);
    }
    const std::vector<double> ticks = NiceTicks(top * kHeadroom, kValueTicks);
    y_max_ = std::max(ticks.back(), top * kHeadroom);
    if (!(y_max_ > 0)) y_max_ = 1;
    std::string out = fmt::format(
        "<svg class=\"sweep-chart\" data-metric=\"{0}\" xmlns=\"http://www.w3.org/2000/svg\" "
        "width=\"{1}\" height=\"{2}\" viewBox=\"0 0 {1} {2}\" role=\"img\" aria-label=\"{3}\">\n",
        spec.metric, Px(kChartW), Px(kChartH), HtmlEscape(spec.title));
    out += fmt::format("<text class=\"chart-title\" x=\"{}\" y=\"16\">{}</text>\n", Px(kLeftPx),
                       HtmlEscape(spec.title));
    out += fmt::format(
        "<rect class=\"chart-frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", Px(kLeftPx),
        Px(kTopPx), Px(kChartW - kLeftPx - kRightPx), Px(kChartH - kTopPx - kBottomPx));
    for (double t : ticks) {
      out += fmt::format(
          "<line class=\"grid\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/><text class=\"ylab\" "
          "x=\"{3}\" y=\"{4}\">{5}</text>\n",
          Px(kLeftPx), Px(Y(t)), Px(kChartW - kRightPx), Px(kLeftPx - 5), Px(Y(t) + 4),
          spec.label(t));
    }
    for (const SweepPoint& p : sweep_) {
      out += fmt::format(
          "<text class=\"xlab\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\" "
          "fill=\"#52606d\">{}</text>",
          Px(X(p.microbatches)), Px(kChartH - kBottomPx + 15), p.microbatches);
    }
    out += fmt::format(
        "\n<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\" fill=\"#52606d\">"
        "micro-batches per iteration (m)</text>\n",
        Px((kLeftPx + kChartW - kRightPx) / 2), Px(kChartH - 6));
    if (spec.capacity > 0) {
      out += fmt::format(
          "<line class=\"capacity\" data-bytes=\"{0}\" x1=\"{1}\" y1=\"{2}\" x2=\"{3}\" "
          "y2=\"{2}\"><title>capacity {4} GiB</title></line>\n",
          spec.capacity_bytes, Px(kLeftPx), Px(Y(spec.capacity)), Px(kChartW - kRightPx),
          GiBText(spec.capacity_bytes));
    }
    for (size_t s = 0; s < spec.series.size(); ++s) out += SeriesSvg(spec, spec.series[s], s);
    return out + "</svg>\n";
  }

 private:
  double X(int m) const {
    const double x0 = kLeftPx + 16, x1 = kChartW - kRightPx - 16;
    if (hi_ <= lo_) return (x0 + x1) / 2;
    return x0 + (std::log2(std::max(1, m)) - lo_) / (hi_ - lo_) * (x1 - x0);
  }
  double Y(double v) const {
    const double y0 = kChartH - kBottomPx, y1 = kTopPx;
    return y0 - v / y_max_ * (y0 - y1);
  }

  std::string SeriesSvg(const ChartSpec& spec, const Series& s, size_t index) const {
    std::string pts;
    for (size_t i = 0; i < sweep_.size(); ++i) {
      pts +=
          fmt::format("{}{},{}", i ? " " : "", Px(X(sweep_[i].microbatches)), Px(Y(s.values[i])));
    }
    std::string out =
        fmt::format("<polyline class=\"series\" data-series=\"{}\" stroke=\"{}\" points=\"{}\"/>\n",
                    s.id, s.color, pts);
    for (size_t i = 0; i < sweep_.size(); ++i) {
      const SweepPoint& p = sweep_[i];
      const bool chosen = p.microbatches == chosen_;
      out += fmt::format(
          "<circle class=\"pt{}{}\" data-series=\"{}\" data-m=\"{}\" data-value=\"{:.6g}\" "
          "cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"><title>m = {}: {} {}{}{}</title></circle>\n",
          chosen ? " chosen" : "", p.fits ? "" : " nofit", s.id, p.microbatches, s.values[i],
          Px(X(p.microbatches)), Px(Y(s.values[i])), chosen ? "5" : "3.5", s.color, p.microbatches,
          HtmlEscape(s.name), spec.label(s.values[i]), chosen ? " (chosen)" : "",
          p.fits ? "" : " (does not fit in memory)");
    }
    if (spec.series.size() > 1) {  // a legend line per series, top right
      const double y = kTopPx + 14 + 16 * static_cast<double>(index);
      out += fmt::format(
          "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"/>"
          "<text x=\"{4}\" y=\"{5}\" font-size=\"11\" fill=\"#1f2933\">{6}</text>\n",
          Px(kChartW - kRightPx - 150), Px(y), Px(kChartW - kRightPx - 132), s.color,
          Px(kChartW - kRightPx - 127), Px(y + 4), HtmlEscape(s.name));
    }
    return out;
  }

  const std::vector<SweepPoint>& sweep_;
  int chosen_;
  double lo_ = 0, hi_ = 0;
  double y_max_ = 1;  // the value at the top of the plot, set by Svg()
};

std::string SweepHtml(const PlanReport& report) {
  const Candidate& c = report.ranked[0];
  std::vector<SweepPoint> sweep = report.sweep;
  std::sort(sweep.begin(), sweep.end(), [](const SweepPoint& a, const SweepPoint& b) {
    return a.microbatches < b.microbatches;
  });
  std::string out = fmt::format(
      "<p class=\"sub\">The chosen layout, p={} d={} {} with micro-batches of size {}, at other "
      "micro-batch counts m. The global batch grows with m (size × m × d), so this is the "
      "trade-off between batch, throughput, bubble ratio and memory you are choosing. The ringed "
      "point is the chosen m = {}; hollow red points do not fit in memory.</p>\n",
      c.config.layout.pipeline_stages, c.config.layout.data_parallel,
      ScheduleKindName(c.config.schedule), c.config.microbatch_size, c.config.microbatches);
  if (sweep.empty()) return out + "<p class=\"sub\">No other count could be simulated.</p>\n";
  SweepChart chart(sweep, c.config.microbatches);
  ChartSpec tput{"throughput",
                 "throughput, samples/s",
                 [](double v) { return fmt::format("{:g}", v); },
                 {},
                 0,
                 0};
  ChartSpec bubble{"bubble_ratio_and_bubble_fraction_of_ideal",
                   "bubble ratio and bubble/ideal",
                   [](double v) { return fmt::format("{:.0f}%", 100 * v); },
                   {},
                   0,
                   0};
  ChartSpec memory{"peak_memory",
                   "largest peak memory, GiB",
                   [](double v) { return fmt::format("{:g}", v); },
                   {},
                   0,
                   0};
  Series t{"throughput_samples_per_s", "samples/s", "#4c78a8", {}};
  Series br{"bubble_ratio", "bubble ratio", "#f58518", {}};
  Series bi{"bubble_fraction_of_ideal", "bubble/ideal", "#e45756", {}};
  Series pm{"peak_memory_gib", "peak GiB", "#3b4cca", {}};
  for (const SweepPoint& p : sweep) {
    t.values.push_back(p.samples_per_s);
    br.values.push_back(p.bubble_ratio);
    bi.values.push_back(p.bubble_fraction_of_ideal);
    pm.values.push_back(ToGiB(p.peak_memory_bytes));
  }
  tput.series = {t};
  bubble.series = {br, bi};
  memory.series = {pm};
  // The line a peak must stay under: the limit (capacity - reserve - margin),
  // which is what the sweep's `fits` is judged against.
  if (const Bytes limit = MemoryLimitBytes(report.cluster.gpu); limit > 0) {
    memory.capacity = ToGiB(limit);
    memory.capacity_bytes = limit;
  }
  out += "<div class=\"charts\" style=\"display:flex;flex-wrap:wrap;gap:10px\">\n";
  out += chart.Svg(tput) + chart.Svg(bubble) + chart.Svg(memory);
  out +=
      "</div>\n<details><summary>the numbers</summary>\n<table class=\"sweep\"><tr><th>m</th>"
      "<th>global batch</th><th>iteration ms</th><th>samples/s</th><th>bubble ratio</th>"
      "<th>bubble/ideal</th><th>peak GiB</th><th>fits</th></tr>\n";
  for (const SweepPoint& p : sweep) {
    out += fmt::format(
        "<tr class=\"{}\" data-m=\"{}\"><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.1f}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        p.microbatches == c.config.microbatches ? "chosen" : "", p.microbatches, p.microbatches,
        p.global_batch, NsToMs(p.iteration_ns), p.samples_per_s, PercentText(p.bubble_ratio),
        PercentText(p.bubble_fraction_of_ideal), GiBText(p.peak_memory_bytes),
        p.fits ? "yes" : "no");
  }
  return out + "</table></details>\n";
}

std::string CandidatesHtml(const PlanReport& report) {
  const Bytes cap = MemoryLimitBytes(report.cluster.gpu);
  std::string out =
      "<table class=\"candidates\"><tr><th>#</th><th class=\"l\">configuration</th>"
      "<th>iteration ms</th><th>samples/s</th><th>bubble ratio</th><th>bubble/ideal</th>"
      "<th>peak GiB</th><th>of limit</th></tr>\n";
  for (size_t i = 0; i < report.ranked.size(); ++i) {
    const Candidate& c = report.ranked[i];
    if (!c.result) continue;
    const SimResult& r = *c.result;
    out += fmt::format(
        "<tr class=\"candidate{}\" data-rank=\"{}\"><td>{}</td><td "
        "class=\"l\">{}</td><td>{:.3f}</td>"
        "<td>{:.1f}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        i == 0 ? " chosen" : "", i + 1, i == 0 ? "1 (chosen)" : fmt::format("{}", i + 1),
        HtmlEscape(c.Label()), NsToMs(r.iteration_ns), r.samples_per_s, PercentText(r.bubble_ratio),
        PercentText(r.bubble_fraction_of_ideal), GiBText(c.PeakMemory()),
        cap > 0 ? PercentText(static_cast<double>(c.PeakMemory()) / static_cast<double>(cap))
                : std::string("unlimited"));
  }
  return out + "</table>\n";
}

std::string RejectedHtml(const PlanReport& report) {
  if (report.rejected.empty()) return "<p class=\"sub\">None was rejected.</p>\n";
  std::string out = fmt::format(
      "<p class=\"sub\">{} configuration{} rejected, by reason. The closest miss is the one "
      "nearest to being chosen: the least memory over capacity, or the best lower bound on "
      "iteration time.</p>\n<table class=\"rejected\"><tr><th class=\"l\">reason</th>"
      "<th>count</th><th class=\"l\">closest miss</th><th class=\"l\">for example</th></tr>\n",
      report.rejected.size(), report.rejected.size() == 1 ? " was" : "s were");
  auto one = [](const Rejection& r) {
    return fmt::format("{}: {}", HtmlEscape(r.candidate.Label()), HtmlEscape(r.Detail()));
  };
  for (const RejectGroup& g : GroupRejections(report.rejected)) {
    std::string examples;
    for (const Rejection* r : g.examples) examples += "<div>" + one(*r) + "</div>";
    const size_t shown = g.examples.size() + (g.closest ? 1 : 0);
    if (g.all.size() > shown) {
      examples += fmt::format("<div>… and {} more</div>", g.all.size() - shown);
    }
    out += fmt::format(
        "<tr class=\"reject-group\" data-reason=\"{}\" data-count=\"{}\"><td class=\"l\">{}</td>"
        "<td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>\n",
        RejectReasonId(g.reason), g.all.size(), RejectReasonName(g.reason), g.all.size(),
        g.closest ? one(*g.closest) : "-", examples.empty() ? "-" : examples);
  }
  return out + "</table>\n";
}

// GPUs, global batch and the search's size, as rows for InputsHtml().
std::string SearchRows(const PlanReport& report) {
  return fmt::format(
      "<tr><th>GPUs</th><td>{}</td></tr>\n<tr><th>global batch</th><td>{}</td></tr>\n"
      "<tr><th>search</th><td>{} configurations considered, {} simulated</td></tr>\n",
      report.gpus, report.global_batch, report.enumerated, report.simulated);
}

// The chosen layout: p, d, schedule, v, micro-batches, recomputation.
std::string ChosenLayoutHtml(const Candidate& c) {
  std::string stages;
  for (size_t s = 0; s < c.partition.size(); ++s) {
    const StageLayers& l = c.partition[s];
    stages += fmt::format("{}{}", s ? ", " : "",
                          l.first_layer == l.last_layer
                              ? fmt::format("{}", l.first_layer)
                              : fmt::format("{}–{}", l.first_layer, l.last_layer));
  }
  return fmt::format(
      "<p><b>{}</b>: {} pipeline stages × {} data-parallel replicas, schedule {}{}, {} "
      "micro-batches of size {}, recomputation {}; layers per {}stage: {}.</p>\n",
      HtmlEscape(c.Label()), c.config.layout.pipeline_stages, c.config.layout.data_parallel,
      ScheduleKindName(c.config.schedule),
      c.config.layout.chunks > 1 ? fmt::format(" with {} chunks per GPU", c.config.layout.chunks)
                                 : "",
      c.config.microbatches, c.config.microbatch_size,
      RecomputeSpec(c.config.recompute, c.config.recompute_layers),
      c.config.layout.chunks > 1 ? "virtual " : "", stages);
}

}  // namespace

std::string PlanReportHtml(const PlanReport& report, const Model& model,
                           const SimResult* chosen_timeline, const ReportInputs& inputs) {
  const std::string title = fmt::format("pipecast planner: {} on {} GPUs", model.name, report.gpus);
  std::string body = "<header><h1>" + HtmlEscape(title) + "</h1>\n";
  body += report.Feasible() ? fmt::format(
                                  "<p class=\"sub\">chosen plan: {}. How to read this page: "
                                  "docs/report.md.</p></header>\n",
                                  HtmlEscape(report.ranked[0].Label()))
                            : "<p class=\"sub\">No configuration fits. How to read this page: "
                              "docs/report.md.</p></header>\n";
  // The chosen configuration has its own section: the inputs are the search's.
  ReportInputs search = inputs;
  search.cluster = report.cluster;
  search.pipeline_stages = 0;
  body += "<h2>Inputs</h2>\n" + InputsHtml(search, SearchRows(report));
  if (report.Feasible()) {
    const Candidate& c = report.ranked[0];
    body += "<h2>Chosen plan</h2>\n" + ChosenLayoutHtml(c);
    body += HeadlineHtml(chosen_timeline ? *chosen_timeline : *c.result, report.cluster);
    body += "<h2>Trade-off: micro-batch count</h2>\n" + SweepHtml(report);
    if (chosen_timeline != nullptr && !chosen_timeline->ops.empty()) {
      body += "<h2>Timeline of the chosen plan</h2>\n" + TimelineHtml(*chosen_timeline);
      body += "<h2>Memory of the chosen plan</h2>\n" + MemoryHtml(*chosen_timeline);
    }
    body += "<h2>Candidates, best first</h2>\n" + CandidatesHtml(report);
  }
  body += "<h2>Rejected</h2>\n" + RejectedHtml(report);
  if (!report.suggestions.empty()) {
    body += "<h2>What would fit</h2>\n<ul>\n";
    for (const std::string& s : report.suggestions) body += "<li>" + HtmlEscape(s) + "</li>\n";
    body += "</ul>\n";
  }
  if (!report.notes.empty()) {
    body += "<h2>Notes</h2>\n<ul>\n";
    for (const std::string& n : report.notes) body += "<li>" + HtmlEscape(n) + "</li>\n";
    body += "</ul>\n";
  }
  body += "<footer>pipecast HTML report: inline SVG and CSS, no scripts, no network.</footer>\n";
  return HtmlPage(title, body);
}

}  // namespace pipecast
