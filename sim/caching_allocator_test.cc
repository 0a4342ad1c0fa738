// The caching allocator's replay against cases worked by hand from the rules
// of c10/cuda/CUDACachingAllocator.cpp (pytorch/pytorch @ 001074d2):
// round_size, get_allocation_size, get_free_block, should_split, free_block's
// merge and release_cached_blocks.
#include "sim/caching_allocator.h"

#include <gtest/gtest.h>

namespace pipecast {
namespace {

constexpr Bytes kMiB_ = Bytes{1} << 20;

int64_t Take(CachingAllocator& a, Bytes size, int stream = 0) {
  Result<int64_t> id = a.Malloc(size, stream);
  EXPECT_TRUE(id.ok()) << id.status().message();
  return id.ok() ? *id : -1;
}

TEST(CachingAllocator, RoundsRequestsTo512Bytes) {
  EXPECT_EQ(AllocatorRoundSize(0), 512);
  EXPECT_EQ(AllocatorRoundSize(1), 512);
  EXPECT_EQ(AllocatorRoundSize(512), 512);
  EXPECT_EQ(AllocatorRoundSize(513), 1024);
  EXPECT_EQ(AllocatorRoundSize(3 * kMiB_ + 1), 3 * kMiB_ + 512);
}

TEST(CachingAllocator, SegmentSizes) {
  EXPECT_EQ(AllocatorSegmentSize(512), 2 * kMiB_);           // small: kSmallBuffer
  EXPECT_EQ(AllocatorSegmentSize(kMiB_), 2 * kMiB_);         // 1 MiB is still small
  EXPECT_EQ(AllocatorSegmentSize(kMiB_ + 512), 20 * kMiB_);  // 1-10 MiB: kLargeBuffer
  EXPECT_EQ(AllocatorSegmentSize(10 * kMiB_ - 512), 20 * kMiB_);
  EXPECT_EQ(AllocatorSegmentSize(10 * kMiB_), 10 * kMiB_);  // rounded to 2 MiB
  EXPECT_EQ(AllocatorSegmentSize(10 * kMiB_ + 512), 12 * kMiB_);
}

// Two 1,000 B requests: one 2 MiB segment of the small pool, split (the rest
// is >= 512 B); allocated counts the rounded 1,024 B each.
TEST(CachingAllocator, SmallRequestsShareATwoMiBSegment) {
  CachingAllocator a;
  Take(a, 1000);
  Take(a, 1000);
  EXPECT_EQ(a.stats().reserved, 2 * kMiB_);
  EXPECT_EQ(a.stats().allocated, 2048);
  EXPECT_EQ(a.stats().cuda_mallocs, 1);
}

// Requests between 1 and 10 MiB are cut from 20 MiB segments.
TEST(CachingAllocator, MediumRequestsShareATwentyMiBSegment) {
  CachingAllocator a;
  Take(a, 2 * kMiB_);
  Take(a, 2 * kMiB_);
  EXPECT_EQ(a.stats().reserved, 20 * kMiB_);
  EXPECT_EQ(a.stats().allocated, 4 * kMiB_);
}

// The held-out mechanism: a freed 3.9 GiB block cannot serve a 7.8 GiB
// request, so a second segment is made and both stay reserved.
TEST(CachingAllocator, AFreedBlockTooSmallStaysReserved) {
  CachingAllocator a;
  const Bytes logits = 4'200'000'000;  // ~3.9 GiB, not a multiple of 2 MiB
  const int64_t bf16 = Take(a, logits);
  a.Free(bf16);
  Take(a, 2 * logits);
  const Bytes first = AllocatorSegmentSize(AllocatorRoundSize(logits));
  const Bytes second = AllocatorSegmentSize(AllocatorRoundSize(2 * logits));
  EXPECT_EQ(a.stats().reserved, first + second);
  EXPECT_EQ(a.stats().peak_reserved, first + second);
  EXPECT_EQ(a.stats().allocated, AllocatorRoundSize(2 * logits));
}

// A 100 MiB segment, freed, serves 40 MiB (split: 60 MiB left > 1 MiB) and
// then 50 MiB from the 60 MiB rest (10 MiB left); freeing both merges the
// segment back to one 100 MiB block, which serves 100 MiB without a
// cudaMalloc.
TEST(CachingAllocator, SplitsAndMerges) {
  CachingAllocator a;
  a.Free(Take(a, 100 * kMiB_));
  const int64_t b = Take(a, 40 * kMiB_);
  const int64_t c = Take(a, 50 * kMiB_);
  EXPECT_EQ(a.stats().reserved, 100 * kMiB_);
  EXPECT_EQ(a.stats().allocated, 90 * kMiB_);
  a.Free(b);
  a.Free(c);
  EXPECT_EQ(a.stats().allocated, 0);
  Take(a, 100 * kMiB_);
  EXPECT_EQ(a.stats().reserved, 100 * kMiB_);
  EXPECT_EQ(a.stats().cuda_mallocs, 1);
}

// Best fit: of free 30 and 50 MiB blocks a 25 MiB request takes the 30.
TEST(CachingAllocator, BestFitTakesTheSmallestBlockThatHolds) {
  CachingAllocator a;
  const int64_t x = Take(a, 50 * kMiB_);
  const int64_t y = Take(a, 30 * kMiB_);
  a.Free(x);
  a.Free(y);
  Take(a, 25 * kMiB_);  // from the 30 MiB block: 5 MiB left, split
  Take(a, 48 * kMiB_);  // the 50 MiB block: 2 MiB left, split
  EXPECT_EQ(a.stats().reserved, 80 * kMiB_);
  EXPECT_EQ(a.stats().allocated, 73 * kMiB_);
}

// A remainder of 1 MiB or less in the large pool is not split off: the
// request takes the whole block and allocated counts it.
TEST(CachingAllocator, NoSplitOfAOneMiBRemainder) {
  CachingAllocator a;
  a.Free(Take(a, 100 * kMiB_));
  Take(a, 99 * kMiB_);
  EXPECT_EQ(a.stats().allocated, 100 * kMiB_);
  EXPECT_EQ(a.stats().reserved, 100 * kMiB_);
}

// Blocks serve only the stream they were allocated on.
TEST(CachingAllocator, StreamsKeepTheirBlocks) {
  CachingAllocator a;
  a.Free(Take(a, 100 * kMiB_, 0));
  Take(a, 100 * kMiB_, 1);
  EXPECT_EQ(a.stats().reserved, 200 * kMiB_);
  EXPECT_EQ(a.reserved_by_stream().at(0), 100 * kMiB_);
  EXPECT_EQ(a.reserved_by_stream().at(1), 100 * kMiB_);
}

// A released segment leaves its stream's reserved bytes: stream 1's cached
// 100 MiB segment goes when stream 0 needs room under a 150 MiB capacity.
TEST(CachingAllocator, ReleaseLeavesItsStreamsReservedBytes) {
  CachingAllocator a(150 * kMiB_);
  a.Free(Take(a, 100 * kMiB_, 1));
  Take(a, 100 * kMiB_, 0);
  EXPECT_EQ(a.reserved_by_stream().at(0), 100 * kMiB_);
  EXPECT_EQ(a.reserved_by_stream().at(1), 0);
  EXPECT_EQ(a.stats().retries, 1);
}

// At the capacity the cached whole segments are released and the cudaMalloc
// retried; a segment with a live block in it is not released.
TEST(CachingAllocator, ReleasesCachedSegmentsWhenFull) {
  CachingAllocator a(200 * kMiB_);
  a.Free(Take(a, 60 * kMiB_));  // cached, one whole free segment
  Take(a, 80 * kMiB_);          // the 60 MiB block cannot hold it: 140 MiB reserved
  // 100 MiB more would pass 200: the cached 60 MiB segment goes, then 180.
  Take(a, 100 * kMiB_);
  EXPECT_EQ(a.stats().reserved, 180 * kMiB_);
  EXPECT_EQ(a.stats().peak_reserved, 180 * kMiB_);
  EXPECT_EQ(a.stats().retries, 1);
  EXPECT_EQ(a.stats().cuda_frees, 1);
  // Nothing cached is left to release: out of memory.
  EXPECT_FALSE(a.Malloc(30 * kMiB_).ok());
}

TEST(CachingAllocator, ResetPeaks) {
  CachingAllocator a;
  a.Free(Take(a, 100 * kMiB_));
  EXPECT_EQ(a.stats().peak_allocated, 100 * kMiB_);
  a.ResetPeaks();
  EXPECT_EQ(a.stats().peak_allocated, 0);
  EXPECT_EQ(a.stats().peak_reserved, 100 * kMiB_);
}

}  // namespace
}  // namespace pipecast
