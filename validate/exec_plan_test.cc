#include "validate/exec_plan.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "testing/validate_test_util.h"

namespace pipecast::validate {
namespace {

using testing::MakeWorld;

TEST(ExecPlan, TwoStage1F1BHasTheMessagesOfEachBoundary) {
  // Given 2 ranks, 2 layers each (1 ms F, 2 ms B, 1 MiB activations, 64 KiB outputs).
  testing::World w = MakeWorld(ScheduleKind::k1F1B, 2, 4);
  const ExecPlan& ep = w.exec;

  ASSERT_EQ(ep.per_rank.size(), 2u);
  const ExecOp& f0 = ep.per_rank[0].ops[0];  // 0F0
  EXPECT_EQ(ActionName(f0.action), "0F0");
  EXPECT_EQ(f0.predicted_ns, 2'000'000);      // 2 layers x 1 ms
  EXPECT_EQ(f0.activation_bytes, 2 * kMiB);   // both layers' activations
  EXPECT_EQ(f0.workspace_bytes, 256 * kKiB);  // the largest layer's, not the sum
  EXPECT_FALSE(f0.recv.present());
  ASSERT_TRUE(f0.send.present());
  EXPECT_EQ(f0.send.peer_rank, 1);
  EXPECT_EQ(f0.send.bytes, 64 * kKiB);
  EXPECT_EQ(f0.send.tag, MessageTag(1, 0, false, 2));

  const ExecOp& f1 = ep.per_rank[1].ops[0];  // 1F0 receives what 0F0 sends
  EXPECT_EQ(ActionName(f1.action), "1F0");
  EXPECT_EQ(f1.recv.tag, f0.send.tag);
  EXPECT_FALSE(f1.send.present());           // last stage: nothing goes forward
  const ExecOp& b1 = ep.per_rank[1].ops[1];  // 1B0 sends the gradient back
  EXPECT_EQ(ActionName(b1.action), "1B0");
  EXPECT_TRUE(b1.frees_activations);
  EXPECT_EQ(b1.send.peer_rank, 0);
  EXPECT_EQ(b1.send.tag, MessageTag(0, 0, true, 2));
  EXPECT_EQ(b1.predicted_ns, 4'000'000);
  // Static memory: 2 layers x 1000 parameters x 18 bytes (the default).
  EXPECT_EQ(ep.per_rank[0].static_bytes, 36'000);
}

TEST(ExecPlan, TensorParallelOpsListTheirAllReducesAndExpandToWorkers) {
  // Given 2 ranks of 2 layers whose t = 2 costs are scaled from t = 1, each
  // layer all-reducing 64 KiB twice in the forward and twice in the
  // backward, at t = 2 on a 5 GB/s, 10 us link.
  Model m = testing::UniformModel(4);
  for (Layer& l : m.layers) {
    l.profiles[0].tp_comm_bytes = 64 * kKiB;
    l.profiles[0].tp_forward_collectives = 2;
    l.profiles[0].tp_backward_collectives = 2;
  }
  Result<Schedule> s = MakeSchedule(ScheduleKind::k1F1B, 2, 2);
  testing::World w = MakeWorld(m, *s, Recompute::kOff, 2);
  Result<ExecPlan> ep = BuildExecPlan(w.model, w.plan, *s, w.predicted, Link{5, 10});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(ep->tensor_parallel, 2);
  EXPECT_EQ(ep->workers(), 4);
  const ExecOp& f0 = ep->per_rank[0].ops[0];  // 0F0: 2 layers x 2 all-reduces
  EXPECT_EQ(f0.tp_collectives, std::vector<Bytes>(4, 64 * kKiB));
  // Each a ring all-reduce over 2 GPUs: 2 x 10 us + 2 x 1/2 x 65536 B / 5 GB/s
  // = 20 us + 13.1072 us = 33107 ns (rounded as the simulator rounds).
  EXPECT_NEAR(static_cast<double>(f0.tp_comm_ns), 4 * 33107.2, 4);
  for (const ExecOp& op : ep->per_rank[1].ops) {
    if (op.action.kind == OpKind::kBackward) EXPECT_EQ(op.tp_collectives.size(), 4u);
  }

  // Expanded, worker 3 (rank 1, tensor rank 1) runs rank 1's ops, its
  // messages to and from worker 1 (rank 0, tensor rank 1).
  const ExecPlan x = ExpandTensorParallel(*ep);
  EXPECT_EQ(x.ranks, 4);
  EXPECT_EQ(x.tensor_parallel, 1);
  ASSERT_EQ(x.per_rank.size(), 4u);
  EXPECT_EQ(x.per_rank[3].rank, 3);
  ASSERT_EQ(x.per_rank[3].ops.size(), ep->per_rank[1].ops.size());
  const ExecOp& f1 = x.per_rank[3].ops[0];  // 1F0
  ASSERT_TRUE(f1.recv.present());
  EXPECT_EQ(f1.recv.peer_rank, 1);
  EXPECT_EQ(f1.recv.tag, ep->per_rank[1].ops[0].recv.tag);
  EXPECT_EQ(x.per_rank[0].ops[0].send.peer_rank, 2);  // worker 0 -> worker 2
  EXPECT_EQ(x.per_rank[1].ops[0].send.peer_rank, 3);  // worker 1 -> worker 3
}

TEST(ExecPlan, TagsAreUniquePerStageMicrobatchAndDirection) {
  std::set<int64_t> tags;
  for (int s = 0; s < 4; ++s) {
    for (int m = 0; m < 5; ++m) {
      EXPECT_TRUE(tags.insert(MessageTag(s, m, false, 4)).second);
      EXPECT_TRUE(tags.insert(MessageTag(s, m, true, 4)).second);
    }
  }
}

TEST(ExecPlan, ZeroBubbleSplitsIandWAndWFreesTheActivations) {
  testing::World w = MakeWorld(ScheduleKind::kZBH1, 2, 4);
  for (const ExecOp& op : w.exec.per_rank[0].ops) {
    if (op.action.kind == OpKind::kBackwardInput) {
      EXPECT_FALSE(op.frees_activations);
      EXPECT_EQ(op.predicted_ns, 2'000'000);  // 2 layers x (2 - 1) ms
    }
    if (op.action.kind == OpKind::kBackwardWeight) {
      EXPECT_TRUE(op.frees_activations);
      EXPECT_FALSE(op.send.present());
    }
  }
}

TEST(ExecPlan, InterleavedStagesOnOneRankHandOverWithoutMessages) {
  // 2 ranks, 2 chunks: stages 0,2 on rank 0 and 1,3 on rank 1; every
  // boundary crosses ranks, so every F but the first receives.
  testing::World w = MakeWorld(ScheduleKind::kInterleaved1F1B, 2, 4, 2, 1);
  int recvs = 0;
  for (const ExecOp& op : w.exec.per_rank[0].ops) {
    if (op.action.kind == OpKind::kForward && op.action.stage == 2) {
      ASSERT_TRUE(op.recv.present());
      EXPECT_EQ(op.recv.peer_rank, 1);
      ++recvs;
    }
  }
  EXPECT_EQ(recvs, 4);
}

TEST(ExecPlan, RecomputeKeepsOnlyTheStageInputAndRebuildsAtBackward) {
  Result<Schedule> s = MakeSchedule(ScheduleKind::kGPipe, 2, 2);
  testing::World w = testing::MakeWorld(testing::UniformModel(4), *s, Recompute::kFull);
  const ExecOp& f0 = w.exec.per_rank[0].ops[0];
  EXPECT_EQ(f0.activation_bytes, 0);  // stage 0's input is token ids: 0 bytes
  const ExecOp& f1 = w.exec.per_rank[1].ops[0];
  EXPECT_EQ(f1.activation_bytes, 64 * kKiB);  // stage 1 keeps its input
  for (const ExecOp& op : w.exec.per_rank[1].ops) {
    if (op.action.kind == OpKind::kBackward) {
      EXPECT_EQ(op.activation_bytes, 2 * kMiB);
    }
  }
}

TEST(ExecPlan, OverlappedPairsAreRefusedNamingTheFirst) {
  // dualpipev p=2, m=4: rank 0's first pair is (0F3;3B1), after 7 single ops.
  Result<Schedule> s = MakeSchedule(ScheduleKind::kDualPipeV, 2, 4, 2);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const Model model = testing::UniformModel(4);
  Result<SimResult> sim = Simulate(model, testing::TestCluster(), *s, SimOptions{});
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  const PlanFile plan =
      MakePlanFile(model.name, "", testing::TestCluster(), *s, SimOptions{}, *sim);
  Result<ExecPlan> ep = BuildExecPlan(model, plan, *s, *sim);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ep.status().message(),
            "schedule 'dualpipev' has overlapped F&B pairs (rank 0 starts one at 0F3), which the "
            "validator cannot run yet: its workers run one op at a time; simulate it with the "
            "simulator, or validate a schedule without pairs");
}

TEST(ExecPlan, BidirectionalSchedulesAreRefusedNamingWhatIsMissing) {
  // dualpipe p=2, m=4: two copies of each chunk (ranks 0 and 1), refused before its pairs.
  Result<Schedule> s = MakeSchedule(ScheduleKind::kDualPipe, 2, 4, 2);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const Model model = testing::UniformModel(4);
  Result<SimResult> sim = Simulate(model, testing::TestCluster(), *s, SimOptions{});
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  const PlanFile plan =
      MakePlanFile(model.name, "", testing::TestCluster(), *s, SimOptions{}, *sim);
  Result<ExecPlan> ep = BuildExecPlan(model, plan, *s, *sim);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      ep.status().message(),
      "schedule 'dualpipe' is bidirectional (micro-batches enter at both ends; rank k and "
      "rank 1-k hold two copies of the same model chunks), which the validator cannot run yet: "
      "its workers keep one weight copy per stage, send along one path and do not sum the "
      "copies' gradients between ranks; simulate it with the simulator");
}

TEST(ExecPlan, APartitionBeyondTheModelIsRejected) {
  testing::World w = MakeWorld(ScheduleKind::k1F1B, 2, 2);
  Model smaller = testing::UniformModel(3);
  Result<ExecPlan> ep = BuildExecPlan(smaller, w.plan, w.plan.schedule, w.predicted);
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("--model"), std::string::npos);
}

}  // namespace
}  // namespace pipecast::validate
