// Expert tensor parallelism (docs/simulator.md, "Expert parallelism"): what etp > 1 moves in
// each dispatcher as Megatron-LM runs it (megatron/core/transformer/moe/token_dispatcher.py at
// d98e8a64), worked by hand on the H100 preset; that its collectives stay on the compute stream
// (never hidden by --ep-overlap); that etp = 1 adds nothing; and that the planner's etp
// candidates pay for it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/result_json.h"
#include "planner/planner.h"
#include "sim/cluster.h"
#include "sim/collectives.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"
#include "sim/training_config.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

Cluster H100() { return test_util::PresetCluster("h100-sxm"); }

TrainingConfig Layout(int t, int d, int ep, int etp, ExpertDispatcher dispatcher) {
  TrainingConfig c;
  c.layout.tensor_parallel = t;
  c.layout.sequence_parallel = t > 1;
  c.layout.data_parallel = d;
  c.layout.expert_parallel = ep;
  c.layout.expert_tensor_parallel = etp;
  c.layout.expert_dispatcher = dispatcher;
  return c;
}

const MoeRouting kMixtral{.experts = 8, .top_k = 2, .hidden = 4096};
// DeepSeek-V3's routing: 256 experts, top-8, hidden 7168, 8 groups of which a token uses 4.
const MoeRouting kDeepseekV3{
    .experts = 256, .top_k = 8, .expert_groups = 8, .topk_groups = 4, .hidden = 7168};

ExpertAllToAll Dispatch(const MoeRouting& m, int ep, int etp, ExpertDispatcher dispatcher,
                        double tokens = 4096) {
  const Cluster c = H100();
  return ExpertAllToAllOf(c.intra_node, c.inter_node, c.NetworkGbpsPerGpu(),
                          ExpertGroupOf(ep, etp, c.gpus_per_node), m.experts, m.top_k,
                          m.expert_groups, m.topk_groups, m.hidden, m.bytes_per_element, tokens,
                          dispatcher);
}

