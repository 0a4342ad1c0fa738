// DualPipeV (schedule_zoo_dualpipe.cc) against deepseek-ai/DualPipe's own order and its README
// table: per-rank equality with scripts/dualpipe_order.py's port of dualpipev.py (fixtures in
// tests/schedules/), and on the ideal cluster with equal stages the bubble, parameters and
// activations of the table. The same for bidirectional DualPipe (dualpipe.py): its per-rank
// order, its table row on p ranks ((p/2 - 1)(F&B + B - 3W), 2x parameters, p + 1 activations)
// and the all-reduce of its two parameter copies' gradients.
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
      out += "(" + ActionName(s, list[i]) + ";" + ActionName(s, list[i + 1]) + ")OVERLAP_F_B";
      ++i;
    } else {
      out += ActionName(s, list[i]);
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
  options.config.overlap.overlap_factor = overlap_factor;
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

TEST(ScheduleZooDualPipe, MatchesDualPipesOwnOrderPerRank) {
  // scripts/dualpipe_order.py dualpipe P M, the port of dualpipe.py's step(), in its direction
  // notation (a0F3: direction a, its stage 0, its micro-batch 3), which ActionName(s, a) writes.
  struct Shape {
    int p, m;
  };
  for (Shape c : {Shape{2, 4}, Shape{2, 6}, Shape{4, 8}, Shape{4, 12}, Shape{6, 12}, Shape{8, 16},
                  Shape{8, 20}}) {
    SCOPED_TRACE(::testing::Message() << "p=" << c.p << " m=" << c.m);
    const std::vector<std::string> want =
        FixtureLines("dualpipe-p" + std::to_string(c.p) + "-m" + std::to_string(c.m) + ".txt");
    ASSERT_EQ(static_cast<int>(want.size()), c.p);
    Schedule s = MakeOk(ScheduleKind::kDualPipe, c.p, c.m, 2);
    EXPECT_TRUE(s.bidirectional);
    EXPECT_EQ(s.num_stages, 2 * c.p);
    for (int r = 0; r < c.p; ++r) EXPECT_EQ(RankText(s, r), want[r]) << "rank " << r;
  }
}

TEST(ScheduleZooDualPipe, PathsRunFromBothEnds) {
  // p = 4, m = 8: micro-batches 0..3 enter at rank 0 (stages 0..3), 4..7 at rank 3 (stages
  // 4..7, stage 4 + k being model chunk k on rank 3 - k).
  const Schedule s = MakeOk(ScheduleKind::kDualPipe, 4, 8, 2);
  EXPECT_EQ(s.stage_rank, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_TRUE(s.IsFirstStage(0) && s.IsFirstStage(4));
  EXPECT_TRUE(s.IsLastStage(3) && s.IsLastStage(7));
  EXPECT_FALSE(s.IsLastStage(4) || s.IsFirstStage(3));
  EXPECT_TRUE(s.OnPath(3, 3) && s.OnPath(4, 4));
  EXPECT_FALSE(s.OnPath(3, 4) || s.OnPath(4, 3));
  EXPECT_EQ(s.ModelStage(6), 2);
  EXPECT_EQ(ActionName(s, Action{7, OpKind::kForward, 4}), "b3F0");
}

TEST(ScheduleZooDualPipe, ShapeRules) {
  // dualpipe.py asserts num_ranks % 2 == 0 and num_chunks % 2 == 0, >= 2 x num_ranks.
  EXPECT_FALSE(MakeSchedule(ScheduleKind::kDualPipe, 3, 12, 2).ok());
  EXPECT_FALSE(MakeSchedule(ScheduleKind::kDualPipe, 4, 9, 2).ok());
  EXPECT_FALSE(MakeSchedule(ScheduleKind::kDualPipe, 4, 6, 2).ok());
  const Result<Schedule> odd = MakeSchedule(ScheduleKind::kDualPipe, 4, 9, 2);
  EXPECT_THAT(odd.status().message(), ::testing::HasSubstr("even number of micro-batches"));
  EXPECT_THAT(MakeSchedule(ScheduleKind::kDualPipe, 3, 12, 2).status().message(),
              ::testing::HasSubstr("even number of pipeline stages"));
}

TEST(ScheduleZooDualPipe, DualPipeTableBubbleOnTheIdealCluster) {
  // DualPipe README: bubble (PP/2 - 1)(F&B + B - 3W), PP = p ranks, F, B, W of one of the p
  // model chunks. With F&B = F + B every rank idles that long.
  for (int p : {2, 4, 8}) {
    for (int m : {2 * p, 2 * p + 2, 4 * p}) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const SimResult r = SimulateOk(SplitModel(p), MakeOk(ScheduleKind::kDualPipe, p, m, 2));
      for (int rank = 0; rank < p; ++rank) {
        EXPECT_EQ(Bubble(r, rank), (p / 2 - 1) * (kF + kB + kB - 3 * kW)) << "rank " << rank;
      }
    }
  }
}

TEST(ScheduleZooDualPipe, OverlapGainLeavesTheTablesBubbleOnTheMiddleRanks) {
  // F&B = 0.8 (F + B): the two middle ranks idle the table's (p/2 - 1)(F&B + B - 3W), rank r
  // (h = min(r, p-1-r) its distance from the nearer end) (p/2 - 2 - h) x (F + B - F&B) less:
  // dualpipev's rule on each half.
  const double factor = 0.8;
  const TimeNs fb = static_cast<TimeNs>(factor * static_cast<double>(kF + kB));
  const TimeNs step = (kF + kB) - fb;
  for (int p : {2, 4, 8}) {
    for (int m : {2 * p, 4 * p}) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const SimResult r =
          SimulateOk(SplitModel(p), MakeOk(ScheduleKind::kDualPipe, p, m, 2), factor);
      const TimeNs table = (p / 2 - 1) * (fb + kB - 3 * kW);
      for (int rank = 0; rank < p; ++rank) {
        const int h = std::min(rank, p - 1 - rank);
        const TimeNs below = std::max(0, p / 2 - 2 - h) * step;
        EXPECT_EQ(Bubble(r, rank), table - below) << "rank " << rank;
      }
    }
  }
}

