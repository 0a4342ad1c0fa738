#include "validate/memory_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

namespace pipecast::validate {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(MemoryPool, ChargesWhatIsHeldAndKeepsTheHighWaterMark) {
  FakeClock clock;
  MemoryPool pool("stage 0 (rank 0)", 0, &clock);

  Result<Allocation> a = pool.Allocate(3 * kMiB, MemoryKind::kActivation, "a");
  Result<Allocation> w = pool.Allocate(1 * kMiB, MemoryKind::kWorkspace, "w");
  ASSERT_TRUE(a.ok() && w.ok());
  w->Release();
  Result<Allocation> c = pool.Allocate(2 * kMiB, MemoryKind::kComm, "c");
  ASSERT_TRUE(c.ok());

  EXPECT_EQ(pool.held(), 5 * kMiB);
  EXPECT_EQ(pool.peak(), 5 * kMiB);  // 3 + 1, then 3 + 2
  EXPECT_EQ(pool.peak_of(MemoryKind::kWorkspace), 1 * kMiB);
  EXPECT_EQ(a->size(), 3 * kMiB);
}

TEST(MemoryPool, FreesOnDestructionAndMove) {
  FakeClock clock;
  MemoryPool pool("s", 0, &clock);
  {
    Result<Allocation> a = pool.Allocate(kMiB, MemoryKind::kActivation, "a");
    Allocation moved = std::move(*a);
    EXPECT_EQ(pool.held(), kMiB);
  }
  EXPECT_EQ(pool.held(), 0);
  EXPECT_EQ(pool.peak(), kMiB);
}

TEST(MemoryPool, OverTheLimitIsOutOfMemoryNamingStageAndUse) {
  FakeClock clock;
  MemoryPool pool("stage 1 (rank 1)", 4 * kMiB, &clock);
  Result<Allocation> a = pool.Allocate(3 * kMiB, MemoryKind::kActivation, "the activations of 1F0");
  ASSERT_TRUE(a.ok());

  Result<Allocation> b = pool.Allocate(2 * kMiB, MemoryKind::kActivation, "the activations of 1F1");

  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(b.status().message(),
              AllOf(HasSubstr("out of memory on stage 1 (rank 1)"), HasSubstr("1F1"),
                    HasSubstr("2.0 MiB"), HasSubstr("holds 3.0 MiB"), HasSubstr("4.0 MiB")));
  EXPECT_EQ(pool.held(), 3 * kMiB);  // nothing charged for the refused one
}

TEST(MemoryPool, TimelineRecordsEveryChangeWithoutStaticMemory) {
  FakeClock clock(100);
  MemoryPool pool("s", 0, &clock);
  Result<Allocation> s = pool.Allocate(10, MemoryKind::kStatic, "static");
  clock.Advance(5);
  Result<Allocation> a = pool.Allocate(7, MemoryKind::kActivation, "a");
  clock.Advance(5);
  a->Release();

  std::vector<MemorySample> t = pool.Timeline();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[1].time_ns, 105);
  EXPECT_EQ(t[1].activations, 7);
  EXPECT_EQ(t[2].time_ns, 110);
  EXPECT_EQ(t[2].activations, 0);
  EXPECT_EQ(pool.peak(), 17);
}

TEST(MemoryPool, ResetPeakStartsFromWhatIsHeld) {
  FakeClock clock;
  MemoryPool pool("s", 0, &clock);
  Result<Allocation> s = pool.Allocate(10, MemoryKind::kStatic, "static");
  { Result<Allocation> a = pool.Allocate(100, MemoryKind::kActivation, "a"); }

  pool.ResetPeak();

  EXPECT_EQ(pool.peak(), 10);
  EXPECT_EQ(pool.Timeline().size(), 1u);
}

}  // namespace
}  // namespace pipecast::validate

