// The schedules of schedule_zoo.cc against the closed forms of docs/schedules.md: ideal
// cluster (no communication cost), equal stages, no optimizer step.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sim/schedule.h"
#include "sim/simulator.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;
using ::testing::HasSubstr;

// Whole-model-stage costs, F : B = 1 : 2, divisible by every v used below.
constexpr TimeNs kF = 1200 * kNsPerUs;
constexpr TimeNs kB = 2400 * kNsPerUs;
constexpr Bytes kAct = 96 * kMiB;  // A: activations of one micro-batch on one whole stage
// One unit of the zero-bubble tests.
constexpr TimeNs kUnit = 1000 * kNsPerUs;

// p·v identical layers, each F/v forward, B/v backward and A/v activations, so the default
// balanced partition puts one layer on each virtual stage.
Model ChunkedModel(int p, int v) { return UniformModel(p * v, kF / v, kB / v, kAct / v); }

// p identical layers whose backward is split: forward f, input gradient i, weight gradient w.
Model SplitModel(int p, TimeNs f, TimeNs i, TimeNs w) {
  Model model = UniformModel(p, f, i + w, kAct);
  for (Layer& layer : model.layers) layer.profiles[0].backward_weight_ns = w;
  return model;
}

Schedule MakeOk(ScheduleKind kind, int p, int m, int v = 1) {
  auto sched = MakeSchedule(kind, p, m, v);
  EXPECT_TRUE(sched.ok()) << sched.status().message();
  if (!sched.ok()) return Schedule{};
  Status valid = ValidateSchedule(*sched);
  EXPECT_TRUE(valid.ok()) << valid.message();
  return *sched;
}

SimResult SimulateOk(const Model& model, const Schedule& sched) {
  auto r = Simulate(model, IdealCluster(), sched, SimOptions{});
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : SimResult{};
}

std::vector<int> Peaks(const SimResult& r) {
  std::vector<int> peaks;
  for (const StageResult& s : r.per_rank) peaks.push_back(s.peak_inflight_microbatches);
  return peaks;
}

std::string RankOrder(const Schedule& s, int rank) {
  std::string out;
  for (const Action& a : s.actions[rank]) out += (out.empty() ? "" : " ") + ActionName(a);
  return out;
}

struct Combo {
  int p, v, m;
};

TEST(ScheduleZooInterleaved, FollowsMegatronOrder) {
  // p=2, v=2, m=4, rank 1: warm-up 2(p-r-1) + (v-1)p = 2 forwards; forwards go in groups of p
  // micro-batches per chunk (stage 1 = chunk 0, stage 3 = chunk 1); backwards start at chunk 1.
  Schedule s = MakeOk(ScheduleKind::kInterleaved1F1B, 2, 4, 2);
  EXPECT_EQ(RankOrder(s, 1), "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3");
  // Rank 0 warms up with 2 + 2 = 4 forwards.
  EXPECT_EQ(RankOrder(s, 0), "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3");
}

TEST(ScheduleZooInterleaved, HitsMegatronClosedFormAndWarmupPeaks) {
  for (Combo c : {Combo{4, 2, 8}, Combo{4, 2, 16}, Combo{2, 4, 4}, Combo{2, 4, 8}, Combo{4, 4, 8},
                  Combo{8, 2, 16}, Combo{4, 3, 12}, Combo{4, 1, 8}}) {
    SCOPED_TRACE(::testing::Message() << "p=" << c.p << " v=" << c.v << " m=" << c.m);
    SimResult r =
        SimulateOk(ChunkedModel(c.p, c.v), MakeOk(ScheduleKind::kInterleaved1F1B, c.p, c.m, c.v));
    // m(F+B) + (p-1)(F+B)/v; with F=1, B=2: p=4, v=2, m=8 gives 24 + 4.5 = 28.5 (1F1B: 33).
    EXPECT_EQ(r.iteration_ns, c.m * (kF + kB) + (c.p - 1) * (kF + kB) / c.v);
    // R2 = (1/v)(p-1)/m.
    EXPECT_NEAR(r.bubble_fraction_of_ideal, (c.p - 1.0) / (c.v * c.m), 1e-9);
    for (int rank = 0; rank < c.p; ++rank) {
      const int chunks = std::min(2 * (c.p - rank - 1) + (c.v - 1) * c.p + 1, c.m * c.v);
      EXPECT_EQ(r.per_rank[rank].peak_inflight_microbatches, chunks) << "rank " << rank;
      EXPECT_EQ(r.per_rank[rank].memory.activations_peak, chunks * (kAct / c.v));
    }
  }
}

