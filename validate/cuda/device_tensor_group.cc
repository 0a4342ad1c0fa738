#include "validate/cuda/device_tensor_group.h"

#include <fmt/format.h>

#include <algorithm>

namespace pipecast::validate::cuda {

DeviceTensorGroups::DeviceTensorGroups(const std::vector<StageDevice>* devices, const Nccl* nccl,
                                       int tensor_parallel)
    : devices_(devices), nccl_(nccl), t_(tensor_parallel) {}

DeviceTensorGroups::~DeviceTensorGroups() {
  for (auto& [worker, m] : members_) {
    cudaSetDevice((*devices_)[worker].gpu);
    if (m.comm != nullptr) (aborted_.load() ? nccl_->CommAbort : nccl_->CommDestroy)(m.comm);
    if (m.stream != nullptr) cudaStreamDestroy(m.stream);
    if (m.scratch != nullptr) cudaFree(m.scratch);
  }
}

Status DeviceTensorGroups::Connect(int pipeline_ranks, const std::vector<int>& local_workers,
                                   Bytes max_bytes, bool make_ids, const ShareIds& share,
                                   const Ready& ready) {
  std::vector<ncclUniqueId> ids(static_cast<size_t>(pipeline_ranks));
  Status made;
  for (size_t k = 0; make_ids && made.ok() && k < ids.size(); ++k) {
    if (ncclResult_t r = nccl_->GetUniqueId(&ids[k]); r != ncclSuccess) {
      made = Status::Unavailable(fmt::format(
          "ncclGetUniqueId for stage {}'s tensor-parallel group: {}", k, nccl_->Text(r)));
    }
  }
  PIPECAST_RETURN_IF_ERROR(ready(made));
  PIPECAST_RETURN_IF_ERROR(share(&ids));
  Status st;
  for (int w : local_workers) {
    Member& m = members_[w];
    if (cudaError_t e = cudaSetDevice((*devices_)[w].gpu); e != cudaSuccess) {
      st = Status::Internal(fmt::format("cudaSetDevice for worker {}: {}", w, CudaText(e)));
      break;
    }
    m.scratch_bytes = std::max<Bytes>(max_bytes, sizeof(float));
    cudaError_t e = cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc(&m.scratch, static_cast<size_t>(m.scratch_bytes));
    if (e == cudaSuccess) e = cudaMemset(m.scratch, 0, static_cast<size_t>(m.scratch_bytes));
    if (e != cudaSuccess) {
      st = Status::Unavailable(
          fmt::format("worker {}'s tensor-parallel stream and buffer: {}", w, CudaText(e)));
      break;
    }
  }
  // Every process learns of a failure before the inits wait for their peers.
  PIPECAST_RETURN_IF_ERROR(ready(st));
  // Every local member in one group: in one process the t inits of a
  // communicator must be issued together.
  nccl_->GroupStart();
  for (auto& [w, m] : members_) {
    cudaSetDevice((*devices_)[w].gpu);
    if (ncclResult_t r = nccl_->CommInitRank(&m.comm, t_, ids[static_cast<size_t>(w / t_)], w % t_);
        r != ncclSuccess) {
      nccl_->GroupEnd();
      return Status::Unavailable(fmt::format("ncclCommInitRank for stage {} tensor rank {}: {}",
                                             w / t_, w % t_, nccl_->Text(r)));
    }
  }
  if (ncclResult_t r = nccl_->GroupEnd(); r != ncclSuccess) {
    return Status::Unavailable(
        fmt::format("creating the tensor-parallel NCCL communicators: {}", nccl_->Text(r)));
  }
  return Status::Ok();
}

Status DeviceTensorGroups::AllReduce(int worker, const std::vector<Bytes>& collectives,
                                     cudaStream_t after, TimeNs timeout_ns,
                                     const std::atomic<bool>& abort) {
  if (collectives.empty()) return Status::Ok();
  auto it = members_.find(worker);
  if (it == members_.end()) {
    return Status::Internal(fmt::format("worker {} has no tensor-parallel group", worker));
  }
  Member& m = it->second;
  // On the compute stream's context.
  PIPECAST_ASSIGN_OR_RETURN(Event ready, Event::RecordOn(after));
  if (cudaError_t e = cudaSetDevice((*devices_)[worker].gpu); e != cudaSuccess) {
    return Status::Internal("cudaSetDevice: " + CudaText(e));
  }
  if (cudaError_t e = cudaStreamWaitEvent(m.stream, ready.get(), 0); e != cudaSuccess) {
    return Status::Internal("cudaStreamWaitEvent: " + CudaText(e));
  }
  for (Bytes bytes : collectives) {
    const Bytes b = std::min(bytes, m.scratch_bytes);
    const size_t floats = static_cast<size_t>(std::max<Bytes>(b / Bytes{sizeof(float)}, 1));
    if (ncclResult_t r =
            nccl_->AllReduce(m.scratch, m.scratch, floats, ncclFloat, ncclSum, m.comm, m.stream);
        r != ncclSuccess) {
      return Status::Internal(
          fmt::format("ncclAllReduce of {} bytes on stage {} tensor rank {}: {}", bytes,
                      worker / t_, worker % t_, nccl_->Text(r)));
    }
  }
  PIPECAST_ASSIGN_OR_RETURN(Event done, Event::RecordOn(m.stream));
  return WaitEvent(done, timeout_ns, abort);
}

Bytes DeviceTensorGroups::ScratchBytes(const ExpertCollective& c, int t) {
  switch (c.kind) {
    case ExpertCollective::Kind::kAllToAll:
      return 2 * c.bytes;
    case ExpertCollective::Kind::kAllGather:
      return (t + 1) * c.bytes;
    case ExpertCollective::Kind::kReduceScatter:
      return c.bytes + (c.bytes + t - 1) / t;
  }
  return 0;
}

Status DeviceTensorGroups::ExpertCollectives(int worker,
                                             const std::vector<ExpertCollective>& collectives,
                                             cudaStream_t after, TimeNs timeout_ns,
                                             const std::atomic<bool>& abort) {
  if (collectives.empty()) return Status::Ok();
  auto it = members_.find(worker);
  if (it == members_.end()) {
    return Status::Internal(fmt::format("worker {} has no expert-parallel group", worker));
  }
  Member& m = it->second;
  Result<Event> ready = Event::RecordOn(after);  // on the compute stream's context
  if (!ready.ok()) return ready.status();
  if (cudaError_t e = cudaSetDevice((*devices_)[worker].gpu); e != cudaSuccess) {
    return Status::Internal("cudaSetDevice: " + CudaText(e));
  }
  if (cudaError_t e = cudaStreamWaitEvent(m.stream, ready->get(), 0); e != cudaSuccess) {
    return Status::Internal("cudaStreamWaitEvent: " + CudaText(e));
  }
  char* const base = reinterpret_cast<char*>(m.scratch);
  for (const ExpertCollective& c : collectives) {
    if (ScratchBytes(c, t_) > m.scratch_bytes) {
      return Status::Internal(
          fmt::format("worker {}'s scratch of {} bytes is too small for a "
                      "collective of {} bytes",
                      worker, m.scratch_bytes, c.bytes));
    }
    const Bytes bytes = c.bytes;
    ncclResult_t r = ncclSuccess;
    const char* what = "all-to-all";
    switch (c.kind) {
      case ExpertCollective::Kind::kAllToAll: {
        const size_t chunk = static_cast<size_t>(std::max<Bytes>(bytes / t_, 1));
        char* recv = base + m.scratch_bytes / 2;
        nccl_->GroupStart();
        for (int peer = 0; peer < t_ && r == ncclSuccess; ++peer) {
          r = nccl_->Send(base + peer * chunk, chunk, ncclInt8, peer, m.comm, m.stream);
          if (r == ncclSuccess) {
            r = nccl_->Recv(recv + peer * chunk, chunk, ncclInt8, peer, m.comm, m.stream);
          }
        }
        const ncclResult_t end = nccl_->GroupEnd();
        if (r == ncclSuccess) r = end;
        break;
      }
      case ExpertCollective::Kind::kAllGather: {
        what = "all-gather";
        const size_t count = static_cast<size_t>(std::max<Bytes>(bytes, 1));
        r = nccl_->AllGather(base, base + count, count, ncclInt8, m.comm, m.stream);
        break;
      }
      case ExpertCollective::Kind::kReduceScatter: {
        what = "reduce-scatter";
        // Floats, so that the sum is NCCL's reduction kernel, as Megatron-LM's.
        const size_t block =
            static_cast<size_t>(std::max<Bytes>(bytes / t_ / static_cast<Bytes>(sizeof(float)), 1));
        r = nccl_->ReduceScatter(m.scratch, m.scratch + block * t_, block, ncclFloat, ncclSum,
                                 m.comm, m.stream);
        break;
      }
    }
    if (r != ncclSuccess) {
      return Status::Internal(fmt::format("NCCL {} of {} bytes on stage {} expert rank {}: {}",
                                          what, c.bytes, worker / t_, worker % t_, nccl_->Text(r)));
    }
  }
  PIPECAST_ASSIGN_OR_RETURN(Event done, Event::RecordOn(m.stream));
  return WaitEvent(done, timeout_ns, abort);
}

void DeviceTensorGroups::Abort() {
  if (aborted_.exchange(true)) return;
  // The communicators are aborted, not destroyed, in the destructor: a
  // kernel blocked on a dead peer would keep ncclCommDestroy waiting.
}

}  // namespace pipecast::validate::cuda
