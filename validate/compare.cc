#include "validate/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "base/text_table.h"
#include "report/trace.h"

namespace pipecast::validate {
namespace {

using Json = nlohmann::ordered_json;

struct IterationStats {
  TimeNs origin = 0;
  TimeNs span = 0;
  std::vector<TimeNs> busy;  // per rank, per schedule iteration
};

IterationStats StatsOf(const ExecPlan& plan, const std::vector<StageRun>& runs, int iteration) {
  IterationStats s;
  s.busy.assign(runs.size(), 0);
  TimeNs first = INT64_MAX, last = INT64_MIN;
  const int k = std::max(plan.iterations, 1);
  const int per_iteration = std::max(plan.microbatches / k, 1);
  std::vector<TimeNs> iteration_end(k, INT64_MIN);
  for (size_t r = 0; r < runs.size(); ++r) {
    for (const OpTiming& op : runs[r].ops) {
      if (op.iteration != iteration) continue;
      first = std::min(first, op.start_ns);
      last = std::max(last, op.end_ns);
      s.busy[r] += op.end_ns - op.start_ns;
      TimeNs& end = iteration_end[std::min(op.action.microbatch / per_iteration, k - 1)];
      end = std::max(end, op.end_ns);
    }
  }
  if (first == INT64_MAX) return s;
  s.origin = first;
  s.span = last - first;
  if (k > 1) s.span = (iteration_end[k - 1] - iteration_end[0]) / (k - 1);
  for (TimeNs& b : s.busy) b /= k;
  return s;
}

// Tensor (expert) rank 0's record of each rank, in rank order: what the
// timing rows describe (every tensor or expert rank runs the same ops at the
// same times, up to the wait inside the collectives).
std::vector<StageRun> LeadRuns(const ExecPlan& plan, const std::vector<StageRun>& runs) {
  if (plan.workers_per_rank() <= 1) return runs;
  std::vector<StageRun> lead(static_cast<size_t>(plan.ranks));
  for (const StageRun& r : runs) {
    if (r.tensor_rank == 0 && r.expert_rank == 0 && r.rank >= 0 && r.rank < plan.ranks) {
      lead[r.rank] = r;
    }
  }
  return lead;
}

// The expert-parallel all-to-alls the prediction puts in one rank's ops, per
// schedule iteration (as SimResult::ep_comm_ns counts them for the busiest).
TimeNs PredictedAllToAll(const ExecPlan& plan, int rank) {
  TimeNs sum = 0;
  for (const ExecOp& op : plan.per_rank[rank].ops) sum += op.ep_comm_ns;
  return sum / std::max(plan.iterations, 1);
}

// A rank's copy reduce in `iteration` (bidirectional schedules): per
// exchange, from when both it and its partner were ready (as the simulator
// starts it once both ranks ended their last op) to when it had the
// partner's bytes, summed over its partners.
TimeNs MeasuredCopyReduce(const std::vector<StageRun>& runs, int rank, int iteration) {
  TimeNs sum = 0;
  for (const CopyReduceTiming& c : runs[rank].copy_reduces) {
    if (c.iteration != iteration) continue;
    TimeNs start = c.start_ns;
    if (c.peer_rank >= 0 && c.peer_rank < static_cast<int>(runs.size())) {
      for (const CopyReduceTiming& o : runs[c.peer_rank].copy_reduces) {
        if (o.iteration == iteration && o.peer_rank == rank) start = std::max(start, o.start_ns);
      }
    }
    sum += std::max<TimeNs>(c.end_ns - start, 0);
  }
  return sum;
}

std::string TimeText(double ns) { return fmt::format("{:.3f} ms", ns / 1e6); }
std::string MemText(double bytes) { return fmt::format("{:.2f} MiB", bytes / kMiB); }

std::string ValueText(const MetricRow& row, double v) {
  if (row.unit == "ns") return TimeText(v);
  if (row.unit == "bytes") return MemText(v);
  if (row.unit == "ratio") return PercentText(v);
  return fmt::format("{:.1f} {}", v, row.unit);
}

MetricRow Row(std::string metric, int rank, std::string unit, double predicted, double measured,
              bool relative, bool checked, double tolerance) {
  return MakeMetricRow(std::move(metric), rank, std::move(unit), predicted, measured, relative,
                       checked, tolerance);
}

}  // namespace

MetricRow MakeMetricRow(std::string metric, int rank, std::string unit, double predicted,
                        double measured, bool relative, bool checked, double tolerance) {
  MetricRow row{std::move(metric), rank, std::move(unit), predicted, measured};
  row.relative = relative;
  if (relative) {
    row.error = predicted != 0 ? (measured - predicted) / predicted : (measured == 0 ? 0 : 1);
  } else {
    row.error = measured - predicted;
  }
  row.checked = checked;
  row.tolerance = tolerance;
  row.within = !checked || std::abs(row.error) <= tolerance;
  return row;
}

std::string ComparisonTableText(const std::vector<MetricRow>& rows, const std::string& indent,
                                const std::string& rank_column) {
  TextTable t;
  t.AddColumn("metric", TextTable::kLeft);
  t.AddColumn(rank_column, TextTable::kRight);
  t.AddColumn("predicted", TextTable::kRight);
  t.AddColumn("measured", TextTable::kRight);
  t.AddColumn("error", TextTable::kRight);
  t.AddColumn("tolerance", TextTable::kRight);
  t.AddColumn("", TextTable::kLeft);
  for (const MetricRow& row : rows) {
    const std::string err = row.relative ? fmt::format("{:+.1f}%", 100 * row.error)
                                         : fmt::format("{:+.1f} pt", 100 * row.error);
    const std::string tol = !row.checked   ? "-"
                            : row.relative ? fmt::format("{:.0f}%", 100 * row.tolerance)
                                           : fmt::format("{:.0f} pt", 100 * row.tolerance);
    t.AddRow({row.metric, row.rank >= 0 ? std::to_string(row.rank) : "all",
              ValueText(row, row.predicted), ValueText(row, row.measured), err, tol,
              row.checked ? (row.within ? "ok" : "BEYOND") : ""});
  }
  return t.Render(indent);
}

nlohmann::ordered_json ComparisonRowsJson(const std::vector<MetricRow>& rows) {
  Json out = Json::array();
  for (const MetricRow& row : rows) {
    Json e;
    e["metric"] = row.metric;
    e["stage"] = row.rank >= 0 ? Json(row.rank) : Json(nullptr);
    e["unit"] = row.unit == "ns" ? "us" : row.unit;
    const double scale = row.unit == "ns" ? 1e-3 : 1;
    e["predicted"] = row.predicted * scale;
    e["measured"] = row.measured * scale;
    e["error"] = row.error;
    e["error_kind"] = row.relative ? "relative" : "absolute";
    e["checked"] = row.checked;
    e["tolerance"] = row.tolerance;
    e["within_tolerance"] = row.within;
    out.push_back(std::move(e));
  }
  return out;
}

Status Tolerances::Validate() const {
  for (const auto& [flag, value] : {std::pair<const char*, double>{"--tolerance", time},
                                    {"--memory-tolerance", memory},
                                    {"--bubble-tolerance", bubble}}) {
    if (!(value > 0) || std::isinf(value)) {
      return Status::InvalidArgument(fmt::format(
          "{} is {}: give a fraction > 0 (0.35 = 35%; the bubble ratio's is in points of it)", flag,
          value));
    }
  }
  return Status::Ok();
}

Result<Comparison> Compare(const SimResult& predicted, const ExecPlan& plan,
                           const std::vector<StageRun>& all_runs, int64_t samples_per_iteration,
                           const Tolerances& tol) {
  if (static_cast<int>(all_runs.size()) != plan.workers() ||
      static_cast<int>(predicted.per_rank.size()) != plan.ranks) {
    return Status::Internal(fmt::format("comparison needs {} workers' records, got {}",
                                        plan.workers(), all_runs.size()));
  }
  const std::vector<StageRun> runs = LeadRuns(plan, all_runs);
  int iterations = 0;
  for (const StageRun& run : runs) {
    for (const OpTiming& op : run.ops) iterations = std::max(iterations, op.iteration + 1);
  }
  if (iterations == 0) return Status::Internal("no measured iteration");
  Comparison c;
  std::vector<std::pair<TimeNs, int>> order;
  for (int i = 0; i < iterations; ++i) {
    c.iteration_ns.push_back(StatsOf(plan, runs, i).span);
    order.push_back({c.iteration_ns.back(), i});
  }
  std::sort(order.begin(), order.end());
  c.median_iteration = order[(order.size() - 1) / 2].second;
  const IterationStats s = StatsOf(plan, runs, c.median_iteration);

  const double pred_span = static_cast<double>(predicted.pipeline_ns);
  const double meas_span = static_cast<double>(s.span);
  c.rows.push_back(Row("iteration time", -1, "ns", pred_span, meas_span, true, true, tol.time));
  const double samples = static_cast<double>(samples_per_iteration);
  c.rows.push_back(Row("throughput", -1, "samples/s", pred_span > 0 ? samples * 1e9 / pred_span : 0,
                       meas_span > 0 ? samples * 1e9 / meas_span : 0, true, true, tol.time));
  double bubble_sum = 0;
  std::vector<double> bubble(runs.size());
  for (size_t r = 0; r < runs.size(); ++r) {
    bubble[r] = meas_span > 0 ? 1.0 - static_cast<double>(s.busy[r]) / meas_span : 0;
    bubble_sum += bubble[r];
  }
  c.rows.push_back(Row("bubble ratio", -1, "ratio", predicted.bubble_ratio,
                       bubble_sum / static_cast<double>(runs.size()), false, true, tol.bubble));
  // Per worker of each rank: its peak memory, and its all-reduce (all-to-all)
  // time in the median iteration (per schedule iteration, as busy time).
  const int t = plan.workers_per_rank();
  const int k = std::max(plan.iterations, 1);
  std::vector<Bytes> peak(runs.size(), 0);
  std::vector<double> collective(runs.size(), 0);
  for (const StageRun& run : all_runs) {
    if (run.rank < 0 || run.rank >= static_cast<int>(runs.size())) continue;
    peak[run.rank] = std::max(peak[run.rank], run.peak_bytes);
    TimeNs sum = 0;
    for (const OpTiming& op : run.ops) {
      if (op.iteration == c.median_iteration) sum += op.collective_ns;
    }
    collective[run.rank] += static_cast<double>(sum) / k / t;  // mean over the rank's workers
  }
  bool copy_reduce = false;
  for (const ExecStage& st : plan.per_rank) copy_reduce = copy_reduce || !st.copy_exchanges.empty();
  for (size_t r = 0; r < runs.size(); ++r) {
    const StageResult& p = predicted.per_rank[r];
    const int rank = static_cast<int>(r);
    // With tensor parallelism: the largest of the rank's t workers (each is
    // one GPU of the group; they hold the same).
    c.rows.push_back(Row("peak memory", rank, "bytes", static_cast<double>(p.peak_memory_bytes),
                         static_cast<double>(peak[r]), true, true, tol.memory));
    if (plan.tensor_parallel > 1) {
      c.rows.push_back(Row("tp all-reduce", rank, "ns", static_cast<double>(p.tp_comm_ns),
                           collective[r], true, false, tol.time));
    }
    if (plan.expert_parallel > 1) {
      c.rows.push_back(Row("ep all-to-all", rank, "ns",
                           static_cast<double>(PredictedAllToAll(plan, rank)), collective[r], true,
                           false, tol.time));
    }
    if (copy_reduce) {
      c.rows.push_back(Row("copy reduce", rank, "ns", static_cast<double>(p.copy_reduce_ns),
                           static_cast<double>(MeasuredCopyReduce(runs, rank, c.median_iteration)),
                           true, false, tol.time));
    }
    c.rows.push_back(Row("busy time", rank, "ns", static_cast<double>(p.busy_ns),
                         static_cast<double>(s.busy[r]), true, false, tol.time));
    c.rows.push_back(
        Row("bubble ratio", rank, "ratio", p.bubble_ratio, bubble[r], false, false, tol.bubble));
  }
  for (const MetricRow& row : c.rows) c.within_tolerance = c.within_tolerance && row.within;
  return c;
}

SimResult MeasuredTimeline(const ExecPlan& plan, const std::vector<StageRun>& all_runs,
                           int iteration) {
  const std::vector<StageRun> runs = LeadRuns(plan, all_runs);
  const IterationStats s = StatsOf(plan, runs, iteration);
  SimResult m;
  m.ranks = plan.ranks;
  m.stages = plan.num_stages;
  TimeNs end = 0;
  for (const StageRun& run : runs) {
    StageResult sr;
    sr.rank = run.rank;
    sr.peak_memory_bytes = run.peak_bytes;
    for (const OpTiming& op : run.ops) {
      if (op.iteration != iteration) continue;
      m.ops.push_back(OpRecord{run.rank, op.action, op.start_ns - s.origin, op.end_ns - s.origin});
      end = std::max(end, op.end_ns - s.origin);
    }
    m.per_rank.push_back(std::move(sr));
  }
  // A transfer: from its send (sender's op end) to its receipt.
  std::map<std::tuple<int, int, int64_t>, TimeNs> received;
  for (const StageRun& run : runs) {
    for (const MessageTiming& r : run.recvs) {
      if (r.iteration == iteration)
        received[{r.message.peer_rank, run.rank, r.message.tag}] = r.time_ns;
    }
  }
  for (const StageRun& run : runs) {
    for (const MessageTiming& snd : run.sends) {
      if (snd.iteration != iteration) continue;
      auto it = received.find({run.rank, snd.message.peer_rank, snd.message.tag});
      const TimeNs t0 = snd.time_ns - s.origin;
      const TimeNs t1 = it != received.end() ? it->second - s.origin : t0;
      m.transfers.push_back(TransferRecord{run.rank, snd.message.peer_rank, snd.message.src_stage,
                                           snd.message.dst_stage, snd.message.microbatch,
                                           snd.message.gradient, snd.message.bytes, t0, t0,
                                           std::max(t0, t1)});
    }
  }
  // Memory samples inside the iteration's window.
  for (size_t r = 0; r < runs.size(); ++r) {
    for (const MemorySample& ms : runs[r].memory_timeline) {
      const TimeNs t = ms.time_ns - s.origin;
      if (t < 0 || t > end) continue;
      MemorySample shifted = ms;
      shifted.time_ns = t;
      m.per_rank[r].memory_timeline.Append(shifted);
    }
  }
  // SimResult's order: rank by rank, each rank's ops as they ran, its sends as it sent them.
  std::stable_sort(m.ops.begin(), m.ops.end(), [](const OpRecord& a, const OpRecord& b) {
    return std::tie(a.rank, a.start_ns) < std::tie(b.rank, b.start_ns);
  });
  std::stable_sort(m.transfers.begin(), m.transfers.end(),
                   [](const TransferRecord& a, const TransferRecord& b) {
                     return std::tie(a.src_rank, a.ready_ns) < std::tie(b.src_rank, b.ready_ns);
                   });
  m.pipeline_ns = s.span;
  m.iteration_ns = s.span;
  return m;
}

std::string SideBySideTrace(const SimResult& predicted, const SimResult& measured) {
  Json a = TraceJsonValue(predicted, TraceOptions{"predicted", 0});
  Json b = TraceJsonValue(measured, TraceOptions{"measured", predicted.ranks});
  for (Json& e : b["traceEvents"]) a["traceEvents"].push_back(std::move(e));
  // Invalid UTF-8 in a name becomes U+FFFD, as in TraceJson's text.
  return a.dump(1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace pipecast::validate
