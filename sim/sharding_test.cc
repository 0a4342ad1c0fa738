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
  auto schedule = MakeSchedule(kind, p, m);
  if (!schedule.ok()) return schedule.status();
  return Simulate(model, cluster, *schedule, options);
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
        o.memory = MemoryConfigFor(row.precision, "adam", row.grad_dtype).value();
        o.memory.zero = zero;
        o.data_parallel = d;
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
  SimResult At(int zero) const {
    SimOptions o;
    o.data_parallel = 2;
    o.memory.zero = zero;
    return SimulateShape(model, cluster, ScheduleKind::kGPipe, 1, 2, o).value();
  }
};

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
  o.data_parallel = 2;
  o.memory.zero = 3;
  const SimResult r = Simulate(w.model, w.cluster, s, o).value();
  // then I waits for nothing beyond its 2 ms (the 2 ms gather fits), W takes
  // the 4 ms reduce-scatter instead of 2: 2 ms exposed per W.
  EXPECT_EQ(r.per_rank[0].sharding_exposed_ns, 4 * kMs);
  EXPECT_EQ(r.pipeline_ns, 2 * (2 * kMs + 2 * kMs + 4 * kMs));
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
