// Data-parallel sharding in the simulator (sim/simulator.h, sim/memory.h):
// static bytes per GPU at each ZeRO level, the collectives each level runs,
// and the memory limit (capacity - reserve - margin). Hand-worked numbers.
#include <gtest/gtest.h>

#include "sim/memory.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using test_util::IdealCluster;
using test_util::UniformModel;

constexpr TimeNs kMs = 1000 * kNsPerUs;

Result<SimResult> SimulateShape(const Model& model, const Cluster& cluster, ScheduleKind kind,
                                int p, int m, const SimOptions& options) {
  PIPECAST_ASSIGN_OR_RETURN(auto schedule, MakeSchedule(kind, p, m));
  return Simulate(model, cluster, schedule, options);
}

// Megatron-LM's table (docs/source/distrib_optimizer.md) as static bytes per
// GPU: a model of 4 layers x 1,000,000 parameters at p = 1, for d = 1, 2, 8,
// each (parameter, gradient) precision, distributed optimizer off and on.
TEST(ShardingStaticBytes, MegatronsTableForAFourMillionParameterModel) {
  const Model model = UniformModel(4, kMs, 2 * kMs, 0, 0, 1'000'000);
  struct Row {
    const char* precision;
    const char* grad_dtype;
    Bytes plain;             // 20, 18, 16 bytes x 4e6
    Bytes unsharded;         // 4, 6, 8 bytes x 4e6
    Bytes sharded_before_d;  // 16, 12, 8 bytes x 4e6, divided by d
  };
  const Row rows[] = {{"fp16", "fp16", 80'000'000, 16'000'000, 64'000'000},
                      {"bf16", "fp32", 72'000'000, 24'000'000, 48'000'000},
                      {"fp32", "fp32", 64'000'000, 32'000'000, 32'000'000}};
  for (const Row& row : rows) {
    for (int d : {1, 2, 8}) {
      for (int zero : {0, 1}) {
        SimOptions o;
        o.config.memory = MemoryConfigFor(row.precision, "adam", row.grad_dtype).value();
        o.config.memory.zero = zero;
        o.config.layout.data_parallel = d;
        Result<SimResult> r = SimulateShape(model, IdealCluster(), ScheduleKind::k1F1B, 1, 1, o);
        ASSERT_TRUE(r.ok()) << r.status().message();
        const MemoryBreakdown& m = r->per_rank[0].memory;
        const Bytes want = zero == 0 ? row.plain : row.unsharded + row.sharded_before_d / d;
        EXPECT_EQ(m.weights + m.gradients + m.optimizer, want)
            << row.precision << "/" << row.grad_dtype << " d=" << d << " zero=" << zero;
      }
    }
  }
}

// A 2-layer stage of 50M parameters each (100M: 200 MB of bf16 parameters,
// 400 MB of fp32 main gradients), p = 1, d = 2 in one node at 50 GB/s, no
// latency, GPipe with 2 micro-batches: F 2 ms, B 4 ms per op.
struct World {
  Model model = UniformModel(2, kMs, 2 * kMs, 0, 0, 50'000'000);
  Cluster cluster = [] {
    Cluster c = IdealCluster();
    c.intra_node = Link{50.0, 0.0};
    return c;
  }();
  // The tail closed forms below assume one collective after the last op:
  // overlap off (the overlapped case is its own test).
  SimResult At(int zero, bool overlap = false) const {
    SimOptions o;
    o.config.layout.data_parallel = 2;
    o.config.memory.zero = zero;
    o.config.overlap.overlap_grad_reduce = overlap;
    return SimulateShape(model, cluster, ScheduleKind::kGPipe, 1, 2, o).value();
  }
};

TEST(ShardingCollectives, OverlappedLevelZeroRunsTwoBucketsBesideTheLastBackward) {
  // Megatron's default bucket is max(40M, 1M x 2) = 40M parameters: each
  // 50M layer is a bucket of 200 MB of fp32 gradients, all-reduced in 2 x
  // 1/2 x 200 MB / 50 GB/s = 4 ms. The last B (8-12 ms) runs layer 1's
  // backward first (2 ms of its 4): bucket 1 is ready at 10 ms and runs 10-14;
  // bucket 0 is ready at 12 ms, waits for the link, runs 14-18. The rank's
  // last op ends at 12: 6 ms exposed, 2 of the 8 hidden.
  const SimResult r = World().At(0, true);
  EXPECT_EQ(r.per_rank[0].grad_buckets, 2);
  EXPECT_EQ(r.allreduce_ns, 6 * kMs);
  EXPECT_EQ(r.allreduce_hidden_ns, 2 * kMs);
  EXPECT_EQ(r.iteration_ns, 18 * kMs);
  EXPECT_TRUE(r.overlap_grad_reduce);
}

