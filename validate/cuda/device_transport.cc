#include "validate/cuda/device_transport.h"

#include <fmt/format.h>

#include <chrono>

#include "validate/internal/poll.h"

namespace pipecast::validate::cuda {
namespace {

// Makes GPU `gpu`'s primary context current (NCCL's streams live there).
Status UsePrimary(int gpu) {
  if (cudaError_t e = cudaSetDevice(gpu); e != cudaSuccess) {
    return Status::Internal(fmt::format("cudaSetDevice({}): {}", gpu, CudaText(e)));
  }
  return Status::Ok();
}

}  // namespace

Event::~Event() {
  if (e_ != nullptr) cudaEventDestroy(e_);
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_ != nullptr) cudaEventDestroy(e_);
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}

Result<Event> Event::RecordOn(cudaStream_t stream) {
  Event ev;
  if (cudaError_t e = cudaEventCreateWithFlags(&ev.e_, cudaEventDisableTiming); e != cudaSuccess) {
    return Status::Internal("cudaEventCreate: " + CudaText(e));
  }
  if (cudaError_t e = cudaEventRecord(ev.e_, stream); e != cudaSuccess) {
    return Status::Internal("cudaEventRecord: " + CudaText(e));
  }
  return ev;
}

Status WaitEvent(const Event& event, TimeNs timeout_ns, const std::atomic<bool>& abort) {
  if (event.get() == nullptr) return Status::Ok();
  return internal::PollUntil(
      [&event]() -> Result<bool> {
        const cudaError_t e = cudaEventQuery(event.get());
        if (e == cudaSuccess) return true;
        if (e != cudaErrorNotReady) return Status::Internal("cudaEventQuery: " + CudaText(e));
        return false;
      },
      timeout_ns, abort);
}

DeviceTransport::DeviceTransport(const std::vector<StageDevice>* devices,
                                 std::vector<MemoryPool*> pools, Transport* control,
                                 const Nccl* nccl, bool exchange)
    : devices_(devices),
      pools_(std::move(pools)),
      control_(control),
      nccl_(nccl),
      exchange_(exchange),
      pending_(pools_.size()) {}

DeviceTransport::~DeviceTransport() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    mailbox_.clear();
  }
  for (auto& [pair, side] : recv_) {
    if (side.receiver) side.receiver->Clear();
  }
  pending_.clear();
  for (ncclComm_t c : comms_) {
    if (aborted_.load()) continue;  // ncclCommAbort freed them
    nccl_->CommDestroy(c);
  }
}

Status DeviceTransport::NcclError(const char* what, ncclResult_t r, int src, int dst) const {
  return Status::Internal(
      fmt::format("{} (rank {} -> rank {}): {}", what, src, dst, nccl_->Text(r)));
}

