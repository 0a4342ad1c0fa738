#include "sim/simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "formats/schedule_text.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::B;
using ::pipecast::test_util::CustomSchedule;
using ::pipecast::test_util::F;
using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;
using ::testing::HasSubstr;

constexpr TimeNs kF = 1000 * kNsPerUs;  // 1 ms forward per stage
constexpr TimeNs kB = 2000 * kNsPerUs;  // 2 ms backward per stage
constexpr Bytes kAct = 100 * kMiB;

SimResult SimulateOk(ScheduleKind kind, int p, int m, const Cluster& cluster = IdealCluster(),
                     const Model& model = {}, SimOptions opts = {}) {
  Model mdl = model.layers.empty() ? UniformModel(p, kF, kB, kAct) : model;
  auto sched = MakeSchedule(kind, p, m);
  EXPECT_TRUE(sched.ok()) << sched.status().message();
  auto r = Simulate(mdl, cluster, *sched, opts);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : SimResult{};
}

TEST(SimulatorClosedForm, NaiveTakesMTimesPTimesFPlusB) {
  for (int p : {1, 2, 4, 8}) {
    for (int m : {1, 3, 8}) {
      SimResult r = SimulateOk(ScheduleKind::kNaive, p, m);
      EXPECT_EQ(r.iteration_ns, int64_t{m} * p * (kF + kB)) << "p=" << p << " m=" << m;
      EXPECT_NEAR(r.bubble_ratio, (p - 1.0) / p, 1e-12);
      for (const StageResult& s : r.per_rank) EXPECT_EQ(s.peak_inflight_microbatches, 1);
    }
  }
}

TEST(SimulatorClosedForm, WorkedCaseNaiveP4M1Is12WithBubble075) {
  SimResult r = SimulateOk(ScheduleKind::kNaive, 4, 1);
  EXPECT_EQ(r.iteration_ns, 12 * kF);
  EXPECT_DOUBLE_EQ(r.bubble_ratio, 0.75);
}

TEST(SimulatorClosedForm, GPipeAnd1F1BTakeMPlusPMinus1TimesFPlusB) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    for (int p : {1, 2, 4, 8}) {
      for (int m : {1, 2, 3, 4, 8, 16}) {  // below, equal to and above p
        SimResult r = SimulateOk(kind, p, m);
        SCOPED_TRACE(::testing::Message() << ScheduleKindName(kind) << " p=" << p << " m=" << m);
        EXPECT_EQ(r.iteration_ns, int64_t{m + p - 1} * (kF + kB));
        EXPECT_NEAR(r.bubble_ratio, (p - 1.0) / (m + p - 1), 1e-12);
        EXPECT_NEAR(r.bubble_fraction_of_ideal, (p - 1.0) / m, 1e-12);
        for (const StageResult& s : r.per_rank) {
          EXPECT_EQ(s.busy_ns, m * (kF + kB));
          EXPECT_NEAR(s.bubble_ratio, (p - 1.0) / (m + p - 1), 1e-12);
        }
      }
    }
  }
}

TEST(SimulatorClosedForm, GPipeHoldsAllMicrobatchesOnEveryStage) {
  SimResult r = SimulateOk(ScheduleKind::kGPipe, 4, 8);
  EXPECT_EQ(r.iteration_ns, 33 * kF);  // docs/schedules.md worked case
  for (const StageResult& s : r.per_rank) {
    EXPECT_EQ(s.peak_inflight_microbatches, 8);
    EXPECT_EQ(s.memory.activations_peak, 8 * kAct);
  }
}

TEST(SimulatorClosedForm, OneFOneBHoldsMinOfPMinusSAndM) {
  for (int p : {2, 4, 8}) {
    for (int m : {1, 2, 3, 8, 16}) {
      SimResult r = SimulateOk(ScheduleKind::k1F1B, p, m);
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(r.per_rank[s].peak_inflight_microbatches, std::min(p - s, m))
            << "p=" << p << " m=" << m << " s=" << s;
        EXPECT_EQ(r.per_rank[s].memory.activations_peak, std::min(p - s, m) * kAct);
      }
    }
  }
}

TEST(SimulatorClosedForm, WorkedCase1F1BP4M3) {
  SimResult r = SimulateOk(ScheduleKind::k1F1B, 4, 3);
  EXPECT_EQ(r.iteration_ns, 18 * kF);
  std::vector<int> peaks;
  for (const StageResult& s : r.per_rank) peaks.push_back(s.peak_inflight_microbatches);
  EXPECT_EQ(peaks, (std::vector<int>{3, 3, 2, 1}));
}

TEST(SimulatorHandWorked, SlowestStageSetsThePace) {
  // Stage 0: one layer (F=1, B=2); stage 1: two layers (F=2, B=4). GPipe, m=2.
  // rank0 F0 [0,1] F1 [1,2]; rank1 F0 [1,3] F1 [3,5] B0 [5,9] B1 [9,13];
  // rank0 B0 [9,11] B1 [13,15].
  Model model = UniformModel(3, kF, kB);
  SimOptions opts;
  opts.partition = {{0, 0}, {1, 2}};
  SimResult r = SimulateOk(ScheduleKind::kGPipe, 2, 2, IdealCluster(), model, opts);
  EXPECT_EQ(r.iteration_ns, 15 * kF);
  EXPECT_EQ(r.per_rank[0].busy_ns, 6 * kF);
  EXPECT_EQ(r.per_rank[1].busy_ns, 12 * kF);
  EXPECT_EQ(r.per_rank[1].first_start_ns, 1 * kF);
  EXPECT_EQ(r.per_rank[1].last_end_ns, 13 * kF);
  EXPECT_NEAR(r.per_rank[0].bubble_ratio, 1.0 - 6.0 / 15, 1e-12);
  EXPECT_NEAR(r.bubble_fraction_of_ideal, (9.0 + 3.0) / 18.0, 1e-12);
}

