#include "sim/schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::B;
using ::pipecast::test_util::CustomSchedule;
using ::pipecast::test_util::F;
using ::testing::HasSubstr;

std::string Line(const Schedule& s, int rank) {
  std::string out;
  for (const Action& a : s.actions[rank]) out += (out.empty() ? "" : " ") + ActionName(a);
  return out;
}

TEST(ScheduleBuiltin, OneFOneBFollowsMegatronWarmup) {
  auto s = MakeSchedule(ScheduleKind::k1F1B, 4, 6);
  ASSERT_TRUE(s.ok());
  // Rank 0 warms up with p-1 = 3 forwards, the last rank with none.
  EXPECT_EQ(Line(*s, 0), "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0B3 0B4 0B5");
  EXPECT_EQ(Line(*s, 3), "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5");
  EXPECT_TRUE(ValidateSchedule(*s).ok());
}

TEST(ScheduleBuiltin, OneFOneBWithFewerMicrobatchesThanStages) {
  auto s = MakeSchedule(ScheduleKind::k1F1B, 4, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Line(*s, 0), "0F0 0F1 0B0 0B1");
  EXPECT_EQ(Line(*s, 2), "2F0 2F1 2B0 2B1");
  EXPECT_EQ(Line(*s, 3), "3F0 3B0 3F1 3B1");
}

TEST(ScheduleBuiltin, GPipeAndNaive) {
  auto g = MakeSchedule(ScheduleKind::kGPipe, 2, 3);
  EXPECT_EQ(Line(*g, 1), "1F0 1F1 1F2 1B0 1B1 1B2");
  auto n = MakeSchedule(ScheduleKind::kNaive, 2, 2);
  EXPECT_EQ(Line(*n, 0), "0F0 0B0 0F1 0B1");
  EXPECT_EQ(n->NumActions(), 8);
}

TEST(ScheduleBuiltin, NamesAndErrors) {
  EXPECT_EQ(*ParseScheduleKind("gpipe"), ScheduleKind::kGPipe);
  EXPECT_THAT(ParseScheduleKind("zb").status().message(), HasSubstr("unknown schedule 'zb'"));
  EXPECT_THAT(MakeSchedule(ScheduleKind::kGPipe, 0, 4).status().message(),
              HasSubstr("--stages is 0"));
  EXPECT_THAT(MakeSchedule(ScheduleKind::kGPipe, 2, 0).status().message(),
              HasSubstr("--microbatches is 0"));
}

TEST(ScheduleValidate, DuplicatedMissingAndMisplacedOps) {
  EXPECT_THAT(ValidateSchedule(CustomSchedule(1, {{F(0, 0), F(0, 0), B(0, 0)}})).message(),
              HasSubstr("0F0 appears more than once"));
  EXPECT_THAT(ValidateSchedule(CustomSchedule(1, {{F(0, 0)}})).message(),
              HasSubstr("0B0 is missing"));
  EXPECT_THAT(
      ValidateSchedule(CustomSchedule(1, {{F(0, 0), B(0, 0), F(1, 0)}, {B(1, 0)}})).message(),
      HasSubstr("1F0 is on rank 0's list, but stage 1 belongs to rank 1"));
  EXPECT_THAT(ValidateSchedule(CustomSchedule(1, {{F(0, 0), B(0, 3)}})).message(),
              HasSubstr("micro-batch 3 is out of range"));
  EXPECT_THAT(ValidateSchedule(CustomSchedule(1, {{F(0, 0), Action{0, OpKind::kBackwardInput, 0}}}))
                  .message(),
              HasSubstr("0W0 is missing"));
}

}  // namespace
}  // namespace pipecast