Status DeviceTransport::Connect(const std::map<DirectedPair, P2pRoute>& routes,
                                const std::map<DirectedPair, std::vector<PairMessage>>& sequences,
                                const std::vector<int>& local_ranks, bool make_ids,
                                const ShareIds& share, const Ready& ready) {
  routes_ = routes;
  std::vector<bool> local(pools_.size(), false);
  for (int r : local_ranks) local[r] = true;
  std::vector<DirectedPair> nccl_pairs;
  for (const auto& [pair, route] : routes_) {
    if (route == P2pRoute::kNccl) nccl_pairs.push_back(pair);
  }
  for (const auto& [pair, seq] : sequences) {
    if (local[pair.second] && routes_.at(pair) == P2pRoute::kNccl) {
      recv_[pair].receiver = std::make_unique<InOrderReceiver<Posted>>(seq);
    }
  }
  if (nccl_pairs.empty()) return Status::Ok();
  if (nccl_ == nullptr) return Status::Internal("an NCCL route without NCCL loaded");
  std::vector<ncclUniqueId> ids(nccl_pairs.size());
  Status made;
  for (size_t i = 0; make_ids && made.ok() && i < ids.size(); ++i) {
    if (ncclResult_t r = nccl_->GetUniqueId(&ids[i]); r != ncclSuccess) {
      made = NcclError("ncclGetUniqueId", r, nccl_pairs[i].first, nccl_pairs[i].second);
    }
  }
  // Every process learns of a failure here before it would wait for ids.
  PIPECAST_RETURN_IF_ERROR(ready(made));
  PIPECAST_RETURN_IF_ERROR(share(&ids));
  // Every local end of every NCCL pair in one group: the inits of one
  // thread (or process) then wait for their peers together, in any order.
  nccl_->GroupStart();
  for (size_t i = 0; i < nccl_pairs.size(); ++i) {
    const auto [a, b] = nccl_pairs[i];
    for (int side = 0; side < 2; ++side) {
      const int r = side == 0 ? a : b;
      if (!local[r]) continue;
      if (Status st = UsePrimary((*devices_)[r].gpu); !st.ok()) {
        nccl_->GroupEnd();
        return st;
      }
      cudaStream_t stream = nullptr;
      if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
          e != cudaSuccess) {
        nccl_->GroupEnd();
        return Status::Internal("cudaStreamCreate for NCCL: " + CudaText(e));
      }
      ncclComm_t* comm = side == 0 ? &send_[{a, b}].comm : &recv_[{a, b}].comm;
      (side == 0 ? send_[{a, b}].stream : recv_[{a, b}].stream) = stream;
      if (ncclResult_t r = nccl_->CommInitRank(comm, 2, ids[i], side); r != ncclSuccess) {
        nccl_->GroupEnd();
        return NcclError("ncclCommInitRank", r, a, b);
      }
    }
  }
  if (ncclResult_t r = nccl_->GroupEnd(); r != ncclSuccess) {
    return Status::Unavailable(fmt::format("creating the NCCL communicators: {}", nccl_->Text(r)));
  }
  for (auto& [pair, s] : send_) comms_.push_back(s.comm);
  for (auto& [pair, s] : recv_) {
    if (s.comm != nullptr) comms_.push_back(s.comm);
  }
  return Status::Ok();
}

Status DeviceTransport::Send(int src, int dst, int64_t tag, Allocation buffer) {
  auto it = routes_.find({src, dst});
  if (it == routes_.end()) {
    return Status::Internal(fmt::format("no route from rank {} to rank {}", src, dst));
  }
  if (it->second == P2pRoute::kNccl) return SendNccl(src, dst, std::move(buffer));
  return SendCopy(src, dst, tag, std::move(buffer), it->second);
}

Status DeviceTransport::SendNccl(int src, int dst, Allocation buffer) {
  const StageDevice& d = (*devices_)[src];
  SendSide& side = send_.at({src, dst});
  // Completed sends give their buffers back first.
  auto& pending = pending_[src];
  while (!pending.empty() && cudaEventQuery(pending.front().done.get()) == cudaSuccess) {
    pending.pop_front();
  }
  PIPECAST_RETURN_IF_ERROR(MakeCurrent(d));
  // After the op that wrote the buffer.
  PIPECAST_ASSIGN_OR_RETURN(Event written, Event::RecordOn(d.stream));
  PIPECAST_RETURN_IF_ERROR(UsePrimary(d.gpu));
  cudaStreamWaitEvent(side.stream, written.get(), 0);
  // Exchange mode: the partner's message to this rank is received in the same group.
  RecvSide* back = nullptr;
  if (exchange_) {
    auto it = recv_.find({dst, src});
    if (it != recv_.end() && it->second.receiver && it->second.comm != nullptr) back = &it->second;
  }
  Posted* held = nullptr;
  if (back != nullptr) {
    nccl_->GroupStart();
    Result<Posted*> posted = back->receiver->PostNext(
        [&](const PairMessage& m) { return PostRecv(dst, src, m, pools_[src], true); });
    if (!posted.ok()) {
      nccl_->GroupEnd();
      return posted.status();
    }
    held = *posted;
  }
  if (ncclResult_t r = nccl_->Send(buffer.data(), static_cast<size_t>(buffer.size()), ncclInt8,
                                   /*peer=*/1, side.comm, side.stream);
      r != ncclSuccess) {
    if (back != nullptr) nccl_->GroupEnd();
    return NcclError("ncclSend", r, src, dst);
  }
  if (back != nullptr) {
    if (ncclResult_t r = nccl_->GroupEnd(); r != ncclSuccess) {
      return NcclError("ncclGroupEnd of a send and a receive", r, src, dst);
    }
    PIPECAST_ASSIGN_OR_RETURN(Event in, Event::RecordOn(back->stream));
    held->done = std::move(in);
  }
  PIPECAST_ASSIGN_OR_RETURN(Event done, Event::RecordOn(side.stream));
  pending.push_back(PendingSend{std::move(done), std::move(buffer)});
  return Status::Ok();
}

