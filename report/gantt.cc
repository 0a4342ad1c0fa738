#include "report/gantt.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "base/terminal_text.h"
#include "base/text_table.h"

namespace pipecast {
namespace {

// A labelled tick on the time axis every this many cells.
constexpr int kTickEvery = 10;
// The smallest limits GanttChart draws with: one axis tick, one rank.
constexpr int kMinColumns = kTickEvery;
constexpr int kMinRanks = 1;

constexpr char kIdleGlyph[] = "·";
constexpr char kColorReset[] = "\x1b[0m";

struct KindStyle {
  const char* glyph;
  const char* color;  // ANSI foreground
  const char* name;
};

KindStyle StyleOf(OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return {"░", "\x1b[34m", "forward"};
    case OpKind::kBackward:
      return {"█", "\x1b[32m", "backward"};
    case OpKind::kBackwardInput:
      return {"▓", "\x1b[33m", "input gradient"};
    case OpKind::kBackwardWeight:
      return {"▒", "\x1b[35m", "weight gradient"};
  }
  return {"?", "", "?"};
}

// `glyphs` (one or more copies of one glyph) in the kind's colour when asked.
std::string Paint(const std::string& glyphs, OpKind kind, bool color) {
  return color ? StyleOf(kind).color + glyphs + kColorReset : glyphs;
}

// A unit for labels: the largest of s, ms, us and ns not above `ns`.
struct Unit {
  TimeNs ns;
  const char* name;
};

Unit UnitFor(TimeNs ns) {
  if (ns >= kNsPerS) return {kNsPerS, "s"};
  if (ns >= 1000 * kNsPerUs) return {1000 * kNsPerUs, "ms"};
  if (ns >= kNsPerUs) return {kNsPerUs, "us"};
  return {1, "ns"};
}

std::string InUnit(TimeNs ns, Unit unit) {
  return fmt::format("{:g}", static_cast<double>(ns) / static_cast<double>(unit.ns));
}

// "250 us", "1.5 ms".
std::string Duration(TimeNs ns) {
  const Unit unit = UnitFor(ns);
  return InUnit(ns, unit) + " " + unit.name;
}

// Round durations, so axis labels stay short: 1, 2 or 5 times a power of ten.
// The smallest not below `ns` (ns >= 1).
TimeNs RoundUp(TimeNs ns) {
  for (TimeNs power = 1; power <= std::numeric_limits<TimeNs>::max() / 10; power *= 10) {
    for (TimeNs m : {1, 2, 5}) {
      if (m * power >= ns) return m * power;
    }
  }
  return ns;
}

// How time maps onto cells, or why it cannot.
struct Scale {
  TimeNs origin = 0;  // the first op's start: the left edge of cell 0
  TimeNs span = 0;    // to the last op's end
  TimeNs cell = 1;    // ns per cell
  int64_t columns = 0;
  bool exact = true;    // every op begins and ends on a cell boundary
  TimeNs shortest = 0;  // the shortest op
  std::string why_not;  // non-empty: draw the summary instead, for this reason
};

Scale ChooseScale(const SimResult& result, int max_columns, int max_ranks) {
  Scale s;
  if (result.ranks > max_ranks) {
    s.why_not = fmt::format("{} ranks are more than the {} a terminal chart shows", result.ranks,
                            max_ranks);
    return s;
  }
  if (result.ops.empty()) {
    s.why_not = "the timeline was not recorded";
    return s;
  }
  TimeNs end = result.ops.front().end_ns;
  s.origin = result.ops.front().start_ns;
  for (const OpRecord& op : result.ops) {
    s.origin = std::min(s.origin, op.start_ns);
    end = std::max(end, op.end_ns);
  }
  s.span = end - s.origin;
  TimeNs shortest = std::numeric_limits<TimeNs>::max();
  TimeNs unit = 0;  // gcd of every op boundary, from the origin
  for (const OpRecord& op : result.ops) {
    if (op.end_ns > op.start_ns) shortest = std::min(shortest, op.end_ns - op.start_ns);
    unit = std::gcd(unit, op.start_ns - s.origin);
    unit = std::gcd(unit, op.end_ns - s.origin);
  }
  if (s.span <= 0 || unit <= 0) {
    s.why_not = "its ops take no time";
    return s;
  }
  auto columns = [&](TimeNs cell) { return (s.span + cell - 1) / cell; };
  // Exact cells when they fit; else the round duration that fits the width.
  // Ops shorter than a cell may then share one: FillCells marks it.
  s.cell = columns(unit) <= max_columns ? unit : RoundUp((s.span + max_columns - 1) / max_columns);
  s.shortest = shortest;
  s.exact = unit % s.cell == 0;
  s.columns = columns(s.cell);
  return s;
}

// One cell of a rank's row: the op that covers most of it.
struct Cell {
  int op = -1;         // index into SimResult::ops; -1 idle, kCrowded
  TimeNs best = 0;     // how much of the cell that op covers
  TimeNs covered = 0;  // by every op together
};

// Marks the cell where each op that won no cell has most of its time, so an
// op shorter than a cell never vanishes from the chart.
// Whether each op of result.ops wins at least one cell.
std::vector<char> ShownOps(const SimResult& result, const std::vector<std::vector<Cell>>& grid) {
  std::vector<char> shown(result.ops.size(), 0);
  for (const auto& row : grid) {
    for (const Cell& cell : row) {
      if (cell.op >= 0) shown[cell.op] = 1;
    }
  }
  return shown;
}

// Cells per rank. A cell shows the op covering most of it (the earlier on a
// tie), or idle when ops cover less than half of it.
std::vector<std::vector<Cell>> FillCells(const SimResult& result, const Scale& s) {
  std::vector<std::vector<Cell>> grid(result.ranks, std::vector<Cell>(s.columns));
  for (size_t i = 0; i < result.ops.size(); ++i) {
    const OpRecord& op = result.ops[i];
    if (op.rank < 0 || op.rank >= result.ranks) continue;
    const TimeNs a = op.start_ns - s.origin;
    const TimeNs b = op.end_ns - s.origin;
    for (int64_t c = a / s.cell; c < s.columns && c * s.cell < b; ++c) {
      const TimeNs overlap = std::min(b, (c + 1) * s.cell) - std::max(a, c * s.cell);
      Cell& cell = grid[op.rank][c];
      cell.covered += overlap;
      if (overlap > cell.best) {
        cell.best = overlap;
        cell.op = static_cast<int>(i);
      }
    }
  }
  for (auto& row : grid) {
    for (Cell& cell : row) {
      if (2 * cell.covered < s.cell) cell.op = -1;
    }
  }
  return grid;
}

void TrimRight(std::string* line) { line->erase(line->find_last_not_of(' ') + 1); }

// The kinds other than forward in `result`, each labelled on a row of its own
// under every rank, in the order B, I, W.
std::vector<OpKind> LabelledKinds(const SimResult& result) {
  std::vector<OpKind> kinds;
  for (OpKind kind : {OpKind::kBackward, OpKind::kBackwardInput, OpKind::kBackwardWeight}) {
    for (const OpRecord& op : result.ops) {
      if (op.action.kind == kind) {
        kinds.push_back(kind);
        break;
      }
    }
  }
  return kinds;
}

// What the legend has to explain.
struct DrawNotes {
  bool shortened = false;       // a number wider than its op shows its last digit
  bool forward_filled = false;  // a forward wider than its number is filled with ░
};

struct RankRows {
  std::string blocks;
  std::vector<std::string> labels;  // one per LabelledKinds entry
};

// `label`, or its last digit when it is wider than `width` cells.
std::string Fit(std::string label, size_t width, DrawNotes* notes) {
  if (label.size() <= width) return label;
  notes->shortened = true;
  return label.substr(label.size() - 1);
}

// The lines of one rank: the blocks, with each forward written as its
// micro-batch number, then a row of micro-batch numbers per other kind.
RankRows DrawRank(const SimResult& result, const std::vector<Cell>& row,
                  const std::vector<OpKind>& labelled, bool color, DrawNotes* notes) {
  RankRows out;
  out.labels.assign(labelled.size(), std::string(row.size(), ' '));
  for (size_t c = 0; c < row.size();) {
    const int op = row[c].op;
    size_t next = c + 1;
    while (next < row.size() && row[next].op == op) ++next;
    const size_t width = next - c;
    if (op < 0) {
      for (size_t k = 0; k < width; ++k) out.blocks += kIdleGlyph;
      c = next;
      continue;
    }
    const Action& action = result.ops[op].action;
    const std::string label = Fit(std::to_string(action.microbatch), width, notes);
    std::string cells;
    size_t drawn = 0;
    if (action.kind == OpKind::kForward) {
      cells = label;
      drawn = label.size();
      notes->forward_filled |= drawn < width;
    } else {
      const size_t k = std::find(labelled.begin(), labelled.end(), action.kind) - labelled.begin();
      out.labels[k].replace(c, label.size(), label);
    }
    for (; drawn < width; ++drawn) cells += StyleOf(action.kind).glyph;
    out.blocks += Paint(cells, action.kind, color);
    c = next;
  }
  for (std::string& line : out.labels) TrimRight(&line);
  return out;
}

// A rank's row when cells are longer than the shortest op: each cell the
// glyph of the kind that fills most of it, without micro-batch numbers.
std::string DrawCoarseRank(const SimResult& result, const std::vector<Cell>& row, bool color) {
  std::string out;
  for (const Cell& cell : row) {
    if (cell.op < 0) {
      out += kIdleGlyph;
      continue;
    }
    const OpKind kind = result.ops[cell.op].action.kind;
    out += Paint(StyleOf(kind).glyph, kind, color);
  }
  return out;
}

// The legend of a coarse chart: each kind present, and how many ops fill no
// cell of their own.
std::string CoarseLegend(const SimResult& result, const Scale& s, int64_t hidden, bool color) {
  std::string kinds;
  for (OpKind kind :
       {OpKind::kForward, OpKind::kBackward, OpKind::kBackwardInput, OpKind::kBackwardWeight}) {
    const bool present = std::any_of(result.ops.begin(), result.ops.end(),
                                     [&](const OpRecord& op) { return op.action.kind == kind; });
    if (present) kinds += Paint(StyleOf(kind).glyph, kind, color) + " " + StyleOf(kind).name + ", ";
  }
  std::string out = fmt::format(
      "{}{} idle: the kind of op that fills most of each cell\n"
      "cells of {} are longer than the shortest op ({}), so micro-batch numbers are left out and "
      "{} of {} ops fill no cell of their own; --width widens the chart, --trace or --report "
      "shows every op\n",
      kinds, kIdleGlyph, Duration(s.cell), Duration(s.shortest), hidden, result.ops.size());
  if (result.stages > result.ranks) {
    out +=
        fmt::format("each rank runs {} stages (model chunks); the chart does not tell them apart\n",
                    result.stages / std::max(result.ranks, 1));
  }
  return out;
}

// The tick labels and the ruler, each line starting with `indent` blanks.
std::string Axis(const Scale& s, Unit unit, size_t indent) {
  std::string labels(indent, ' ');
  std::string ruler(indent, ' ');
  for (int64_t c = 0; c <= s.columns; ++c) {
    if (c % kTickEvery == 0) {
      const size_t at = indent + static_cast<size_t>(c);
      if (c == 0 || labels.size() < at) {
        labels.resize(at, ' ');
        labels += InUnit(c * s.cell, unit);
      }
    }
    ruler += c == 0 ? "├" : c == s.columns ? "┤" : c % kTickEvery == 0 ? "┼" : "─";
  }
  return labels + "\n" + ruler + "\n";
}

std::string Legend(const SimResult& result, const Scale& s, const std::vector<OpKind>& labelled,
                   const DrawNotes& notes, bool color) {
  std::string out = "digits: a forward, as its micro-batch number";
  if (notes.forward_filled)
    out += " (" + Paint(StyleOf(OpKind::kForward).glyph, OpKind::kForward, color) +
           " fills the rest of a wider op)";
  out += "; " + std::string(kIdleGlyph) + " idle\n";
  if (!labelled.empty()) {
    std::string kinds;
    std::string rows;
    for (size_t k = 0; k < labelled.size(); ++k) {
      const char* sep = k == 0 ? "" : ", ";
      kinds += sep + Paint(StyleOf(labelled[k]).glyph, labelled[k], color) + " " +
               StyleOf(labelled[k]).name;
      rows += sep + std::string(1, OpKindLetter(labelled[k]));
    }
    out += fmt::format("{}: micro-batch in the row{} marked {} under the rank\n", kinds,
                       labelled.size() > 1 ? "s" : "", rows);
  }
  if (notes.shortened) out += "a micro-batch number wider than its op shows its last digit only\n";

  if (!s.exact) {
    out +=
        "ops do not all begin and end on cell boundaries: each cell shows the op that fills "
        "most of it\n";
  }
  if (result.stages > result.ranks) {
    out += fmt::format(
        "each rank runs {} stages (model chunks); the chart does not tell them "
        "apart\n",
        result.stages / std::max(result.ranks, 1));
  }
  return out;
}

// "1f1b, 4 ranks, 8 micro-batches".
std::string Title(const SimResult& result) {
  std::string iterations;
  if (result.iterations_simulated > 1) {
    iterations = fmt::format(" ({} iterations simulated)", result.iterations_simulated);
  }
  return fmt::format("{}, {}, {}{}", TerminalSafe(result.schedule_name),
                     Count(result.ranks, "rank", "ranks"),
                     Count(result.microbatches, "micro-batch", "micro-batches"), iterations);
}

std::string Summary(const SimResult& result, const std::string& why_not) {
  std::string out = fmt::format("{}: no chart, as {}; per rank over the {} pipeline instead:\n",
                                Title(result), why_not, Duration(result.pipeline_ns));
  TextTable t;
  t.AddColumn("rank", TextTable::kRight);
  t.AddColumn("busy ms", TextTable::kRight);
  t.AddColumn("idle ms", TextTable::kRight);
  t.AddColumn("bubble ratio", TextTable::kRight);
  const double ns_per_ms = 1000.0 * kNsPerUs;
  for (const StageResult& r : result.per_rank) {
    const TimeNs idle = std::max<TimeNs>(result.pipeline_ns - r.busy_ns, 0);
    t.AddRow({fmt::format("{}", r.rank), fmt::format("{:.3f}", r.busy_ns / ns_per_ms),
              fmt::format("{:.3f}", idle / ns_per_ms),
              fmt::format("{:.1f}%", 100.0 * r.bubble_ratio)});
  }
  return out + t.Render();
}

}  // namespace

