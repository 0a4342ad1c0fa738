// Expert tensor parallelism's kept rows (sim/collectives.h, ExpertAllToAll::etp_kept_bytes;
// docs/simulator.md "Expert tensor parallelism"): at etp > 1 each GPU's experts run etp x the
// token copies at F/etp, so fc1's input rows (and, for the weight gradient, fc2's output
// gradient rows) are etp x etp = 1's. Worked by hand; the validator's CPU workload keeps the
// same (profiler/cpu/moe_block_test.cc, AnEtpTwoEpTwoGroupEqualsTheWholeBlock).
#include <gtest/gtest.h>

#include "sim/cluster.h"
#include "sim/collectives.h"
#include "sim/model.h"
#include "sim/stage_costs.h"
#include "sim/training_config.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

Cluster H100() { return test_util::PresetCluster("h100-sxm"); }

ExpertAllToAll Dispatch(const MoeRouting& m, int ep, int etp, ExpertDispatcher dispatcher,
                        double rows_per_route = 1) {
  const Cluster c = H100();
  return ExpertAllToAllOf(c.intra_node, c.inter_node, c.NetworkGbpsPerGpu(),
                          ExpertGroupOf(ep, etp, c.gpus_per_node), m.experts, m.top_k,
                          m.expert_groups, m.topk_groups, m.hidden, m.bytes_per_element, 4096,
                          dispatcher, rows_per_route);
}

TEST(ExpertTensorParallelMemoryTest, EachGpuKeepsEtpTimesTheExpertRowsByHand) {
  const MoeRouting mixtral{.experts = 8, .top_k = 2, .hidden = 4096};
  // Mixtral at ep 4 etp 2, 4096 tokens a GPU: its experts get 2 x 2 x 4096 rows instead of
  // 2 x 4096, each of 4096 x 2 B: (2 - 1) x 2 x 4096 x 8,192 = 67,108,864 B more kept,
  // whatever the dispatcher (the all-gather dispatcher's and DeepEP's etp x ep group hand each
  // GPU the same rows).
  for (ExpertDispatcher d :
       {ExpertDispatcher::kAllToAll, ExpertDispatcher::kDeepEp, ExpertDispatcher::kAllGather}) {
    EXPECT_EQ(Dispatch(mixtral, 4, 2, d).etp_kept_bytes, 67'108'864) << ExpertDispatcherName(d);
    EXPECT_EQ(Dispatch(mixtral, 8, 1, d).etp_kept_bytes, 0);
  }
  // etp 4 at ep 2: 3 x that; padded to capacity 1.25 the all-to-all dispatcher's rows x 1.25.
  EXPECT_EQ(Dispatch(mixtral, 2, 4, ExpertDispatcher::kAllToAll).etp_kept_bytes, 201'326'592);
  EXPECT_EQ(Dispatch(mixtral, 4, 2, ExpertDispatcher::kAllToAll, 1.25).etp_kept_bytes, 83'886'080);
  // DeepSeek-V3 (top-8, h 7168) at ep 8 etp 2: 8 x 4096 x 14,336 = 469,762,048 B.
  const MoeRouting v3{.experts = 256, .top_k = 8, .hidden = 7168};
  EXPECT_EQ(Dispatch(v3, 8, 2, ExpertDispatcher::kAllToAll).etp_kept_bytes, 469'762'048);
}

// In a stage: MoeTwoLayers' MoE layer (4096 tokens a GPU) keeps the rows beyond its profile's
// activations, and its weight-gradient phase twice them (fc1's input and fc2's output
// gradient); the dense layer is untouched.
TEST(ExpertTensorParallelMemoryTest, TheMoeLayerKeepsThemInAStage) {
  Model model = test_util::MoeTwoLayers();
  model.layers[1].profiles[0].weight_grad_bytes = 500;
  TrainingConfig config;
  config.layout.data_parallel = 8;
  config.layout.expert_parallel = 4;
  config.layout.expert_dispatcher = ExpertDispatcher::kAllToAll;
  config.layout.expert_tensor_parallel = 1;
  const StageCostTable etp1(model, StageCostOptionsFor(config, H100()));
  config.layout.expert_tensor_parallel = 2;
  const StageCostTable etp2(model, StageCostOptionsFor(config, H100()));
  EXPECT_EQ(etp1.Layer(1).activation_bytes, 1000);
  EXPECT_EQ(etp2.Layer(1).activation_bytes, 1000 + 67'108'864);
  EXPECT_EQ(*etp2.Layer(1).weight_grad_bytes, 500 + 2 * 67'108'864);
  EXPECT_EQ(etp2.Layer(0).activation_bytes, 1000);
}

}  // namespace
}  // namespace pipecast
