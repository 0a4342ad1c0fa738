// InstantFits() (sim/internal/live_memory.h): the memory sweep leaves an
// instant's ties undecided when its changes, in any order, stay under every
// running peak. Hand-worked instants: every order of their changes replayed.
#include "sim/internal/live_memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <set>
#include <tuple>

namespace pipecast::internal {
namespace {

struct Delta {
  Bytes act, comm, ws;
};

using Peaks = std::tuple<Bytes, Bytes, Bytes, Bytes>;  // act, comm, ws, total

LiveMemory<false> Start(Bytes act, Bytes comm, Bytes ws, Peaks peaks) {
  LiveMemory<false> mem;
  mem.act = act;
  mem.comm = comm;
  mem.ws = ws;
  std::tie(mem.peak_act, mem.peak_comm, mem.peak_ws, mem.peak_total) = peaks;
  return mem;
}

InstantRise RiseOf(const std::array<Delta, 3>& changes) {
  InstantRise rise;
  for (const Delta& d : changes) rise.Add(d.act, d.comm, d.ws);
  return rise;
}

// The peaks after the instant, for each of the 6 orders of its changes.
std::set<Peaks> PeaksOverOrders(const LiveMemory<false>& start,
                                const std::array<Delta, 3>& changes) {
  std::array<int, 3> order = {0, 1, 2};
  std::set<Peaks> seen;
  do {
    LiveMemory<false> mem = start;
    for (int i : order) mem.Change(0, changes[i].act, changes[i].comm, changes[i].ws, 0);
    // The levels after the instant are the sums whatever the order.
    EXPECT_EQ(mem.act, 110);
    EXPECT_EQ(mem.comm, 15);
    EXPECT_EQ(mem.ws, 20);
    seen.insert({mem.peak_act, mem.peak_comm, mem.peak_ws, mem.peak_total});
  } while (std::next_permutation(order.begin(), order.end()));
  return seen;
}

// One rank at one instant: an op ends (activations -30, its receive buffer
// -10, its workspace -20), its output's send buffer is allocated (+15), and
// the next op starts (activations +40, workspace +20). From (100, 10, 20),
// total 130, they can add at most act 40, comm 15, ws 20 and total
// 15 + 60 = 75 (the end adds nothing): worst order send, start, end reaches
// (140, 25, 40), total 205.
constexpr std::array<Delta, 3> kInstant = {Delta{-30, -10, -20}, Delta{0, 15, 0}, Delta{40, 0, 20}};

TEST(InstantFits, RiseCountsEachChangesGrowth) {
  const InstantRise rise = RiseOf(kInstant);
  EXPECT_EQ(rise.act, 40);
  EXPECT_EQ(rise.comm, 15);
  EXPECT_EQ(rise.ws, 20);
  EXPECT_EQ(rise.total, 75);
}

// Peaks (140, 25, 40, 205): every order reaches them at most, exactly in the
// worst order, so none moves them: the tie need not be decided.
TEST(InstantFits, ChangesUnderEveryPeakNeedNoOrder) {
  const LiveMemory<false> mem = Start(100, 10, 20, {140, 25, 40, 205});
  EXPECT_TRUE(InstantFits(Headroom(mem), RiseOf(kInstant)));
  const std::set<Peaks> peaks = PeaksOverOrders(mem, kInstant);
  ASSERT_EQ(peaks.size(), 1u);
  EXPECT_EQ(*peaks.begin(), Peaks(140, 25, 40, 205));
}

// The total's peak one byte lower, 204: the worst order sets it to 205, the
// order end, send, start keeps it (totals 70, 85, 145): the order decides
// the peak, so the tie must be decided.
TEST(InstantFits, ChangesOverAPeakNeedTheirOrder) {
  const LiveMemory<false> mem = Start(100, 10, 20, {140, 25, 40, 204});
  EXPECT_FALSE(InstantFits(Headroom(mem), RiseOf(kInstant)));
  const std::set<Peaks> peaks = PeaksOverOrders(mem, kInstant);
  EXPECT_EQ(peaks.size(), 2u);
  EXPECT_TRUE(peaks.count(Peaks(140, 25, 40, 204)));
  EXPECT_TRUE(peaks.count(Peaks(140, 25, 40, 205)));
}

// Each category on its own: one byte less of headroom in any of them and
// the instant does not fit (a category's peak would move in some order).
TEST(InstantFits, EachCategoryChecked) {
  EXPECT_FALSE(InstantFits(Headroom(Start(100, 10, 20, {139, 25, 40, 205})), RiseOf(kInstant)));
  EXPECT_FALSE(InstantFits(Headroom(Start(100, 10, 20, {140, 24, 40, 205})), RiseOf(kInstant)));
  EXPECT_FALSE(InstantFits(Headroom(Start(100, 10, 20, {140, 25, 39, 205})), RiseOf(kInstant)));
  // Frees alone always fit, even at a level at its peak.
  InstantRise frees;
  frees.Add(-30, -10, -20);
  EXPECT_TRUE(InstantFits(Headroom(Start(100, 10, 20, {100, 10, 20, 130})), frees));
}

// An op of no duration at the instant: never left undecided, whatever the
// room (its end can start the next op there, InstantRise::ordered).
TEST(InstantFits, AnInstantWithAnOpOfNoDurationIsOrdered) {
  InstantRise rise = RiseOf(kInstant);
  rise.ordered = true;
  EXPECT_FALSE(InstantFits(Headroom(Start(0, 0, 0, {1000, 1000, 1000, 3000})), rise));
}

}  // namespace
}  // namespace pipecast::internal