TEST(ShardingCollectives, OverlappedLevelOneReduceScattersInBuckets) {
  // Reduce-scatter per bucket: 1/2 x 200 MB / 50 GB/s = 2 ms. Bucket 1 at
  // 10-12, bucket 0 at 12-14: 2 ms exposed, 2 hidden; then the 2 ms
  // parameter all-gather.
  const SimResult r = World().At(1, true);
  EXPECT_EQ(r.allreduce_ns, 2 * kMs);
  EXPECT_EQ(r.allreduce_hidden_ns, 2 * kMs);
  EXPECT_EQ(r.iteration_ns, 12 * kMs + 2 * kMs + 2 * kMs);
}

TEST(ShardingCollectives, OneBucketPerStageWhenTheBucketHoldsEverything) {
  // A 100M-parameter bucket takes both layers: ready when the last B ends,
  // the whole 8 ms all-reduce exposed, as with overlap off.
  SimOptions o;
  o.config.layout.data_parallel = 2;
  o.config.overlap.grad_bucket_params = 100'000'000;
  const World w;
  const SimResult r = SimulateShape(w.model, w.cluster, ScheduleKind::kGPipe, 1, 2, o).value();
  EXPECT_EQ(r.per_rank[0].grad_buckets, 1);
  EXPECT_EQ(r.allreduce_ns, 8 * kMs);
  EXPECT_EQ(r.allreduce_hidden_ns, 0);
}

TEST(ShardingCollectives, LevelZeroAllReducesTheFp32Gradients) {
  // Ring all-reduce: 2 (d-1)/d x 400 MB / 50 GB/s = 8 ms after F F B B (12 ms).
  const SimResult r = World().At(0);
  EXPECT_EQ(r.allreduce_ns, 8 * kMs);
  EXPECT_EQ(r.allgather_ns, 0);
  EXPECT_EQ(r.iteration_ns, 20 * kMs);
}

TEST(ShardingCollectives, LevelOneReduceScattersThenGathersTheParameters) {
  // Reduce-scatter 1/2 x 400 MB / 50 GB/s = 4 ms; after the optimizer step
  // the all-gather of 1/2 x 200 MB = 2 ms. Optimizer state: 12 B x 100M / 2.
  const SimResult r = World().At(1);
  EXPECT_EQ(r.allreduce_ns, 4 * kMs);
  EXPECT_EQ(r.allgather_ns, 2 * kMs);
  EXPECT_EQ(r.iteration_ns, 12 * kMs + 4 * kMs + 2 * kMs);
  EXPECT_EQ(r.per_rank[0].memory.optimizer, 600'000'000);
  EXPECT_EQ(r.per_rank[0].memory.gradients, 400'000'000);
}

TEST(ShardingCollectives, LevelTwoReduceScattersBesideEachBackward) {
  // Per B: reduce-scatter 4 ms beside a 4 ms backward: hidden. Tail: the
  // 2 ms parameter all-gather only. Gradients: 400 MB / 2.
  const SimResult r = World().At(2);
  EXPECT_EQ(r.sharding_exposed_ns, 0);
  EXPECT_EQ(r.allreduce_ns, 0);
  EXPECT_EQ(r.allgather_ns, 2 * kMs);
  EXPECT_EQ(r.iteration_ns, 14 * kMs);
  EXPECT_EQ(r.per_rank[0].memory.gradients, 200'000'000);
  EXPECT_EQ(r.per_rank[0].memory.weights, 200'000'000);
}