TEST(ScheduleZooDualPipe, ParametersAndActivationsOfTheTable) {
  // PP = p model chunks: 1F1B holds one chunk's parameters per device and at most PP
  // activations; DualPipe two chunks' parameters (2x: chunks r and p-1-r) and PP + 1 chunk
  // activations at its peak.
  for (int p : {2, 4, 8}) {
    SCOPED_TRACE(::testing::Message() << "p=" << p);
    const int m = 4 * p;
    const SimResult one = SimulateOk(SplitModel(p), MakeOk(ScheduleKind::k1F1B, p, m, 1));
    const SimResult dual = SimulateOk(SplitModel(p), MakeOk(ScheduleKind::kDualPipe, p, m, 2));
    int peak = 0;
    for (int rank = 0; rank < p; ++rank) {
      EXPECT_EQ(dual.per_rank[rank].parameters, 2 * kParams) << "rank " << rank;
      EXPECT_EQ(dual.per_rank[rank].layers[0], dual.per_rank[p - 1 - rank].layers[1]);
      peak = std::max(peak, dual.per_rank[rank].peak_inflight_microbatches);
    }
    EXPECT_EQ(one.per_rank[0].parameters, kParams);
    EXPECT_EQ(one.per_rank[0].peak_inflight_microbatches, p);
    EXPECT_EQ(peak, p + 1);
    EXPECT_EQ(dual.per_rank[0].memory.activations_peak,
              dual.per_rank[0].peak_inflight_microbatches * kAct);
  }
}

