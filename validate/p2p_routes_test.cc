// The cuda backend's routing and message ordering, on the CPU
// (validate/internal/p2p_routes.h).
#include "validate/internal/p2p_routes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "testing/validate_test_util.h"

namespace pipecast::validate {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MakeWorld;

std::vector<int64_t> Tags(const std::vector<PairMessage>& seq) {
  std::vector<int64_t> out;
  for (const PairMessage& m : seq) out.push_back(m.tag);
  return out;
}

TEST(PlaceRanks, OneProcessSharesGpusRoundRobin) {
  // 4 ranks on 2 GPUs: ranks 0 and 2 on GPU 0, 1 and 3 on GPU 1.
  Result<std::vector<RankPlacement>> p = PlaceRanks(4, 2, {0});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ((*p)[0].gpu, 0);
  EXPECT_EQ((*p)[1].gpu, 1);
  EXPECT_EQ((*p)[2].gpu, 0);
  EXPECT_EQ((*p)[3].gpu, 1);
  for (const RankPlacement& r : *p) EXPECT_EQ(r.process, 0);
}

TEST(PlaceRanks, ProcessesTakeTheirLocalIndexModuloTheMachinesGpus) {
  // 4 processes on 2 machines of 2 GPUs (mpirun -np 4, two per machine).
  Result<std::vector<RankPlacement>> p = PlaceRanks(4, 2, {7, 7, 9, 9});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0].gpu, 0);
  EXPECT_EQ((*p)[1].gpu, 1);
  EXPECT_EQ((*p)[2].gpu, 0);  // first on machine 9
  EXPECT_EQ((*p)[2].node, 9);
  EXPECT_EQ((*p)[3].gpu, 1);
  EXPECT_EQ((*p)[3].process, 3);
}

TEST(PlaceRanks, RejectsAProcessCountThatIsNeitherOneNorTheRanks) {
  Result<std::vector<RankPlacement>> p = PlaceRanks(4, 1, {0, 0});
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("mpirun -np 4"));
}

TEST(ChooseRoute, FollowsTheGpusAndProcesses) {
  const RankPlacement gpu0{0, 0, 0}, gpu1{0, 0, 1}, gpu0_other_process{0, 1, 0},
      gpu1_other_process{0, 1, 1}, other_node_gpu0{1, 1, 0};
  EXPECT_EQ(*ChooseRoute(0, 1, gpu0, gpu1, true), P2pRoute::kNccl);
  EXPECT_EQ(*ChooseRoute(0, 1, gpu0, gpu0, true), P2pRoute::kDeviceCopy);
  EXPECT_EQ(*ChooseRoute(0, 1, gpu0, gpu0, false), P2pRoute::kDeviceCopy);
  EXPECT_EQ(*ChooseRoute(0, 1, gpu0, gpu1, false), P2pRoute::kHostStaged);
  EXPECT_EQ(*ChooseRoute(0, 1, gpu0, gpu1_other_process, true), P2pRoute::kNccl);
  // GPU 0 of another machine is another GPU.
  EXPECT_EQ(*ChooseRoute(0, 1, gpu0, other_node_gpu0, true), P2pRoute::kNccl);
  Result<P2pRoute> shared = ChooseRoute(0, 1, gpu0, gpu0_other_process, true);
  ASSERT_FALSE(shared.ok());
  EXPECT_THAT(shared.status().message(), HasSubstr("same GPU 0"));
  EXPECT_THAT(shared.status().message(), HasSubstr("without mpirun"));
  Result<P2pRoute> no_nccl = ChooseRoute(0, 1, gpu0, gpu1_other_process, false);
  ASSERT_FALSE(no_nccl.ok());
  EXPECT_THAT(no_nccl.status().message(), HasSubstr("libnccl.so.2"));
  EXPECT_STREQ(RouteName(P2pRoute::kDeviceCopy), "device-to-device copy");
}

