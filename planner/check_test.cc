#include "planner/check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "formats/plan.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr TimeNs kF = 1000 * kNsPerUs;
constexpr TimeNs kB = 2000 * kNsPerUs;

// Given 8 layers of 1e9 parameters (18 GB of state each) on 8 GPUs of 40 GiB,
// unsharded (ZeRO 0): the planner needs p >= 4, so the chosen plan has a bubble.
struct World {
  Model model = UniformModel(8, kF, kB, 100 * kMiB, kMiB, 1'000'000'000);
  Cluster cluster = IdealCluster();
  PlannerOptions options;
  PlanReport report;
  PlanFile baseline;  // the report's choice, as `planner --out` writes it
};

World MakeWorld() {
  World w;
  w.cluster.gpu.memory_bytes = 40 * kGiB;
  w.options.gpus = 8;
  w.options.global_batch = 16;
  w.options.zero_levels = {0};
  w.report = RunPlanner(w.model, w.cluster, w.options).value();
  const Candidate& c = w.report.ranked.at(0);
  Schedule s = MakeSchedule(c.config.schedule, c.config.layout.pipeline_stages,
                            c.config.microbatches, c.config.layout.chunks)
                   .value();
  w.baseline = MakePlanFile(w.model.name, "fnv1a64:0000000000000001", w.cluster, s,
                            CandidateSimOptions(c), *c.result);
  return w;
}

CheckOptions Tolerance(double tolerance) {
  CheckOptions o;
  o.tolerance = tolerance;
  return o;
}

CheckOptions Hash(const std::string& model_hash) {
  CheckOptions o;
  o.model_hash = model_hash;
  return o;
}

CheckOutcome Check(const World& w, const PlanFile& baseline, CheckOptions o = {}) {
  auto r = CheckAgainstBaseline(baseline, w.report, w.model, w.cluster, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : CheckOutcome{};
}

TEST(Check, TheSamePlanPasses) {
  World w = MakeWorld();
  ASSERT_GT(w.baseline.predicted.bubble_ratio, 0);
  CheckOutcome out = Check(w, w.baseline);
  EXPECT_TRUE(out.passed) << out.diff;
  EXPECT_TRUE(out.failures.empty());
  EXPECT_THAT(out.diff, HasSubstr("throughput (samples/s)"));
  EXPECT_THAT(out.diff, HasSubstr("bubble ratio (idle share of span)"));
  EXPECT_THAT(out.diff, HasSubstr("check PASSED"));
  EXPECT_THAT(out.diff, Not(HasSubstr("model hash changed")));
}

TEST(Check, ThroughputDropBeyondTheRelativeToleranceFails) {
  World w = MakeWorld();
  PlanFile higher = w.baseline;
  higher.predicted.samples_per_s *= 1.10;  // now is 9.1% below it
  CheckOutcome out = Check(w, higher);
  EXPECT_FALSE(out.passed);
  ASSERT_EQ(out.failures.size(), 1u);
  EXPECT_THAT(out.failures[0], HasSubstr("throughput fell"));
  EXPECT_THAT(out.diff, HasSubstr("REGRESSED"));
  EXPECT_THAT(out.diff, HasSubstr("-9.1%"));
  EXPECT_THAT(out.diff, HasSubstr("check FAILED"));

  // Within a 10% tolerance the same drop passes.
  EXPECT_TRUE(Check(w, higher, Tolerance(0.10)).passed);
  // A 1.5% drop is within the default 2%.
  PlanFile slight = w.baseline;
  slight.predicted.samples_per_s *= 1.015;
  EXPECT_TRUE(Check(w, slight).passed);
}

TEST(Check, BubbleToleranceIsAbsoluteInRatioUnits) {
  World w = MakeWorld();
  const double now = w.report.ranked[0].result->bubble_ratio;
  PlanFile b = w.baseline;
  // 1.5 points more bubble: more than 2% relative growth, but within 0.02 absolute.
  b.predicted.bubble_ratio = now - 0.015;
  EXPECT_TRUE(Check(w, b).passed) << Check(w, b).diff;
  b.predicted.bubble_ratio = now - 0.03;
  CheckOutcome out = Check(w, b);
  EXPECT_FALSE(out.passed);
  ASSERT_EQ(out.failures.size(), 1u);
  EXPECT_THAT(out.failures[0], HasSubstr("bubble ratio (idle share of the pipeline span) rose"));
  EXPECT_THAT(out.diff, HasSubstr("+3.0 pts"));
}

TEST(Check, BaselineThatNoLongerFitsNamesTheStageAndTheExcess) {
  World w = MakeWorld();
  Cluster smaller = w.cluster;
  smaller.name = "small";
  smaller.gpu.memory_bytes = 20 * kGiB;
  auto out = CheckAgainstBaseline(w.baseline, w.report, w.model, smaller, {});
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(out->passed);
  EXPECT_THAT(out->failures.back(), HasSubstr("no longer fits in memory: stage 0 needs"));
  EXPECT_THAT(out->diff, HasSubstr("over the 20.0 GiB limit of small (capacity - reserve - "
                                   "margin) by"));
  EXPECT_THAT(out->diff, HasSubstr("OVER"));
}

TEST(Check, NothingFeasibleNowFails) {
  World w = MakeWorld();
  PlanReport none = w.report;
  none.ranked.clear();
  auto out = CheckAgainstBaseline(w.baseline, none, w.model, w.cluster, {});
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(out->passed);
  EXPECT_THAT(out->failures[0], HasSubstr("no configuration fits now"));
  EXPECT_THAT(out->diff, HasSubstr("NO PLAN"));
}

TEST(Check, ChangedModelHashIsInformational) {
  World w = MakeWorld();
  CheckOutcome out = Check(w, w.baseline, Hash("fnv1a64:00000000000000ff"));
  EXPECT_TRUE(out.passed);
  EXPECT_THAT(out.diff, HasSubstr("model hash changed: baseline fnv1a64:0000000000000001, now "
                                  "fnv1a64:00000000000000ff"));
}

TEST(Check, BaselineThatNoLongerSimulatesFails) {
  World w = MakeWorld();
  Model shorter = w.model;
  shorter.layers.pop_back();  // the baseline's partition ends at layer 7
  auto out = CheckAgainstBaseline(w.baseline, w.report, shorter, w.cluster, {});
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(out->passed);
  EXPECT_THAT(out->failures.back(), HasSubstr("no longer simulates"));
}

TEST(Check, ToleranceMustBeARatio) {
  World w = MakeWorld();
  for (double bad : {-0.1, 1.0, 5.0}) {
    auto out = CheckAgainstBaseline(w.baseline, w.report, w.model, w.cluster, Tolerance(bad));
    ASSERT_FALSE(out.ok());
    EXPECT_THAT(out.status().message(), HasSubstr("--tolerance"));
  }
}

}  // namespace
}  // namespace pipecast
