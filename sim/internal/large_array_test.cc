#include "sim/internal/large_array.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdint>
#include <numeric>
#include <thread>

namespace pipecast::internal {
namespace {

// Fills a[0..n) with 0, 1, 2, ... and checks it reads back.
bool FillAndCheck(LargeArray<int64_t>& a, size_t n) {
  std::iota(a.data(), a.data() + n, int64_t{0});
  for (size_t i = 0; i < n; i += 4099) {
    if (a[i] != static_cast<int64_t>(i)) return false;
  }
  return a[n - 1] == static_cast<int64_t>(n - 1);
}

TEST(LargeArrayTest, SmallAndLargeArraysHoldWhatIsWritten) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1} << 20, (size_t{3} << 20) + 17}) {
    LargeArray<int64_t> a;
    a.Reset(n);
    ASSERT_NE(a.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % alignof(int64_t), 0u);
    EXPECT_TRUE(FillAndCheck(a, n)) << n;
  }
}

// Freed large blocks are handed out again (on Linux): every request must
// still get a block of its own, at least as large as asked, whatever was
// freed before it and in which order.
TEST(LargeArrayTest, ReusedBlocksAreLargeEnoughAndNotShared) {
  constexpr size_t kMiB = size_t{1} << 20;  // elements of 8 bytes: 8 MiB
  for (int round = 0; round < 3; ++round) {
    LargeArray<int64_t> a, b, c;
    a.Reset(kMiB);
    b.Reset(kMiB / 2 + 3);
    ASSERT_TRUE(FillAndCheck(a, kMiB));
    ASSERT_TRUE(FillAndCheck(b, kMiB / 2 + 3));
    b.Reset(2 * kMiB);  // frees b's block, takes a larger one
    c.Reset(kMiB / 2);  // may get b's old block
    ASSERT_TRUE(FillAndCheck(b, 2 * kMiB));
    ASSERT_TRUE(FillAndCheck(c, kMiB / 2));
    EXPECT_TRUE(FillAndCheck(a, kMiB));  // untouched by the others
    EXPECT_NE(a.data(), b.data());
    EXPECT_NE(b.data(), c.data());
    EXPECT_NE(a.data(), c.data());
    a.Reset(0);
    EXPECT_EQ(a.data(), nullptr);
  }
}

// Bytes glibc has handed out (heap and mapped blocks).
size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// A block that a thread-local frees when its thread ends, after the thread's cache of kept
// blocks was closed (a simulation's memory timelines, freed with a result that outlives the
// thread's other thread-locals, or by a static's destructor at exit): it goes back to the
// system, not into the closed cache, and the cache's own blocks are freed too.
TEST(LargeArrayTest, ABlockFreedAfterItsThreadsCacheClosedGoesBackToTheSystem) {
  constexpr size_t kBytes = size_t{16} << 20;
  const size_t before = HeapInUse();
  std::thread([] {
    struct Holder {
      void* p = nullptr;
      ~Holder() { FreeLarge(p, kBytes); }
    };
    thread_local Holder holder;  // constructed before the cache's closer: destroyed after it
    holder.p = nullptr;
    void* kept = AllocateLarge(kBytes);  // freed into the cache: its closer is made now
    ASSERT_NE(kept, nullptr);
    FreeLarge(kept, kBytes);
    holder.p = AllocateLarge(kBytes);  // the kept block again
    ASSERT_NE(holder.p, nullptr);
    static_cast<char*>(holder.p)[kBytes - 1] = 1;
  }).join();
  // Within 1 MiB of the start: neither block is left behind (a leak would be 16 MiB or more).
  EXPECT_LT(HeapInUse(), before + (size_t{1} << 20));
}

}  // namespace
}  // namespace pipecast::internal