TEST(SimulatorHandWorked, TransferPaysLatencyPlusBytesOverBandwidth) {
  // 1 MB at 1 GB/s = 1 ms, plus 10 us latency, on each hop, both ways.
  Cluster c = IdealCluster();
  c.intra_node = Link{1.0, 10.0};
  Model model = UniformModel(2, kF, kB, 0, 1'000'000);
  SimResult r = SimulateOk(ScheduleKind::kGPipe, 2, 1, c, model);
  // rank0 F [0,1]; act arrives 2.010; rank1 F [2.010,3.010] B [3.010,5.010];
  // grad arrives 6.020; rank0 B [6.020, 8.020].
  EXPECT_EQ(r.iteration_ns, 8'020'000);
  ASSERT_EQ(r.transfers.size(), 2u);
  EXPECT_EQ(r.transfers[0].end_ns, 2'010'000);
  EXPECT_FALSE(r.transfers[0].gradient);
  EXPECT_EQ(r.transfers[1].start_ns, 5'010'000);
  EXPECT_EQ(r.transfers[1].end_ns, 6'020'000);
  EXPECT_TRUE(r.transfers[1].gradient);
  // The send buffer lives until arrival, the receive buffer until its consumer ends.
  EXPECT_EQ(r.per_rank[0].memory.comm_buffers_peak, 1'000'000);
  EXPECT_EQ(r.per_rank[1].memory.comm_buffers_peak, 1'000'000);
}

TEST(SimulatorHandWorked, TransfersShareALinkInArrivalOrder) {
  // Each 2 MB activation takes 2 ms on a 1 GB/s link; forwards take 1 ms,
  // so the second send waits for the first: [1,3] then [3,5].
  Cluster c = IdealCluster();
  c.intra_node = Link{1.0, 0.0};
  Model model = UniformModel(2, kF, kB, 0, 2'000'000);
  SimResult r = SimulateOk(ScheduleKind::kGPipe, 2, 2, c, model);
  ASSERT_GE(r.transfers.size(), 2u);
  EXPECT_EQ(r.transfers[0].start_ns, 1 * kF);
  EXPECT_EQ(r.transfers[1].ready_ns, 2 * kF);
  EXPECT_EQ(r.transfers[1].start_ns, 3 * kF);
  EXPECT_EQ(r.transfers[1].end_ns, 5 * kF);
}

TEST(SimulatorHandWorked, InterNodeHopUsesTheSlowerLink) {
  Cluster c = IdealCluster();
  c.gpus_per_node = 1;  // every hop crosses nodes
  c.intra_node = Link{1000.0, 0.0};
  c.inter_node = Link{1.0, 0.0};
  Model model = UniformModel(2, kF, kB, 0, 1'000'000);
  SimResult r = SimulateOk(ScheduleKind::kGPipe, 2, 1, c, model);
  // F 1 + act 1 + F 1 + B 2 + grad 1 + B 2 = 8 ms.
  EXPECT_EQ(r.iteration_ns, 8 * kF);
}

