// PyTorch's schedule files both ways: the compute_only and compute_comms CSV formats of
// torch/distributed/pipelining/schedules.py, overlapped pairs, and the CSV pipecast writes.
// Fixtures: tests/schedules/ (hand-written, see its README.md).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/file_util.h"
#include "formats/schedule_text.h"
#include "sim/schedule.h"
#include "sim/schedule_traits.h"

namespace pipecast {
namespace {

std::string Fixture(const std::string& name) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  const std::filesystem::path path =
      std::filesystem::path(root != nullptr ? root : ".") / "tests" / "schedules" / name;
  Result<std::string> text = ReadFile(path.string());
  EXPECT_TRUE(text.ok()) << path << ": " << text.status().message()
                         << " (run from the source root or set PIPECAST_SOURCE_DIR)";
  return text.ok() ? *text : "";
}

Action F(int s, int m) { return {s, OpKind::kForward, m}; }
Action B(int s, int m) { return {s, OpKind::kBackward, m}; }
Action Fo(int s, int m) { return {s, OpKind::kForward, m, /*overlapped=*/true}; }
Action Bo(int s, int m) { return {s, OpKind::kBackward, m, /*overlapped=*/true}; }

// 1F1B on 2 ranks, 2 micro-batches, as the fixtures hold it.
const std::vector<std::vector<Action>> k1F1B = {
    {F(0, 0), F(0, 1), B(0, 0), B(0, 1)},
    {F(1, 0), B(1, 0), F(1, 1), B(1, 1)},
};

std::string ParseError(const std::string& text, const std::string& origin = "s.csv") {
  Result<Schedule> s = ParseScheduleText(text, origin);
  EXPECT_FALSE(s.ok()) << "parsed: " << text;
  if (s.ok()) return "";
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  return s.status().message();
}

TEST(PyTorchCsv, ComputeOnlyWithIdleCells) {
  ScheduleTextInfo info;
  Result<Schedule> s = ParseScheduleText(Fixture("1f1b-p2-m2.compute_only.csv"), "co.csv", &info);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->actions, k1F1B);
  EXPECT_EQ(s->num_ranks, 2);
  EXPECT_EQ(s->num_microbatches, 2);
  EXPECT_EQ(s->stage_rank, (std::vector<int>{0, 1}));
  EXPECT_TRUE(ScheduleTextNotes(info, 0).empty());
  // The built-in 1F1B is the same order.
  Result<Schedule> builtin = MakeSchedule(ScheduleKind::k1F1B, 2, 2);
  ASSERT_TRUE(builtin.ok());
  EXPECT_EQ(s->actions, builtin->actions);
}

TEST(PyTorchCsv, ComputeCommsKeepsTheComputeAndCountsTheRest) {
  ScheduleTextInfo info;
  Result<Schedule> s = ParseScheduleText(Fixture("1f1b-p2-m2.compute_comms.csv"), "cc.csv", &info);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->actions, k1F1B);
  // Two micro-batches over one boundary: 2 activations and 2 gradients, each one SEND and
  // one RECV; one UNSHARD, RESHARD and REDUCE_GRAD per stage.
  EXPECT_EQ(info.sends, 4);
  EXPECT_EQ(info.receives, 4);
  EXPECT_EQ(info.late_sends, 0);
  EXPECT_EQ(info.unshards, 2);
  EXPECT_EQ(info.reshards, 2);
  EXPECT_EQ(info.reduce_grads, 2);
  const std::vector<std::string> plain = ScheduleTextNotes(info, 0);
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_NE(plain[0].find("4 SEND and 4 RECV"), std::string::npos) << plain[0];
  EXPECT_NE(plain[1].find("ignored: the run does not shard parameters"), std::string::npos)
      << plain[1];
  const std::vector<std::string> zero3 = ScheduleTextNotes(info, 3);
  ASSERT_EQ(zero3.size(), 2u);
  EXPECT_NE(zero3[1].find("ZeRO-3"), std::string::npos) << zero3[1];
}

TEST(PyTorchCsv, LateSendIsNamed) {
  // 0SEND_F0 after 0F1: PyTorch starts the transfer only then.
  ScheduleTextInfo info;
  Result<Schedule> s = ParseScheduleText(
      "0F0,0F1,0SEND_F0,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
      "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n",
      "late.csv", &info);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(info.late_sends, 1);
  EXPECT_EQ(info.first_late_send, "late.csv:1: column 3: token '0SEND_F0'");
  const std::vector<std::string> notes = ScheduleTextNotes(info, 0);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[1].find("1 SEND actions sit later"), std::string::npos) << notes[1];
}

