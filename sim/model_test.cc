#include "sim/model.h"

#include <gtest/gtest.h>

namespace pipecast {
namespace {

// A profile of the first seven fields; the optional ones stay absent.
LayerProfile Profile(int microbatch_size, TimeNs forward_ns, TimeNs backward_ns,
                     std::optional<TimeNs> backward_weight_ns, Bytes activation_bytes,
                     Bytes output_bytes, Bytes workspace_bytes) {
  LayerProfile p;
  p.microbatch_size = microbatch_size;
  p.forward_ns = forward_ns;
  p.backward_ns = backward_ns;
  p.backward_weight_ns = backward_weight_ns;
  p.activation_bytes = activation_bytes;
  p.output_bytes = output_bytes;
  p.workspace_bytes = workspace_bytes;
  return p;
}

Layer TwoSizeLayer() {
  // Measured at sizes 2 and 6.
  Layer l;
  l.name = "block";
  l.profiles.push_back(Profile(2, 2000, 4000, 1000, 200, 20, 8));
  l.profiles.push_back(Profile(6, 5000, 12000, 5000, 600, 60, 8));
  return l;
}

TEST(ModelCostAt, MeasuredSizeIsExact) {
  LayerCost c = CostAt(TwoSizeLayer(), 6);
  EXPECT_EQ(c.origin, CostOrigin::kMeasured);
  EXPECT_EQ(c.forward_ns, 5000);
  EXPECT_EQ(c.backward_ns, 12000);
  EXPECT_EQ(c.backward_weight_ns, 5000);
  EXPECT_TRUE(c.has_backward_split);
}

TEST(ModelCostAt, BetweenMeasuredSizesIsLinear) {
  // Size 3 is a quarter of the way from 2 to 6.
  LayerCost c = CostAt(TwoSizeLayer(), 3);
  EXPECT_EQ(c.origin, CostOrigin::kInterpolated);
  EXPECT_EQ(c.forward_ns, 2750);
  EXPECT_EQ(c.backward_ns, 6000);
  EXPECT_EQ(c.backward_weight_ns, 2000);
  EXPECT_EQ(c.activation_bytes, 300);
  EXPECT_EQ(c.output_bytes, 30);
}

TEST(ModelCostAt, OutsideTheRangeIsProportionalToTheNearestSize) {
  LayerCost small = CostAt(TwoSizeLayer(), 1);  // half of size 2
  EXPECT_EQ(small.origin, CostOrigin::kExtrapolated);
  EXPECT_EQ(small.forward_ns, 1000);
  EXPECT_EQ(small.activation_bytes, 100);
  LayerCost big = CostAt(TwoSizeLayer(), 12);  // twice size 6
  EXPECT_EQ(big.origin, CostOrigin::kExtrapolated);
  EXPECT_EQ(big.forward_ns, 10000);
  EXPECT_EQ(big.backward_ns, 24000);
  EXPECT_EQ(big.output_bytes, 120);
}

TEST(ModelCostAt, NoSplitMeansZeroWeightGradient) {
  Layer l;
  l.profiles.push_back(Profile(1, 10, 20, std::nullopt, 0, 0, 0));
  LayerCost c = CostAt(l, 1);
  EXPECT_FALSE(c.has_backward_split);
  EXPECT_EQ(c.backward_weight_ns, 0);
}

TEST(Model, TotalsAndFlops) {
  Model m;
  m.layers.resize(2);
  m.layers[0].parameters = 5;
  m.layers[1].parameters = 7;
  EXPECT_EQ(m.TotalParameters(), 12);
  EXPECT_FALSE(m.ForwardFlopsPerSample().has_value());
  m.layers[0].forward_flops = 1e9;
  m.layers[1].forward_flops = 2e9;
  EXPECT_DOUBLE_EQ(*m.ForwardFlopsPerSample(), 3e9);
  m.flops_per_sample = 5e9;
  EXPECT_DOUBLE_EQ(*m.ForwardFlopsPerSample(), 5e9);
}

}  // namespace
}  // namespace pipecast
