// The planner's progress display (issue 17: "a run longer than a few seconds
// shows progress on stderr"), driven by a fake clock.
#include "report/search_progress.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pipecast {
namespace {

constexpr TimeNs kSecond = 1'000'000'000;

SearchProgress Simulated(int done, int total) {
  return SearchProgress{SearchProgress::Pass::kSimulate, done, total};
}
SearchProgress Partitioned(int done, int total) {
  return SearchProgress{SearchProgress::Pass::kPartition, done, total};
}

TEST(PlannerProgress, TextNamesThePass) {
  EXPECT_EQ(SearchProgressText(Simulated(1200, 5600)), "1200/5600 configurations simulated");
  EXPECT_EQ(SearchProgressText(Partitioned(3, 40)), "3/40 configurations partitioned");
  // Issue 26: the partition pass ends counting what was never partitioned.
  EXPECT_EQ(SearchProgressText(SearchProgress{SearchProgress::Pass::kPartition, 40, 40, 25}),
            "40/40 configurations done: 15 partitioned, 25 skipped (their lower bound cannot "
            "reach the top before partitioning)");
}

TEST(PlannerProgress, PlainLinesAfterTheDelayAtMostEveryInterval) {
  FakeClock clock;
  std::string out;
  SearchProgressStyle style;  // lines: after 2 s, every 2 s
  SearchProgressDisplay display(clock, style, [&](const std::string& t) { out += t; });
  display.Update(Partitioned(0, 100));
  clock.Advance(kSecond);
  display.Update(Partitioned(50, 100));
  EXPECT_EQ(out, "") << "a search shorter than the delay shows nothing";
  clock.Advance(kSecond);  // 2 s: shown
  display.Update(Partitioned(60, 100));
  clock.Advance(kSecond / 2);  // within the interval: not shown
  display.Update(Partitioned(70, 100));
  display.Update(Partitioned(100, 100));  // the end of a pass: shown at once
  display.Update(Partitioned(100, 100));  // and once only
  display.Update(Simulated(0, 80));       // a new pass: shown at once
  clock.Advance(kSecond);
  display.Update(Simulated(16, 80));  // 1 s later: not yet
  clock.Advance(kSecond);
  display.Update(Simulated(32, 80));  // 2 s later: shown
  display.Finish();                   // lines need no ending
  EXPECT_EQ(out,
            "planner: 60/100 configurations partitioned (2.0 s)\n"
            "planner: 100/100 configurations partitioned (2.5 s)\n"
            "planner: 0/80 configurations simulated (2.5 s)\n"
            "planner: 32/80 configurations simulated (4.5 s)\n");
}

TEST(PlannerProgress, BarRedrawsOneLineAndEndsIt) {
  FakeClock clock;
  std::vector<std::string> writes;
  SearchProgressStyle style;
  style.bar = true;
  style.after_ns = 0;
  style.bar_width = 10;
  SearchProgressDisplay display(clock, style, [&](const std::string& t) { writes.push_back(t); });
  display.Update(Simulated(25, 100));
  clock.Advance(kSecond);
  display.Update(Simulated(100, 100));
  display.Finish();
  display.Finish();  // once
  ASSERT_EQ(writes.size(), 3u);
  EXPECT_EQ(writes[0], "\rplanner: [##........] 25/100 configurations simulated (0.0 s)");
  EXPECT_EQ(writes[1], "\rplanner: [##########] 100/100 configurations simulated (1.0 s)");
  EXPECT_EQ(writes[2], "\n");
}

// Issue 28: when pruning ended the search, the last update said 30 of 48
// configurations were simulated and the bar stopped at 62%. The pass's end
// counts what it skipped: the bar ends full, with the elapsed time.
TEST(PlannerProgress, BarEndsAt100PercentWhenPruningEndsTheSearch) {
  FakeClock clock;
  std::vector<std::string> writes;
  SearchProgressStyle style;
  style.bar = true;
  style.after_ns = 0;
  style.bar_width = 10;
  SearchProgressDisplay display(clock, style, [&](const std::string& t) { writes.push_back(t); });
  display.Update(Simulated(16, 48));
  clock.Advance(3 * kSecond);
  display.Update(SearchProgress{SearchProgress::Pass::kSimulate, 48, 48, /*pruned=*/18});
  display.Finish();

  ASSERT_EQ(writes.size(), 3u);
  EXPECT_EQ(writes[1],
            "\rplanner: [##########] 48/48 configurations done: 30 simulated, 18 skipped (their "
            "lower bound cannot reach the top) (3.0 s)");
}

}  // namespace
}  // namespace pipecast
