// MemoryPool: the memory one pipeline stage (rank) really holds while the
// validator runs it, and its high-water mark.
//
// Every byte the runtime charges to a stage is allocated for real (heap, each
// page touched so the OS backs it) and freed when its Allocation dies:
// static memory (weights, gradients, optimizer state), activations kept from
// a forward to its backward, send and receive buffers, and an op's workspace.
// The pool counts what is held now, per kind, its peak, and a timeline of
// every change (for the trace). Like a framework's caching allocator, it
// keeps freed blocks and hands one back to the next request of the same
// size, so a steady iteration does not pay the OS's page faults again;
// cached blocks are not held memory and are not counted (PyTorch's
// "allocated", not "reserved"). With a limit, an allocation that would pass
// it fails with FailedPrecondition ("out of memory on stage ...") instead of
// being made, which is how the validator reports a stage that does not fit.
//
// Ownership: an Allocation shares its pool's accounting (a reference-counted
// core), so it may outlive the MemoryPool object: a fault can end a run while
// the op's work still holds buffers charged to the stage (the CPU workload
// keeps a micro-batch's activations from its F to its B), and those are freed
// after the run's pools are gone. Such a late release gives its bytes back to
// the allocator and counts nothing; it never touches the destroyed pool. Its
// allocator must still exist (the host heap always does).
//
// Thread-safe: the in-process transport allocates receive buffers in the
// destination's pool from the sender's thread. Units: bytes, ns.
#ifndef PIPECAST_VALIDATE_MEMORY_POOL_H_
#define PIPECAST_VALIDATE_MEMORY_POOL_H_

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "base/units.h"
#include "sim/simulator.h"

namespace pipecast::validate {

enum class MemoryKind { kStatic, kActivation, kComm, kWorkspace };

class MemoryPool;
namespace internal {
struct PoolCore;
}  // namespace internal

// Where a pool's bytes come from: the host heap by default (HostAllocator),
// the GPU for the cuda backend (validate/cuda/device_state.h). Implementations
// are thread-safe.
class BlockAllocator {
 public:
  virtual ~BlockAllocator() = default;
  // `bytes` (> 0) really backed (host: every page touched; device: written
  // once), or nullptr when the allocator refuses.
  virtual std::byte* Allocate(Bytes bytes) = 0;
  virtual void Free(std::byte* data, Bytes bytes) = 0;
  // For errors: "the system allocator", "the device allocator (GPU 0)".
  virtual std::string Name() const = 0;
};

// operator new[] with every page touched.
class HostAllocator final : public BlockAllocator {
 public:
  std::byte* Allocate(Bytes bytes) override;
  void Free(std::byte* data, Bytes bytes) override;
  std::string Name() const override { return "the system allocator"; }
  static HostAllocator* Get();  // a shared instance
};

// Owns `size()` bytes charged to a pool; movable, frees on destruction, also
// after the pool is gone (see Ownership above).
class Allocation {
 public:
  Allocation() = default;
  ~Allocation() { Release(); }
  Allocation(Allocation&& other) noexcept { *this = std::move(other); }
  Allocation& operator=(Allocation&& other) noexcept;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  // Host memory, or device memory when the pool's allocator is a device's.
  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  Bytes size() const { return size_; }
  // Frees now (no-op when empty).
  void Release();

 private:
  friend class MemoryPool;
  std::shared_ptr<internal::PoolCore> pool_;  // null when empty
  MemoryKind kind_ = MemoryKind::kStatic;
  Bytes size_ = 0;
  std::byte* data_ = nullptr;  // owned: given back to the pool on Release
};

class MemoryPool {
 public:
  // `limit_bytes` 0 = unlimited. `stage_name` names the stage in errors
  // ("stage 1 (rank 1)"). REQUIRES: clock outlives the pool.
  // `allocator` (default: the host heap) must outlive the pool.
  MemoryPool(std::string stage_name, Bytes limit_bytes, const Clock* clock,
             BlockAllocator* allocator = nullptr);
  // Gives back the cached blocks; allocations still alive stay valid and
  // are freed when they die.
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // Allocates and touches `bytes` (0 gives an empty allocation). `what` names
  // the use for an error ("activations of 1F3"). FailedPrecondition "out of
  // memory on <stage>" when the limit would be passed or the system
  // allocator refuses; nothing is charged then.
  Result<Allocation> Allocate(Bytes bytes, MemoryKind kind, const std::string& what);
  // Counts `bytes` that someone else really allocated (the CPU workload's
  // own buffers) as held by this stage, with the same limit check; the
  // returned Allocation has no data and uncounts them when it dies.
  Result<Allocation> Charge(Bytes bytes, MemoryKind kind, const std::string& what);

  Bytes held() const;
  Bytes peak() const;
  Bytes peak_of(MemoryKind kind) const;
  Bytes limit() const;
  // Every change since construction (or ResetTimeline), static memory
  // excluded, in the simulator's MemorySample shape: activations, comm
  // buffers, workspace.
  std::vector<MemorySample> Timeline() const;
  // Starts the peak and the timeline afresh from what is held now.
  void ResetPeak();

 private:
  Result<Allocation> Take(Bytes bytes, MemoryKind kind, const std::string& what, bool backed);

  std::shared_ptr<internal::PoolCore> core_;  // shared with the live allocations
};

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_MEMORY_POOL_H_