namespace pipecast::validate {
namespace {

TEST(MemoryPool, ReusesAFreedBlockOfTheSameSizeWithoutCountingTheCache) {
  FakeClock clock;
  MemoryPool pool("s", 0, &clock);
  const std::byte* first = nullptr;
  {
    Result<Allocation> a = pool.Allocate(kMiB, MemoryKind::kActivation, "a");
    first = a->data();
  }
  EXPECT_EQ(pool.held(), 0);  // the cached block is not held memory

  Result<Allocation> b = pool.Allocate(kMiB, MemoryKind::kActivation, "b");

  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(pool.held(), kMiB);
}

// A BlockAllocator that counts its calls and can refuse (as a full GPU's
// cudaMalloc does): what the cuda backend's device allocator plugs into.
class CountingAllocator final : public BlockAllocator {
 public:
  std::byte* Allocate(Bytes bytes) override {
    ++allocs;
    if (refuse) return nullptr;
    live += bytes;
    return new std::byte[static_cast<size_t>(bytes)];
  }
  void Free(std::byte* data, Bytes bytes) override {
    ++frees;
    live -= bytes;
    delete[] data;
  }
  std::string Name() const override { return "the counting allocator"; }
  int allocs = 0, frees = 0;
  Bytes live = 0;
  bool refuse = false;
};

TEST(MemoryPool, AllocatesThroughItsAllocatorReusesFreedBlocksAndGivesThemBack) {
  FakeClock clock;
  CountingAllocator device;
  {
    MemoryPool pool("stage 0 (rank 0)", 0, &clock, &device);
    for (int i = 0; i < 3; ++i) {  // three "iterations" of the same sizes
      Result<Allocation> s = pool.Allocate(2 * kMiB, MemoryKind::kStatic, "weights");
      Result<Allocation> a = pool.Allocate(1 * kMiB, MemoryKind::kActivation, "a");
      ASSERT_TRUE(s.ok() && a.ok());
    }
    // Only the first iteration reached the allocator; the pool counted all.
    EXPECT_EQ(device.allocs, 2);
    EXPECT_EQ(device.live, 3 * kMiB);
    EXPECT_EQ(pool.held(), 0);
    EXPECT_EQ(pool.peak(), 3 * kMiB);
  }
  // The pool's end gives the cached blocks back to the allocator.
  EXPECT_EQ(device.frees, 2);
  EXPECT_EQ(device.live, 0);
}

// Issue 28: a fault ends a run while the CPU workload still holds a
// micro-batch's activations charged to the stage; they were freed after the
// run's pools were destroyed, into freed memory (a double free, exit 134).
// An allocation now shares its pool's accounting and frees its block once,
// whenever it dies, without touching the destroyed pool or its clock.
TEST(MemoryPool, AnAllocationThatOutlivesItsPoolIsFreedOnceAndCountsNothing) {
  CountingAllocator device;
  Allocation backed, charged;
  {
    auto clock = std::make_unique<FakeClock>();
    MemoryPool pool("stage 1 (rank 1)", 0, clock.get(), &device);
    Result<Allocation> a = pool.Allocate(kMiB, MemoryKind::kActivation, "the activations of 1F1");
    Result<Allocation> c = pool.Charge(2 * kMiB, MemoryKind::kActivation, "saved by the layer");
    ASSERT_TRUE(a.ok() && c.ok());
    backed = std::move(*a);
    charged = std::move(*c);
    EXPECT_EQ(pool.held(), 3 * kMiB);
  }  // the pool and the clock are gone; the allocations are not

  EXPECT_EQ(device.frees, 0);
  backed.Release();
  charged.Release();
  EXPECT_EQ(device.allocs, 1);
  EXPECT_EQ(device.frees, 1);
  EXPECT_EQ(device.live, 0);
}

TEST(MemoryPool, AnAllocatorThatRefusesIsOutOfMemoryNamingIt) {
  FakeClock clock;
  CountingAllocator device;
  device.refuse = true;
  MemoryPool pool("stage 1 (rank 1)", 0, &clock, &device);
  Result<Allocation> a = pool.Allocate(kMiB, MemoryKind::kActivation, "the activations of 1F0");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), AllOf(HasSubstr("out of memory on stage 1 (rank 1)"),
                                          HasSubstr("the counting allocator refused"),
                                          HasSubstr("the activations of 1F0")));
  EXPECT_EQ(pool.held(), 0);    // nothing charged
  EXPECT_EQ(device.allocs, 2);  // tried once more after giving the cache back
}

}  // namespace
}  // namespace pipecast::validate