// --moe-token-dispatcher-type alltoall: after the all-to-all among the GPUs of one etp rank,
// dispatch_postprocess all-gathers the received rows and their probs over the etp group and
// combine_preprocess reduce-scatters the partial outputs (fc2 is row-parallel). A GPU receives
// k x tokens rows, so the etp all-gather's S = etp x k x tokens x h x 2 B, V = (etp - 1) / etp
// of it through each GPU: (etp - 1) x k x h x 2 B per token it dispatched. The H100 preset's
// ring: NVLink 450 GB/s x 0.8 = 360; Simple pays 8.4 us + 3.4 us a step, LL 6.6 + 0.6 a step
// at half the bandwidth capped at 141 GB/s, LL128 14 + 1.9 a step at 0.92 x (sim/collectives.h).
TEST(ExpertTensorParallelTest, AllToAllDispatcherGathersAndScattersOverTheEtpPairByHand) {
  // Mixtral 8x7B (8 experts, top-2, h 4096) at ep 4 etp 2: the 8 GPUs of one node, each etp pair
  // two neighbours. 1 x 2 x 8192 = 16,384 B per token gathered (as many scattered back).
  const ExpertAllToAll m = Dispatch(kMixtral, 4, 2, ExpertDispatcher::kAllToAll);
  EXPECT_FALSE(m.across_nodes);
  EXPECT_DOUBLE_EQ(m.etp_bytes_per_token, 16'384);
  // The all-to-all itself is ep 4's in the node: 3/4 of the 16,384 B rows leave the GPU over
  // NVLink, 12,288 x 4096 / 360 = 139,810 ns + 8.4 us, as at etp 1.
  EXPECT_EQ(m.dispatch_ns, 148'210);
  EXPECT_EQ(m.dispatch_ns, Dispatch(kMixtral, 4, 1, ExpertDispatcher::kAllToAll).dispatch_ns);
  // 4096 tokens: hidden S = 2 x 8192 rows x 8192 B = 134,217,728 B, half of it through each GPU,
  // 67,108,864 / 360 = 186,414 ns + 8.4 + 3.4 us (Simple; LL128 takes 202,623 + 15,900). The
  // probs, 32,768 B, go in LL: 16,384 / 141 = 116 ns + 7,200 (Simple 11,846, LL128 15,949).
  EXPECT_NEAR(m.etp_gather_ns, 186'413.5 + 11'800 + 116.2 + 7'200, 2);
  EXPECT_NEAR(m.etp_scatter_ns, 186'413.5 + 11'800, 1);
  // So etp 2 adds 403.7 us per layer and micro-batch each way beside the all-to-alls' 296.4.

  // At ep 1 (etp 2 alone) the all-to-all of one GPU is none; the pair's collectives are the
  // same (k x tokens rows whatever ep is).
  const ExpertAllToAll alone = Dispatch(kMixtral, 1, 2, ExpertDispatcher::kAllToAll);
  EXPECT_EQ(alone.dispatch_ns, 0);
  EXPECT_EQ(alone.combine_ns, 0);
  EXPECT_EQ(alone.etp_gather_ns, m.etp_gather_ns);
  EXPECT_EQ(alone.etp_scatter_ns, m.etp_scatter_ns);

  // DeepSeek-V3 at ep 8 etp 2: 16 GPUs over 2 nodes, the etp pair inside one. 1 x 8 x 14,336 =
  // 114,688 B per token gathered, as much as the all-to-all's rows: S = 2 x 32,768 rows x
  // 14,336 B; 469,762,048 / 360 = 1,304,895 ns + 11,800 (Simple); probs 65,536 / 141 = 465 ns
  // + 7,200 (LL).
  const ExpertAllToAll d = Dispatch(kDeepseekV3, 8, 2, ExpertDispatcher::kAllToAll);
  EXPECT_TRUE(d.across_nodes);
  EXPECT_DOUBLE_EQ(d.etp_bytes_per_token, 114'688);
  EXPECT_NEAR(d.etp_gather_ns, 1'304'894.6 + 11'800 + 464.8 + 7'200, 2);
  EXPECT_NEAR(d.etp_scatter_ns, 1'304'894.6 + 11'800, 1);
  // The all-to-all: 4 ep ranks a node, 4/8 of the rows (57,344 B) over the NIC at 47.5 GB/s:
  // 4,944,864 ns + 8.4 us (NVLink's 3/8, 489,335 ns, beside it). etp's pair adds 27% each way.
  EXPECT_NEAR(d.dispatch_ns, 57'344.0 * 4096 / 47.5 + 8'400, 1);
}

// --moe-token-dispatcher-type flex with DeepEP (MoEFlexTokenDispatcher): one all-to-all over the
// etp x ep GPUs (tp_ep_group), the routing map expanded etp times (router_topk = etp x k), so a
// token goes to every etp GPU of each rank holding one of its experts and the combine sums their
// partial outputs. No collective of its own.
TEST(ExpertTensorParallelTest, DeepEpSendsEachTokenToEveryGpuOfTheEtpGroup) {
  // Mixtral at ep 4 etp 2 in a node: 4 x (1 - C(6,2)/C(8,2)) = 13/7 ranks per token, 2 GPUs
  // each: 26/7 x 8192 = 30,427 B per token (16,384 at ep 8 etp 1: 2 ranks), at DeepEP's
  // in-node shares of 360 GB/s (153/160, 158/160).
  const ExpertAllToAll m = Dispatch(kMixtral, 4, 2, ExpertDispatcher::kDeepEp);
  EXPECT_NEAR(m.bytes_per_token, 26.0 / 7 * 8192, 1e-6);
  EXPECT_NEAR(m.dispatch_ns, 26.0 / 7 * 8192 * 4096 / 344.25 + 8'400, 1);
  EXPECT_NEAR(m.combine_ns, 26.0 / 7 * 8192 * 4096 / 355.5 + 8'400, 1);
  EXPECT_EQ(m.etp_gather_ns + m.etp_scatter_ns, 0);
  // ep 1 etp 2: each token to both GPUs of the pair, the sender's own copy counted as DeepEP
  // counts it: 2 x 8192 B.
  EXPECT_DOUBLE_EQ(Dispatch(kMixtral, 1, 2, ExpertDispatcher::kDeepEp).bytes_per_token, 16'384);
  // Across nodes a token enters each node once whatever etp is: DeepSeek-V3 at ep 8 etp 2 (2
  // nodes, DeepEP's 16-rank group) moves what ep 16 etp 1 moves.
  const ExpertAllToAll d = Dispatch(kDeepseekV3, 8, 2, ExpertDispatcher::kDeepEp);
  const ExpertAllToAll d16 = Dispatch(kDeepseekV3, 16, 1, ExpertDispatcher::kDeepEp);
  EXPECT_TRUE(d.across_nodes);
  EXPECT_DOUBLE_EQ(d.bytes_per_token, d16.bytes_per_token);
  EXPECT_EQ(d.dispatch_ns, d16.dispatch_ns);
  // The all-gather dispatcher already gathers over the etp x ep group: no etp collective either.
  const ExpertAllToAll g = Dispatch(kDeepseekV3, 8, 2, ExpertDispatcher::kAllGather);
  EXPECT_DOUBLE_EQ(g.bytes_per_token, 15 * 14'336);
  EXPECT_EQ(g.etp_gather_ns + g.etp_scatter_ns, 0);
  EXPECT_GT(Dispatch(kDeepseekV3, 1, 2, ExpertDispatcher::kAllGather).dispatch_ns, 0);
}

TEST(ExpertTensorParallelTest, EtpOneAddsNothing) {
  for (ExpertDispatcher dispatcher :
       {ExpertDispatcher::kDeepEp, ExpertDispatcher::kAllToAll, ExpertDispatcher::kAllGather}) {
    for (int ep : {1, 8, 32}) {
      const ExpertAllToAll a = Dispatch(kDeepseekV3, ep, 1, dispatcher);
      EXPECT_EQ(a.etp_bytes_per_token, 0) << ExpertDispatcherName(dispatcher) << " ep " << ep;
      EXPECT_EQ(a.etp_gather_ns + a.etp_scatter_ns, 0);
      if (ep == 1) {
        EXPECT_EQ(a.dispatch_ns + a.combine_ns, 0);
      }
    }
  }
  // The stage costs at etp 1: the profile plus the all-to-alls (tests/expert_parallel_test.cc
  // works them: 171,512 ns each way with the all-to-all dispatcher at ep 8), nothing more.
  const Model model = test_util::MoeTwoLayers();
  const StageCostTable table(
      model, StageCostOptionsFor(Layout(1, 8, 8, 1, ExpertDispatcher::kAllToAll), H100()));
  EXPECT_EQ(table.Layer(1).etp_forward_ns + table.Layer(1).etp_backward_ns, 0);
  EXPECT_EQ(table.Layer(1).forward_ns, 1'000'000 + 2 * 171'512);
  for (const std::string& note : table.Notes()) {
    EXPECT_EQ(note.find("--expert-tensor-parallel"), std::string::npos) << note;
  }
}

// The etp collectives are in the MoE layer's forward and input-gradient backward, on the compute
// stream inside the routed experts' node (routed_experts_compute): what an overlapped pair may
// hide (PairCommNs) is the all-to-alls alone, and the layered rule puts them in the experts'
// node whole.
TEST(ExpertTensorParallelTest, StageCostsChargeEtpOnTheComputeStream) {
  Model model = test_util::MoeTwoLayers();  // Mixtral's routing, 4096 tokens, 1 ms / 2 ms
  // The routed experts half the MoE layer's forward FLOPs: 2 x 4096 x 2 x 700M / 8 each half.
  model.layers[1].forward_flops = 2 * 2.0 * 4096 * 2 * 700'000'000 / 8;
  const Cluster cluster = H100();
  const StageCostTable table(
      model, StageCostOptionsFor(Layout(1, 8, 4, 2, ExpertDispatcher::kAllToAll), cluster));
  const ExpertAllToAll a = Dispatch(kMixtral, 4, 2, ExpertDispatcher::kAllToAll);
  const TimeNs etp = a.etp_gather_ns + a.etp_scatter_ns;
  const TimeNs a2a = 2 * 148'210;
  const LayerCost& moe = table.Layer(1);
  EXPECT_EQ(moe.ep_forward_ns, a2a);
  EXPECT_EQ(moe.etp_forward_ns, etp);
  EXPECT_EQ(moe.etp_backward_ns, etp);
  EXPECT_EQ(moe.forward_ns, 1'000'000 + a2a + etp);
  EXPECT_EQ(moe.backward_ns, 2'000'000 + a2a + etp);
  EXPECT_EQ(table.Layer(0).forward_ns, 1'000'000);  // the dense layer: untouched

  const StageCost stage = table.Stage(StageLayers{0, 1});
  EXPECT_EQ(stage.etp_forward_ns, etp);
  EXPECT_EQ(stage.PairCommNs(OpKind::kForward, true), a2a);
  EXPECT_EQ(stage.PairCommNs(OpKind::kBackward, true), a2a);
  ASSERT_EQ(stage.pair_layers.size(), 2u);
  const PairLayerCost& l = stage.pair_layers[1];
  EXPECT_EQ(l.pre_forward, 500'000);
  EXPECT_EQ(l.expert_forward, 500'000 + etp);
  EXPECT_EQ(l.pre_backward, 1'000'000);
  EXPECT_EQ(l.expert_backward, 1'000'000 + etp);
  EXPECT_EQ(l.dispatch, 148'210);

  // The simulator: rank 1 holds the MoE layer, 4 forwards and 4 backwards, each paying the
  // all-to-alls and etp's collectives (ep_comm_time_us); the note states the model.
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 2, 4);
  ASSERT_TRUE(schedule.ok());
  SimOptions options;
  options.config = Layout(1, 8, 4, 2, ExpertDispatcher::kAllToAll);
  Result<SimResult> r = Simulate(model, cluster, *schedule, options);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->ep_comm_ns, 8 * (a2a + etp));
  bool noted = false;
  for (const std::string& n : r->notes) {
    noted = noted || n.find("--expert-tensor-parallel 2: each MoE layer all-gathers") == 0;
  }
  EXPECT_TRUE(noted);
}

// The planner's etp candidates pay etp's collectives: with the all-to-all dispatcher, ep 4 at
// etp 2 moves the same all-to-all as at etp 1 (the ep group is 4 GPUs of one node either way) and
// the same FLOPs, so each etp 2 plan's pipeline is longer than its etp 1 twin's by the pair's
// collectives. (Its iteration may still be shorter: edp = 8 / (ep x etp) falls from 2 to 1, so
// the experts' gradients are not all-reduced.)
TEST(ExpertTensorParallelTest, PlannerCandidatesPayTheEtpCollectives) {
  const Model model = test_util::MoeTwoLayers();
  PlannerOptions options;
  options.gpus = 8;
  options.global_batch = 8;
  options.schedules = {ScheduleKind::k1F1B};
  options.microbatch_sizes = {1};
  options.tensor_parallel = {1};
  options.pipeline_stages = 1;
  options.zero_levels = {1};
  options.recompute = RecomputeMode::kOff;
  options.expert_parallel = {4};
  options.expert_tensor_parallel = {1, 2};
  options.expert_dispatchers = {ExpertDispatcher::kAllToAll};
  options.top_k = 10;
  Result<PlanReport> report = RunPlanner(model, H100(), options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_TRUE(report->Feasible());
  const Candidate* one = nullptr;
  const Candidate* two = nullptr;
  for (const Candidate& c : report->ranked) {
    const int etp = c.config.layout.expert_tensor_parallel;
    if (etp == 1 && one == nullptr) one = &c;
    if (etp == 2 && two == nullptr) two = &c;
  }
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  ASSERT_TRUE(one->result.has_value() && two->result.has_value());
  // d = 8, m = 1: one forward and one backward, each layer 1 paying etp's collectives once.
  const ExpertAllToAll a = Dispatch(kMixtral, 4, 2, ExpertDispatcher::kAllToAll);
  EXPECT_EQ(two->result->ep_comm_ns - one->result->ep_comm_ns,
            2 * (a.etp_gather_ns + a.etp_scatter_ns));
  EXPECT_EQ(two->result->pipeline_ns - one->result->pipeline_ns,
            2 * (a.etp_gather_ns + a.etp_scatter_ns));
}

}  // namespace
}  // namespace pipecast
