// Expert parallelism (docs/simulator.md, "Expert parallelism"): Megatron-LM's
// parallel folding checked once in TrainingConfig, the dispatch and combine
// all-to-all bytes per token per layer worked by hand at ep = 8, 32 and 64
// inside and across nodes (DeepEP's counting and bandwidths,
// sim/collectives.h) and for Megatron-LM's all-to-all dispatcher (one row per
// token and expert at NCCL's rates), what a stage's MoE layer pays at ep > 1,
// and expert memory per GPU under folding.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "formats/formats.h"
#include "formats/result_json.h"
#include "planner/passes.h"
#include "planner/planner.h"
#include "sim/cluster.h"
#include "sim/collectives.h"
#include "sim/memory.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"
#include "sim/training_config.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

Cluster H100() { return test_util::PresetCluster("h100-sxm"); }

TrainingConfig Layout(int t, int cp, int d, int ep, int etp = 1) {
  TrainingConfig c;
  c.layout.tensor_parallel = t;
  c.layout.sequence_parallel = t > 1;
  c.layout.context_parallel = cp;
  c.layout.data_parallel = d;
  c.layout.expert_parallel = ep;
  c.layout.expert_tensor_parallel = etp;
  return c;
}

TEST(ExpertParallelTest, FoldingRuleCheckedOnceWithTheFlagsNamed) {
  // etp x ep must divide t x cp x d: 2 x 1 x 16 = 32 GPUs hold ep 32, or ep 8 x etp 4.
  EXPECT_TRUE(Layout(2, 1, 16, 32).Validate().ok());
  EXPECT_TRUE(Layout(2, 1, 16, 8, 4).Validate().ok());
  EXPECT_EQ(Layout(2, 1, 16, 32).layout.ExpertDataParallel(), 1);
  EXPECT_EQ(Layout(2, 1, 16, 8).layout.ExpertDataParallel(), 4);
  EXPECT_EQ(Layout(2, 2, 4, 4, 2).layout.ExpertDataParallel(), 2);
  const Status three = Layout(2, 1, 16, 3).Validate();
  EXPECT_EQ(three.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(three.message().find("--expert-parallel 3 x --expert-tensor-parallel 1 = 3 does not "
                                 "divide the 32 GPUs of a stage"),
            std::string::npos)
      << three.message();
  const Status too_many = Layout(1, 1, 8, 16).Validate();
  EXPECT_NE(too_many.message().find("does not divide the 8 GPUs"), std::string::npos);
  EXPECT_NE(Layout(1, 1, 8, 0).Validate().message().find("--expert-parallel is 0"),
            std::string::npos);
  EXPECT_NE(Layout(1, 1, 8, 1, 0).Validate().message().find("--expert-tensor-parallel is 0"),
            std::string::npos);
}

TEST(ExpertParallelTest, DistinctRanksPerTokenWorkedByHand) {
  // One expert per rank: a token's k experts are on k distinct ranks.
  EXPECT_DOUBLE_EQ(DistinctGroupsPerToken(8, 2, 8), 2.0);
  // 4 experts on 2 ranks, top-2: both on one rank with probability C(2,2)/C(4,2) = 1/6 per
  // rank, so 2 (1 - 1/6) = 5/3 ranks.
  EXPECT_NEAR(DistinctGroupsPerToken(4, 2, 2), 5.0 / 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(DistinctGroupsPerToken(256, 8, 1), 1.0);
}

// DeepSeek-V3's routing: 256 experts, top-8, hidden 7168, 8 groups of which a token uses 4.
MoeRouting DeepseekV3() {
  return MoeRouting{.experts = 256,
                    .top_k = 8,
                    .expert_groups = 8,
                    .topk_groups = 4,
                    .hidden = 7168,
                    .expert_parameters = 0};
}

ExpertAllToAll AllToAll(const MoeRouting& m, int ep, double tokens) {
  const Cluster c = H100();
  return ExpertAllToAllOf(c.intra_node, c.inter_node, c.NetworkGbpsPerGpu(),
                          ExpertGroupOf(ep, 1, c.gpus_per_node), m.experts, m.top_k,
                          m.expert_groups, m.topk_groups, m.hidden, m.bytes_per_element, tokens);
}

TEST(ExpertParallelTest, AllToAllBytesPerTokenPerLayerWorkedByHand) {
  // Mixtral 8x7B (8 experts, top-2, h 4096) at ep 8 in one node: one expert per GPU, so each
  // token goes to exactly 2 ranks: 2 x 4096 x 2 B = 16,384 B per token.
  const MoeRouting mixtral{.experts = 8, .top_k = 2, .hidden = 4096};
  const ExpertAllToAll m8 = AllToAll(mixtral, 8, 4096);
  EXPECT_FALSE(m8.across_nodes);
  EXPECT_DOUBLE_EQ(m8.bytes_per_token, 16'384);
  // 4096 tokens: 67,108,864 B over NVLink at 450 GB/s x 0.8 (the preset's efficiency) x
  // 153/160 (DeepEP's dispatch share) = 344.25 GB/s: 194,942 ns, plus 8.4 us latency;
  // combine at 158/160: 355.5 GB/s, 188,773 ns + 8.4 us.
  EXPECT_EQ(m8.dispatch_ns, 203'342);
  EXPECT_EQ(m8.combine_ns, 197'173);

  // DeepSeek-V3 at ep 8 in one node: 32 experts per rank; a rank misses all 8 of a token's
  // experts with probability C(224,8)/C(256,8) = prod_{i<8} (224-i)/(256-i) = 0.33817, so
  // 8 x (1 - 0.33817) = 5.2947 ranks x 7168 x 2 B = 75,904 B per token.
  const ExpertAllToAll d8 = AllToAll(DeepseekV3(), 8, 4096);
  EXPECT_FALSE(d8.across_nodes);
  EXPECT_NEAR(d8.bytes_per_token, 75'904.1, 0.1);

  // ep 32 spans 4 nodes of 8; the 8 groups fill the 4 nodes (2 each), so a token's 4 groups
  // may reach all 4 nodes: no limit. A node misses a token with probability
  // C(192,8)/C(256,8) = 0.09645: 4 x 0.90355 = 3.6142 nodes x 14,336 B = 51,813 B per token,
  // at DeepEP's ep-32 shares of the 50 GB/s NIC: 58 GB/s dispatch, 57 combine.
  const ExpertAllToAll d32 = AllToAll(DeepseekV3(), 32, 4096);
  EXPECT_TRUE(d32.across_nodes);
  EXPECT_NEAR(d32.bytes_per_token, 51'813.4, 0.1);
  EXPECT_NEAR(d32.dispatch_ns, 51'813.376 * 4096 / 58 + 8400, 1);
  EXPECT_NEAR(d32.combine_ns, 51'813.376 * 4096 / 57 + 8400, 1);

  // ep 64 spans 8 nodes, one group each: node-limited routing keeps a token to 4 nodes, its
  // 8 experts among those nodes' 128: 4 x (1 - C(96,8)/C(128,8)) = 3.6290 nodes x 14,336 B
  // = 52,026 B per token, at 51 and 50 GB/s.
  const ExpertAllToAll d64 = AllToAll(DeepseekV3(), 64, 4096);
  EXPECT_NEAR(d64.bytes_per_token, 52'025.5, 0.1);
  EXPECT_NEAR(d64.dispatch_ns, 52'025.5006 * 4096 / 51 + 8400, 1);
  // Without the limit a token would reach 8 x (1 - C(224,8)/C(256,8)) = 5.29 nodes.
  MoeRouting unlimited = DeepseekV3();
  unlimited.expert_groups = unlimited.topk_groups = 0;
  EXPECT_NEAR(AllToAll(unlimited, 64, 4096).bytes_per_token, 75'904.1, 0.1);
  // ep 1: nothing moves.
  EXPECT_EQ(AllToAll(DeepseekV3(), 1, 4096).dispatch_ns, 0);
}

ExpertAllToAll NcclAllToAll(const MoeRouting& m, int ep, double tokens) {
  const Cluster c = H100();
  return ExpertAllToAllOf(c.intra_node, c.inter_node, c.NetworkGbpsPerGpu(),
                          ExpertGroupOf(ep, 1, c.gpus_per_node), m.experts, m.top_k,
                          m.expert_groups, m.topk_groups, m.hidden, m.bytes_per_element, tokens,
                          ExpertDispatcher::kAllToAll);
}

// Megatron-LM's --moe-token-dispatcher-type alltoall (MoEAlltoAllTokenDispatcher at d98e8a64):
// one row per (token, expert), k x h x 2 B per token whatever ep is, no dedup per rank or node;
// the rows to the node's other ranks over NVLink (360 GB/s: 450 x 0.8), those to other nodes
// over the GPU's NIC (47.5 GB/s: 50 x 0.95), side by side; the GPU's own rows stay.
TEST(ExpertParallelTest, AllToAllDispatcherSendsOneRowPerTokenAndExpert) {
  // DeepSeek-V3's routing: 8 x 7168 x 2 = 114,688 B per token at every ep.
  // ep 8 in one node: 7/8 of the rows leave the GPU over NVLink: 100,352 B per token, against
  // DeepEP's 75,904 (one copy per distinct rank, the sender's included).
  const ExpertAllToAll a8 = NcclAllToAll(DeepseekV3(), 8, 4096);
  EXPECT_FALSE(a8.across_nodes);
  EXPECT_DOUBLE_EQ(a8.bytes_per_token, 114'688);
  EXPECT_DOUBLE_EQ(a8.nvlink_bytes_per_token, 100'352);
  EXPECT_DOUBLE_EQ(a8.network_bytes_per_token, 0);
  // 100,352 x 4096 / 360 = 1,141,783 ns + 8.4 us; combine the same (NCCL has one rate).
  EXPECT_EQ(a8.dispatch_ns, 1'150'183);
  EXPECT_EQ(a8.combine_ns, a8.dispatch_ns);
  const ExpertAllToAll d8 = AllToAll(DeepseekV3(), 8, 4096);
  EXPECT_NEAR(d8.bytes_per_token, 75'904.1, 0.1);
  EXPECT_NEAR(d8.nvlink_bytes_per_token, d8.bytes_per_token, 1e-9);
  EXPECT_GT(a8.dispatch_ns, d8.dispatch_ns);

  // ep 32 over 4 nodes of 8: 7/32 of the rows to the node's other ranks (25,088 B), 24/32 to
  // the other nodes (86,016 B), against DeepEP's 51,813 B per token over the network (3.61
  // nodes x 14,336 B). The network sets the time: 86,016 x 4096 / 47.5 = 7,417,295 ns + 8.4 us
  // (NVLink's 285,445 ns run beside it), about twice DeepEP's 3,667,496.
  const ExpertAllToAll a32 = NcclAllToAll(DeepseekV3(), 32, 4096);
  EXPECT_TRUE(a32.across_nodes);
  EXPECT_DOUBLE_EQ(a32.bytes_per_token, 114'688);
  EXPECT_DOUBLE_EQ(a32.nvlink_bytes_per_token, 25'088);
  EXPECT_DOUBLE_EQ(a32.network_bytes_per_token, 86'016);
  EXPECT_EQ(a32.dispatch_ns, 7'425'695);
  const ExpertAllToAll d32 = AllToAll(DeepseekV3(), 32, 4096);
  EXPECT_NEAR(d32.network_bytes_per_token, 51'813.4, 0.1);
  EXPECT_NEAR(static_cast<double>(a32.dispatch_ns) / d32.dispatch_ns, 2.02, 0.01);

  // ep 64 over 8 nodes: node-limited routing does not help the all-to-all dispatcher (each
  // row goes to its expert's rank): 56/64 of the rows cross the network, 100,352 B per token
  // against DeepEP's 52,026; 100,352 x 4096 / 47.5 = 8,653,511 ns + 8.4 us.
  const ExpertAllToAll a64 = NcclAllToAll(DeepseekV3(), 64, 4096);
  EXPECT_DOUBLE_EQ(a64.nvlink_bytes_per_token, 12'544);
  EXPECT_DOUBLE_EQ(a64.network_bytes_per_token, 100'352);
  EXPECT_EQ(a64.dispatch_ns, 8'661'911);
  EXPECT_NEAR(AllToAll(DeepseekV3(), 64, 4096).network_bytes_per_token, 52'025.5, 0.1);

  // Mixtral 8x7B at ep 8 (one expert per GPU, top-2): 2 x 4096 x 2 = 16,384 B per token, the
  // same as DeepEP's count (2 distinct ranks), of which 7/8 leave the GPU.
  const MoeRouting mixtral{.experts = 8, .top_k = 2, .hidden = 4096};
  EXPECT_DOUBLE_EQ(NcclAllToAll(mixtral, 8, 4096).bytes_per_token, 16'384);
  EXPECT_DOUBLE_EQ(NcclAllToAll(mixtral, 8, 4096).nvlink_bytes_per_token, 14'336);
  // ep 1: nothing moves.
  EXPECT_EQ(NcclAllToAll(DeepseekV3(), 1, 4096).dispatch_ns, 0);
  EXPECT_EQ(ParseExpertDispatcher("alltoall"), ExpertDispatcher::kAllToAll);
  EXPECT_EQ(ParseExpertDispatcher("deepep"), ExpertDispatcher::kDeepEp);
  EXPECT_FALSE(ParseExpertDispatcher("flex").has_value());
  EXPECT_STREQ(ExpertDispatcherName(ExpertDispatcher::kAllToAll), "alltoall");
}

ExpertAllToAll AllGatherDispatch(const MoeRouting& m, int ep, int etp, double tokens) {
  const Cluster c = H100();
  return ExpertAllToAllOf(c.intra_node, c.inter_node, c.NetworkGbpsPerGpu(),
                          ExpertGroupOf(ep, etp, c.gpus_per_node), m.experts, m.top_k,
                          m.expert_groups, m.topk_groups, m.hidden, m.bytes_per_element, tokens,
                          ExpertDispatcher::kAllGather);
}

// Megatron-LM's --moe-token-dispatcher-type allgather (MoEAllGatherTokenDispatcher,
// megatron/core/transformer/moe/token_dispatcher.py read at 0014f137): token_permutation
// all-gathers the routing map ([tokens, E] bool), the probs ([tokens, E], bf16) and the hidden
// states ([tokens, h] bf16) over the etp x ep group of g GPUs; token_unpermutation
// reduce-scatters the [g x tokens, h] output back. Every token moves, whatever its routing, so
// one GPU receives (g - 1) x h x 2 B of hidden states per local token (and sends as much in the
// combine) plus (g - 1) x E x 3 B of routing map and probs. Timed as ring collectives of the
// collective model (sim/collectives.h): V = (g - 1) / g of the g x tokens x row bytes, on the
// H100 preset at NVLink's 360 GB/s (450 x 0.8), each paying 8.4 us + its steps.
TEST(ExpertParallelTest, AllGatherDispatcherMovesEveryTokenOfTheGroup) {
  // DeepSeek-V3 (E 256, h 7168) at ep 8 in one node: 7 x 14,336 = 100,352 B of hidden states
  // per token each way, all over NVLink, plus 7 x 256 x 3 = 5,376 B of routing map and probs.
  const ExpertAllToAll g8 = AllGatherDispatch(DeepseekV3(), 8, 1, 4096);
  EXPECT_FALSE(g8.across_nodes);
  EXPECT_DOUBLE_EQ(g8.bytes_per_token, 100'352);
  EXPECT_DOUBLE_EQ(g8.routing_bytes_per_token, 5'376);
  EXPECT_DOUBLE_EQ(g8.nvlink_bytes_per_token, 100'352);
  EXPECT_DOUBLE_EQ(g8.network_bytes_per_token, 0);
  // 4096 tokens: the hidden all-gather's S = 8 x 4096 x 14,336 = 469,762,048 B, V.S = 7/8 of it
  // = 411,041,792 B / 360 = 1,141,783 ns in NCCL's Simple protocol, which pays 8.4 us + 7 NVLink
  // steps of 3.4 us = 32,200 ns (LL128 would take 411,041,792 / (360 x 0.92) + 27,300 ns:
  // longer). The routing map's 7,340,032 B and the probs' 14,680,064 B are small enough for
  // LL128 (sim/collectives.h, NCCL's tuner): at 0.92 x 360 = 331.2 GB/s, 22,162 and 44,324 ns,
  // each paying 14 us + 7 NVLink steps of 1.9 us = 27,300 ns (in Simple 52,589 and 72,978 ns;
  // LL, at its 141 GB/s cap, is slower still). The combine's reduce-scatter is the hidden
  // all-gather's volume: 1,141,783 + 32,200 ns.
  EXPECT_NEAR(g8.dispatch_ns, 1'141'783 + 32'200 + 22'161.9 + 27'300 + 44'323.9 + 27'300, 2);
  EXPECT_EQ(g8.combine_ns, 1'141'783 + 32'200);
  // At k = 8 = ep the same hidden bytes as the all-to-all dispatcher's (7 of a token's 8 rows
  // leave the GPU) at the same NVLink rate; the all-gather pays for the routing map, the probs
  // and its ring's steps on top.
  EXPECT_DOUBLE_EQ(NcclAllToAll(DeepseekV3(), 8, 4096).nvlink_bytes_per_token, 100'352);

  // ep 32 over 4 nodes of 8: 31 x 14,336 = 444,416 B per token received, 3.9x the all-to-all
  // dispatcher's 114,688 B, and 31 x 768 = 23,808 B of routing map and probs. But the other 3
  // nodes' 24 GPUs' tokens enter the node once, over its 8 NICs: 3 x 14,336 = 43,008 B per
  // token on each GPU's NIC, half the all-to-all's 86,016 (6 of a token's 8 rows cross nodes);
  // the other 28 rows, 401,408 B, over NVLink.
  const ExpertAllToAll g32 = AllGatherDispatch(DeepseekV3(), 32, 1, 4096);
  EXPECT_TRUE(g32.across_nodes);
  EXPECT_DOUBLE_EQ(g32.bytes_per_token, 444'416);
  EXPECT_DOUBLE_EQ(g32.routing_bytes_per_token, 23'808);
  EXPECT_DOUBLE_EQ(g32.nvlink_bytes_per_token, 401'408);
  EXPECT_DOUBLE_EQ(g32.network_bytes_per_token, 43'008);
  // The ring over 4 nodes of 8: bus bandwidth min(NVLink 360, the node's 8 NICs x 50 x 0.95 =
  // 380) = 360 GB/s; Simple's fixed 8.4 us + 28 NVLink steps x 3.4 + 3 network steps x 14 =
  // 145,600 ns, LL128's 14 + 28 x 1.9 + 3 x 4.0 = 79,200 ns at 0.92 x 360 = 331.2 GB/s.
  // Hidden: 31/32 x 32 x 4096 x 14,336 = 1,820,327,936 B / 360 = 5,056,467 ns in Simple (LL128:
  // 5,496,159 + 79,200, longer); routing map 32,505,856 B in LL128: 98,146 + 79,200 ns (Simple
  // 90,295 + 145,600); probs 65,011,712 B in LL128: 196,291 + 79,200 ns (Simple 180,589 +
  // 145,600).
  EXPECT_NEAR(g32.dispatch_ns, 5'056'467 + 145'600 + 98'145.7 + 79'200 + 196'291.4 + 79'200, 2);
  EXPECT_EQ(g32.combine_ns, 5'056'467 + 145'600);
  // The backward runs the adjoints autograd records (Megatron-LM d98e8a64,
  // _GatherFromSequenceParallelRegion.backward): an all-gather of the output's gradient (the
  // combine's reduce-scatter's), reduce-scatters of the hidden states' and the probs' gradients
  // (the probs carry the router's), nothing for the routing map, gathered under no_grad. The
  // ring's reduce-scatter costs what its all-gather does: ep 8, 2 x (1,141,783 + 32,200) +
  // 44,324 + 27,300 = 2,419,590 ns (dispatch + combine: 2,469,052, the routing map's 49,462 ns
  // more); ep 32, 2 x (5,056,467 + 145,600) + 196,291 + 79,200 = 10,679,625 ns (10,856,970).
  EXPECT_NEAR(g8.backward_ns, 2 * (1'141'783 + 32'200) + 44'323.9 + 27'300, 2);
  EXPECT_NEAR(g32.backward_ns, 2 * (5'056'467 + 145'600) + 196'291.4 + 79'200, 2);
  EXPECT_EQ(g8.dispatch_ns + g8.combine_ns - g8.backward_ns, 22'162 + 27'300);
  // So across nodes, at k = 8, it beats the all-to-all dispatcher's 7,425,695 ns (network-bound
  // at one NIC per GPU); inside a node it loses (1,295,069 against 1,150,183 ns).
  EXPECT_LT(g32.dispatch_ns, NcclAllToAll(DeepseekV3(), 32, 4096).dispatch_ns);
  EXPECT_GT(g8.dispatch_ns, NcclAllToAll(DeepseekV3(), 8, 4096).dispatch_ns);

  // The group is etp x ep (Megatron-LM's tp_ep_group): ep 8 at etp 2 gathers over 16 GPUs in
  // 2 nodes, 15 x 14,336 B per token, the other node's 8 entering over its 8 NICs: 1 row each.
  const ExpertAllToAll etp2 = AllGatherDispatch(DeepseekV3(), 8, 2, 4096);
  EXPECT_TRUE(etp2.across_nodes);
  EXPECT_DOUBLE_EQ(etp2.bytes_per_token, 15 * 14'336);
  EXPECT_DOUBLE_EQ(etp2.nvlink_bytes_per_token, 14 * 14'336);
  EXPECT_DOUBLE_EQ(etp2.network_bytes_per_token, 14'336);
  // ep 1: nothing moves.
  EXPECT_EQ(AllGatherDispatch(DeepseekV3(), 1, 1, 4096).dispatch_ns, 0);
  EXPECT_EQ(ParseExpertDispatcher("allgather"), ExpertDispatcher::kAllGather);
  EXPECT_STREQ(ExpertDispatcherName(ExpertDispatcher::kAllGather), "allgather");
}

ExpertAllToAll WithDispatcher(const MoeRouting& m, int ep, double tokens,
                              ExpertDispatcher dispatcher) {
  const Cluster c = H100();
  return ExpertAllToAllOf(c.intra_node, c.inter_node, c.NetworkGbpsPerGpu(),
                          ExpertGroupOf(ep, 1, c.gpus_per_node), m.experts, m.top_k,
                          m.expert_groups, m.topk_groups, m.hidden, m.bytes_per_element, tokens,
                          dispatcher, ExpertRowsPerRoute(m));
}

// Megatron-LM's capacity factor (router.py apply_router_token_dropping,
// token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess, at d98e8a64):
// padded to capacity (--moe-pad-expert-input-to-capacity) each rank sends
// capacity x experts rows, capacity = C x tokens x k / E, i.e. C x k rows a
// token; dropping without padding at most min(1, C) x k; DeepEP and the
// all-gather dispatcher are unchanged (sim/collectives.h, "Capacity").
TEST(ExpertParallelTest, CapacityScalesTheAllToAllDispatchersRowsHandWorked) {
  MoeRouting padded{.experts = 8, .top_k = 2, .hidden = 4096};  // Mixtral 8x7B
  padded.capacity_factor = 1.25;
  padded.pad_to_capacity = true;
  EXPECT_DOUBLE_EQ(ExpertRowsPerRoute(padded), 1.25);
  // ep 8, 4096 tokens: 1.25 x 2 rows x 4096 x 2 B = 20,480 B per token, 7/8 of them to the
  // node's other ranks, 17,920 B: 17,920 x 4096 / 360 GB/s = 203,890 ns + 8.4 us.
  const ExpertAllToAll a = WithDispatcher(padded, 8, 4096, ExpertDispatcher::kAllToAll);
  EXPECT_DOUBLE_EQ(a.bytes_per_token, 20'480);
  EXPECT_DOUBLE_EQ(a.nvlink_bytes_per_token, 17'920);
  EXPECT_EQ(a.dispatch_ns, 203'890 + 8'400);
  EXPECT_EQ(a.combine_ns, a.dispatch_ns);
  // Dropping past 1.25 x the mean, unpadded: at most every route, 16,384 B per token (14,336 B
  // over NVLink: 163,112 ns + 8.4 us), as dropless.
  MoeRouting dropping = padded;
  dropping.pad_to_capacity = false;
  EXPECT_DOUBLE_EQ(ExpertRowsPerRoute(dropping), 1);
  const ExpertAllToAll d = WithDispatcher(dropping, 8, 4096, ExpertDispatcher::kAllToAll);
  EXPECT_DOUBLE_EQ(d.bytes_per_token, 16'384);
  EXPECT_EQ(d.dispatch_ns, 163'112 + 8'400);
  // Capacity 0.5: each expert keeps at most half its mean, so at most half the rows: 8,192 B.
  dropping.capacity_factor = 0.5;
  EXPECT_DOUBLE_EQ(WithDispatcher(dropping, 8, 4096, ExpertDispatcher::kAllToAll).bytes_per_token,
                   8'192);
  // DeepEP sends each token's kept routes, never padding; the all-gather dispatcher gathers
  // every token: both as dropless.
  const MoeRouting dropless{.experts = 8, .top_k = 2, .hidden = 4096};
  for (ExpertDispatcher other : {ExpertDispatcher::kDeepEp, ExpertDispatcher::kAllGather}) {
    EXPECT_DOUBLE_EQ(WithDispatcher(padded, 8, 4096, other).bytes_per_token,
                     WithDispatcher(dropless, 8, 4096, other).bytes_per_token);
  }
  // In a stage: MoeTwoLayers' MoE layer (the same routing, 4096 tokens a GPU) pays the padded
  // dispatch and combine each way.
  Model model = test_util::MoeTwoLayers();
  model.layers[1].moe->capacity_factor = 1.25;
  model.layers[1].moe->pad_to_capacity = true;
  TrainingConfig config = Layout(1, 1, 8, 8);
  config.layout.expert_dispatcher = ExpertDispatcher::kAllToAll;
  const StageCostTable table(model, StageCostOptionsFor(config, H100()));
  EXPECT_EQ(table.Layer(1).ep_forward_ns, 2 * (203'890 + 8'400));
}

// Megatron-LM's all-gather dispatcher holds, while a MoE layer runs, the
// gathered routing map (g x tokens x E x 1 B), probs (x 2 B) and hidden states
// (x h x 2 B), and later the [g x tokens, h] output before its reduce-scatter:
// charged as the layer's workspace. The all-to-all dispatchers' buffers are
// NCCL's or DeepEP's, in the runtime reserve: none.
TEST(ExpertParallelTest, AllGatherDispatcherChargesItsGatheredBuffersAsWorkspace) {
  // DeepSeek-V3 at ep 8, 4096 tokens: 8 x 4096 x (14,336 + 256 x 3) = 32,768 x 15,104 B.
  EXPECT_EQ(AllGatherDispatch(DeepseekV3(), 8, 1, 4096).workspace_bytes, 494'927'872);
  // ep 32: 131,072 rows of 15,104 B, 1.84 GiB.
  EXPECT_EQ(AllGatherDispatch(DeepseekV3(), 32, 1, 4096).workspace_bytes, 1'979'711'488);
  EXPECT_EQ(AllToAll(DeepseekV3(), 8, 4096).workspace_bytes, 0);
  EXPECT_EQ(NcclAllToAll(DeepseekV3(), 8, 4096).workspace_bytes, 0);
  // MoeTwoLayers at ep 8 (E 8, h 4096, bf16, 4096 tokens): 32,768 x (8,192 + 24) =
  // 269,221,888 B on the MoE layer, none on the dense one; the stage's workspace is its
  // largest layer's.
  TrainingConfig config = Layout(1, 1, 8, 8);
  config.layout.expert_dispatcher = ExpertDispatcher::kAllGather;
  const Model model = test_util::MoeTwoLayers();
  const StageCostTable gather(model, StageCostOptionsFor(config, H100()));
  EXPECT_EQ(gather.Layer(0).workspace_bytes, 0);
  EXPECT_EQ(gather.Layer(1).workspace_bytes, 269'221'888);
  EXPECT_EQ(gather.Stage(StageLayers{0, 1}).workspace_bytes, 269'221'888);
  // Its backward is the adjoints' (AllGatherDispatcherMovesEveryTokenOfTheGroup): the forward
  // less the routing map's all-gather.
  const ExpertAllToAll a = AllGatherDispatch(*model.layers[1].moe, 8, 1, 4096);
  EXPECT_EQ(gather.Layer(1).ep_forward_ns, a.dispatch_ns + a.combine_ns);
  EXPECT_EQ(gather.Layer(1).ep_backward_ns, a.backward_ns);
  EXPECT_LT(a.backward_ns, a.dispatch_ns + a.combine_ns);
  config.layout.expert_dispatcher = ExpertDispatcher::kAllToAll;
  EXPECT_EQ(StageCostTable(model, StageCostOptionsFor(config, H100())).Layer(1).workspace_bytes, 0);
}

TEST(ExpertParallelTest, GroupLaidOutAsMegatronLaysIt) {
  const ExpertAllToAllGroup in_node = ExpertGroupOf(8, 1, 8);
  EXPECT_EQ(in_node.nodes, 1);
  EXPECT_EQ(in_node.per_node, 8);
  const ExpertAllToAllGroup etp2 = ExpertGroupOf(8, 2, 8);  // 16 GPUs: 2 nodes of 4 ep ranks
  EXPECT_EQ(etp2.nodes, 2);
  EXPECT_EQ(etp2.per_node, 4);
  EXPECT_EQ(ExpertGroupOf(64, 1, 8).nodes, 8);
}

Model TwoLayers() { return test_util::MoeTwoLayers(); }

TEST(ExpertParallelTest, MoeLayersPayDispatchAndCombineEachWay) {
  const Model model = TwoLayers();
  const Cluster cluster = H100();
  const StageCostTable dense(model, StageCostOptionsFor(Layout(1, 1, 8, 1), cluster));
  const StageCostTable ep8(model, StageCostOptionsFor(Layout(1, 1, 8, 8), cluster));
  // The dense layer is untouched; the MoE layer adds dispatch + combine to F and to B.
  EXPECT_EQ(ep8.Layer(0).forward_ns, dense.Layer(0).forward_ns);
  const TimeNs pair = 203'342 + 197'173;  // worked above, 4096 tokens at ep 8
  EXPECT_EQ(ep8.Layer(1).ep_forward_ns, pair);
  EXPECT_EQ(ep8.Layer(1).forward_ns, 1'000'000 + pair);
  EXPECT_EQ(ep8.Layer(1).backward_ns, 2'000'000 + pair);
  const StageCost stage = ep8.Stage(StageLayers{0, 1});
  EXPECT_EQ(stage.ep_forward_ns, pair);
  EXPECT_EQ(stage.expert_parameters, 700'000'000);
  // t = 2 with sequence parallelism: each GPU dispatches half the tokens.
  const StageCostTable t2(model, StageCostOptionsFor(Layout(2, 1, 4, 8), cluster));
  EXPECT_EQ(ExpertTokensPerGpu(model, StageCostOptionsFor(Layout(2, 1, 4, 8), cluster)), 2048);
  EXPECT_LT(t2.Layer(1).ep_forward_ns, pair);
}

TEST(ExpertParallelTest, PerOpPolicyKeepsTheAllToAllOutputsAtEpAboveOne) {
  // torchtitan's DeepSeek-V3 and Llama 4 op policies save
  // `_c10d_functional.all_to_all_single`'s outputs: at ep > 1 each MoE layer keeps the tokens it
  // received (dispatch) and the ones it got back (combine), k x h elements per token each. The
  // MoE layer of MoeTwoLayers (top-2, h 4096, bf16) at s 4096, b 1: 2 x 4096 x 2 x 4096 x 2 B
  // = 134,217,728 B (128 MiB) on top of the profile's op_saved_bytes; none at ep 1, where no
  // all-to-all runs, and none on the dense layer.
  Model model = TwoLayers();
  for (Layer& l : model.layers) {
    l.profiles[0].activation_bytes = kGiB;
    l.profiles[0].op_saved_bytes = 10 * kMiB;
    l.profiles[0].op_recompute_ns = 100'000;
  }
  const Cluster cluster = H100();
  TrainingConfig config = Layout(1, 1, 8, 8);
  config.recompute = Recompute::kOp;
  const StageCostTable ep8(model, StageCostOptionsFor(config, cluster));
  EXPECT_EQ(OpSavedAllToAllBytes(*model.layers[1].moe, 4096), 128 * kMiB);
  EXPECT_EQ(ep8.Layer(0).op_saved_bytes, 10 * kMiB);
  EXPECT_EQ(ep8.Layer(1).op_saved_bytes, 138 * kMiB);
  const StageCost stage = ep8.Stage(StageLayers{0, 1});
  EXPECT_EQ(stage.held_bytes, 148 * kMiB);
  // The backward rebuilds the rest of the larger of the two: 1 GiB - 10 MiB (the dense layer).
  EXPECT_EQ(stage.recomputed_bytes, kGiB - 10 * kMiB);
  config.layout.expert_parallel = 1;
  const StageCostTable ep1(model, StageCostOptionsFor(config, cluster));
  EXPECT_EQ(ep1.Stage(StageLayers{0, 1}).held_bytes, 20 * kMiB);
  // t = 2 with sequence parallelism: each GPU dispatches and keeps half the tokens' copies.
  TrainingConfig t2 = Layout(2, 1, 4, 8), t2_ep1 = Layout(2, 1, 4, 1);
  t2.recompute = t2_ep1.recompute = Recompute::kOp;
  const Bytes t2_kept =
      *StageCostTable(model, StageCostOptionsFor(t2, cluster)).Layer(1).op_saved_bytes;
  const Bytes t2_ep1_kept =
      *StageCostTable(model, StageCostOptionsFor(t2_ep1, cluster)).Layer(1).op_saved_bytes;
  EXPECT_EQ(t2_kept - t2_ep1_kept, 64 * kMiB);
}

TEST(ExpertParallelTest, ExpertMemoryPerGpuUnderFoldingWorkedByHand) {
  // bf16 with fp32 main gradients and Adam: 2 B weights, 4 B gradients, 12 B optimizer state
  // (fp32 main parameters and moments) per parameter. t = 2, d = 8, ep = 8: the 300M dense
  // parameters split over t = 2, the 700M expert parameters over ep x etp = 8.
  TrainingConfig config = Layout(2, 1, 8, 8);
  config.memory.zero = 1;
  ASSERT_TRUE(config.Validate().ok());
  const MemoryConfig per_gpu = config.PerGpuMemory();
  const ShardedBytes dense = ShardedBytesPerParam(per_gpu, config.layout.GradientReplicas());
  const ShardedBytes expert = ExpertBytesPerParam(dense, per_gpu, 2, config.layout.ExpertShards());
  const ParameterMemory m = ParameterMemoryOf(1'000'000'000, 700'000'000, dense, expert);
  const double w = config.memory.weight_bytes_per_param;
  const double g = config.memory.gradient_bytes_per_param;
  const double k =
      config.memory.optimizer_bytes_per_param + config.memory.gradient_copy_bytes_per_param;
  EXPECT_EQ(w, 2);
  EXPECT_EQ(g, 4);
  // weights: 300M x 2 / 2 + 700M x 2 / 8 = 300 MB + 175 MB.
  EXPECT_EQ(m.weights, 475'000'000);
  // gradients: 300M x 4 / 2 + 700M x 4 / 8 = 600 MB + 350 MB.
  EXPECT_EQ(m.gradients, 950'000'000);
  // ZeRO-1 optimizer: every parameter spread over the stage's t x d = 16 GPUs (the dense ones
  // over t = 2 then d = 8, the experts over ep = 8 then edp = 2): 1e9 x k / 16.
  EXPECT_EQ(m.optimizer, std::llround(1e9 * k / 16));
  // Without expert parallelism (ep x etp = t) the experts split as the dense layers do.
  const ShardedBytes same = ExpertBytesPerParam(dense, per_gpu, 2, 2);
  EXPECT_DOUBLE_EQ(same.weights, dense.weights);
  EXPECT_DOUBLE_EQ(same.gradients, dense.gradients);
}

TEST(ExpertParallelTest, SimulatorReportsEpAndRefusesBadDegrees) {
  const Model model = TwoLayers();
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 2, 4);
  ASSERT_TRUE(schedule.ok());
  SimOptions options;
  options.config = Layout(1, 1, 8, 8);
  Result<SimResult> r = Simulate(model, H100(), *schedule, options);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->expert_parallel, 8);
  // Rank 1 holds the MoE layer: 4 forwards and 4 backwards, each with the pair.
  EXPECT_EQ(r->ep_comm_ns, 8 * (203'342 + 197'173));
  // Weights of rank 1: 300M x 2 B + 700M x 2 B / 8.
  EXPECT_EQ(r->per_rank[1].memory.weights, 600'000'000 + 175'000'000);
  EXPECT_EQ(r->per_rank[0].memory.weights, 2'000'000'000);

  options.config = Layout(1, 1, 8, 4, 2);
  EXPECT_TRUE(Simulate(model, H100(), *schedule, options).ok());
  // ep 8 does not divide 8 x ... : a layer of 6 experts.
  Model six = model;
  six.layers[1].moe->experts = 6;
  options.config = Layout(1, 1, 8, 4);
  Result<SimResult> bad = Simulate(six, H100(), *schedule, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--expert-parallel 4 does not divide the 6 experts"),
            std::string::npos);
  Model dense = model;
  dense.layers[1].moe.reset();
  options.config = Layout(1, 1, 8, 8);
  bad = Simulate(dense, H100(), *schedule, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no mixture-of-experts layer"), std::string::npos);
}

TEST(ExpertParallelTest, SimulatorCarriesTheAllToAllDispatcherIntoJsonAndNotes) {
  const Model model = TwoLayers();
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 2, 4);
  ASSERT_TRUE(schedule.ok());
  SimOptions options;
  options.config = Layout(1, 1, 8, 8);
  options.config.layout.expert_dispatcher = ExpertDispatcher::kAllToAll;
  Result<SimResult> r = Simulate(model, H100(), *schedule, options);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->ep_dispatcher, ExpertDispatcher::kAllToAll);
  // 8 experts, top-2, h 4096, 4096 tokens at ep 8 in a node: 16,384 B per token, 14,336 B of
  // it to the other 7 GPUs over NVLink at 360 GB/s: 163,112 ns + 8.4 us each way; 4 forwards
  // and 4 backwards on rank 1, each a dispatch and a combine.
  EXPECT_EQ(r->ep_comm_ns, 16 * 171'512);
  bool noted = false;
  for (const std::string& n : r->notes) {
    noted = noted || n.find("--ep-dispatcher alltoall") != std::string::npos;
  }
  EXPECT_TRUE(noted);
  EXPECT_NE(ResultToJson(*r).find("\"ep_dispatcher\": \"alltoall\""), std::string::npos);
  // DeepEP, the default: no key and no note, as before the flag.
  options.config.layout.expert_dispatcher = ExpertDispatcher::kDeepEp;
  Result<SimResult> d = Simulate(model, H100(), *schedule, options);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(ResultToJson(*d).find("ep_dispatcher"), std::string::npos);
  for (const std::string& n : d->notes) EXPECT_EQ(n.find("--ep-dispatcher"), std::string::npos);
}

TEST(ExpertParallelTest, ModelJsonCarriesMoeAndRefusesBadValues) {
  const Model model = TwoLayers();
  const std::string text = ModelToJson(model);
  Result<Model> back = ParseModel(text, "two.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_TRUE(back->layers[1].moe.has_value());
  EXPECT_EQ(back->layers[1].moe->experts, 8);
  EXPECT_EQ(back->layers[1].moe->expert_parameters, 700'000'000);
  EXPECT_FALSE(back->layers[0].moe.has_value());
  std::string bad = text;
  const size_t at = bad.find("\"top_k\": 2");
  ASSERT_NE(at, std::string::npos);
  bad.replace(at, 10, "\"top_k\": 9");
  Result<Model> refused = ParseModel(bad, "two.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("layers[1].moe.top_k"), std::string::npos)
      << refused.status().message();
}

TEST(ExpertParallelTest, ModelJsonCarriesTheCapacityFactor) {
  Model model = TwoLayers();
  model.layers[1].moe->capacity_factor = 1.25;
  model.layers[1].moe->pad_to_capacity = true;
  const std::string text = ModelToJson(model);
  Result<Model> back = ParseModel(text, "two.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_DOUBLE_EQ(back->layers[1].moe->capacity_factor, 1.25);
  EXPECT_TRUE(back->layers[1].moe->pad_to_capacity);
  // Dropless layers write neither key.
  EXPECT_EQ(ModelToJson(TwoLayers()).find("capacity_factor"), std::string::npos);
  // Padding needs a capacity to pad to.
  std::string bad = text;
  const size_t at = bad.find("\"capacity_factor\": 1.25,");
  ASSERT_NE(at, std::string::npos);
  bad.erase(at, std::string("\"capacity_factor\": 1.25,").size());
  Result<Model> refused = ParseModel(bad, "two.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("layers[1].moe.pad_to_capacity: needs capacity_factor"),
            std::string::npos)
      << refused.status().message();
}

TEST(ExpertParallelPlanner, SearchesEpFoldedOverTheStageAndPinsIt) {
  const Model model = TwoLayers();
  const Cluster cluster = H100();
  PlannerOptions options;
  options.gpus = 8;
  options.schedules = {ScheduleKind::k1F1B};
  options.microbatch_sizes = {1};
  // Every power of two up to N dividing the 8 experts.
  EXPECT_EQ(passes::ExpertParallelDegrees(model, options), (std::vector<int>{1, 2, 4, 8}));
  std::vector<Rejection> rejected;
  const std::vector<Candidate> all = passes::Enumerate(model, cluster, options, 16, &rejected);
  std::set<int> eps;
  for (const Candidate& c : all) {
    const ParallelLayout& l = c.config.layout;
    const int stage = l.tensor_parallel * l.context_parallel * l.data_parallel;
    EXPECT_EQ(stage % (l.expert_parallel * l.expert_tensor_parallel), 0) << c.Label();
    eps.insert(l.expert_parallel);
  }
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4, 8}));
  EXPECT_EQ(passes::CountConfigurations(model, cluster, options),
            static_cast<int64_t>(all.size() + rejected.size()));
  // Pinned: only the listed degree, where it folds.
  options.expert_parallel = {4};
  rejected.clear();
  eps.clear();
  for (const Candidate& c : passes::Enumerate(model, cluster, options, 16, &rejected)) {
    eps.insert(c.config.layout.expert_parallel);
  }
  EXPECT_EQ(eps, std::set<int>{4});
  // A dense model searches ep = 1 alone.
  Model dense = model;
  dense.layers[1].moe.reset();
  options.expert_parallel.clear();
  EXPECT_EQ(passes::ExpertParallelDegrees(dense, options), std::vector<int>{1});
}

// The planner with --ep-overlap both tries each configuration with the overlap off and, where
// it can run, on, and ranks them: on 8 MoE layers over 16 GPUs pinned to interleaved p = 2,
// v = 2, the combined 1F1B ranks above the plain order at ep = 8; ep = 1 is tried off alone.
TEST(ExpertParallelPlanner, ChoosesTheAllToAllOverlapWhereTheFlagAllowsIt) {
  Model model;
  model.name = "moe-eight";
  model.sequence_length = 4096;
  for (int i = 0; i < 8; ++i) {
    Layer l = TwoLayers().layers[1];  // 1 ms forward, 2 ms backward, Mixtral's routing
    l.name = "block." + std::to_string(i);
    l.parameters = 100'000'000;
    l.moe->expert_parameters = 70'000'000;
    model.layers.push_back(l);
  }
  PlannerOptions options;
  options.gpus = 16;
  options.global_batch = 64;  // m = 8 at d = 8
  options.schedules = {ScheduleKind::kInterleaved1F1B};
  options.chunks = {2};
  options.microbatch_sizes = {1};
  options.pipeline_stages = 2;
  options.zero_levels = {1};
  options.expert_parallel = {1, 8};
  options.expert_overlaps = {ExpertOverlap::kOff, ExpertOverlap::kOn};
  Result<PlanReport> report = RunPlanner(model, H100(), options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_TRUE(report->Feasible());
  std::set<ExpertOverlap> at_ep8;
  for (const Candidate& c : report->ranked) {
    if (c.config.layout.expert_parallel == 1) {
      EXPECT_EQ(c.config.overlap.expert_overlap, ExpertOverlap::kOff) << c.Label();
    } else {
      at_ep8.insert(c.config.overlap.expert_overlap);
    }
  }
  EXPECT_EQ(at_ep8, (std::set<ExpertOverlap>{ExpertOverlap::kOff, ExpertOverlap::kOn}));
  // At ep = 8 the combined 1F1B ranks first: it hides the all-to-alls (ep = 1 has none to hide;
  // the experts' compute per GPU is the same under folding).
  const Candidate* best_ep8 = nullptr;
  for (const Candidate& c : report->ranked) {
    if (best_ep8 == nullptr && c.config.layout.expert_parallel == 8) best_ep8 = &c;
  }
  ASSERT_NE(best_ep8, nullptr);
  const Candidate& best = *best_ep8;
  EXPECT_EQ(best.config.overlap.expert_overlap, ExpertOverlap::kOn) << best.Label();
  EXPECT_NE(best.Label().find("ep-overlap=on"), std::string::npos);
  // Pinned on: the ep = 1 candidates are rejected with the reason.
  options.expert_overlaps = {ExpertOverlap::kOn};
  Result<PlanReport> pinned = RunPlanner(model, H100(), options);
  ASSERT_TRUE(pinned.ok()) << pinned.status().message();
  bool refused_ep1 = false;
  for (const Rejection& r : pinned->rejected) {
    refused_ep1 |= r.candidate.config.layout.expert_parallel == 1 &&
                   r.detail.find("--ep-overlap on needs --expert-parallel") != std::string::npos;
  }
  EXPECT_TRUE(refused_ep1);
}

}  // namespace
}  // namespace pipecast
