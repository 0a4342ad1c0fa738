#include "sim/partition.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

namespace pipecast {
namespace {

using ::testing::HasSubstr;

TEST(PartitionParse, RangesAndSingles) {
  auto p = ParsePartition("0-3, 4 ,5-7", 8, 3);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(*p, (std::vector<StageLayers>{{0, 3}, {4, 4}, {5, 7}}));
  EXPECT_EQ(PartitionToString(*p), "0-3,4-4,5-7");
}

TEST(PartitionParse, Errors) {
  EXPECT_THAT(ParsePartition("0-3,5-7", 8, 2).status().message(), HasSubstr("starts at layer 5"));
  EXPECT_THAT(ParsePartition("0-3,4-9", 8, 2).status().message(), HasSubstr("past the model"));
  EXPECT_THAT(ParsePartition("0-3", 8, 1).status().message(), HasSubstr("model has 8 layers"));
  EXPECT_THAT(ParsePartition("0-3,4-7", 8, 4).status().message(), HasSubstr("4 stages"));
  EXPECT_THAT(ParsePartition("0-x", 8, 1).status().message(), HasSubstr("'0-x'"));
  EXPECT_THAT(ParsePartition("", 8, 1).status().message(), HasSubstr("expected FIRST-LAST"));
  EXPECT_THAT(ParsePartition("3-1,2-7", 8, 2).status().message(), HasSubstr("starts at layer 3"));
}

// Smallest bottleneck over every split, by brute force.
TimeNs BruteForceBottleneck(const std::vector<TimeNs>& cost, int stages, size_t from = 0) {
  if (stages == 1) {
    TimeNs s = 0;
    for (size_t i = from; i < cost.size(); ++i) s += cost[i];
    return s;
  }
  TimeNs best = std::numeric_limits<TimeNs>::max();
  TimeNs head = 0;
  for (size_t end = from; end + stages <= cost.size(); ++end) {
    head += cost[end];
    best = std::min(best, std::max(head, BruteForceBottleneck(cost, stages - 1, end + 1)));
  }
  return best;
}

TEST(PartitionBalanced, MatchesBruteForce) {
  std::vector<std::vector<TimeNs>> cases = {
      {5, 1, 1, 1, 1, 1, 5}, {1, 2, 3, 4, 5, 6, 7, 8}, {10, 1, 1, 1, 1, 10, 3}, {3, 3, 3, 3}};
  for (const auto& cost : cases) {
    for (int p = 1; p <= static_cast<int>(cost.size()); ++p) {
      auto part = BalancedPartition(cost, p);
      ASSERT_TRUE(part.ok());
      ASSERT_EQ(static_cast<int>(part->size()), p);
      TimeNs worst = 0;
      int next = 0;
      for (const StageLayers& s : *part) {
        EXPECT_EQ(s.first_layer, next);
        next = s.last_layer + 1;
        TimeNs sum = 0;
        for (int l = s.first_layer; l <= s.last_layer; ++l) sum += cost[l];
        worst = std::max(worst, sum);
      }
      EXPECT_EQ(next, static_cast<int>(cost.size()));
      EXPECT_EQ(worst, BruteForceBottleneck(cost, p)) << "p=" << p;
    }
  }
}

TEST(PartitionBalanced, UniformLayersSplitEvenly) {
  auto part = BalancedPartition(std::vector<TimeNs>(8, 3), 4);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(*part, (std::vector<StageLayers>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

TEST(PartitionBalanced, TooManyStages) {
  auto part = BalancedPartition({1, 2}, 3);
  ASSERT_FALSE(part.ok());
  EXPECT_THAT(part.status().message(), HasSubstr("only 2 layers"));
}

}  // namespace
}  // namespace pipecast
