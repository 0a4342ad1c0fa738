// HTML report: one self-contained page (inline CSS and SVG, no script, no
// network) that shows a simulated iteration as people read pipeline schedules:
// a timeline per rank (F, B, I, W ops in distinct colours labelled with their
// micro-batch, idle time shaded, transfers on a communication lane under each
// rank, the critical path marked), memory over time per rank against the
// GPU's capacity with the breakdown at the peak, the headline numbers and the
// inputs that produced them. docs/report.md says how to read it.
//
// Every drawn element carries its identity in data attributes
// (`<rect class="op op-F" data-rank="0" data-mb="3" data-start-us=..>`), so
// tests and scripts check the picture against the simulation without a
// browser; docs/report.md lists them. Times in attributes are microseconds
// with three decimals (exact integer ns), sizes are bytes.
//
// The page builders are pure functions of their arguments: the same input
// gives the same bytes (no clock, no locale). Thread-safe.
//
// The planner's report (report/planner_report.h) composes the building blocks
// declared at the end of this header.
#ifndef PIPECAST_REPORT_HTML_REPORT_H_
#define PIPECAST_REPORT_HTML_REPORT_H_

#include <string>
#include <string_view>
#include <vector>

#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"

namespace pipecast {

// What the report shows as its inputs, so that it stands alone.
struct ReportInputs {
  std::string tool = "simulator";  // the tool that wrote the report
  std::string model_name;
  int model_layers = 0;     // 0: not shown
  Cluster cluster;          // name, GPU memory and peak, links
  std::string schedule;     // e.g. "1f1b"
  int pipeline_stages = 0;  // p, ranks
  int chunks = 1;           // v, model chunks per rank
  int microbatches = 0;     // m
  int microbatch_size = 1;
  int data_parallel = 1;  // d
  Recompute recompute = Recompute::kOff;
  RecomputeLayers recompute_layers;  // every:K, Megatron-LM's method
  std::string command_line;          // as typed (QuoteCommandLine); empty: not shown
};

// The inputs of one simulation. `command_line` is shown verbatim.
ReportInputs MakeReportInputs(const Model& model, const Cluster& cluster, const Schedule& schedule,
                              const SimOptions& options, std::string command_line);

// The simulator's report: inputs, headline metrics, timeline, memory, notes.
// A result simulated without record_timeline gets the numbers and a line
// saying that the timeline was not recorded instead of the charts.
std::string SimulationReportHtml(const SimResult& result, const ReportInputs& inputs);

// ---------------------------------------------------------------------------
// Building blocks, shared with the planner's report.

// Text made safe for HTML text and attribute values: & < > " ' escaped.
std::string HtmlEscape(std::string_view text);

// Arguments joined by spaces, each quoted for a POSIX shell when it needs it
// ('it'\''s'), so the line can be pasted back to rerun the tool.
std::string QuoteCommandLine(const std::vector<std::string>& args);

// A whole document: doctype, <head> with `title` (escaped here) and the
// report's stylesheet, then `body` verbatim.
std::string HtmlPage(std::string_view title, std::string_view body);

// `<table class="inputs">` of the model, `extra_rows` (trusted HTML `<tr>`s,
// e.g. the planner's search), the schedule and pipeline shape when
// inputs.pipeline_stages > 0, the cluster and the command line.
std::string InputsHtml(const ReportInputs& inputs, std::string_view extra_rows = "");

// The headline metrics as cards (`<div class="metric" data-metric=..
// data-value=..>`): iteration time, throughput (tokens/s, TFLOP/s, MFU when
// known), bubble ratio and bubble/ideal named plainly, the largest peak
// memory against capacity, the critical path when recorded.
std::string HeadlineHtml(const SimResult& result, const Cluster& cluster);

// The timeline figure: legend, one SVG (`<svg class="timeline">`) with a lane
// per rank, a caption that says when ops were merged, and a per-rank table
// (busy, idle, both bubble forms). Ops narrower than kMinOpPx at the chart's
// scale are merged with their narrow neighbours into busy spans
// (`<rect class="busy" data-ops=N ..>`); when many are (data-mode="dense"),
// every lane is drawn as spans that also close gaps of a few pixels.
// docs/report.md gives the rules. REQUIRES: result.ops non-empty.
std::string TimelineHtml(const SimResult& result);

// The memory figure: a step chart per rank (`<polyline class="mem">`) of the
// static part (weights, stashed weights, gradients, optimizer) plus the live
// set (activations, communication buffers, workspace) over time, on the
// timeline's time axis, with the capacity as `<line class="capacity">` when
// it is > 0; then the breakdown at each rank's peak as a table.
// REQUIRES: the result was simulated with record_timeline.
std::string MemoryHtml(const SimResult& result);

// Ops narrower than this many pixels are merged into busy spans: below it an
// op is a sliver that neither shows its colour nor takes a label.
inline constexpr double kMinOpPx = 2.0;

// Round tick values 0, s, 2s, ... covering [0, max] with about `target` ticks,
// s one of 1, 2, 5 times a power of ten. {0} when max <= 0.
std::vector<double> NiceTicks(double max, int target);

// A number for an SVG coordinate: one decimal, "-0.0" printed as "0.0".
std::string Px(double value);

}  // namespace pipecast

#endif  // PIPECAST_REPORT_HTML_REPORT_H_
