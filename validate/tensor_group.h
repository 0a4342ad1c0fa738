// TensorGroup: the workers of one pipeline stage that run its layers
// together, and their collectives. Tensor parallelism: the t workers that
// split each layer Megatron-style all-reduce (sum) their partial sums.
// Expert parallelism: the ep workers (data-parallel replicas) that hold a
// layer's experts ep ways exchange tokens by all-to-all (AllToAll), or,
// with Megatron-LM's all-gather dispatcher, by AllGather and ReduceScatter. The
// workers are the group's members 0..n-1, member j being world rank
// stage·n + j (innermost, as the simulator places GPUs).
//
// Implementations: InProcessTensorGroup (threads of one process, the cpu
// backend: every member sums its 1/t of the elements in member order 0..t-1
// and writes the sum into every member's buffer, so the result is the same
// on every member and the same on every run), the MPI one
// (mpi/mpi_session.cc: MPI_Iallreduce on a sub-communicator split from
// MPI_COMM_WORLD) and the cuda backend's NCCL all-reduce.
//
// Waiting never hangs: AllReduceSum gives up when `abort` becomes true (the
// runtime's watchdog sets it when an op runs far past its prediction).
// Methods are thread-safe for distinct members.
#ifndef PIPECAST_VALIDATE_TENSOR_GROUP_H_
#define PIPECAST_VALIDATE_TENSOR_GROUP_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "base/status.h"

namespace pipecast::validate {

class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int size() const = 0;
  // Replaces `data` on every member with the element-wise sum over the
  // members' `data`; returns when this member's sum is in place. Every member
  // must call it the same number of times, with spans of one size.
  // FailedPrecondition "aborted" when `abort` becomes true first; Internal
  // when the members' sizes differ.
  virtual Status AllReduceSum(int member, std::span<float> data,
                              const std::atomic<bool>& abort) = 0;
  // MPI_Alltoallv's shape: this member sends send_counts[r] floats,
  // consecutive in `send` in member order, to member r, and receives
  // recv_counts[s] floats from member s into `recv`, consecutive in member
  // order. Every member calls it the same number of times; what member s
  // sends to r must be what r expects from s. FailedPrecondition "aborted"
  // when `abort` becomes true first; Internal when counts disagree.
  virtual Status AllToAll(int member, std::span<const float> send,
                          std::span<const size_t> send_counts, std::span<float> recv,
                          std::span<const size_t> recv_counts, const std::atomic<bool>& abort) = 0;
  // MPI_Allgather's shape: every member sends as many floats; `recv` (size()
  // x send.size()) gets every member's in member order. Errors as AllToAll's.
  virtual Status AllGather(int member, std::span<const float> send, std::span<float> recv,
                           const std::atomic<bool>& abort) = 0;
  // MPI_Reduce_scatter_block's (sum): `send` holds size() blocks of
  // recv.size() floats, block r for member r; `recv` gets the element-wise
  // sum of every member's block for this member. Errors as AllToAll's.
  virtual Status ReduceScatter(int member, std::span<const float> send, std::span<float> recv,
                               const std::atomic<bool>& abort) = 0;
};

// Threads of one process: a shared-memory all-reduce with no buffer of its
// own (each member reads every member's span and writes its share of the
// sum into all of them), between two barriers.
class InProcessTensorGroup final : public TensorGroup {
 public:
  explicit InProcessTensorGroup(int size);

  int size() const override { return size_; }
  Status AllReduceSum(int member, std::span<float> data, const std::atomic<bool>& abort) override;
  // Between two barriers each member copies its part of every member's send
  // buffer into its own receive buffer (one copy per float, as a
  // shared-memory all-to-all moves it).
  Status AllToAll(int member, std::span<const float> send, std::span<const size_t> send_counts,
                  std::span<float> recv, std::span<const size_t> recv_counts,
                  const std::atomic<bool>& abort) override;
  // Between two barriers each member copies every member's send buffer into
  // its receive buffer, in member order.
  Status AllGather(int member, std::span<const float> send, std::span<float> recv,
                   const std::atomic<bool>& abort) override;
  // Between two barriers each member sums its block of every member's send
  // buffer, in member order 0..n-1 (the same bits on every run).
  Status ReduceScatter(int member, std::span<const float> send, std::span<float> recv,
                       const std::atomic<bool>& abort) override;

 private:
  // Posts `send` as this member's buffer, waits for every member's, runs
  // `read` (which reads the posted buffers), then waits for every member to
  // have read (not abortable: the others read this member's buffer).
  template <typename Read>
  Status Exchange(int member, std::span<const float> send, const std::atomic<bool>& abort,
                  Read read);
  // Waits until every member has arrived at this barrier, or until *abort
  // becomes true (null: never gives up).
  Status ArriveAndWait(std::unique_lock<std::mutex>& lock, const std::atomic<bool>* abort);

  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::span<float>> spans_;  // by member, posted for the current all-reduce
  // By member, posted for the current all-to-all.
  std::vector<std::span<const float>> sends_;
  std::vector<std::span<const size_t>> send_counts_;
  int waiting_ = 0;                     // guarded by mu_
  std::atomic<int64_t> generation_{0};  // advanced and read under mu_
};

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_TENSOR_GROUP_H_