TEST(ScheduleZooInterleaved, RankZeroHoldsPPlusPMinus1OverVActivations) {
  // p=4, v=2, m=8: rank 0 holds 2·3 + 4 + 1 = 11 chunks of A/2 = (4 + 3/2)·A.
  SimResult r = SimulateOk(ChunkedModel(4, 2), MakeOk(ScheduleKind::kInterleaved1F1B, 4, 8, 2));
  EXPECT_EQ(Peaks(r), (std::vector<int>{11, 9, 7, 5}));
  EXPECT_EQ(r.per_rank[0].memory.activations_peak, 4 * kAct + 3 * kAct / 2);
}

TEST(ScheduleZooLoopedBFS, RunsEachChunkBreadthFirst) {
  Schedule s = MakeOk(ScheduleKind::kLoopedBFS, 2, 2, 2);
  EXPECT_EQ(RankOrder(s, 1), "1F0 1F1 3F0 3F1 3B0 3B1 1B0 1B1");
}

TEST(ScheduleZooLoopedBFS, HitsClosedFormAndHoldsEveryMicrobatch) {
  for (Combo c : {Combo{4, 2, 8}, Combo{4, 2, 4}, Combo{4, 2, 6}, Combo{2, 4, 4}, Combo{4, 4, 8},
                  Combo{8, 2, 16}, Combo{4, 3, 5}}) {
    SCOPED_TRACE(::testing::Message() << "p=" << c.p << " v=" << c.v << " m=" << c.m);
    SimResult r =
        SimulateOk(ChunkedModel(c.p, c.v), MakeOk(ScheduleKind::kLoopedBFS, c.p, c.m, c.v));
    EXPECT_EQ(r.iteration_ns, c.m * (kF + kB) + (c.p - 1) * (kF + kB) / c.v);
    for (const StageResult& s : r.per_rank) {
      EXPECT_EQ(s.peak_inflight_microbatches, c.m * c.v);
      EXPECT_EQ(s.memory.activations_peak, c.m * kAct);  // m·v chunks of A/v
    }
  }
}

TEST(ScheduleZooLoopedBFS, FewerMicrobatchesThanStagesIsAnError) {
  auto s = MakeSchedule(ScheduleKind::kLoopedBFS, 4, 3, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("micro-batches (N = 3)"));
  EXPECT_THAT(s.status().message(), HasSubstr("--microbatches 4 or more"));
}

TEST(ScheduleZooZBH1, DelaysStageSWeightGradientsBySMicrobatches) {
  Schedule s = MakeOk(ScheduleKind::kZBH1, 4, 8);
  EXPECT_TRUE(s.split_backward);
  EXPECT_EQ(RankOrder(s, 0),
            "0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 "
            "0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7");
  EXPECT_EQ(RankOrder(s, 3),
            "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 "
            "3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7");
}

TEST(ScheduleZooZBH1, EqualFBWHitsClosedForm) {
  struct Case {
    int p, m;
  };
  for (Case c : {Case{4, 8}, Case{4, 4}, Case{4, 5}, Case{2, 4}, Case{8, 16}}) {
    SCOPED_TRACE(::testing::Message() << "p=" << c.p << " m=" << c.m);
    SimResult r =
        SimulateOk(SplitModel(c.p, kUnit, kUnit, kUnit), MakeOk(ScheduleKind::kZBH1, c.p, c.m));
    // m(F+B+W) + (p-1)(F+B-W) = 3m + p - 1: p=4, m=8 gives 27 against 1F1B's 33.
    EXPECT_EQ(r.iteration_ns, (3 * c.m + c.p - 1) * kUnit);
    // p-s in flight until I, plus the s weight gradients stage s holds back.
    for (const StageResult& s : r.per_rank) EXPECT_EQ(s.peak_inflight_microbatches, c.p);
  }
}

