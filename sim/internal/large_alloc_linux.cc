// Linux: arrays of 256 KiB and more are aligned to 2 MiB, and those of 4 MiB
// and more marked for transparent huge pages (madvise), which the kernel
// honours in its default "madvise" mode. Smaller ones, and any where madvise
// fails, are ordinary memory; results never depend on which.
//
// Fresh pages cost the kernel a page fault and a zeroing each (a tenth of a
// large simulation's time), so each thread keeps the last few large blocks it
// freed (one simulation's tables) and hands them out again:
// repeated simulations, as in the planner's search or the benchmarks, reuse
// their pages. The blocks go back to the system when the thread exits.
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <utility>

#include "sim/internal/large_array.h"

namespace pipecast::internal {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeFrom = 2 * kHugePage;
// Blocks from this size up are kept for reuse too (below kHugeFrom without
// huge pages): the ranking step's sort buffers, ranks and places are 1-2 MiB
// at p = 64, m = 1024, and malloc gave them back to the system at every free
// (glibc maps blocks that large on their own), so every simulation that
// ranked its events faulted them in afresh (DualPipe, whose two directions
// tie: a tenth of its time).
constexpr size_t kKeepFrom = size_t{256} << 10;

size_t Rounded(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

// One simulation's large tables: events, cells, with ties the ranking step's
// two sort buffers, nodes, ranks and places, and with a timeline the memory
// timelines' block (freed with its result, perhaps by another thread).
constexpr int kKeptBlocks = 8;

struct Block {
  void* p = nullptr;
  size_t size = 0;
};

// The freed blocks kept by this thread: trivially destructible, so it stays
// usable after the thread's destructors ran, when `closed` says to keep
// nothing (a simulation's result can outlive the thread that made it, or be
// freed by a static's destructor at exit, after the thread-locals').
struct BlockCache {
  Block slots[kKeptBlocks];
  bool closed;
};
thread_local BlockCache cache;
// Frees the kept blocks when the thread ends, and closes the cache.
struct CacheCloser {
  CacheCloser() { cache.closed = false; }
  ~CacheCloser() {
    for (Block& b : cache.slots) std::free(std::exchange(b, Block{}).p);
    cache.closed = true;
  }
};
thread_local CacheCloser closer;

}  // namespace

void* AllocateLarge(size_t bytes) {
  if (bytes < kKeepFrom) return std::malloc(bytes);
  const size_t size = Rounded(bytes);
  // The smallest kept block that is large enough.
  Block* fit = nullptr;
  for (Block& b : cache.slots) {
    if (b.p != nullptr && b.size >= size && (fit == nullptr || b.size < fit->size)) fit = &b;
  }
  if (fit != nullptr) return std::exchange(*fit, Block{}).p;
  void* p = std::aligned_alloc(kHugePage, size);
  // A hint, for blocks large enough to hold huge pages: failure is harmless.
  if (p != nullptr && size >= kHugeFrom) madvise(p, size, MADV_HUGEPAGE);
  return p;
}

void FreeLarge(void* p, size_t bytes) {
  if (bytes < kKeepFrom) {
    std::free(p);
    return;
  }
  if (cache.closed) {
    std::free(p);
    return;
  }
  (void)&closer;  // constructed (its destructor registered) with the first kept block
  // Blocks handed out again keep their first size: Rounded(bytes) may be
  // less than the block, never more, which is all AllocateLarge() relies on.
  Block freed{p, Rounded(bytes)};
  // Keep the largest blocks; free the other.
  for (Block& b : cache.slots) {
    if (b.p == nullptr || b.size < freed.size) std::swap(b, freed);
  }
  std::free(freed.p);
}

void FreeLargeToSystem(void* p, size_t) { std::free(p); }

void AdviseHugePages(void* p, size_t bytes) {
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace pipecast::internal