TEST(ScheduleZooDualPipe, CopiesSumTheirGradientsBetweenRanksKAndPMinus1MinusK) {
  // One node, links of 100 GB/s and 5 us: each rank holds 2 chunks of 1M parameters, fp32 main
  // gradients 4 bytes each: 8 MB summed by a ring of 2, 2 latencies + 8 MB / 100 GB/s = 90 us.
  Cluster cluster = IdealCluster();
  cluster.gpus_per_node = 8;
  cluster.intra_node.bandwidth_gbps = 100;
  cluster.intra_node.latency_us = 5;
  SimOptions options;
  options.config.optimizer_step.estimate = false;
  const Schedule s = MakeOk(ScheduleKind::kDualPipe, 4, 8, 2);
  Result<SimResult> r = Simulate(SplitModel(4), cluster, s, options);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const TimeNs want = 2 * 5 * kNsPerUs + 8'000'000 * kNsPerS / (100LL * 1'000'000'000);
  EXPECT_EQ(r->copy_reduce_ns, want);
  TimeNs last_end = 0;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(r->per_rank[rank].copy_reduce_ns, want) << "rank " << rank;
    last_end = std::max(last_end, r->per_rank[rank].last_end_ns);
  }
  EXPECT_EQ(r->iteration_ns, last_end + want);
  // One direction's schedule (dualpipev) has no second copy to sum.
  Result<SimResult> v =
      Simulate(SplitModel(8), cluster, MakeOk(ScheduleKind::kDualPipeV, 4, 8, 2), options);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->copy_reduce_ns, 0);
}

TEST(ScheduleZooDualPipe, CopiesOnOneRankSumLocally) {
  // A hand-made bidirectional schedule whose direction b runs stage k on rank k too (not
  // DualPipe's V): each model stage's two copies share a rank, so nothing crosses a link.
  Schedule s;
  s.name = "custom";
  s.num_ranks = 2;
  s.num_stages = 4;
  s.num_microbatches = 4;
  s.bidirectional = true;
  s.stage_rank = {0, 1, 0, 1};
  auto op = [](int stage, OpKind kind, int mb) { return Action{stage, kind, mb}; };
  const OpKind f = OpKind::kForward, b = OpKind::kBackward;
  s.actions = {{op(0, f, 0), op(0, f, 1), op(2, f, 2), op(2, f, 3), op(0, b, 0), op(0, b, 1),
                op(2, b, 2), op(2, b, 3)},
               {op(1, f, 0), op(1, f, 1), op(3, f, 2), op(3, f, 3), op(1, b, 0), op(1, b, 1),
                op(3, b, 2), op(3, b, 3)}};
  ASSERT_TRUE(ValidateSchedule(s).ok()) << ValidateSchedule(s).message();
  Cluster cluster = IdealCluster();
  cluster.gpus_per_node = 8;
  cluster.intra_node = Link{100, 5};
  SimOptions options;
  options.config.optimizer_step.estimate = false;
  Result<SimResult> r = Simulate(SplitModel(2), cluster, s, options);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->copy_reduce_ns, 0);
  EXPECT_EQ(r->per_rank[0].parameters, 2 * kParams);
  EXPECT_EQ(r->iteration_ns, std::max(r->per_rank[0].last_end_ns, r->per_rank[1].last_end_ns));
}

TEST(ScheduleZooDualPipe, ValidateRefusesOpsOffTheirPath) {
  Schedule s = MakeOk(ScheduleKind::kDualPipe, 4, 8, 2);
  // Micro-batch 4 enters at rank 3: it never runs stage 0.
  s.actions[0][0].microbatch = 4;
  Status bad = ValidateSchedule(s);
  EXPECT_THAT(bad.message(), ::testing::HasSubstr("micro-batch 4 enters at rank 3 (direction b"));
  EXPECT_THAT(bad.message(), ::testing::HasSubstr("never runs stage 0"));
  Schedule odd = MakeOk(ScheduleKind::kDualPipe, 4, 8, 2);
  odd.num_stages = 4;
  odd.stage_rank.resize(4);
  EXPECT_THAT(ValidateSchedule(odd).message(), ::testing::HasSubstr("it needs 2 x 4 = 8"));
  Schedule missing = MakeOk(ScheduleKind::kDualPipe, 4, 8, 2);
  missing.actions[3].pop_back();  // the last W of rank 3
  EXPECT_THAT(ValidateSchedule(missing).message(), ::testing::HasSubstr("is missing"));
}

}  // namespace
}  // namespace pipecast
