// Stage costs worked by hand: three layers with distinct costs, one stage of
// layers 1-2 (so it has an input), with and without recomputation, at a
// measured and at an interpolated micro-batch size.
#include "sim/stage_costs.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

// Layer l, measured at micro-batch sizes 1 and 3: forward (l+1) us, backward
// 2(l+1) us of which (l+1)/2 us weight gradient, activations (l+1) MiB,
// output 10(l+1) KiB, workspace 100, 300, 200 bytes, 1000(l+1) parameters;
// size 3 costs three times size 1.
Model ThreeLayers() {
  Model m;
  m.name = "three";
  const Bytes workspace[] = {100, 300, 200};
  for (int l = 0; l < 3; ++l) {
    Layer layer;
    layer.name = "layer" + std::to_string(l);
    layer.parameters = 1000 * (l + 1);
    for (int size : {1, 3}) {
      LayerProfile p;
      p.microbatch_size = size;
      p.forward_ns = size * (l + 1) * kNsPerUs;
      p.backward_ns = size * 2 * (l + 1) * kNsPerUs;
      p.backward_weight_ns = size * (l + 1) * kNsPerUs / 2;
      p.activation_bytes = size * (l + 1) * kMiB;
      p.output_bytes = size * 10 * (l + 1) * kKiB;
      p.workspace_bytes = size * workspace[l];
      layer.profiles.push_back(p);
    }
    m.layers.push_back(layer);
  }
  return m;
}

constexpr StageLayers kLast{1, 2};

TEST(StageCosts, TimesAreSumsOfTheLayers) {
  // Given layers 1-2 at a measured size, without recomputation.
  const StageCostTable table(ThreeLayers(), test_util::CostOptions(1, Recompute::kOff));
  const StageCost c = table.Stage(kLast);
  // Then F = 2 + 3 us, B = 4 + 6 us, W = 1 + 1.5 us, I = B - W.
  EXPECT_EQ(c.forward_ns, 5000);
  EXPECT_EQ(c.backward_ns, 10000);
  EXPECT_EQ(c.backward_weight_ns, 2500);
  EXPECT_EQ(c.recompute_ns, 0);
  EXPECT_TRUE(c.has_backward_split);
  EXPECT_EQ(c.DurationNs(OpKind::kForward), 5000);
  EXPECT_EQ(c.DurationNs(OpKind::kBackward), 10000);
  EXPECT_EQ(c.DurationNs(OpKind::kBackwardInput), 7500);
  EXPECT_EQ(c.DurationNs(OpKind::kBackwardWeight), 2500);
  EXPECT_EQ(table.TrainingTimeNs(kLast), 15000);
  EXPECT_EQ(c.parameters, 5000);
}

TEST(StageCosts, WithoutRecomputeForwardHoldsAllActivations) {
  const StageCostTable table(ThreeLayers(), test_util::CostOptions(1, Recompute::kOff));
  const StageCost c = table.Stage(kLast);
  EXPECT_EQ(c.activation_bytes, 5 * kMiB);
  EXPECT_EQ(c.held_bytes, 5 * kMiB);
  EXPECT_EQ(c.recomputed_bytes, 0);
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kForward), 5 * kMiB);
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kBackward), 0);
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kBackwardInput), 0);
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kBackwardWeight), 0);
}

TEST(StageCosts, FullRecomputeWithoutCheckpointsHoldsTheStageInputAndRerunsTheForward) {
  // Given layers 1-2 with full recomputation.
  const StageCostTable table(ThreeLayers(), test_util::CostOptions(1, Recompute::kFull));
  const StageCost c = table.Stage(kLast);
  // Then F keeps only the input (layer 0's output, 10 KiB), B and I rebuild
  // the 5 MiB, and the backward pays one more forward.
  EXPECT_EQ(c.input_bytes, 10 * kKiB);
  EXPECT_EQ(c.held_bytes, 10 * kKiB);
  EXPECT_EQ(c.recomputed_bytes, 5 * kMiB);
  EXPECT_EQ(c.recompute_ns, 5000);
  EXPECT_EQ(c.backward_ns, 15000);
  EXPECT_EQ(c.DurationNs(OpKind::kBackwardInput), 12500);
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kForward), 10 * kKiB);
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kBackward), 5 * kMiB);
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kBackwardInput), 5 * kMiB);
  EXPECT_EQ(table.TrainingTimeNs(kLast), 20000);
}

TEST(StageCosts, FirstStageInputIsFree) {
  const StageCostTable table(ThreeLayers(), test_util::CostOptions(1, Recompute::kFull));
  const StageCost c = table.Stage(StageLayers{0, 0});
  EXPECT_EQ(c.input_bytes, 0);
  EXPECT_EQ(c.held_bytes, 0);
  EXPECT_EQ(c.recomputed_bytes, 1 * kMiB);
}

