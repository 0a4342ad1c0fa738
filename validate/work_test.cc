#include "validate/work.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace pipecast::validate {
namespace {

TEST(BusyWork, CalibrationFindsAPositiveRate) {
  BusyWork work;
  EXPECT_GT(work.units_per_ns(), 0);
  EXPECT_THAT(work.Description(), ::testing::HasSubstr("busy-work of the profiled durations"));
}

TEST(BusyWork, WritesItsResultIntoTheOutput) {
  BusyWork work(0.001);  // 1 unit per us
  std::vector<std::byte> out(16, std::byte{0});
  std::atomic<bool> abort{false};
  OpCall call;
  call.predicted_ns = 5'000;  // 5 units
  call.output = out;
  call.abort = &abort;

  ASSERT_TRUE(work.Run(call).ok());

  uint64_t expected = SpinUnits(1, 5), got = 0;
  std::memcpy(&got, out.data(), 8);
  EXPECT_EQ(got, expected);
}

TEST(BusyWork, StopsWhenAborted) {
  BusyWork work(1.0);
  std::atomic<bool> abort{true};
  OpCall call;
  call.predicted_ns = int64_t{1} << 40;  // hours of spinning if it did not look
  call.abort = &abort;

  EXPECT_EQ(work.Run(call).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pipecast::validate