TEST(RouteTable, FourStagesOnOneGpuCopyAndOnTwoGpusUseNccl) {
  testing::World w = MakeWorld(ScheduleKind::k1F1B, 4, 8);
  // One GPU, one process: every pair (0<->1, 1<->2, 2<->3) copies on the device.
  Result<std::map<DirectedPair, P2pRoute>> one = RouteTable(w.exec, *PlaceRanks(4, 1, {0}), true);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->size(), 6u);
  for (const auto& [pair, route] : *one) EXPECT_EQ(route, P2pRoute::kDeviceCopy);
  // Two GPUs round robin: neighbours are always on distinct GPUs.
  Result<std::map<DirectedPair, P2pRoute>> two = RouteTable(w.exec, *PlaceRanks(4, 2, {0}), true);
  ASSERT_TRUE(two.ok());
  for (const auto& [pair, route] : *two) EXPECT_EQ(route, P2pRoute::kNccl);
  // Without NCCL, host-staged.
  EXPECT_EQ(RouteTable(w.exec, *PlaceRanks(4, 2, {0}), false)->at({1, 2}), P2pRoute::kHostStaged);
  // mpirun -np 4 on one machine with 2 GPUs: ranks 0 and 2 share GPU 0 in
  // different processes, but they exchange nothing; 0-1, 1-2, 2-3 cross GPUs.
  Result<std::map<DirectedPair, P2pRoute>> mpi =
      RouteTable(w.exec, *PlaceRanks(4, 2, {0, 0, 0, 0}), true);
  ASSERT_TRUE(mpi.ok()) << mpi.status().message();
  EXPECT_EQ(mpi->at({2, 3}), P2pRoute::kNccl);
  // ... and on one GPU they are refused, naming the first pair.
  Result<std::map<DirectedPair, P2pRoute>> shared =
      RouteTable(w.exec, *PlaceRanks(4, 1, {0, 0, 0, 0}), true);
  ASSERT_FALSE(shared.ok());
  EXPECT_THAT(shared.status().message(), HasSubstr("ranks 0 and 1"));
}

TEST(SendSequences, OneFOneBTwoStagesThreeMicrobatchesByHand) {
  // 1F1B, p=2, m=3. Rank 0 runs F0 F1 B0 F2 B1 B2, rank 1 F0 B0 F1 B1 F2 B2.
  // Tags: activation into stage 1 of mb m = ((m*2)+1)*2 = 4m+2; gradient
  // into stage 0 of mb m = (m*2)*2+1 = 4m+1.
  testing::World w = MakeWorld(ScheduleKind::k1F1B, 2, 3);
  const auto seqs = SendSequences(w.exec);
  ASSERT_EQ(seqs.size(), 2u);
  EXPECT_THAT(Tags(seqs.at({0, 1})), ElementsAre(2, 6, 10));
  EXPECT_THAT(Tags(seqs.at({1, 0})), ElementsAre(1, 5, 9));
  EXPECT_EQ(seqs.at({0, 1})[0].what, "the activation of 0F0");
  EXPECT_EQ(seqs.at({1, 0})[2].what, "the gradient of 1B2");
  EXPECT_EQ(seqs.at({0, 1})[0].bytes, 64 * kKiB);
  // 1F1B consumes in the order it sends: nothing to reorder.
  EXPECT_THAT(Tags(ConsumeSequence(w.exec, 0, 1)), ElementsAre(2, 6, 10));
  EXPECT_THAT(Tags(ConsumeSequence(w.exec, 1, 0)), ElementsAre(1, 5, 9));
}

