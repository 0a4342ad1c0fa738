// Gantt chart: a simulated timeline drawn as text for a terminal, the way the
// GPipe (Huang et al. 2019, fig. 2) and Megatron-LM (Narayanan et al. SC'21,
// figs. 3-4) papers draw their schedules: one row per rank, time left to
// right, each op a run of cells.
//
// Each rank's row shows one character per cell: a forward as its micro-batch
// number (░ filling the rest of a forward wider than its number), a whole
// backward as █, an input gradient as ▓, a weight gradient as ▒, idle as ·.
// Under it, one line per kind of block present (marked B, or I and W) writes
// each block's micro-batch under its first cell, so that no two kinds share a
// line and one-cell ops stay readable without colour. A number wider than its
// op shows its last digit. Above the ranks runs a time axis with a labelled
// tick every 10 cells; below them, a legend. A cell is one unit of time: the
// greatest common divisor of the op boundaries when the span fits in
// GanttOptions::max_columns cells, else the round duration (1, 2 or 5 x 10^k
// ns) that fits it, each cell then showing the op that fills most of it. When
// that cell is longer than the shortest op, the rows show each cell's kind
// of op without micro-batch numbers, and the legend says how many ops fill
// no cell of their own. With more ranks than a terminal shows, or no
// recorded timeline, a per-rank summary (busy, idle, bubble ratio) says why
// instead.
//
// Pure functions of their arguments; safe to call from several threads. The
// text is UTF-8, with "\n" line ends and no trailing blanks.
#ifndef PIPECAST_REPORT_GANTT_H_
#define PIPECAST_REPORT_GANTT_H_

#include <string>

#include "base/status.h"
#include "sim/simulator.h"

namespace pipecast {

struct GanttOptions {
  // Cells on the time axis at most (the rank labels come on top): the tools
  // pass the terminal's width less the labels, or --width.
  int max_columns = 120;
  // More ranks than this: the summary instead of a chart.
  int max_ranks = 16;
  // ANSI colours on the blocks; for a terminal that wants them (see
  // GanttColorWanted). Off: plain text, the same layout.
  bool color = false;

  // InvalidArgument unless max_columns >= 10 (one axis tick) and max_ranks >= 1.
  Status Validate() const;
};

// The chart of `result`'s timeline (SimResult::ops), or the per-rank summary
// when the timeline was not recorded (SimOptions::record_timeline) or is too
// large for a terminal.
// REQUIRES: options.Validate().ok(); smaller limits are raised to the minimum.
std::string GanttChart(const SimResult& result, const GanttOptions& options);

// The cells a chart `width_columns` wide leaves for the time axis: the rank
// labels ("rank 12  ") take kGanttLabelColumns. `width_columns` is --width
// when given, else the terminal's width; 0 (neither: not a terminal) gives
// the default GanttOptions::max_columns. At least 10 cells.
inline constexpr int kGanttLabelColumns = 10;
int GanttCellsForWidth(int width_columns);

// Whether a tool should colour its chart: only when stdout is a terminal and
// NO_COLOR (https://no-color.org) is unset or empty. `no_color` is the
// variable's value, nullptr when unset.
bool GanttColorWanted(bool stdout_is_terminal, const char* no_color);

}  // namespace pipecast

#endif  // PIPECAST_REPORT_GANTT_H_
