// The overlapped F&B pair's duration model (sim/stage_costs.h OverlappedPairNs; docs/simulator.md
// "Overlapped F&B"): each half's communication hides behind the other half's compute, as far as
// that compute lasts. Held against hand-worked cases, against DeepSeek's published profile of
// one DualPipe F&B pair (deepseek-ai/profile-data train.json), and end to end: every pair of a
// dualpipev simulation at t = 2 lasts what the model gives, in both engines.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sim/cluster.h"
#include "sim/internal/reference_simulator.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "sim/stage_costs.h"

namespace pipecast {
namespace {

StageCost Costs(TimeNs forward_ns, TimeNs tp_forward_ns, TimeNs backward_ns, TimeNs tp_backward_ns,
                TimeNs backward_weight_ns = 0) {
  StageCost c;
  c.forward_ns = forward_ns;
  c.tp_forward_ns = tp_forward_ns;
  c.backward_ns = backward_ns;
  c.tp_backward_ns = tp_backward_ns;
  c.backward_weight_ns = backward_weight_ns;
  return c;
}

// F = 10 of which 4 communication, B = 20 of which 6: the forward's 4 hide behind the
// backward's 14 of compute, the backward's 6 behind the forward's 6: 6 + 14 = 20, the compute.
TEST(OverlappedPairTest, CommunicationHidesBehindThePartnersComputeHandWorked) {
  const StageCost f = Costs(10, 4, 0, 0), b = Costs(0, 0, 20, 6);
  const PairHalvesNs halves = OverlappedPairNs(f, b, OpKind::kBackward, PairOverlap{});
  EXPECT_EQ(halves.forward, 6);
  EXPECT_EQ(halves.backward, 14);
  // Scaled by the factor afterwards, each half rounded: 3 and 7.
  const PairHalvesNs half_speed =
      OverlappedPairNs(f, b, OpKind::kBackward, PairOverlap{.factor = 0.5});
  EXPECT_EQ(half_speed.forward, 3);
  EXPECT_EQ(half_speed.backward, 7);
}

// Communication longer than the partner's compute is only partly hidden: F = 10 (8 comm,
// 2 compute), B = 12 (10 comm, 2 compute). Two streams: compute 2 + 2; of the 18 of
// communication 2 + 2 hide, 14 show: the pair lasts 18, not F + B = 22.
TEST(OverlappedPairTest, CommunicationLongerThanThePartnersComputeShowsHandWorked) {
  const PairHalvesNs halves =
      OverlappedPairNs(Costs(10, 8, 0, 0), Costs(0, 0, 12, 10), OpKind::kBackward, PairOverlap{});
  EXPECT_EQ(halves.forward, 8);
  EXPECT_EQ(halves.backward, 10);
  EXPECT_EQ(halves.forward + halves.backward, 18);
}

// An input-gradient half (I) counts B less its W part; its communication is the backward's.
TEST(OverlappedPairTest, InputGradientHalfCountsBLessW) {
  const StageCost f = Costs(10, 4, 0, 0), b = Costs(0, 0, 20, 6, /*backward_weight_ns=*/8);
  const PairHalvesNs halves = OverlappedPairNs(f, b, OpKind::kBackwardInput, PairOverlap{});
  EXPECT_EQ(halves.forward, 10 - 4);   // I's compute is 12 - 6 = 6 >= 4
  EXPECT_EQ(halves.backward, 12 - 6);  // F's compute 6 hides all 6
}

// Without communication (t = 1) the pair is F + B, as before the model: each half unchanged.
TEST(OverlappedPairTest, NoCommunicationLeavesFPlusB) {
  const PairHalvesNs halves =
      OverlappedPairNs(Costs(10, 0, 0, 0), Costs(0, 0, 20, 0), OpKind::kBackward, PairOverlap{});
  EXPECT_EQ(halves.forward, 10);
  EXPECT_EQ(halves.backward, 20);
}

// DeepSeek's published profile of one DualPipe F&B pair (deepseek-ai/profile-data,
// train.json; H800, EP64 TP1, 4K sequence, 4 MoE layers per chunk; PP communication left out).
// Kernel time per phase, in us, from the trace (scripts/deepseek_pair_times.py):
//   compute stream: forward 35,866; backward 58,587 input gradient + 23,712 weight gradient
//   communication stream (DeepEP dispatch + combine): forward 61,497; backward 53,024
//   the pair's span, first kernel start to last kernel end: 129,012.
// F = 35,866 + 61,497 = 97,363; B = 82,299 + 53,024 = 135,323. The model: the forward's
// 61,497 hide behind the backward's 82,299 of compute; of the backward's 53,024, 35,866 hide
// behind the forward's compute: 97,363 - 61,497 + 135,323 - 35,866 = 135,323 us, +4.9% of the
// published 129,012. F + B one after the other (no overlap) would be 232,686, +80%.
TEST(OverlappedPairTest, DeepSeekProfileOfOneDualPipePair) {
  constexpr TimeNs kUs = 1000;
  const StageCost f = Costs((35'866 + 61'497) * kUs, 61'497 * kUs, 0, 0);
  const StageCost b = Costs(0, 0, (82'299 + 53'024) * kUs, 53'024 * kUs, 23'712 * kUs);
  const PairHalvesNs halves = OverlappedPairNs(f, b, OpKind::kBackward, PairOverlap{});
  const TimeNs predicted = halves.forward + halves.backward;
  EXPECT_EQ(predicted, 135'323 * kUs);
  constexpr double kPublished = 129'012.0 * kUs;
  const double error = (static_cast<double>(predicted) - kPublished) / kPublished;
  EXPECT_NEAR(error, 0.049, 0.001);
  EXPECT_LT(std::abs(error), 0.06);  // the calibration table's bound (docs/calibration.md)
  const double serial_error =
      (static_cast<double>(f.forward_ns + b.backward_ns) - kPublished) / kPublished;
  EXPECT_GT(serial_error, 0.8);  // F + B in turn misses by 80%
}

// A block with two tensor-parallel all-reduces each way (tensor_parallel_test.cc's).
Model TpBlocks(int n) {
  Model m;
  m.name = "tp-blocks";
  for (int i = 0; i < n; ++i) {
    Layer l;
    l.name = "block";
    l.parameters = 1'000'000;
    LayerProfile p;
    p.microbatch_size = 1;
    p.forward_ns = 400'000;
    p.backward_ns = 800'000;
    p.backward_weight_ns = 300'000;
    p.activation_bytes = 1 << 20;
    p.output_bytes = 1 << 20;
    p.tp_comm_bytes = Bytes{32} << 20;
    p.tp_forward_collectives = 2;
    p.tp_backward_collectives = 2;
    l.profiles.push_back(p);
    m.layers.push_back(l);
  }
  return m;
}

// dualpipev at t = 2 on h100-sxm: each rank's pairs are contiguous and last the model's
// F + B less the hidden collectives, recomputed here from the same stage costs; both engines
// agree, and the iteration is shorter than with no hiding.
TEST(OverlappedPairTest, DualPipeVPairsAtTensorParallelTwoLastWhatTheModelGives) {
  const int p = 4, m = 8;
  const Model model = TpBlocks(2 * p);
  const Cluster cluster = *ClusterPreset("h100-sxm");
  Result<Schedule> sched = MakeSchedule(ScheduleKind::kDualPipeV, p, m, /*chunks=*/2);
  ASSERT_TRUE(sched.ok()) << sched.status().message();
  SimOptions options;
  options.config.layout.tensor_parallel = 2;
  for (int s = 0; s < 2 * p; ++s) options.partition.push_back(StageLayers{s, s});
  Result<SimResult> got = Simulate(model, cluster, *sched, options);
  ASSERT_TRUE(got.ok()) << got.status().message();

  StageCostOptions co;
  co.microbatch_size = options.config.microbatch_size;
  co.recompute = options.config.recompute;
  co.tensor_parallel = 2;
  co.tp_link = cluster.intra_node;
  const std::vector<StageCost> costs = StageCostTable(model, co).Stages(options.partition);
  ASSERT_GT(costs[0].tp_forward_ns, 0);
  ASSERT_GT(costs[0].tp_backward_ns, 0);
  std::vector<std::vector<OpRecord>> per_rank(p);  // each rank's ops in the order they ran
  for (const OpRecord& op : got->ops) per_rank[op.rank].push_back(op);
  int pairs = 0;
  for (const std::vector<OpRecord>& list : per_rank) {
    for (size_t k = 0; k + 1 < list.size(); ++k) {
      const OpRecord& f = list[k];
      if (!f.action.overlapped || f.action.kind != OpKind::kForward) continue;
      const OpRecord& b = list[k + 1];
      ASSERT_TRUE(b.action.overlapped);
      const PairHalvesNs want = OverlappedPairNs(costs[f.action.stage], costs[b.action.stage],
                                                 b.action.kind, PairOverlap{});
      EXPECT_EQ(f.end_ns - f.start_ns, want.forward) << ActionName(f.action);
      EXPECT_EQ(b.start_ns, f.end_ns);
      EXPECT_EQ(b.end_ns - b.start_ns, want.backward) << ActionName(b.action);
      const TimeNs serial = costs[f.action.stage].DurationNs(OpKind::kForward) +
                            costs[b.action.stage].DurationNs(b.action.kind);
      EXPECT_LT(b.end_ns - f.start_ns, serial);
      ++pairs;
    }
  }
  EXPECT_GT(pairs, 0);

  Result<SimResult> reference = internal::ReferenceSimulate(model, cluster, *sched, options);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  EXPECT_EQ(reference->iteration_ns, got->iteration_ns);
  ASSERT_EQ(reference->ops.size(), got->ops.size());
  for (size_t k = 0; k < got->ops.size(); ++k) {
    EXPECT_EQ(reference->ops[k].start_ns, got->ops[k].start_ns);
    EXPECT_EQ(reference->ops[k].end_ns, got->ops[k].end_ns);
  }
}

}  // namespace
}  // namespace pipecast
