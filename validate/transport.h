// Transport: how activation and gradient buffers move between pipeline ranks
// while the validator runs a plan. A message is named by (source rank,
// destination rank, tag); the runtime gives each (stage, micro-batch,
// direction) its own tag, so messages may arrive in any order.
//
// Implementations: InProcessTransport (threads of one process; a send copies
// the bytes into a buffer charged to the receiver, a real copy), the MPI one
// (mpi/mpi_session.cc: point-to-point Isend/Irecv), the cuda backend's
// (cuda/device_transport.h: NCCL, device-to-device copies) and, in tests, decorators
// that lose messages. A transport is shared by every rank it connects; its
// methods are thread-safe for distinct ranks.
//
// Waiting never hangs: Recv, FlushSends and Barrier take a timeout and an
// abort flag (set when another stage failed) and give up on either. Units: ns.
#ifndef PIPECAST_VALIDATE_TRANSPORT_H_
#define PIPECAST_VALIDATE_TRANSPORT_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "validate/memory_pool.h"

namespace pipecast::validate {

// How long a blocked wait sleeps before it looks at the abort flag again.
inline constexpr TimeNs kAbortPollNs = 5'000'000;  // 5 ms: prompt, yet not busy

class Transport {
 public:
  virtual ~Transport() = default;

  // Starts delivering `buffer` (charged to the sender's pool) to `dst`; the
  // transport frees it once it may (in-process: after the copy; MPI: when the
  // send completes, see FlushSends). Does not wait for the receiver.
  // An error (e.g. the receiver's pool is full) names the destination.
  virtual Status Send(int src, int dst, int64_t tag, Allocation buffer) = 0;

  // Waits for message (src, dst, tag) of `bytes` bytes and returns it in a
  // buffer charged to the receiver (`pool`, the receiver's own).
  // Unavailable when `timeout_ns` passes first (the caller writes the
  // diagnosis); FailedPrecondition "aborted" when `abort` becomes true.
  virtual Result<Allocation> Recv(int src, int dst, int64_t tag, Bytes bytes, MemoryPool* pool,
                                  TimeNs timeout_ns, const std::atomic<bool>& abort) = 0;

  // Completes `rank`'s outstanding sends and frees their buffers; same
  // failures as Recv.
  virtual Status FlushSends(int rank, TimeNs timeout_ns, const std::atomic<bool>& abort) = 0;

  // Returns when every rank has called Barrier once more; same failures as Recv.
  // After a timeout (Unavailable), calling Recv or Barrier again with the same
  // arguments resumes the same wait: the runtime waits again while other ranks
  // make progress (runtime.cc, Patiently).
  virtual Status Barrier(int rank, TimeNs timeout_ns, const std::atomic<bool>& abort) = 0;
};

// Threads of one process. `pools[r]` is rank r's pool, where messages to r
// are charged from the moment they arrive (as the simulator charges receive
// buffers). REQUIRES: the pools outlive the transport.
class InProcessTransport final : public Transport {
 public:
  explicit InProcessTransport(std::vector<MemoryPool*> pools);

  Status Send(int src, int dst, int64_t tag, Allocation buffer) override;
  Result<Allocation> Recv(int src, int dst, int64_t tag, Bytes bytes, MemoryPool* pool,
                          TimeNs timeout_ns, const std::atomic<bool>& abort) override;
  Status FlushSends(int rank, TimeNs timeout_ns, const std::atomic<bool>& abort) override;
  Status Barrier(int rank, TimeNs timeout_ns, const std::atomic<bool>& abort) override;

 private:
  using Key = std::tuple<int, int, int64_t>;  // src, dst, tag
  std::vector<MemoryPool*> pools_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::deque<Allocation>> mailbox_;
  int barrier_waiting_ = 0;
  int64_t barrier_generation_ = 0;
};

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_TRANSPORT_H_
