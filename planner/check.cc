// The CI regression check (planner/check.h).
#include "planner/check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "base/text_table.h"
#include "sim/simulator.h"

namespace pipecast {
namespace {

constexpr char kOk[] = "ok";
constexpr char kInfo[] = "info";

// "+3.1%" relative change, or "-" when the baseline is 0.
std::string Relative(double baseline, double now) {
  if (baseline == 0) return "-";
  return fmt::format("{:+.1f}%", 100.0 * (now - baseline) / baseline);
}
// "+1.2 pts": a change of a ratio in percentage points.
std::string Points(double baseline, double now) {
  return fmt::format("{:+.1f} pts", 100.0 * (now - baseline));
}

std::string BaselineLabel(const PlanFile& b) {
  const TrainingConfig& k = b.config;
  const std::string cp =
      k.layout.context_parallel > 1 ? fmt::format("cp={} ", k.layout.context_parallel) : "";
  return cp + fmt::format("p={} d={} {} mbs={} m={} recompute={} zero={}", k.layout.pipeline_stages,
                          k.layout.data_parallel, b.schedule_name, k.microbatch_size,
                          k.microbatches, RecomputeSpec(k.recompute, k.recompute_layers),
                          k.memory.zero);
}

// Everything the table compares, gathered first so the rendering stays plain.
struct Comparison {
  explicit Comparison(const PlanFile& baseline) : base(baseline) {}
  const PlanFile& base;
  const SimResult* now = nullptr;   // best plan now; null when none fits
  std::optional<SimResult> replay;  // the baseline configuration now
  std::string replay_error;
  Bytes capacity = 0;
  std::string cluster_name;
};

void AddMetricRows(const Comparison& c, double tolerance, TextTable* t,
                   std::vector<std::string>* failures) {
  const PlanFile& b = c.base;
  if (c.now == nullptr) {
    t->AddRow({"throughput (samples/s)", fmt::format("{:.1f}", b.predicted.samples_per_s), "-", "-",
               "NO PLAN"});
    return;
  }
  const SimResult& n = *c.now;
  // Throughput: a relative drop beyond the tolerance fails.
  std::string verdict = kOk;
  if (n.samples_per_s < b.predicted.samples_per_s * (1 - tolerance)) {
    verdict = "REGRESSED";
    failures->push_back(fmt::format(
        "throughput fell from {:.1f} to {:.1f} samples/s ({}), more than the {:.1f}% tolerance",
        b.predicted.samples_per_s, n.samples_per_s,
        Relative(b.predicted.samples_per_s, n.samples_per_s), 100 * tolerance));
  } else if (n.samples_per_s > b.predicted.samples_per_s) {
    verdict = "ok (better)";
  }
  t->AddRow({"throughput (samples/s)", fmt::format("{:.1f}", b.predicted.samples_per_s),
             fmt::format("{:.1f}", n.samples_per_s),
             Relative(b.predicted.samples_per_s, n.samples_per_s), verdict});
  // Bubble ratio: an absolute rise beyond the tolerance fails.
  verdict = kOk;
  if (n.bubble_ratio > b.predicted.bubble_ratio + tolerance) {
    verdict = "REGRESSED";
    failures->push_back(fmt::format(
        "bubble ratio (idle share of the pipeline span) rose from {} to {} ({}), more than the "
        "{:.1f} points tolerance",
        PercentText(b.predicted.bubble_ratio), PercentText(n.bubble_ratio),
        Points(b.predicted.bubble_ratio, n.bubble_ratio), 100 * tolerance));
  }
  t->AddRow({"bubble ratio (idle share of span)", PercentText(b.predicted.bubble_ratio),
             PercentText(n.bubble_ratio), Points(b.predicted.bubble_ratio, n.bubble_ratio),
             verdict});
  t->AddRow({"bubble/ideal (Megatron-LM)", PercentText(b.predicted.bubble_fraction_of_ideal),
             PercentText(n.bubble_fraction_of_ideal),
             Points(b.predicted.bubble_fraction_of_ideal, n.bubble_fraction_of_ideal), kInfo});
  t->AddRow(
      {"iteration time (ms)", fmt::format("{:.3f}", NsToMs(b.predicted.iteration_ns)),
       fmt::format("{:.3f}", NsToMs(n.iteration_ns)),
       Relative(static_cast<double>(b.predicted.iteration_ns), static_cast<double>(n.iteration_ns)),
       kInfo});
  Bytes now_peak = 0;
  for (const StageResult& r : n.per_rank) now_peak = std::max(now_peak, r.peak_memory_bytes);
  const Bytes base_peak = b.LargestPredictedPeak();
  t->AddRow({"peak memory, largest rank (GiB)", GiBText(base_peak), GiBText(now_peak),
             Relative(static_cast<double>(base_peak), static_cast<double>(now_peak)), kInfo});
}

// The baseline configuration replayed on the current model and cluster.
void AddReplayRows(const Comparison& c, TextTable* t, std::vector<std::string>* failures,
                   std::vector<std::string>* over_lines) {
  const PlanFile& b = c.base;
  if (!c.replay) {
    t->AddRow({"baseline plan replayed now", "-", "-", "-", "FAILS"});
    failures->push_back(
        "the baseline configuration no longer simulates with the current model "
        "and cluster: " +
        c.replay_error);
    return;
  }
  const SimResult& r = *c.replay;
  t->AddRow({"baseline plan replayed: samples/s", fmt::format("{:.1f}", b.predicted.samples_per_s),
             fmt::format("{:.1f}", r.samples_per_s),
             Relative(b.predicted.samples_per_s, r.samples_per_s), kInfo});
  Bytes peak = 0;
  for (const StageResult& s : r.per_rank) {
    peak = std::max(peak, s.peak_memory_bytes);
    if (c.capacity > 0 && s.peak_memory_bytes > c.capacity) {
      over_lines->push_back(
          fmt::format("stage {} needs {:.1f} GiB, over the {:.1f} GiB limit of {} (capacity - "
                      "reserve - margin) by {:.1f} GiB",
                      s.rank, ToGiB(s.peak_memory_bytes), ToGiB(c.capacity), c.cluster_name,
                      ToGiB(s.peak_memory_bytes - c.capacity)));
    }
  }
  std::string verdict =
      c.capacity <= 0 ? "fits (unlimited)" : fmt::format("fits ({} GiB)", GiBText(c.capacity));
  if (!over_lines->empty()) {
    verdict = "OVER";
    failures->push_back(
        "the baseline configuration no longer fits in memory: " + over_lines->front() +
        (over_lines->size() > 1 ? fmt::format(" (and {} more stages)", over_lines->size() - 1)
                                : ""));
  }
  t->AddRow({"baseline plan replayed: peak GiB", GiBText(b.LargestPredictedPeak()), GiBText(peak),
             Relative(static_cast<double>(b.LargestPredictedPeak()), static_cast<double>(peak)),
             verdict});
}

}  // namespace

Status CheckOptions::Validate() const {
  if (!(tolerance >= 0 && tolerance < 1)) {
    return Status::InvalidArgument(fmt::format(
        "--tolerance is {}: must be at least 0 and below 1 (0.02 allows a 2% throughput drop "
        "and a 2-point bubble ratio rise)",
        tolerance));
  }
  return Status::Ok();
}

Result<CheckOutcome> CheckAgainstBaseline(const PlanFile& baseline, const PlanReport& now,
                                          const Model& model, const Cluster& cluster,
                                          const CheckOptions& options) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  Comparison c(baseline);
  c.capacity = MemoryLimitBytes(cluster.gpu);
  c.cluster_name = cluster.name;
  if (now.Feasible() && now.ranked[0].result) c.now = &*now.ranked[0].result;
  SimOptions replay_options = PlanSimOptions(baseline);
  replay_options.record_timeline = false;
  Result<SimResult> replay = Simulate(model, cluster, baseline.schedule, replay_options);
  if (replay.ok()) {
    c.replay = std::move(replay.value());
  } else {
    c.replay_error = replay.status().message();
  }