Status DeviceTransport::SendCopy(int src, int dst, int64_t tag, Allocation buffer, P2pRoute route) {
  const StageDevice& d = (*devices_)[src];
  PIPECAST_ASSIGN_OR_RETURN(
      Allocation copy,
      pools_[dst]->Allocate(buffer.size(), MemoryKind::kComm,
                            fmt::format("a message from rank {} (tag {})", src, tag)));
  InFlight msg;
  PIPECAST_RETURN_IF_ERROR(MakeCurrent(d));
  const size_t n = static_cast<size_t>(buffer.size());
  if (route == P2pRoute::kDeviceCopy) {
    PIPECAST_ASSIGN_OR_RETURN(Event written, Event::RecordOn(d.stream));
    cudaStreamWaitEvent(d.copy_stream, written.get(), 0);
    cudaMemsetAsync(copy.data(), 0, n, d.copy_stream);  // see RecvNccl
    if (cudaError_t e =
            cudaMemcpyAsync(copy.data(), buffer.data(), n, cudaMemcpyDeviceToDevice, d.copy_stream);
        e != cudaSuccess) {
      return Status::Internal(
          fmt::format("device-to-device copy rank {} -> rank {}: {}", src, dst, CudaText(e)));
    }
    PIPECAST_ASSIGN_OR_RETURN(Event done, Event::RecordOn(d.copy_stream));
    msg.done = std::move(done);
    msg.source = std::move(buffer);
  } else {  // host-staged: synchronous both ways
    std::vector<std::byte> host(n);
    cudaStreamSynchronize(d.stream);
    cudaError_t e = cudaMemcpy(host.data(), buffer.data(), n, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) e = cudaMemcpy(copy.data(), host.data(), n, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
      return Status::Internal(
          fmt::format("host-staged copy rank {} -> rank {}: {}", src, dst, CudaText(e)));
    }
    buffer.Release();
  }
  msg.copy = std::move(copy);
  {
    std::lock_guard<std::mutex> lock(mu_);
    mailbox_[Key{src, dst, tag}].push_back(std::move(msg));
  }
  cv_.notify_all();
  return Status::Ok();
}

Result<Allocation> DeviceTransport::Recv(int src, int dst, int64_t tag, Bytes bytes,
                                         MemoryPool* pool, TimeNs timeout_ns,
                                         const std::atomic<bool>& abort) {
  auto it = routes_.find({src, dst});
  if (it == routes_.end()) {
    return Status::Internal(fmt::format("no route from rank {} to rank {}", src, dst));
  }
  if (it->second == P2pRoute::kNccl) return RecvNccl(src, dst, tag, bytes, pool, timeout_ns, abort);
  return RecvCopy(src, dst, tag, bytes, timeout_ns, abort);
}