TEST(SendSequences, InterleavedTwoRanksTwoChunksByHand) {
  // Interleaved 1F1B, p=2, v=2, m=2: stages 0,2 on rank 0 and 1,3 on rank 1.
  // Rank 0 runs 0F0 0F1 2F0 2F1 2B0 ... (warm-up of (p-1)*2 + (v-1)*p = 4
  // forwards), so rank 0 -> 1 carries, in order, the activations of 0F0,
  // 0F1 (into stage 1) and 2F0, 2F1 (into stage 3); rank 1 -> 0 carries the
  // activations of 1F0, 1F1 (into stage 2) and the gradients of 3B0, 3B1,
  // 1B0, 1B1 in the order rank 1 runs them. Tag = ((mb*4)+dst)*2 + grad.
  testing::World w = MakeWorld(ScheduleKind::kInterleaved1F1B, 2, 2, 2, 1);
  std::string order0, order1;
  for (const ExecOp& op : w.exec.per_rank[0].ops) order0 += ActionName(op.action) + " ";
  for (const ExecOp& op : w.exec.per_rank[1].ops) order1 += ActionName(op.action) + " ";
  const auto seqs = SendSequences(w.exec);
  std::vector<std::string> sent01, sent10;
  for (const PairMessage& m : seqs.at({0, 1})) sent01.push_back(m.what);
  for (const PairMessage& m : seqs.at({1, 0})) sent10.push_back(m.what);
  EXPECT_THAT(sent01,
              ElementsAre("the activation of 0F0", "the activation of 0F1", "the activation of 2F0",
                          "the activation of 2F1", "the gradient of 2B0", "the gradient of 2B1"))
      << order0;
  EXPECT_THAT(Tags(seqs.at({0, 1})), ElementsAre(2, 10, 6, 14, 3, 11));
  // Rank 1 runs 1F0 1F1 3F0 3F1 3B0 3B1 1B0 1B1: it sends the activations
  // of 1F0 and 1F1 (into stage 2), then the gradients of 3B0, 3B1, 1B0, 1B1.
  EXPECT_THAT(sent10,
              ElementsAre("the activation of 1F0", "the activation of 1F1", "the gradient of 3B0",
                          "the gradient of 3B1", "the gradient of 1B0", "the gradient of 1B1"))
      << order1;
  // The built-in schedules consume each pair's messages in the order they
  // are sent; custom ones need not (see InOrderReceiver and SimulatePosting).
  EXPECT_EQ(Tags(ConsumeSequence(w.exec, 1, 0)), Tags(seqs.at({1, 0})));
  EXPECT_EQ(Tags(ConsumeSequence(w.exec, 0, 1)), Tags(seqs.at({0, 1})));
}

TEST(SendSequences, EveryBuiltinScheduleConsumesEachPairsMessagesExactlyOnce) {
  for (ScheduleKind kind : BuiltinScheduleKinds()) {
    if (kind == ScheduleKind::kCustom) continue;
    const int chunks = UsesChunks(kind) ? 2 : 1;
    testing::World w = MakeWorld(kind, 4, 8, chunks, 1);
    for (const auto& [pair, seq] : SendSequences(w.exec)) {
      std::vector<int64_t> sent = Tags(seq),
                           got = Tags(ConsumeSequence(w.exec, pair.first, pair.second));
      std::sort(sent.begin(), sent.end());
      std::sort(got.begin(), got.end());
      EXPECT_EQ(sent, got) << ScheduleKindName(kind) << " pair " << pair.first << "->"
                           << pair.second;
    }
  }
}

TEST(MessagePattern, IsNeverZeroSoAZeroedBufferFailsTheCheck) {
  std::set<int> seen;
  for (int64_t tag = 0; tag < 100'000; ++tag) {
    ASSERT_NE(MessagePattern(tag), 0) << tag;
    seen.insert(MessagePattern(tag));
  }
  EXPECT_EQ(seen.size(), 255u);  // and tells neighbouring tags apart
  EXPECT_NE(MessagePattern(2), MessagePattern(3));
}

// A fake channel: receives are "posted" by recording their tags.
TEST(InOrderReceiver, BuffersMessagesWantedOutOfOrder) {
  InOrderReceiver<std::string> rx({{10, 4, "a"}, {20, 8, "b"}, {30, 4, "c"}});
  std::vector<int64_t> posted;
  auto post = [&](const PairMessage& m) -> Result<std::string> {
    posted.push_back(m.tag);
    return "buf" + m.what;
  };
  // The receiver wants 30 first: 10 and 20 are posted ahead of it and kept.
  Result<std::string> c = rx.Take(30, 4, post);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(*c, "bufc");
  EXPECT_THAT(posted, ElementsAre(10, 20, 30));
  EXPECT_EQ(rx.buffered(), 2u);
  // Then 10 and 20 come from the buffer, posting nothing new.
  EXPECT_EQ(*rx.Take(10, 4, post), "bufa");
  EXPECT_EQ(*rx.Take(20, 8, post), "bufb");
  EXPECT_EQ(posted.size(), 3u);
  EXPECT_EQ(rx.buffered(), 0u);
  // The next iteration starts over in the sender's order.
  EXPECT_EQ(*rx.Take(20, 8, post), "bufb");
  EXPECT_THAT(posted, ElementsAre(10, 20, 30, 10, 20));
  EXPECT_EQ(*rx.Take(10, 4, post), "bufa");
  EXPECT_EQ(*rx.Take(30, 4, post), "bufc");
  EXPECT_EQ(posted.size(), 6u);
}

