#include "sim/schedule_traits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pipecast {
namespace {

using ::testing::HasSubstr;

// Given a kind, when its row is read, then these are its facts.
struct Row {
  ScheduleKind kind;
  const char* name;
  bool builtin, planner_default, uses_chunks;
  int default_chunks;
  bool splits_backward, flush;
  MicrobatchRule rule;
  Placement placement = Placement::kLooped;
};

TEST(ScheduleTraits, EveryKindHasItsRow) {
  const Row rows[] = {
      {ScheduleKind::kNaive, "naive", true, true, false, 1, false, true, MicrobatchRule::kAny},
      {ScheduleKind::kGPipe, "gpipe", true, true, false, 1, false, true, MicrobatchRule::kAny},
      {ScheduleKind::k1F1B, "1f1b", true, true, false, 1, false, true, MicrobatchRule::kAny},
      {ScheduleKind::kInterleaved1F1B, "interleaved", true, true, true, 2, false, true,
       MicrobatchRule::kAny},
      {ScheduleKind::kPipeDream, "pipedream", true, false, false, 1, false, false,
       MicrobatchRule::kAny},
      {ScheduleKind::kZBH1, "zb-h1", true, true, false, 1, true, true, MicrobatchRule::kAny},
      {ScheduleKind::kZBH2, "zb-h2", true, true, false, 1, true, true, MicrobatchRule::kAny},
      {ScheduleKind::kLoopedBFS, "looped-bfs", true, true, true, 2, false, true,
       MicrobatchRule::kAtLeastStages},
      {ScheduleKind::kZBV, "zb-v", true, false, true, 2, true, true, MicrobatchRule::kAny,
       Placement::kV},
      {ScheduleKind::kVHalf, "v-half", true, false, true, 2, true, true, MicrobatchRule::kAny,
       Placement::kV},
      {ScheduleKind::kVMin, "v-min", true, false, true, 2, true, true, MicrobatchRule::kAny,
       Placement::kV},
      {ScheduleKind::kInterleavedZB, "interleaved-zb", true, false, true, 2, true, true,
       MicrobatchRule::kAny},
      {ScheduleKind::kDualPipeV, "dualpipev", true, true, true, 2, true, true,
       MicrobatchRule::kAtLeastTwiceStages, Placement::kV},
      {ScheduleKind::kZBAuto, "zb-auto", true, true, false, 1, true, true, MicrobatchRule::kAny},
      {ScheduleKind::kZBVAuto, "zb-v-auto", true, false, true, 2, true, true, MicrobatchRule::kAny,
       Placement::kV},
      {ScheduleKind::kDualPipe, "dualpipe", true, false, true, 2, true, true,
       MicrobatchRule::kBidirectional, Placement::kV},
      {ScheduleKind::kCustom, "custom", false, false, false, 1, false, true, MicrobatchRule::kAny},
  };
  ASSERT_EQ(AllScheduleTraits().size(), std::size(rows));
  for (const Row& want : rows) {
    const ScheduleTraits& t = TraitsOf(want.kind);
    SCOPED_TRACE(want.name);
    EXPECT_EQ(t.kind, want.kind);
    EXPECT_STREQ(t.name, want.name);
    EXPECT_STREQ(ScheduleKindName(want.kind), want.name);
    EXPECT_EQ(t.builtin, want.builtin);
    EXPECT_EQ(t.planner_default, want.planner_default);
    EXPECT_EQ(t.uses_chunks, want.uses_chunks);
    EXPECT_EQ(UsesChunks(want.kind), want.uses_chunks);
    EXPECT_EQ(t.default_chunks, want.default_chunks);
    EXPECT_EQ(t.splits_backward, want.splits_backward);
    EXPECT_EQ(SplitsBackward(want.kind), want.splits_backward);
    EXPECT_EQ(t.flush, want.flush);
    EXPECT_EQ(t.placement, want.placement);
    EXPECT_EQ(t.fixed_chunks, want.placement == Placement::kV ? 2 : 0);
    EXPECT_EQ(t.microbatch_rule, want.rule);
    EXPECT_EQ(t.bidirectional, want.kind == ScheduleKind::kDualPipe);
    EXPECT_EQ(t.generate != nullptr, want.builtin);
    EXPECT_NE(t.inflight_microbatches, nullptr);
    EXPECT_STRNE(t.source, "");
    EXPECT_STRNE(t.rule_label, "");
    if (want.rule == MicrobatchRule::kAtLeastStages ||
        want.rule == MicrobatchRule::kAtLeastTwiceStages ||
        want.rule == MicrobatchRule::kBidirectional) {
      EXPECT_STRNE(t.too_few_microbatches_why, "");
    }
  }
}

TEST(ScheduleTraits, RowsAreInEnumOrderAndBuiltinsSkipCustom) {
  int i = 0;
  for (const ScheduleTraits& t : AllScheduleTraits()) EXPECT_EQ(static_cast<int>(t.kind), i++);
  std::vector<ScheduleKind> want;
  for (const ScheduleTraits& t : AllScheduleTraits()) {
    if (t.kind != ScheduleKind::kCustom) want.push_back(t.kind);
  }
  EXPECT_EQ(BuiltinScheduleKinds(), want);
}

// Given p = 4, the in-flight bounds of docs/schedules.md.
TEST(ScheduleTraits, InflightBoundsFollowTheSchedule) {
  struct Case {
    ScheduleKind kind;
    int stage, m, want;
  };
  const Case cases[] = {{ScheduleKind::kNaive, 0, 8, 1},
                        {ScheduleKind::kGPipe, 3, 8, 8},
                        {ScheduleKind::k1F1B, 0, 8, 4},
                        {ScheduleKind::k1F1B, 3, 8, 1},
                        {ScheduleKind::k1F1B, 0, 2, 2},
                        {ScheduleKind::kPipeDream, 1, 8, 3},
                        {ScheduleKind::kCustom, 1, 8, 3},
                        {ScheduleKind::kZBH1, 3, 8, 4},
                        {ScheduleKind::kZBH2, 3, 8, 7},
                        {ScheduleKind::kZBH2, 3, 5, 5},
                        {ScheduleKind::kInterleaved1F1B, 0, 8, 8},
                        {ScheduleKind::kLoopedBFS, 2, 8, 8}};
  for (const Case& c : cases) {
    EXPECT_EQ(TraitsOf(c.kind).inflight_microbatches(c.stage, 4, c.m), c.want)
        << ScheduleKindName(c.kind) << " stage " << c.stage << " m=" << c.m;
  }
}

TEST(ScheduleTraits, LoopedPlacementPutsChunkCOfRankROnStageCPPlusR) {
  EXPECT_EQ(StageRank(Placement::kLooped, 0, 4), 0);
  EXPECT_EQ(StageRank(Placement::kLooped, 3, 4), 3);
  EXPECT_EQ(StageRank(Placement::kLooped, 5, 4), 1);
}

TEST(ScheduleTraits, VPlacementPutsRankROnStagesRAnd2PMinus1MinusR) {
  // p = 4: stages 0..7 on ranks 0 1 2 3 3 2 1 0.
  const int want[] = {0, 1, 2, 3, 3, 2, 1, 0};
  for (int st = 0; st < 8; ++st) EXPECT_EQ(StageRank(Placement::kV, st, 4), want[st]) << st;
  Result<Schedule> s = MakeSchedule(ScheduleKind::kDualPipeV, 4, 8, 2);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->stage_rank, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
}

// Given every built-in kind on 4 ranks with 8 micro-batches (a shape each takes), when it is
// built, then its ops are overlapped pairs exactly when its row says so (DualPipe and
// DualPipeV), and ScheduleShape is the built schedule less its order.
TEST(ScheduleTraits, OverlappedPairsAndShapeFollowTheGenerators) {
  for (ScheduleKind kind : BuiltinScheduleKinds()) {
    const ScheduleTraits& t = TraitsOf(kind);
    Result<Schedule> s = MakeSchedule(kind, 4, 8, t.default_chunks);
    ASSERT_TRUE(s.ok()) << t.name << ": " << s.status().message();
    bool overlapped = false;
    for (const std::vector<Action>& list : s->actions) {
      for (const Action& a : list) overlapped = overlapped || a.overlapped;
    }
    EXPECT_EQ(overlapped, t.overlapped_pairs) << t.name;
    const Schedule shape = ScheduleShape(kind, 4, 8, t.default_chunks);
    EXPECT_EQ(shape.stage_rank, s->stage_rank) << t.name;
    EXPECT_EQ(shape.num_stages, s->num_stages) << t.name;
    EXPECT_EQ(shape.bidirectional, s->bidirectional) << t.name;
    EXPECT_EQ(shape.split_backward, s->split_backward) << t.name;
    EXPECT_EQ(shape.actions.size(), s->actions.size()) << t.name;
    for (const std::vector<Action>& list : shape.actions) EXPECT_TRUE(list.empty()) << t.name;
  }
  EXPECT_TRUE(TraitsOf(ScheduleKind::kDualPipe).overlapped_pairs);
  EXPECT_TRUE(TraitsOf(ScheduleKind::kDualPipeV).overlapped_pairs);
}

std::string ShapeError(ScheduleKind kind, int ranks, int m, int chunks) {
  Status st = CheckShape(kind, ranks, m, chunks);
  return st.ok() ? "" : std::string(st.message());
}

TEST(ScheduleTraits, CheckShapeAcceptsWhatEachScheduleTakes) {
  for (const ScheduleTraits& t : AllScheduleTraits()) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(ShapeError(t.kind, 4, 8, t.default_chunks), "");
    // The smallest shape each takes: one rank, one micro-batch (two for DualPipeV's m >= 2p),
    // one chunk (a V's two); DualPipe two ranks (p even) and four micro-batches.
    const bool bidirectional = t.microbatch_rule == MicrobatchRule::kBidirectional;
    const int p = bidirectional ? 2 : 1;
    const int m = bidirectional                                              ? 4
                  : t.microbatch_rule == MicrobatchRule::kAtLeastTwiceStages ? 2
                                                                             : 1;
    EXPECT_EQ(ShapeError(t.kind, p, m, t.fixed_chunks > 0 ? t.fixed_chunks : 1), "");
  }
}

