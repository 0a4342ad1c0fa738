#include "sim/internal/large_array.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>

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

}  // namespace
}  // namespace pipecast::internal