TEST(SimulatorHandWorked, RingAllReduceAfterTheFlushAndOptimizerStep) {
  // 1 layer of 50M parameters per stage: 100 MB of bf16 gradients. d=2 in one
  // node at 100 GB/s, 5 us latency: 2·5 us + 2·(1/2)·100 MB / 100 GB/s = 1.010 ms.
  Cluster c = IdealCluster();
  c.intra_node = Link{100.0, 5.0};
  Model model = UniformModel(2, kF, kB, 0, 0, 50'000'000);
  SimOptions opts;
  opts.config.memory.gradient_bytes_per_param = 2;  // bf16 main gradients (--grad-dtype bf16)
  opts.config.layout.data_parallel = 2;
  opts.config.optimizer_step.time_ns = 500'000;
  SimResult r = SimulateOk(ScheduleKind::k1F1B, 2, 4, c, model, opts);
  // The 5 us latency sits on four hops of 1F1B's critical path (p=2, m=4:
  // F0 act, B0 grad, F2 act, B3 grad): 15 ms + 4 x 5 us.
  EXPECT_EQ(r.pipeline_ns, 5 * (kF + kB) + 20'000);
  EXPECT_EQ(r.per_rank[0].allreduce_ns, 1'010'000);
  EXPECT_EQ(r.allreduce_ns, 1'010'000);
  // Rank 0 ends last; its all-reduce then the optimizer step close the iteration.
  EXPECT_EQ(r.iteration_ns, 5 * (kF + kB) + 20'000 + 1'010'000 + 500'000);
  EXPECT_EQ(r.global_batch, 8);
  EXPECT_NEAR(r.samples_per_s, 8 / (r.iteration_ns / 1e9), 1e-9);
}

TEST(SimulatorHandWorked, AllReduceAcrossNodesUsesInterNodeLink) {
  Cluster c = IdealCluster();
  c.gpus_per_node = 2;
  c.intra_node = Link{100.0, 0.0};
  c.inter_node = Link{10.0, 0.0};
  Model model = UniformModel(2, kF, kB, 0, 0, 50'000'000);
  SimOptions opts;
  opts.config.memory.gradient_bytes_per_param = 2;  // bf16 main gradients
  opts.config.layout.data_parallel = 2;             // replica 1 sits on GPUs 2-3: another node
  SimResult r = SimulateOk(ScheduleKind::k1F1B, 2, 2, c, model, opts);
  EXPECT_EQ(r.per_rank[0].allreduce_ns, 10'000'000);  // 100 MB at 10 GB/s
}

TEST(SimulatorHandWorked, MemoryBreakdown) {
  // 2 layers per stage, 10M parameters each: 20M per stage at the default
  // 2 + 4 + 12 bytes (bf16 parameters, fp32 main gradients, Adam).
  Model model = UniformModel(4, kF, kB, kAct, 0, 10'000'000);
  model.layers[1].profiles[0].workspace_bytes = 7 * kMiB;
  SimResult r = SimulateOk(ScheduleKind::k1F1B, 2, 4, IdealCluster(), model);
  const StageResult& s0 = r.per_rank[0];
  EXPECT_EQ(s0.memory.weights, 40'000'000);
  EXPECT_EQ(s0.memory.gradients, 80'000'000);
  EXPECT_EQ(s0.memory.optimizer, 240'000'000);
  EXPECT_EQ(s0.memory.activations_peak, 2 * 2 * kAct);  // 2 in flight x 2 layers
  EXPECT_EQ(s0.memory.workspace_peak, 7 * kMiB);
  EXPECT_EQ(s0.peak_memory_bytes, 360'000'000 + 4 * kAct + 7 * kMiB);
  EXPECT_EQ(r.per_rank[1].memory.activations_peak, 2 * kAct);
}

TEST(SimulatorHandWorked, ActivationsLiveFromForwardStartToBackwardEnd) {
  SimResult r = SimulateOk(ScheduleKind::kGPipe, 1, 2);
  // F0 [0,1] F1 [1,2] B0 [2,4] B1 [4,6]: 2 live from 1 ms until 4 ms.
  const auto& tl = r.per_rank[0].memory_timeline;
  ASSERT_FALSE(tl.empty());
  Bytes at_3ms = 0;
  for (const MemorySample& m : tl)
    if (m.time_ns <= 3 * kF) at_3ms = m.activations;
  EXPECT_EQ(at_3ms, 2 * kAct);
  EXPECT_EQ(tl.Last().activations, 0);
}

TEST(SimulatorHandWorked, RecomputeCostsAForwardAndKeepsOnlyStageInputs) {
  // GPipe p=2 m=2: backward becomes B+F = 3 ms, so (m+p-1)(F+B+F) = 12 ms.
  // Stage 1 keeps two 1 MiB inputs plus one stage's activations while a
  // backward recomputes them; stage 0's input (tokens) counts as 0.
  Model model = UniformModel(2, kF, kB, kAct, kMiB);
  SimOptions opts;
  opts.config.recompute = Recompute::kFull;
  SimResult r = SimulateOk(ScheduleKind::kGPipe, 2, 2, IdealCluster(), model, opts);
  EXPECT_EQ(r.iteration_ns, 12 * kF);
  EXPECT_EQ(r.per_rank[1].memory.activations_peak, 2 * kMiB + kAct);
  EXPECT_EQ(r.per_rank[0].memory.activations_peak, kAct);
  EXPECT_EQ(r.per_rank[0].peak_inflight_microbatches, 2);
}

// L equal layers of kAct activations, each with a 1 MiB checkpoint, a
// 40 MiB attention core and W keeping 30 MiB.
Model LayersWithMemoryFields(int layers) {
  Model model = UniformModel(layers, kF, kB, kAct, kMiB);
  for (Layer& l : model.layers) {
    LayerProfile& p = l.profiles[0];
    p.backward_weight_ns = kB / 2;
    p.checkpoint_bytes = kMiB;
    p.attention_core_bytes = 40 * kMiB;
    p.attention_core_ns = kF / 4;
    p.weight_grad_bytes = 30 * kMiB;
  }
  return model;
}

TEST(SimulatorHandWorked, FullRecomputeAtOneStageHoldsInFlightInputsAndOneLayer) {
  // Given p = 1, L = 4 equal layers (100 MiB of activations, 1 MiB input
  // each) and full recomputation.
  SimOptions opts;
  opts.config.recompute = Recompute::kFull;
  const Model model = LayersWithMemoryFields(4);
  // When 1F1B runs 4 micro-batches (one in flight at a time), then the peak
  // is one micro-batch's 4 checkpoints + one layer's full activations, not
  // the 400 MiB of all four layers; the backward pays one more forward.
  SimResult one = SimulateOk(ScheduleKind::k1F1B, 1, 4, IdealCluster(), model, opts);
  EXPECT_EQ(one.per_rank[0].memory.activations_peak, 4 * kMiB + kAct);
  EXPECT_EQ(one.iteration_ns, 4 * (4 * kF + 4 * kB + 4 * kF));
  // When GPipe runs them (all four in flight), then 4 x 4 checkpoints + one layer.
  SimResult all = SimulateOk(ScheduleKind::kGPipe, 1, 4, IdealCluster(), model, opts);
  EXPECT_EQ(all.per_rank[0].memory.activations_peak, 16 * kMiB + kAct);
  EXPECT_TRUE(all.notes.empty());
}

TEST(SimulatorHandWorked, SelectiveRecomputeDropsTheAttentionCores) {
  // Given p = 1, L = 3, GPipe with 2 micro-batches, selective recomputation.
  SimOptions opts;
  opts.config.recompute = Recompute::kSelective;
  SimResult r =
      SimulateOk(ScheduleKind::kGPipe, 1, 2, IdealCluster(), LayersWithMemoryFields(3), opts);
  // Then each micro-batch keeps 3 x (100 - 40) MiB, and one core is rebuilt:
  // 2 x 180 + 40 MiB; the backward pays the three cores' forwards.
  EXPECT_EQ(r.per_rank[0].memory.activations_peak, 2 * 180 * kMiB + 40 * kMiB);
  EXPECT_EQ(r.iteration_ns, 2 * (3 * kF + 3 * kB + 3 * kF / 4));
}

// Each recomputation mode on p = 1, four equal blocks (100 MiB of
// activations, 1 MiB input, the per-op policy keeping 40 MiB and rerunning
// F / 5), GPipe with both micro-batches in flight: the peak is 2 x what F
// keeps + one rebuild, the iteration 2 x (4F + 4B + the rerun).
TEST(SimulatorHandWorked, EachCheckpointingModeKeepsAndRerunsItsClosedForm) {
  Model model = LayersWithMemoryFields(4);
  for (Layer& l : model.layers) {
    l.profiles[0].op_saved_bytes = 40 * kMiB;
    l.profiles[0].op_recompute_ns = kF / 5;
  }
  struct Case {
    const char* name;
    Recompute recompute;
    RecomputeLayers layers;
    Bytes held, rebuilt;
    TimeNs rerun;
  };
  const Case cases[] = {
      {"op", Recompute::kOp, {}, 4 * 40 * kMiB, 60 * kMiB, 4 * kF / 5},
      {"every:2", Recompute::kEvery, {2}, 2 * kAct + 2 * kMiB, kAct, 2 * kF},
      {"uniform:2",
       Recompute::kFull,
       {.method = RecomputeMethod::kUniform, .num_layers = 2},
       2 * kMiB,
       2 * kAct,
       4 * kF},
      {"block:1",
       Recompute::kFull,
       {.method = RecomputeMethod::kBlock, .num_layers = 1},
       kMiB + 3 * kAct,
       kAct,
       kF},
  };
  for (const Case& c : cases) {
    SimOptions opts;
    opts.config.recompute = c.recompute;
    opts.config.recompute_layers = c.layers;
    SimResult r = SimulateOk(ScheduleKind::kGPipe, 1, 2, IdealCluster(), model, opts);
    EXPECT_EQ(r.per_rank[0].memory.activations_peak, 2 * c.held + c.rebuilt) << c.name;
    EXPECT_EQ(r.iteration_ns, 2 * (4 * kF + 4 * kB + c.rerun)) << c.name;
    EXPECT_TRUE(r.notes.empty()) << c.name;
  }
}

TEST(SimulatorHandWorked, InputGradientFreesWhatTheWeightGradientDoesNotKeep) {
  // Given one layer (100 MiB, W keeps 30 MiB) and 0F0 0I0 0F1 0I1 0W0 0W1.
  const Model model = LayersWithMemoryFields(1);
  auto I = [](int m) { return Action{0, OpKind::kBackwardInput, m}; };
  auto W = [](int m) { return Action{0, OpKind::kBackwardWeight, m}; };
  Schedule s = CustomSchedule(2, {{F(0, 0), I(0), F(0, 1), I(1), W(0), W(1)}});
  auto r = Simulate(model, IdealCluster(), s, SimOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  // Then when 0F1 runs only 0W0's 30 MiB remain of micro-batch 0: 130 MiB,
  // not the 200 MiB of keeping both activations until W.
  EXPECT_EQ(r->per_rank[0].memory.activations_peak, 130 * kMiB);
  Model legacy = model;
  legacy.layers[0].profiles[0].weight_grad_bytes.reset();
  auto old = Simulate(legacy, IdealCluster(), s, SimOptions{});
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->per_rank[0].memory.activations_peak, 2 * kAct);
  ASSERT_EQ(old->notes.size(), 1u);
  EXPECT_THAT(old->notes[0], HasSubstr("give no weight_grad_bytes"));
  EXPECT_TRUE(old->costs_measured);  // an estimated memory rule, not an interpolated cost
}

TEST(SimulatorDeadlock, OpBeforeItsOwnForwardIsNamed) {
  Model model = UniformModel(1, kF, kB);
  Schedule s = CustomSchedule(1, {{B(0, 0), F(0, 0)}});
  auto r = Simulate(model, IdealCluster(), s, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("stuck are rank 0 at 0B0"));
  EXPECT_THAT(r.status().message(), HasSubstr("0B0 (rank 0) waits for the output of 0F0 (rank 0)"));
  EXPECT_THAT(r.status().message(), HasSubstr("0F0 (rank 0) runs after 0B0 on rank 0's list"));
}

TEST(SimulatorDeadlock, CycleAcrossRanksIsNamed) {
  Model model = UniformModel(2, kF, kB);
  Schedule s = CustomSchedule(
      2, {{F(0, 0), B(0, 0), F(0, 1), B(0, 1)}, {F(1, 1), F(1, 0), B(1, 0), B(1, 1)}});
  auto r = Simulate(model, IdealCluster(), s, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("can never finish"));
  EXPECT_THAT(r.status().message(), HasSubstr("stuck are rank 0 at 0B0, rank 1 at 1F1"));
  EXPECT_THAT(r.status().message(), HasSubstr("1F1 (rank 1) waits for the output of 0F1 (rank 0)"));
  EXPECT_THAT(r.status().message(), HasSubstr("0B0 (rank 0) waits for the output of 1B0 (rank 1)"));
  EXPECT_THAT(r.status().message(), HasSubstr("0F1 (rank 0) runs after 0B0 on rank 0's list"));
  EXPECT_THAT(r.status().message(), HasSubstr("1F0 (rank 1) runs after 1F1 on rank 1's list"));
}

TEST(SimulatorErrors, MoreStagesThanLayers) {
  Model model = UniformModel(2, kF, kB);
  auto s = MakeSchedule(ScheduleKind::k1F1B, 4, 4);
  auto r = Simulate(model, IdealCluster(), *s, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("4 stages but the model has only 2 layers"));
}

TEST(SimulatorErrors, IncompleteScheduleIsRejected) {
  Model model = UniformModel(1, kF, kB);
  Schedule s = CustomSchedule(2, {{F(0, 0), B(0, 0), F(0, 1)}});
  auto r = Simulate(model, IdealCluster(), s, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("0B1 is missing"));
}

TEST(SimulatorErrors, SplitBackwardNeedsWeightGradientTimes) {
  Model model = UniformModel(1, kF, kB);
  Schedule s = CustomSchedule(
      1, {{F(0, 0), Action{0, OpKind::kBackwardInput, 0}, Action{0, OpKind::kBackwardWeight, 0}}});
  auto r = Simulate(model, IdealCluster(), s, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("backward_weight_us"));
}

TEST(SimulatorErrors, BadOptions) {
  Model model = UniformModel(2, kF, kB);
  auto s = MakeSchedule(ScheduleKind::k1F1B, 2, 2);
  SimOptions opts;
  opts.config.microbatch_size = 0;
  EXPECT_THAT(Simulate(model, IdealCluster(), *s, opts).status().message(),
              HasSubstr("--microbatch-size"));
  opts = SimOptions{};
  opts.partition = {{0, 0}, {2, 3}};
  EXPECT_THAT(Simulate(model, IdealCluster(), *s, opts).status().message(),
              HasSubstr("partition stage 1"));
}

TEST(SimulatorCosts, AnalyticEstimatesAreNotMeasuredCosts) {
  // Given a model whose source is the analytic profiler, at a profiled size,
  // then the result says its costs are estimates, not measurements.
  Model model = UniformModel(2, kF, kB);
  SimResult measured = SimulateOk(ScheduleKind::kGPipe, 2, 2, IdealCluster(), model, {});
  EXPECT_TRUE(measured.costs_measured);
  model.source.method = "analytic";
  SimResult estimated = SimulateOk(ScheduleKind::kGPipe, 2, 2, IdealCluster(), model, {});
  EXPECT_FALSE(estimated.costs_measured);
  ASSERT_EQ(estimated.notes.size(), 1u);
  EXPECT_THAT(estimated.notes[0], HasSubstr("estimates of the analytic profiler"));
  EXPECT_EQ(estimated.iteration_ns, measured.iteration_ns);
}

TEST(SimulatorCosts, UnmeasuredSizeIsInterpolatedAndSaysSo) {
  Model model = UniformModel(2, kF, kB);
  for (Layer& l : model.layers) {
    LayerProfile p = l.profiles[0];
    p.microbatch_size = 4;
    p.forward_ns *= 4;
    p.backward_ns *= 4;
    l.profiles.push_back(p);
  }
  SimOptions opts;
  opts.config.microbatch_size = 2;  // between 1 and 4: F = 1 + (4-1)/3 = 2 ms
  SimResult r = SimulateOk(ScheduleKind::kGPipe, 2, 1, IdealCluster(), model, opts);
  EXPECT_FALSE(r.costs_measured);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_THAT(r.notes[0], HasSubstr("interpolated"));
  EXPECT_EQ(r.iteration_ns, 2 * (2 * kF + 2 * kB));
}

TEST(SimulatorPipeDream, SteadyStateHasNoBubbleAndStashesPMinusSVersions) {
  // Asynchronous 1F1B, no flush: in steady state each equal stage is busy
  // all the time, so an iteration takes m(F+B) = 8 x 3 ms.
  Model model = UniformModel(4, kF, kB, kAct, 0, 10'000'000);
  SimResult r = SimulateOk(ScheduleKind::kPipeDream, 4, 8, IdealCluster(), model);
  EXPECT_EQ(r.iterations_simulated, kPipeDreamIterations);
  EXPECT_EQ(r.microbatches, 8);
  EXPECT_EQ(r.global_batch, 8);
  EXPECT_EQ(r.iteration_ns, 8 * (kF + kB));
  EXPECT_EQ(r.first_iteration_ns, 33 * kF);  // the first iteration carries the fill
  EXPECT_NEAR(r.bubble_ratio, 0.0, 1e-12);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(r.per_rank[s].weight_versions, 4 - s);
    EXPECT_EQ(r.per_rank[s].memory.stashed_weights, (3 - s) * r.per_rank[s].memory.weights);
    EXPECT_EQ(r.per_rank[s].memory.activations_peak, (4 - s) * kAct);
  }
  ASSERT_FALSE(r.notes.empty());
  EXPECT_THAT(r.notes.back(), HasSubstr("training semantics change"));
}