TEST(ScheduleTraits, CheckShapeCountErrors) {
  EXPECT_EQ(ShapeError(ScheduleKind::k1F1B, 0, 8, 1),
            "--stages is 0: a pipeline needs at least 1 stage");
  EXPECT_EQ(ShapeError(ScheduleKind::k1F1B, 4, 0, 1),
            "--microbatches is 0: an iteration needs at least 1 micro-batch");
  EXPECT_EQ(ShapeError(ScheduleKind::kGPipe, 4, 8, 2),
            "--chunks is 2: gpipe takes exactly 1 model chunk per GPU; only interleaved, "
            "looped-bfs, zb-v, v-half, v-min, interleaved-zb, dualpipev, zb-v-auto, dualpipe "
            "take more");
  EXPECT_EQ(ShapeError(ScheduleKind::kInterleaved1F1B, 4, 8, 0),
            "--chunks is 0: interleaved takes exactly 1 model chunk per GPU; only interleaved, "
            "looped-bfs, zb-v, v-half, v-min, interleaved-zb, dualpipev, zb-v-auto, dualpipe "
            "take more");
  EXPECT_EQ(ShapeError(ScheduleKind::kZBV, 4, 8, 3),
            "--chunks is 3: zb-v takes exactly 2 model chunks per GPU, in a V (rank r holds "
            "stages r and 2P-1-r); leave --chunks out or give 2");
  EXPECT_EQ(ShapeError(ScheduleKind::k1F1B, 1024, 8193, 1),
            "1024 stages x 8193 micro-batches = 8389632 (stage, micro-batch) pairs is over the "
            "limit of 2^23 (8388608): use fewer micro-batches or stages");
}

