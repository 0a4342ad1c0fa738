// DualPipeV (schedule_zoo_dualpipe.cc) against deepseek-ai/DualPipe's own order and its README
// table: per-rank equality with scripts/dualpipe_order.py's port of dualpipev.py (fixtures in
// tests/schedules/), and on the ideal cluster with equal stages the bubble, parameters and
// activations of the table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/schedule.h"
#include "sim/simulator.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;

// The lines of a fixture file.
std::vector<std::string> FixtureLines(const std::string& name) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  const std::filesystem::path path =
      std::filesystem::path(root != nullptr ? root : ".") / "tests" / "schedules" / name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path << " not found: run from the source root or set "
                         << "PIPECAST_SOURCE_DIR (ctest sets it)";
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Rank `rank`'s ops in schedule text, an overlapped pair as `(F;B)OVERLAP_F_B`.
std::string RankText(const Schedule& s, int rank) {
  std::string out;
  const std::vector<Action>& list = s.actions[rank];
  for (size_t i = 0; i < list.size(); ++i) {
    if (!out.empty()) out += ' ';
    if (list[i].overlapped && list[i].kind == OpKind::kForward) {
      out += "(" + ActionName(list[i]) + ";" + ActionName(list[i + 1]) + ")OVERLAP_F_B";
      ++i;
    } else {
      out += ActionName(list[i]);
    }
  }
  return out;
}

Schedule MakeOk(ScheduleKind kind, int p, int m, int v) {
  Result<Schedule> s = MakeSchedule(kind, p, m, v);
  EXPECT_TRUE(s.ok()) << s.status().message();
  if (!s.ok()) return Schedule{};
  Status valid = ValidateSchedule(*s);
  EXPECT_TRUE(valid.ok()) << valid.message();
  return *s;
}

TEST(ScheduleZooDualPipeV, MatchesDualPipesOwnOrderPerRank) {
  struct Shape {
    int p, m;
  };
  for (Shape c : {Shape{2, 4}, Shape{3, 7}, Shape{4, 10}, Shape{8, 20}}) {
    SCOPED_TRACE(::testing::Message() << "p=" << c.p << " m=" << c.m);
    const std::vector<std::string> want =
        FixtureLines("dualpipev-p" + std::to_string(c.p) + "-m" + std::to_string(c.m) + ".txt");
    ASSERT_EQ(static_cast<int>(want.size()), c.p);
    Schedule s = MakeOk(ScheduleKind::kDualPipeV, c.p, c.m, 2);
    for (int r = 0; r < c.p; ++r) EXPECT_EQ(RankText(s, r), want[r]) << "rank " << r;
  }
}

// Per-chunk costs: F = 2u, B = 4u whole backward of which W = 2u (I = 2u): the zero-bubble
// convention F = I = W that DualPipe's table assumes. 2p layers, one per virtual stage, each A
// of activations and P parameters.
constexpr TimeNs kU = 100 * kNsPerUs;
constexpr TimeNs kF = 2 * kU, kB = 4 * kU, kW = 2 * kU;
constexpr Bytes kAct = 64 * kMiB;
constexpr int64_t kParams = 1'000'000;

Model SplitModel(int stages) {
  Model model = UniformModel(stages, kF, kB, kAct);
  for (Layer& layer : model.layers) {
    layer.profiles[0].backward_weight_ns = kW;
    layer.parameters = kParams;
  }
  return model;
}

SimResult SimulateOk(const Model& model, const Schedule& s, double overlap_factor = 1.0) {
  SimOptions options;
  options.overlap_factor = overlap_factor;
  Result<SimResult> r = Simulate(model, IdealCluster(), s, options);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : SimResult{};
}

// A rank's idle time in the iteration: the iteration less its busy time.
TimeNs Bubble(const SimResult& r, int rank) { return r.iteration_ns - r.per_rank[rank].busy_ns; }