TEST(StageCosts, BAndWFreeWhatFAndTheRecomputationAllocated) {
  for (Recompute recompute : {Recompute::kOff, Recompute::kFull}) {
    const StageCost c =
        StageCostTable(ThreeLayers(), test_util::CostOptions(1, recompute)).Stage(kLast);
    const Bytes all = c.held_bytes + c.recomputed_bytes;
    EXPECT_EQ(c.ActivationsFreedAtEnd(OpKind::kForward), 0);
    EXPECT_EQ(c.ActivationsFreedAtEnd(OpKind::kBackward), all);
    EXPECT_EQ(c.ActivationsFreedAtEnd(OpKind::kBackwardInput), 0);  // I frees nothing
    EXPECT_EQ(c.ActivationsFreedAtEnd(OpKind::kBackwardWeight), all);
    EXPECT_FALSE(c.FreesActivations(OpKind::kBackwardInput));
    EXPECT_TRUE(c.FreesActivations(OpKind::kBackwardWeight));
  }
}

TEST(StageCosts, WorkspaceIsTheLargestLayerAndOutputTheLastLayers) {
  const StageCost c = StageCostTable(ThreeLayers(), StageCostOptions{}).Stage(kLast);
  EXPECT_EQ(c.workspace_bytes, 300);
  EXPECT_EQ(c.output_bytes, 30 * kKiB);
}

TEST(StageCosts, InterpolatedSizesAreNoted) {
  // Given size 2, halfway between the measured 1 and 3: costs are the mean.
  const StageCostTable table(ThreeLayers(), test_util::CostOptions(2, Recompute::kOff));
  const StageCost c = table.Stage(kLast);
  EXPECT_EQ(c.forward_ns, 10000);
  EXPECT_EQ(c.activation_bytes, 10 * kMiB);
  EXPECT_EQ(c.workspace_bytes, 600);
  ASSERT_EQ(table.Notes().size(), 1u);
  EXPECT_NE(table.Notes()[0].find("interpolated"), std::string::npos);
  EXPECT_TRUE(
      StageCostTable(ThreeLayers(), test_util::CostOptions(3, Recompute::kOff)).Notes().empty());
  ASSERT_EQ(
      StageCostTable(ThreeLayers(), test_util::CostOptions(6, Recompute::kOff)).Notes().size(), 1u);
}

TEST(StageCosts, StagesFollowThePartition) {
  const StageCostTable table(ThreeLayers(), test_util::CostOptions(1, Recompute::kFull));
  const std::vector<StageCost> costs = table.Stages({{0, 0}, {1, 2}});
  ASSERT_EQ(costs.size(), 2u);
  EXPECT_EQ(costs[1].held_bytes, costs[0].output_bytes);
  EXPECT_EQ(costs[0].forward_ns + costs[0].backward_ns, table.TrainingTimeNs({0, 0}));
}

// ThreeLayers() with the memory fields: layer l keeps a checkpoint of
// (l+1) x 64 KiB, has an attention core of (l+1) x 256 KiB that takes
// (l+1) x 100 ns to rerun, and its W keeps (l+1) x 768 KiB (less than its
// (l+1) MiB of activations) -- or, with `w_over`, (l+1) x 1.5 MiB (more).
Model WithMemoryFields(bool w_over = false) {
  Model m = ThreeLayers();
  for (int l = 0; l < 3; ++l) {
    for (LayerProfile& p : m.layers[l].profiles) {
      const int k = p.microbatch_size * (l + 1);
      p.checkpoint_bytes = k * 64 * kKiB;
      p.attention_core_bytes = k * 256 * kKiB;
      p.attention_core_ns = k * 100;
      p.weight_grad_bytes = w_over ? k * 1536 * kKiB : k * 768 * kKiB;
    }
  }
  return m;
}

TEST(StageCosts, FullRecomputeKeepsEachLayersCheckpointAndRebuildsOneLayerAtATime) {
  // Given layers 1-2 (2 and 3 MiB of activations) with checkpoints.
  const StageCostTable table(WithMemoryFields(), test_util::CostOptions(1, Recompute::kFull));
  const StageCost c = table.Stage(kLast);
  // Then F keeps both checkpoints (128 + 192 KiB), B rebuilds the largest
  // layer (3 MiB), and the backward pays one more forward (2 + 3 us).
  EXPECT_EQ(c.held_bytes, 320 * kKiB);
  EXPECT_EQ(c.recomputed_bytes, 3 * kMiB);
  EXPECT_EQ(c.recompute_ns, 5000);
  EXPECT_EQ(table.TrainingTimeNs(kLast), 20000);
  EXPECT_TRUE(table.Notes().empty());
}

