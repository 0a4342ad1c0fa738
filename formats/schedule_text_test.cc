#include "formats/schedule_text.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "formats/file_util.h"

namespace pipecast {
namespace {

constexpr char kOrigin[] = "s.txt";

// Two ranks, two micro-batches, GPipe: all forwards, then all backwards.
constexpr char kGPipe2x2[] =
    "0F0 0F1 0B0 0B1\n"
    "1F0 1F1 1B0 1B1\n";

Schedule MustParse(const std::string& text) {
  Result<Schedule> s = ParseScheduleText(text, kOrigin);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : Schedule{};
}

// The error message of text that must not parse.
std::string ParseError(const std::string& text) {
  Result<Schedule> s = ParseScheduleText(text, kOrigin);
  EXPECT_FALSE(s.ok()) << "parsed: " << text;
  if (s.ok()) return "";
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  return s.status().message();
}

Action F(int s, int m) { return {s, OpKind::kForward, m}; }
Action B(int s, int m) { return {s, OpKind::kBackward, m}; }
Action I(int s, int m) { return {s, OpKind::kBackwardInput, m}; }
Action W(int s, int m) { return {s, OpKind::kBackwardWeight, m}; }

TEST(ScheduleTextTest, ParsesTwoRankGPipe) {
  Schedule s = MustParse(kGPipe2x2);
  EXPECT_EQ(s.name, "custom");
  EXPECT_EQ(s.num_ranks, 2);
  EXPECT_EQ(s.num_stages, 2);
  EXPECT_EQ(s.num_microbatches, 2);
  EXPECT_EQ(s.stage_rank, (std::vector<int>{0, 1}));
  EXPECT_FALSE(s.split_backward);
  ASSERT_EQ(s.actions.size(), 2u);
  EXPECT_EQ(s.actions[0], (std::vector<Action>{F(0, 0), F(0, 1), B(0, 0), B(0, 1)}));
  EXPECT_EQ(s.actions[1], (std::vector<Action>{F(1, 0), F(1, 1), B(1, 0), B(1, 1)}));
}

TEST(ScheduleTextTest, CommasAndSpacesSeparateAlike) {
  Schedule s = MustParse("0F0,0F1 , 0B0,,0B1\t\r\n1F0, 1F1 1B0 ,1B1,\r\n");
  EXPECT_EQ(s.actions, MustParse(kGPipe2x2).actions);
}

TEST(ScheduleTextTest, CommentsAndBlankLinesAreSkippedAndDoNotCountAsRanks) {
  Schedule s = MustParse(
      "# 2 ranks, 1 micro-batch\n"
      "\n"
      "0F0 0B0  # rank 0\n"
      "   ,  \n"
      "# rank 1 follows\n"
      "1F0 1B0");  // no trailing newline
  EXPECT_EQ(s.num_ranks, 2);
  EXPECT_EQ(s.actions[1], (std::vector<Action>{F(1, 0), B(1, 0)}));
}

TEST(ScheduleTextTest, SplitBackwardWhenIOrWAppears) {
  Schedule s = MustParse("0F0 0I0 0W0\n");
  EXPECT_TRUE(s.split_backward);
  EXPECT_EQ(s.actions[0], (std::vector<Action>{F(0, 0), I(0, 0), W(0, 0)}));
}

TEST(ScheduleTextTest, InterleavedStagesMapToTheirForwardsRank) {
  Schedule s = MustParse(
      "0F0 2F0 2B0 0B0\n"
      "1F0 3F0 3B0 1B0\n");
  EXPECT_EQ(s.num_ranks, 2);
  EXPECT_EQ(s.num_stages, 4);
  EXPECT_EQ(s.stage_rank, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(s.ChunksPerRank(), 2);
}

TEST(ScheduleTextTest, UnknownKindNamesLineTokenAndKinds) {
  EXPECT_EQ(ParseError("0F0 0B0\n\n1X0\n"),
            "s.txt:3: token '1X0': unknown kind 'X', expected F, B, I or W");
  EXPECT_EQ(ParseError("0f0"),
            "s.txt:1: token '0f0': unknown kind 'f', expected F, B, I or W (upper case)");
}

TEST(ScheduleTextTest, MissingNumbers) {
  EXPECT_EQ(ParseError("F0"),
            "s.txt:1: token 'F0': 'F0' where the stage number belongs, expected "
            "<stage><kind><microbatch> such as 0F3");
  EXPECT_EQ(ParseError("0F0 1F"),
            "s.txt:1: token '1F': missing micro-batch number after 'F', expected "
            "<stage><kind><microbatch> such as 0F3");
  EXPECT_EQ(ParseError("12"),
            "s.txt:1: token '12': missing kind after the stage number, expected F, B, I or W");
}

TEST(ScheduleTextTest, NegativeNumbers) {
  EXPECT_EQ(ParseError("-1F0"),
            "s.txt:1: token '-1F0': negative stage number, expected an index >= 0");
  EXPECT_EQ(ParseError("0B-2"),
            "s.txt:1: token '0B-2': negative micro-batch number, expected an index >= 0");
}

TEST(ScheduleTextTest, Garbage) {
  EXPECT_EQ(ParseError("abc"),
            "s.txt:1: token 'abc': 'abc' where the stage number belongs, expected "
            "<stage><kind><microbatch> such as 0F3");
  EXPECT_EQ(ParseError("0F0x"),
            "s.txt:1: token '0F0x': unexpected 'x' after the micro-batch number, expected "
            "<stage><kind><microbatch> such as 0F3");
  EXPECT_EQ(ParseError("0F0;0B0"),
            "s.txt:1: token '0F0;0B0': unexpected ';0B0' after the micro-batch number, "
            "expected <stage><kind><microbatch> such as 0F3");
  EXPECT_EQ(ParseError("0F99999999999"),
            "s.txt:1: token '0F99999999999': micro-batch number too large, expected an index "
            "of at most 999999");
}

TEST(ScheduleTextTest, EmptyFile) {
  const std::string want =
      "s.txt: no actions, expected one line of actions per rank such as '0F0 0F1 0B0 0B1'";
  EXPECT_EQ(ParseError(""), want);
  EXPECT_EQ(ParseError("# nothing\n\n  \n"), want);
}

TEST(ScheduleTextTest, StageForwardsOnTwoRanks) {
  EXPECT_EQ(ParseError("0F0 0B0\n1F0 0F1 1B0\n"),
            "s.txt:2: token '0F1': stage 0's forwards are on rank 0 (line 1) and rank 1 "
            "(line 2), expected all of a stage's actions on one rank");
}

TEST(ScheduleTextTest, StageWithoutForwards) {
  EXPECT_EQ(ParseError("0F0 0B0\n2F0 2B0\n"),
            "s.txt: stage 1 has no forward (the largest stage index is 2, so stages 0..2 "
            "exist), expected its forwards on the rank that owns it");
  EXPECT_EQ(ParseError("0F0 0B0 1B0\n"),
            "s.txt: stage 1 has no forward (the largest stage index is 1, so stages 0..1 "
            "exist), expected its forwards on the rank that owns it");
}

TEST(ScheduleTextTest, BackwardOnAnotherRankThanItsForwards) {
  EXPECT_EQ(ParseError("0F0 1B0\n1F0 0B0\n"),
            "s.txt:1: token '1B0' is on rank 0, expected rank 1 (line 2), which holds stage "
            "1's forwards");
}

TEST(ScheduleTextTest, RepeatedAction) {
  EXPECT_EQ(ParseError("0F0 0B0\n# again\n\n"
                       "1F0 1B0 1F0\n"),
            "s.txt:4: token '1F0' repeats the action of line 4, expected each action once");
}

TEST(ScheduleTextTest, MissingForwardOfAMicrobatch) {
  EXPECT_EQ(ParseError("0F0 0F2 0B0 0B2\n"),
            "s.txt: stage 0 has no forward of micro-batch 1 (the largest micro-batch index is "
            "2, so micro-batches 0..2 exist), expected every stage to run every micro-batch");
}

TEST(ScheduleTextTest, IncompleteIterationIsReportedByValidateSchedule) {
  // Every forward is there but stage 1 micro-batch 0 has no backward.
  Result<Schedule> s = ParseScheduleText("0F0 0B0\n1F0\n", kOrigin);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message().rfind("s.txt: ", 0), 0u) << s.status().message();
}

TEST(ScheduleTextTest, WritesOneLinePerRankWithSingleSpaces) {
  Schedule s = MustParse("0F0,0F1   0B0 0B1 # c\n\n1F0 1F1,1B0,1B1");
  EXPECT_EQ(ScheduleToText(s), kGPipe2x2);
}

TEST(ScheduleTextTest, RoundTripsTextThroughSchedule) {
  const std::string text =
      "0F0 2F0 0F1 2F1 2I0 0I0 2W0 0W0 2I1 0I1 2W1 0W1\n"
      "1F0 3F0 1F1 3F1 3I0 1I0 3W0 1W0 3I1 1I1 3W1 1W1\n";
  Schedule s = MustParse(text);
  EXPECT_EQ(ScheduleToText(s), text);
  Schedule again = MustParse(ScheduleToText(s));
  EXPECT_EQ(again.actions, s.actions);
  EXPECT_EQ(again.stage_rank, s.stage_rank);
  EXPECT_EQ(again.split_backward, s.split_backward);
}

TEST(ScheduleTextTest, RoundTripsBuiltInSchedule) {
  Result<Schedule> built = MakeSchedule(ScheduleKind::k1F1B, 4, 8);
  ASSERT_TRUE(built.ok()) << built.status().message();
  Schedule parsed = MustParse(ScheduleToText(*built));
  EXPECT_EQ(parsed.num_ranks, 4);
  EXPECT_EQ(parsed.num_stages, 4);
  EXPECT_EQ(parsed.num_microbatches, 8);
  EXPECT_EQ(parsed.stage_rank, built->stage_rank);
  EXPECT_EQ(parsed.actions, built->actions);
}

TEST(ScheduleTextTest, RoundTripsBidirectionalDualPipe) {
  // Written with directions (b3F0: direction b's stage 3 = virtual stage p+3, its micro-batch
  // 0 = micro-batch m/2), read back to the same schedule.
  for (int p : {2, 4, 8}) {
    SCOPED_TRACE(p);
    Result<Schedule> built = MakeSchedule(ScheduleKind::kDualPipe, p, 2 * p + 4, 2);
    ASSERT_TRUE(built.ok()) << built.status().message();
    const std::string text = ScheduleToText(*built);
    EXPECT_EQ(text.substr(0, 3), "a0F");
    Schedule parsed = MustParse(text);
    EXPECT_TRUE(parsed.bidirectional);
    EXPECT_EQ(parsed.num_ranks, p);
    EXPECT_EQ(parsed.num_stages, 2 * p);
    EXPECT_EQ(parsed.num_microbatches, 2 * p + 4);
    EXPECT_EQ(parsed.stage_rank, built->stage_rank);
    EXPECT_EQ(parsed.actions, built->actions);
    EXPECT_EQ(parsed.split_backward, built->split_backward);
    EXPECT_EQ(ScheduleToText(parsed), text);
  }
}

TEST(ScheduleTextTest, ReadsDualPipesOwnOrderAsTheBuiltInSchedule) {
  // tests/schedules/dualpipe-p4-m8.txt, written by scripts/dualpipe_order.py from dualpipe.py.
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  const std::string path =
      std::string(root != nullptr ? root : ".") + "/tests/schedules/dualpipe-p4-m8.txt";
  Result<Schedule> read = LoadScheduleText(path);
  ASSERT_TRUE(read.ok()) << read.status().message();
  Result<Schedule> built = MakeSchedule(ScheduleKind::kDualPipe, 4, 8, 2);
  ASSERT_TRUE(built.ok());
  EXPECT_TRUE(read->bidirectional);
  EXPECT_EQ(read->actions, built->actions);
  EXPECT_EQ(read->stage_rank, built->stage_rank);
}

TEST(ScheduleTextTest, BidirectionalTextErrorsNameTheDirection) {
  // p = 2, m = 4 (two micro-batches each way), direction b's stage 1 on rank 0.
  const std::string ok =
      "a0F0 a0F1 b1F0 b1F1 b1B0 b1B1 a0B0 a0B1\n"
      "b0F0 b0F1 a1F0 a1F1 a1B0 a1B1 b0B0 b0B1\n";
  EXPECT_TRUE(MustParse(ok).bidirectional);
  EXPECT_EQ(ParseError("a0F0 0F1 b1F0 b1F1 b1B0 b1B1 a0B0 a0B1\n"
                       "b0F0 b0F1 a1F0 a1F1 a1B0 a1B1 b0B0 b0B1\n"),
            "s.txt:1: token '0F1' has no direction but s.txt:1: token 'a0F0' has one: a "
            "bidirectional schedule names every op's direction, a (entering at rank 0) or b "
            "(entering at the last rank), as in a0F3");
  EXPECT_EQ(ParseError("a0F0 a0F1 b2F0\nb0F0\n"),
            "s.txt:1: token 'b2F0': direction b has stages 0..1 on a bidirectional schedule of 2 "
            "ranks (one line each), expected a stage below 2");
  EXPECT_EQ(ParseError("a0F0 a0F1 b1F0 b1B0 a0B0 a0B1\n"
                       "b0F0 b0F1 a1F0 a1F1 a1B0 a1B1 b0B0 b0B1\n"),
            "s.txt: direction b's stage 1 has no forward of its micro-batch 1 (its largest "
            "micro-batch index is 1), expected every stage to run every micro-batch of its "
            "direction");
}

TEST(ScheduleTextTest, LoadsFromFileAndNamesItInErrors) {
  const std::string path = ::testing::TempDir() + "schedule_text_test.txt";
  ASSERT_TRUE(WriteFileAtomic(path, kGPipe2x2).ok());
  Result<Schedule> s = LoadScheduleText(path);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->num_ranks, 2);

  ASSERT_TRUE(WriteFileAtomic(path, "0F0 0Q0\n").ok());
  s = LoadScheduleText(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            path + ":1: token '0Q0': unknown kind 'Q', expected F, B, I or W");
  std::remove(path.c_str());

  s = LoadScheduleText(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace pipecast
