// LargeArray: an uninitialised array of a trivial type for the engine's
// per-event tables, which reach hundreds of MiB for p=128 and m=4096. Where
// the platform allows, arrays of several MiB are backed by huge pages
// (sim/internal/large_alloc_linux.cc: transparent huge pages on request),
// which saves the engine most of its TLB misses and page faults; elsewhere
// (large_alloc_portable.cc) it is plain malloc. CMake picks the file.
#ifndef PIPECAST_SIM_INTERNAL_LARGE_ARRAY_H_
#define PIPECAST_SIM_INTERNAL_LARGE_ARRAY_H_

#include <cstddef>
#include <new>
#include <type_traits>

namespace pipecast::internal {

// At least `bytes` of memory aligned for any type, or nullptr when out of
// memory. Free with FreeLarge(p, bytes), the same `bytes`.
void* AllocateLarge(size_t bytes);
void FreeLarge(void* p, size_t bytes);
// FreeLarge() that hands the memory back at once instead of keeping it for
// the thread's next allocation.
void FreeLargeToSystem(void* p, size_t bytes);
// Asks for huge pages under the 2 MiB-aligned part of [p, p + bytes), memory
// not yet touched (a large std::vector's reserve()): a hint, fresh pages
// then fault in 2 MiB at a time. Nothing where the platform has none.
void AdviseHugePages(void* p, size_t bytes);

template <typename T>
class LargeArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  LargeArray() = default;
  LargeArray(const LargeArray&) = delete;
  LargeArray& operator=(const LargeArray&) = delete;
  ~LargeArray() { Release(); }

  // Drops the contents and makes room for `n` elements, uninitialised.
  // Throws std::bad_alloc when out of memory, as std::vector does.
  void Reset(size_t n) {
    Release();
    if (n == 0) return;
    bytes_ = n * sizeof(T);
    data_ = static_cast<T*>(AllocateLarge(bytes_));
    if (data_ == nullptr) {
      bytes_ = 0;
      throw std::bad_alloc();
    }
  }
  // Drops the contents and returns the memory to the system (not kept for
  // reuse): for scratch tables freed just before a large result is built.
  void ReleaseToSystem() {
    if (data_ != nullptr) FreeLargeToSystem(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* data() { return data_; }
  const T* data() const { return data_; }

 private:
  void Release() {
    if (data_ != nullptr) FreeLarge(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }

  T* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace pipecast::internal

#endif  // PIPECAST_SIM_INTERNAL_LARGE_ARRAY_H_
