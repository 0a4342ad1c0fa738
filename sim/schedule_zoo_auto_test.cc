// zb-auto and zb-v-auto, the cost-driven zero-bubble schedules: the zero-bubble paper's p = 8,
// m = 24 row (Qi et al. ICLR'24 Table 5, with Table 6's profiled F 18.522, B 18.086, W 9.337 and
// communication 0.601 ms, as zb_bubble_rate_test.cc sets them up), the memory limit held on
// every rank, complete and runnable orders, 1F1B's closed form when W costs nothing, ZB-V's
// order when given ZB-V's costs, and the errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim/schedule.h"
#include "sim/schedule_costs.h"
#include "sim/schedule_traits.h"
#include "sim/simulator.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;
using ::testing::HasSubstr;

using test_util::zb_paper::kB;
using test_util::zb_paper::kCommUs;
using test_util::zb_paper::kF;
using test_util::zb_paper::kW;
constexpr Bytes kAct = 1 << 30;  // one layer's activations per micro-batch

// The paper's row: p stages of one layer each, W's share of the activations `kept` (M_W / M_B).
Model PaperModel(int p, double kept) {
  Model model = test_util::zb_paper::StagesModel(p, kAct);
  for (Layer& layer : model.layers) {
    layer.profiles[0].weight_grad_bytes = static_cast<Bytes>(kept * kAct);
  }
  return model;
}

Cluster PaperCluster() { return test_util::zb_paper::HopCluster(); }

SimOptions OneLayerPerStage(int stages) {
  SimOptions o;
  for (int i = 0; i < stages; ++i) o.partition.push_back({i, i});
  return o;
}

struct Built {
  Schedule schedule;
  SimResult result;
};

// Builds `kind` from the configuration's own costs (ScheduleCostsFor) and simulates it.
Built BuildAndSimulate(ScheduleKind kind, const Model& model, const Cluster& cluster, int p, int m,
                       double limit) {
  const int chunks = TraitsOf(kind).fixed_chunks > 0 ? TraitsOf(kind).fixed_chunks : 1;
  const SimOptions options = OneLayerPerStage(p * chunks);
  auto costs = ScheduleCostsFor(model, cluster, options, kind, p, chunks, limit);
  EXPECT_TRUE(costs.ok()) << costs.status().message();
  auto s = MakeSchedule(kind, p, m, chunks, costs.ok() ? *costs : ScheduleCosts{});
  EXPECT_TRUE(s.ok()) << s.status().message();
  if (!s.ok()) return {};
  EXPECT_TRUE(ValidateSchedule(*s).ok());
  auto r = Simulate(model, cluster, *s, options);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return {*s, r.ok() ? *r : SimResult{}};
}

double PeakActivations(const SimResult& r, Bytes per_microbatch) {
  Bytes peak = 0;
  for (const StageResult& s : r.per_rank) peak = std::max(peak, s.memory.activations_peak);
  return static_cast<double>(peak) / static_cast<double>(per_microbatch);
}

TEST(ZbAuto, ReachesThePapersZB2pRow) {
  // Table 5, 1.5B, p = 8, m = 24: ZB-2p 0.0433 with a limit of 2p M_B, under the paper's memory
  // rule (I frees M_B - M_W). The 1.5B model's M_W / M_B is below 1/2 (32h against
  // 34h + 5as, Table 1); the heuristic reaches the figure for every share up to 1/2.
  for (double kept : {0.5, 0.25}) {
    SCOPED_TRACE(kept);
    const Built run = BuildAndSimulate(ScheduleKind::kZBAuto, PaperModel(8, kept), PaperCluster(),
                                       8, 24, /*limit=*/16);
    EXPECT_LE(run.result.zb_bubble_rate, 0.0433 + 5e-5);
    EXPECT_NEAR(run.result.zb_bubble_rate, 0.0433, 5e-5);
    EXPECT_LE(PeakActivations(run.result, kAct), 16.0);
  }
}