TEST(SimulatorPipeDream, LaterIterationFinishingFirstKeepsAPositivePeriod) {
  // Found by fuzz_simulate: one stage, `0F0 0F1 0B1 0B0` as two iterations
  // of one micro-batch each. Iteration 1 (micro-batch 1) ends at 2F+B, before
  // iteration 0 ends at 2F+2B; an iteration ends only when the ones before it
  // have, and no period is shorter than a rank's work per iteration: F+B.
  Model model = UniformModel(1, kF, kB);
  Schedule s = CustomSchedule(2, {{F(0, 0), F(0, 1), B(0, 1), B(0, 0)}});
  s.iterations = 2;
  s.flush = false;
  auto r = Simulate(model, IdealCluster(), s, SimOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->first_iteration_ns, 2 * kF + 2 * kB);
  EXPECT_EQ(r->pipeline_ns, kF + kB);
  EXPECT_EQ(r->iteration_ns, kF + kB);
}

TEST(SimulatorCriticalPath, RunsThroughTheSlowStage) {
  // Stage 1 is three times slower than stages 0 and 2; GPipe, m=4.
  Model model = UniformModel(5, kF, kB);
  SimOptions opts;
  opts.partition = {{0, 0}, {1, 3}, {4, 4}};
  opts.critical_path = true;
  SimResult r = SimulateOk(ScheduleKind::kGPipe, 3, 4, IdealCluster(), model, opts);
  ASSERT_TRUE(r.critical_path.has_value());
  const CriticalPath& cp = *r.critical_path;
  EXPECT_EQ(cp.length_ns, r.pipeline_ns);
  EXPECT_EQ(cp.compute_ns + cp.communication_ns + cp.waiting_ns, cp.length_ns);
  EXPECT_EQ(cp.steps.front().start_ns, 0);
  EXPECT_EQ(cp.steps.back().end_ns, r.pipeline_ns);
  // Path: 0F0 (1) -> 1F0..1F3 (12) -> 2F3 (1) -> 2B0 (2) -> 1B0..1B3 (24)
  // -> 0B3 (2) = 42 ms, 36 of them on the slow stage.
  EXPECT_EQ(r.pipeline_ns, 42 * kF);
  EXPECT_EQ(cp.compute_by_rank[1], 4 * 9 * kF);
  EXPECT_GT(cp.compute_by_rank[1], cp.compute_by_rank[0] + cp.compute_by_rank[2]);
  for (size_t i = 1; i < cp.steps.size(); ++i) {
    EXPECT_EQ(cp.steps[i].start_ns, cp.steps[i - 1].end_ns);  // contiguous
  }
}

