// Measured runs and Megatron-LM logs held against a forecast (measured/compare_measured.h):
// a 2-stage 1F1B plan on the ideal cluster, hand-worked.
#include "measured/compare_measured.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/sim_test_util.h"

namespace pipecast::measured {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
constexpr TimeNs kUs = 1000;

// 1F1B, p = 2, m = 2, F 100 us and B 200 us a stage, no communication: the pipeline lasts
// (m + p - 1)(F + B) = 900 us, each rank busy m(F + B) = 600 us, bubble 1/3.
Prediction TwoStagePlan() {
  Prediction p;
  const Model model = test_util::UniformModel(2, 100 * kUs, 200 * kUs);
  p.model_name = model.name;
  p.cluster = test_util::IdealCluster();
  p.plan.schedule = *MakeSchedule(ScheduleKind::k1F1B, 2, 2);
  p.plan.schedule_name = "1f1b";
  p.plan.config.layout.pipeline_stages = 2;
  p.plan.config.microbatches = 2;
  SimOptions o;
  Result<SimResult> r = Simulate(model, p.cluster, p.plan.schedule, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  p.predicted = *r;
  return p;
}

// A measured trace of one rank from its ops: (action name, start, end) in us, each op one
// kernel launched inside its PP: range.
TraceFile RankTrace(int rank, const std::vector<std::tuple<std::string, double, double>>& ops,
                    const std::string& origin) {
  Json events = Json::array();
  events.push_back({{"ph", "X"},
                    {"cat", "user_annotation"},
                    {"name", "ProfilerStep#1"},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", 0},
                    {"dur", 5000}});
  int corr = 1;
  for (const auto& [name, start, end] : ops) {
    const double t = 10.0 * corr;
    events.push_back({{"ph", "X"},
                      {"cat", "user_annotation"},
                      {"name", "PP:" + name},
                      {"pid", 1},
                      {"tid", 1},
                      {"ts", t},
                      {"dur", 5}});
    events.push_back({{"ph", "X"},
                      {"cat", "cuda_runtime"},
                      {"name", "cudaLaunchKernel"},
                      {"pid", 1},
                      {"tid", 1},
                      {"ts", t + 1},
                      {"dur", 1},
                      {"args", {{"correlation", corr}}}});
    events.push_back({{"ph", "X"},
                      {"cat", "kernel"},
                      {"name", "gemm"},
                      {"pid", 0},
                      {"tid", 7},
                      {"ts", start},
                      {"dur", end - start},
                      {"args", {{"correlation", corr}, {"stream", 7}}}});
    ++corr;
  }
  Json j = {{"distributedInfo", {{"rank", rank}, {"world_size", 2}}}, {"traceEvents", events}};
  return *ParseTraceText(j.dump(), origin);
}

// Measured 10% slower than forecast, in the schedule's order.
std::vector<TraceFile> SlowerRun() {
  return {RankTrace(0, {{"0F0", 0, 110}, {"0F1", 110, 220}, {"0B0", 440, 660}, {"0B1", 770, 990}},
                    "rank0.json"),
          RankTrace(1, {{"1F0", 110, 220}, {"1B0", 220, 440}, {"1F1", 440, 550}, {"1B1", 550, 770}},
                    "rank1.json")};
}

const validate::MetricRow& FindRow(const validate::Comparison& c, const std::string& metric,
                                   int rank) {
  for (const validate::MetricRow& r : c.rows) {
    if (r.metric == metric && r.rank == rank) return r;
  }
  ADD_FAILURE() << "no row " << metric << " " << rank;
  return c.rows.front();
}

TEST(CompareRun, EveryRowHandWorked) {
  const Prediction p = TwoStagePlan();
  ASSERT_EQ(p.predicted.iteration_ns, 900 * kUs);
  Result<MeasuredRun> run = BuildMeasuredRun(SlowerRun());
  ASSERT_TRUE(run.ok()) << run.status().message();
  std::vector<std::string> notes;
  Result<validate::Comparison> c = CompareRun(p, *run, validate::Tolerances{}, &notes);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const validate::MetricRow& iter = FindRow(*c, "iteration time", -1);
  EXPECT_DOUBLE_EQ(iter.predicted, 900e3);
  EXPECT_DOUBLE_EQ(iter.measured, 990e3);
  EXPECT_NEAR(iter.error, 0.10, 1e-12);
  EXPECT_TRUE(iter.within);
  // Throughput: 2 samples per iteration.
  EXPECT_NEAR(FindRow(*c, "throughput", -1).predicted, 2 / 900e-6, 1e-6);
  // Bubble: predicted 1 - 600/900 on both ranks; measured 1 - 660/990 on both.
  EXPECT_NEAR(FindRow(*c, "bubble ratio", -1).predicted, 1.0 / 3, 1e-12);
  EXPECT_NEAR(FindRow(*c, "bubble ratio", -1).measured, 1.0 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(FindRow(*c, "compute", 0).predicted, 600e3);
  EXPECT_DOUBLE_EQ(FindRow(*c, "compute", 0).measured, 660e3);
  EXPECT_DOUBLE_EQ(FindRow(*c, "exposed comm", 1).measured, 0);
  EXPECT_DOUBLE_EQ(FindRow(*c, "op time, stage 1", -1).predicted, 600e3);
  EXPECT_DOUBLE_EQ(FindRow(*c, "op time, stage 1", -1).measured, 660e3);
  EXPECT_TRUE(c->within_tolerance);
  // 1F1B's warm-up: rank 0 holds micro-batches 0 and 1 from 0F1 until 0B0 ends, as predicted.
  EXPECT_EQ(MeasuredTimeline(*run, 0).per_rank[0].peak_inflight_microbatches, 2);
  EXPECT_EQ(p.predicted.per_rank[0].peak_inflight_microbatches, 2);
  const std::string table = validate::ComparisonTableText(c->rows, "  ");
  EXPECT_THAT(table, HasSubstr("iteration time"));
  EXPECT_THAT(table, HasSubstr("+10.0%"));
}

TEST(CompareRun, RanksThatDoNotFitThePlanAreRefused) {
  const Prediction p = TwoStagePlan();
  std::vector<TraceFile> swapped = SlowerRun();
  std::swap(swapped[0], swapped[1]);
  swapped[0].rank = 0;  // distributedInfo says nothing about pipeline order
  swapped[1].rank = 1;
  Result<MeasuredRun> run = BuildMeasuredRun(swapped);
  ASSERT_TRUE(run.ok()) << run.status().message();
  std::vector<std::string> notes;
  Result<validate::Comparison> c = CompareRun(p, *run, validate::Tolerances{}, &notes);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("rank1.json (measured rank 0) runs stage 1, which the plan puts on rank "
                        "1: give the traces in pipeline-rank order"));
  std::vector<TraceFile> one = SlowerRun();
  one.pop_back();
  run = BuildMeasuredRun(one);
  ASSERT_TRUE(run.ok());
  c = CompareRun(p, *run, validate::Tolerances{}, &notes);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("the plan has 2 pipeline ranks but 1 measured"));
}

TEST(CompareLog, IterationTimeAndMemoryPerPipelineRank) {
  const Prediction p = TwoStagePlan();
  Result<MegatronLog> log = ParseMegatronLog(
      " [2025-04-13 23:41:12] iteration       10/    1000 | consumed samples:          160 | "
      "elapsed time per iteration (ms): 5.0 | learning rate: 0.000000E+00 | global batch size:     "
      "2 |\n"
      "[Rank 0] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0 | "
      "reserved: 4.0 | max reserved: 4.0\n"
      "[Rank 1] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 3.0 | "
      "reserved: 4.0 | max reserved: 4.0\n"
      " [2025-04-13 23:41:20] iteration       20/    1000 | consumed samples:          320 | "
      "elapsed time per iteration (ms): 0.99 | global batch size:     2 |\n"
      " [2025-04-13 23:41:28] iteration       30/    1000 | consumed samples:          480 | "
      "elapsed time per iteration (ms): 0.95 | global batch size:     2 |\n",
      "train.log");
  ASSERT_TRUE(log.ok()) << log.status().message();
  std::vector<std::string> notes;
  Result<validate::Comparison> c =
      CompareLog(p, *log, MegatronRankOrder::kTpDpPp, /*skip=*/1, validate::Tolerances{}, &notes);
  ASSERT_TRUE(c.ok()) << c.status().message();
  // The median of 0.99 and 0.95 ms (the first interval skipped) against 900 us.
  EXPECT_DOUBLE_EQ(FindRow(*c, "iteration time", -1).measured, 0.97e6);
  EXPECT_NEAR(FindRow(*c, "iteration time", -1).error, 0.97 / 0.9 - 1, 1e-12);
  EXPECT_DOUBLE_EQ(FindRow(*c, "peak memory", 1).measured, 3.0 * kMiB);
  c = CompareLog(p, *log, MegatronRankOrder::kTpDpPp, 3, validate::Tolerances{}, &notes);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("--skip-steps 3 leaves none of the 3 iteration lines"));
}

}  // namespace
}  // namespace pipecast::measured
