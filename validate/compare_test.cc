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

TEST(Compare, DualPipeReportsEachRanksCopyReduceBesideThePrediction) {
  // Given dualpipe p=2, m=4 (16000 bytes of copy gradients each way, predicted 23.2 us on the
  // 5 GB/s, 10 us link) and a measured iteration where rank 0 is ready for its copy reduce at
  // 10 ms and rank 1 at 12 ms; rank 0 has rank 1's bytes at 12.5 ms, rank 1 rank 0's at 12.4.
  Result<Schedule> s = MakeSchedule(ScheduleKind::kDualPipe, 2, 4, 2);
  ASSERT_TRUE(s.ok());
  testing::World w = testing::MakeWorld(testing::UniformModel(4), *s);
  std::vector<StageRun> runs(2);
  for (int r = 0; r < 2; ++r) {
    runs[r].rank = r;
    for (const ExecOp& op : w.exec.per_rank[r].ops) {
      runs[r].ops.push_back({0, op.action, 0, r == 0 ? 10'000'000 : 12'000'000});
    }
  }
  runs[0].copy_reduces.push_back({0, 1, 16'000, 10'000'000, 12'500'000});
  runs[1].copy_reduces.push_back({0, 0, 16'000, 12'000'000, 12'400'000});

  Result<Comparison> c = Compare(w.predicted, w.exec, runs, 4, Tolerances{});

  // Then each rank's row counts from when both were ready (12 ms), reported, not checked.
  ASSERT_TRUE(c.ok()) << c.status().message();
  std::vector<MetricRow> rows;
  for (const MetricRow& row : c->rows) {
    if (row.metric == "copy reduce") rows.push_back(row);
  }
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].rank, 0);
  EXPECT_DOUBLE_EQ(rows[0].predicted, 23'200);
  EXPECT_DOUBLE_EQ(rows[0].measured, 500'000);
  EXPECT_DOUBLE_EQ(rows[1].measured, 400'000);
  EXPECT_FALSE(rows[0].checked);
  EXPECT_EQ(rows[0].unit, "ns");
  // A schedule without copies has no such row.
  Fixture f;
  f.AddIteration(0, 0, 8'000'000);
  Result<Comparison> plain = Compare(f.w.predicted, f.w.exec, f.runs, 1, Tolerances{});
  ASSERT_TRUE(plain.ok());
  for (const MetricRow& row : plain->rows) EXPECT_NE(row.metric, "copy reduce");
}

TEST(Compare, MeasuredTimelineKeepsBothHalvesOfAPair) {
  // A pair's halves are two measured ops, each marked overlapped, as the prediction's are.
  testing::World w = testing::MakeWorld(ScheduleKind::kDualPipeV, 2, 4, 2, 1);
  std::vector<StageRun> runs(2);
  for (int r = 0; r < 2; ++r) {
    runs[r].rank = r;
    TimeNs t = 0;
    for (const ExecOp& op : w.exec.per_rank[r].ops) {
      runs[r].ops.push_back({0, op.action, t, t + op.predicted_ns});
      t += op.predicted_ns;
    }
  }
  SimResult m = MeasuredTimeline(w.exec, runs, 0);
  int measured_halves = 0, predicted_halves = 0;
  for (const OpRecord& op : m.ops) measured_halves += op.action.overlapped;
  for (const OpRecord& op : w.predicted.ops) predicted_halves += op.action.overlapped;
  EXPECT_EQ(measured_halves, predicted_halves);
  // Rank 0: (0F3;3B1) (3F2;0B0) (3F3;0B1); rank 1: (2F2;1B0) (1F3;2B1) (2F3;1B1).
  EXPECT_EQ(measured_halves, 12);
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