TEST(StageCosts, SelectiveRecomputeDropsTheAttentionCoreAndRerunsIt) {
  const StageCostTable table(WithMemoryFields(), test_util::CostOptions(1, Recompute::kSelective));
  const StageCost c = table.Stage(kLast);
  // Then F keeps 5 MiB less the cores (512 + 768 KiB); B rebuilds the larger
  // core (768 KiB) at the cost of both cores' forwards (200 + 300 ns).
  EXPECT_EQ(c.held_bytes, 5 * kMiB - 1280 * kKiB);
  EXPECT_EQ(c.recomputed_bytes, 768 * kKiB);
  EXPECT_EQ(c.recompute_ns, 500);
  EXPECT_EQ(c.backward_ns, 10500);
  EXPECT_EQ(table.TrainingTimeNs(kLast), 15500);
  EXPECT_TRUE(table.Notes().empty());
}

TEST(StageCosts, SelectiveRecomputeWithoutAnAttentionCoreIsANoOpAndSaysSo) {
  Model flash = WithMemoryFields();
  for (Layer& layer : flash.layers) {
    for (LayerProfile& p : layer.profiles) {
      p.attention_core_bytes = 0;
      p.attention_core_ns = 0;
    }
  }
  const StageCostTable table(flash, test_util::CostOptions(1, Recompute::kSelective));
  const StageCost c = table.Stage(kLast);
  EXPECT_EQ(c.held_bytes, 5 * kMiB);
  EXPECT_EQ(c.recomputed_bytes, 0);
  EXPECT_EQ(c.recompute_ns, 0);
  ASSERT_EQ(table.Notes().size(), 1u);
  EXPECT_NE(table.Notes()[0].find("changes nothing"), std::string::npos);
}

// WithMemoryFields() with Megatron-LM's modules (--recompute-modules): layer
// l's norms' outputs are (l+1) x 128 KiB, rerun in (l+1) x 40 ns, its routed
// experts' activation (l+1) x 64 KiB, rerun in (l+1) x 10 ns, its MLA query, key
// and value (l+1) x 32 KiB, rerun in (l+1) x 20 ns, its dense MLP's inside (l+1) x
// 16 KiB, rerun in (l+1) x 30 ns.
Model WithModuleFields() {
  Model m = WithMemoryFields();
  for (int l = 0; l < 3; ++l) {
    for (LayerProfile& p : m.layers[l].profiles) {
      const int k = p.microbatch_size * (l + 1);
      p.layernorm_bytes = k * 128 * kKiB;
      p.layernorm_ns = k * 40;
      p.moe_act_bytes = k * 64 * kKiB;
      p.moe_act_ns = k * 10;
      p.mla_up_proj_bytes = k * 32 * kKiB;
      p.mla_up_proj_ns = k * 20;
      p.mlp_bytes = k * 16 * kKiB;
      p.mlp_ns = k * 30;
    }
  }
  return m;
}

StageCostTable SelectiveOf(const Model& model, unsigned modules) {
  StageCostOptions o = test_util::CostOptions(1, Recompute::kSelective);
  o.recompute_layers.modules = modules;
  return StageCostTable(model, o);
}

TEST(StageCosts, SelectiveRecomputeOfModulesDropsTheirOutputsAndRerunsThem) {
  // Given layers 1-2 (2 and 3 MiB) and --recompute-modules layernorm,moe_act.
  const StageCostTable table =
      SelectiveOf(WithModuleFields(), kRecomputeLayernorm | kRecomputeMoeAct);
  const StageCost c = table.Stage(kLast);
  // Then F keeps 5 MiB less both modules' outputs, (2 + 3) x (128 + 64) KiB =
  // 960 KiB (the attention cores stay: core_attn is not listed); B rebuilds
  // the larger layer's (576 KiB) and reruns (2 + 3) x (40 + 10) = 250 ns.
  EXPECT_EQ(c.held_bytes, 5 * kMiB - 960 * kKiB);
  EXPECT_EQ(c.recomputed_bytes, 576 * kKiB);
  EXPECT_EQ(c.recompute_ns, 250);
  EXPECT_EQ(c.backward_ns, 10250);
  EXPECT_EQ(table.TrainingTimeNs(kLast), 15250);
  EXPECT_TRUE(table.Notes().empty());
  // core_attn with layernorm: (2 + 3) x (256 + 128) KiB dropped, (2 + 3) x
  // (100 + 40) ns rerun.
  const StageCost both =
      SelectiveOf(WithModuleFields(), kRecomputeCoreAttn | kRecomputeLayernorm).Stage(kLast);
  EXPECT_EQ(both.held_bytes, 5 * kMiB - 1920 * kKiB);
  EXPECT_EQ(both.recompute_ns, 700);
  // core_attn alone is the default selective.
  const StageCost core = SelectiveOf(WithModuleFields(), kRecomputeCoreAttn).Stage(kLast);
  const StageCost plain = SelectiveOf(WithModuleFields(), 0).Stage(kLast);
  EXPECT_EQ(core.held_bytes, plain.held_bytes);
  EXPECT_EQ(core.recompute_ns, plain.recompute_ns);
  // DeepSeek-V3's mla_up_proj,mlp (Megatron-Bridge's recipe): (2 + 3) x (32 + 16)
  // KiB dropped, (2 + 3) x (20 + 30) ns rerun; the larger layer (3) rebuilds 144 KiB.
  const StageCost dsv3 =
      SelectiveOf(WithModuleFields(), kRecomputeMlaUpProj | kRecomputeMlp).Stage(kLast);
  EXPECT_EQ(dsv3.held_bytes, 5 * kMiB - 240 * kKiB);
  EXPECT_EQ(dsv3.recomputed_bytes, 144 * kKiB);
  EXPECT_EQ(dsv3.recompute_ns, 250);
}