TEST(ZbAuto, ReachesThePapersZB1pRowAndNoWorseThanZBH1) {
  // ZB-1p (limit p) is 0.1585 in Table 5, ZB-H1's figure; the schedule holds at most p.
  const Model model = PaperModel(8, 1.0);
  const Built run = BuildAndSimulate(ScheduleKind::kZBAuto, model, PaperCluster(), 8, 24, 8);
  EXPECT_NEAR(run.result.zb_bubble_rate, 0.1585, 5e-5);
  EXPECT_LE(run.result.zb_bubble_rate, 0.1585 + 5e-5);
  EXPECT_LE(run.result.per_rank[0].peak_inflight_microbatches, 8);
  EXPECT_LE(PeakActivations(run.result, kAct), 8.0);
  auto h1 = MakeSchedule(ScheduleKind::kZBH1, 8, 24);
  ASSERT_TRUE(h1.ok());
  auto zbh1 = Simulate(model, PaperCluster(), *h1, OneLayerPerStage(8));
  ASSERT_TRUE(zbh1.ok());
  EXPECT_LE(run.result.iteration_ns, zbh1->iteration_ns);
}

TEST(ZbAuto, WithoutWhatIFreesTwicePIsNoWorseThanZBH2) {
  // When the model does not say what W keeps, I frees nothing (the simulator's rule): 2p
  // activations then buy less than the paper's 2p M_B. ZB-H2 holds 2p - 1 under that rule and
  // gives 0.1083; sail-sg's zb.py under the same rule (mem_f 1, mem_b 0, mem_w -1) gives 0.1015.
  const Built run =
      BuildAndSimulate(ScheduleKind::kZBAuto, PaperModel(8, 1.0), PaperCluster(), 8, 24, 16);
  EXPECT_LE(run.result.zb_bubble_rate, 0.1083);
  EXPECT_NEAR(run.result.zb_bubble_rate, 0.1015, 5e-5);
  for (const StageResult& s : run.result.per_rank) EXPECT_LE(s.peak_inflight_microbatches, 16);
}

TEST(ZbAuto, KeepsEveryLimitOnEveryShape) {
  // Given uneven stages and a communication cost, when built for each limit, then the order is
  // complete, runs to the end, and no rank ever holds more than the limit.
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 5, 8, 17}) {
      for (double limit : {1.0, 2.0, 1.0 * p, 2.0 * p}) {
        SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m << " limit=" << limit);
        Model model = UniformModel(p, 1'000'000, 2'000'000, kAct);
        for (int i = 0; i < p; ++i) {
          model.layers[i].profiles[0].forward_ns += 100'000 * i;
          model.layers[i].profiles[0].backward_weight_ns = 700'000;
        }
        Cluster cluster = IdealCluster();
        cluster.intra_node.latency_us = 50;
        const Built run = BuildAndSimulate(ScheduleKind::kZBAuto, model, cluster, p, m, limit);
        EXPECT_EQ(run.schedule.NumActions(), int64_t{3} * p * m);
        for (const StageResult& s : run.result.per_rank) {
          EXPECT_LE(s.peak_inflight_microbatches, limit);
        }
      }
    }
  }
}

TEST(ZbAuto, EqualsOneFOneBsClosedFormWhenWCostsNothing) {
  // W = 0, free communication, memory for all m: (m + p - 1)(F + B), 1F1B's closed form, the
  // least any schedule can take (rank 0 waits (p-1)F for the first I and B for the last).
  for (int p : {2, 4, 8}) {
    for (int m : {1, 4, 8, 24}) {
      SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m);
      Model model = UniformModel(p, 1'000'000, 2'000'000);
      for (Layer& layer : model.layers) layer.profiles[0].backward_weight_ns = 0;
      const Built run = BuildAndSimulate(ScheduleKind::kZBAuto, model, IdealCluster(), p, m, m);
      EXPECT_EQ(run.result.iteration_ns, TimeNs{m + p - 1} * 3'000'000);
    }
  }
}

