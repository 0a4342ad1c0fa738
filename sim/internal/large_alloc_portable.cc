// Platforms without transparent huge pages: plain malloc.
#include <cstdlib>

#include "sim/internal/large_array.h"

namespace pipecast::internal {

void* AllocateLarge(size_t bytes) { return std::malloc(bytes); }

void FreeLarge(void* p, size_t /*bytes*/) { std::free(p); }

void FreeLargeToSystem(void* p, size_t) { std::free(p); }

void AdviseHugePages(void*, size_t) {}

}  // namespace pipecast::internal