  CheckOutcome out;
  TextTable t;
  t.AddColumn("metric", TextTable::kLeft);
  t.AddColumn("baseline", TextTable::kRight);
  t.AddColumn("now", TextTable::kRight);
  t.AddColumn("change", TextTable::kRight);
  t.AddColumn("verdict", TextTable::kLeft);
  if (c.now == nullptr) {
    out.failures.push_back(
        "no configuration fits now: the planner found no feasible plan for the current model "
        "and cluster");
  }
  AddMetricRows(c, options.tolerance, &t, &out.failures);
  std::vector<std::string> over_lines;
  AddReplayRows(c, &t, &out.failures, &over_lines);

  std::string& d = out.diff;
  d += fmt::format(
      "check against the baseline plan (tolerance {:g}: throughput may fall by at most {:.1f}% "
      "relative; bubble ratio may rise by at most {:.1f} points absolute)\n",
      options.tolerance, 100 * options.tolerance, 100 * options.tolerance);
  d += t.Render("  ");
  d += fmt::format("baseline configuration: {}\n", BaselineLabel(baseline));
  d += fmt::format("best configuration now: {}\n",
                   c.now ? now.ranked[0].Label() : std::string("none fits"));
  for (const std::string& line : over_lines) d += "OVER: " + line + "\n";
  if (!options.model_hash.empty() && options.model_hash != baseline.model_hash) {
    d += fmt::format(
        "model hash changed: baseline {}, now {} (informational: the model file was edited "
        "or re-profiled since the baseline)\n",
        baseline.model_hash, options.model_hash);
  }
  if (baseline.model_name != model.name) {
    d += fmt::format("model name changed: baseline '{}', now '{}' (informational)\n",
                     baseline.model_name, model.name);
  }
  out.passed = out.failures.empty();
  if (out.passed) {
    d += "check PASSED\n";
  } else {
    d += fmt::format("check FAILED ({} reason{}):\n", out.failures.size(),
                     out.failures.size() == 1 ? "" : "s");
    for (const std::string& f : out.failures) d += "  - " + f + "\n";
  }
  return out;
}

}  // namespace pipecast