TEST(SimulatorCriticalPath, CountsTransfersOnThePath) {
  // GPipe p=2 m=1 with 1 ms hops: F, act, F, B, grad, B = 1+1+1+2+1+2.
  Cluster c = IdealCluster();
  c.intra_node = Link{1.0, 0.0};
  Model model = UniformModel(2, kF, kB, 0, 1'000'000);
  SimOptions opts;
  opts.critical_path = true;
  SimResult r = SimulateOk(ScheduleKind::kGPipe, 2, 1, c, model, opts);
  ASSERT_TRUE(r.critical_path.has_value());
  EXPECT_EQ(r.critical_path->compute_ns, 6 * kF);
  EXPECT_EQ(r.critical_path->communication_ns, 2 * kF);
  ASSERT_EQ(r.critical_path->communication_by_link.size(), 2u);
  EXPECT_EQ(r.critical_path->steps.size(), 6u);
}

TEST(SimulatorCriticalPath, OnlyWhenAskedFor) {
  // Given a timeline without critical_path, when simulated, then the records are there and the
  // path is not; asked for without a timeline, it is a bad option.
  Model model = UniformModel(2, kF, kB);
  SimResult r = SimulateOk(ScheduleKind::kGPipe, 2, 2, IdealCluster(), model);
  EXPECT_EQ(r.ops.size(), 8u);
  EXPECT_FALSE(r.critical_path.has_value());
  SimOptions opts;
  opts.record_timeline = false;
  opts.critical_path = true;
  Result<Schedule> s = MakeSchedule(ScheduleKind::kGPipe, 2, 2, 1);
  ASSERT_TRUE(s.ok());
  Result<SimResult> bad = Simulate(model, IdealCluster(), *s, opts);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("record_timeline"), std::string::npos);
}