Result<DeviceTransport::Posted> DeviceTransport::PostRecv(int src, int dst, const PairMessage& m,
                                                          MemoryPool* pool, bool in_group) {
  RecvSide& side = recv_.at({src, dst});
  PIPECAST_ASSIGN_OR_RETURN(
      Allocation buf,
      pool->Allocate(m.bytes, MemoryKind::kComm, fmt::format("{} from rank {}", m.what, src)));
  PIPECAST_RETURN_IF_ERROR(UsePrimary((*devices_)[dst].gpu));
  // Zero first (no pattern is 0): a reused buffer's old bytes cannot pass
  // the receiver's check unless NCCL really wrote the message.
  cudaMemsetAsync(buf.data(), 0, static_cast<size_t>(m.bytes), side.stream);
  if (ncclResult_t r = nccl_->Recv(buf.data(), static_cast<size_t>(m.bytes), ncclInt8,
                                   /*peer=*/0, side.comm, side.stream);
      r != ncclSuccess) {
    return NcclError("ncclRecv", r, src, dst);
  }
  if (in_group) return Posted{std::move(buf), Event{}};
  PIPECAST_ASSIGN_OR_RETURN(Event done, Event::RecordOn(side.stream));
  return Posted{std::move(buf), std::move(done)};
}

Result<Allocation> DeviceTransport::RecvNccl(int src, int dst, int64_t tag, Bytes bytes,
                                             MemoryPool* pool, TimeNs timeout_ns,
                                             const std::atomic<bool>& abort) {
  RecvSide& side = recv_.at({src, dst});
  auto post = [&](const PairMessage& m) { return PostRecv(src, dst, m, pool, false); };
  PIPECAST_ASSIGN_OR_RETURN(Posted got, side.receiver->Take(tag, bytes, post));
  // Receivers of several ranks run at once: raise the maximum atomically.
  const auto buffered = side.receiver->buffered();
  for (auto seen = max_buffered_.load();
       buffered > seen && !max_buffered_.compare_exchange_weak(seen, buffered);) {
  }
  Status st = WaitEvent(got.done, timeout_ns, abort);
  if (!st.ok()) return st;
  PIPECAST_RETURN_IF_ERROR(MakeCurrent((*devices_)[dst]));
  return std::move(got.buffer);
}

Result<Allocation> DeviceTransport::RecvCopy(int src, int dst, int64_t tag, Bytes bytes,
                                             TimeNs timeout_ns, const std::atomic<bool>& abort) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns);
  InFlight msg;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const Key key{src, dst, tag};
    while (true) {
      auto it = mailbox_.find(key);
      if (it != mailbox_.end() && !it->second.empty()) {
        msg = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) mailbox_.erase(it);
        break;
      }
      if (abort.load()) return Status::FailedPrecondition("aborted");
      if (std::chrono::steady_clock::now() >= deadline) return Status::Unavailable("timed out");
      cv_.wait_for(lock, std::chrono::nanoseconds(kAbortPollNs));
    }
  }
  if (msg.copy.size() != bytes) {
    return Status::Internal(
        fmt::format("message from rank {} to rank {} (tag {}) has {} bytes, "
                    "expected {}",
                    src, dst, tag, msg.copy.size(), bytes));
  }
  const TimeNs left = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
  PIPECAST_RETURN_IF_ERROR(WaitEvent(msg.done, std::max<TimeNs>(left, 1), abort));
  msg.source.Release();
  return std::move(msg.copy);
}

Status DeviceTransport::FlushSends(int rank, TimeNs timeout_ns, const std::atomic<bool>& abort) {
  auto& pending = pending_[rank];
  while (!pending.empty()) {
    PIPECAST_RETURN_IF_ERROR(WaitEvent(pending.front().done, timeout_ns, abort));
    pending.pop_front();
  }
  return Status::Ok();
}

Status DeviceTransport::Barrier(int rank, TimeNs timeout_ns, const std::atomic<bool>& abort) {
  return control_->Barrier(rank, timeout_ns, abort);
}

void DeviceTransport::Abort() {
  if (aborted_.exchange(true) || nccl_ == nullptr) return;
  for (ncclComm_t c : comms_) nccl_->CommAbort(c);
}

}  // namespace pipecast::validate::cuda
