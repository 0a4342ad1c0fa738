// The HTML report's page, inputs and headline (report/html_report.h). The
// timeline is drawn in html_timeline.cc, the memory charts in html_memory.cc.
#include "report/html_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "base/text_table.h"
#include "report/internal/html_util.h"
#include "report/report.h"

namespace pipecast {
namespace {

using internal::GiBWithUnit;

// The report's stylesheet. Op colours: Tableau 10, which stays distinct for
// the common colour-vision deficiencies.
constexpr const char* kCss = R"css(
body{font:14px/1.45 system-ui,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1f2933;
  margin:24px;background:#fff}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d9dee3;padding-bottom:4px}
.sub{color:#52606d;margin:0}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{padding:3px 10px;border-bottom:1px solid #e4e7eb;text-align:right;vertical-align:top}
th{background:#f5f7fa;font-weight:600}
.l{text-align:left}
table.inputs th,table.inputs td{text-align:left}
tr.over td{color:#b42318;font-weight:600}
tr.chosen td{background:#eef4fb;font-weight:600}
.metrics{display:flex;flex-wrap:wrap;gap:10px}
.metric{border:1px solid #d9dee3;border-radius:6px;padding:8px 12px;min-width:170px;
  max-width:300px;background:#fafbfc}
.metric .k{color:#52606d;font-size:12px}
.metric .v{font-size:20px;font-weight:600}
.metric .d{color:#52606d;font-size:12px}
.metric.over .v{color:#b42318}
figure{margin:8px 0}
figcaption{color:#52606d;font-size:13px;margin:4px 0 8px;max-width:1300px}
svg{max-width:100%;height:auto;font-family:inherit;display:block}
.legend{display:flex;flex-wrap:wrap;gap:14px;font-size:12px;margin:6px 0}
.legend span{display:inline-flex;align-items:center;gap:5px}
.sw{display:inline-block;width:16px;height:11px}
code{font:12px ui-monospace,Menlo,Consolas,"DejaVu Sans Mono",monospace;background:#f5f7fa;
  padding:1px 4px;border-radius:3px;word-break:break-all}
footer{margin-top:32px;color:#7b8794;font-size:12px}
/* Okabe and Ito's colour-blind-safe palette: F blue, B orange, I vermillion, W reddish
   purple, activation sends yellow, gradient sends bluish green: no two told apart by hue alone. */
.op-F,.busy-F,.sw-F{fill:#0072b2;background:#0072b2}
.op-B,.busy-B,.sw-B{fill:#e69f00;background:#e69f00}
.op-I,.busy-I,.sw-I{fill:#d55e00;background:#d55e00}
.op-W,.busy-W,.sw-W{fill:#cc79a7;background:#cc79a7}
.busy-mixed,.sw-mixed{fill:#7b8794;background:#7b8794}
.op.alt{fill-opacity:.6}
.sw.sw-alt{background:#0072b299}
.idle{fill:url(#idle-hatch)}
.sw-idle{background:repeating-linear-gradient(45deg,#f1f3f5 0 3px,#c3c9d0 3px 5px)}
.critical{stroke:#111;stroke-width:1.8}
.critical.thin{stroke:none}
.crit-mark,.sw-crit{fill:#111;background:#111}
.xfer-act,.sw-act{fill:#f0e442;background:#f0e442}
.xfer-grad,.sw-grad{fill:#009e73;background:#009e73}
.xfer-span{fill-opacity:.55}
.allreduce,.sw-ar{fill:#332288;background:#332288}
.lane{fill:#fff;stroke:#e4e7eb}
.comm-lane{fill:#f5f7fa}
.oplabel{font-size:10px;fill:#fff;text-anchor:middle;dominant-baseline:central;
  pointer-events:none;paint-order:stroke;stroke:#1f2933;stroke-width:2px;stroke-opacity:.6}
.axis text{font-size:11px;fill:#52606d;text-anchor:middle}
.grid{stroke:#e4e7eb;stroke-width:1}
.rank-label{font-size:12px;fill:#1f2933}
.rank-note{font-size:10px;fill:#7b8794}
.mem{fill:none;stroke:#3b4cca;stroke-width:1.4}
.mem-area{fill:#3b4cca;fill-opacity:.12;stroke:none}
.mem-static,.sw-static{fill:#cbd2d9;background:#cbd2d9}
.mem-grid{stroke:#e4e7eb;stroke-width:1}
.mem-tick{font-size:10px;fill:#7b8794;text-anchor:end}
.sw-mem{background:#3b4cca}
.capacity{stroke:#c81e1e;stroke-width:1.3;stroke-dasharray:6 3;fill:none}
.sw-cap{height:0;border-top:2px dashed #c81e1e}
.mem-peak{fill:#3b4cca}
.chart-frame{fill:none;stroke:#d9dee3}
.series{fill:none;stroke-width:2}
.pt{stroke:#fff;stroke-width:1}
.pt.nofit{fill:#fff;stroke:#c81e1e;stroke-width:1.5}
.pt.chosen{stroke:#111;stroke-width:2}
.chart-title{font-size:13px;font-weight:600;fill:#1f2933}
.ylab{font-size:11px;fill:#52606d;text-anchor:end}
)css";

// The idle hatch referenced by `.idle`; inline once per page.
constexpr const char* kSvgDefs =
    R"svg(<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>)svg"
    R"svg(<pattern id="idle-hatch" width="5" height="5" patternUnits="userSpaceOnUse" )svg"
    R"svg(patternTransform="rotate(45)"><rect width="5" height="5" fill="#f1f3f5"/>)svg"
    R"svg(<line x1="0" y1="0" x2="0" y2="5" stroke="#c3c9d0" stroke-width="2"/></pattern>)svg"
    R"svg(</defs></svg>)svg";

bool NeedsShellQuote(const std::string& arg) {
  if (arg.empty()) return true;
  return std::any_of(arg.begin(), arg.end(), [](char c) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.' || c == '/' || c == '=' || c == ',' ||
                      c == ':' || c == '+' || c == '@' || c == '%';
    return !safe;
  });
}

std::string LinkText(const Link& link) {
  const std::string bw =
      link.bandwidth_gbps > 0 ? fmt::format("{:g} GB/s", link.bandwidth_gbps) : "infinite";
  return fmt::format("{}, latency {:g} µs", bw, link.latency_us);
}

std::string Row(std::string_view key, std::string_view value_html) {
  return fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", key, value_html);
}

// One headline card; `key` and `detail` are trusted HTML, `id` a JSON-style key.
std::string Metric(std::string_view id, double value, std::string_view key, std::string_view shown,
                   std::string_view detail, bool over = false) {
  return fmt::format(
      "<div class=\"metric{}\" data-metric=\"{}\" data-value=\"{:.6g}\"><div class=\"k\">{}</div>"
      "<div class=\"v\">{}</div><div class=\"d\">{}</div></div>\n",
      over ? " over" : "", id, value, key, shown, detail);
}

// Schedule, pipeline shape and recomputation rows of the inputs table.
std::string ConfigurationRows(const ReportInputs& in) {
  std::string out = Row("schedule", HtmlEscape(in.schedule));
  out += Row(
      "pipeline",
      fmt::format("p = {}, v = {} per rank, m = {} of size {}, d = {} ({})",
                  Count(in.pipeline_stages, "rank", "ranks"), Count(in.chunks, "chunk", "chunks"),
                  Count(in.microbatches, "micro-batch", "micro-batches"), in.microbatch_size,
                  Count(in.data_parallel, "data-parallel replica", "data-parallel replicas"),
                  Count(int64_t{in.pipeline_stages} * in.data_parallel, "GPU", "GPUs")));
  out += Row("recomputation", RecomputeSpec(in.recompute, in.recompute_layers));
  return out;
}

}  // namespace

namespace internal {

TimeAxis TimeAxisFor(const SimResult& result) {
  TimeNs end = 0;
  for (const OpRecord& op : result.ops) end = std::max(end, op.end_ns);
  for (const TransferRecord& t : result.transfers) end = std::max(end, t.end_ns);
  if (result.iterations_simulated == 1) {
    for (const StageResult& r : result.per_rank) {
      if (r.allreduce_ns > 0) end = std::max(end, r.last_end_ns + r.allreduce_ns);
    }
  }
  return TimeAxis(end);
}

std::string TimeAxisSvg(const TimeAxis& axis, double y_top, double y_bottom) {
  const double scale = axis.InMs() ? 1e6 : 1e3;
  const double end = static_cast<double>(axis.end_ns()) / scale;
  std::string out = "<g class=\"axis\">";
  for (double v : NiceTicks(end, kTimeTicks * axis.zoom())) {
    const double x = axis.X(static_cast<TimeNs>(std::llround(v * scale)));
    out += fmt::format("<line class=\"grid\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>", Px(x),
                       Px(y_top), Px(y_bottom));
    out += fmt::format("<text x=\"{}\" y=\"{}\">{:g}</text>", Px(x), Px(y_top - 6), v);
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" style=\"text-anchor:end\">{}</text></g>\n",
                     Px(kGutterPx - 8), Px(y_top - 6), axis.Unit());
  return out;
}

}  // namespace internal

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string QuoteCommandLine(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& arg : args) {
    if (!out.empty()) out += ' ';
    if (!NeedsShellQuote(arg)) {
      out += arg;
      continue;
    }
    out += '\'';
    for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

std::vector<double> NiceTicks(double max, int target) {
  if (!(max > 0) || target < 1) return {0};
  const double raw = max / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    step = f * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  // The half-step slack keeps a tick that lands on `max` up to rounding.
  for (int i = 0; i * step <= max + step * 1e-9; ++i) ticks.push_back(i * step);
  return ticks;
}

std::string Px(double value) {
  std::string s = fmt::format("{:.1f}", value);
  return s == "-0.0" ? "0.0" : s;
}

std::string HtmlPage(std::string_view title, std::string_view body) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + HtmlEscape(title) + "</title>\n<style>" + kCss + internal::ZoomCss() +
         "</style>\n</head>\n<body>\n";
  out += kSvgDefs;
  out += "\n";
  // One allocation for the page: appending a large body to a small string
  // doubles its way up, holding up to twice the page at once.
  out.reserve(out.size() + body.size() + 32);
  out += body;
  out += "</body>\n</html>\n";
  return out;
}

ReportInputs MakeReportInputs(const Model& model, const Cluster& cluster, const Schedule& schedule,
                              const SimOptions& options, std::string command_line) {
  ReportInputs in;
  in.model_name = model.name;
  in.model_layers = static_cast<int>(model.layers.size());
  in.cluster = cluster;
  in.schedule = schedule.name;
  in.pipeline_stages = schedule.num_ranks;
  in.chunks = schedule.ChunksPerRank();
  in.microbatches = schedule.num_microbatches / std::max(schedule.iterations, 1);
  in.microbatch_size = options.config.microbatch_size;
  in.data_parallel = options.config.layout.data_parallel;
  in.recompute = options.config.recompute;
  in.recompute_layers = options.config.recompute_layers;
  in.command_line = std::move(command_line);
  return in;
}

std::string InputsHtml(const ReportInputs& in, std::string_view extra_rows) {
  const Cluster& c = in.cluster;
  std::string out = "<table class=\"inputs\">\n";
  std::string model = HtmlEscape(in.model_name);
  if (in.model_layers > 0) model += fmt::format(" ({} layers)", in.model_layers);
  out += Row("model", model);
  out += extra_rows;
  if (in.pipeline_stages > 0) out += ConfigurationRows(in);
  std::string gpu = HtmlEscape(c.gpu.name.empty() ? std::string("GPU") : c.gpu.name);
  gpu += c.gpu.memory_bytes > 0 ? ", " + GiBWithUnit(c.gpu.memory_bytes) : ", unlimited memory";
  if (c.gpu.peak_tflops > 0) gpu += fmt::format(", {:g} TFLOP/s peak", c.gpu.peak_tflops);
  out += Row("cluster",
             fmt::format("{}: {}, {} GPUs per node", HtmlEscape(c.name), gpu, c.gpus_per_node));
  out += Row("links", fmt::format("inside a node {}; between nodes {}", LinkText(c.intra_node),
                                  LinkText(c.inter_node)));
  if (!in.command_line.empty()) {
    out += Row("command", "<code>" + HtmlEscape(in.command_line) + "</code>");
  }
  out += "</table>\n";
  return out;
}

std::string HeadlineHtml(const SimResult& r, const Cluster& cluster) {
  std::string out = "<div class=\"metrics\">\n";
  std::string detail =
      fmt::format("pipeline {:.3f} ms + {} + optimizer {:.3f} ms", NsToMs(r.pipeline_ns),
                  DataParallelCommText(r), NsToMs(r.optimizer_ns));
  if (r.iterations_simulated > 1) {
    detail += fmt::format(
        "; steady state of {} iterations without a flush (the first, with its "
        "warm-up, took {:.3f} ms)",
        r.iterations_simulated, NsToMs(r.first_iteration_ns));
  }
  out += Metric("iteration_time_us", NsToUs(r.iteration_ns), "iteration time",
                fmt::format("{:.3f} ms", NsToMs(r.iteration_ns)), detail);
  std::string tput = fmt::format("global batch {}", r.global_batch);
  if (r.tokens_per_s) tput += fmt::format(", {:.0f} tokens/s", *r.tokens_per_s);
  out += Metric("throughput_samples_per_s", r.samples_per_s, "throughput",
                fmt::format("{:.1f} samples/s", r.samples_per_s), tput);
  if (r.tflops_per_gpu) {
    std::string mfu = "MFU unknown (no peak TFLOP/s for this GPU)";
    if (r.mfu) {
      mfu =
          fmt::format("MFU {} of {:g} TFLOP/s peak", PercentText(*r.mfu), cluster.gpu.peak_tflops);
    }
    out += Metric("tflops_per_gpu", *r.tflops_per_gpu, "model FLOP/s per GPU",
                  fmt::format("{:.1f} TFLOP/s", *r.tflops_per_gpu), mfu);
  }
  out += Metric("bubble_ratio", r.bubble_ratio, "bubble ratio", PercentText(r.bubble_ratio),
                "idle share of the pipeline span, mean over ranks (1 − busy/span)");
  out += Metric("bubble_fraction_of_ideal", r.bubble_fraction_of_ideal, "bubble/ideal",
                PercentText(r.bubble_fraction_of_ideal),
                "Megatron-LM's bubble time fraction: idle time over busy time");
  out +=
      Metric("zb_bubble_rate", r.zb_bubble_rate, "zero-bubble rate", PercentText(r.zb_bubble_rate),
             "Qi et al.'s rate: 1 − busiest rank's work / longest rank span");
  const StageResult* top = nullptr;
  for (const StageResult& s : r.per_rank) {
    if (top == nullptr || s.peak_memory_bytes > top->peak_memory_bytes) top = &s;
  }
  if (top != nullptr) {
    const Bytes cap = r.memory_capacity_bytes;
    const std::string of =
        cap > 0
            ? fmt::format("rank {}; {} of {} ({})", top->rank,
                          PercentText(static_cast<double>(top->peak_memory_bytes) / cap),
                          GiBWithUnit(cap), HtmlEscape(cluster.name))
            : fmt::format("rank {}; unlimited memory ({})", top->rank, HtmlEscape(cluster.name));
    out += Metric("peak_memory_bytes", static_cast<double>(top->peak_memory_bytes),
                  "largest peak memory", GiBWithUnit(top->peak_memory_bytes), of,
                  cap > 0 && top->peak_memory_bytes > cap);
  }
  if (r.critical_path) {
    const CriticalPath& cp = *r.critical_path;
    out += Metric(
        "critical_path_us", NsToUs(cp.length_ns), "critical path",
        fmt::format("{:.3f} ms", NsToMs(cp.length_ns)),
        fmt::format("compute {:.3f} ms + communication {:.3f} ms + waiting {:.3f} ms",
                    NsToMs(cp.compute_ns), NsToMs(cp.communication_ns), NsToMs(cp.waiting_ns)));
  }
  out += "</div>\n";
  if (!r.costs_measured) {
    out +=
        "<p class=\"sub\">Not every cost was measured: some are interpolated (see the "
        "notes).</p>\n";
  }
  return out;
}

std::string SimulationReportHtml(const SimResult& result, const ReportInputs& inputs) {
  const std::string title =
      fmt::format("pipecast {}: {}, {} p={} m={}", inputs.tool, inputs.model_name,
                  result.schedule_name, result.ranks, result.microbatches);
  std::string body = "<header><h1>" + HtmlEscape(title) + "</h1>\n";
  body += fmt::format(
      "<p class=\"sub\">Simulated by pipecast {} on {}. How to read this page: "
      "docs/report.md.</p></header>\n",
      HtmlEscape(inputs.tool), HtmlEscape(inputs.cluster.name));
  body += "<h2>Inputs</h2>\n" + InputsHtml(inputs);
  body += "<h2>Headline</h2>\n" + HeadlineHtml(result, inputs.cluster);
  body += "<h2>Timeline</h2>\n";
  const bool recorded = !result.ops.empty();
  body += recorded ? TimelineHtml(result)
                   : "<p class=\"sub\">The timeline was not recorded for this result.</p>\n";
  body += "<h2>Memory</h2>\n";
  body += recorded ? MemoryHtml(result)
                   : "<p class=\"sub\">The memory timeline was not recorded for this result.</p>\n";
  if (!result.notes.empty()) {
    body += "<h2>Notes</h2>\n<ul>\n";
    for (const std::string& note : result.notes) body += "<li>" + HtmlEscape(note) + "</li>\n";
    body += "</ul>\n";
  }
  body += "<footer>pipecast HTML report: inline SVG and CSS, no scripts, no network.</footer>\n";
  return HtmlPage(title, body);
}

}  // namespace pipecast