TEST(ShardingCollectives, LevelThreeGathersBeforeEachOpAndExposesWhatComputeCannotHide) {
  // F: all-gather 1/2 x 200 MB / 50 GB/s = 2 ms beside 2 ms of compute:
  // hidden. B (no W split): gather 2 ms + reduce-scatter 4 ms = 6 ms > 4 ms:
  // 2 ms exposed per backward, 4 ms over the two. No tail collectives.
  const SimResult r = World().At(3);
  EXPECT_EQ(r.per_rank[0].sharding_exposed_ns, 4 * kMs);
  EXPECT_EQ(r.pipeline_ns, 2 * kMs + 2 * kMs + 6 * kMs + 6 * kMs);
  EXPECT_EQ(r.allreduce_ns, 0);
  EXPECT_EQ(r.allgather_ns, 0);
  EXPECT_EQ(r.iteration_ns, 16 * kMs);
  // Static: (2 + 4 + 12) B x 100M / 2 = 900 MB, plus two gathered layers of
  // 50M x 2 B = 200 MB.
  const MemoryBreakdown& m = r.per_rank[0].memory;
  EXPECT_EQ(m.weights, 100'000'000);
  EXPECT_EQ(m.gradients, 200'000'000);
  EXPECT_EQ(m.optimizer, 600'000'000);
  EXPECT_EQ(m.gathered_weights, 200'000'000);
  EXPECT_EQ(r.per_rank[0].peak_memory_bytes, 1'100'000'000 + m.workspace_peak);
}

TEST(ShardingCollectives, LevelThreeWithASplitBackwardWaitsInIForTheGatherAndInWForTheScatter) {
  // Given the same stage with W = 1 ms of each layer's 2 ms backward (stage:
  // I 2 ms, W 2 ms) and one rank running F0 I0 W0 F1 I1 W1:
  World w;
  for (Layer& l : w.model.layers) l.profiles[0].backward_weight_ns = kMs;
  Schedule s = test_util::CustomSchedule(
      2, {{test_util::F(0, 0), Action{0, OpKind::kBackwardInput, 0},
           Action{0, OpKind::kBackwardWeight, 0}, test_util::F(0, 1),
           Action{0, OpKind::kBackwardInput, 1}, Action{0, OpKind::kBackwardWeight, 1}}});
  SimOptions o;
  o.config.layout.data_parallel = 2;
  o.config.memory.zero = 3;
  const SimResult r = Simulate(w.model, w.cluster, s, o).value();
  // then I waits for nothing beyond its 2 ms (the 2 ms gather fits), W takes
  // the 4 ms reduce-scatter instead of 2: 2 ms exposed per W.
  EXPECT_EQ(r.per_rank[0].sharding_exposed_ns, 4 * kMs);
  EXPECT_EQ(r.pipeline_ns, 2 * (2 * kMs + 2 * kMs + 4 * kMs));
}

// Sharded data parallelism as frameworks run it (ShardingConfig), on the
// World above at level 3: F 2 ms beside a 2 ms gather, B 4 ms beside a 2 ms
// gather and a 4 ms reduce-scatter.
SimResult AtLevelThree(const ShardingConfig& sharding, int d = 2, const Cluster* cluster = nullptr,
                       const Model* model = nullptr) {
  const World w;
  SimOptions o;
  o.config.layout.data_parallel = d;
  o.config.memory.zero = 3;
  o.config.memory.sharding = sharding;
  o.config.overlap.overlap_grad_reduce = false;
  return SimulateShape(model ? *model : w.model, cluster ? *cluster : w.cluster,
                       ScheduleKind::kGPipe, 1, 2, o)
      .value();
}

TEST(ShardingAsFrameworksRunIt, WithoutReshardingTheBackwardGathersNothingAndHoldsTheStage) {
  // FSDP SHARD_GRAD_OP: B = max(4, 4 ms scatter) = 4 ms, nothing exposed;
  // the stage's 200 MB of bf16 parameters stay gathered from F to B.
  // Four layers of 25M (the same 100M, F 2 ms, B 4 ms): resharding holds two
  // gathered layers (100 MB), not resharding the whole stage (200 MB).
  const Model four = UniformModel(4, kMs / 2, kMs, 0, 0, 25'000'000);
  const SimResult r = AtLevelThree({.reshard_after_forward = false}, 2, nullptr, &four);
  EXPECT_EQ(r.per_rank[0].sharding_exposed_ns, 0);
  EXPECT_EQ(r.pipeline_ns, 2 * (2 * kMs) + 2 * (4 * kMs));
  EXPECT_EQ(r.per_rank[0].memory.gathered_weights, 200'000'000);
  EXPECT_EQ(AtLevelThree({}, 2, nullptr, &four).per_rank[0].memory.gathered_weights, 100'000'000);
}

TEST(ShardingAsFrameworksRunIt, Fp8GathersKeepTheEmbeddingAndTheHeadInBf16) {
  // An embedding and a head of 40M parameters around a 50M block, ZeRO 3
  // over d = 2 with FP8 gathers (torchao's FSDP float8 all-gather): the
  // block gathers 1 B per parameter (50 MB), the embedding and the head stay
  // bf16 (torchao swaps only nn.Linear; torchtitan filters the output out):
  // 80 MB each. Two gathered layers: 2 x 80 MB (not 2 x 50 MB); the stage
  // held whole without resharding: 80 + 50 + 80 = 210 MB.
  Model model = UniformModel(3, kMs, 2 * kMs, 0, 0, 40'000'000);
  model.layers[0].name = "embedding";
  model.layers[1].name = "block.0";
  model.layers[1].parameters = 50'000'000;
  model.layers[2].name = "lm_head";
  const World w;
  for (bool reshard : {true, false}) {
    SimOptions o;
    o.config.layout.data_parallel = 2;
    o.config.memory = MemoryConfigFor("fp8", "adam", "fp32", "current", true).value();
    o.config.memory.zero = 3;
    o.config.memory.sharding.reshard_after_forward = reshard;
    const SimResult r = SimulateShape(model, w.cluster, ScheduleKind::kGPipe, 1, 2, o).value();
    EXPECT_EQ(r.per_rank[0].memory.gathered_weights, reshard ? 160'000'000 : 210'000'000);
  }
}

TEST(ShardingAsFrameworksRunIt, WithoutPrefetchEachLayerWaitsForItsCollectives) {
  // F 2 + 2, B 4 + 2 + 4: 2 ms exposed per F, 6 per B, 16 over the four ops.
  const SimResult r = AtLevelThree({.prefetch = false});
  EXPECT_EQ(r.per_rank[0].sharding_exposed_ns, 16 * kMs);
  EXPECT_EQ(r.pipeline_ns, 2 * (4 * kMs) + 2 * (10 * kMs));
}

TEST(ShardingAsFrameworksRunIt, NoSyncReduceScattersOnceAndKeepsWholeGradients) {
  // FSDP no_sync: B = max(4, 2 ms gather) = 4; one 4 ms reduce-scatter of the
  // 400 MB of gradients after the last B; gradients kept whole (400 MB).
  const SimResult r = AtLevelThree({.reduce_every_microbatch = false});
  EXPECT_EQ(r.per_rank[0].sharding_exposed_ns, 0);
  EXPECT_EQ(r.pipeline_ns, 12 * kMs);
  EXPECT_EQ(r.allreduce_ns, 4 * kMs);
  EXPECT_EQ(r.iteration_ns, 16 * kMs);
  EXPECT_EQ(r.per_rank[0].memory.gradients, 400'000'000);
}

TEST(ShardingAsFrameworksRunIt, HybridShardingGathersInTheGroupAndAllReducesItsShardAcross) {
  // d = 4 on nodes of 2 GPUs with one 10 GB/s NIC each, shard group 2 (one
  // node): gathers over NVLink (2 ms), then each reduce-scatter (4 ms) is
  // followed by the all-reduce of the 200 MB shard across the 2 groups over
  // the NIC: 2 x 1/2 x 200 MB / 10 GB/s = 20 ms. Memory: / 2, not / 4.
  Cluster c = World().cluster;
  c.gpus_per_node = 2;
  c.inter_node = Link{10.0, 0.0};
  const SimResult r = AtLevelThree({.shard_group = 2}, 4, &c);
  EXPECT_EQ(r.pipeline_ns, 2 * (2 * kMs) + 2 * (2 * kMs + 4 * kMs + 20 * kMs));
  EXPECT_EQ(r.per_rank[0].memory.weights, 100'000'000);
  EXPECT_EQ(r.per_rank[0].memory.optimizer, 600'000'000);
  SimOptions bad;
  bad.config.layout.data_parallel = 4;
  bad.config.memory.zero = 3;
  bad.config.memory.sharding.shard_group = 3;
  EXPECT_FALSE(bad.Validate().ok());
  bad.config.memory.sharding.shard_group = 2;
  bad.config.memory.zero = 1;  // hybrid sharding is for levels 2 and 3
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(MemoryLimit, ReserveAndMarginComeOffTheCapacity) {
  // Given a 10 GiB GPU with a 1 GiB reserve and a 10% margin: limit 8 GiB.
  Cluster c = IdealCluster();
  c.gpu.memory_bytes = 10 * kGiB;
  c.gpu.memory_reserve_bytes = kGiB;
  c.gpu.memory_headroom = 0.1;
  // A stage of 480M parameters: 18 B each = 8.64e9 B, 8.05 GiB: over.
  Model model = UniformModel(1, kMs, 2 * kMs, 0, 0, 480'000'000);
  SimOptions o;
  SimResult r = SimulateShape(model, c, ScheduleKind::k1F1B, 1, 1, o).value();
  EXPECT_EQ(r.memory_capacity_bytes, 10 * kGiB);
  EXPECT_EQ(r.memory_reserve_bytes, kGiB);
  EXPECT_EQ(r.memory_headroom_bytes, kGiB);
  EXPECT_EQ(r.memory_limit_bytes, 8 * kGiB);
  EXPECT_FALSE(r.per_rank[0].fits_memory);
  EXPECT_FALSE(r.FitsMemory());  // the whole configuration, as --json's top-level fits_memory
  // 440M parameters: 7.92e9 B, 7.38 GiB: fits.
  model = UniformModel(1, kMs, 2 * kMs, 0, 0, 440'000'000);
  EXPECT_TRUE(SimulateShape(model, c, ScheduleKind::k1F1B, 1, 1, o)->per_rank[0].fits_memory);
  EXPECT_TRUE(SimulateShape(model, c, ScheduleKind::k1F1B, 1, 1, o)->FitsMemory());
  // Without a limit every rank fits.
  EXPECT_TRUE(
      SimulateShape(model, IdealCluster(), ScheduleKind::k1F1B, 1, 1, o)->per_rank[0].fits_memory);
}

}  // namespace
}  // namespace pipecast

