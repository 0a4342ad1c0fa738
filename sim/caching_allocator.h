// A replay of PyTorch's CUDA caching allocator (the native allocator of
// c10/cuda/CUDACachingAllocator.cpp, pytorch/pytorch @ 001074d2, with its
// defaults: expandable_segments off, max_split_size unlimited,
// roundup_power2_divisions off, no garbage-collection threshold, no memory
// fraction). It keeps no memory: it tracks the blocks and segments the real
// allocator would hold for a sequence of Malloc and Free calls, so that the
// bytes it reports are what torch.cuda.max_memory_allocated() and
// max_memory_reserved() would report for that sequence. Every number comes
// from that source; nothing is fitted (docs/simulator.md, "The caching
// allocator's replay").
//
// The rules replayed (the source's names in brackets):
//   - a request rounds up to a multiple of 512 B, at least 512 [round_size];
//   - requests of <= 1 MiB go to the small pool, others to the large pool
//     [get_pool]; each pool keeps its free blocks ordered by (stream, size,
//     address) and serves a request with the smallest free block of its
//     stream that holds it [BlockComparatorSize, get_free_block];
//   - without such a block it cudaMallocs a segment: 2 MiB for a small
//     request, 20 MiB for a request under 10 MiB, else the request rounded
//     up to 2 MiB [get_allocation_size, kSmallBuffer, kLargeBuffer,
//     kMinLargeAlloc, kRoundLarge];
//   - the block found is split when what remains is >= 512 B (small pool)
//     or > 1 MiB (large pool); otherwise the request gets the whole block and
//     the allocated bytes count all of it [should_split, alloc_found_block];
//   - a freed block merges with free neighbours of its segment
//     [free_block, try_merge_blocks]; nothing goes back to the device;
//   - when a cudaMalloc fails (here: the reserved bytes would pass the
//     capacity) every cached segment that is one whole free block is
//     released and the cudaMalloc retried once; if it fails again, the
//     request is out of memory [release_cached_blocks, release_blocks].
// Events of blocks used on other streams (recordStream) are not replayed: a
// freed block is free at once, as when no stream recorded a use.
//
// Not thread-safe; one object per replay. Units: bytes.
#ifndef PIPECAST_SIM_CACHING_ALLOCATOR_H_
#define PIPECAST_SIM_CACHING_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "base/status.h"
#include "base/units.h"

namespace pipecast {

// CUDACachingAllocator.cpp's constants.
inline constexpr Bytes kAllocMinBlockSize = 512;               // kMinBlockSize
inline constexpr Bytes kAllocSmallSize = Bytes{1} << 20;       // kSmallSize, 1 MiB
inline constexpr Bytes kAllocSmallBuffer = Bytes{2} << 20;     // kSmallBuffer, 2 MiB
inline constexpr Bytes kAllocLargeBuffer = Bytes{20} << 20;    // kLargeBuffer, 20 MiB
inline constexpr Bytes kAllocMinLargeAlloc = Bytes{10} << 20;  // kMinLargeAlloc, 10 MiB
inline constexpr Bytes kAllocRoundLarge = Bytes{2} << 20;      // kRoundLarge, 2 MiB

// round_size: the request rounded up to kAllocMinBlockSize. REQUIRES: size >= 0.
Bytes AllocatorRoundSize(Bytes size);
// get_allocation_size: the segment cudaMalloc'd for a rounded request.
Bytes AllocatorSegmentSize(Bytes rounded);

struct AllocatorStats {
  Bytes allocated = 0;       // allocated_bytes.all.current
  Bytes reserved = 0;        // reserved_bytes.all.current
  Bytes peak_allocated = 0;  // allocated_bytes.all.peak (max_memory_allocated)
  Bytes peak_reserved = 0;   // reserved_bytes.all.peak (max_memory_reserved)
  int64_t cuda_mallocs = 0;  // num_device_alloc
  int64_t cuda_frees = 0;    // num_device_free
  int64_t retries = 0;       // num_alloc_retries
};

class CachingAllocator {
 public:
  // `capacity`: the bytes cudaMalloc can hand out (the GPU's memory less
  // what the CUDA context, NCCL and others hold); 0: unlimited.
  explicit CachingAllocator(Bytes capacity = 0) : capacity_(capacity) {}

  // Allocates `size` bytes on `stream` and returns the allocation's id.
  // FailedPrecondition naming the request when the capacity cannot hold it
  // even after releasing the cached segments. REQUIRES: size >= 0.
  [[nodiscard]] Result<int64_t> Malloc(Bytes size, int stream = 0);
  // Frees an allocation Malloc returned. REQUIRES: `id` is live.
  void Free(int64_t id);
  // reset_peak_stats: the peaks become the current bytes.
  void ResetPeaks();

  const AllocatorStats& stats() const { return stats_; }
  // Live allocations.
  int64_t live() const { return static_cast<int64_t>(live_.size()); }
  // The reserved bytes of each stream's segments now (a segment belongs to
  // the stream that cudaMalloc'd it; its blocks serve only that stream).
  const std::map<int, Bytes>& reserved_by_stream() const { return reserved_by_stream_; }

 private:
  struct Block {
    Bytes size = 0;
    int64_t segment = 0;
    int stream = 0;
    bool small = false;
    bool allocated = false;
  };
  using FreeKey = std::tuple<int, Bytes, Bytes>;  // (stream, size, address)

  std::set<FreeKey>& PoolOf(bool small) { return small ? small_free_ : large_free_; }
  // get_free_block: the address of the best-fitting free block, or -1.
  Bytes FindFree(bool small, int stream, Bytes size);
  // alloc_block: a new segment's address, or -1 when over the capacity.
  Bytes NewSegment(Bytes segment_size, bool small, int stream);
  // release_cached_blocks: every free block that is a whole segment.
  void ReleaseCached();
  // Block at `address`'s neighbour in its segment, or blocks_.end().
  std::map<Bytes, Block>::iterator Neighbour(std::map<Bytes, Block>::iterator it, bool next);

  Bytes capacity_;
  Bytes next_address_ = 0;
  int64_t next_segment_ = 0;
  int64_t next_id_ = 0;
  std::map<Bytes, Block> blocks_;  // by address: every block of every segment
  std::set<FreeKey> small_free_, large_free_;
  std::unordered_map<int64_t, Bytes> live_;  // id -> address
  std::map<int, Bytes> reserved_by_stream_;
  AllocatorStats stats_;
};

}  // namespace pipecast

#endif  // PIPECAST_SIM_CACHING_ALLOCATOR_H_
