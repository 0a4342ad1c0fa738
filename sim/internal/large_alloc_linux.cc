// Linux: arrays of 4 MiB and more are aligned to 2 MiB and marked for
// transparent huge pages (madvise), which the kernel honours in its default
// "madvise" mode. Smaller ones, and any where madvise fails, are ordinary
// memory; results never depend on which.
#include <sys/mman.h>

#include <cstdlib>

#include "sim/internal/large_array.h"

namespace pipecast::internal {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeFrom = 2 * kHugePage;

size_t Rounded(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

}  // namespace

void* AllocateLarge(size_t bytes) {
  if (bytes < kHugeFrom) return std::malloc(bytes);
  const size_t size = Rounded(bytes);
  void* p = std::aligned_alloc(kHugePage, size);
  if (p != nullptr) madvise(p, size, MADV_HUGEPAGE);  // a hint: failure is harmless
  return p;
}

void FreeLarge(void* p, size_t /*bytes*/) { std::free(p); }

}  // namespace pipecast::internal
