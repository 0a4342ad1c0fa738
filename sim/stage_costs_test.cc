// Stage costs worked by hand: three layers with distinct costs, one stage of
// layers 1-2 (so it has an input), with and without recomputation, at a
// measured and at an interpolated micro-batch size.
#include "sim/stage_costs.h"

#include <gtest/gtest.h>

#include <string>

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
  const StageCostTable table(ThreeLayers(), StageCostOptions{1, Recompute::kOff});
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
  const StageCostTable table(ThreeLayers(), StageCostOptions{1, Recompute::kOff});
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
  const StageCostTable table(ThreeLayers(), StageCostOptions{1, Recompute::kFull});
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
  const StageCostTable table(ThreeLayers(), StageCostOptions{1, Recompute::kFull});
  const StageCost c = table.Stage(StageLayers{0, 0});
  EXPECT_EQ(c.input_bytes, 0);
  EXPECT_EQ(c.held_bytes, 0);
  EXPECT_EQ(c.recomputed_bytes, 1 * kMiB);
}

TEST(StageCosts, BAndWFreeWhatFAndTheRecomputationAllocated) {
  for (Recompute recompute : {Recompute::kOff, Recompute::kFull}) {
    const StageCost c = StageCostTable(ThreeLayers(), StageCostOptions{1, recompute}).Stage(kLast);
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
  const StageCostTable table(ThreeLayers(), StageCostOptions{2, Recompute::kOff});
  const StageCost c = table.Stage(kLast);
  EXPECT_EQ(c.forward_ns, 10000);
  EXPECT_EQ(c.activation_bytes, 10 * kMiB);
  EXPECT_EQ(c.workspace_bytes, 600);
  ASSERT_EQ(table.Notes().size(), 1u);
  EXPECT_NE(table.Notes()[0].find("interpolated"), std::string::npos);
  EXPECT_TRUE(StageCostTable(ThreeLayers(), StageCostOptions{3, Recompute::kOff}).Notes().empty());
  ASSERT_EQ(StageCostTable(ThreeLayers(), StageCostOptions{6, Recompute::kOff}).Notes().size(), 1u);
}

TEST(StageCosts, StagesFollowThePartition) {
  const StageCostTable table(ThreeLayers(), StageCostOptions{1, Recompute::kFull});
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
  const StageCostTable table(WithMemoryFields(), StageCostOptions{1, Recompute::kFull});
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
  const StageCostTable table(WithMemoryFields(), StageCostOptions{1, Recompute::kSelective});
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
  const StageCostTable table(flash, StageCostOptions{1, Recompute::kSelective});
  const StageCost c = table.Stage(kLast);
  EXPECT_EQ(c.held_bytes, 5 * kMiB);
  EXPECT_EQ(c.recomputed_bytes, 0);
  EXPECT_EQ(c.recompute_ns, 0);
  ASSERT_EQ(table.Notes().size(), 1u);
  EXPECT_NE(table.Notes()[0].find("changes nothing"), std::string::npos);
}

TEST(StageCosts, ModelsWithoutTheFieldsKeepTheOlderRulesWithANote) {
  // Given ThreeLayers() (no memory fields).
  const StageCostTable full(ThreeLayers(), StageCostOptions{1, Recompute::kFull});
  const StageCostTable selective(ThreeLayers(), StageCostOptions{1, Recompute::kSelective});
  const StageCostTable split(ThreeLayers(), StageCostOptions{1, Recompute::kOff, true});
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
  const StageCost c = StageCostTable(WithMemoryFields(), StageCostOptions{1}).Stage(kLast);
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
      StageCostTable(WithMemoryFields(true), StageCostOptions{1, Recompute::kFull}).Stage(kLast);
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

TEST(StageCosts, ParameterBytesRoundToNearest) {
  EXPECT_EQ(ParameterBytes(5000, 2), 10000);
  EXPECT_EQ(ParameterBytes(3, 0.5), 2);  // 1.5 rounds away from zero
}

}  // namespace
}  // namespace pipecast
