// TensorGroup: the t workers of one pipeline stage that split each of its
// layers Megatron-style (tensor parallelism), and the collective they run on
// the partial sums: an all-reduce (sum) over the group. The workers are the
// group's members 0..t-1, tensor rank j being world rank stage·t + j (tensor
// parallelism innermost, as the simulator places GPUs).
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
#include <chrono>
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
};

// Threads of one process: a shared-memory all-reduce with no buffer of its
// own (each member reads every member's span and writes its share of the
// sum into all of them), between two barriers.
class InProcessTensorGroup final : public TensorGroup {
 public:
  explicit InProcessTensorGroup(int size);

  int size() const override { return size_; }
  Status AllReduceSum(int member, std::span<float> data, const std::atomic<bool>& abort) override;

 private:
  // Waits until every member has arrived at this barrier, or until *abort
  // becomes true (null: never gives up).
  Status ArriveAndWait(std::unique_lock<std::mutex>& lock, const std::atomic<bool>* abort);

  // How long a member that arrived first spins (yielding) before it sleeps.
  // 200 us: longer than two running threads take to meet, far shorter than a
  // scheduler time slice.
  static constexpr std::chrono::microseconds kSpin{200};

  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::span<float>> spans_;  // by member, posted for the current all-reduce
  int waiting_ = 0;                      // guarded by mu_
  std::atomic<int64_t> generation_{0};   // advanced under mu_, read by spinning members
};

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_TENSOR_GROUP_H_