TEST(PyTorchCsv, OverlappedPairs) {
  ScheduleTextInfo info;
  Result<Schedule> s = ParseScheduleText(Fixture("v-p2-m2.overlap.csv"), "v.csv", &info);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->stage_rank, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(s->actions[0], (std::vector<Action>{F(0, 0), F(0, 1), F(3, 0), B(3, 0), Fo(3, 1),
                                                Bo(0, 0), B(3, 1), B(0, 1)}));
  EXPECT_EQ(s->actions[1], (std::vector<Action>{F(1, 0), F(2, 0), F(1, 1), B(2, 0), Fo(2, 1),
                                                Bo(1, 0), B(2, 1), B(1, 1)}));
  EXPECT_EQ(info.overlapped_pairs, 2);
  const std::vector<std::string> notes = ScheduleTextNotes(info, 0);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("2 overlapped F&B pairs"), std::string::npos) << notes[0];
  // The text form keeps the pair as one token.
  EXPECT_EQ(ScheduleToText(*s),
            "0F0 0F1 3F0 3B0 (3F1;0B0)OVERLAP_F_B 3B1 0B1\n"
            "1F0 2F0 1F1 2B0 (2F1;1B0)OVERLAP_F_B 2B1 1B1\n");
}

TEST(PyTorchCsv, WriterIsWhatDumpCsvWrites) {
  // csv.writer: comma-separated, "\r\n" after every row, nothing quoted.
  Result<Schedule> s = MakeSchedule(ScheduleKind::k1F1B, 2, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(ScheduleToPyTorchCsv(*s), "0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n");
  EXPECT_EQ(ScheduleToFormat(*s, ScheduleFormat::kPyTorchCsv), ScheduleToPyTorchCsv(*s));
  EXPECT_EQ(ScheduleToFormat(*s, ScheduleFormat::kText), ScheduleToText(*s));
}

TEST(PyTorchCsv, RoundTripFromPipecast) {
  // pipecast -> CSV -> pipecast, every built-in at p=4, m=8 (v=2 where chunks are taken).
  for (ScheduleKind kind : BuiltinScheduleKinds()) {
    SCOPED_TRACE(ScheduleKindName(kind));
    const int chunks = UsesChunks(kind) ? 2 : 1;
    Result<Schedule> built = MakeSchedule(kind, 4, 8, chunks);
    if (!built.ok()) continue;  // a shape the kind refuses (its own tests cover that)
    Result<Schedule> back = ParseScheduleText(ScheduleToPyTorchCsv(*built), "rt.csv");
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->actions, built->actions);
    EXPECT_EQ(back->stage_rank, built->stage_rank);
    EXPECT_EQ(back->split_backward, built->split_backward);
  }
}

TEST(PyTorchCsv, RoundTripFromPyTorch) {
  // CSV -> pipecast -> CSV gives the same bytes when the file has no idle cells; idle cells
  // (PyTorch's None steps) are not kept, since each rank's order is what pipecast replays.
  const std::string overlap = Fixture("v-p2-m2.overlap.csv");
  Result<Schedule> s = ParseScheduleText(overlap, "v.csv");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(ScheduleToPyTorchCsv(*s), overlap);
  Result<Schedule> idle = ParseScheduleText(Fixture("1f1b-p2-m2.compute_only.csv"), "co.csv");
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(ScheduleToPyTorchCsv(*idle), "0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n");
}

TEST(PyTorchCsv, QuotedCellsAndByteOrderMark) {
  Result<Schedule> s =
      ParseScheduleText("\xEF\xBB\xBF\"0F0\",0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n", "bom.csv");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->actions, k1F1B);
}

// Issue 28: a CSV whose rows end in a lone CR (old Mac line ends) has two
// rows, as Python's csv reader (and scripts/check_pytorch_csv.py) reads it,
// not one row of eight cells reported as a deadlock; line numbers in errors
// count CR, LF and CRLF alike.
TEST(PyTorchCsv, PyTorchCsvWithLoneCrLineEndsHasOneRankPerRow) {
  Result<Schedule> s = ParseScheduleText("0F0,0F1,0B0,0B1\r1F0,1B0,1F1,1B1\r", "cr.csv");

  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->num_ranks, 2);
  EXPECT_EQ(s->actions, k1F1B);
  EXPECT_EQ(ParseError("0F0,0F1,0B0,0B1\r\r\n1F0,1B0,1F1,1X1\r"),
            "s.csv:3: column 4: token '1X1': unknown kind 'X', expected F, B, I or W");
}

TEST(PyTorchCsvErrors, BadCellsNameRowAndColumn) {
  EXPECT_EQ(ParseError("0F0,0F1,0B0,0X1\n1F0,1B0,1F1,1B1\n"),
            "s.csv:1: column 4: token '0X1': unknown kind 'X', expected F, B, I or W");
  // Empty cells count as columns.
  EXPECT_EQ(ParseError("0F0,,0F1,0B0,0B1\n1F0,1B0,,1F1,1B1,1Q1\n"),
            "s.csv:2: column 6: token '1Q1': unknown kind 'Q', expected F, B, I or W");
  EXPECT_EQ(ParseError("0F0,0SEND_X0\n"),
            "s.csv:1: column 2: token '0SEND_X0': unknown action 'SEND_X', expected F, B, I, W "
            "or one of PyTorch's SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD");
  EXPECT_EQ(ParseError("0F0,0SEND_F\n"),
            "s.csv:1: column 2: token '0SEND_F': missing micro-batch number after 'SEND_F', "
            "expected <stage><kind><microbatch> such as 0F3");
}

