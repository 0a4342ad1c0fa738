// Tensor parallelism in the simulation core: per-layer collective times
// worked by hand on the h100-sxm preset's NVLink (450 GB/s each way, 2 us
// per step), per-GPU weights and activations against Korthikanti et al.
// 2022's formulas, the placement of t-way groups in nodes, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using test_util::B;
using test_util::CustomSchedule;
using test_util::F;

// A GPT-style block at s = 2048, h = 8192, a = 64, b = 1, 16-bit: sbh =
// 2^24 elements; tp_comm_bytes = 2sbh bytes; eager-attention activations
// sbh(34 + 5as/h) = sbh(34 + 80) bytes (Korthikanti et al. 2022, eq. 1).
constexpr Bytes kSbh = Bytes{2048} * 8192;
constexpr Bytes kTpCommBytes = 2 * kSbh;         // 33,554,432
constexpr Bytes kBlockActivations = 114 * kSbh;  // 1,912,602,624
constexpr int64_t kBlockParameters = 805306368;  // 12 h^2

// h100-sxm's links as a cluster file without the collective fields gives
// them (docs/formats.md): the plain ring these tests work by hand, 450 GB/s
// and 2 us per step inside a node, 50 GB/s and 5 us between nodes.
Cluster H100() {
  Cluster c = *ClusterPreset("h100-sxm");
  c.intra_node = Link{450.0, 2.0};
  c.inter_node = Link{50.0, 5.0};
  c.nics_per_node = 0;
  return c;
}

Layer Block(TimeNs forward_ns, TimeNs backward_ns, Bytes output_bytes = kTpCommBytes) {
  Layer l;
  l.name = "block";
  l.parameters = kBlockParameters;
  LayerProfile p;
  p.microbatch_size = 1;
  p.forward_ns = forward_ns;
  p.backward_ns = backward_ns;
  p.activation_bytes = kBlockActivations;
  p.output_bytes = output_bytes;
  p.tp_comm_bytes = kTpCommBytes;
  p.tp_forward_collectives = 2;
  p.tp_backward_collectives = 2;
  l.profiles.push_back(p);
  return l;
}

Model Blocks(int n, TimeNs forward_ns = 1'000'000, TimeNs backward_ns = 2'000'000) {
  Model m;
  m.name = "blocks";
  for (int i = 0; i < n; ++i) m.layers.push_back(Block(forward_ns, backward_ns));
  return m;
}

StageCostOptions AtT(int t, bool sp) {
  StageCostOptions o;
  o.tensor_parallel = t;
  o.sequence_parallel = sp;
  o.tp_link = H100().intra_node;
  return o;
}

