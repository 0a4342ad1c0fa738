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
  const StageCostTable table(ThreeLayers(), StageCostOptions{1, false});
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
  const StageCostTable table(ThreeLayers(), StageCostOptions{1, false});
  const StageCost c = table.Stage(kLast);
  EXPECT_EQ(c.activation_bytes, 5 * kMiB);
  EXPECT_EQ(c.held_bytes, 5 * kMiB);
  EXPECT_EQ(c.recomputed_bytes, 0);
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kForward), 5 * kMiB);
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kBackward), 0);
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kBackwardInput), 0);
  EXPECT_EQ(c.ActivationsAtStart(OpKind::kBackwardWeight), 0);
}

TEST(StageCosts, RecomputeHoldsTheInputAndRerunsTheForward) {
  // Given layers 1-2 with full recomputation.
  const StageCostTable table(ThreeLayers(), StageCostOptions{1, true});
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
  const StageCostTable table(ThreeLayers(), StageCostOptions{1, true});
  const StageCost c = table.Stage(StageLayers{0, 0});
  EXPECT_EQ(c.input_bytes, 0);
  EXPECT_EQ(c.held_bytes, 0);
  EXPECT_EQ(c.recomputed_bytes, 1 * kMiB);
}

TEST(StageCosts, BAndWFreeWhatFAndTheRecomputationAllocated) {
  for (bool recompute : {false, true}) {
    const StageCost c = StageCostTable(ThreeLayers(), StageCostOptions{1, recompute}).Stage(kLast);
    const Bytes all = c.held_bytes + c.recomputed_bytes;
    EXPECT_EQ(c.ActivationsFreedAtEnd(OpKind::kForward), 0);
    EXPECT_EQ(c.ActivationsFreedAtEnd(OpKind::kBackward), all);
    EXPECT_EQ(c.ActivationsFreedAtEnd(OpKind::kBackwardInput), 0);  // I frees nothing
    EXPECT_EQ(c.ActivationsFreedAtEnd(OpKind::kBackwardWeight), all);
    EXPECT_FALSE(StageCost::FreesActivations(OpKind::kBackwardInput));
    EXPECT_TRUE(StageCost::FreesActivations(OpKind::kBackwardWeight));
  }
}

TEST(StageCosts, WorkspaceIsTheLargestLayerAndOutputTheLastLayers) {
  const StageCost c = StageCostTable(ThreeLayers(), StageCostOptions{}).Stage(kLast);
  EXPECT_EQ(c.workspace_bytes, 300);
  EXPECT_EQ(c.output_bytes, 30 * kKiB);
}

TEST(StageCosts, InterpolatedSizesAreNoted) {
  // Given size 2, halfway between the measured 1 and 3: costs are the mean.
  const StageCostTable table(ThreeLayers(), StageCostOptions{2, false});
  const StageCost c = table.Stage(kLast);
  EXPECT_EQ(c.forward_ns, 10000);
  EXPECT_EQ(c.activation_bytes, 10 * kMiB);
  EXPECT_EQ(c.workspace_bytes, 600);
  ASSERT_EQ(table.Notes().size(), 1u);
  EXPECT_NE(table.Notes()[0].find("interpolated"), std::string::npos);
  EXPECT_TRUE(StageCostTable(ThreeLayers(), StageCostOptions{3, false}).Notes().empty());
  ASSERT_EQ(StageCostTable(ThreeLayers(), StageCostOptions{6, false}).Notes().size(), 1u);
}

TEST(StageCosts, StagesFollowThePartition) {
  const StageCostTable table(ThreeLayers(), StageCostOptions{1, true});
  const std::vector<StageCost> costs = table.Stages({{0, 0}, {1, 2}});
  ASSERT_EQ(costs.size(), 2u);
  EXPECT_EQ(costs[1].held_bytes, costs[0].output_bytes);
  EXPECT_EQ(costs[0].forward_ns + costs[0].backward_ns, table.TrainingTimeNs({0, 0}));
}

TEST(StageCosts, ParameterBytesRoundToNearest) {
  EXPECT_EQ(ParameterBytes(5000, 2), 10000);
  EXPECT_EQ(ParameterBytes(3, 0.5), 2);  // 1.5 rounds away from zero
}

}  // namespace
}  // namespace pipecast
