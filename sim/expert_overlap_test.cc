// The expert all-to-all overlap (issue 26 item 3; docs/simulator.md "Expert all-to-all overlap"):
// an overlapped F&B pair hides each half's dispatch and combine behind the other half's compute
// (OverlappedPairNs with PairOverlap::expert_comm), DualPipe's and DualPipeV's pairs by default,
// and Megatron-LM's combined 1F1B (--overlap-moe-expert-parallel-comm) made from the 1F1B and
// interleaved orders (CombineForwardBackward). Held against hand-worked pairs, a hand-worked
// one-stage 1F1B steady state, Megatron's warm-up counts and both engines (the planner's choice:
// tests/expert_parallel_test.cc).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/cluster.h"
#include "sim/internal/reference_simulator.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"
#include "sim/training_config.h"

namespace pipecast {
namespace {

// Mixtral's routing at ep 8 on one H100 node, 4096 tokens: dispatch 203,342 ns and combine
// 197,173 ns, worked by hand in tests/expert_parallel_test.cc
// (ExpertParallelTest.MoeLayersPayDispatchAndCombineEachWay).
constexpr TimeNs kAllToAllNs = 203'342 + 197'173;  // 400,515 each way

Cluster H100() {
  Result<Cluster> c = ClusterPreset("h100-sxm");
  EXPECT_TRUE(c.ok());
  return *c;
}

// `n` MoE layers of `forward_ns` forward and `backward_ns` backward, Mixtral's routing
// (8 experts, top 2, hidden 4096), 4096 tokens per sample.
Model MoeLayers(int n, TimeNs forward_ns = 1'000'000, TimeNs backward_ns = 2'000'000) {
  Model m;
  m.name = "moe-layers";
  m.sequence_length = 4096;
  for (int i = 0; i < n; ++i) {
    Layer l;
    l.name = "block." + std::to_string(i);
    l.parameters = 100'000'000;
    LayerProfile p;
    p.microbatch_size = 1;
    p.forward_ns = forward_ns;
    p.backward_ns = backward_ns;
    p.backward_weight_ns = backward_ns / 4;  // for dualpipev's split backward
    p.activation_bytes = 1000;
    p.output_bytes = 1000;
    l.profiles.push_back(p);
    l.moe = MoeRouting{.experts = 8, .top_k = 2, .hidden = 4096, .expert_parameters = 70'000'000};
    m.layers.push_back(l);
  }
  return m;
}

// ep 8 folded over d = 8 (t = 1): one node's all-to-all.
SimOptions Ep8(ScheduleKind kind, ExpertOverlap overlap) {
  SimOptions o;
  o.config.schedule = kind;
  o.config.layout.data_parallel = 8;
  o.config.layout.expert_parallel = 8;
  o.config.overlap.expert_overlap = overlap;
  return o;
}

StageCost Costs(TimeNs forward_ns, TimeNs ep_forward_ns, TimeNs backward_ns,
                TimeNs ep_backward_ns) {
  StageCost c;
  c.forward_ns = forward_ns;
  c.ep_forward_ns = ep_forward_ns;
  c.backward_ns = backward_ns;
  c.ep_backward_ns = ep_backward_ns;
  return c;
}

constexpr PairOverlap kHidesExperts{.factor = 1.0, .expert_comm = true};

// F = 1 ms of compute + 400,515 ns of all-to-all, B = 2 ms + 400,515 ns. The forward's
// all-to-all hides behind the backward's 2 ms of compute, the backward's behind the forward's
// 1 ms: the pair lasts its compute, 3 ms, not F + B = 3,801,030 ns.
// One layer of the hand-worked two-layer pairs: 100 us before and 100 us of experts forward,
// 200 and 200 us backward, dispatch and combine of `all_to_all_us` each, the compute beside an
// all-to-all on 1 - `comm_sm_share` of the SMs.
PairLayerCost TwoLayerPairLayer(TimeNs all_to_all_us, double comm_sm_share) {
  return PairLayerCost{.pre_forward = 100'000,
                       .expert_forward = 100'000,
                       .pre_backward = 200'000,
                       .expert_backward = 200'000,
                       .dispatch = all_to_all_us * 1000,
                       .combine = all_to_all_us * 1000,
                       .comm_sm_share = comm_sm_share};
}

TEST(ExpertOverlapTest, AllToAllHiddenBehindThePartnersComputeHandWorked) {
  const StageCost f = Costs(1'000'000 + kAllToAllNs, kAllToAllNs, 0, 0);
  const StageCost b = Costs(0, 0, 2'000'000 + kAllToAllNs, kAllToAllNs);
  const PairHalvesNs hidden = OverlappedPairNs(f, b, OpKind::kBackward, kHidesExperts);
  EXPECT_EQ(hidden.forward, 1'000'000);
  EXPECT_EQ(hidden.backward, 2'000'000);
  // Off: the all-to-alls stay in their halves (only tensor-parallel communication hides).
  const PairHalvesNs off = OverlappedPairNs(f, b, OpKind::kBackward, PairOverlap{});
  EXPECT_EQ(off.forward, 1'000'000 + kAllToAllNs);
  EXPECT_EQ(off.backward, 2'000'000 + kAllToAllNs);
}

// F = 200 us of compute + 400,515 ns, B = 300 us + 400,515 ns: each all-to-all is longer than the
// partner's compute, so 400,515 - 300,000 = 100,515 of the forward's and 400,515 - 200,000 =
// 200,515 of the backward's show: 500,000 + 100,515 + 200,515 = 801,030 ns.
TEST(ExpertOverlapTest, AllToAllLongerThanThePartnersComputeShowsHandWorked) {
  const StageCost f = Costs(200'000 + kAllToAllNs, kAllToAllNs, 0, 0);
  const StageCost b = Costs(0, 0, 300'000 + kAllToAllNs, kAllToAllNs);
  const PairHalvesNs halves = OverlappedPairNs(f, b, OpKind::kBackward, kHidesExperts);
  EXPECT_EQ(halves.forward, 200'000 + 100'515);
  EXPECT_EQ(halves.backward, 300'000 + 200'515);
  EXPECT_EQ(halves.forward + halves.backward, 801'030);
}

// Tensor-parallel and expert communication hide together: F = 10 (2 TP + 3 EP, 5 compute),
// B = 20 (4 TP + 5 EP, 11 compute). The forward's 5 hide behind B's 11; of B's 9, 5 hide behind
// F's 5: 5 + 11 + 4 = 20.
TEST(ExpertOverlapTest, TensorAndExpertCommunicationHideTogether) {
  StageCost f = Costs(10, 3, 0, 0), b = Costs(0, 0, 20, 5);
  f.tp_forward_ns = 2;
  b.tp_backward_ns = 4;
  EXPECT_EQ(f.PairCommNs(OpKind::kForward, true), 5);
  EXPECT_EQ(b.PairCommNs(OpKind::kBackward, true), 9);
  EXPECT_EQ(b.PairCommNs(OpKind::kBackward, false), 4);
  EXPECT_EQ(b.PairCommNs(OpKind::kBackwardWeight, true), 0);
  const PairHalvesNs halves = OverlappedPairNs(f, b, OpKind::kBackward, kHidesExperts);
  EXPECT_EQ(halves.forward, 5);
  EXPECT_EQ(halves.backward, 15);
}

// Megatron-LM's combined 1F1B on one stage (combined_1f1b.py,
// combined_1f1b_schedule_for_no_pipelining): F0, (F1;B0), (F2;B1), (F3;B2), B3. With one MoE
// layer of 1 ms forward and 2 ms backward at ep 8: F = 1,400,515, B = 2,400,515 ns, each pair
// 3 ms (both all-to-alls hidden): 1,400,515 + 3 x 3,000,000 + 2,400,515 = 12,801,030 ns, against
// 4 x 3,801,030 = 15,204,120 in turn. Both engines agree.
TEST(ExpertOverlapTest, CombinedOneFOneBOnOneStageHandWorked) {
  const Model model = MoeLayers(1);
  Result<Schedule> plain = MakeSchedule(ScheduleKind::k1F1B, 1, 4);
  ASSERT_TRUE(plain.ok());
  Schedule combined = *plain;
  ASSERT_TRUE(CombineForwardBackward(&combined).ok());
  std::vector<std::string> names;
  for (const Action& a : combined.actions[0]) {
    names.push_back((a.overlapped ? "~" : "") + ActionName(a));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"0F0", "~0F1", "~0B0", "~0F2", "~0B1", "~0F3", "~0B2",
                                             "0B3"}));

  const SimOptions on = Ep8(ScheduleKind::k1F1B, ExpertOverlap::kOn);
  Result<SimResult> hidden = Simulate(model, H100(), combined, on);
  ASSERT_TRUE(hidden.ok()) << hidden.status().message();
  EXPECT_EQ(hidden->pipeline_ns, 1'400'515 + 3 * 3'000'000 + 2'400'515);
  EXPECT_TRUE(hidden->ep_overlap);
  EXPECT_TRUE(hidden->ep_combined_1f1b);
  Result<SimResult> reference = internal::ReferenceSimulate(model, H100(), combined, on);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  EXPECT_EQ(reference->pipeline_ns, hidden->pipeline_ns);
  EXPECT_EQ(reference->iteration_ns, hidden->iteration_ns);

  Result<SimResult> off =
      Simulate(model, H100(), *plain, Ep8(ScheduleKind::k1F1B, ExpertOverlap::kAuto));
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_EQ(off->pipeline_ns, 4 * (1'400'515 + 2'400'515));
  EXPECT_FALSE(off->ep_overlap);
}

// The layered rule (LayeredPairNs, Megatron-LM's TransformerLayerSchedulePlan.run at d98e8a64):
// a forward over layers X0, X1 beside a backward over Y0, Y1 (Y1 first). Every layer computes
// 100 + 100 us forward (before the dispatch, experts) and 200 + 200 us backward; X0 and Y1
// dispatch and combine 500 us each, X1 and Y0 50 us. In us, streams and events from 0:
//   layer pair 1 (X0 beside Y1): comm Cb(Y1) 0-500 | compute pre_f(X0) 0-100;
//     expert_b(Y1) waits for Cb: 500-700; D_f(X0) 500-1000; Db(Y1) 1000-1500;
//     expert_f(X0) waits for D_f: 1000-1100; C_f(X0) 1500-2000; pre_b(Y1) waits for Db: 1500-1700.
//     The comm stream is busy 0-2000: 2,000 us of all-to-all beside 600 us of compute, 1,400 show.
//   layer pair 2 (X1 beside Y0): Cb 2000-2050 | pre_f 2000-2100 (waits for C_f(X0));
//     expert_b 2100-2300; D_f 2100-2150; Db 2300-2350; expert_f 2300-2400; C_f 2400-2450;
//     pre_b 2400-2600. Its 200 us of all-to-all hide behind its 600 us of compute.
// The pair lasts 2,600 us; in turn F = 1,200 + 300 = 1,500 and B = 1,400 + 500 = 1,900, so
// 800 us hide, shared by the halves' all-to-alls (1,100 each): forward 1,100, backward 1,500.
// The whole-compute rule hides min(1,100, 800) + min(1,100, 400) = 1,200: 2,200 us.
TEST(ExpertOverlapTest, LayeredPairTwoLayersHandWorked) {
  const auto layer = [](TimeNs all_to_all_us) { return TwoLayerPairLayer(all_to_all_us, 0); };
  const std::vector<PairLayerCost> f{layer(500), layer(50)}, b{layer(50), layer(500)};
  EXPECT_EQ(LayeredPairNs(f, b, true), 2'600'000);
  // Each alone: a layer's nodes in turn.
  EXPECT_EQ(LayeredPairNs(f, {}, true), 1'500'000);
  EXPECT_EQ(LayeredPairNs({}, b, true), 1'900'000);

  StageCost fs = Costs(1'500'000, 1'100'000, 0, 0), bs = Costs(0, 0, 1'900'000, 1'100'000);
  const PairHalvesNs whole = OverlappedPairNs(fs, bs, OpKind::kBackward, kHidesExperts);
  EXPECT_EQ(whole.forward + whole.backward, 2'200'000);
  fs.pair_layers = f;
  bs.pair_layers = b;
  const PairHalvesNs layered = OverlappedPairNs(fs, bs, OpKind::kBackward, kHidesExperts);
  EXPECT_EQ(layered.forward, 1'100'000);
  EXPECT_EQ(layered.backward, 1'500'000);
  // Off: nothing of the all-to-alls hides, whatever the layers.
  const PairHalvesNs off = OverlappedPairNs(fs, bs, OpKind::kBackward, PairOverlap{});
  EXPECT_EQ(off.forward + off.backward, 3'400'000);
}

// The SMs the communication kernels take (ExpertCommSmShare): DeepEP's 20 of the GPU's SMs
// (deepseek-ai/DeepEP deep_ep/buffer.py `Buffer.num_sms = 20`; Megatron-LM d98e8a64
// token_dispatcher.py lines 1287-1292), none for NCCL's all-to-all (no fixed CTA count to cite)
// or a GPU of unknown SMs; the presets' SM counts.
TEST(ExpertOverlapTest, CommunicationSmShareOfTheGpu) {
  EXPECT_EQ(kDeepEpNormalKernelSms, 20);
  EXPECT_DOUBLE_EQ(ExpertCommSmShare(ExpertDispatcher::kDeepEp, 132), 20.0 / 132);
  EXPECT_DOUBLE_EQ(ExpertCommSmShare(ExpertDispatcher::kDeepEp, 108), 20.0 / 108);
  EXPECT_EQ(ExpertCommSmShare(ExpertDispatcher::kAllToAll, 132), 0);
  EXPECT_EQ(ExpertCommSmShare(ExpertDispatcher::kDeepEp, 0), 0);
  EXPECT_EQ(ClusterPreset("h100-sxm")->gpu.sms, 132);
  EXPECT_EQ(ClusterPreset("h200")->gpu.sms, 132);
  EXPECT_EQ(ClusterPreset("a100-80gb")->gpu.sms, 108);
  EXPECT_EQ(ClusterPreset("ideal")->gpu.sms, 0);
}

// The first hand-worked pair (LayeredPairTwoLayersHandWorked) with the all-to-alls holding a
// quarter of the SMs: a compute node beside one runs at 3/4 of its rate. In us:
//   layer pair 1: Cb(Y1) 0-500 | pre_f(X0) 0-133.33 (100 / 0.75); expert_b(Y1) 500-766.67
//     beside D_f(X0) 500-1000; Db(Y1) 1000-1500 beside expert_f(X0) 1000-1133.33; C_f(X0)
//     1500-2000 beside pre_b(Y1) 1500-1766.67. The comm stream still ends at 2,000: the slower
//     compute stays inside the all-to-alls it was already waiting for.
//   layer pair 2: Cb(Y0) 2000-2050 beside pre_f(X1) 2000-2112.5 (37.5 done by 2050, then 62.5 at
//     full rate); D_f 2112.5-2162.5 beside expert_b 2112.5-2325; Db 2325-2375 beside expert_f
//     2325-2437.5; C_f 2437.5-2487.5 beside pre_b 2437.5-2650. Each 50 us all-to-all costs its
//     compute node 12.5 us: 2,650 us where the SM-free replay gives 2,600.
// A half alone has no compute beside its all-to-alls (each waits for the node before it): as
// before, 1,500 and 1,900 us.
TEST(ExpertOverlapTest, LayeredPairComputeRunsOnTheSmsTheAllToAllsLeave) {
  const auto layer = [](TimeNs all_to_all_us) { return TwoLayerPairLayer(all_to_all_us, 0.25); };
  const std::vector<PairLayerCost> f{layer(500), layer(50)}, b{layer(50), layer(500)};
  EXPECT_EQ(LayeredPairNs(f, b, true), 2'650'000);
  EXPECT_EQ(LayeredPairNs(f, {}, true), 1'500'000);
  EXPECT_EQ(LayeredPairNs({}, b, true), 1'900'000);
  // The halves share what hides (3,400 - 2,650 = 750 us) by their all-to-alls, 1,100 each.
  StageCost fs = Costs(1'500'000, 1'100'000, 0, 0), bs = Costs(0, 0, 1'900'000, 1'100'000);
  fs.pair_layers = f;
  bs.pair_layers = b;
  const PairHalvesNs layered = OverlappedPairNs(fs, bs, OpKind::kBackward, kHidesExperts);
  EXPECT_EQ(layered.forward, 1'500'000 - 375'000);
  EXPECT_EQ(layered.backward, 1'900'000 - 375'000);
}

// The experts' share from the layer's FLOPs (StageCostTable): Mixtral's routing, 70M expert
// parameters over 8 experts, top 2, 4096 tokens: 2 x 4096 x 2 x 8.75M = 143.36 GFLOP of the
// layer's 286.72: half. Forward 1 ms: 500 us each side of the dispatch; backward 2 ms with a
// 500 us weight part: 750 + 750 us and 250 + 250 us. DeepEP on h100-sxm holds 20 of the 132 SMs
// (comm_sm_share 5/33): a compute node beside an all-to-all runs at 28/33 of its rate, so each
// all-to-all that lies wholly inside a compute node lengthens it by 5/33 of the all-to-all.
// On one stage's combined 1F1B each pair (hand-worked in us: Cb 0-203.342 | pre_f 0-530.809,
// 30.809 = 5/33 of Cb later; D_f 530.809-734.151 beside expert_b 530.809-1311.619; Db
// 1311.619-1508.792 beside expert_b_w 1311.619-1591.493; expert_f 1591.493-2091.493 alone; C_f
// 2091.493-2288.666 beside pre_b 2091.493-2871.368; pre_b_w 2871.368-3121.368): the 3 ms of
// compute + 5/33 x the four all-to-alls' 801.030 = 3,121,368 ns (3 ms with no SM share): the
// rate DualPipe's pairs take. Megatron-LM's combined 1F1B (this one-stage 1f1b with the overlap
// on) takes the fitted kCombined1F1BComputeLossBesideDeepEp = 0.60 instead: the same nodes, each
// all-to-all still inside a compute node, so the pair lasts 3 ms + 0.60 x 801.030 us =
// 3,480,618 ns (Cb 0-203.342 | pre_f 0-622.005, 0.60 x 203.342 later; D_f 622.005-825.347
// beside expert_b 622.005-1494.010; Db 1494.010-1691.183 beside expert_b_w 1494.010-1862.314;
// expert_f 1862.314-2362.314 alone; C_f 2362.314-2559.487 beside pre_b 2362.314-3230.618;
// pre_b_w 3230.618-3480.618).
TEST(ExpertOverlapTest, LayeredRuleFromTheLayersFlopsHandWorked) {
  Model model = MoeLayers(1);
  model.layers[0].forward_flops = 286.72e9;
  Result<Schedule> plain = MakeSchedule(ScheduleKind::k1F1B, 1, 4);
  ASSERT_TRUE(plain.ok());
  Schedule combined = *plain;
  ASSERT_TRUE(CombineForwardBackward(&combined).ok());
  const SimOptions on = Ep8(ScheduleKind::k1F1B, ExpertOverlap::kOn);
  const StageCost cost =
      StageCostTable(model, StageCostOptionsFor(on.config, H100())).Stage(StageLayers{0, 0});
  ASSERT_EQ(cost.pair_layers.size(), 1u);
  const PairLayerCost& l = cost.pair_layers[0];
  EXPECT_EQ(l.pre_forward, 500'000);
  EXPECT_EQ(l.expert_forward, 500'000);
  EXPECT_EQ(l.pre_backward, 750'000);
  EXPECT_EQ(l.expert_backward, 750'000);
  EXPECT_EQ(l.pre_backward_weight, 250'000);
  EXPECT_EQ(l.expert_backward_weight, 250'000);
  EXPECT_EQ(l.dispatch, 203'342);
  EXPECT_EQ(l.combine, 197'173);
  EXPECT_DOUBLE_EQ(l.comm_sm_share, 20.0 / 132);
  EXPECT_EQ(LayeredPairNs(cost.pair_layers, cost.pair_layers, true), 3'121'368);
  // Beside an input-gradient backward I (no weight-gradient parts): expert_b 530.809-1311.619,
  // Db 1311.619-1508.792 beside expert_f 1311.619-1841.493, C_f 1841.493-2038.666 beside pre_b
  // 1841.493-2621.368: the compute's 2.5 ms + 5/33 x 801.030 us, as above.
  EXPECT_EQ(LayeredPairNs(cost.pair_layers, cost.pair_layers, false), 2'621'368);
  std::vector<PairLayerCost> no_share = cost.pair_layers;
  no_share[0].comm_sm_share = 0;
  EXPECT_EQ(LayeredPairNs(no_share, no_share, true), 3'000'000);
  EXPECT_EQ(LayeredPairNs(no_share, no_share, false), 2'500'000);
  EXPECT_EQ(
      LayeredPairNs(cost.pair_layers, cost.pair_layers, true, kCombined1F1BComputeLossBesideDeepEp),
      3'480'618);
  EXPECT_EQ(LayeredPairNs(cost.pair_layers, cost.pair_layers, false,
                          kCombined1F1BComputeLossBesideDeepEp),
            2'980'618);
  // The override leaves a layer without DeepEP's SMs (NCCL's all-to-all, share 0) alone.
  EXPECT_EQ(LayeredPairNs(no_share, no_share, true, kCombined1F1BComputeLossBesideDeepEp),
            3'000'000);
  Result<SimResult> got = Simulate(model, H100(), combined, on);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->pipeline_ns, 1'400'515 + 3 * 3'480'618 + 2'400'515);
  Result<SimResult> reference = internal::ReferenceSimulate(model, H100(), combined, on);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  EXPECT_EQ(reference->iteration_ns, got->iteration_ns);
  // Without the layer's FLOPs the stage has no layers for the rule (the whole-compute one runs).
  EXPECT_TRUE(StageCostTable(MoeLayers(1), StageCostOptionsFor(on.config, H100()))
                  .Stage(StageLayers{0, 0})
                  .pair_layers.empty());
}

// The fitted rate (kCombined1F1BComputeLossBesideDeepEp, fitted on the Megatron-MoE-ModelZoo
// Qwen3-235B pair that the issue names: tests/moe_calibration_test.cc holds the fit) is
// Megatron-LM's implementation's: only its combined 1F1B (1f1b or interleaved with the overlap
// on) takes it; DualPipe's and DualPipeV's pairs keep DeepEP's SM share, and so do their
// figures (schedule_zoo_dualpipe_test.cc, the DeepSeek profile's pair).
TEST(ExpertOverlapTest, OnlyMegatronsCombinedOneFOneBTakesTheFittedRate) {
  EXPECT_DOUBLE_EQ(kCombined1F1BComputeLossBesideDeepEp, 0.60);
  EXPECT_GT(kCombined1F1BComputeLossBesideDeepEp,
            ExpertCommSmShare(ExpertDispatcher::kDeepEp, 132));
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B}) {
    EXPECT_TRUE(Ep8(kind, ExpertOverlap::kOn).config.Pairs().combined_1f1b)
        << ScheduleKindName(kind);
    EXPECT_FALSE(Ep8(kind, ExpertOverlap::kOff).config.Pairs().combined_1f1b);
    EXPECT_FALSE(Ep8(kind, ExpertOverlap::kAuto).config.Pairs().combined_1f1b);
  }
  for (ScheduleKind kind : {ScheduleKind::kDualPipe, ScheduleKind::kDualPipeV}) {
    for (ExpertOverlap o : {ExpertOverlap::kAuto, ExpertOverlap::kOn}) {
      const PairOverlap pairs = Ep8(kind, o).config.Pairs();
      EXPECT_TRUE(pairs.expert_comm) << ScheduleKindName(kind);
      EXPECT_FALSE(pairs.combined_1f1b) << ScheduleKindName(kind);
    }
  }
}

// Megatron-LM's warm-up with the overlap (schedules.py, get_pp_rank_microbatches): rank r runs
// (p - r - 1) x 2 + (v - 1) x p + 1 forwards before its first pair, one more than without;
// every later forward is paired with a backward of another micro-batch.
TEST(ExpertOverlapTest, CombinedInterleavedWarmUpIsMegatronsPlusOne) {
  const int p = 4, m = 8, v = 2;
  Result<Schedule> plain = MakeSchedule(ScheduleKind::kInterleaved1F1B, p, m, v);
  ASSERT_TRUE(plain.ok());
  Schedule combined = *plain;
  ASSERT_TRUE(CombineForwardBackward(&combined).ok());
  ASSERT_TRUE(ValidateSchedule(combined).ok());
  for (int r = 0; r < p; ++r) {
    const std::vector<Action>& list = combined.actions[r];
    int warmup = 0;
    while (!list[warmup].overlapped && list[warmup].kind == OpKind::kForward) ++warmup;
    EXPECT_EQ(warmup, (p - r - 1) * 2 + (v - 1) * p + 1) << "rank " << r;
    int pairs = 0;
    for (const Action& a : list) pairs += a.overlapped && a.kind == OpKind::kForward;
    EXPECT_EQ(pairs, m * v - warmup) << "rank " << r;
  }
  // A schedule with pairs already, or another order, is refused.
  EXPECT_FALSE(CombineForwardBackward(&combined).ok());
  Result<Schedule> zb = MakeSchedule(ScheduleKind::kZBH1, 2, 4);
  ASSERT_TRUE(zb.ok());
  EXPECT_FALSE(CombineForwardBackward(&*zb).ok());
}

// Interleaved 1F1B over 2 ranks, 2 chunks, 8 micro-batches of 8 MoE layers: every pair lasts
// what the model gives from the same stage costs, the step is shorter than without the
// overlap, and both engines agree op for op.
TEST(ExpertOverlapTest, CombinedInterleavedPairsLastWhatTheModelGivesInBothEngines) {
  const int p = 2, v = 2, m = 8;
  const Model model = MoeLayers(2 * p * v);
  Result<Schedule> plain = MakeSchedule(ScheduleKind::kInterleaved1F1B, p, m, v);
  ASSERT_TRUE(plain.ok());
  Schedule combined = *plain;
  ASSERT_TRUE(CombineForwardBackward(&combined).ok());
  SimOptions on = Ep8(ScheduleKind::kInterleaved1F1B, ExpertOverlap::kOn);
  for (int s = 0; s < p * v; ++s) on.partition.push_back(StageLayers{2 * s, 2 * s + 1});
  Result<SimResult> got = Simulate(model, H100(), combined, on);
  ASSERT_TRUE(got.ok()) << got.status().message();
  SimOptions off = on;
  off.config.overlap.expert_overlap = ExpertOverlap::kOff;
  Result<SimResult> without = Simulate(model, H100(), *plain, off);
  ASSERT_TRUE(without.ok()) << without.status().message();
  EXPECT_LT(got->pipeline_ns, without->pipeline_ns);

  const std::vector<StageCost> costs =
      StageCostTable(model, StageCostOptionsFor(on.config, H100())).Stages(on.partition);
  ASSERT_EQ(costs[0].ep_forward_ns, 2 * kAllToAllNs);
  std::vector<std::vector<OpRecord>> per_rank(p);
  for (const OpRecord& op : got->ops) per_rank[op.rank].push_back(op);
  int pairs = 0;
  for (const std::vector<OpRecord>& list : per_rank) {
    for (size_t k = 0; k + 1 < list.size(); ++k) {
      const OpRecord& f = list[k];
      if (!f.action.overlapped || f.action.kind != OpKind::kForward) continue;
      const OpRecord& b = list[k + 1];
      const PairHalvesNs want = OverlappedPairNs(costs[f.action.stage], costs[b.action.stage],
                                                 b.action.kind, kHidesExperts);
      EXPECT_EQ(f.end_ns - f.start_ns, want.forward) << ActionName(f.action);
      EXPECT_EQ(b.end_ns - b.start_ns, want.backward) << ActionName(b.action);
      // Each stage's 2 ms of forward compute hides its partner's 2 x 400,515 ns.
      EXPECT_EQ(want.forward + want.backward, 2'000'000 + 4'000'000);
      ++pairs;
    }
  }
  EXPECT_GT(pairs, 0);
  Result<SimResult> reference = internal::ReferenceSimulate(model, H100(), combined, on);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  EXPECT_EQ(reference->iteration_ns, got->iteration_ns);
  ASSERT_EQ(reference->ops.size(), got->ops.size());
  for (size_t k = 0; k < got->ops.size(); ++k) {
    EXPECT_EQ(reference->ops[k].start_ns, got->ops[k].start_ns);
    EXPECT_EQ(reference->ops[k].end_ns, got->ops[k].end_ns);
  }
}

// DualPipeV's pairs are made to hide the all-to-all (deepseek-ai/DualPipe): auto turns the
// overlap on there; off leaves the all-to-alls in their halves. Both engines agree either way.
// And with the layers' FLOPs given (the layered rule): both engines agree, and the pairs still
// hide part of the all-to-alls.
TEST(ExpertOverlapTest, DualPipeVHidesTheAllToAllByDefaultLayered) {
  const int p = 2, m = 8;
  Model model = MoeLayers(2 * p);
  for (Layer& l : model.layers) l.forward_flops = 286.72e9;
  Result<Schedule> sched = MakeSchedule(ScheduleKind::kDualPipeV, p, m, 2);
  ASSERT_TRUE(sched.ok());
  TimeNs on_ns = 0;
  for (ExpertOverlap overlap : {ExpertOverlap::kAuto, ExpertOverlap::kOff}) {
    const SimOptions o = Ep8(ScheduleKind::kDualPipeV, overlap);
    Result<SimResult> got = Simulate(model, H100(), *sched, o);
    ASSERT_TRUE(got.ok()) << got.status().message();
    Result<SimResult> reference = internal::ReferenceSimulate(model, H100(), *sched, o);
    ASSERT_TRUE(reference.ok()) << reference.status().message();
    EXPECT_EQ(reference->iteration_ns, got->iteration_ns);
    if (overlap == ExpertOverlap::kAuto) {
      on_ns = got->pipeline_ns;
    } else {
      EXPECT_GT(got->pipeline_ns, on_ns);
    }
  }
}

TEST(ExpertOverlapTest, DualPipeVHidesTheAllToAllByDefault) {
  const int p = 2, m = 8;
  const Model model = MoeLayers(2 * p);
  Result<Schedule> sched = MakeSchedule(ScheduleKind::kDualPipeV, p, m, 2);
  ASSERT_TRUE(sched.ok());
  TimeNs auto_ns = 0;
  for (ExpertOverlap overlap : {ExpertOverlap::kAuto, ExpertOverlap::kOff}) {
    const SimOptions o = Ep8(ScheduleKind::kDualPipeV, overlap);
    Result<SimResult> got = Simulate(model, H100(), *sched, o);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->ep_overlap, overlap == ExpertOverlap::kAuto);
    EXPECT_FALSE(got->ep_combined_1f1b);
    Result<SimResult> reference = internal::ReferenceSimulate(model, H100(), *sched, o);
    ASSERT_TRUE(reference.ok()) << reference.status().message();
    EXPECT_EQ(reference->iteration_ns, got->iteration_ns);
    if (overlap == ExpertOverlap::kAuto) {
      auto_ns = got->pipeline_ns;
    } else {
      EXPECT_GT(got->pipeline_ns, auto_ns);
    }
  }
}

// Where Megatron-LM refuses its overlap (transformer_config.py), --ep-overlap on is refused with
// the flag named: ep of 1, a schedule without pairs to make, 1f1b over a pipeline, full
// recomputation with the combined 1F1B.
TEST(ExpertOverlapTest, RefusedWhereItCannotRunWithTheFlagNamed) {
  TrainingConfig c = Ep8(ScheduleKind::kInterleaved1F1B, ExpertOverlap::kOn).config;
  EXPECT_TRUE(c.Validate().ok());
  TrainingConfig ep1 = c;
  ep1.layout.expert_parallel = 1;
  EXPECT_NE(ep1.Validate().message().find("--ep-overlap on needs --expert-parallel"),
            std::string::npos);
  TrainingConfig zb = c;
  zb.schedule = ScheduleKind::kZBH1;
  EXPECT_NE(zb.Validate().message().find("--ep-overlap on with --schedule zb-h1"),
            std::string::npos)
      << zb.Validate().message();
  TrainingConfig full = c;
  full.recompute = Recompute::kFull;
  EXPECT_NE(full.Validate().message().find("--recompute full"), std::string::npos);
  // 1f1b over two stages: refused where p is known, at the schedule's.
  Result<Schedule> two = MakeSchedule(ScheduleKind::k1F1B, 2, 4);
  ASSERT_TRUE(two.ok());
  Result<SimResult> r =
      Simulate(MoeLayers(2), H100(), *two, Ep8(ScheduleKind::k1F1B, ExpertOverlap::kOn));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("use --schedule interleaved"), std::string::npos)
      << r.status().message();
  // Auto and off never refuse.
  TrainingConfig off = zb;
  off.overlap.expert_overlap = ExpertOverlap::kAuto;
  EXPECT_TRUE(off.Validate().ok());
}

}  // namespace
}  // namespace pipecast