TEST(ScheduleTraits, CheckShapeMicrobatchRuleErrors) {
  // PyTorch's orders take every micro-batch count (issue 16): m = 6 and m = 3 on 4 stages.
  for (ScheduleKind k : {ScheduleKind::kInterleaved1F1B, ScheduleKind::kInterleavedZB}) {
    EXPECT_EQ(ShapeError(k, 4, 6, 2), "");
    EXPECT_EQ(ShapeError(k, 4, 3, 2), "");
  }
  EXPECT_EQ(ShapeError(ScheduleKind::kLoopedBFS, 4, 3, 2),
            "looped-bfs needs at least as many micro-batches (N = 3) as pipeline stages (P = 4): "
            "with fewer, each rank idles between its chunks waiting for the first micro-batch to "
            "come round; use --microbatches 4 or more");
  // sail-sg's zero-bubble runs take m < p (p = 8, m = 2).
  for (ScheduleKind k : {ScheduleKind::kZBH1, ScheduleKind::kZBH2}) {
    EXPECT_EQ(ShapeError(k, 4, 3, 1), "");
    EXPECT_EQ(ShapeError(k, 8, 2, 1), "");
  }
}

TEST(ScheduleTraits, DualPipeVShapeErrors) {
  EXPECT_EQ(ShapeError(ScheduleKind::kDualPipeV, 4, 7, 2),
            "dualpipev needs at least twice as many micro-batches (N = 7) as pipeline stages "
            "(P = 4): both chunks' warm-ups must fill before its steady state; use "
            "--microbatches 8 or more");
  EXPECT_EQ(ShapeError(ScheduleKind::kDualPipeV, 4, 8, 3),
            "--chunks is 3: dualpipev takes exactly 2 model chunks per GPU, in a V (rank r holds "
            "stages r and 2P-1-r); leave --chunks out or give 2");
  EXPECT_EQ(MicrobatchRuleConflict(ScheduleKind::kDualPipeV, 4, 7),
            "dualpipev needs m (7) >= 2p (8)");
  EXPECT_EQ(MicrobatchRuleConflict(ScheduleKind::kDualPipeV, 4, 8), "");
}

