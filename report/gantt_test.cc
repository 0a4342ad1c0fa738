// The terminal chart against golden files for the worked cases of
// docs/schedules.md (F = 1 ms, B = 2 ms per stage, ideal cluster), plus the
// summary past the rank limit, scaled cells, marked short ops and colour.
//
// Golden files live in tests/golden/gantt/. After a deliberate change to the
// chart, rerun with PIPECAST_UPDATE_GOLDEN=1 to rewrite them instead of
// comparing, then read the diff before committing it:
//   PIPECAST_UPDATE_GOLDEN=1 ./build/sim/sim_test --gtest_filter='Gantt*'
#include "report/gantt.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "formats/file_util.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr TimeNs kMs = 1000 * kNsPerUs;

// p stages of one layer each: forward f, backward b; with w > 0 the backward
// splits into input gradient b - w and weight gradient w.
SimResult SimulateCase(ScheduleKind kind, int p, int m, TimeNs f = kMs, TimeNs b = 2 * kMs,
                       TimeNs w = 0) {
  Model model = UniformModel(p, f, b);
  for (Layer& layer : model.layers) layer.profiles[0].backward_weight_ns = w;
  auto schedule = MakeSchedule(kind, p, m);
  EXPECT_TRUE(schedule.ok()) << schedule.status().message();
  if (!schedule.ok()) return SimResult{};
  auto result = Simulate(model, IdealCluster(), *schedule, SimOptions{});
  EXPECT_TRUE(result.ok()) << result.status().message();
  return result.ok() ? *result : SimResult{};
}

std::string GoldenPath(const std::string& name) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/tests/golden/gantt/" + name;
}

// Compares `actual` with the whole golden file, printing both on a mismatch;
// with PIPECAST_UPDATE_GOLDEN=1 rewrites the file instead.
void ExpectGolden(const std::string& actual, const std::string& name) {
  const std::string path = GoldenPath(name);
  const char* update = std::getenv("PIPECAST_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    Status st = WriteFileAtomic(path, actual);
    ASSERT_TRUE(st.ok()) << st.message();
    std::printf("rewrote %s\n", path.c_str());
    return;
  }
  Result<std::string> expected = ReadFile(path);
  ASSERT_TRUE(expected.ok()) << expected.status().message()
                             << " (run from the source root, or set PIPECAST_SOURCE_DIR)";
  if (*expected != actual) {
    ADD_FAILURE() << "chart differs from " << path << "\n--- expected:\n"
                  << *expected << "--- actual:\n"
                  << actual << "---\nif the change is intended, rerun with "
                  << "PIPECAST_UPDATE_GOLDEN=1 and review the diff";
  }
}

TEST(GanttGolden, NaiveP4M1) {
  // 12 cells; each rank busy 3 of them, R1 = 0.75.
  ExpectGolden(GanttChart(SimulateCase(ScheduleKind::kNaive, 4, 1), GanttOptions{}),
               "naive_p4_m1.txt");
}

TEST(GanttGolden, GPipeP4M8) {
  // 33 cells: eight forwards, a (p-1) fill, eight backwards.
  ExpectGolden(GanttChart(SimulateCase(ScheduleKind::kGPipe, 4, 8), GanttOptions{}),
               "gpipe_p4_m8.txt");
}

TEST(GanttGolden, OneFOneBP4M8) {
  // 33 cells; rank r starts at cell r.
  ExpectGolden(GanttChart(SimulateCase(ScheduleKind::k1F1B, 4, 8), GanttOptions{}),
               "1f1b_p4_m8.txt");
}

TEST(GanttGolden, OneFOneBP4M3) {
  // 18 cells: m < p, so the steady state never fills.
  ExpectGolden(GanttChart(SimulateCase(ScheduleKind::k1F1B, 4, 3), GanttOptions{}),
               "1f1b_p4_m3.txt");
}

TEST(GanttGolden, ZeroBubbleH1ShowsInputAndWeightGradients) {
  // F = I = W = 1 ms: m(F+B+W) + (p-1)(F+B-W) = 24 + 3 = 27 cells.
  const SimResult r = SimulateCase(ScheduleKind::kZBH1, 4, 8, kMs, 2 * kMs, kMs);
  ASSERT_EQ(r.pipeline_ns, 27 * kMs);
  const std::string chart = GanttChart(r, GanttOptions{});
  EXPECT_THAT(chart, HasSubstr("▓ input gradient"));
  EXPECT_THAT(chart, HasSubstr("▒ weight gradient"));
  EXPECT_THAT(chart, Not(HasSubstr("█")));  // no whole backward
  ExpectGolden(chart, "zb_h1_p4_m8.txt");
}

TEST(GanttChart, CellIsTheGcdOfOpBoundaries) {
  // Given F = 1 ms and B = 2 ms, when charted, then one cell is 1 ms and the
  // 1F1B chart spans (m + p - 1)(F + B) = 33 cells.
  const std::string chart = GanttChart(SimulateCase(ScheduleKind::k1F1B, 4, 8), GanttOptions{});
  EXPECT_THAT(chart, HasSubstr("33 ms as 33 cells of 1 ms"));
}

TEST(GanttChart, TooManyRanksFallsBackToAPerRankSummary) {
  const SimResult r = SimulateCase(ScheduleKind::k1F1B, 32, 32);
  const std::string chart = GanttChart(r, GanttOptions{});
  EXPECT_THAT(chart, HasSubstr("no chart, as 32 ranks are more than the 16"));
  EXPECT_THAT(chart, HasSubstr("busy ms"));
  EXPECT_THAT(chart, HasSubstr("idle ms"));
  EXPECT_THAT(chart, HasSubstr("bubble ratio"));
  EXPECT_THAT(chart, Not(HasSubstr("░")));
  // Every rank is busy 32 x 3 ms of the (32 + 31) x 3 ms pipeline.
  EXPECT_THAT(chart, HasSubstr("\n   0   96.000   93.000         49.2%\n"));
  EXPECT_THAT(chart, HasSubstr("\n  31   96.000   93.000         49.2%\n"));
}

