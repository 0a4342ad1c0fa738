#include "measured/internal/pipecast_ranks.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "measured/internal/intervals.h"

namespace pipecast::measured::internal {
namespace {

// The label of a validator's measured processes in its side-by-side trace
// (validate/compare.h SideBySideTrace).
constexpr char kMeasuredLabel[] = "measured";

// The rank in a pipecast process name "measured rank 3 (GPU 3)".
std::optional<std::pair<std::string, int>> PipecastProcess(const std::string& name) {
  const size_t at = name.find(" rank ");
  if (at == std::string::npos) return std::nullopt;
  size_t i = at + 6;
  int rank = 0, digits = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 9) {
    rank = rank * 10 + (name[i++] - '0');
    ++digits;
  }
  if (digits == 0) return std::nullopt;
  return std::pair<std::string, int>{name.substr(0, at), rank};
}

}  // namespace

Status PipecastRanks(const TraceFile& trace, const std::string& wanted_label,
                     std::vector<MeasuredRank>* out) {
  std::string label = wanted_label;
  std::map<int64_t, int> pid_rank;
  bool has_measured = false;
  for (const auto& [pid, name] : trace.process_names) {
    if (auto p = PipecastProcess(name); p && p->first == kMeasuredLabel) has_measured = true;
  }
  if (label.empty() && has_measured) label = kMeasuredLabel;
  std::set<std::string> labels;
  for (const auto& [pid, name] : trace.process_names) {
    if (auto p = PipecastProcess(name)) {
      labels.insert(p->first);
      if (label.empty() || p->first == label) pid_rank[pid] = p->second;
    }
  }
  if (pid_rank.empty()) {
    std::string known;
    for (const std::string& l : labels) known += (known.empty() ? "" : ", ") + l;
    return Status::InvalidArgument(fmt::format(
        "{}: a pipecast trace with no process labelled '{}' (it has: {}): give --label one of "
        "them",
        trace.origin, label, known.empty() ? "none" : known));
  }
  std::map<int, MeasuredRank> ranks;
  for (const TraceEvent& e : trace.events) {
    if (e.kind != TraceEvent::Kind::kPipecastOp) continue;
    auto it = pid_rank.find(e.pid);
    if (it == pid_rank.end()) continue;
    MeasuredRank& r = ranks[it->second];
    if (r.steps.empty()) r.steps.emplace_back();
    MeasuredOp op;
    const std::string& name = trace.Name(e);
    const char letter = name.empty() ? 'F'
                        : name.find_first_of("FBIW") != std::string::npos
                            ? name[name.find_first_of("FBIW")]
                            : 'F';
    op.action.stage = e.stage;
    op.action.microbatch = e.microbatch;
    op.action.kind = letter == 'B'   ? OpKind::kBackward
                     : letter == 'I' ? OpKind::kBackwardInput
                     : letter == 'W' ? OpKind::kBackwardWeight
                                     : OpKind::kForward;
    op.action.overlapped = e.overlapped;
    op.start_ns = e.start_ns;
    op.end_ns = e.end_ns();
    op.compute_ns = e.dur_ns;
    r.steps[0].ops.push_back(op);
  }
  if (ranks.empty()) {
    return Status::InvalidArgument(
        fmt::format("{}: the processes labelled '{}' hold no op", trace.origin, label));
  }
  int expected = 0;
  for (auto& [rank, r] : ranks) {
    if (rank != expected++) {
      return Status::InvalidArgument(
          fmt::format("{}: the '{}' processes skip rank {}: a trace holds ranks 0 to p-1",
                      trace.origin, label, expected - 1));
    }
    r.file = trace.origin;
    r.rank = rank;
    r.ops_from = fmt::format("pipecast trace ('{}' processes)", label);
    RankStep& s = r.steps[0];
    std::stable_sort(s.ops.begin(), s.ops.end(), [](const MeasuredOp& a, const MeasuredOp& b) {
      return a.start_ns < b.start_ns;
    });
    s.start_ns = s.ops.front().start_ns;
    s.end_ns = s.ops.front().end_ns;
    std::vector<Interval> busy;
    for (const MeasuredOp& op : s.ops) {
      s.start_ns = std::min(s.start_ns, op.start_ns);
      s.end_ns = std::max(s.end_ns, op.end_ns);
      busy.emplace_back(op.start_ns, op.end_ns);
      s.compute_by_phase[static_cast<int>(PhaseOf(op.action.kind))] += op.end_ns - op.start_ns;
    }
    // Busy time is the union of the rank's ops: ops that overlap (an overlapped pair drawn over
    // itself, or a hand-edited trace) count once, so it never exceeds the window (found by
    // fuzz_trace_file: two overlapping ops gave more compute than the step's span).
    s.compute_ns = Length(Union(std::move(busy)));
    s.cpu_start_ns = s.start_ns;
    s.cpu_end_ns = s.end_ns;
    out->push_back(std::move(r));
  }
  return Status::Ok();
}

}  // namespace pipecast::measured::internal
