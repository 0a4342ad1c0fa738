#include "measured/report_html.h"

#include <fmt/format.h>

#include "base/text_table.h"

namespace pipecast::measured {
namespace {

std::string Value(const validate::MetricRow& row, double v) {
  if (row.unit == "ns") return fmt::format("{:.3f} ms", v / 1e6);
  if (row.unit == "bytes") return fmt::format("{:.2f} MiB", v / kMiB);
  if (row.unit == "ratio") return PercentText(v);
  return fmt::format("{:.1f} {}", v, HtmlEscape(row.unit));
}

std::string RowsHtml(const std::vector<validate::MetricRow>& rows) {
  std::string out =
      "<table class=\"comparison\">\n<tr><th class=\"l\">metric</th><th>stage</th>"
      "<th>predicted</th><th>measured</th><th>error</th><th>tolerance</th><th "
      "class=\"l\"></th></tr>\n";
  for (const validate::MetricRow& r : rows) {
    const std::string err = r.relative ? fmt::format("{:+.1f}%", 100 * r.error)
                                       : fmt::format("{:+.1f} pt", 100 * r.error);
    const std::string tol = !r.checked   ? "-"
                            : r.relative ? fmt::format("{:.0f}%", 100 * r.tolerance)
                                         : fmt::format("{:.0f} pt", 100 * r.tolerance);
    out += fmt::format(
        "<tr{}data-metric=\"{}\" data-stage=\"{}\" data-predicted=\"{}\" data-measured=\"{}\">"
        "<td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td class=\"l\">{}</td></tr>\n",
        r.checked && !r.within ? " class=\"over\" " : " ", HtmlEscape(r.metric), r.rank,
        r.predicted, r.measured, HtmlEscape(r.metric), r.rank >= 0 ? std::to_string(r.rank) : "all",
        Value(r, r.predicted), Value(r, r.measured), err, tol,
        r.checked ? (r.within ? "ok" : "BEYOND") : "");
  }
  return out + "</table>\n";
}

}  // namespace

std::string ComparisonReportHtml(const ComparisonPage& page) {
  std::string body = fmt::format("<h1>{}</h1>\n", HtmlEscape(page.title));
  if (!page.measured_what.empty()) {
    body += fmt::format("<p class=\"sub\">{}</p>\n", HtmlEscape(page.measured_what));
  }
  body += "<h2>Inputs</h2>\n" + InputsHtml(page.inputs);
  bool within = true;
  for (const validate::MetricRow& r : page.rows) within = within && r.within;
  body += fmt::format(
      "<h2>Predicted against measured</h2>\n<p class=\"verdict\" data-within=\"{}\">{}</p>\n",
      within ? "true" : "false",
      within ? "Every checked metric is within tolerance."
             : "<b>Beyond tolerance</b>: the rows in red.");
  body += RowsHtml(page.rows);
  if (!page.notes.empty()) {
    body += "<ul class=\"notes\">\n";
    for (const std::string& n : page.notes) body += "<li>" + HtmlEscape(n) + "</li>\n";
    body += "</ul>\n";
  }
  body += "<h2>Predicted timeline</h2>\n<div class=\"predicted\">\n";
  body += page.predicted->ops.empty() ? "<p>The prediction has no timeline.</p>\n"
                                      : TimelineHtml(*page.predicted);
  body += "</div>\n<h2>Measured timeline</h2>\n<div class=\"measured\">\n";
  if (page.measured == nullptr || page.measured->ops.empty()) {
    body +=
        "<p>The measurement names no ops to draw (no pipeline action or phase ranges in the "
        "traces, or a log): the table above holds what was measured.</p>\n";
  } else {
    body += TimelineHtml(*page.measured);
  }
  body += "</div>\n";
  return HtmlPage(page.title, body);
}

std::string ValidationReportHtml(const validate::ValidationResult& r,
                                 const std::string& command_line) {
  const SimResult measured =
      validate::MeasuredTimeline(r.exec, r.runs, r.comparison.median_iteration);
  ComparisonPage page;
  page.title = fmt::format("{}: validator run against its plan", r.model_name);
  page.inputs.tool = "validator";
  page.inputs.model_name = r.model_name;
  page.inputs.cluster = r.cluster;
  page.inputs.schedule = r.plan.schedule_name;
  page.inputs.pipeline_stages = r.plan.config.layout.pipeline_stages;
  page.inputs.chunks = r.plan.config.layout.chunks;
  page.inputs.microbatches = r.plan.config.microbatches;
  page.inputs.microbatch_size = r.plan.config.microbatch_size;
  page.inputs.data_parallel = r.plan.config.layout.data_parallel;
  page.inputs.recompute = r.plan.config.recompute;
  page.inputs.command_line = command_line;
  page.measured_what =
      fmt::format("{}; median of {} iterations", r.work, r.comparison.iteration_ns.size());
  page.rows = r.comparison.rows;
  page.notes = r.notes;
  page.predicted = &r.predicted;
  page.measured = &measured;
  return ComparisonReportHtml(page);
}

}  // namespace pipecast::measured