// The per-schedule tests' case: p=4, m=8 (v=2 chunks where the kind takes them), uniform layers
// with weight-gradient times, on real links (2 GB/s, 3 us), so the order of transfers matters.
constexpr int kCaseRanks = 4, kCaseMicrobatches = 8;
int CaseChunks(ScheduleKind kind) { return UsesChunks(kind) ? 2 : 1; }
Model CaseModel(ScheduleKind kind) {
  Model model = UniformModel(kCaseRanks * CaseChunks(kind), kF, kB, kAct, 1'000'000);
  for (Layer& l : model.layers) l.profiles[0].backward_weight_ns = kB / 2;
  return model;
}
Cluster CaseCluster() {
  Cluster c = IdealCluster();
  c.intra_node = Link{2.0, 3.0};
  return c;
}

TEST(SimulatorRoundTrip, EveryBuiltinScheduleExportsAndReimportsToTheSameTimeline) {
  const Cluster c = CaseCluster();
  for (ScheduleKind kind : BuiltinScheduleKinds()) {
    const Model model = CaseModel(kind);
    auto built = MakeSchedule(kind, kCaseRanks, kCaseMicrobatches, CaseChunks(kind));
    ASSERT_TRUE(built.ok()) << built.status().message();
    const std::string text = ScheduleToText(*built);
    auto parsed = ParseScheduleText(text, "export.txt");
    ASSERT_TRUE(parsed.ok()) << ScheduleKindName(kind) << ": " << parsed.status().message();
    EXPECT_EQ(ScheduleToText(*parsed), text);
    EXPECT_EQ(parsed->actions, built->actions);
    EXPECT_EQ(parsed->stage_rank, built->stage_rank);
    auto a = Simulate(model, c, *built, SimOptions{});
    auto b = Simulate(model, c, *parsed, SimOptions{});
    ASSERT_TRUE(a.ok() && b.ok()) << ScheduleKindName(kind);
    ASSERT_EQ(a->ops.size(), b->ops.size());
    for (size_t i = 0; i < a->ops.size(); ++i) {
      EXPECT_EQ(a->ops[i].action, b->ops[i].action) << ScheduleKindName(kind);
      EXPECT_EQ(a->ops[i].start_ns, b->ops[i].start_ns) << ScheduleKindName(kind);
      EXPECT_EQ(a->ops[i].end_ns, b->ops[i].end_ns) << ScheduleKindName(kind);
    }
  }
}

