#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "validate/tensor_group.h"
#include "validate/transport.h"

namespace pipecast::validate {
namespace {

// How long a member that arrived first spins before it sleeps (2026-12-03,
// the 2-core VM: 20 us took the ep = 2 plan's all-to-alls from 20 to 12 ms
// an iteration, median, where its two threads had a core each; 50 us and
// 200 us gained little more and cost more where they had not).
constexpr int64_t kSpinNs = 20'000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

InProcessTensorGroup::InProcessTensorGroup(int size)
    : size_(size), spans_(size), sends_(size), send_counts_(size) {}

Status InProcessTensorGroup::ArriveAndWait(std::unique_lock<std::mutex>& lock,
                                           const std::atomic<bool>* abort) {
  static const std::atomic<bool> kNever{false};
  const std::atomic<bool>& stop = abort != nullptr ? *abort : kNever;
  const int64_t generation = generation_.load();
  if (++waiting_ == size_) {
    waiting_ = 0;
    generation_.fetch_add(1);
    cv_.notify_all();
    return Status::Ok();
  }
  // Spin up to kSpinNs, then sleep on the condition. A yield-spin (it was
  // 200 us of std::this_thread::yield) handed the core to any other runnable
  // task for its whole time slice, milliseconds, however soon the partner
  // arrived; with 128 barriers an iteration that cost the ep = 2 plan
  // 40-200 ms. Sleeping at once costs a wake-up a barrier instead, which a
  // short spin saves when both members have a core (docs/validator.md,
  // "Expert parallelism", has the figures). A sleeping member is woken by
  // the last arrival's notify, which the generation, read and advanced under
  // mu_, never loses; the timed wait only polls `stop`. The spin reads the
  // generation without the lock (it is atomic) and takes the lock again
  // before returning, so what the other members posted under mu_ is seen.
  lock.unlock();
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(kSpinNs);
  while (generation_.load() == generation && std::chrono::steady_clock::now() < spin_until) {
    CpuRelax();
  }
  lock.lock();
  while (generation_.load() == generation) {
    if (stop.load()) {
      --waiting_;
      return Status::FailedPrecondition("aborted");
    }
    cv_.wait_for(lock, std::chrono::nanoseconds(kAbortPollNs));
  }
  return Status::Ok();
}

Status InProcessTensorGroup::AllReduceSum(int member, std::span<float> data,
                                          const std::atomic<bool>& abort) {
  if (member < 0 || member >= size_) {
    return Status::Internal(fmt::format("tensor rank {} is not in a group of {}", member, size_));
  }
  if (size_ == 1) return Status::Ok();
  std::unique_lock<std::mutex> lock(mu_);
  spans_[member] = data;
  PIPECAST_RETURN_IF_ERROR(ArriveAndWait(lock, &abort));  // every member's span is posted
  for (const std::span<float>& s : spans_) {
    if (s.size() != data.size()) {
      return Status::Internal(fmt::format("tensor rank {} all-reduces {} floats, another member {}",
                                          member, data.size(), s.size()));
    }
  }
  lock.unlock();
  // This member's share of the elements: summed in member order, written to all.
  const size_t n = data.size();
  const size_t lo = n * static_cast<size_t>(member) / static_cast<size_t>(size_);
  const size_t hi = n * static_cast<size_t>(member + 1) / static_cast<size_t>(size_);
  for (size_t i = lo; i < hi; ++i) {
    float sum = spans_[0][i];
    for (int r = 1; r < size_; ++r) sum += spans_[r][i];
    for (int r = 0; r < size_; ++r) spans_[r][i] = sum;
  }
  lock.lock();
  // Every share is written. Not abortable: past the first barrier every member
  // writes its share into every member's buffer, so none may return (and
  // free its buffer) before all have arrived here, which each does without
  // waiting for anything.
  return ArriveAndWait(lock, nullptr);
}

Status InProcessTensorGroup::AllToAll(int member, std::span<const float> send,
                                      std::span<const size_t> send_counts, std::span<float> recv,
                                      std::span<const size_t> recv_counts,
                                      const std::atomic<bool>& abort) {
  if (member < 0 || member >= size_ || static_cast<int>(send_counts.size()) != size_ ||
      static_cast<int>(recv_counts.size()) != size_) {
    return Status::Internal(fmt::format("expert rank {} of a group of {} gives {} and {} counts",
                                        member, size_, send_counts.size(), recv_counts.size()));
  }
  std::unique_lock<std::mutex> lock(mu_);
  sends_[member] = send;
  send_counts_[member] = send_counts;
  PIPECAST_RETURN_IF_ERROR(ArriveAndWait(lock, &abort));  // every member's buffer is posted
  lock.unlock();
  Status st = Status::Ok();
  size_t at = 0;
  for (int src = 0; src < size_ && st.ok(); ++src) {
    size_t offset = 0;
    for (int r = 0; r < member; ++r) offset += send_counts_[src][r];
    const size_t n = send_counts_[src][member];
    if (n != recv_counts[src] || at + n > recv.size() || offset + n > sends_[src].size()) {
      st = Status::Internal(
          fmt::format("expert rank {} expects {} floats from rank {}, which sends {}", member,
                      recv_counts[src], src, n));
      break;
    }
    std::copy_n(sends_[src].begin() + static_cast<std::ptrdiff_t>(offset), n,
                recv.begin() + static_cast<std::ptrdiff_t>(at));
    at += n;
  }
  lock.lock();
  // Not abortable, as the all-reduce's second barrier: every member reads the
  // others' send buffers until all have arrived here.
  Status after = ArriveAndWait(lock, nullptr);
  return st.ok() ? after : st;
}

template <typename Read>
Status InProcessTensorGroup::Exchange(int member, std::span<const float> send,
                                      const std::atomic<bool>& abort, Read read) {
  if (member < 0 || member >= size_) {
    return Status::Internal(fmt::format("expert rank {} is not in a group of {}", member, size_));
  }
  std::unique_lock<std::mutex> lock(mu_);
  sends_[member] = send;
  PIPECAST_RETURN_IF_ERROR(ArriveAndWait(lock, &abort));  // every member's buffer is posted
  lock.unlock();
  Status st = read();
  lock.lock();
  // Not abortable, as the all-to-all's second barrier.
  Status after = ArriveAndWait(lock, nullptr);
  return st.ok() ? after : st;
}

Status InProcessTensorGroup::AllGather(int member, std::span<const float> send,
                                       std::span<float> recv, const std::atomic<bool>& abort) {
  return Exchange(member, send, abort, [&]() -> Status {
    if (recv.size() != send.size() * static_cast<size_t>(size_)) {
      return Status::Internal(fmt::format("expert rank {} gathers {} floats into {}", member,
                                          send.size(), recv.size()));
    }
    for (int src = 0; src < size_; ++src) {
      if (sends_[src].size() != send.size()) {
        return Status::Internal(fmt::format("expert rank {} all-gathers {} floats, rank {} {}",
                                            member, send.size(), src, sends_[src].size()));
      }
      std::copy(sends_[src].begin(), sends_[src].end(),
                recv.begin() + static_cast<std::ptrdiff_t>(src * send.size()));
    }
    return Status::Ok();
  });
}

Status InProcessTensorGroup::ReduceScatter(int member, std::span<const float> send,
                                           std::span<float> recv, const std::atomic<bool>& abort) {
  return Exchange(member, send, abort, [&]() -> Status {
    const size_t n = recv.size();
    for (int src = 0; src < size_; ++src) {
      if (sends_[src].size() != n * static_cast<size_t>(size_)) {
        return Status::Internal(
            fmt::format("expert rank {} reduce-scatters into {} floats, rank {} sends {}", member,
                        n, src, sends_[src].size()));
      }
    }
    const size_t at = n * static_cast<size_t>(member);
    for (size_t i = 0; i < n; ++i) {
      float sum = sends_[0][at + i];
      for (int src = 1; src < size_; ++src) sum += sends_[src][at + i];
      recv[i] = sum;
    }
    return Status::Ok();
  });
}

}  // namespace pipecast::validate
