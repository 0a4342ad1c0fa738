#include "validate/exec_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
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
  Cluster cluster;
  cluster.intra_node = Link{5, 10};
  Result<ExecPlan> ep = BuildExecPlan(w.model, w.plan, *s, w.predicted, cluster);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(ep->tensor_parallel, 2);
  EXPECT_EQ(ep->workers(), 4);
  const ExecOp& f0 = ep->per_rank[0].ops[0];  // 0F0: 2 layers x 2 all-reduces
  EXPECT_EQ(f0.tp_collectives, std::vector<Bytes>(4, 64 * kKiB));
  // Each a ring all-reduce over 2 GPUs: 2 x 10 us + 2 x 1/2 x 65536 B / 5 GB/s
  // = 20 us + 13.1072 us = 33107 ns (rounded as the simulator rounds).
  EXPECT_NEAR(static_cast<double>(f0.tp_comm_ns), 4 * 33107.2, 4);
  for (const ExecOp& op : ep->per_rank[1].ops) {
    if (op.action.kind == OpKind::kBackward) {
      EXPECT_EQ(op.tp_collectives.size(), 4u);
    }
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

// The ExecOp of `name` ("0F3") on `rank`.
const ExecOp& OpNamed(const ExecPlan& ep, int rank, const std::string& name) {
  for (const ExecOp& op : ep.per_rank[rank].ops) {
    if (ActionName(op.action) == name) return op;
  }
  ADD_FAILURE() << "rank " << rank << " has no op " << name;
  static const ExecOp kNone;
  return kNone;
}

// Where a message goes or comes from, for compact expectations: "-" for none,
// else "rank:tag".
std::string Peer(const Message& m) {
  return m.present() ? std::to_string(m.peer_rank) + ":" + std::to_string(m.tag) : "-";
}

TEST(ExecPlan, DualPipeVPairsKeepBothHalvesWithTheirOwnMessages) {
  // Given dualpipev on p=2, m=4 (4 virtual stages in a V: rank 0 holds 0 and 3, rank 1 holds 1
  // and 2), whose rank 0 runs 0F0 0F1 0F2 3F0 3I0 3W0 3F1 and then its first pair (0F3;3B1).
  testing::World w = MakeWorld(ScheduleKind::kDualPipeV, 2, 4, 2, 1);
  const ExecPlan& ep = w.exec;
  ASSERT_EQ(ep.per_rank.size(), 2u);
  const std::vector<ExecOp>& ops = ep.per_rank[0].ops;
  ASSERT_GE(ops.size(), 9u);
  const ExecOp& f = ops[7];
  const ExecOp& b = ops[8];
  ASSERT_EQ(ActionName(f.action), "0F3");
  ASSERT_EQ(ActionName(b.action), "3B1");
  EXPECT_TRUE(f.action.overlapped);
  EXPECT_TRUE(b.action.overlapped);
  // 0F3 is stage 0's: it waits for nothing and sends its activation to stage 1 on rank 1.
  EXPECT_FALSE(f.recv.present());
  EXPECT_EQ(Peer(f.send), "1:" + std::to_string(MessageTag(1, 3, false, 4)));
  EXPECT_EQ(f.send.bytes, 64 * kKiB);
  // 3B1 is the last stage's: it starts the backward (no gradient to wait for) and sends the
  // gradient of its input to stage 2 on rank 1.
  EXPECT_FALSE(b.recv.present());
  EXPECT_EQ(Peer(b.send), "1:" + std::to_string(MessageTag(2, 1, true, 4)));
  EXPECT_TRUE(b.frees_activations);
  // Each half keeps the simulator's duration of that half (1 layer: 1 ms F, 2 ms B, factor 1).
  EXPECT_EQ(f.predicted_ns, 1'000'000);
  EXPECT_EQ(b.predicted_ns, 2'000'000);
  EXPECT_EQ(f.activation_bytes, 1 * kMiB);
  // Rank 1's pair (1F3;2B1) waits for both of those messages; its own outputs hand over to
  // stages on rank 1 (2F3 after 1F3, 1B1 after 2B1) without a message.
  const ExecOp& f1 = OpNamed(ep, 1, "1F3");
  const ExecOp& b2 = OpNamed(ep, 1, "2B1");
  EXPECT_TRUE(f1.action.overlapped && b2.action.overlapped);
  EXPECT_EQ(f1.recv.tag, f.send.tag);
  EXPECT_EQ(b2.recv.tag, b.send.tag);
  EXPECT_FALSE(f1.send.present());
  EXPECT_FALSE(b2.send.present());
  // One direction, one copy of each chunk: no copy reduce.
  EXPECT_TRUE(ep.per_rank[0].copy_exchanges.empty());
  EXPECT_TRUE(ep.per_rank[1].copy_exchanges.empty());
}

TEST(ExecPlan, DualPipeMessagesFollowBothPathsAndCopiesExchangeTheirGradients) {
  // Given dualpipe on p=2, m=4 over 4 layers of 1000 parameters (2 model stages of 2 layers):
  // direction a runs micro-batches 0,1 over virtual stages 0 (rank 0), 1 (rank 1); direction b
  // runs 2,3 over virtual stages 2 (model stage 0, on rank 1) and 3 (model stage 1, on rank 0).
  Result<Schedule> s = MakeSchedule(ScheduleKind::kDualPipe, 2, 4, 2);
  ASSERT_TRUE(s.ok()) << s.status().message();
  testing::World w = MakeWorld(testing::UniformModel(4), *s);
  const ExecPlan& ep = w.exec;
  ASSERT_EQ(ep.num_stages, 4);
  auto tag = [](int dst, int mb, bool gradient) {
    return std::to_string(MessageTag(dst, mb, gradient, 4));
  };
  // Rank 0: a0F0 b1F0 a0F1 b1B0 (b1F1;a0B0) b1B1 a0I1 a0W1, as virtual stages and
  // micro-batches, with (recv, send) each as "peer:tag" or "-".
  struct Want {
    const char* op;
    std::string recv, send;
  };
  const std::vector<Want> rank0 = {
      {"0F0", "-", "1:" + tag(1, 0, false)},  // direction a enters at rank 0
      {"3F2", "1:" + tag(3, 2, false), "-"},  // direction b's last stage: nothing goes on
      {"0F1", "-", "1:" + tag(1, 1, false)},
      {"3B2", "-", "1:" + tag(2, 2, true)},   // the last stage starts the backward
      {"3F3", "1:" + tag(3, 3, false), "-"},  // the pair's forward half
      {"0B0", "1:" + tag(0, 0, true), "-"},   // its backward half: first stage, no send
      {"3B3", "-", "1:" + tag(2, 3, true)},
      {"0I1", "1:" + tag(0, 1, true), "-"},
      {"0W1", "-", "-"},
  };
  const std::vector<Want> rank1 = {
      {"2F2", "-", "0:" + tag(3, 2, false)},  // direction b enters at rank 1, no activation
      {"1F0", "0:" + tag(1, 0, false), "-"},  // direction a's last stage
      {"2F3", "-", "0:" + tag(3, 3, false)},
      {"1B0", "-", "0:" + tag(0, 0, true)},
      {"1F1", "0:" + tag(1, 1, false), "-"},
      {"2B2", "0:" + tag(2, 2, true), "-"},
      {"1B1", "-", "0:" + tag(0, 1, true)},
      {"2I3", "0:" + tag(2, 3, true), "-"},
      {"2W3", "-", "-"},
  };
  for (const auto& [rank, want] : {std::pair{0, rank0}, std::pair{1, rank1}}) {
    const std::vector<ExecOp>& ops = ep.per_rank[rank].ops;
    ASSERT_EQ(ops.size(), want.size()) << "rank " << rank;
    for (size_t i = 0; i < ops.size(); ++i) {
      EXPECT_EQ(ActionName(ops[i].action), want[i].op) << "rank " << rank << " op " << i;
      EXPECT_EQ(Peer(ops[i].recv), want[i].recv) << want[i].op;
      EXPECT_EQ(Peer(ops[i].send), want[i].send) << want[i].op;
    }
  }
  // The pairs are (3F3;0B0) on rank 0 and (1F1;2B2) on rank 1.
  EXPECT_TRUE(ep.per_rank[0].ops[4].action.overlapped && ep.per_rank[0].ops[5].action.overlapped);
  EXPECT_TRUE(ep.per_rank[1].ops[4].action.overlapped && ep.per_rank[1].ops[5].action.overlapped);
  // Virtual stage 3 costs model stage 1's: 2 layers, 2 ms forward, 2 MiB kept.
  EXPECT_EQ(ep.per_rank[0].ops[1].predicted_ns, 2'000'000);
  EXPECT_EQ(ep.per_rank[0].ops[1].activation_bytes, 2 * kMiB);
  // Static memory: both chunks, 4000 parameters x 18 bytes, on each rank.
  EXPECT_EQ(ep.per_rank[0].static_bytes, 72'000);
  // The copy reduce: ranks 0 and 1 share both model stages, 4000 parameters x 4 bytes of fp32
  // main gradients = 16000 bytes each way, tags apart from every message's.
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ep.per_rank[r].copy_exchanges.size(), 1u) << "rank " << r;
    const CopyExchange& x = ep.per_rank[r].copy_exchanges[0];
    EXPECT_EQ(x.peer_rank, 1 - r);
    EXPECT_EQ(x.bytes, 16'000);
    EXPECT_EQ(x.send_tag, CopyReduceTag(r));
    EXPECT_EQ(x.recv_tag, CopyReduceTag(1 - r));
    EXPECT_GT(x.send_tag, MessageTag(3, 3, true, 4));
    // The simulator's ring all-reduce of 2 on the 5 GB/s, 10 us link:
    // 2 x 10 us + 16000 B / 5 GB/s = 23.2 us.
    EXPECT_EQ(ep.per_rank[r].predicted_copy_reduce_ns, 23'200);
  }
  EXPECT_EQ(ep.per_rank[1].copy_exchanges[0].send_tag, ep.per_rank[0].copy_exchanges[0].recv_tag);
}

TEST(ExecPlan, ExpandedCopyExchangesPairTheSameTensorRanks) {
  // Given a 2-rank plan at t = 2 whose ranks exchange copy gradients with each other.
  ExecPlan ep;
  ep.ranks = 2;
  ep.tensor_parallel = 2;
  ep.per_rank.resize(2);
  for (int r = 0; r < 2; ++r) {
    ep.per_rank[r].rank = r;
    ep.per_rank[r].copy_exchanges.push_back(
        CopyExchange{1 - r, 1000, CopyReduceTag(r), CopyReduceTag(1 - r)});
  }
  // Then worker w = rank x 2 + j exchanges with worker (1 - rank) x 2 + j.
  const ExecPlan x = ExpandTensorParallel(ep);
  ASSERT_EQ(x.per_rank.size(), 4u);
  EXPECT_EQ(x.per_rank[0].copy_exchanges[0].peer_rank, 2);
  EXPECT_EQ(x.per_rank[1].copy_exchanges[0].peer_rank, 3);
  EXPECT_EQ(x.per_rank[2].copy_exchanges[0].peer_rank, 0);
  EXPECT_EQ(x.per_rank[3].copy_exchanges[0].peer_rank, 1);
}

TEST(ExecPlan, ABidirectionalPlanMayListItsModelStagesOnly) {
  // The simulator reads a dualpipe partition of p model stages as well as one of 2p virtual
  // stages; so does the validator.
  Result<Schedule> s = MakeSchedule(ScheduleKind::kDualPipe, 2, 4, 2);
  ASSERT_TRUE(s.ok());
  testing::World w = MakeWorld(testing::UniformModel(4), *s);
  PlanFile plan = w.plan;
  ASSERT_EQ(plan.partition.size(), 4u);
  plan.partition.resize(2);
  Result<ExecPlan> ep = BuildExecPlan(w.model, plan, *s, w.predicted);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(ep->per_rank[0].ops[1].activation_bytes, w.exec.per_rank[0].ops[1].activation_bytes);
  plan.partition.resize(3);
  ep = BuildExecPlan(w.model, plan, *s, w.predicted);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().message(),
            "the plan has 3 partition stages but 4 virtual stages in its actions (2 model stages)");
}

TEST(ExecPlan, AnOverlappedOpOutsideAPairIsRejected) {
  testing::World w = MakeWorld(ScheduleKind::k1F1B, 2, 2);
  Schedule s = w.plan.schedule;
  s.actions[0][0].overlapped = true;  // 0F0, followed by 0F1: not a pair
  Result<ExecPlan> ep = BuildExecPlan(w.model, w.plan, s, w.predicted);
  ASSERT_FALSE(ep.ok());
  EXPECT_THAT(ep.status().message(),
              ::testing::HasSubstr("overlapped pair on rank 0 starting with 0F0"));
}

TEST(ExecPlan, APartitionBeyondTheModelIsRejected) {
  testing::World w = MakeWorld(ScheduleKind::k1F1B, 2, 2);
  Model smaller = testing::UniformModel(3);
  Result<ExecPlan> ep = BuildExecPlan(smaller, w.plan, w.plan.schedule, w.predicted);
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("--model"), std::string::npos);
}

// The cuda backend refuses expert tensor parallelism before anything runs
// (validate/cuda/cuda_backend.cc and cuda_mpi.cc call this first).
TEST(ExecPlan, TheCudaBackendRefusesExpertTensorParallelWithTheFix) {
  ExecPlan plan;
  EXPECT_TRUE(RefuseExpertTensorParallel(plan).ok());
  plan.expert_parallel = 4;
  plan.expert_tensor_parallel = 2;
  EXPECT_THAT(
      RefuseExpertTensorParallel(plan).message(),
      ::testing::HasSubstr("expert_tensor_parallel 2, which the cuda backend does not run"));
  EXPECT_THAT(RefuseExpertTensorParallel(plan).message(),
              ::testing::HasSubstr("validate it with --backend cpu or mpi"));
}

}  // namespace
}  // namespace pipecast::validate
