#include "sim/internal/event_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace pipecast::internal {
namespace {

bool Less(const QueuedEvent& a, const QueuedEvent& b) { return a.Before(b); }

TEST(EventQueue, PopsInTimeThenKeyOrder) {
  std::mt19937_64 rng(7);
  EventQueue q;
  std::vector<QueuedEvent> all;
  for (uint64_t k = 0; k < 1000; ++k) {
    QueuedEvent e{static_cast<int64_t>(rng() % 50), k};  // many equal times
    all.push_back(e);
    q.push(e);
  }
  std::sort(all.begin(), all.end(), Less);
  for (const QueuedEvent& want : all) {
    ASSERT_FALSE(q.empty());
    EXPECT_EQ(q.top().time, want.time);
    EXPECT_EQ(q.top().key, want.key);  // equal times: first in, first out
    q.pop();
  }
  EXPECT_TRUE(q.empty());
}

TEST(EventQueue, ReplaceTopEqualsPopThenPush) {
  std::mt19937_64 rng(11);
  EventQueue a, b;
  uint64_t key = 0;
  for (int i = 0; i < 64; ++i) {
    QueuedEvent e{static_cast<int64_t>(rng() % 100), key++};
    a.push(e);
    b.push(e);
  }
  for (int i = 0; i < 500; ++i) {
    QueuedEvent e{a.top().time + static_cast<int64_t>(rng() % 30), key++};
    a.pop();
    a.push(e);
    b.replace_top(e);
    ASSERT_EQ(a.top().key, b.top().key);
  }
  while (!a.empty()) {
    ASSERT_EQ(a.top().key, b.top().key);
    a.pop();
    b.pop();
  }
  EXPECT_TRUE(b.empty());
}

}  // namespace
}  // namespace pipecast::internal