TEST(PyTorchCsvErrors, OverlapSyntax) {
  EXPECT_NE(ParseError("(0F0;1B0OVERLAP_F_B\n").find("missing ')'"), std::string::npos);
  EXPECT_NE(ParseError("(0F0;1B0)OVERLAP\n").find("expected OVERLAP_F_B"), std::string::npos);
  EXPECT_NE(ParseError("(0F0)OVERLAP_F_B\n").find("holds 1 action,"), std::string::npos);
  EXPECT_NE(ParseError("(0F0;1B0;2B0;3B0)OVERLAP_F_B\n").find("holds 4 actions"),
            std::string::npos);
  EXPECT_NE(ParseError("(0B0;0F1)OVERLAP_F_B\n").find("a forward then a backward"),
            std::string::npos);
  // The pair's halves are checked like any token, and the error names the cell.
  EXPECT_EQ(ParseError("0F0,(0F1;0Z0)OVERLAP_F_B\n"),
            "s.csv:1: column 2: token '(0F1;0Z0)OVERLAP_F_B': second half: unknown kind 'Z', "
            "expected F, B, I or W");
}

// A compute_comms row pair for 1F1B p=2 m=1 with `rank0` and `rank1` as given.
std::string Comms(const std::string& rank0, const std::string& rank1) {
  return rank0 + "\n" + rank1 + "\n";
}

TEST(PyTorchCsvErrors, CommunicationActionsAreChecked) {
  const std::string r1 = "1RECV_F0,1F0,1B0,1SEND_B0";
  EXPECT_EQ(ParseError(Comms("0SEND_F0,0F0,0RECV_B0,0B0", r1)),
            "s.csv:1: column 1: token '0SEND_F0' comes before 0F0, which produces what it "
            "sends: move it after that op");
  EXPECT_EQ(ParseError(Comms("0F0,0SEND_F0,0B0,0RECV_B0", r1)),
            "s.csv:1: column 4: token '0RECV_B0' comes after 0B0, which needs what it "
            "receives: move it before that op");
  EXPECT_EQ(ParseError(Comms("0F0,0SEND_F0,0RECV_B0,0B0", "1RECV_F0,1F0,1B0")),
            "s.csv: 1SEND_B0 is missing from rank 1 (line 2): a file with SEND/RECV actions "
            "needs one for every transfer between ranks (or none at all)");
  EXPECT_EQ(ParseError(Comms("0F0,0SEND_F0,0RECV_B0,0B0,0RECV_F0", r1)),
            "s.csv:1: column 5: token '0RECV_F0': stage 0 receives activations from no stage "
            "(it is the first stage), so there is nothing to receive: remove the action");
  EXPECT_EQ(ParseError(Comms("0F0,0SEND_F0,1SEND_F0,0RECV_B0,0B0", r1)),
            "s.csv:1: column 3: token '1SEND_F0' is on rank 0, expected rank 1 (line 2), which "
            "holds stage 1's forwards");
  EXPECT_EQ(ParseError(Comms("0F0,0SEND_F0,0SEND_F0,0RECV_B0,0B0", r1)),
            "s.csv:1: column 3: token '0SEND_F0' repeats the action of line 1, expected each "
            "action once");
  EXPECT_EQ(ParseError(Comms("0F0,0SEND_F0,0RECV_B0,0B0,0SEND_F5", r1)),
            "s.csv:1: column 5: token '0SEND_F5': micro-batch 5 does not exist (the forwards "
            "name 0..0)");
  EXPECT_EQ(ParseError(Comms("0F0,0SEND_F0,0RECV_B0,0B0,7UNSHARD", r1)),
            "s.csv:1: column 5: token '7UNSHARD': stage 7 does not exist (the forwards name "
            "stages 0..1), expected a stage of this rank");
}

TEST(PyTorchCsvErrors, OverlappedPairRules) {
  // Both halves of one (stage, micro-batch) cannot overlap: the backward needs the forward.
  EXPECT_NE(ParseError("(0F0;0B0)OVERLAP_F_B\n").find("overlaps an op with its own backward"),
            std::string::npos);
}

TEST(ScheduleFormatFlag, Names) {
  EXPECT_EQ(*ParseScheduleFormat("text"), ScheduleFormat::kText);
  EXPECT_EQ(*ParseScheduleFormat("pytorch-csv"), ScheduleFormat::kPyTorchCsv);
  Result<ScheduleFormat> bad = ParseScheduleFormat("csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown schedule format 'csv', expected text or pytorch-csv");
}

}  // namespace
}  // namespace pipecast