TEST(ZbVAuto, IsZBVWithZBVsCostsAndLimit) {
  // sail-sg's runtime builds ZB-V with F = I = W = 1000, communication 1 and 2p chunk
  // activations; zb-v-auto given those costs and a limit of p rank activations is that order.
  for (int p : {2, 4, 8}) {
    for (int m : {1, 4, 8, 16}) {
      SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m);
      ScheduleCosts costs;
      costs.forward_ns.assign(2 * p, 1000);
      costs.input_grad_ns.assign(2 * p, 1000);
      costs.weight_grad_ns.assign(2 * p, 1000);
      costs.comm_ns = 1;
      costs.memory_limit = p;
      auto v_auto = MakeSchedule(ScheduleKind::kZBVAuto, p, m, 2, costs);
      auto zbv = MakeSchedule(ScheduleKind::kZBV, p, m, 2);
      ASSERT_TRUE(v_auto.ok()) << v_auto.status().message();
      ASSERT_TRUE(zbv.ok());
      EXPECT_EQ(v_auto->actions, zbv->actions);
    }
  }
}

TEST(ZbVAuto, KeepsTheLimitOnThePapersRow) {
  // Each chunk of the paper's row holds half a stage's activations; I frees nothing.
  Model model = PaperModel(16, 1.0);
  for (Layer& layer : model.layers) {
    layer.profiles[0].activation_bytes = kAct / 2;
    layer.profiles[0].weight_grad_bytes = kAct / 2;
  }
  for (double limit : {8.0, 10.0, 16.0}) {
    SCOPED_TRACE(limit);
    const Built run = BuildAndSimulate(ScheduleKind::kZBVAuto, model, PaperCluster(), 8, 24, limit);
    EXPECT_LE(PeakActivations(run.result, kAct), limit);
    EXPECT_LT(run.result.zb_bubble_rate, 0.1585);  // below ZB-1p with p or more
  }
}

TEST(ZbVAuto, BelowWhatItsGreedyNeedsNamesTheFlag) {
  // ZB-V's warm-up fills both chunks before the first input gradient: p rank activations.
  ScheduleCosts costs;
  costs.memory_limit = 3;
  auto s = MakeSchedule(ScheduleKind::kZBVAuto, 8, 24, 2, costs);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("--memory-limit 3"));
  EXPECT_THAT(s.status().message(), HasSubstr("v-half"));
}

TEST(ZbAuto, LimitBelowOneActivationNamesTheFlag) {
  ScheduleCosts costs;
  costs.memory_limit = 0.5;
  auto s = MakeSchedule(ScheduleKind::kZBAuto, 4, 8, 1, costs);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("--memory-limit is 0.5"));
  costs.memory_limit = -3;
  EXPECT_THAT(MakeSchedule(ScheduleKind::kZBVAuto, 4, 8, 2, costs).status().message(),
              HasSubstr("--memory-limit is -3"));
}

TEST(ZbAuto, CostsOfTheWrongSizeAreRefused) {
  ScheduleCosts costs;
  costs.forward_ns.assign(3, 1000);
  auto s = MakeSchedule(ScheduleKind::kZBAuto, 4, 8, 1, costs);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("3 entries for 4 virtual stages"));
}

TEST(ZbAuto, FromTheShapeAloneUsesTheDefaultLimit) {
  // Without costs: every op 1 ms, free communication, 2p activations (ZB-2p). F = I = W and no
  // communication leave only the (p-1)F fill: 3m + p - 1 ms.
  auto s = MakeSchedule(ScheduleKind::kZBAuto, 4, 16);
  ASSERT_TRUE(s.ok());
  Model model = UniformModel(4, 1'000'000, 2'000'000);
  for (Layer& layer : model.layers) layer.profiles[0].backward_weight_ns = 1'000'000;
  auto r = Simulate(model, IdealCluster(), *s, SimOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->iteration_ns, TimeNs{3 * 16 + 4 - 1} * 1'000'000);
  for (const StageResult& st : r->per_rank) EXPECT_LE(st.peak_inflight_microbatches, 8);
}

}  // namespace
}  // namespace pipecast