TEST(StageCosts, SelectiveRecomputeOfModulesWithoutTheirFiguresIsOffAndSaysSo) {
  const StageCostTable table = SelectiveOf(WithMemoryFields(), kRecomputeLayernorm);
  const StageCost c = table.Stage(kLast);
  EXPECT_EQ(c.held_bytes, 5 * kMiB);
  EXPECT_EQ(c.recompute_ns, 0);
  ASSERT_EQ(table.Notes().size(), 1u);
  EXPECT_NE(table.Notes()[0].find("--recompute-modules layernorm"), std::string::npos);
}

TEST(StageCosts, RecomputeModulesParseAndRefuseWhatIsNotModelled) {
  Result<unsigned> both = ParseRecomputeModules("layernorm,moe_act");
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(*both, kRecomputeLayernorm | kRecomputeMoeAct);
  EXPECT_EQ(RecomputeModulesName(*both), "layernorm,moe_act");
  EXPECT_EQ(RecomputeSpec(Recompute::kSelective, {.modules = *both}),
            "selective:layernorm+moe_act");
  EXPECT_EQ(RecomputeSpec(Recompute::kSelective, {}), "selective");
  Result<unsigned> dsv3 = ParseRecomputeModules("mla_up_proj,mlp");
  ASSERT_TRUE(dsv3.ok());
  EXPECT_EQ(*dsv3, kRecomputeMlaUpProj | kRecomputeMlp);
  EXPECT_EQ(RecomputeModulesName(*dsv3), "mla_up_proj,mlp");
  Result<unsigned> shared = ParseRecomputeModules("layernorm,shared_experts");
  ASSERT_FALSE(shared.ok());
  EXPECT_NE(shared.status().message().find("'shared_experts' is not modelled"), std::string::npos);
  for (const char* bad : {"", "layernorm,", "norm", "layernorm moe_act"}) {
    Result<unsigned> parsed = ParseRecomputeModules(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("--recompute-modules"), std::string::npos);
  }
  EXPECT_TRUE(CheckRecompute(Recompute::kSelective, {.modules = kRecomputeMoeAct}).ok());
  const Status full = CheckRecompute(Recompute::kFull, {.modules = kRecomputeMoeAct});
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.message().find("with --recompute selective"), std::string::npos);
}

TEST(StageCosts, ModelsWithoutTheFieldsKeepTheOlderRulesWithANote) {
  // Given ThreeLayers() (no memory fields).
  const StageCostTable full(ThreeLayers(), test_util::CostOptions(1, Recompute::kFull));
  const StageCostTable selective(ThreeLayers(), test_util::CostOptions(1, Recompute::kSelective));
  const StageCostTable split(ThreeLayers(), test_util::CostOptions(1, Recompute::kOff, true));
  // Then full keeps the stage input, selective is off, I frees nothing.
  EXPECT_EQ(full.Stage(kLast).held_bytes, 10 * kKiB);
  EXPECT_EQ(selective.Stage(kLast).held_bytes, 5 * kMiB);
  EXPECT_EQ(selective.Stage(kLast).recompute_ns, 0);
  EXPECT_EQ(split.Stage(kLast).ActivationsFreedAtEnd(OpKind::kBackwardInput), 0);
  for (const StageCostTable* t : {&full, &selective, &split}) {
    ASSERT_EQ(t->Notes().size(), 1u);
    EXPECT_NE(t->Notes()[0].find("3 of 3 layers give no"), std::string::npos);
  }
}

