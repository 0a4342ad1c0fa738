// DeviceTransport: the cuda backend's Transport. Message buffers are device
// memory (the stages' pools use DeviceAllocator) and each directed pair of
// ranks has its route (internal/p2p_routes.h):
//
//   NCCL          one 2-rank communicator per DIRECTED pair (sender = its
//                 rank 0, receiver = its rank 1), each side on its own stream
//                 in the GPU's primary context, apart from the compute
//                 streams and ordered after them by CUDA events. The
//                 receiver posts ncclRecv strictly in the sender's issue
//                 order (InOrderReceiver over the ExecPlan's per-pair
//                 sequence), keeping messages that come ahead of their op.
//                 A send never shares a stream with a receive, so a blocked
//                 activation send cannot hold up a gradient coming back.
//   device copy   both ranks on one GPU in this process (green contexts):
//                 cudaMemcpyAsync device to device on the sender's copy
//                 stream into a buffer charged to the receiver, ordered by
//                 events; the receiver waits for the copy's event.
//   host-staged   distinct GPUs in one process without NCCL: cudaMemcpy to
//                 host, then to the receiver's buffer.
//
// Exchange mode (the copy reduce of a bidirectional schedule, a second
// DeviceTransport over pools of its own): a rank's NCCL send to a partner
// also posts the next receive from that partner, the two in one NCCL group,
// since both ranks of an exchange send and then receive and a lone blocking
// send on each side could wait for each other (SimulateCopyReduce); the
// later Recv finds the receive posted.
//
// Barrier goes through `control` (the in-process transport's, or MPI's).
// Waiting polls CUDA events and never hangs: timeouts and the abort flag as
// in transport.h. After a failed run, Abort() aborts the NCCL communicators
// so that no kernel stays blocked. Send/Recv of one pair side are called by
// one thread (the rank's worker).
#ifndef PIPECAST_VALIDATE_CUDA_DEVICE_TRANSPORT_H_
#define PIPECAST_VALIDATE_CUDA_DEVICE_TRANSPORT_H_

#include <cuda_runtime.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "validate/cuda/device_state.h"
#include "validate/cuda/nccl_api.h"
#include "validate/internal/p2p_routes.h"
#include "validate/transport.h"

namespace pipecast::validate::cuda {

// A CUDA event, destroyed with its owner.
class Event {
 public:
  Event() = default;
  ~Event();
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept;
  // Creates (timing disabled) and records on `stream`.
  static Result<Event> RecordOn(cudaStream_t stream);
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// Waits for `event` to complete, polling; Unavailable on the timeout,
// FailedPrecondition "aborted" on the flag.
Status WaitEvent(const Event& event, TimeNs timeout_ns, const std::atomic<bool>& abort);

// Hands the NCCL unique ids of every pair to every process: in one process
// nothing to do; under MPI a broadcast from process 0.
using ShareIds = std::function<Status(std::vector<ncclUniqueId>* ids)>;
// Given this process's status, returns a failure when any process failed
// (MPI: an all-gather); in one process, the status itself.
using Ready = std::function<Status(const Status& mine)>;

class DeviceTransport final : public Transport {
 public:
  // `devices` and `pools` indexed by rank (set for the local ranks), `nccl`
  // may be null when no route is NCCL. `exchange`: exchange mode (above),
  // where every Send(a, b) comes before the Recv(b, a) it pairs with.
  // REQUIRES: all outlive the transport.
  DeviceTransport(const std::vector<StageDevice>* devices, std::vector<MemoryPool*> pools,
                  Transport* control, const Nccl* nccl, bool exchange = false);
  ~DeviceTransport() override;

  // Sets up every pair with a local end: `routes` for every pair of the
  // plan, `sequences` its messages in send order. Process 0 (or the only
  // process) makes the NCCL ids, `ready` tells every process whether that
  // worked, `share` gives them to all; the local communicators are created
  // in one NCCL group (which waits for the peers' ends: a peer process that
  // died before it is not detected there).
  Status Connect(const std::map<DirectedPair, P2pRoute>& routes,
                 const std::map<DirectedPair, std::vector<PairMessage>>& sequences,
                 const std::vector<int>& local_ranks, bool make_ids, const ShareIds& share,
                 const Ready& ready);

  Status Send(int src, int dst, int64_t tag, Allocation buffer) override;
  Result<Allocation> Recv(int src, int dst, int64_t tag, Bytes bytes, MemoryPool* pool,
                          TimeNs timeout_ns, const std::atomic<bool>& abort) override;
  Status FlushSends(int rank, TimeNs timeout_ns, const std::atomic<bool>& abort) override;
  Status Barrier(int rank, TimeNs timeout_ns, const std::atomic<bool>& abort) override;

  // Aborts the NCCL communicators (after a failure). Idempotent.
  void Abort();
  // Messages received ahead of their op, the most held at once by any pair.
  size_t max_buffered() const { return max_buffered_; }

 private:
  struct Posted {
    Allocation buffer;
    Event done;
  };
  struct SendSide {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };
  struct RecvSide {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    std::unique_ptr<InOrderReceiver<Posted>> receiver;
  };
  struct InFlight {     // a device copy or host-staged message
    Allocation copy;    // the receiver's
    Event done;         // empty when the copy is complete already
    Allocation source;  // the sender's, freed once the copy is done
  };
  struct PendingSend {
    Event done;
    Allocation buffer;
  };
  using Key = std::tuple<int, int, int64_t>;

  Status SendNccl(int src, int dst, Allocation buffer);
  // Allocates, zeroes and posts the receive of `m` (src -> dst) on its
  // stream; records its completion unless `in_group` (then the caller records
  // it after ncclGroupEnd, when the receive is launched).
  Result<Posted> PostRecv(int src, int dst, const PairMessage& m, MemoryPool* pool, bool in_group);
  Status SendCopy(int src, int dst, int64_t tag, Allocation buffer, P2pRoute route);
  Result<Allocation> RecvNccl(int src, int dst, int64_t tag, Bytes bytes, MemoryPool* pool,
                              TimeNs timeout_ns, const std::atomic<bool>& abort);
  Result<Allocation> RecvCopy(int src, int dst, int64_t tag, Bytes bytes, TimeNs timeout_ns,
                              const std::atomic<bool>& abort);
  Status NcclError(const char* what, ncclResult_t r, int src, int dst) const;

  const std::vector<StageDevice>* devices_;
  std::vector<MemoryPool*> pools_;
  Transport* control_;
  const Nccl* nccl_;
  const bool exchange_;
  std::map<DirectedPair, P2pRoute> routes_;
  std::map<DirectedPair, SendSide> send_;
  std::map<DirectedPair, RecvSide> recv_;
  std::vector<std::deque<PendingSend>> pending_;  // per rank
  std::vector<ncclComm_t> comms_;
  std::atomic<bool> aborted_{false};
  std::atomic<size_t> max_buffered_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::deque<InFlight>> mailbox_;
};

}  // namespace pipecast::validate::cuda

#endif  // PIPECAST_VALIDATE_CUDA_DEVICE_TRANSPORT_H_
