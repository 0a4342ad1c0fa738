#include "validate/transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace pipecast::validate {
namespace {

struct Fixture {
  FakeClock clock;
  MemoryPool p0{"rank 0", 0, &clock};
  MemoryPool p1{"rank 1", 0, &clock};
  InProcessTransport transport{{&p0, &p1}};
  std::atomic<bool> abort{false};
};

TEST(InProcessTransport, CopiesTheBytesIntoTheReceiversPoolOnArrival) {
  Fixture f;
  Result<Allocation> buf = f.p0.Allocate(1000, MemoryKind::kComm, "out");
  std::memset(buf->data(), 0x5a, 1000);

  ASSERT_TRUE(f.transport.Send(0, 1, 7, std::move(*buf)).ok());

  EXPECT_EQ(f.p0.held(), 0);     // the send buffer is gone once the bytes arrived
  EXPECT_EQ(f.p1.held(), 1000);  // the receiver holds them from arrival
  Result<Allocation> got = f.transport.Recv(0, 1, 7, 1000, &f.p1, 1'000'000, f.abort);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->size(), 1000);
  EXPECT_EQ(got->data()[999], std::byte{0x5a});
}

TEST(InProcessTransport, MessagesAreMatchedByTagNotOrder) {
  Fixture f;
  for (int64_t tag : {3, 4}) {
    Result<Allocation> b = f.p0.Allocate(8, MemoryKind::kComm, "out");
    std::memcpy(b->data(), &tag, 8);
    ASSERT_TRUE(f.transport.Send(0, 1, tag, std::move(*b)).ok());
  }
  Result<Allocation> four = f.transport.Recv(0, 1, 4, 8, &f.p1, 1'000'000, f.abort);
  ASSERT_TRUE(four.ok());
  int64_t v = 0;
  std::memcpy(&v, four->data(), 8);
  EXPECT_EQ(v, 4);
}

TEST(InProcessTransport, RecvGivesUpAtTheTimeout) {
  Fixture f;
  const auto start = std::chrono::steady_clock::now();

  Result<Allocation> got = f.transport.Recv(0, 1, 9, 8, &f.p1, 20'000'000, f.abort);

  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(InProcessTransport, RecvStopsWhenAborted) {
  Fixture f;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    f.abort = true;
  });
  Result<Allocation> got = f.transport.Recv(0, 1, 9, 8, &f.p1, 60'000'000'000, f.abort);
  t.join();
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition);
}

TEST(InProcessTransport, BarrierReleasesWhenEveryRankArrived) {
  Fixture f;
  Status other;
  std::thread t([&] { other = f.transport.Barrier(1, 5'000'000'000, f.abort); });
  Status mine = f.transport.Barrier(0, 5'000'000'000, f.abort);
  t.join();
  EXPECT_TRUE(mine.ok());
  EXPECT_TRUE(other.ok());
  // A lone rank times out.
  EXPECT_EQ(f.transport.Barrier(0, 10'000'000, f.abort).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace pipecast::validate