TEST(GanttChart, CellsFitMaxColumnsEvenWhenOpsAreShorter) {
  // 1F1B p=4 m=100: 309 ms over at most 120 columns: 2.575 ms rounds up to
  // 5 ms cells, 62 of them; 1 ms forwards share cells, and the legend says so.
  const std::string chart = GanttChart(SimulateCase(ScheduleKind::k1F1B, 4, 100), GanttOptions{});
  EXPECT_THAT(chart, HasSubstr("309 ms as 62 cells of 5 ms"));
  EXPECT_THAT(chart, HasSubstr("cells of 5 ms are longer than the shortest op (1 ms)"));
  EXPECT_THAT(chart, Not(HasSubstr("no chart")));
}

TEST(GanttChart, MaxColumnsIsTheWidth) {
  // 1F1B p=4 m=60 spans 189 ms: at most 120 columns gives 2 ms cells (95),
  // at most 40 gives 5 ms cells (38) -- the width a tool passes for its
  // terminal or --width.
  const SimResult r = SimulateCase(ScheduleKind::k1F1B, 4, 60);
  EXPECT_THAT(GanttChart(r, GanttOptions{}), HasSubstr("189 ms as 95 cells of 2 ms"));
  GanttOptions narrow;
  narrow.max_columns = 40;
  const std::string chart = GanttChart(r, narrow);
  EXPECT_THAT(chart, HasSubstr("189 ms as 38 cells of 5 ms"));
  EXPECT_THAT(chart, HasSubstr("\nrank 0  "));
}

TEST(GanttChart, CellsLongerThanAnOpShowEachCellsKindAndCountTheHiddenOps) {
  // One rank, F = 1 ms, B = 2 ms, m = 4: F0 [0,1) B0 [1,3) F1 [3,4) B1 [4,6)
  // F2 [6,7) B2 [7,9) F3 [9,10) B3 [10,12). Twelve ms in at most 10 columns:
  // 2 ms cells. Cell 0 holds F0 and B0 for 1 ms each (the earlier wins: F0),
  // cell 1 B0 and F1 (B0), cell 2 B1, cell 3 F2 and B2 (F2), cell 4 B2 and F3
  // (B2), cell 5 B3: forward, backward, backward, forward, backward,
  // backward; F1 and F3 fill no cell of their own.
  GanttOptions options;
  options.max_columns = 10;
  const std::string chart = GanttChart(SimulateCase(ScheduleKind::k1F1B, 1, 4), options);
  EXPECT_THAT(chart, HasSubstr("12 ms as 6 cells of 2 ms"));
  EXPECT_THAT(chart, HasSubstr("\nrank 0  \u2591\u2588\u2588\u2591\u2588\u2588\n"));
  EXPECT_THAT(chart, HasSubstr("2 of 8 ops fill no cell of their own"));
  EXPECT_THAT(chart, Not(HasSubstr("\n     B")));  // no micro-batch rows
}

TEST(GanttChart, OddDurationsScaleToRoundCells) {
  // F = 1 ms, B = 2.001 ms: the gcd (1 us) would need 33011 cells, so cells
  // of a round 500 us, each showing the op that fills most of it.
  const SimResult r = SimulateCase(ScheduleKind::k1F1B, 4, 8, kMs, 2001 * kNsPerUs);
  const std::string chart = GanttChart(r, GanttOptions{});
  EXPECT_THAT(chart, HasSubstr("33.011 ms as 67 cells of 500 us (axis in ms)"));
  EXPECT_THAT(chart, HasSubstr("each cell shows the op that fills most of it"));
}

TEST(GanttChart, WithoutATimelineFallsBackToTheSummary) {
  Model model = UniformModel(4, kMs, 2 * kMs);
  SimOptions options;
  options.record_timeline = false;
  auto r = Simulate(model, IdealCluster(), *MakeSchedule(ScheduleKind::k1F1B, 4, 8), options);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_THAT(GanttChart(*r, GanttOptions{}), HasSubstr("no chart, as the timeline was not "
                                                        "recorded"));
}

TEST(GanttChart, ColorWrapsBlocksInAnsiCodesOnly) {
  const SimResult r = SimulateCase(ScheduleKind::k1F1B, 4, 8);
  GanttOptions options;
  options.color = true;
  const std::string colored = GanttChart(r, options);
  EXPECT_THAT(colored, HasSubstr("rank 0  \x1b[34m0\x1b[0m\x1b[34m1\x1b[0m"));
  EXPECT_THAT(colored, HasSubstr("\x1b[32m██\x1b[0m"));
  EXPECT_THAT(GanttChart(r, GanttOptions{}), Not(HasSubstr("\x1b[")));
}

TEST(GanttChart, ColorOnlyOnATerminalWithoutNoColor) {
  EXPECT_TRUE(GanttColorWanted(true, nullptr));
  EXPECT_TRUE(GanttColorWanted(true, ""));
  EXPECT_FALSE(GanttColorWanted(true, "1"));
  EXPECT_FALSE(GanttColorWanted(false, nullptr));
}

TEST(GanttOptions, ValidateNamesTheLimit) {
  GanttOptions options;
  EXPECT_TRUE(options.Validate().ok());
  options.max_columns = 5;
  EXPECT_THAT(options.Validate().message(), HasSubstr("max_columns 5"));
}

}  // namespace
}  // namespace pipecast
