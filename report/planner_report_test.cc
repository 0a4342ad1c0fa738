#include "report/planner_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "planner/explain.h"
#include "testing/html_test_util.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::FindElements;
using ::pipecast::test_util::HtmlElement;
using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr TimeNs kF = 1000 * kNsPerUs;
constexpr TimeNs kB = 2000 * kNsPerUs;

Model BigModel(std::string name = "big") {
  Model m = UniformModel(8, kF, kB, 100 * kMiB, kMiB, 1'000'000'000);
  m.name = std::move(name);
  return m;
}

PlannerOptions Options() {
  PlannerOptions o;
  o.gpus = 8;
  o.global_batch = 16;
  o.schedules = {ScheduleKind::kNaive, ScheduleKind::kGPipe, ScheduleKind::k1F1B};
  return o;
}

Cluster Capacity(Bytes memory) {
  Cluster c = IdealCluster();
  c.name = "test-40";
  c.gpu.memory_bytes = memory;
  return c;
}

// The planner's report, its chosen timeline replayed as the tool does, and the page.
struct Planned {
  PlanReport report;
  SimResult timeline;
  std::string html;
};

Planned Plan(const Model& model, Bytes memory) {
  Planned p;
  const Cluster cluster = Capacity(memory);
  p.report = RunPlanner(model, cluster, Options()).value();
  ReportInputs inputs;
  inputs.tool = "planner";
  inputs.model_name = model.name;
  inputs.cluster = cluster;
  inputs.command_line = "planner --model big.json --gpus 8 --report r.html";
  if (!p.report.Feasible()) {
    p.html = PlanReportHtml(p.report, model, nullptr, inputs);
    return p;
  }
  const Candidate& c = p.report.ranked[0];
  const Schedule schedule = MakeSchedule(c.config.schedule, c.config.layout.pipeline_stages,
                                         c.config.microbatches, c.config.layout.chunks)
                                .value();
  SimOptions sim = CandidateSimOptions(c);
  sim.record_timeline = true;
  p.timeline = Simulate(model, cluster, schedule, sim).value();
  p.html = PlanReportHtml(p.report, model, &p.timeline, inputs);
  return p;
}

std::vector<HtmlElement> ChartPoints(const std::string& html, const std::string& series) {
  std::vector<HtmlElement> out;
  for (const HtmlElement& e : FindElements(html, "circle", "pt")) {
    if (e.Attr("data-series") == series) out.push_back(e);
  }
  return out;
}

TEST(PlanReportHtml, SweepChartsPlotEverySweepPoint) {
  // Given a feasible plan with a micro-batch count sweep
  const Planned p = Plan(BigModel(), 40 * kGiB);
  ASSERT_TRUE(p.report.Feasible());
  ASSERT_FALSE(p.report.sweep.empty());
  std::set<std::string> metrics;
  for (const HtmlElement& e : FindElements(p.html, "svg", "sweep-chart")) {
    metrics.insert(e.Attr("data-metric"));
  }
  EXPECT_EQ(metrics,
            (std::set<std::string>{"throughput", "bubble_ratio_and_bubble_fraction_of_ideal",
                                   "peak_memory"}));
  // Then each series has one point per sweep point, with its value.
  const int chosen_m = p.report.ranked[0].config.microbatches;
  for (const std::string series : {"throughput_samples_per_s", "bubble_ratio",
                                   "bubble_fraction_of_ideal", "peak_memory_gib"}) {
    SCOPED_TRACE(series);
    const auto points = ChartPoints(p.html, series);
    ASSERT_EQ(points.size(), p.report.sweep.size());
    int chosen = 0;
    for (const HtmlElement& e : points) {
      const int m = e.Int("data-m");
      const SweepPoint* sp = nullptr;
      for (const SweepPoint& s : p.report.sweep) {
        if (s.microbatches == m) sp = &s;
      }
      ASSERT_NE(sp, nullptr) << "m=" << m;
      const double want = series == "throughput_samples_per_s"   ? sp->samples_per_s
                          : series == "bubble_ratio"             ? sp->bubble_ratio
                          : series == "bubble_fraction_of_ideal" ? sp->bubble_fraction_of_ideal
                                                                 : ToGiB(sp->peak_memory_bytes);
      EXPECT_NEAR(std::stod(e.Attr("data-value")), want, 1e-5 * std::max(1.0, std::abs(want)));
      EXPECT_EQ(e.HasClass("nofit"), !sp->fits);
      if (e.HasClass("chosen")) {
        ++chosen;
        EXPECT_EQ(m, chosen_m);
      }
    }
    EXPECT_EQ(chosen, 1);
  }
  // The memory chart carries the capacity.
  const auto capacity = FindElements(p.html, "line", "capacity");
  ASSERT_FALSE(capacity.empty());
  for (const HtmlElement& e : capacity) EXPECT_EQ(e.Int64("data-bytes"), 40 * kGiB);
}

TEST(PlanReportHtml, CandidatesRankedAndTheChoiceFirst) {
  const Planned p = Plan(BigModel(), 40 * kGiB);
  const auto rows = FindElements(p.html, "tr", "candidate");
  ASSERT_EQ(rows.size(), p.report.ranked.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].Int("data-rank"), static_cast<int>(i) + 1);
    EXPECT_EQ(rows[i].HasClass("chosen"), i == 0);
    EXPECT_THAT(p.html, HasSubstr(HtmlEscape(p.report.ranked[i].Label())));
  }
}