TEST(ScheduleZooZBH1, UnequalFBWHandChecked) {
  // F=2, I=3, W=1, p=4, m=8. The first forward reaches stage 3 at 6 (2 per hop); its I0 runs
  // [8,11] and climbs 3 per stage, so stage 0 idles [8,17] after its four warm-up forwards
  // and starts I0 at 17. In the steady state each stage repeats (I, W, F) = 6 per
  // micro-batch; stage 3's last forward F7 runs [45,47], its I7 [47,50], and I7 reaches stage 0
  // at 47 + 3·3 = 56; stage 0 ends with I7 [56,59] and W7 [59,60].
  // Closed form: m(F+B+W) + (p-1)(F+B-W) = 48 + 12 = 60.
  SimResult r =
      SimulateOk(SplitModel(4, 2 * kUnit, 3 * kUnit, kUnit), MakeOk(ScheduleKind::kZBH1, 4, 8));
  auto start = [&](int stage, OpKind kind, int mb) -> TimeNs {
    for (const OpRecord& op : r.ops)
      if (op.action == Action{stage, kind, mb}) return op.start_ns;
    return -1;
  };
  EXPECT_EQ(start(3, OpKind::kBackwardInput, 0), 8 * kUnit);
  EXPECT_EQ(start(0, OpKind::kBackwardInput, 0), 17 * kUnit);
  EXPECT_EQ(start(3, OpKind::kForward, 7), 45 * kUnit);
  EXPECT_EQ(start(3, OpKind::kBackwardInput, 7), 47 * kUnit);
  EXPECT_EQ(start(0, OpKind::kBackwardInput, 7), 56 * kUnit);
  EXPECT_EQ(start(0, OpKind::kBackwardWeight, 7), 59 * kUnit);
  EXPECT_EQ(r.iteration_ns, 60 * kUnit);
  EXPECT_EQ(r.per_rank[0].busy_ns, 48 * kUnit);
}

TEST(ScheduleZooZBH2, WarmupIsTwicePMinusSMinus1) {
  Schedule s = MakeOk(ScheduleKind::kZBH2, 4, 8);
  std::vector<int> warmup;
  for (const auto& list : s.actions) {
    int n = 0;
    while (list[n].kind == OpKind::kForward) ++n;
    warmup.push_back(n);
  }
  EXPECT_EQ(warmup, (std::vector<int>{7, 5, 3, 1}));
  // Stage 3 lags its weight gradients 2s = 6 micro-batches: its tail holds 2s+1 = 7 of them.
  EXPECT_EQ(RankOrder(s, 3),
            "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3F4 3I4 3F5 3I5 3F6 3I6 3W0 3F7 "
            "3I7 3W1 3W2 3W3 3W4 3W5 3W6 3W7");
}

TEST(ScheduleZooZBH2, EqualFBWHasNoBubbleInAnyStageSpan) {
  struct Case {
    int p, m;
  };
  for (Case c : {Case{4, 8}, Case{4, 7}, Case{4, 12}, Case{2, 4}, Case{8, 16}}) {
    SCOPED_TRACE(::testing::Message() << "p=" << c.p << " m=" << c.m);
    SimResult r =
        SimulateOk(SplitModel(c.p, kUnit, kUnit, kUnit), MakeOk(ScheduleKind::kZBH2, c.p, c.m));
    for (int s = 0; s < c.p; ++s) {
      const StageResult& st = r.per_rank[s];
      // Span m(F+B+W) + (p-1)(F+B-2W) = 3m: R3 = 0.
      EXPECT_EQ(st.last_end_ns - st.first_start_ns, 3 * c.m * kUnit) << "stage " << s;
      EXPECT_EQ(st.first_start_ns, s * kUnit);
      EXPECT_EQ(st.peak_inflight_microbatches, 2 * c.p - 1) << "stage " << s;
    }
    // One iteration still contains the (p-1)F fill before the last stage starts.
    EXPECT_EQ(r.iteration_ns, (3 * c.m + c.p - 1) * kUnit);
  }
}

