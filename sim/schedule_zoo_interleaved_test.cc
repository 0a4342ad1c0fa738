// The interleaved schedules of schedule_zoo_interleaved.cc against PyTorch pipelining's orders
// (ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble) and the closed forms on the ideal
// cluster (no communication cost, equal stages, no optimizer step).
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
using ::testing::StartsWith;

constexpr TimeNs kUnit = 1000 * kNsPerUs;
constexpr Bytes kAct = 32 * kMiB;  // one chunk's activations for one micro-batch

// From scripts/gen-pytorch-interleaved-fixtures.py, a transcription of PyTorch's schedules.py at
// 00722e648b74.
struct Fixture {
  const char* kind;
  int p, m, v, rank;
  const char* order;
};
constexpr Fixture kFixtures[] = {
#include "sim/testdata/pytorch_interleaved_fixtures.inc"
};

Schedule MakeOk(ScheduleKind kind, int p, int m, int v) {
  auto s = MakeSchedule(kind, p, m, v);
  EXPECT_TRUE(s.ok()) << s.status().message();
  if (!s.ok()) return Schedule{};
  Status valid = ValidateSchedule(*s);
  EXPECT_TRUE(valid.ok()) << valid.message();
  return *s;
}

std::string RankOrder(const Schedule& s, int rank) {
  std::string out;
  for (const Action& a : s.actions[rank]) out += (out.empty() ? "" : " ") + ActionName(a);
  return out;
}

// p·v identical layers, one per virtual stage: forward f, backward b (of which w is the weight
// gradient when w > 0).
Model Layers(int p, int v, TimeNs f, TimeNs b, TimeNs w = 0) {
  Model model = UniformModel(p * v, f, b, kAct);
  if (w > 0) {
    for (Layer& layer : model.layers) layer.profiles[0].backward_weight_ns = w;
  }
  return model;
}

SimResult SimulateOk(const Model& model, const Schedule& s) {
  auto r = Simulate(model, IdealCluster(), s, SimOptions{});
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : SimResult{};
}

std::vector<int> Peaks(const SimResult& r) {
  std::vector<int> peaks;
  for (const StageResult& s : r.per_rank) peaks.push_back(s.peak_inflight_microbatches);
  return peaks;
}

TEST(ScheduleZooInterleavedPyTorch, MatchesPyTorchRankByRank) {
  ASSERT_GT(std::size(kFixtures), 80u);
  for (const Fixture& f : kFixtures) {
    SCOPED_TRACE(::testing::Message() << f.kind << " p=" << f.p << " m=" << f.m << " v=" << f.v);
    auto kind = ParseScheduleKind(f.kind);
    ASSERT_TRUE(kind.ok());
    Schedule s = MakeOk(*kind, f.p, f.m, f.v);
    ASSERT_EQ(s.num_ranks, f.p);
    EXPECT_EQ(RankOrder(s, f.rank), f.order) << "rank " << f.rank;
  }
}

// Issue 16's worked cases: at m = p PyTorch caps the warm-up at (v-1)p + 2(p-1-r) where
// Megatron-LM runs every forward first.
TEST(ScheduleZooInterleavedPyTorch, WarmupIsCappedAtMEqualsP) {
  Schedule s = MakeOk(ScheduleKind::kInterleaved1F1B, 4, 4, 2);
  EXPECT_THAT(RankOrder(s, 3), StartsWith("3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 "));
  SimResult r =
      SimulateOk(Layers(8, 2, kUnit, 2 * kUnit), MakeOk(ScheduleKind::kInterleaved1F1B, 8, 8, 2));
  const std::vector<int> peaks = Peaks(r);
  EXPECT_EQ(std::vector<int>(peaks.begin() + 4, peaks.end()), (std::vector<int>{15, 13, 11, 9}));
  // Ranks 0-3 would warm up with 16 or more forwards: capped at m·v = 16.
  EXPECT_EQ(std::vector<int>(peaks.begin(), peaks.begin() + 4), (std::vector<int>{16, 16, 16, 16}));
}

// m(F+B) + (p-1)(F+B)/v with F = 1, B = 2 per chunk op, whatever m, as long as each round has
// at least p micro-batches: m = p, m = 10 at p = 4 (two rounds of 5), m = 9 (rounds of 5 and 4,
// pipecast's extension where PyTorch refuses).
TEST(ScheduleZooInterleavedPyTorch, EveryRoundOfAtLeastPHitsTheClosedForm) {
  struct Case {
    int p, v, m;
  };
  for (Case c : {Case{4, 2, 4}, Case{4, 2, 10}, Case{4, 2, 9}, Case{8, 2, 8}, Case{4, 3, 7},
                 Case{2, 4, 5}}) {
    SCOPED_TRACE(::testing::Message() << "p=" << c.p << " v=" << c.v << " m=" << c.m);
    SimResult r = SimulateOk(Layers(c.p, c.v, kUnit, 2 * kUnit),
                             MakeOk(ScheduleKind::kInterleaved1F1B, c.p, c.m, c.v));
    EXPECT_EQ(r.iteration_ns, (3 * c.v * c.m + 3 * (c.p - 1)) * kUnit);
  }
}