// Ring all-reduce of 33,554,432 bytes on 450 GB/s with 2 us per step:
//   t=2: 2(t-1) = 2 steps, 4,000 ns; 2(t-1)/t x B = 33,554,432 B / 450 = 74,565.4 -> 74,566 ns
//        => 78,566 ns; two per forward: 157,132 ns
//   t=4: 6 steps, 12,000 ns; 1.5 B = 50,331,648 B / 450 = 111,848.1 -> 111,849 ns
//        => 123,849 ns; two: 247,698 ns
//   t=8: 14 steps, 28,000 ns; 1.75 B = 58,720,256 B / 450 = 130,489.5 -> 130,490 ns
//        => 158,490 ns; two: 316,980 ns
TEST(TensorParallelTest, CollectiveTimesWorkedByHandOnH100NvLink) {
  const Link nvlink = H100().intra_node;
  EXPECT_EQ(TpCollectiveNs(kTpCommBytes, 1, false, nvlink), 0);
  EXPECT_EQ(TpCollectiveNs(kTpCommBytes, 2, false, nvlink), 78'566);
  EXPECT_EQ(TpCollectiveNs(kTpCommBytes, 4, false, nvlink), 123'849);
  EXPECT_EQ(TpCollectiveNs(kTpCommBytes, 8, false, nvlink), 158'490);
  // Sequence parallelism: an all-gather plus a reduce-scatter, each (t-1)
  // steps and (t-1)/t x B: t=8: 7 x 2,000 + 29,360,128 / 450 = 65,244.7 ->
  // 65,245 => 79,245 each, 158,490 both: the all-reduce's time (the same volume).
  EXPECT_EQ(TpCollectiveNs(kTpCommBytes, 8, true, nvlink), 158'490);
  // t=2: 2 x (2,000 + 16,777,216 / 450 = 37,282.7 -> 37,283) = 78,566.
  EXPECT_EQ(TpCollectiveNs(kTpCommBytes, 2, true, nvlink), 78'566);
}

TEST(TensorParallelTest, LayerCostsCarryTheirCollectives) {
  const Model m = Blocks(1);
  struct Row {
    int t;
    TimeNs per_direction;  // two collectives, from the test above
  };
  for (Row row : {Row{2, 157'132}, Row{4, 247'698}, Row{8, 316'980}}) {
    const StageCostTable table(m, AtT(row.t, false));
    const StageCost c = table.Stage(StageLayers{0, 0});
    EXPECT_EQ(c.tp_forward_ns, row.per_direction) << "t=" << row.t;
    EXPECT_EQ(c.tp_backward_ns, row.per_direction) << "t=" << row.t;
    // Scaled from t = 1: 1 ms / t and 2 ms / t of compute, plus the collectives.
    EXPECT_EQ(c.forward_ns, 1'000'000 / row.t + row.per_direction);
    EXPECT_EQ(c.backward_ns, 2'000'000 / row.t + row.per_direction);
    EXPECT_EQ(c.TpCommNs(OpKind::kBackwardWeight), 0);
    EXPECT_FALSE(table.CostsMeasured());  // scaled from t = 1
  }
}

TEST(TensorParallelTest, ActivationsFollowKorthikanti) {
  const Model m = Blocks(1);
  for (int t : {2, 4, 8}) {
    // Without sequence parallelism: sbh(10 + 24/t + 5as/(ht)) = sbh(10 + (24 + 80)/t).
    const StageCost no_sp = StageCostTable(m, AtT(t, false)).Stage(StageLayers{0, 0});
    EXPECT_EQ(no_sp.activation_bytes, 10 * kSbh + 104 * kSbh / t) << "t=" << t;
    // With it: sbh(34/t + 5as/(ht)) = sbh x 114 / t.
    const StageCost sp = StageCostTable(m, AtT(t, true)).Stage(StageLayers{0, 0});
    EXPECT_EQ(sp.activation_bytes, 114 * kSbh / t) << "t=" << t;
    // The layer's output (sent to the next stage) is split only by sequence parallelism.
    EXPECT_EQ(no_sp.output_bytes, kTpCommBytes);
    EXPECT_EQ(sp.output_bytes, kTpCommBytes / t);
  }
  // t = 8 in bytes: 23 sbh = 385,875,968 and 14.25 sbh = 239,075,328.
  EXPECT_EQ(StageCostTable(m, AtT(8, false)).Stage(StageLayers{0, 0}).activation_bytes,
            385'875'968);
  EXPECT_EQ(StageCostTable(m, AtT(8, true)).Stage(StageLayers{0, 0}).activation_bytes, 239'075'328);
}

TEST(TensorParallelTest, MeasuredPerTProfilesWinOverTheScaling) {
  Model m = Blocks(1);
  LayerProfile at4 = m.layers[0].profiles[0];
  at4.tensor_parallel = 4;
  at4.forward_ns = 300'000;  // not 1 ms / 4: what the GPU measured
  at4.backward_ns = 600'000;
  at4.activation_bytes = 12345;
  m.layers[0].profiles.push_back(at4);
  const StageCostTable table(m, AtT(4, false));
  const StageCost c = table.Stage(StageLayers{0, 0});
  EXPECT_EQ(c.forward_ns, 300'000 + 247'698);
  EXPECT_EQ(c.activation_bytes, 12345);
  EXPECT_TRUE(table.CostsMeasured());
  // t = 2 has no profile: scaled from t = 1.
  EXPECT_FALSE(StageCostTable(m, AtT(2, false)).CostsMeasured());
}

TEST(TensorParallelTest, OverlapHidesAllButTheFirstChunk) {
  const Model m = Blocks(1);
  StageCostOptions o = AtT(4, false);
  o.tp_comm_overlap = true;
  const StageCost c = StageCostTable(m, o).Stage(StageLayers{0, 0});
  // 247,698 ns of collectives beside 250,000 ns of forward compute: all but
  // one chunk of four hidden, max(247,698 / 4, 247,698 - 250,000) = 61,924.
  EXPECT_EQ(c.tp_forward_ns, 61'924);
  // Compute shorter than the collectives: the excess shows.
  Model fast = Blocks(1, 400'000, 400'000);
  const StageCost f = StageCostTable(fast, o).Stage(StageLayers{0, 0});
  EXPECT_EQ(f.tp_forward_ns, 247'698 - 100'000);
}

// One stage at t = 4 on h100-sxm: F 250,000 + 247,698 and B 500,000 + 247,698
// (no optimizer step: the estimate is held apart in data_parallel tests).
TEST(TensorParallelTest, SimulatedIterationAndPerGpuStaticMemory) {
  const Model m = Blocks(1);
  SimOptions o;
  o.tensor_parallel = 4;
  o.estimate_optimizer_step = false;
  o.critical_path = true;
  const auto r = Simulate(m, H100(), CustomSchedule(1, {{F(0, 0), B(0, 0)}}), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->iteration_ns, 250'000 + 247'698 + 500'000 + 247'698);
  EXPECT_EQ(r->per_rank[0].tp_comm_ns, 2 * 247'698);
  EXPECT_EQ(r->tp_comm_ns, 2 * 247'698);
  ASSERT_TRUE(r->critical_path.has_value());
  EXPECT_EQ(r->critical_path->tp_comm_ns, 2 * 247'698);
  // 18 bytes per parameter (2 + 4 + 12), each GPU keeping 1/4 of the 12h^2.
  const MemoryBreakdown& mem = r->per_rank[0].memory;
  EXPECT_EQ(mem.weights, 2 * kBlockParameters / 4);
  EXPECT_EQ(mem.gradients, 4 * kBlockParameters / 4);
  EXPECT_EQ(mem.optimizer, 12 * kBlockParameters / 4);
  EXPECT_EQ(mem.activations_peak, 10 * kSbh + 104 * kSbh / 4);
  EXPECT_FALSE(r->costs_measured);
  EXPECT_EQ(r->tensor_parallel, 4);
}

// Full recomputation reruns the forward, its collectives with it.
TEST(TensorParallelTest, FullRecomputationRepeatsTheForwardCollectives) {
  Model m = Blocks(1);
  m.layers[0].profiles[0].checkpoint_bytes = kTpCommBytes;
  StageCostOptions o = AtT(8, false);
  o.recompute = Recompute::kFull;
  const StageCost c = StageCostTable(m, o).Stage(StageLayers{0, 0});
  EXPECT_EQ(c.tp_backward_ns, 2 * 316'980);
  EXPECT_EQ(c.backward_ns, 2'000'000 / 8 + 1'000'000 / 8 + 2 * 316'980);
}

// The placement: GPU (r·p + k)·t + j. With t = 4 two stages share a node of
// eight; with t = 8 each stage fills a node, so the send crosses InfiniBand.
TEST(TensorParallelTest, PipelineSendsSeeTheNodeLayoutWithTFoldedIn) {
  const Model m = Blocks(2);
  const Schedule two = CustomSchedule(1, {{F(0, 0), B(0, 0)}, {F(1, 0), B(1, 0)}});
  const Link nvlink = H100().intra_node, ib = H100().inter_node;
  for (int t : {4, 8}) {
    SimOptions o;
    o.tensor_parallel = t;
    o.partition = {StageLayers{0, 0}, StageLayers{1, 1}};
    const auto r = Simulate(m, H100(), two, o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_FALSE(r->transfers.empty());
    const TransferRecord& send = r->transfers[0];
    const Link& link = t == 4 ? nvlink : ib;
    // Each GPU sends its own full b·s·h output (no sequence parallelism).
    EXPECT_EQ(send.end_ns - send.start_ns,
              link.LatencyNs() + TransferNs(kTpCommBytes, link.bandwidth_gbps))
        << "t=" << t;
  }
}

// A data-parallel group joins one tensor rank of every replica: with t = 4
// and d = 2 the replicas share a node (NVLink), with t = 8 they do not.
TEST(TensorParallelTest, DataParallelGroupsSeeTheNodeLayoutWithTFoldedIn) {
  const Model m = Blocks(1);
  const Bytes gradients_per_gpu_t4 = 4 * kBlockParameters / 4;
  const Bytes gradients_per_gpu_t8 = 4 * kBlockParameters / 8;
  const Link nvlink = H100().intra_node, ib = H100().inter_node;
  auto all_reduce = [](Bytes bytes, const Link& link) {  // d = 2: 2 steps of bytes / 2
    return 2 * link.LatencyNs() + TransferNs(bytes, link.bandwidth_gbps);
  };
  for (int t : {4, 8}) {
    SimOptions o;
    o.tensor_parallel = t;
    o.data_parallel = 2;
    const auto r = Simulate(m, H100(), CustomSchedule(1, {{F(0, 0), B(0, 0)}}), o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->allreduce_ns, t == 4 ? all_reduce(gradients_per_gpu_t4, nvlink)
                                      : all_reduce(gradients_per_gpu_t8, ib))
        << "t=" << t;
  }
}

TEST(TensorParallelTest, OneIsTheOldModel) {
  const Model m = Blocks(2);
  const Schedule two = CustomSchedule(1, {{F(0, 0), B(0, 0)}, {F(1, 0), B(1, 0)}});
  SimOptions o;
  const auto r = Simulate(m, H100(), two, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tp_comm_ns, 0);
  EXPECT_EQ(r->per_rank[0].memory.weights, 2 * kBlockParameters);
  EXPECT_TRUE(r->costs_measured);
}

TEST(TensorParallelTest, BadSettingsAreRefusedNamingTheFix) {
  const Model m = Blocks(1);
  const Schedule one = CustomSchedule(1, {{F(0, 0), B(0, 0)}});
  SimOptions o;
  o.tensor_parallel = 3;
  auto r = Simulate(m, H100(), one, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--tensor-parallel 3 does not divide the 8 GPUs"),
            std::string::npos)
      << r.status().message();

  o.tensor_parallel = 1;
  o.sequence_parallel = true;
  r = Simulate(m, H100(), one, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--sequence-parallel needs --tensor-parallel above 1"),
            std::string::npos);

  Model bare = m;
  bare.layers[0].profiles[0].tp_comm_bytes.reset();
  o.sequence_parallel = false;
  o.tensor_parallel = 2;
  r = Simulate(bare, H100(), one, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gives no tp_comm_bytes"), std::string::npos);
  EXPECT_NE(r.status().message().find("profiler analytic --tensor-parallel"), std::string::npos);
}

// Without tp_comm_bytes in the profile, a reader-derived estimate is used and said.
TEST(TensorParallelTest, DerivedCommIsUsedAndNoted) {
  Model m = Blocks(1);
  m.layers[0].profiles[0].tp_comm_bytes.reset();
  m.layers[0].tp_comm_estimate = TpCommEstimate{kTpCommBytes, 2, 2, "a test's architecture"};
  const StageCostTable table(m, AtT(8, false));
  EXPECT_EQ(table.Stage(StageLayers{0, 0}).tp_forward_ns, 316'980);
  bool noted = false;
  for (const std::string& n : table.Notes()) {
    noted |= n.find("a test's architecture") != std::string::npos;
  }
  EXPECT_TRUE(noted);
}

// docs/simulator.md "Calibration: the ring all-reduce against nccl-tests":
// bus bandwidth of an 8 GiB all-reduce over 8 GPUs against published
// all_reduce_perf figures (the midpoints of the published ranges).
TEST(TensorParallelCalibration, RingAllReduceAgainstNcclTests) {
  const Bytes bytes = Bytes{8} << 30;
  auto busbw = [&](const char* preset) {
    const Link link = ClusterPreset(preset)->intra_node;
    const double ns = static_cast<double>(TpCollectiveNs(bytes, 8, false, link));
    return static_cast<double>(bytes) / ns * 2.0 * 7 / 8;  // GB/s, nccl-tests' busbw
  };
  struct Row {
    const char* preset;
    double published_gbps;  // 460-480 and 230-250 GB/s
    double predicted_gbps;  // the docs' table
    double error_within;
  };
  // The presets' collective model (sim/collectives.h): NVLS on H100, the ring
  // at 80% of NVLink on A100 (449.6 and 299.8, the line rate, before it).
  for (Row row : {Row{"h100-sxm", 470, 477.5, 0.05}, Row{"a100-80gb", 240, 239.8, 0.05}}) {
    const double predicted = busbw(row.preset);
    EXPECT_NEAR(predicted, row.predicted_gbps, 0.05) << row.preset;
    EXPECT_LT(std::abs(predicted / row.published_gbps - 1), row.error_within) << row.preset;
  }
}

}  // namespace
}  // namespace pipecast
