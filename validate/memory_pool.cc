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

namespace internal {

// What a pool counts, shared by the MemoryPool and its live allocations.
// After the pool is destroyed (`closed`), a release frees its block and
// counts nothing: the clock may be gone with the pool.
struct PoolCore {
  PoolCore(std::string name, Bytes limit, const Clock* c, BlockAllocator* a)
      : stage_name(std::move(name)), limit_bytes(limit), clock(c), allocator(a) {}
  ~PoolCore() { ReleaseCache(); }

  void Free(MemoryKind kind, Bytes bytes, std::byte* data);
  void RecordLocked();
  void ReleaseCache();

  const std::string stage_name;
  const Bytes limit_bytes;
  const Clock* const clock;
  BlockAllocator* const allocator;
  mutable std::mutex mu;
  bool closed = false;  // the MemoryPool is gone
  Bytes held[4] = {0, 0, 0, 0};
  Bytes peak[4] = {0, 0, 0, 0};
  Bytes peak_total = 0;
  std::vector<MemorySample> timeline;
  std::multimap<Bytes, std::byte*> cache;  // freed blocks by size, owned
  Bytes cached_bytes = 0;
};

void PoolCore::Free(MemoryKind kind, Bytes bytes, std::byte* data) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!closed) {
      held[static_cast<int>(kind)] -= bytes;
      RecordLocked();
      if (data == nullptr) return;
      if (cached_bytes + bytes <= kMaxCachedBytes) {
        cache.emplace(bytes, data);
        cached_bytes += bytes;
        return;
      }
    }
  }
  if (data != nullptr) allocator->Free(data, bytes);
}

void PoolCore::ReleaseCache() {
  std::multimap<Bytes, std::byte*> blocks;
  {
    std::lock_guard<std::mutex> lock(mu);
    blocks.swap(cache);
    cached_bytes = 0;
  }
  for (auto& [bytes, data] : blocks) allocator->Free(data, bytes);
}

void PoolCore::RecordLocked() {
  timeline.push_back(MemorySample{clock->NowNs(), held[1], held[2], held[3]});
}

}  // namespace internal

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
    pool_ = std::move(other.pool_);
    kind_ = other.kind_;
    size_ = std::exchange(other.size_, 0);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

void Allocation::Release() {
  if (pool_ != nullptr && size_ > 0) pool_->Free(kind_, size_, data_);
  data_ = nullptr;
  pool_.reset();
  size_ = 0;
}

MemoryPool::MemoryPool(std::string stage_name, Bytes limit_bytes, const Clock* clock,
                       BlockAllocator* allocator)
    : core_(std::make_shared<internal::PoolCore>(
          std::move(stage_name), limit_bytes, clock,
          allocator != nullptr ? allocator : HostAllocator::Get())) {}

MemoryPool::~MemoryPool() {
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->closed = true;
  }
  core_->ReleaseCache();
}

Bytes MemoryPool::limit() const { return core_->limit_bytes; }

Result<Allocation> MemoryPool::Allocate(Bytes bytes, MemoryKind kind, const std::string& what) {
  return Take(bytes, kind, what, /*backed=*/true);
}

Result<Allocation> MemoryPool::Charge(Bytes bytes, MemoryKind kind, const std::string& what) {
  return Take(bytes, kind, what, /*backed=*/false);
}

Result<Allocation> MemoryPool::Take(Bytes bytes, MemoryKind kind, const std::string& what,
                                    bool backed) {
  internal::PoolCore& c = *core_;
  Allocation a;
  if (bytes <= 0) return a;
  const int k = static_cast<int>(kind);
  {
    std::lock_guard<std::mutex> lock(c.mu);
    const Bytes total = c.held[0] + c.held[1] + c.held[2] + c.held[3];
    if (c.limit_bytes > 0 && total + bytes > c.limit_bytes) {
      return Status::FailedPrecondition(fmt::format(
          "out of memory on {}: {} needs {} of {} while the stage holds {}, over its limit of {} "
          "(--memory-limit-mb; default: the cluster's GPU memory)",
          c.stage_name, what, Mib(bytes), KindName(kind), Mib(total), Mib(c.limit_bytes)));
    }
    c.held[k] += bytes;  // charged first so concurrent allocations see it
  }
  if (backed) {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.cache.find(bytes);
    if (it != c.cache.end()) {
      a.data_ = it->second;
      c.cache.erase(it);
      c.cached_bytes -= bytes;
    }
  }
  if (backed && a.data_ == nullptr) {
    a.data_ = c.allocator->Allocate(bytes);
    if (a.data_ == nullptr) {
      c.ReleaseCache();  // give the cache back and try once more
      a.data_ = c.allocator->Allocate(bytes);
    }
    if (a.data_ == nullptr) {
      std::lock_guard<std::mutex> lock(c.mu);
      c.held[k] -= bytes;
      return Status::FailedPrecondition(
          fmt::format("out of memory on {}: {} refused {} of {} for {}", c.stage_name,
                      c.allocator->Name(), Mib(bytes), KindName(kind), what));
    }
  }
  a.pool_ = core_;
  a.kind_ = kind;
  a.size_ = bytes;
  std::lock_guard<std::mutex> lock(c.mu);
  c.peak[k] = std::max(c.peak[k], c.held[k]);
  c.peak_total = std::max(c.peak_total, c.held[0] + c.held[1] + c.held[2] + c.held[3]);
  c.RecordLocked();
  return a;
}

Bytes MemoryPool::held() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  const Bytes* h = core_->held;
  return h[0] + h[1] + h[2] + h[3];
}

Bytes MemoryPool::peak() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->peak_total;
}

Bytes MemoryPool::peak_of(MemoryKind kind) const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->peak[static_cast<int>(kind)];
}

std::vector<MemorySample> MemoryPool::Timeline() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->timeline;
}

void MemoryPool::ResetPeak() {
  internal::PoolCore& c = *core_;
  std::lock_guard<std::mutex> lock(c.mu);
  for (int k = 0; k < 4; ++k) c.peak[k] = c.held[k];
  c.peak_total = c.held[0] + c.held[1] + c.held[2] + c.held[3];
  c.timeline.clear();
  c.RecordLocked();
}

}  // namespace pipecast::validate
