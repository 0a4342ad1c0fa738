#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "validate/tensor_group.h"
#include "validate/transport.h"

namespace pipecast::validate {

InProcessTensorGroup::InProcessTensorGroup(int size) : size_(size), spans_(size) {}

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
  // A member that is running arrives within microseconds: yield-spin for it
  // first (no futex wake-up on the way), then sleep on the condition.
  lock.unlock();
  const auto spin_until = std::chrono::steady_clock::now() + kSpin;
  while (generation_.load() == generation && !stop.load() &&
         std::chrono::steady_clock::now() < spin_until) {
    std::this_thread::yield();
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

}  // namespace pipecast::validate