TEST(SimulatorRecords, RankByRankInTheOrderTheyRanAndSendsInTheOrderSent) {
  // Given every built-in schedule on real links, when simulated with a timeline, then the ops
  // are rank by rank, each rank's exactly its schedule list in order, each starting no earlier
  // than the one before it ended; and the transfers are by sending rank, each rank's in the order
  // its producers ended, each link's in FIFO order (SimResult::ops, docs/simulator.md).
  const Cluster c = CaseCluster();
  for (ScheduleKind kind : BuiltinScheduleKinds()) {
    const Model model = CaseModel(kind);
    auto sched = MakeSchedule(kind, kCaseRanks, kCaseMicrobatches, CaseChunks(kind));
    ASSERT_TRUE(sched.ok()) << sched.status().message();
    auto r = Simulate(model, c, *sched, SimOptions{});
    ASSERT_TRUE(r.ok()) << ScheduleKindName(kind) << ": " << r.status().message();
    const std::string name = ScheduleKindName(kind);
    size_t i = 0;
    for (int rank = 0; rank < sched->num_ranks; ++rank) {
      TimeNs prev_end = 0;
      for (const Action& a : sched->actions[rank]) {
        ASSERT_LT(i, r->ops.size()) << name;
        const OpRecord& op = r->ops[i++];
        EXPECT_EQ(op.rank, rank) << name;
        EXPECT_EQ(op.action, a) << name << " rank " << rank;
        EXPECT_GE(op.start_ns, prev_end) << name << " " << ActionName(a);
        prev_end = op.end_ns;
      }
    }
    EXPECT_EQ(i, r->ops.size()) << name;
    ASSERT_FALSE(r->transfers.empty()) << name;
    std::map<std::pair<int, int>, const TransferRecord*> last_on_link;
    for (size_t k = 1; k < r->transfers.size(); ++k) {
      const TransferRecord& a = r->transfers[k - 1];
      const TransferRecord& b = r->transfers[k];
      ASSERT_LE(a.src_rank, b.src_rank) << name << " transfer " << k;
      if (a.src_rank == b.src_rank) {
        EXPECT_LE(a.ready_ns, b.ready_ns) << name << " " << k;
      }
    }
    for (const TransferRecord& t : r->transfers) {
      const TransferRecord*& last = last_on_link[{t.src_rank, t.dst_rank}];
      if (last != nullptr) {
        EXPECT_LE(last->start_ns, t.start_ns) << name;
        EXPECT_LE(last->end_ns, t.end_ns) << name;
      }
      last = &t;
    }
  }
}

