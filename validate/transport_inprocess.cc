#include <fmt/format.h>

#include <chrono>
#include <cstring>

#include "validate/transport.h"

namespace pipecast::validate {

InProcessTransport::InProcessTransport(std::vector<MemoryPool*> pools) : pools_(std::move(pools)) {}

Status InProcessTransport::Send(int src, int dst, int64_t tag, Allocation buffer) {
  if (dst < 0 || dst >= static_cast<int>(pools_.size())) {
    return Status::Internal(fmt::format("send from rank {} to rank {}: no such rank", src, dst));
  }
  PIPECAST_ASSIGN_OR_RETURN(
      Allocation copy,
      pools_[dst]->Allocate(buffer.size(), MemoryKind::kComm,
                            fmt::format("a message from rank {} (tag {})", src, tag)));
  if (buffer.size() > 0) {
    std::memcpy(copy.data(), buffer.data(), static_cast<size_t>(buffer.size()));
  }
  buffer.Release();  // the send buffer lives until the bytes have arrived
  {
    std::lock_guard<std::mutex> lock(mu_);
    mailbox_[Key{src, dst, tag}].push_back(std::move(copy));
  }
  cv_.notify_all();
  return Status::Ok();
}

Result<Allocation> InProcessTransport::Recv(int src, int dst, int64_t tag, Bytes bytes,
                                            MemoryPool* /*pool: charged at arrival*/,
                                            TimeNs timeout_ns, const std::atomic<bool>& abort) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns);
  std::unique_lock<std::mutex> lock(mu_);
  const Key key{src, dst, tag};
  while (true) {
    auto it = mailbox_.find(key);
    if (it != mailbox_.end() && !it->second.empty()) {
      Allocation a = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) mailbox_.erase(it);
      if (a.size() != bytes) {
        return Status::Internal(
            fmt::format("message from rank {} to rank {} (tag {}) has {} "
                        "bytes, expected {}",
                        src, dst, tag, a.size(), bytes));
      }
      return a;
    }
    if (abort.load()) return Status::FailedPrecondition("aborted");
    if (std::chrono::steady_clock::now() >= deadline) return Status::Unavailable("timed out");
    cv_.wait_for(lock, std::chrono::nanoseconds(kAbortPollNs));
  }
}

Status InProcessTransport::FlushSends(int, TimeNs, const std::atomic<bool>&) {
  return Status::Ok();  // every send completed when Send returned
}

Status InProcessTransport::Barrier(int, TimeNs timeout_ns, const std::atomic<bool>& abort) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns);
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t generation = barrier_generation_;
  if (++barrier_waiting_ == static_cast<int>(pools_.size())) {
    barrier_waiting_ = 0;
    ++barrier_generation_;
    cv_.notify_all();
    return Status::Ok();
  }
  while (barrier_generation_ == generation) {
    // Giving up takes this rank out of the count, so a later barrier on the
    // same transport is not released one rank early.
    if (abort.load()) {
      --barrier_waiting_;
      return Status::FailedPrecondition("aborted");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      --barrier_waiting_;
      return Status::Unavailable("timed out");
    }
    cv_.wait_for(lock, std::chrono::nanoseconds(kAbortPollNs));
  }
  return Status::Ok();
}

}  // namespace pipecast::validate