TEST(ScheduleZooInterleavedPyTorch, UnevenRoundsPutTheLargerOneFirst) {
  // p = 4, m = 9: rounds of 5 and 4. Rank 3 (warm-up (v-1)·5 = 5) runs micro-batches 0-4 on
  // chunk 0 (stage 3), then 0-4 on chunk 1 (stage 7) against the backwards.
  Schedule s = MakeOk(ScheduleKind::kInterleaved1F1B, 4, 9, 2);
  EXPECT_THAT(RankOrder(s, 3),
              StartsWith("3F0 3F1 3F2 3F3 3F4 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 7F4 7B4 3F5 3B0 "
                         "3F6 3B1 3F7 3B2 3F8 3B3 7F5 3B4 7F6 7B5"));
}

// Interleaved zero bubble with F = 1, I = 1, W = 1 per chunk op: each rank works 3·m·v, and the
// W ops it defers fill the cool-down that interleaved 1F1B (B = I + W) leaves idle.
TEST(ScheduleZooInterleavedPyTorch, ZeroBubbleSplitsEveryBackward) {
  Schedule s = MakeOk(ScheduleKind::kInterleavedZB, 4, 8, 2);
  EXPECT_TRUE(s.split_backward);
  SimResult r = SimulateOk(Layers(4, 2, kUnit, 2 * kUnit, kUnit), s);
  for (const StageResult& st : r.per_rank) EXPECT_EQ(st.busy_ns, 8 * 2 * 3 * kUnit);
  // Against interleaved 1F1B on the same model: the deferred W ops fill the cool-down.
  Schedule plain = MakeOk(ScheduleKind::kInterleaved1F1B, 4, 8, 2);
  SimResult rp = SimulateOk(Layers(4, 2, kUnit, 2 * kUnit, kUnit), plain);
  EXPECT_LT(r.iteration_ns, rp.iteration_ns);
}

// Interleaved zero bubble on the ideal cluster, m >= p, any v: each rank works v·m(F + I + W) and
// idles (p-1)·max(F, I, F + I - W), in chunk-op times. The last rank waits (p-1)F for its first
// forward, the first rank (p-1)I for its last input gradient, and where the deferred W ops are
// too short to hide the cool-down, ZB-H1's (p-1)(F + I - W) remains; PyTorch's order (matched
// rank by rank above) hides nothing more. Checked by hand at p = 2, F = I = W: one chunk op.
TEST(ScheduleZooInterleavedPyTorch, ZeroBubbleIdlesPMinusOneTimesTheLargestOfFIAndZBH1) {
  struct Times {
    int f, i, w;
  };
  for (Times t : {Times{1, 1, 1}, Times{2, 3, 1}, Times{1, 2, 1}, Times{3, 2, 1}, Times{1, 1, 2},
                  Times{1, 2, 4}, Times{2, 1, 4}, Times{1, 3, 5}, Times{4, 1, 1}}) {
    for (int p : {2, 3, 4, 8}) {
      for (int v : {2, 3}) {
        for (int m : {p, p + 1, 2 * p, 3 * p + 1}) {
          SCOPED_TRACE(::testing::Message() << "F=" << t.f << " I=" << t.i << " W=" << t.w
                                            << " p=" << p << " v=" << v << " m=" << m);
          const Model model = Layers(p, v, t.f * kUnit, (t.i + t.w) * kUnit, t.w * kUnit);
          const SimResult r = SimulateOk(model, MakeOk(ScheduleKind::kInterleavedZB, p, m, v));
          const int idle = std::max({t.f, t.i, t.f + t.i - t.w});
          EXPECT_EQ(r.iteration_ns, (v * m * (t.f + t.i + t.w) + (p - 1) * idle) * kUnit);
        }
      }
    }
  }
}

TEST(ScheduleZooInterleavedPyTorch, TakesEveryMicrobatchCount) {
  for (ScheduleKind kind : {ScheduleKind::kInterleaved1F1B, ScheduleKind::kInterleavedZB}) {
    for (int m : {1, 2, 3, 5, 6, 7, 9, 11}) {
      auto s = MakeSchedule(kind, 4, m, 2);
      EXPECT_TRUE(s.ok()) << ScheduleKindName(kind) << " m=" << m << ": " << s.status().message();
    }
  }
}

}  // namespace
}  // namespace pipecast
