// ZeRO-3 (FSDP) with expert parallelism (sim/gathered_bytes.h, StageGatheredOf;
// sim/internal/data_parallel.cc, ApplyPerOpCollectives): a GPU gathers and
// reduce-scatters only its local routed experts, over the edp GPUs holding
// the same experts, and nothing of them at edp = 1; the rest of the layer
// over the shard group as a dense layer. Hand-worked numbers.
#include <gtest/gtest.h>

#include "sim/gathered_bytes.h"
#include "sim/internal/data_parallel.h"
#include "sim/memory.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

constexpr TimeNs kMs = 1000 * kNsPerUs;

// Two MoE layers of 50M parameters each, 40M of them 8 routed experts of 5M
// (top 2), F 2 ms, B 4 ms; one stage (p = 1), d = 4 in one node of 8 at
// 50 GB/s, no latency; GPipe over 2 micro-batches (F F B B); ZeRO 3 with bf16
// weights (2 B), fp32 gradients (4 B) and Adam (12 B), reduce-scatter every
// micro-batch, prefetch off (each op waits for its collectives: the exposed
// time is their sum, whatever the all-to-alls add to the compute).
struct MoeWorld {
  Model model = [] {
    Model m = test_util::UniformModel(2, kMs, 2 * kMs, 0, 0, 50'000'000);
    m.sequence_length = 1024;  // the tokens each GPU dispatches
    for (Layer& l : m.layers) {
      l.moe = MoeRouting{.experts = 8, .top_k = 2, .hidden = 1024, .expert_parameters = 40'000'000};
    }
    return m;
  }();
  Cluster cluster = [] {
    Cluster c = test_util::IdealCluster();
    c.intra_node = Link{50.0, 0.0};
    return c;
  }();
  SimResult At(int ep, bool reshard = true) const {
    SimOptions o;
    o.config.layout.data_parallel = 4;
    o.config.layout.expert_parallel = ep;
    o.config.memory.zero = 3;
    o.config.memory.sharding.prefetch = false;
    o.config.memory.sharding.reshard_after_forward = reshard;
    o.config.overlap.overlap_grad_reduce = false;
    Result<Schedule> s = MakeSchedule(ScheduleKind::kGPipe, 1, 2);
    EXPECT_TRUE(s.ok());
    Result<SimResult> r = Simulate(model, cluster, *s, o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : SimResult{};
  }
};

// ep 2 at d 4: edp = 4 / 2 = 2, each GPU holds 4 of the 8 experts (20M
// parameters a layer) and shares them with one other GPU.
// - gathered: 2 layers x (10M dense + 20M local experts) x 2 B = 120 MB,
//   where every expert gathered made it 2 x 100 MB = 200 MB;
// - all-gather per F (the stage's two layers): the dense 20M x 2 B = 40 MB
//   over the 4 GPUs, 40 x 3/4 / 50 GB/s = 0.6 ms, and the local experts'
//   40M x 2 B = 80 MB over the 2 edp GPUs, 80 x 1/2 / 50 = 0.8 ms: 1.4 ms;
// - reduce-scatter per B: dense 20M x 4 B = 80 MB, 80 x 3/4 / 50 = 1.2 ms;
//   experts 40M x 4 B = 160 MB, 160 x 1/2 / 50 = 1.6 ms: 2.8 ms;
// - exposed: 2 F x 1.4 + 2 B x (1.4 + 2.8) = 11.2 ms (every expert over
//   the 4 GPUs made it 2 x 3 + 2 x (3 + 6) = 24 ms);
// - static: 100M parameters' 18 B over the 4 GPUs (the local 40M experts
//   sharded over edp 2 is the same 20M a GPU): weights 50 MB, gradients
//   100 MB, optimizer 300 MB.
TEST(ExpertSharding, ZeroThreeAtEpTwoGathersTheLocalExpertsOverEdp) {
  const SimResult r = MoeWorld().At(2);
  const StageResult& k = r.per_rank[0];
  EXPECT_EQ(k.sharding_exposed_ns, 11'200 * kNsPerUs);
  EXPECT_EQ(k.memory.gathered_weights, 120'000'000);
  EXPECT_EQ(k.memory.weights, 50'000'000);
  EXPECT_EQ(k.memory.gradients, 100'000'000);
  EXPECT_EQ(k.memory.optimizer, 300'000'000);
  EXPECT_EQ(k.peak_memory_bytes, 50'000'000 + 100'000'000 + 300'000'000 + 120'000'000 +
                                     k.memory.activations_peak + k.memory.workspace_peak);
}

// ep 4 at d 4: edp = 1, each GPU holds 2 experts (10M a layer) whole, so
// nothing of them is gathered or reduced (FSDP leaves them out):
// - gathered: 2 x 10M x 2 B = 40 MB;
// - all-gather per F 0.6 ms and reduce-scatter per B 1.2 ms, the dense part
//   alone: exposed 2 x 0.6 + 2 x (0.6 + 1.2) = 4.8 ms;
// - static: the same 450 MB (the 20M local experts whole: 40 MB of bf16).
TEST(ExpertSharding, ZeroThreeAtEdpOneGathersNoExpert) {
  const SimResult r = MoeWorld().At(4);
  const StageResult& k = r.per_rank[0];
  EXPECT_EQ(k.sharding_exposed_ns, 4'800 * kNsPerUs);
  EXPECT_EQ(k.memory.gathered_weights, 40'000'000);
  EXPECT_EQ(k.memory.weights + k.memory.gradients + k.memory.optimizer, 450'000'000);
  EXPECT_EQ(k.peak_memory_bytes,
            450'000'000 + 40'000'000 + k.memory.activations_peak + k.memory.workspace_peak);
}

// Without resharding after the forward (FSDP SHARD_GRAD_OP) the stage stays
// gathered: 2 x (10M + 20M) x 2 B = 120 MB at ep 2, 2 x 10M x 2 B = 40 MB at
// ep 4; the backward gathers nothing: exposed 2 x 1.4 + 2 x 2.8 = 8.4 ms and
// 2 x 0.6 + 2 x 1.2 = 3.6 ms.
TEST(ExpertSharding, WithoutReshardingTheStageHoldsItsLocalExpertsOnly) {
  const MoeWorld w;
  const SimResult two = w.At(2, /*reshard=*/false);
  EXPECT_EQ(two.per_rank[0].memory.gathered_weights, 120'000'000);
  EXPECT_EQ(two.per_rank[0].sharding_exposed_ns, 8'400 * kNsPerUs);
  const SimResult four = w.At(4, /*reshard=*/false);
  EXPECT_EQ(four.per_rank[0].memory.gathered_weights, 40'000'000);
  EXPECT_EQ(four.per_rank[0].sharding_exposed_ns, 3'600 * kNsPerUs);
}

// Without expert parallelism (ep 1, t 1) the experts are the layer's dense
// parameters: the whole 100M gathered over the 4 GPUs, 200 MB x 3/4 / 50 =
// 3 ms per F, 400 MB x 3/4 / 50 = 6 ms per B: 2 x 3 + 2 x 9 = 24 ms, two
// whole layers (200 MB) gathered.
TEST(ExpertSharding, WithoutExpertParallelismTheExpertsAreDense) {
  const SimResult r = MoeWorld().At(1);
  EXPECT_EQ(r.per_rank[0].sharding_exposed_ns, 24 * kMs);
  EXPECT_EQ(r.per_rank[0].memory.gathered_weights, 200'000'000);
}

// StageGatheredOf's closed form on the same layers: t / (ep x etp) of the
// experts at edp > 1, none at edp = 1.
TEST(ExpertSharding, StageGatheredCountsTheLocalExperts) {
  const MoeWorld w;
  MemoryConfig memory;  // bf16 weights: 2 B gathered per parameter
  StageCost stage;
  stage.parameters = 100'000'000;
  stage.expert_parameters = 80'000'000;
  const StageLayers both{0, 1};
  ParallelLayout l;
  l.data_parallel = 4;
  l.expert_parallel = 2;
  EXPECT_DOUBLE_EQ(ExpertReductionScale(l), 0.5);
  StageGathered g = StageGatheredOf(w.model, both, stage, memory, ExpertReductionScale(l));
  EXPECT_EQ(g.whole, 120'000'000);
  EXPECT_EQ(g.experts, 80'000'000);
  EXPECT_EQ(g.largest_layer, 60'000'000);
  l.expert_parallel = 4;
  g = StageGatheredOf(w.model, both, stage, memory, ExpertReductionScale(l));
  EXPECT_EQ(g.whole, 40'000'000);
  EXPECT_EQ(g.experts, 0);
  EXPECT_EQ(g.largest_layer, 20'000'000);
  // t 2, ep 2, etp 1 at d 4: edp = 2 x 4 / 2 = 4; a GPU's 4 experts are t / ep = 1 x the
  // t-share of all of them: 20M + 80M per-GPU parameters (the dense 20M at t's share).
  l.tensor_parallel = 2;
  l.expert_parallel = 2;
  EXPECT_DOUBLE_EQ(ExpertReductionScale(l), 1.0);
}

// The edp group on the folded cluster: ep 2 at d 4 (t 1), GPUs 0 and 2 of a
// node; t 2 with ep 4: every (4 / 2)-th replica, d / 2 of them; ep 1 with
// t 2: both GPUs of each replica, 2 x d.
TEST(ExpertSharding, ExpertDataParallelGroupIsEveryEpTimesEtpThGpu) {
  Cluster c = test_util::IdealCluster();  // 8 GPUs a node
  ParallelLayout l;
  l.data_parallel = 4;
  l.expert_parallel = 2;
  CollectiveGroup g = internal::ExpertDataParallelGroup(c, 1, 0, l);
  EXPECT_EQ(g.ranks, 2);
  EXPECT_EQ(g.nodes, 1);
  l.data_parallel = 16;
  l.expert_parallel = 4;
  l.tensor_parallel = 2;  // folded: 4 simulated GPUs a node
  c.gpus_per_node = 4;
  g = internal::ExpertDataParallelGroup(c, 1, 0, l);
  EXPECT_EQ(g.ranks, 8);  // replicas 0, 2, ..., 14: two a node over 4 nodes
  EXPECT_EQ(g.nodes, 4);
  EXPECT_EQ(g.per_node, 2);
  l.expert_parallel = 1;
  g = internal::ExpertDataParallelGroup(c, 1, 0, l);
  EXPECT_EQ(g.ranks, 32);
}

}  // namespace
}  // namespace pipecast
