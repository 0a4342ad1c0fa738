#include "planner/explain.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr TimeNs kF = 1000 * kNsPerUs;
constexpr TimeNs kB = 2000 * kNsPerUs;

Model BigModel() {
  Model m = UniformModel(8, kF, kB, 100 * kMiB, kMiB, 1'000'000'000);
  m.layers.front().name = "embedding";
  m.layers.back().name = "lm_head";
  return m;
}

PlanReport Plan(const Model& model, Bytes memory, int pipeline_stages = 0) {
  Cluster c = IdealCluster();
  c.name = "test-40";
  c.gpu.memory_bytes = memory;
  PlannerOptions o;
  o.gpus = 8;
  o.pipeline_stages = pipeline_stages;
  o.global_batch = 16;
  o.schedules = {ScheduleKind::kNaive, ScheduleKind::kGPipe, ScheduleKind::k1F1B};
  return RunPlanner(model, c, o).value();
}

// Every "bubble" in `text` says which one it is.
void ExpectNoBareBubble(const std::string& text) {
  for (size_t at = text.find("bubble"); at != std::string::npos; at = text.find("bubble", at + 1)) {
    const std::string next = text.substr(at, 20);
    // The zero-bubble paper's rate is named "zero-bubble rate".
    const bool zero_bubble = at >= 5 && text.compare(at - 5, 16, "zero-bubble rate") == 0;
    EXPECT_TRUE(zero_bubble || next.rfind("bubble ratio", 0) == 0 ||
                next.rfind("bubble/ideal", 0) == 0 || next.rfind("bubble time fraction", 0) == 0)
        << "bare bubble at: " << text.substr(at > 30 ? at - 30 : 0, 60);
  }
}

TEST(ExplainText, ChosenPlanRunnersUpRejectionsAndSweep) {
  Model model = BigModel();
  // Two stages pinned: at p = 1 there is no pipeline, bubble or sweep to
  // explain (issue 28; PlannerCli.OneStageIsNoPipeline).
  PlanReport report = Plan(model, 40 * kGiB, 2);
  ASSERT_TRUE(report.Feasible());
  const std::string text = PlanReportToText(report, model);
  EXPECT_THAT(text, HasSubstr("chosen plan: " + report.ranked[0].Label()));
  EXPECT_THAT(text, HasSubstr("(idle share of the pipeline span)"));
  EXPECT_THAT(text, HasSubstr("(Megatron-LM's bubble time fraction)"));
  EXPECT_THAT(text, HasSubstr("stage 0: layer"));
  EXPECT_THAT(text, HasSubstr("(embedding"));
  EXPECT_THAT(text, HasSubstr("lm_head)"));
  EXPECT_THAT(text, HasSubstr("40.00 GiB per GPU (test-40)"));
  EXPECT_THAT(text, HasSubstr("weights  gradients  optimizer  activations  comm  workspace"));
  EXPECT_THAT(text, HasSubstr("runners-up"));
  EXPECT_THAT(text, HasSubstr("out of memory: "));
  EXPECT_THAT(text, HasSubstr("closest miss: p="));
  EXPECT_THAT(text, HasSubstr("micro-batch count sweep"));
  EXPECT_THAT(text, HasSubstr("<- chosen"));
  ExpectNoBareBubble(text);
}

TEST(ExplainText, ClosestMissIsTheSmallestMemoryOvershoot) {
  Model model = BigModel();
  PlanReport report = Plan(model, 40 * kGiB);
  const Rejection* best = nullptr;
  for (const Rejection& r : report.rejected) {
    if (r.reason == RejectReason::kOutOfMemory && (!best || r.memory_ratio < best->memory_ratio)) {
      best = &r;
    }
  }
  ASSERT_NE(best, nullptr);
  EXPECT_THAT(PlanReportToText(report, model),
              HasSubstr("closest miss: " + best->candidate.Label() + ": " + best->Detail()));
}

TEST(ExplainText, NothingFitsSaysSoWithReasonsAndSuggestions) {
  Model model = BigModel();
  PlanReport report = Plan(model, 10 * kGiB);
  ASSERT_FALSE(report.Feasible());
  const std::string text = PlanReportToText(report, model);
  EXPECT_THAT(text, HasSubstr("no configuration fits"));
  EXPECT_THAT(text, HasSubstr("out of memory: "));
  EXPECT_THAT(text, HasSubstr("closest miss: "));
  EXPECT_THAT(text, HasSubstr("suggestions:\n  - "));
  EXPECT_THAT(text, Not(HasSubstr("chosen plan")));
  ExpectNoBareBubble(text);
}

TEST(ExplainJson, OneObjectWithEverySection) {
  Model model = BigModel();
  PlanReport report = Plan(model, 40 * kGiB);
  auto j = nlohmann::json::parse(PlanReportToJson(report, model));
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_EQ(j["cluster"], "test-40");
  EXPECT_EQ(j["chosen"]["label"], report.ranked[0].Label());
  EXPECT_TRUE(j["chosen"]["predicted"].is_object());
  EXPECT_EQ(j["chosen"]["predicted"]["iteration_time_us"].get<double>(),
            NsToUs(report.ranked[0].result->iteration_ns));
  EXPECT_EQ(j["chosen"]["partition"][0]["first_layer_name"], "embedding");
  EXPECT_EQ(j["runners_up"].size(), report.ranked.size() - 1);
  ASSERT_FALSE(j["rejected"].empty());
  EXPECT_EQ(j["rejected"][0]["reason"], "out_of_memory");
  EXPECT_TRUE(j["rejected"][0]["closest_miss"].is_object());
  EXPECT_LE(j["rejected"][0]["examples"].size(), 3u);
  EXPECT_FALSE(j["sweep"].empty());
  EXPECT_EQ(j["enumerated"], report.enumerated);
  EXPECT_FALSE(j.contains("check"));
}

TEST(ExplainJson, InfeasibleHasNullChoiceAndSuggestions) {
  Model model = BigModel();
  PlanReport report = Plan(model, 10 * kGiB);
  CheckOutcome check{false, "diff text", {"no configuration fits now"}};
  auto j = nlohmann::json::parse(PlanReportToJson(report, model, &check));
  EXPECT_FALSE(j["feasible"].get<bool>());
  EXPECT_TRUE(j["chosen"].is_null());
  EXPECT_FALSE(j["suggestions"].empty());
  EXPECT_FALSE(j["check"]["passed"].get<bool>());
  EXPECT_EQ(j["check"]["diff"], "diff text");
}

}  // namespace
}  // namespace pipecast
