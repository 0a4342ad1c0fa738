// DeviceTensorGroups: the cuda backend's tensor-parallel all-reduces and
// expert-parallel collectives (a plan with expert_parallel ep runs expanded
// the same way, its ep workers a stage sharing one communicator). A plan
// with tensor_parallel t runs expanded (ExpandTensorParallel, exec_plan.h):
// worker w = k·t + j is tensor rank j of pipeline rank k, and the t workers
// of each k share one NCCL communicator (NCCL rank j), created in one NCCL
// group from ids made by process 0 (shared under MPI by ShareIds). Each
// worker all-reduces (ncclAllReduce, ncclSum on floats, in place) a scratch
// buffer of device memory on its own stream in its GPU's primary context
// (NCCL's), after its compute stream's work, and waits for it by polling an
// event, so a failed peer ends the wait through the abort flag. The scratch
// buffer (the largest collective's bytes) is not charged to the stage's pool:
// the simulator counts no tensor-parallel buffers, as it counts none of
// NCCL's own. REQUIRES: the workers of a stage on distinct GPUs
// (CheckTensorGroupsOnDistinctGpus). AllReduce is called by the worker's
// thread only.
#ifndef PIPECAST_VALIDATE_CUDA_DEVICE_TENSOR_GROUP_H_
#define PIPECAST_VALIDATE_CUDA_DEVICE_TENSOR_GROUP_H_

#include <cuda_runtime.h>

#include <atomic>
#include <map>
#include <vector>

#include "base/status.h"
#include "base/units.h"
#include "validate/cuda/device_state.h"
#include "validate/cuda/device_transport.h"
#include "validate/cuda/nccl_api.h"
#include "validate/exec_plan.h"

namespace pipecast::validate::cuda {

class DeviceTensorGroups {
 public:
  // `devices` indexed by worker (set for the local ones). REQUIRES: all
  // outlive this object; nccl non-null.
  DeviceTensorGroups(const std::vector<StageDevice>* devices, const Nccl* nccl,
                     int tensor_parallel);
  ~DeviceTensorGroups();
  DeviceTensorGroups(const DeviceTensorGroups&) = delete;
  DeviceTensorGroups& operator=(const DeviceTensorGroups&) = delete;

  // Creates the local workers' communicators and scratch buffers of
  // `max_bytes`. `pipeline_ranks` communicators in all; process 0 (make_ids)
  // makes their ids, `ready` tells every process whether that worked, `share`
  // hands them to all. Collective over the processes.
  Status Connect(int pipeline_ranks, const std::vector<int>& local_workers, Bytes max_bytes,
                 bool make_ids, const ShareIds& share, const Ready& ready);

  // Runs the all-reduces of `collectives` (each its unsharded bytes) one
  // after the other over `worker`'s group, once `after` (its compute stream)
  // has finished what was queued on it, and waits for them. Unavailable on
  // `timeout_ns`, FailedPrecondition "aborted" on the flag, Internal for an
  // NCCL error.
  Status AllReduce(int worker, const std::vector<Bytes>& collectives, cudaStream_t after,
                   TimeNs timeout_ns, const std::atomic<bool>& abort);

  // Runs `collectives` (ExecOp::ep_collectives) one after the other over
  // `worker`'s group as `AllReduce` runs its all-reduces, on the scratch
  // buffer (sends from its start, receives after them). An all-to-all is one
  // NCCL group of an ncclSend of bytes / t to every member and an ncclRecv
  // of as many from every member, itself included (NCCL has no all-to-all
  // call; its user guide, "Point-to-point communication", composes one so);
  // an all-gather is ncclAllGather of the bytes, a reduce-scatter
  // ncclReduceScatter (sum of floats) of bytes / t to each member. Errors as
  // AllReduce's.
  Status ExpertCollectives(int worker, const std::vector<ExpertCollective>& collectives,
                           cudaStream_t after, TimeNs timeout_ns, const std::atomic<bool>& abort);

  // Scratch bytes one collective needs in a group of t: an all-to-all its
  // send and receive halves (2 x bytes), an all-gather its contribution and
  // the t gathered ((t + 1) x bytes), a reduce-scatter its buffer and its
  // block (bytes + bytes / t).
  static Bytes ScratchBytes(const ExpertCollective& c, int t);

  // Aborts the communicators (after a failed run). Idempotent.
  void Abort();

 private:
  struct Member {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    float* scratch = nullptr;
    Bytes scratch_bytes = 0;
  };
  const std::vector<StageDevice>* devices_;
  const Nccl* nccl_;
  const int t_;
  std::map<int, Member> members_;  // by local worker
  std::atomic<bool> aborted_{false};
};

}  // namespace pipecast::validate::cuda

#endif  // PIPECAST_VALIDATE_CUDA_DEVICE_TENSOR_GROUP_H_
