#include "validate/compare.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/validate_test_util.h"

namespace pipecast::validate {
namespace {

// A 2-rank plan and hand-made measured runs.
struct Fixture {
  Fixture() {
    w = testing::MakeWorld(ScheduleKind::kGPipe, 2, 1, 1, 1);
    // Predicted: F 1 ms, B 2 ms per stage, 1 micro-batch; link 10 us + 64 KiB / 5 GB/s.
    runs.resize(2);
    runs[0].rank = 0;
    runs[1].rank = 1;
  }
  // One iteration: rank 0 busy 3 ms, rank 1 busy 3 ms, span `span`.
  void AddIteration(int it, TimeNs origin, TimeNs span) {
    runs[0].ops.push_back({it, {0, OpKind::kForward, 0}, origin, origin + 1'000'000});
    runs[1].ops.push_back({it, {1, OpKind::kForward, 0}, origin + 1'000'000, origin + 2'000'000});
    runs[1].ops.push_back({it, {1, OpKind::kBackward, 0}, origin + 2'000'000, origin + 4'000'000});
    runs[0].ops.push_back(
        {it, {0, OpKind::kBackward, 0}, origin + span - 2'000'000, origin + span});
  }
  testing::World w;
  std::vector<StageRun> runs;
};

TEST(Compare, ErrorsAreRelativeForTimesAndAbsoluteForBubbles) {
  Fixture f;
  f.AddIteration(0, 0, 10'000'000);
  f.AddIteration(1, 50'000'000, 6'000'000);  // the median of 10, 6, 8 ms is 8 ms
  f.AddIteration(2, 90'000'000, 8'000'000);
  f.runs[0].peak_bytes = f.w.predicted.per_rank[0].peak_memory_bytes;
  f.runs[1].peak_bytes = f.w.predicted.per_rank[1].peak_memory_bytes * 2;

  Result<Comparison> c = Compare(f.w.predicted, f.w.exec, f.runs, 1, Tolerances{});

  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->iteration_ns, (std::vector<TimeNs>{10'000'000, 6'000'000, 8'000'000}));
  EXPECT_EQ(c->median_iteration, 2);
  const double pred = static_cast<double>(f.w.predicted.pipeline_ns);
  const MetricRow& it = c->rows[0];
  EXPECT_EQ(it.metric, "iteration time");
  EXPECT_DOUBLE_EQ(it.measured, 8e6);
  EXPECT_DOUBLE_EQ(it.error, (8e6 - pred) / pred);
  const MetricRow& tp = c->rows[1];
  EXPECT_DOUBLE_EQ(tp.measured, 1e9 / 8e6);  // 1 sample per 8 ms
  const MetricRow& bubble = c->rows[2];
  EXPECT_FALSE(bubble.relative);
  EXPECT_DOUBLE_EQ(bubble.measured, 1.0 - 3e6 / 8e6);  // both ranks busy 3 of 8 ms
  EXPECT_DOUBLE_EQ(bubble.error, bubble.measured - f.w.predicted.bubble_ratio);
  // Rank 1's memory is twice the prediction: +100%, beyond 5%.
  const MetricRow& mem1 = c->rows[6];
  EXPECT_EQ(mem1.metric, "peak memory");
  EXPECT_EQ(mem1.rank, 1);
  EXPECT_DOUBLE_EQ(mem1.error, 1.0);
  EXPECT_FALSE(mem1.within);
  EXPECT_FALSE(c->within_tolerance);
}

TEST(Compare, MeasuredTimelineStartsAtTheIterationsFirstOp) {
  Fixture f;
  f.AddIteration(0, 1'000'000'000, 8'000'000);
  SimResult m = MeasuredTimeline(f.w.exec, f.runs, 0);
  ASSERT_EQ(m.ops.size(), 4u);
  EXPECT_EQ(m.ops.front().start_ns, 0);
  EXPECT_EQ(m.pipeline_ns, 8'000'000);
  const std::string trace = SideBySideTrace(f.w.predicted, m);
  nlohmann::json j = nlohmann::json::parse(trace);
  bool predicted = false, measured = false;
  for (const auto& e : j["traceEvents"]) {
    if (e.value("name", "") != "process_name") continue;
    const std::string n = e["args"]["name"];
    predicted = predicted || n.rfind("predicted rank", 0) == 0;
    measured = measured || n.rfind("measured rank", 0) == 0;
  }
  EXPECT_TRUE(predicted && measured);
}

}  // namespace
}  // namespace pipecast::validate