Status GanttOptions::Validate() const {
  if (max_columns < kMinColumns) {
    return Status::InvalidArgument(
        fmt::format("gantt max_columns {} is below {}, one axis tick", max_columns, kMinColumns));
  }
  if (max_ranks < kMinRanks) {
    return Status::InvalidArgument(fmt::format("gantt max_ranks {} is below 1", max_ranks));
  }
  return Status::Ok();
}

std::string GanttChart(const SimResult& result, const GanttOptions& options) {
  const Scale s = ChooseScale(result, std::max(options.max_columns, kMinColumns),
                              std::max(options.max_ranks, kMinRanks));
  if (!s.why_not.empty()) return Summary(result, s.why_not);

  const Unit unit = UnitFor(s.span);
  std::string out = fmt::format("{}: {} as {} cells of {} (axis in {})\n", Title(result),
                                Duration(s.span), s.columns, Duration(s.cell), unit.name);
  const int rank_digits = static_cast<int>(std::to_string(std::max(result.ranks - 1, 0)).size());
  const int label_width = 5 + rank_digits;  // "rank " and the number
  out += Axis(s, unit, label_width + 2);
  const std::vector<std::vector<Cell>> grid = FillCells(result, s);
  if (s.cell > s.shortest) {
    const std::vector<char> shown = ShownOps(result, grid);
    const int64_t hidden = std::count(shown.begin(), shown.end(), 0);
    for (int rank = 0; rank < result.ranks; ++rank) {
      out += fmt::format("rank {:>{}}  {}\n", rank, rank_digits,
                         DrawCoarseRank(result, grid[rank], options.color));
    }
    return out + CoarseLegend(result, s, hidden, options.color);
  }
  const std::vector<OpKind> labelled = LabelledKinds(result);
  DrawNotes notes;
  for (int rank = 0; rank < result.ranks; ++rank) {
    const RankRows rows = DrawRank(result, grid[rank], labelled, options.color, &notes);
    out += fmt::format("rank {:>{}}  {}\n", rank, rank_digits, rows.blocks);
    for (size_t k = 0; k < labelled.size(); ++k) {
      std::string line =
          fmt::format("{:>{}}  {}", OpKindLetter(labelled[k]), label_width, rows.labels[k]);
      TrimRight(&line);
      out += line + "\n";
    }
  }
  return out + Legend(result, s, labelled, notes, options.color);
}

int GanttCellsForWidth(int width_columns) {
  if (width_columns <= 0) return GanttOptions{}.max_columns;
  return std::max(width_columns - kGanttLabelColumns, kMinColumns);
}

bool GanttColorWanted(bool stdout_is_terminal, const char* no_color) {
  return stdout_is_terminal && (no_color == nullptr || *no_color == '\0');
}

}  // namespace pipecast
