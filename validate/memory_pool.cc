#include "validate/memory_pool.h"

#include <fmt/format.h>

#include <cstring>
#include <new>
#include <utility>

namespace pipecast::validate {
namespace {

// Pages are touched one byte each so the OS really backs them; 4 KiB is the
// smallest page size on the machines pipecast runs on.
constexpr Bytes kPageBytes = 4096;
// The cache of freed blocks stays under this; past it freed blocks go back
// to the OS. A few GiB: more than a small plan's whole working set.
constexpr Bytes kMaxCachedBytes = 4 * kGiB;

const char* KindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kStatic:
      return "static memory";
    case MemoryKind::kActivation:
      return "activations";
    case MemoryKind::kComm:
      return "a transfer buffer";
    case MemoryKind::kWorkspace:
      return "workspace";
  }
  return "memory";
}

std::string Mib(Bytes b) { return fmt::format("{:.1f} MiB", static_cast<double>(b) / kMiB); }

}  // namespace

std::byte* HostAllocator::Allocate(Bytes bytes) {
  std::byte* p = new (std::nothrow) std::byte[static_cast<size_t>(bytes)];
  if (p != nullptr) {
    for (Bytes off = 0; off < bytes; off += kPageBytes) p[off] = std::byte{0};
  }
  return p;
}

void HostAllocator::Free(std::byte* data, Bytes) { delete[] data; }

HostAllocator* HostAllocator::Get() {
  static HostAllocator instance;
  return &instance;
}

Allocation& Allocation::operator=(Allocation&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::exchange(other.pool_, nullptr);
    kind_ = other.kind_;
    size_ = std::exchange(other.size_, 0);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

void Allocation::Release() {
  if (pool_ != nullptr && size_ > 0) pool_->Free(kind_, size_, data_);
  data_ = nullptr;
  pool_ = nullptr;
  size_ = 0;
}

MemoryPool::MemoryPool(std::string stage_name, Bytes limit_bytes, const Clock* clock,
                       BlockAllocator* allocator)
    : stage_name_(std::move(stage_name)),
      limit_(limit_bytes),
      clock_(clock),
      allocator_(allocator != nullptr ? allocator : HostAllocator::Get()) {}

MemoryPool::~MemoryPool() { ReleaseCache(); }

Result<Allocation> MemoryPool::Allocate(Bytes bytes, MemoryKind kind, const std::string& what) {
  return Take(bytes, kind, what, /*backed=*/true);
}

Result<Allocation> MemoryPool::Charge(Bytes bytes, MemoryKind kind, const std::string& what) {
  return Take(bytes, kind, what, /*backed=*/false);
}

Result<Allocation> MemoryPool::Take(Bytes bytes, MemoryKind kind, const std::string& what,
                                    bool backed) {
  Allocation a;
  if (bytes <= 0) return a;
  const int k = static_cast<int>(kind);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Bytes total = held_[0] + held_[1] + held_[2] + held_[3];
    if (limit_ > 0 && total + bytes > limit_) {
      return Status::FailedPrecondition(fmt::format(
          "out of memory on {}: {} needs {} of {} while the stage holds {}, over its limit of {} "
          "(--memory-limit-mb; default: the cluster's GPU memory)",
          stage_name_, what, Mib(bytes), KindName(kind), Mib(total), Mib(limit_)));
    }
    held_[k] += bytes;  // charged first so concurrent allocations see it
  }
  if (backed) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(bytes);
    if (it != cache_.end()) {
      a.data_ = it->second;
      cache_.erase(it);
      cached_bytes_ -= bytes;
    }
  }
  if (backed && a.data_ == nullptr) {
    a.data_ = allocator_->Allocate(bytes);
    if (a.data_ == nullptr) {
      ReleaseCache();  // give the cache back and try once more
      a.data_ = allocator_->Allocate(bytes);
    }
    if (a.data_ == nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      held_[k] -= bytes;
      return Status::FailedPrecondition(
          fmt::format("out of memory on {}: {} refused {} of {} for {}", stage_name_,
                      allocator_->Name(), Mib(bytes), KindName(kind), what));
    }
  }
  a.pool_ = this;
  a.kind_ = kind;
  a.size_ = bytes;
  std::lock_guard<std::mutex> lock(mu_);
  peak_[k] = std::max(peak_[k], held_[k]);
  peak_total_ = std::max(peak_total_, held_[0] + held_[1] + held_[2] + held_[3]);
  RecordLocked();
  return a;
}

void MemoryPool::Free(MemoryKind kind, Bytes bytes, std::byte* data) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    held_[static_cast<int>(kind)] -= bytes;
    RecordLocked();
    if (data == nullptr) return;
    if (cached_bytes_ + bytes <= kMaxCachedBytes) {
      cache_.emplace(bytes, data);
      cached_bytes_ += bytes;
      return;
    }
  }
  allocator_->Free(data, bytes);
}

void MemoryPool::ReleaseCache() {
  std::multimap<Bytes, std::byte*> cache;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cache.swap(cache_);
    cached_bytes_ = 0;
  }
  for (auto& [bytes, data] : cache) allocator_->Free(data, bytes);
}

void MemoryPool::RecordLocked() {
  timeline_.push_back(MemorySample{clock_->NowNs(), held_[1], held_[2], held_[3]});
}

Bytes MemoryPool::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_[0] + held_[1] + held_[2] + held_[3];
}

Bytes MemoryPool::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_total_;
}

Bytes MemoryPool::peak_of(MemoryKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_[static_cast<int>(kind)];
}

std::vector<MemorySample> MemoryPool::Timeline() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timeline_;
}

void MemoryPool::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  for (int k = 0; k < 4; ++k) peak_[k] = held_[k];
  peak_total_ = held_[0] + held_[1] + held_[2] + held_[3];
  timeline_.clear();
  RecordLocked();
}

}  // namespace pipecast::validate