TEST(InOrderReceiver, RejectsUnknownTagsWrongSizesAndPassesPostFailures) {
  InOrderReceiver<int> rx({{1, 4, "a"}, {2, 4, "b"}});
  int n = 0;
  auto post = [&](const PairMessage&) -> Result<int> { return n++; };
  EXPECT_EQ(rx.Take(3, 4, post).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(rx.Take(1, 8, post).status().code(), StatusCode::kInternal);
  InOrderReceiver<int> failing({{1, 4, "a"}});
  Result<int> r = failing.Take(
      1, 4, [](const PairMessage&) -> Result<int> { return Status::FailedPrecondition("oom"); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "oom");
}

TEST(SimulatePosting, OneStreamPerRankDeadlocksOneFOneB) {
  // By hand, p=2 m=3: rank 0's stream holds send A0, send A1, recv G0, ...;
  // rank 1's recv A0, send G0, recv A1, ... A0 matches; then rank 0's send A1
  // waits for rank 1's recv A1, which is behind send G0, which waits for
  // rank 0's recv G0, behind send A1.
  testing::World w = MakeWorld(ScheduleKind::k1F1B, 2, 3);
  PostingReport bad = SimulatePosting(w.exec, StreamLayout::kStreamPerRank);
  EXPECT_FALSE(bad.completes);
  EXPECT_THAT(bad.stuck, HasSubstr("send of message 1 from rank 0 to rank 1"));
  PostingReport good = SimulatePosting(w.exec, StreamLayout::kStreamPerDirectedPair);
  EXPECT_TRUE(good.completes) << good.stuck;
  EXPECT_EQ(good.max_buffered, 0u);  // 1F1B receives in the order it is sent
  // GPipe sends every activation before any gradient: one stream would do.
  testing::World gpipe = MakeWorld(ScheduleKind::kGPipe, 2, 3);
  EXPECT_TRUE(SimulatePosting(gpipe.exec, StreamLayout::kStreamPerRank).completes);
}

TEST(SimulatePosting, AReceiverThatConsumesOutOfOrderBuffersAndCompletes) {
  // GPipe p=2 m=2 with rank 1 running 1F1 before 1F0 (a custom order): rank
  // 0 sends A0 then A1; rank 1 wants A1 first, so it posts A0's receive
  // ahead of it and keeps A0 until 1F0.
  testing::World w = MakeWorld(ScheduleKind::kGPipe, 2, 2);
  std::vector<ExecOp>& ops1 = w.exec.per_rank[1].ops;
  ASSERT_EQ(ActionName(ops1[0].action), "1F0");
  std::swap(ops1[0], ops1[1]);
  EXPECT_THAT(Tags(ConsumeSequence(w.exec, 0, 1)), ElementsAre(6, 2));
  EXPECT_THAT(Tags(SendSequences(w.exec).at({0, 1})), ElementsAre(2, 6));
  PostingReport r = SimulatePosting(w.exec, StreamLayout::kStreamPerDirectedPair);
  EXPECT_TRUE(r.completes) << r.stuck;
  EXPECT_EQ(r.max_buffered, 1u);
}

TEST(SimulatePosting, StreamPerDirectedPairNeverDeadlocksABuiltinSchedule) {
  for (ScheduleKind kind : BuiltinScheduleKinds()) {
    if (kind == ScheduleKind::kCustom) continue;
    for (int p : {2, 4}) {
      const int chunks = UsesChunks(kind) ? 2 : 1;
      testing::World w = MakeWorld(kind, p, 2 * p, chunks, 1);
      PostingReport r = SimulatePosting(w.exec, StreamLayout::kStreamPerDirectedPair);
      EXPECT_TRUE(r.completes) << ScheduleKindName(kind) << " p=" << p << ": " << r.stuck;
    }
  }
}

TEST(SimulatePosting, APairSendsItsForwardsOutputAfterItsBackwardsInput) {
  // Given dualpipev p=2, m=4, its pairs played as the runtime plays them.
  testing::World w = MakeWorld(ScheduleKind::kDualPipeV, 2, 4, 2, 1);
  ASSERT_TRUE(SimulatePosting(w.exec, StreamLayout::kStreamPerDirectedPair).completes);
  // When rank 0's pair (0F3;3B1) had to wait for a gradient that only rank 1's pair
  // (1F3;2B1), which needs 0F3's activation, sends, the pair would wait on itself: made by
  // hand, 3B1 waits for 2B1's gradient instead of starting the backward.
  ExecOp& b = w.exec.per_rank[0].ops[8];
  ASSERT_EQ(ActionName(b.action), "3B1");
  ExecOp& b2 = w.exec.per_rank[1].ops[9];
  ASSERT_EQ(ActionName(b2.action), "2B1");
  b.recv = Message{.peer_rank = 1, .tag = 424242, .bytes = 1};
  b2.send = Message{.peer_rank = 0, .tag = 424242, .bytes = 1};
  // Then posting gets stuck with rank 0 in the pair's backward: its forward's activation,
  // which rank 1's 1F3 needs first, leaves only when the pair ends.
  PostingReport r = SimulatePosting(w.exec, StreamLayout::kStreamPerDirectedPair);
  EXPECT_FALSE(r.completes);
  EXPECT_THAT(r.stuck, HasSubstr("rank 0 waits in 3B1"));
}

TEST(SimulatePosting, ReportsAScheduleThatDeadlocksOnItsOwn) {
  // Rank 1 waits for the gradient before the forward that would let rank 0
  // continue... made by hand: rank 0 runs B0 before F0.
  testing::World w = MakeWorld(ScheduleKind::kGPipe, 2, 1);
  std::swap(w.exec.per_rank[0].ops[0], w.exec.per_rank[0].ops[1]);
  PostingReport r = SimulatePosting(w.exec, StreamLayout::kStreamPerDirectedPair);
  EXPECT_FALSE(r.completes);
  EXPECT_THAT(r.stuck, HasSubstr("rank 0 waits in 0B0 for the gradient of 1B0"));
}

// dualpipe p=2, m=4, 1M parameters a layer, 4 layers: ranks 0 and 1 share both model stages,
// 4M parameters x 4 gradient bytes = 16 MB each way (Runtime.DualPipeCopies... on the cpu).
testing::World DualPipeWorld(int p) {
  testing::LayerSpec spec;
  spec.parameters = 1'000'000;
  Result<Schedule> s = MakeSchedule(ScheduleKind::kDualPipe, p, 2 * p, 2);
  EXPECT_TRUE(s.ok());
  return MakeWorld(testing::UniformModel(2 * p, spec), *s);
}

TEST(CopySendSequences, DualPipeTwoRanksSendOneMessageEachWayOutsideThePipelines) {
  testing::World w = DualPipeWorld(2);
  const std::map<DirectedPair, std::vector<PairMessage>> seqs = CopySendSequences(w.exec);
  ASSERT_EQ(seqs.size(), 2u);
  ASSERT_EQ(seqs.at({0, 1}).size(), 1u);
  ASSERT_EQ(seqs.at({1, 0}).size(), 1u);
  const PairMessage& m0 = seqs.at({0, 1})[0];
  EXPECT_EQ(m0.tag, int64_t{3} << 29);  // CopyReduceTag(0) = 3 x 2^29 + 0
  EXPECT_EQ(m0.bytes, 16'000'000);
  EXPECT_EQ(m0.what, "the copy gradients of rank 0");
  EXPECT_EQ(seqs.at({1, 0})[0].tag, (int64_t{3} << 29) + 1);
  EXPECT_EQ(seqs.at({1, 0})[0].bytes, 16'000'000);
  // The pipeline's sequences hold none of them: the copy reduce has channels of its own.
  for (const auto& [pair, seq] : SendSequences(w.exec)) {
    for (const PairMessage& m : seq) EXPECT_LT(m.tag, kCopyReduceTagBase) << m.what;
  }
  // A one-direction schedule has no copy reduce.
  EXPECT_TRUE(CopySendSequences(MakeWorld(ScheduleKind::kDualPipeV, 2, 4, 2).exec).empty());
}

TEST(CopySendSequences, DualPipeFourRanksPairRankWithThreeMinusRankAndRouteByGpu) {
  testing::World w = DualPipeWorld(4);
  const std::map<DirectedPair, std::vector<PairMessage>> seqs = CopySendSequences(w.exec);
  std::set<DirectedPair> pairs;
  for (const auto& [pair, seq] : seqs) pairs.insert(pair);
  EXPECT_EQ(pairs, (std::set<DirectedPair>{{0, 3}, {1, 2}, {2, 1}, {3, 0}}));
  // One GPU: device copies. Two GPUs round robin (rank r on GPU r mod 2): 0 and 3, 1 and 2
  // on distinct GPUs, NCCL. Three GPUs: ranks 0 and 3 both on GPU 0 (copy), 1 and 2 on GPUs 1
  // and 2 (NCCL).
  Result<std::map<DirectedPair, P2pRoute>> one = RouteTable(seqs, *PlaceRanks(4, 1, {0}), true);
  ASSERT_TRUE(one.ok()) << one.status().message();
  for (const auto& [pair, route] : *one) EXPECT_EQ(route, P2pRoute::kDeviceCopy);
  Result<std::map<DirectedPair, P2pRoute>> two = RouteTable(seqs, *PlaceRanks(4, 2, {0}), true);
  ASSERT_TRUE(two.ok());
  for (const auto& [pair, route] : *two) EXPECT_EQ(route, P2pRoute::kNccl);
  Result<std::map<DirectedPair, P2pRoute>> three = RouteTable(seqs, *PlaceRanks(4, 3, {0}), true);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->at({0, 3}), P2pRoute::kDeviceCopy);
  EXPECT_EQ(three->at({3, 0}), P2pRoute::kDeviceCopy);
  EXPECT_EQ(three->at({1, 2}), P2pRoute::kNccl);
  EXPECT_EQ(three->at({2, 1}), P2pRoute::kNccl);
}

TEST(InOrderReceiver, PostNextHoldsTheMessageUntilItsTake) {
  InOrderReceiver<std::string> rx({{7, 16, "copy"}});
  int posts = 0;
  auto post = [&](const PairMessage& m) -> Result<std::string> {
    ++posts;
    return "buf" + m.what;
  };
  // Posted with the send, before the receiver asks for it...
  Result<std::string*> held = rx.PostNext(post);
  ASSERT_TRUE(held.ok()) << held.status().message();
  EXPECT_EQ(**held, "bufcopy");
  **held += "+event";  // what the caller finishes once the NCCL group has launched
  EXPECT_EQ(rx.buffered(), 1u);
  // ... the receive takes it without posting again, and the next iteration posts anew.
  EXPECT_EQ(*rx.Take(7, 16, post), "bufcopy+event");
  EXPECT_EQ(posts, 1);
  EXPECT_EQ(rx.buffered(), 0u);
  ASSERT_TRUE(rx.PostNext(post).ok());
  EXPECT_EQ(*rx.Take(7, 16, post), "bufcopy");
  EXPECT_EQ(posts, 2);
  // Posting a message that is already held is refused, not dropped.
  ASSERT_TRUE(rx.PostNext(post).ok());
  EXPECT_EQ(rx.PostNext(post).status().code(), StatusCode::kInternal);
}

TEST(SimulateCopyReduce, BothPartnersSendingFirstDeadlocksAGroupedExchangeDoesNot) {
  for (int p : {2, 4}) {
    testing::World w = DualPipeWorld(p);
    // The pipeline itself completes on the cuda backend's streams.
    ASSERT_TRUE(SimulatePosting(w.exec, StreamLayout::kStreamPerDirectedPair).completes);
    // A blocking send on each side waits for a receive its partner posts only after its own
    // send returns: every rank is stuck.
    PostingReport naive = SimulateCopyReduce(w.exec, CopyPosting::kSendThenReceive);
    EXPECT_FALSE(naive.completes) << "p=" << p;
    EXPECT_THAT(naive.stuck, HasSubstr("rank 0 waits in its copy reduce to send its gradients "
                                       "to rank " +
                                       std::to_string(p - 1)));
    // The send and the receive in one group meet their partner's in any order.
    PostingReport grouped = SimulateCopyReduce(w.exec, CopyPosting::kGroupedExchange);
    EXPECT_TRUE(grouped.completes) << "p=" << p << ": " << grouped.stuck;
  }
  // Without a copy reduce there is nothing to wait for.
  testing::World v = MakeWorld(ScheduleKind::kDualPipeV, 2, 4, 2);
  EXPECT_TRUE(SimulateCopyReduce(v.exec, CopyPosting::kSendThenReceive).completes);
}

TEST(SimulateCopyReduce, GroupedExchangesWithSeveralPartnersNeedRankOrder) {
  // Three ranks, each exchanging with both others (made by hand). In rank order (0: 1, 2;
  // 1: 0, 2; 2: 0, 1) the exchanges complete: 0-1 first, then 0-2, then 1-2. In a cycle
  // (0: 1, 2; 1: 2, 0; 2: 0, 1) each rank waits for the next: 0 for 1, 1 for 2, 2 for 0.
  auto plan = [](std::vector<std::vector<int>> partners) {
    ExecPlan p;
    p.ranks = 3;
    for (int r = 0; r < 3; ++r) {
      ExecStage st;
      st.rank = r;
      for (int q : partners[r]) {
        st.copy_exchanges.push_back(CopyExchange{q, 100, CopyReduceTag(r), CopyReduceTag(q)});
      }
      p.per_rank.push_back(st);
    }
    return p;
  };
  EXPECT_TRUE(
      SimulateCopyReduce(plan({{1, 2}, {0, 2}, {0, 1}}), CopyPosting::kGroupedExchange).completes);
  PostingReport cycle =
      SimulateCopyReduce(plan({{1, 2}, {2, 0}, {0, 1}}), CopyPosting::kGroupedExchange);
  EXPECT_FALSE(cycle.completes);
  EXPECT_THAT(cycle.stuck, HasSubstr("rank 0 waits in its copy reduce to send its gradients to "
                                     "rank 1"));
  EXPECT_THAT(cycle.stuck, HasSubstr("rank 2 waits in its copy reduce to send its gradients to "
                                     "rank 0"));
}

TEST(TensorGroups, EachStagesWorkersNeedGpusOfTheirOwn) {
  // Given 2 stages x 2 tensor-parallel workers (4 ranks, stage-major) in one
  // process: on 2 GPUs rank r is on GPU r mod 2, so each stage's two workers
  // are on GPUs 0 and 1; on 1 GPU they would share it.
  Result<std::vector<RankPlacement>> two = PlaceRanks(4, 2, {0});
  ASSERT_TRUE(two.ok());
  EXPECT_TRUE(CheckTensorGroupsOnDistinctGpus(*two, 2).ok());
  Result<std::vector<RankPlacement>> one = PlaceRanks(4, 1, {0});
  ASSERT_TRUE(one.ok());
  const Status st = CheckTensorGroupsOnDistinctGpus(*one, 2);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(),
              ::testing::HasSubstr("tensor ranks 0 and 1 of stage 0 would share GPU 0"));
  // t = 4 on 2 GPUs: workers 0 and 2 of a stage meet on GPU 0.
  Result<std::vector<RankPlacement>> four = PlaceRanks(8, 2, {0});
  ASSERT_TRUE(four.ok());
  EXPECT_FALSE(CheckTensorGroupsOnDistinctGpus(*four, 4).ok());
  // t = 1: nothing to check.
  EXPECT_TRUE(CheckTensorGroupsOnDistinctGpus(*one, 1).ok());
}

}  // namespace
}  // namespace pipecast::validate