namespace pipecast {
namespace {

TEST(OptimizerStepEstimate, BytesAdamTouchesOverHbmBandwidth) {
  // 4 layers x 25M = 100M parameters on one rank of a GPU with 1000 GB/s:
  // (4 fp32 gradient + 2 x 12 main parameters and moments + 2 bf16
  // parameters) = 30 B x 100M = 3 GB over 0.8 x 1000 GB/s = 3.75 ms.
  Cluster c = test_util::IdealCluster();
  c.gpu.memory_bandwidth_gbps = 1000;
  const Model model =
      test_util::UniformModel(4, 1000 * kNsPerUs, 2000 * kNsPerUs, 0, 0, 25'000'000);
  auto schedule = MakeSchedule(ScheduleKind::k1F1B, 1, 1);
  SimOptions o;
  SimResult r = Simulate(model, c, *schedule, o).value();
  EXPECT_EQ(r.optimizer_ns, 3'750'000);
  EXPECT_TRUE(r.optimizer_estimated);
  EXPECT_EQ(r.iteration_ns, 3 * 1000 * kNsPerUs * 4 + 3'750'000);
  bool noted = false;
  for (const std::string& n : r.notes) noted = noted || n.find("optimizer step estimated") == 0;
  EXPECT_TRUE(noted);
  // ZeRO 1 over d = 2: half the parameters each.
  o.config.memory.zero = 1;
  o.config.layout.data_parallel = 2;
  EXPECT_EQ(Simulate(model, c, *schedule, o)->optimizer_ns, 1'875'000);
  // A given time wins; the estimate can be turned off.
  o = SimOptions{};
  o.config.optimizer_step.time_ns = 1'000;
  r = Simulate(model, c, *schedule, o).value();
  EXPECT_EQ(r.optimizer_ns, 1'000);
  EXPECT_FALSE(r.optimizer_estimated);
  o = SimOptions{};
  o.config.optimizer_step.estimate = false;
  EXPECT_EQ(Simulate(model, c, *schedule, o)->optimizer_ns, 0);
}

}  // namespace
}  // namespace pipecast