TEST(PlanReportHtml, RejectionsGroupedWithCountsAndClosestMiss) {
  const Planned p = Plan(BigModel(), 40 * kGiB);
  ASSERT_FALSE(p.report.rejected.empty());
  const auto groups = FindElements(p.html, "tr", "reject-group");
  const auto want = GroupRejections(p.report.rejected);
  ASSERT_EQ(groups.size(), want.size());
  size_t total = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    EXPECT_EQ(groups[i].Attr("data-reason"), RejectReasonId(want[i].reason));
    EXPECT_EQ(groups[i].Int("data-count"), static_cast<int>(want[i].all.size()));
    total += groups[i].Int("data-count");
    if (want[i].closest != nullptr) {
      EXPECT_THAT(p.html, HasSubstr(HtmlEscape(want[i].closest->candidate.Label()) + ": " +
                                    HtmlEscape(want[i].closest->Detail())));
    }
  }
  EXPECT_EQ(total, p.report.rejected.size());
}

TEST(PlanReportHtml, ChosenTimelineAndMemoryMatchTheReplay) {
  const Planned p = Plan(BigModel(), 40 * kGiB);
  const auto svg = FindElements(p.html, "svg", "timeline");
  ASSERT_EQ(svg.size(), 1u);
  // The 1x chart (the zoomed copies draw the same ops again).
  const std::string one = test_util::WithoutZoomedCopies(p.html);
  int drawn = static_cast<int>(FindElements(one, "rect", "op").size());
  for (const HtmlElement& e : FindElements(one, "rect", "busy")) drawn += e.Int("data-ops");
  EXPECT_EQ(drawn, static_cast<int>(p.timeline.ops.size()));
  const auto lines = FindElements(p.html, "polyline", "mem");
  ASSERT_EQ(lines.size(), p.timeline.per_rank.size());
  for (const HtmlElement& e : lines) {
    EXPECT_EQ(e.Int64("data-peak-bytes"),
              p.timeline.per_rank.at(e.Int("data-rank")).peak_memory_bytes);
  }
  // One capacity line per rank, plus the sweep's memory chart.
  EXPECT_EQ(FindElements(p.html, "line", "capacity").size(), p.timeline.per_rank.size() + 1);
}

TEST(PlanReportHtml, NothingFitsShowsReasonsAndSuggestionsOnly) {
  const Planned p = Plan(BigModel(), 10 * kGiB);
  ASSERT_FALSE(p.report.Feasible());
  EXPECT_THAT(p.html, HasSubstr("No configuration fits"));
  EXPECT_FALSE(FindElements(p.html, "tr", "reject-group").empty());
  EXPECT_THAT(p.html, HasSubstr("What would fit"));
  EXPECT_TRUE(FindElements(p.html, "svg", "timeline").empty());
  EXPECT_TRUE(FindElements(p.html, "svg", "sweep-chart").empty());
}

TEST(PlanReportHtml, EscapesTheModelNameAndNamesBothBubbleForms) {
  const Planned p = Plan(BigModel("<b>&\"x\""), 40 * kGiB);
  EXPECT_THAT(p.html, Not(HasSubstr("<b>&\"x\"")));
  EXPECT_THAT(p.html, HasSubstr("pipecast planner: &lt;b&gt;&amp;&quot;x&quot; on 8 GPUs"));
  EXPECT_THAT(p.html, Not(HasSubstr("<script")));
  const std::string& t = p.html;
  for (size_t at = t.find("bubble"); at != std::string::npos; at = t.find("bubble", at + 1)) {
    const std::string next = t.substr(at, 24);
    // The zero-bubble paper's rate: "zero-bubble rate", key zb_bubble_rate.
    const bool zero_bubble = (at >= 5 && t.compare(at - 5, 16, "zero-bubble rate") == 0) ||
                             (at >= 3 && t.compare(at - 3, 14, "zb_bubble_rate") == 0);
    EXPECT_TRUE(zero_bubble || next.rfind("bubble ratio", 0) == 0 ||
                next.rfind("bubble/ideal", 0) == 0 || next.rfind("bubble time fraction", 0) == 0 ||
                next.rfind("bubble_ratio", 0) == 0 ||
                next.rfind("bubble_fraction_of_ideal", 0) == 0)
        << "bare bubble at: " << t.substr(at > 40 ? at - 40 : 0, 80);
  }
  EXPECT_EQ(p.html, Plan(BigModel("<b>&\"x\""), 40 * kGiB).html);  // deterministic
}

}  // namespace
}  // namespace pipecast
