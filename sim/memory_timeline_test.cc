#include "sim/memory_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace pipecast {
namespace {

bool SameLevel(const MemorySample& a, const MemorySample& b) {
  return a.time_ns == b.time_ns && a.activations == b.activations &&
         a.comm_buffers == b.comm_buffers && a.workspace == b.workspace;
}

TEST(MemoryTimeline, LevelsAreTheRunningSumsOfTheDeltas) {
  // Given an op's start (+100 activations, +10 workspace), a send (+4096), the op's end
  // (-10 workspace) and the send's arrival (-4096) as indices into a table of three deltas,
  // when iterated, then each level is the sum so far, at the change's time.
  const MemoryTimeline tl(
      {MemoryDelta{100, 0, 10}, MemoryDelta{0, 4096, 0}, MemoryDelta{0, 0, -10}},
      {{0, 0}, {1000, 1}, {1000, 2}, {7250, 1}});
  // The last change reuses delta 1 (+4096): 8192 in flight.
  const std::vector<MemorySample> want = {
      {0, 100, 0, 10}, {1000, 100, 4096, 10}, {1000, 100, 4096, 0}, {7250, 100, 8192, 0}};
  ASSERT_EQ(tl.size(), want.size());
  size_t i = 0;
  for (const MemorySample& level : tl) EXPECT_TRUE(SameLevel(level, want[i++])) << i;
  const std::vector<MemorySample> levels = tl.Levels();
  ASSERT_EQ(levels.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(SameLevel(levels[k], want[k])) << k;
  EXPECT_TRUE(SameLevel(tl.Last(), want.back()));
}

TEST(MemoryTimeline, AppendedLevelsReadBackExactly) {
  // Given levels as a measured timeline gives them, when appended, then the same levels come
  // back, several at one instant included, and the table holds one delta per change.
  const std::vector<MemorySample> given = {
      {5, 1 << 20, 0, 0}, {5, 1 << 20, 512, 64}, {9, 0, 512, 0}, {12, 0, 0, 0}};
  MemoryTimeline tl;
  for (const MemorySample& m : given) tl.Append(m);
  ASSERT_EQ(tl.size(), given.size());
  EXPECT_EQ(tl.deltas().size(), given.size());
  const std::vector<MemorySample> back = tl.Levels();
  for (size_t k = 0; k < given.size(); ++k) EXPECT_TRUE(SameLevel(back[k], given[k])) << k;
  // Appending after a timeline built from changes continues from its last level.
  MemoryTimeline built({MemoryDelta{7, 0, 0}}, {{1, 0}, {2, 0}});
  built.Append(MemorySample{3, 20, 0, 0});
  EXPECT_EQ(built.deltas().back().activations, 6);
  EXPECT_TRUE(SameLevel(built.Last(), MemorySample{3, 20, 0, 0}));
}

TEST(MemoryTimeline, SlicesOfASharedBlockReadBackAndAppendLeavesTheBlockAlone) {
  // Given one block of changes that two timelines share (a simulation's ranks': changes 0-1
  // are rank 0's, 2-4 rank 1's), when iterated, then each reads its own slice's running sums;
  // a copy shares the block; appending to one timeline copies its slice first, so the block
  // and the other timelines read as before.
  std::shared_ptr<MemoryTimeline::Change[]> block(new MemoryTimeline::Change[5]);
  const MemoryTimeline::Change changes[5] = {{0, 0}, {10, 1}, {0, 0}, {4, 0}, {9, 1}};
  std::copy(changes, changes + 5, block.get());
  const MemoryTimeline r0({MemoryDelta{8, 0, 0}, MemoryDelta{-8, 0, 0}}, block, 0, 2);
  MemoryTimeline r1({MemoryDelta{0, 5, 0}, MemoryDelta{0, -5, 0}}, block, 2, 3);
  ASSERT_EQ(r0.size(), 2u);
  ASSERT_EQ(r1.size(), 3u);
  EXPECT_EQ(r1.changes().data(), block.get() + 2);
  EXPECT_TRUE(SameLevel(r0.Levels()[0], MemorySample{0, 8, 0, 0}));
  EXPECT_TRUE(SameLevel(r0.Last(), MemorySample{10, 0, 0, 0}));
  const std::vector<MemorySample> want1 = {{0, 0, 5, 0}, {4, 0, 10, 0}, {9, 0, 5, 0}};
  const MemoryTimeline copy = r1;
  EXPECT_EQ(copy.changes().data(), r1.changes().data());
  size_t i = 0;
  for (const MemorySample& level : copy) EXPECT_TRUE(SameLevel(level, want1[i++])) << i;
  EXPECT_EQ(r1.HeapBytes(), 2 * sizeof(MemoryDelta) + 3 * sizeof(MemoryTimeline::Change));

  r1.Append(MemorySample{12, 0, 0, 0});
  ASSERT_EQ(r1.size(), 4u);
  EXPECT_NE(r1.changes().data(), block.get() + 2);
  EXPECT_TRUE(SameLevel(r1.Last(), MemorySample{12, 0, 0, 0}));
  EXPECT_EQ(r1.deltas().back().comm_buffers, -5);
  ASSERT_EQ(copy.size(), 3u);
  EXPECT_TRUE(SameLevel(copy.Last(), want1.back()));
  EXPECT_TRUE(SameLevel(r0.Last(), MemorySample{10, 0, 0, 0}));
  EXPECT_EQ(block[4].time_ns, 9);
}

TEST(MemoryTimeline, EmptyHasNoLevels) {
  const MemoryTimeline tl;
  EXPECT_TRUE(tl.empty());
  EXPECT_TRUE(tl.begin() == tl.end());
  EXPECT_TRUE(tl.Levels().empty());
  EXPECT_TRUE(SameLevel(tl.Last(), MemorySample{}));
}

}  // namespace
}  // namespace pipecast