TEST(ScheduleZooZBH2, UnequalFBWLongestSpanMatchesClosedForm) {
  // F=2, I=3, W=1, p=4, m=8: m(F+B+W) + (p-1)(F+B-2W) = 48 + 9 = 57, the span of stage 0,
  // the longest. Stage s starts at 2s and ends at 57 - s: a span of 57 - 3s.
  SimResult r =
      SimulateOk(SplitModel(4, 2 * kUnit, 3 * kUnit, kUnit), MakeOk(ScheduleKind::kZBH2, 4, 8));
  std::vector<TimeNs> spans;
  for (const StageResult& s : r.per_rank) spans.push_back(s.last_end_ns - s.first_start_ns);
  EXPECT_EQ(spans, (std::vector<TimeNs>{57 * kUnit, 54 * kUnit, 51 * kUnit, 48 * kUnit}));
}

// m <= p (Qi et al. ICLR'24, appendix H): with the warm-up capped at m, zero bubble takes
// (m+p-1)(F+B) + W where 1F1B takes (m+p-1)(F+B+W); sail-sg runs p = 8, m = 2.
TEST(ScheduleZooZeroBubble, FewerMicrobatchesThanStagesHitAppendixH) {
  struct Case {
    int p, m;
  };
  for (ScheduleKind kind : {ScheduleKind::kZBH1, ScheduleKind::kZBH2}) {
    for (Case c : {Case{8, 2}, Case{4, 3}, Case{4, 1}, Case{4, 4}, Case{8, 5}}) {
      SCOPED_TRACE(::testing::Message() << ScheduleKindName(kind) << " p=" << c.p << " m=" << c.m);
      SimResult r =
          SimulateOk(SplitModel(c.p, 2 * kUnit, 3 * kUnit, kUnit), MakeOk(kind, c.p, c.m));
      EXPECT_EQ(r.iteration_ns, (c.m + c.p - 1) * 5 * kUnit + kUnit);
      for (const StageResult& s : r.per_rank) EXPECT_EQ(s.busy_ns, c.m * 6 * kUnit);
    }
  }
}

TEST(ScheduleZooZeroBubble, NeedsTheWeightGradientTime) {
  auto r = Simulate(UniformModel(4, kF, kB), IdealCluster(), MakeOk(ScheduleKind::kZBH1, 4, 8),
                    SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("backward_weight_us"));
}

TEST(ScheduleZoo, EveryShapeIsACompleteIterationThatFinishes) {
  for (ScheduleKind kind : {ScheduleKind::kInterleaved1F1B, ScheduleKind::kInterleavedZB,
                            ScheduleKind::kLoopedBFS, ScheduleKind::kZBH1, ScheduleKind::kZBH2}) {
    const bool chunks = UsesChunks(kind);
    for (int p : {1, 2, 3, 4, 8}) {
      for (int v : chunks ? std::vector<int>{1, 2, 3} : std::vector<int>{1}) {
        for (int m = 1; m <= 3 * p; ++m) {
          if (kind == ScheduleKind::kLoopedBFS && m < p) continue;
          SCOPED_TRACE(::testing::Message()
                       << ScheduleKindName(kind) << " p=" << p << " v=" << v << " m=" << m);
          // Split kinds: p·v layers of F 2, I 3, W 1 units, so a rank works 6·m·v units.
          Model model = SplitsBackward(kind) ? SplitModel(p * v, 2 * kUnit, 3 * kUnit, kUnit)
                                             : ChunkedModel(p, v);
          SimResult r = SimulateOk(model, MakeOk(kind, p, m, v));
          for (const StageResult& s : r.per_rank) {
            EXPECT_EQ(s.busy_ns, SplitsBackward(kind) ? m * v * 6 * kUnit : m * (kF + kB));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace pipecast
