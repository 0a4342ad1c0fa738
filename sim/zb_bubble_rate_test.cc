// SimResult::zb_bubble_rate, the zero-bubble paper's bubble rate (R3 of docs/schedules.md):
// 1 - the busiest rank's work / the longest per-rank span. Held against Qi et al. ICLR'24
// Table 5 on its p = 8, m = 24 row (the 1.5B model's profiled F 18.522, B 18.086, W 9.337 and
// communication 0.601 ms of Table 6; docs/research/compute-sources.md) and against hand-worked
// cases.
#include <gtest/gtest.h>

#include "sim/schedule.h"
#include "sim/simulator.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;

using test_util::zb_paper::kB;
using test_util::zb_paper::kF;
using test_util::zb_paper::kW;

Model PaperModel(int p) { return test_util::zb_paper::StagesModel(p); }
Cluster PaperCluster() { return test_util::zb_paper::HopCluster(); }

SimResult RunSchedule(ScheduleKind kind, const Model& model, const Cluster& cluster, int p, int m) {
  auto s = MakeSchedule(kind, p, m);
  EXPECT_TRUE(s.ok()) << s.status().message();
  auto r = Simulate(model, cluster, *s, SimOptions{});
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : SimResult{};
}

TEST(ZbBubbleRate, ReproducesThePapersTableFiveRow) {
  const Model model = PaperModel(8);
  const Cluster cluster = PaperCluster();
  // Table 5, 1.5B, p = 8, m = 24: 1F1B 0.2431 (whole backward B + W), ZB-H1 0.1585, ZB-H2
  // 0.1083 (issue 16 quotes the last).
  EXPECT_NEAR(
      RunSchedule(ScheduleKind::k1F1B, UniformModel(8, kF, kB + kW), cluster, 8, 24).zb_bubble_rate,
      0.2431, 5e-5);
  EXPECT_NEAR(RunSchedule(ScheduleKind::kZBH1, model, cluster, 8, 24).zb_bubble_rate, 0.1585, 5e-5);
  EXPECT_NEAR(RunSchedule(ScheduleKind::kZBH2, model, cluster, 8, 24).zb_bubble_rate, 0.1083, 5e-5);
}

TEST(ZbBubbleRate, IsNamedApartFromTheOtherTwoRatios) {
  // ZB-H2 with F = B = W and no communication: every rank's span is exactly its work (R3 = 0),
  // while R1 and R2 still count the (p-1)F fill before the last rank starts.
  const TimeNs u = 1'000'000;
  Model model = UniformModel(4, u, 2 * u);
  for (Layer& layer : model.layers) layer.profiles[0].backward_weight_ns = u;
  SimResult r = RunSchedule(ScheduleKind::kZBH2, model, IdealCluster(), 4, 8);
  EXPECT_DOUBLE_EQ(r.zb_bubble_rate, 0.0);
  EXPECT_GT(r.bubble_ratio, 0.0);
  EXPECT_GT(r.bubble_fraction_of_ideal, 0.0);
}

TEST(ZbBubbleRate, OneFOneBHandWorked) {
  // 1F1B, p = 4, m = 8, F = 1, B = 2, no communication: every rank's span is the whole
  // (m+p-1)(F+B) = 33, its work 24: R3 = 1 - 24/33.
  const TimeNs u = 1'000'000;
  SimResult r = RunSchedule(ScheduleKind::k1F1B, UniformModel(4, u, 2 * u), IdealCluster(), 4, 8);
  EXPECT_DOUBLE_EQ(r.zb_bubble_rate, 1.0 - 24.0 / 33.0);
}

}  // namespace
}  // namespace pipecast