TEST(ScheduleZooDualPipeV, DualPipeTableBubbleOnTheIdealCluster) {
  // DualPipe README: bubble (PP/2 - 1)(F&B + B - 3W) with PP = 2p stages. With F&B = F + B
  // (--overlap-factor 1) every rank idles exactly that long.
  for (int p : {2, 4, 8}) {
    for (int m : {2 * p, 2 * p + 3, 4 * p}) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const SimResult r = SimulateOk(SplitModel(2 * p), MakeOk(ScheduleKind::kDualPipeV, p, m, 2));
      for (int rank = 0; rank < p; ++rank) {
        EXPECT_EQ(Bubble(r, rank), (p - 1) * (kF + kB + kB - 3 * kW)) << "rank " << rank;
      }
    }
  }
}

TEST(ScheduleZooDualPipeV, OverlapGainShrinksTheBubbleToTheTablesFormOnTheLastRanks) {
  // F&B = 0.8 (F + B): the last two ranks idle the table's (p - 1)(F&B + B - 3W); rank r < p - 2
  // idles (p - 2 - r) x (F + B - F&B) less (1.2u per rank here), so the table's bubble is the
  // largest per-rank idle time.
  const double factor = 0.8;
  const TimeNs fb = static_cast<TimeNs>(factor * static_cast<double>(kF + kB));
  const TimeNs step = (kF + kB) - fb;
  for (int p : {2, 4, 8}) {
    for (int m : {2 * p, 4 * p}) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const SimResult r =
          SimulateOk(SplitModel(2 * p), MakeOk(ScheduleKind::kDualPipeV, p, m, 2), factor);
      const TimeNs table = (p - 1) * (fb + kB - 3 * kW);
      for (int rank = 0; rank < p; ++rank) {
        const TimeNs below = std::max(0, p - 2 - rank) * step;
        EXPECT_EQ(Bubble(r, rank), table - below) << "rank " << rank;
      }
    }
  }
}

TEST(ScheduleZooDualPipeV, OneFOneBRowOfTheTable) {
  // The table's 1F1B row, (PP - 1)(F + B), on PP = 8 ranks with m = 16.
  const SimResult r = SimulateOk(SplitModel(8), MakeOk(ScheduleKind::k1F1B, 8, 16, 1));
  for (int rank = 0; rank < 8; ++rank) EXPECT_EQ(Bubble(r, rank), 7 * (kF + kB));
}

TEST(ScheduleZooDualPipeV, ParametersAndActivationsOfTheTable) {
  // Same PP = 2p stages: 1F1B on 2p ranks holds 1 stage's parameters per device and at most PP
  // activations; DualPipeV on p ranks holds 2 stages' parameters (2x) and PP + 1 chunk
  // activations on rank 0, each chunk one stage's A.
  for (int p : {2, 4, 8}) {
    SCOPED_TRACE(::testing::Message() << "p=" << p);
    const int m = 4 * p;
    const SimResult one = SimulateOk(SplitModel(2 * p), MakeOk(ScheduleKind::k1F1B, 2 * p, m, 1));
    const SimResult dual = SimulateOk(SplitModel(2 * p), MakeOk(ScheduleKind::kDualPipeV, p, m, 2));
    EXPECT_EQ(one.per_rank[0].parameters, kParams);
    EXPECT_EQ(dual.per_rank[0].parameters, 2 * kParams);
    EXPECT_EQ(one.per_rank[0].peak_inflight_microbatches, 2 * p);
    EXPECT_EQ(dual.per_rank[0].peak_inflight_microbatches, 2 * p + 1);
    EXPECT_EQ(dual.per_rank[0].memory.activations_peak, (2 * p + 1) * kAct);
  }
}

TEST(ScheduleZooDualPipeV, OverlappedPairsAreMarkedInPairs) {
  const Schedule s = MakeOk(ScheduleKind::kDualPipeV, 4, 10, 2);
  // Rank 0 of p=4, m=10: 6 pairs in the main step, 3 in step 5 (dualpipev-p4-m10.txt).
  int pairs = 0;
  for (const Action& a : s.actions[0]) pairs += a.overlapped && a.kind == OpKind::kForward;
  EXPECT_EQ(pairs, 9);
  EXPECT_TRUE(s.split_backward);
  EXPECT_EQ(s.num_stages, 8);
}

}  // namespace
}  // namespace pipecast
