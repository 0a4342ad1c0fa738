#include "validate/tensor_group.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace pipecast::validate {
namespace {

TEST(InProcessTensorGroup, EveryMemberGetsTheSumInMemberOrder) {
  // Given 3 members holding i + 10·j at element i (small integers, exact in
  // float), after one all-reduce each holds 3i + 30 at every element, and a
  // second all-reduce on the same group sums again.
  const int t = 3;
  const size_t n = 7;  // not a multiple of t: the last share is longer
  InProcessTensorGroup group(t);
  std::vector<std::vector<float>> data(t, std::vector<float>(n));
  std::vector<Status> status(t);
  const std::atomic<bool> abort{false};
  std::vector<std::thread> threads;
  for (int j = 0; j < t; ++j) {
    for (size_t i = 0; i < n; ++i) data[j][i] = static_cast<float>(i + 10 * j);
    threads.emplace_back([&, j] {
      status[j] = group.AllReduceSum(j, data[j], abort);
      if (status[j].ok()) status[j] = group.AllReduceSum(j, data[j], abort);
    });
  }
  for (std::thread& th : threads) th.join();
  for (int j = 0; j < t; ++j) {
    ASSERT_TRUE(status[j].ok()) << status[j].message();
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(data[j][i], 3 * (3.0f * i + 30)) << j << " " << i;
  }
}

TEST(InProcessTensorGroup, AMemberThatNeverComesEndsTheWaitOnAbort) {
  InProcessTensorGroup group(2);
  std::vector<float> mine(4, 1.0f);
  std::atomic<bool> abort{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    abort.store(true);
  });
  const Status st = group.AllReduceSum(0, mine, abort);
  stopper.join();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "aborted");
}

}  // namespace
}  // namespace pipecast::validate