TEST(StageCosts, InputGradientFreesWhatTheWeightGradientDoesNotNeed) {
  // Given layers 1-2 with W keeping 768 KiB per MiB of activations.
  const StageCost c = StageCostTable(WithMemoryFields(), test_util::CostOptions(1)).Stage(kLast);
  // Then F holds 5 MiB, I frees all but W's 3.75 MiB, W frees those.
  EXPECT_EQ(c.weight_grad_bytes, 3840 * kKiB);
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kBackwardInput), 0);
  EXPECT_EQ(c.ActivationsFreedAtEnd(OpKind::kBackwardInput), 5 * kMiB - 3840 * kKiB);
  EXPECT_EQ(c.ActivationsFreedAtEnd(OpKind::kBackwardWeight), 3840 * kKiB);
  EXPECT_TRUE(c.FreesActivations(OpKind::kBackwardInput));
  EXPECT_EQ(c.KeptAfter(OpKind::kBackwardInput), 3840 * kKiB);
  // A whole backward still frees everything.
  EXPECT_EQ(c.ActivationsFreedAtEnd(OpKind::kBackward), 5 * kMiB);
}

TEST(StageCosts, InputGradientAllocatesWhatTheWeightGradientNeedsBeyondTheForward) {
  // Given W keeping 7.5 MiB, more than the 5 MiB F kept (the gradients of
  // the outputs are new), and full recomputation (F keeps 320 KiB).
  const StageCost c =
      StageCostTable(WithMemoryFields(true), test_util::CostOptions(1, Recompute::kFull))
          .Stage(kLast);
  // Then I allocates one layer's rebuild (3 MiB) and W's bytes beyond the
  // checkpoints, and ends holding exactly W's 7.5 MiB.
  const Bytes w = 7680 * kKiB;
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kBackwardInput), 3 * kMiB + w - 320 * kKiB);
  EXPECT_EQ(c.held_bytes + c.ActivationsAtStart(OpKind::kBackwardInput) -
                c.ActivationsFreedAtEnd(OpKind::kBackwardInput),
            w);
  EXPECT_EQ(c.ActivationsFreedAtEnd(OpKind::kBackwardWeight), w);
}

TEST(StageCosts, RecomputeNamesRoundTrip) {
  for (Recompute r : {Recompute::kOff, Recompute::kSelective, Recompute::kFull}) {
    EXPECT_EQ(ParseRecompute(RecomputeName(r)), r);
  }
  EXPECT_FALSE(ParseRecompute("on").has_value());
}

TEST(StageCosts, RecomputeSpecsRoundTripAndRefuseBadNumbers) {
  Recompute r = Recompute::kOff;
  RecomputeLayers l;
  ASSERT_TRUE(ParseRecomputeSpec("op", &r, &l));
  EXPECT_EQ(r, Recompute::kOp);
  ASSERT_TRUE(ParseRecomputeSpec("every:3", &r, &l));
  EXPECT_EQ(r, Recompute::kEvery);
  EXPECT_EQ(l.every, 3);
  EXPECT_EQ(RecomputeSpec(r, l), "every:3");
  for (const char* bad : {"every", "every:", "every:0", "every:-1", "every:2x", "every:99999999"}) {
    EXPECT_FALSE(ParseRecomputeSpec(bad, &r, &l)) << bad;
  }
  EXPECT_EQ(RecomputeSpec(Recompute::kFull,
                          RecomputeLayers{.method = RecomputeMethod::kUniform, .num_layers = 2}),
            "full-uniform:2");
  EXPECT_EQ(RecomputeSpec(Recompute::kFull, RecomputeLayers{}), "full");
  EXPECT_TRUE(
      CheckRecompute(Recompute::kFull, {.method = RecomputeMethod::kBlock, .num_layers = 4}).ok());
  EXPECT_FALSE(
      CheckRecompute(Recompute::kOp, {.method = RecomputeMethod::kBlock, .num_layers = 4}).ok());
  EXPECT_FALSE(
      CheckRecompute(Recompute::kFull, {.method = RecomputeMethod::kUniform, .num_layers = 0})
          .ok());
  EXPECT_FALSE(
      CheckRecompute(Recompute::kFull, {.method = RecomputeMethod::kEachLayer, .num_layers = 2})
          .ok());
  EXPECT_FALSE(
      CheckRecompute(Recompute::kEvery, {.method = RecomputeMethod::kEachLayer, .num_layers = 0})
          .ok());
}