TEST(SimulatorCriticalPath, OfOpsEndingTogetherTheLastStartedThenTheHighestRankWhateverTheOrder) {
  // Given ZB-H1 on the ideal cluster, where whole wavefronts share an instant and several ranks'
  // last ops end (and start) together, when the path is taken, then it ends at the op that
  // ends last, of those the one that started last, then the highest rank; and the same path
  // comes from the records with the ranks in the reverse order (each rank's ops kept in order).
  Model model = UniformModel(4, kF, kB);
  for (Layer& l : model.layers) l.profiles[0].backward_weight_ns = kB / 2;
  SimOptions opts;
  opts.critical_path = true;
  SimResult r = SimulateOk(ScheduleKind::kZBH1, 4, 8, IdealCluster(), model, opts);
  ASSERT_TRUE(r.critical_path.has_value());
  const OpRecord* want = &r.ops.front();
  int tied = 0;
  for (const OpRecord& op : r.ops) {
    if (std::tie(op.end_ns, op.start_ns, op.rank) >=
        std::tie(want->end_ns, want->start_ns, want->rank)) {
      want = &op;
    }
  }
  for (const OpRecord& op : r.ops)
    tied += op.end_ns == want->end_ns && op.start_ns == want->start_ns;
  ASSERT_GE(tied, 2) << "the case must have a tie to test";
  const CriticalStep& last = r.critical_path->steps.back();
  ASSERT_EQ(last.kind, CriticalStep::Kind::kCompute);
  EXPECT_EQ(&r.ops[last.op], want);
  EXPECT_EQ(last.rank, want->rank);

  auto sched = MakeSchedule(ScheduleKind::kZBH1, 4, 8);
  ASSERT_TRUE(sched.ok());
  std::vector<OpRecord> reversed;
  for (int rank = r.ranks - 1; rank >= 0; --rank) {
    for (const OpRecord& op : r.ops) {
      if (op.rank == rank) reversed.push_back(op);
    }
  }
  // And from the records in start order (each rank's ops in pieces, as before issue 17's fourth
  // round): the walk then tables each op's neighbours on its rank.
  std::vector<OpRecord> by_start = r.ops;
  std::stable_sort(by_start.begin(), by_start.end(),
                   [](const OpRecord& a, const OpRecord& b) { return a.start_ns < b.start_ns; });
  for (const std::vector<OpRecord>* order : {&reversed, &by_start}) {
    const CriticalPath again = ComputeCriticalPath(*sched, *order, r.transfers);
    ASSERT_EQ(again.steps.size(), r.critical_path->steps.size());
    for (size_t k = 0; k < again.steps.size(); ++k) {
      const CriticalStep& x = again.steps[k];
      const CriticalStep& y = r.critical_path->steps[k];
      EXPECT_EQ(x.kind, y.kind) << k;
      EXPECT_EQ(x.start_ns, y.start_ns) << k;
      EXPECT_EQ(x.end_ns, y.end_ns) << k;
      EXPECT_EQ(x.rank, y.rank) << k;
      if (x.op >= 0) {
        EXPECT_EQ((*order)[x.op].action, r.ops[y.op].action) << k;
      }
    }
    EXPECT_EQ(again.compute_by_rank, r.critical_path->compute_by_rank);
  }
}

TEST(SimulatorHandWorked, InterleavedPaysEveryChunkHopOnItsLink) {
  // p=2, v=2, m=2 (m == p: all forwards, then all backwards). Virtual stages
  // 0,2 on rank 0 and 1,3 on rank 1; each F 1 ms, B 2 ms; every hop 1 ms.
  // r0: 0F0 [0,1] 0F1 [1,2]; r1: 1F0 [2,3] 1F1 [3,4]; r0: 2F0 [4,5] 2F1 [5,6];
  // r1: 3F0 [6,7] 3F1 [7,8] 3B0 [8,10] 3B1 [10,12]; r0: 2B0 [11,13] 2B1 [13,15];
  // r1: 1B0 [14,16] 1B1 [16,18]; r0: 0B0 [17,19] 0B1 [19,21]. Ideal: 15 ms.
  Cluster c = IdealCluster();
  c.intra_node = Link{1.0, 0.0};
  Model model = UniformModel(4, kF, kB, 0, 1'000'000);
  auto sched = MakeSchedule(ScheduleKind::kInterleaved1F1B, 2, 2, 2);
  ASSERT_TRUE(sched.ok()) << sched.status().message();
  auto r = Simulate(model, c, *sched, SimOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->iteration_ns, 21 * kF);
  EXPECT_EQ(r->transfers.size(), 12u);  // 3 boundaries x 2 micro-batches x 2 directions
  auto ideal = Simulate(model, IdealCluster(), *sched, SimOptions{});
  EXPECT_EQ(ideal->iteration_ns, 15 * kF);  // m(F+B) + (p-1)(F+B)/v with F+B = 6 per rank
}

TEST(SimulatorDeterminism, SameInputSameTimeline) {
  Cluster c = IdealCluster();
  c.intra_node = Link{1.0, 3.0};
  Model model = UniformModel(8, kF, kB, kAct, 1'234'567);
  SimResult a = SimulateOk(ScheduleKind::k1F1B, 4, 16, c, model);
  SimResult b = SimulateOk(ScheduleKind::k1F1B, 4, 16, c, model);
  ASSERT_EQ(a.ops.size(), b.ops.size());
  for (size_t i = 0; i < a.ops.size(); ++i) {
    EXPECT_EQ(a.ops[i].action, b.ops[i].action);
    EXPECT_EQ(a.ops[i].start_ns, b.ops[i].start_ns);
  }
  EXPECT_EQ(a.iteration_ns, b.iteration_ns);
}

TEST(SimulatorThroughput, TokensAndMfuWhenTheModelAllows) {
  Model model = UniformModel(2, kF, kB);
  model.sequence_length = 1000;
  model.flops_per_sample = 1e12;
  Cluster c = IdealCluster();
  c.gpu.peak_tflops = 100;
  SimResult r = SimulateOk(ScheduleKind::kGPipe, 2, 2, c, model);
  // 3 ms x 3 = 9 ms for 2 samples.
  EXPECT_NEAR(r.samples_per_s, 2 / 9e-3, 1e-6);
  ASSERT_TRUE(r.tokens_per_s.has_value());
  EXPECT_NEAR(*r.tokens_per_s, 2000 / 9e-3, 1e-3);
  ASSERT_TRUE(r.tflops_per_gpu.has_value());
  EXPECT_NEAR(*r.tflops_per_gpu, 3e12 * (2 / 9e-3) / 2 / 1e12, 1e-9);
  EXPECT_NEAR(*r.mfu, *r.tflops_per_gpu / 100, 1e-12);
}

}  // namespace
}  // namespace pipecast
