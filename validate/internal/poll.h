// Waiting on something that can only be polled (an MPI request, a CUDA
// event) without hanging: spin (yielding) for the first kPollSpin, so short
// waits are timed sharply, then sleep kPollSleep between polls, so long ones
// free the core; give up at the timeout or when the abort flag is set.
#ifndef PIPECAST_VALIDATE_INTERNAL_POLL_H_
#define PIPECAST_VALIDATE_INTERNAL_POLL_H_

#include <atomic>
#include <chrono>
#include <thread>

#include "base/status.h"
#include "base/units.h"

namespace pipecast::validate::internal {

inline constexpr auto kPollSpin = std::chrono::microseconds(2000);
inline constexpr auto kPollSleep = std::chrono::microseconds(50);

// Calls `poll()` (returning Result<bool>: true = done) until it is done or
// fails. Returns OK when done, the poll's error, Unavailable "timed out"
// after `timeout_ns`, or FailedPrecondition "aborted" once `abort` is set.
template <typename Poll>
Status PollUntil(Poll poll, TimeNs timeout_ns, const std::atomic<bool>& abort) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::nanoseconds(timeout_ns);
  while (true) {
    PIPECAST_ASSIGN_OR_RETURN(bool done, poll());
    if (done) return Status::Ok();
    if (abort.load()) return Status::FailedPrecondition("aborted");
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return Status::Unavailable("timed out");
    if (now - start < kPollSpin) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kPollSleep);
    }
  }
}

}  // namespace pipecast::validate::internal

#endif  // PIPECAST_VALIDATE_INTERNAL_POLL_H_