// A small uniform model as the analytic profiler shapes one (sizes in KiB of
// one 50 KiB "sbh" unit): an embedding (0.5 us forward, 1 us backward, 100 KiB
// kept, its checkpoint all of it: never rerun), six equal blocks (forward
// 10 us, backward 20 us, activations 34 units = 1700 KiB, checkpoint 2 units
// = 100 KiB, the per-op policy keeping 14 units = 700 KiB and rerunning 3 us)
// and a head (5 / 10 us, 500 KiB, never rerun).
Model EndsAndSixBlocks() {
  Model m;
  m.name = "ends-and-six-blocks";
  auto add = [&](const char* name, TimeNs f, Bytes act, Bytes checkpoint, Bytes op_saved,
                 TimeNs op_ns) {
    Layer layer;
    layer.name = name;
    layer.parameters = 1000;
    LayerProfile p;
    p.microbatch_size = 1;
    p.forward_ns = f;
    p.backward_ns = 2 * f;
    p.activation_bytes = act;
    p.output_bytes = 100 * kKiB;
    p.checkpoint_bytes = checkpoint;
    p.op_saved_bytes = op_saved;
    p.op_recompute_ns = op_ns;
    layer.profiles.push_back(p);
    m.layers.push_back(layer);
  };
  add("embedding", 500, 100 * kKiB, 100 * kKiB, 100 * kKiB, 0);  // 0.5 + 1 us
  for (int b = 0; b < 6; ++b) add("block", 10'000, 1700 * kKiB, 100 * kKiB, 700 * kKiB, 3'000);
  add("head", 5'000, 500 * kKiB, 500 * kKiB, 500 * kKiB, 0);
  return m;
}

constexpr StageLayers kWhole{0, 7};
// F and B of the whole model: 0.5 + 60 + 5 us and 1 + 120 + 10 us.
constexpr TimeNs kWholeF = 65'500, kWholeB = 131'000;

StageCost WholeStage(Recompute r, RecomputeLayers layers = {}) {
  StageCostOptions o = test_util::CostOptions(1, r);
  o.recompute_layers = layers;
  return StageCostTable(EndsAndSixBlocks(), o).Stage(kWhole);
}

TEST(StageCostsCheckpointing, OpKeepsThePolicysOutputsAndRerunsTheCheapOps) {
  const StageCost c = WholeStage(Recompute::kOp);
  // F keeps 100 + 6 x 700 + 500 KiB; B rebuilds one block's 1700 - 700 KiB
  // at a time and reruns 6 x 3 us.
  EXPECT_EQ(c.held_bytes, 4800 * kKiB);
  EXPECT_EQ(c.recomputed_bytes, 1000 * kKiB);
  EXPECT_EQ(c.recompute_ns, 18'000);
  EXPECT_EQ(c.backward_ns, kWholeB + 18'000);
  EXPECT_EQ(c.tp_backward_ns, 0);
  // Peak of one micro-batch in its backward: 4800 + 1000 KiB, against 10800
  // KiB kept without recomputation.
  EXPECT_EQ(WholeStage(Recompute::kOff).held_bytes, 10800 * kKiB);
}

TEST(StageCostsCheckpointing, EveryKChecksPointsTheKthBlocksCountedFromOne) {
  // every:2 checkpoints blocks 2, 4, 6 (layers 2, 4, 6): F keeps the
  // embedding, blocks 1, 3, 5 whole, three 100 KiB inputs and the head.
  StageCost c = WholeStage(Recompute::kEvery, {2});
  EXPECT_EQ(c.held_bytes, (100 + 3 * 1700 + 3 * 100 + 500) * kKiB);
  EXPECT_EQ(c.recomputed_bytes, 1700 * kKiB);
  EXPECT_EQ(c.recompute_ns, 30'000);
  // every:4: block 4 only.
  c = WholeStage(Recompute::kEvery, {4});
  EXPECT_EQ(c.held_bytes, (100 + 5 * 1700 + 100 + 500) * kKiB);
  EXPECT_EQ(c.recompute_ns, 10'000);
  // every:7: no block of six; as off.
  c = WholeStage(Recompute::kEvery, {7});
  EXPECT_EQ(c.held_bytes, 10800 * kKiB);
  EXPECT_EQ(c.recompute_ns, 0);
  // every:1 checkpoints every block like full, but (as torchtitan and
  // Megatron-LM) reruns neither the embedding nor the head: 60 us, not full's
  // 65.5 us.
  c = WholeStage(Recompute::kEvery, {1});
  const StageCost full = WholeStage(Recompute::kFull);
  EXPECT_EQ(c.held_bytes, full.held_bytes);
  EXPECT_EQ(c.held_bytes, (100 + 6 * 100 + 500) * kKiB);
  EXPECT_EQ(c.recomputed_bytes, full.recomputed_bytes);
  EXPECT_EQ(c.recompute_ns, 60'000);
  EXPECT_EQ(full.recompute_ns, kWholeF);
}

TEST(StageCostsCheckpointing, EveryKCountsTheBlocksOfEachStage) {
  StageCostOptions o = test_util::CostOptions(1, Recompute::kEvery);
  o.recompute_layers.every = 2;
  const StageCostTable table(EndsAndSixBlocks(), o);
  // Stages 0-3 (embedding, blocks 1-3) and 4-7 (blocks 4-6, head): each
  // checkpoints its own second block (layers 2 and 5).
  const StageCost first = table.Stage({0, 3});
  const StageCost second = table.Stage({4, 7});
  EXPECT_EQ(first.held_bytes, (100 + 2 * 1700 + 100) * kKiB);
  EXPECT_EQ(second.held_bytes, (2 * 1700 + 100 + 500) * kKiB);
  EXPECT_EQ(first.recompute_ns, 10'000);
  EXPECT_EQ(table.TrainingTimeNs({4, 7}), second.forward_ns + second.backward_ns);
  EXPECT_EQ(second.backward_ns, 3 * 20'000 + 10'000 + 10'000);
}

TEST(StageCostsCheckpointing, MegatronUniformKeepsEachChunksInputAndRebuildsAChunk) {
  // N = 2: chunks {1,2} {3,4} {5,6}: three inputs kept, a chunk of two
  // blocks (3400 KiB) rebuilt at a time, every block rerun once.
  StageCost c =
      WholeStage(Recompute::kFull, {.method = RecomputeMethod::kUniform, .num_layers = 2});
  EXPECT_EQ(c.held_bytes, (100 + 3 * 100 + 500) * kKiB);
  EXPECT_EQ(c.recomputed_bytes, 3400 * kKiB);
  EXPECT_EQ(c.recompute_ns, 60'000);
  // N = 4: chunks {1-4} {5,6} (the last one shorter, as Megatron-LM's min()).
  c = WholeStage(Recompute::kFull, {.method = RecomputeMethod::kUniform, .num_layers = 4});
  EXPECT_EQ(c.held_bytes, (100 + 2 * 100 + 500) * kKiB);
  EXPECT_EQ(c.recomputed_bytes, 4 * 1700 * kKiB);
  // N = 1 holds what full holds.
  c = WholeStage(Recompute::kFull, {.method = RecomputeMethod::kUniform, .num_layers = 1});
  EXPECT_EQ(c.held_bytes, WholeStage(Recompute::kFull).held_bytes);
  EXPECT_EQ(c.recomputed_bytes, 1700 * kKiB);
}

TEST(StageCostsCheckpointing, MegatronBlockCheckpointsTheFirstNBlocksOfTheStage) {
  // N = 2: blocks 1 and 2 keep their inputs, blocks 3-6 all 1700 KiB.
  StageCost c = WholeStage(Recompute::kFull, {.method = RecomputeMethod::kBlock, .num_layers = 2});
  EXPECT_EQ(c.held_bytes, (100 + 2 * 100 + 4 * 1700 + 500) * kKiB);
  EXPECT_EQ(c.recomputed_bytes, 1700 * kKiB);
  EXPECT_EQ(c.recompute_ns, 20'000);
  // N past the stage's six blocks: all of them, as uniform N = 1.
  c = WholeStage(Recompute::kFull, {.method = RecomputeMethod::kBlock, .num_layers = 8});
  EXPECT_EQ(c.held_bytes, (100 + 6 * 100 + 500) * kKiB);
  EXPECT_EQ(c.recompute_ns, 60'000);
}

TEST(StageCostsCheckpointing, ModelsWithoutTheNewFieldsFallBackWithANote) {
  // ThreeLayers gives neither checkpoint_bytes nor the op fields.
  StageCostOptions o = test_util::CostOptions(1, Recompute::kOp);
  const StageCostTable op(ThreeLayers(), o);
  EXPECT_EQ(op.Stage(kLast).held_bytes, 5 * kMiB);  // as off
  EXPECT_EQ(op.Stage(kLast).recompute_ns, 0);
  ASSERT_EQ(op.Notes().size(), 1u);
  EXPECT_NE(op.Notes()[0].find("op_saved_bytes"), std::string::npos);
  // every:1: each layer's checkpoint is its input, the previous layer's
  // output (10 and 20 KiB for layers 1 and 2).
  o.recompute = Recompute::kEvery;
  o.recompute_layers.every = 1;
  const StageCostTable every(ThreeLayers(), o);
  EXPECT_EQ(every.Stage(kLast).held_bytes, 30 * kKiB);
  EXPECT_EQ(every.Stage(kLast).recomputed_bytes, 3 * kMiB);
  EXPECT_EQ(every.Stage(kLast).recompute_ns, 5000);
  ASSERT_EQ(every.Notes().size(), 1u);
  EXPECT_NE(every.Notes()[0].find("checkpoint_bytes"), std::string::npos);
}

TEST(StageCosts, ParameterBytesRoundToNearest) {
  EXPECT_EQ(ParameterBytes(5000, 2), 10000);
  EXPECT_EQ(ParameterBytes(3, 0.5), 2);  // 1.5 rounds away from zero
}

// ---------------------------------------------------------------------------
// Costs against the GPU's peak (issue 28): worked by hand.

// One layer of 10^12 forward FLOPs per sample, profiled at (size, t) with a
// forward of `forward_us`.
Model OneLayerOfATeraflop(int size, int t, double forward_us) {
  Model m;
  Layer layer;
  layer.name = "block";
  layer.forward_flops = 1e12;
  LayerProfile p;
  p.microbatch_size = size;
  p.tensor_parallel = t;
  p.forward_ns = static_cast<TimeNs>(forward_us * kNsPerUs);
  p.backward_ns = 2 * p.forward_ns;
  layer.profiles.push_back(p);
  m.layers.push_back(layer);
  return m;
}

GpuSpec Gpu(double bf16_tflops, double fp8_tflops) {
  GpuSpec gpu;
  gpu.name = "G";
  gpu.peak_tflops = bf16_tflops;
  gpu.peak_fp8_tflops = fp8_tflops;
  return gpu;
}

TEST(CostsWithinPeak, ALayerFasterThanThePeakIsRefusedNamingItsRate) {
  // 10^12 FLOP in 1 ms = 1000 TFLOP/s: above 989, below 1010.
  EXPECT_TRUE(CheckCostsWithinPeak(OneLayerOfATeraflop(1, 1, 1000), Gpu(1010, 0), "g", "").ok());
  const Status st = CheckCostsWithinPeak(OneLayerOfATeraflop(1, 1, 1000), Gpu(989, 0), "g", "");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("layer 0 ('block') at micro-batch size 1 and t = 1: 1000 GFLOP in "
                              "a 1000 us forward implies 1000 TFLOP/s per GPU, above the 989 "
                              "TFLOP/s dense bf16 peak of g (G): costs faster than the GPU would "
                              "give an MFU of 101%"),
            std::string::npos)
      << st.message();
}

TEST(CostsWithinPeak, SizeAndTensorParallelDegreeScaleTheRate) {
  // 2 samples x 10^12 FLOP / t = 2 GPUs in 1 ms: 1000 TFLOP/s per GPU.
  EXPECT_FALSE(CheckCostsWithinPeak(OneLayerOfATeraflop(2, 2, 1000), Gpu(989, 0), "g", "").ok());
  // In 1.02 ms: 980 TFLOP/s.
  EXPECT_TRUE(CheckCostsWithinPeak(OneLayerOfATeraflop(2, 2, 1020), Gpu(989, 0), "g", "").ok());
}

TEST(CostsWithinPeak, TheFp8PeakIsTheBoundWhereTheGpuHasOne) {
  // 1000 TFLOP/s is above the bf16 peak but within an FP8 peak of 1979.
  EXPECT_TRUE(CheckCostsWithinPeak(OneLayerOfATeraflop(1, 1, 1000), Gpu(989, 1979), "g", "").ok());
  // An unknown peak (ideal, local) checks nothing.
  EXPECT_TRUE(CheckCostsWithinPeak(OneLayerOfATeraflop(1, 1, 1), Gpu(0, 0), "g", "").ok());
}

TEST(CostsWithinPeak, TheWholeModelIsCheckedWhereOnlyItGivesFlops) {
  // flops_per_sample 2 x 10^12 over two layers of 1 ms each: 1000 TFLOP/s.
  Model m = OneLayerOfATeraflop(1, 1, 1000);
  m.layers[0].forward_flops.reset();
  m.layers.push_back(m.layers[0]);
  m.flops_per_sample = 2e12;
  const Status st = CheckCostsWithinPeak(m, Gpu(989, 0), "g", "h100-sxm");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("the model's forward (2000 GFLOP per sample at micro-batch size 1 "
                              "in 2000 us over its layers) implies 1000 TFLOP/s"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("the model's costs were made for h100-sxm"), std::string::npos);
  EXPECT_TRUE(CheckCostsWithinPeak(m, Gpu(1000, 0), "g", "").ok());
}

TEST(TensorParallelHeads, ADegreeMustDivideTheHeadsAndTheKeyValueHeads) {
  Model m = OneLayerOfATeraflop(1, 1, 1000);
  EXPECT_TRUE(CheckTensorParallelHeads(m, 3).ok());  // no architecture: not checked
  ModelArchitecture architecture;
  architecture.hidden = 4096;
  architecture.heads = 32;
  architecture.kv_heads = 8;
  m.source.architecture = architecture;
  EXPECT_TRUE(CheckTensorParallelHeads(m, 8).ok());
  EXPECT_EQ(CheckTensorParallelHeads(m, 16).message(),
            "--tensor-parallel 16 does not divide the model's 8 key-value heads "
            "(source.architecture): each GPU of a tensor-parallel group holds whole heads; use a "
            "t that divides 8");
  EXPECT_FALSE(CheckTensorParallelHeads(m, 3).ok());
}

}  // namespace
}  // namespace pipecast
