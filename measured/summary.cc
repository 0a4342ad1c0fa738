#include "measured/summary.h"

#include <fmt/format.h>

#include <set>

#include "base/text_table.h"
#include "measured/pair_check.h"

namespace pipecast::measured {
namespace {

std::string Ms(TimeNs ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6); }

std::string Share(TimeNs part, TimeNs whole) {
  return whole > 0 ? PercentText(static_cast<double>(part) / static_cast<double>(whole)) : "-";
}

std::string RankHeader(const MeasuredRank& r) {
  std::string who;
  if (r.global_rank) {
    who = r.world_size ? fmt::format(", rank {} of {}", *r.global_rank, *r.world_size)
                       : fmt::format(", rank {}", *r.global_rank);
  }
  return fmt::format("rank {}: {}{}{}; ops from {}\n", r.rank, r.file, who,
                     r.device.empty() ? "" : ", " + r.device, r.ops_from);
}

// One column per rank: the median step's figures.
std::string StepTable(const MeasuredRun& run) {
  const int n = static_cast<int>(run.ranks.size());
  TextTable t;
  t.AddColumn("median step (ms)", TextTable::kLeft);
  for (int r = 0; r < n; ++r) t.AddColumn(fmt::format("rank {}", r), TextTable::kRight);
  auto row = [&](std::string name, auto value) {
    std::vector<std::string> cells{std::move(name)};
    for (int r = 0; r < n; ++r) cells.push_back(value(run.Step(r, run.median)));
    t.AddRow(std::move(cells));
  };
  const TimeNs iteration = run.iteration_ns[run.median];
  row(run.pipecast_trace ? "window (first op start to last op end)"
                         : "window (first to last GPU work)",
      [](const RankStep& s) { return Ms(s.span_ns()); });
  row("compute (busy)", [](const RankStep& s) { return Ms(s.compute_ns); });
  row("bubble ratio (1 - busy / iteration)", [&](const RankStep& s) {
    return iteration > 0 ? PercentText(1.0 - static_cast<double>(s.compute_ns) /
                                                 static_cast<double>(iteration))
                         : "-";
  });
  if (!run.pipecast_trace) {
    row("communication", [](const RankStep& s) { return Ms(s.comm_ns); });
    row("  exposed (not under compute)", [](const RankStep& s) { return Ms(s.exposed_comm_ns); });
    for (int k = 0; k < kCommKinds; ++k) {
      bool any = false;
      for (int r = 0; r < n; ++r) any = any || run.Step(r, run.median).comm_by_kind[k] > 0;
      if (!any) continue;
      row(fmt::format("  {} (exposed)", CommKindName(static_cast<CommKind>(k))),
          [k](const RankStep& s) {
            return fmt::format("{} ({})", Ms(s.comm_by_kind[k]), Ms(s.exposed_by_kind[k]));
          });
    }
  }
  for (int p = 0; p < kPhases; ++p) {
    bool any = false;
    for (int r = 0; r < n; ++r) {
      const RankStep& s = run.Step(r, run.median);
      any = any || s.compute_by_phase[p] > 0 || s.comm_by_phase[p] > 0;
    }
    if (!any) continue;
    if (run.pipecast_trace) {
      row(fmt::format("{} ops", PhaseName(static_cast<Phase>(p))),
          [p](const RankStep& s) { return Ms(s.compute_by_phase[p]); });
    } else {
      row(fmt::format("{} compute / comm", PhaseName(static_cast<Phase>(p))),
          [p](const RankStep& s) {
            return fmt::format("{} / {}", Ms(s.compute_by_phase[p]), Ms(s.comm_by_phase[p]));
          });
    }
  }
  row("ops", [](const RankStep& s) { return std::to_string(s.ops.size()); });
  bool memory = false;
  for (int r = 0; r < n; ++r) memory = memory || run.Step(r, run.median).peak_allocated_bytes >= 0;
  if (memory) {
    row("peak allocated (MiB)", [](const RankStep& s) {
      return s.peak_allocated_bytes >= 0
                 ? fmt::format("{:.1f}", static_cast<double>(s.peak_allocated_bytes) / kMiB)
                 : "-";
    });
  }
  return t.Render("  ");
}

// A rank's streams: busy and idle within the window, and kernel time per phase.
std::string StreamTable(const RankStep& s) {
  std::set<int> phases;
  for (const auto& [key, ns] : s.kernel_sum_by_phase_stream) phases.insert(key.first);
  TextTable t;
  t.AddColumn("stream", TextTable::kRight);
  t.AddColumn("busy (ms)", TextTable::kRight);
  t.AddColumn("idle (ms)", TextTable::kRight);
  t.AddColumn("idle share", TextTable::kRight);
  for (int p : phases) {
    t.AddColumn(fmt::format("{} kernels", PhaseName(static_cast<Phase>(p))), TextTable::kRight);
  }
  for (const auto& [stream, busy] : s.stream_busy) {
    std::vector<std::string> row{std::to_string(stream), Ms(busy), Ms(s.span_ns() - busy),
                                 Share(s.span_ns() - busy, s.span_ns())};
    for (int p : phases) {
      auto it = s.kernel_sum_by_phase_stream.find({p, stream});
      row.push_back(it != s.kernel_sum_by_phase_stream.end() ? Ms(it->second) : "-");
    }
    t.AddRow(std::move(row));
  }
  return t.Render("    ");
}

}  // namespace

std::string MeasuredRunText(const MeasuredRun& run) {
  const std::string ranks =
      fmt::format("{} rank{}", run.ranks.size(), run.ranks.size() == 1 ? "" : "s");
  std::string out =
      run.pipecast_trace
          ? fmt::format("measured run: {}, one iteration (a trace pipecast wrote)\n", ranks)
          : fmt::format(
                "measured run: {}, {} {} common to all; the tables describe step {} (the median "
                "iteration)\n",
                ranks, run.steps.size() == 1 ? "step" : "steps",
                run.steps.size() == 1
                    ? std::to_string(run.steps[0])
                    : fmt::format("{} to {}", run.steps.front(), run.steps.back()),
                run.steps[run.median]);
  std::string iterations;
  for (TimeNs t : run.iteration_ns) iterations += " " + Ms(t);
  out +=
      fmt::format("  iteration time per step (ms, latest end - earliest start):{}\n", iterations);
  for (const std::string& n : run.notes) out += "  note: " + n + "\n";
  for (const MeasuredRank& r : run.ranks) out += "  " + RankHeader(r);
  out += "\n" + StepTable(run);
  if (!run.pipecast_trace) {
    for (size_t r = 0; r < run.ranks.size(); ++r) {
      const RankStep& s = run.Step(static_cast<int>(r), run.median);
      out += fmt::format("\n  rank {} streams in step {} (window {} ms):\n", r, s.step,
                         Ms(s.span_ns()));
      out += StreamTable(s);
      if (std::optional<PairCheck> pair = CheckPair(s)) {
        // Each line of the check indented under its rank.
        std::string text = PairCheckText(*pair);
        for (size_t at = 0; at < text.size(); at = text.find('\n', at) + 1) {
          text.insert(at, "  ");
          if (text.find('\n', at) == std::string::npos) break;
        }
        out += text;
      }
    }
  }
  return out;
}

}  // namespace pipecast::measured