TEST(ScheduleTraits, MicrobatchRuleConflictIsThePlannersTerseForm) {
  EXPECT_EQ(MicrobatchRuleConflict(ScheduleKind::k1F1B, 4, 3), "");
  EXPECT_EQ(MicrobatchRuleConflict(ScheduleKind::kInterleaved1F1B, 4, 8), "");
  EXPECT_EQ(MicrobatchRuleConflict(ScheduleKind::kInterleaved1F1B, 4, 6), "");
  EXPECT_EQ(MicrobatchRuleConflict(ScheduleKind::kLoopedBFS, 4, 3),
            "looped BFS needs m (3) >= p (4)");
  EXPECT_EQ(MicrobatchRuleConflict(ScheduleKind::kZBH1, 4, 3), "");
  EXPECT_EQ(MicrobatchRuleConflict(ScheduleKind::kZBH2, 4, 4), "");
}

TEST(ScheduleTraits, MakeScheduleReportsTheShapeErrorAndCustomHasNoGenerator) {
  auto s = MakeSchedule(ScheduleKind::kLoopedBFS, 4, 2, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), ShapeError(ScheduleKind::kLoopedBFS, 4, 2, 2));
  auto custom = MakeSchedule(ScheduleKind::kCustom, 4, 8);
  ASSERT_FALSE(custom.ok());
  EXPECT_THAT(custom.status().message(), HasSubstr("--schedule-in FILE"));
}

}  // namespace
}  // namespace pipecast
