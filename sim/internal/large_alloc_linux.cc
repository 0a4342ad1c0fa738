// Linux: arrays of 4 MiB and more are aligned to 2 MiB and marked for
// transparent huge pages (madvise), which the kernel honours in its default
// "madvise" mode. Smaller ones, and any where madvise fails, are ordinary
// memory; results never depend on which.
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

size_t Rounded(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

// One simulation's large tables: events, cells, and with a timeline or ties
// the ranking step's two sort buffers, ranks, processing order and records.
constexpr int kKeptBlocks = 8;

struct Block {
  void* p = nullptr;
  size_t size = 0;
};

// The freed blocks kept by this thread.
struct BlockCache {
  Block slots[kKeptBlocks];
  ~BlockCache() {
    for (Block& b : slots) std::free(b.p);
  }
};
thread_local BlockCache cache;

}  // namespace

void* AllocateLarge(size_t bytes) {
  if (bytes < kHugeFrom) return std::malloc(bytes);
  const size_t size = Rounded(bytes);
  // The smallest kept block that is large enough.
  Block* fit = nullptr;
  for (Block& b : cache.slots) {
    if (b.p != nullptr && b.size >= size && (fit == nullptr || b.size < fit->size)) fit = &b;
  }
  if (fit != nullptr) return std::exchange(*fit, Block{}).p;
  void* p = std::aligned_alloc(kHugePage, size);
  if (p != nullptr) madvise(p, size, MADV_HUGEPAGE);  // a hint: failure is harmless
  return p;
}

void FreeLarge(void* p, size_t bytes) {
  if (bytes < kHugeFrom) {
    std::free(p);
    return;
  }
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
