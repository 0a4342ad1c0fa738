// The prune pass's lower bound (prune.cc) against the simulator: it must never exceed the
// simulated iteration of its candidate, or the simulate pass could drop, as "cannot reach the
// top", a plan that is in fact among the best. Checked on random cases over every schedule kind
// the planner enumerates, and on the V placement worked by hand (issue 23: the bound once
// mapped stages to ranks as s mod p whatever the placement).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "planner/passes.h"
#include "sim/schedule_traits.h"
#include "testing/sim_test_util.h"

namespace pipecast::passes {
namespace {

using ::pipecast::test_util::IdealCluster;

constexpr TimeNs kMs = 1'000'000;

// Draws from std::mt19937_64, whose sequence the standard fixes, without the standard
// library's distributions (their output is implementation-defined).
class Draw {
 public:
  explicit Draw(uint64_t seed) : engine_(seed) {}
  // Uniform in [lo, hi].
  int64_t Between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(engine_() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool OneIn(int n) { return engine_() % static_cast<uint64_t>(n) == 0; }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[engine_() % v.size()];
  }
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

// One layer profile with random times (F 0.1-3 ms, B 1.2-3 x F, W 20-60% of B) and bytes,
// every optional field the stage costs read given, so that every schedule and recomputation
// mode can run: the weight-gradient split, checkpoint and attention-core bytes, and the
// tensor-parallel collectives t = 2 needs.
LayerProfile RandomProfile(Draw& draw, int microbatch_size) {
  LayerProfile p;
  p.microbatch_size = microbatch_size;
  p.forward_ns = draw.Between(100'000, 3'000'000) * microbatch_size;
  p.backward_ns = p.forward_ns * draw.Between(12, 30) / 10;
  p.backward_weight_ns = p.backward_ns * draw.Between(20, 60) / 100;
  p.activation_bytes = draw.Between(1, 64) * kMiB * microbatch_size;
  p.output_bytes = draw.Between(0, 32) * kMiB * microbatch_size;
  p.workspace_bytes = draw.Between(0, 8) * kMiB;
  p.checkpoint_bytes = p.output_bytes;
  p.attention_core_bytes = p.activation_bytes / 4;
  p.attention_core_ns = p.forward_ns / 5;
  p.weight_grad_bytes = p.activation_bytes / 2;
  p.tp_comm_bytes = draw.Between(1, 64) * kMiB * microbatch_size;
  p.tp_forward_collectives = 2;
  p.tp_backward_collectives = 2;
  return p;
}

Model RandomModel(Draw& draw, int layers, bool two_sizes) {
  Model model;
  model.name = "random";
  for (int l = 0; l < layers; ++l) {
    Layer layer;
    layer.name = "layer" + std::to_string(l);
    layer.parameters = draw.Between(1, 400) * 1'000'000;
    layer.profiles.push_back(RandomProfile(draw, 1));
    if (two_sizes) layer.profiles.push_back(RandomProfile(draw, 2));
    model.layers.push_back(layer);
  }
  return model;
}

// Ideal (free links, unlimited memory), a preset (NVLink and InfiniBand, an optimizer step
// estimated from HBM), or slow links on small nodes (pipeline and data-parallel traffic
// crossing nodes at 0.5 GB/s and 200 us).
Cluster RandomCluster(Draw& draw, std::string* what) {
  switch (draw.Between(0, 2)) {
    case 0:
      *what = "ideal";
      return IdealCluster();
    case 1: {
      *what = draw.OneIn(2) ? "h100-sxm" : "a100-80gb";
      return *ClusterPreset(*what);
    }
    default: {
      Cluster c = IdealCluster();
      c.name = "slow";
      c.gpus_per_node = draw.OneIn(2) ? 2 : 4;
      c.intra_node = Link{5.0, 20.0};
      c.inter_node = Link{0.5, 200.0};
      *what = "slow, " + std::to_string(c.gpus_per_node) + " GPUs per node";
      return c;
    }
  }
}

// A random split of the layers into the candidate's model stages, repeated for a bidirectional
// schedule's second copy (as the partition pass gives it).
std::vector<StageLayers> RandomPartition(Draw& draw, const Candidate& c, int layers) {
  const int stages = c.ModelStages();
  std::vector<int> cuts;  // the first layer of stages 1..stages-1
  for (int l = 1; l < layers; ++l) cuts.push_back(l);
  std::shuffle(cuts.begin(), cuts.end(), draw.engine());
  cuts.resize(stages - 1);
  std::sort(cuts.begin(), cuts.end());
  cuts.push_back(layers);
  std::vector<StageLayers> out;
  int first = 0;
  for (int next : cuts) {
    out.push_back(StageLayers{first, next - 1});
    first = next;
  }
  for (int s = stages; s < c.VirtualStages(); ++s) out.push_back(out[s - stages]);
  return out;
}

// Given random models (4-10 layers, random times and bytes), clusters, GPU counts (t x p x d
// of 2, 4 or 8, t = 1 and 2), global batches, ZeRO 0/1/3, recomputation and overlap settings,
// when the planner enumerates every built-in schedule kind (chunks 2 and 3 for interleaved,
// interleaved-zb and looped-bfs) and a sample of those candidates, time-balanced or split at
// random, is bounded and simulated, then no bound exceeds its simulated iteration.
TEST(PruneBound, NeverAboveTheSimulatedIterationOnRandomCases) {
  Draw draw(20240523);
  constexpr int kCases = 120;
  constexpr int kPerKind = 2;  // candidates of each kind simulated per case
  std::map<ScheduleKind, int> checked;
  std::map<int, int> by_t, by_zero;
  int checked_total = 0, pairs_at_t2 = 0, refused_total = 0;
  std::string refused;
  for (int i = 0; i < kCases; ++i) {
    const int layers = static_cast<int>(draw.Between(4, 10));
    const bool two_sizes = draw.OneIn(2);
    const Model model = RandomModel(draw, layers, two_sizes);
    std::string cluster_name;
    const Cluster cluster = RandomCluster(draw, &cluster_name);
    PlannerOptions o;
    o.gpus = static_cast<int>(draw.Pick(std::vector<int64_t>{2, 4, 8}));
    o.schedules = BuiltinScheduleKinds();
    o.chunks = {2, 3};
    o.microbatch_sizes = two_sizes ? std::vector<int>{1, 2} : std::vector<int>{1};
    o.zero_levels = {0, 1, 3};
    o.tensor_parallel = {1, 2};
    o.overlap.tp_comm_overlap = draw.OneIn(3);
    o.overlap.overlap_grad_reduce = !draw.OneIn(3);
    o.overlap.grad_bucket_params = draw.OneIn(2) ? 0 : draw.Between(1, 200) * 1'000'000;
    o.threads = 1;
    const int64_t global_batch = o.gpus * draw.Between(1, 8) * 2;
    std::vector<Rejection> rejected;
    std::vector<Candidate> all = Enumerate(model, cluster, o, global_batch, &rejected);
    std::shuffle(all.begin(), all.end(), draw.engine());
    std::map<ScheduleKind, int> taken;
    std::vector<Candidate> cands;
    for (Candidate& c : all) {
      if (taken[c.config.schedule] >= kPerKind) continue;
      ++taken[c.config.schedule];
      if (draw.OneIn(2)) {
        c.partition = RandomPartition(draw, c, layers);
      } else {
        Rejection why;
        ASSERT_TRUE(PartitionForMemory(model, cluster, /*capacity=*/0, &c, &why)) << c.Label();
      }
      cands.push_back(std::move(c));
    }
    Prune(model, cluster, &cands);
    for (const Candidate& c : cands) {
      Result<SimResult> r = SimulateCandidate(model, cluster, c, /*record_timeline=*/false);
      if (!r.ok()) {
        // The planner rejects it as a simulation error whatever its bound (zb-auto's heuristic
        // leaves a stage short of forwards for some cost mixes: docs/planner.md, "prune").
        if (refused.empty()) refused = c.Label() + ": " + r.status().message();
        ++refused_total;
        continue;
      }
      EXPECT_LE(c.lower_bound_ns, r->iteration_ns)
          << "case " << i << " on " << cluster_name << ": " << c.Label() << ", layers " << layers;
      EXPECT_GT(c.lower_bound_ns, 0) << c.Label();
      ++checked[c.config.schedule];
      ++by_t[c.config.layout.tensor_parallel];
      ++by_zero[c.config.memory.zero];
      ++checked_total;
      pairs_at_t2 +=
          c.config.layout.tensor_parallel == 2 && TraitsOf(c.config.schedule).overlapped_pairs;
    }
  }
  // Every kind the planner enumerates was checked many times, at both t and every ZeRO level.
  for (ScheduleKind kind : BuiltinScheduleKinds()) {
    EXPECT_GE(checked[kind], kCases) << ScheduleKindName(kind);
  }
  EXPECT_GE(by_t[2], kCases);
  for (int zero : {0, 1, 3}) EXPECT_GE(by_zero[zero], kCases / 2) << "zero=" << zero;
  EXPECT_GE(pairs_at_t2, kCases / 4);  // overlapped pairs hiding tensor-parallel communication
  // A refusal proves nothing about the bound: they stay rare.
  EXPECT_LE(refused_total * 100, checked_total) << refused;
  RecordProperty("candidates_checked", checked_total);
  std::printf("[ bound ] %d candidates over %d cases; %d refused by the simulator%s%s\n",
              checked_total, kCases, refused_total, refused.empty() ? "" : ", e.g. ",
              refused.c_str());
}

// Random mixture-of-experts layers for the layered expert overlap: each layer dense or MoE (8
// or 16 experts, top-2, h 1024-4096, 30-90% of its parameters in the experts) with its forward
// FLOPs given, so that the routed experts' share of its compute is known (StageCost::
// pair_layers); 4096 tokens a sample.
Model RandomMoeModel(Draw& draw, int layers) {
  Model model = RandomModel(draw, layers, /*two_sizes=*/false);
  model.sequence_length = 4096;
  for (Layer& l : model.layers) {
    if (draw.OneIn(3)) continue;  // dense
    l.moe = MoeRouting{.experts = draw.OneIn(2) ? 8 : 16,
                       .top_k = 2,
                       .hidden = draw.Between(1, 4) * 1024,
                       .expert_parameters = l.parameters * draw.Between(30, 90) / 100};
    // Expert FLOPs are 2 x 4096 x 2 x E_params / E: the share they make of the layer's, 10-100%.
    const double expert_flops =
        2.0 * 4096 * 2 * static_cast<double>(l.moe->expert_parameters) / l.moe->experts;
    l.forward_flops = expert_flops * 100.0 / static_cast<double>(draw.Between(10, 100));
  }
  return model;
}

// Given random MoE models (4-10 layers, a third dense) on h100-sxm, with slow links between
// nodes or not, 4, 8 and 16 GPUs, ep 2 and 4, t 1 and 2, ZeRO 0, 1 and 3 and every
// recomputation, when the planner enumerates dualpipe, dualpipev and the combined 1F1B (1f1b
// and interleaved with the expert overlap on): their pairs replayed by the layered rule, or the
// whole-compute rule beside a dense stage, and a sample of each kind is split at random or
// time-balanced, then no bound (LowerBound, which counts each rank's own ops alone and in
// pairs) exceeds its simulated iteration.
TEST(PruneBound, PairSchedulesWithTheExpertOverlapNeverAboveTheSimulation) {
  Draw draw(20261203);
  constexpr int kCases = 60;
  int checked = 0, layered = 0, refused_total = 0;
  std::map<ScheduleKind, int> by_kind;
  for (int i = 0; i < kCases; ++i) {
    const int layers = static_cast<int>(draw.Between(4, 10));
    const Model model = RandomMoeModel(draw, layers);
    std::string cluster_name = "h100-sxm";
    Cluster cluster = *ClusterPreset("h100-sxm");
    if (draw.OneIn(3)) {
      cluster.name = "slow";
      cluster.inter_node = Link{0.5, 200.0};
      cluster_name = "slow";
    }
    PlannerOptions o;
    o.gpus = static_cast<int>(draw.Pick(std::vector<int64_t>{4, 8, 16}));
    o.schedules = {ScheduleKind::kDualPipeV, ScheduleKind::kDualPipe, ScheduleKind::k1F1B,
                   ScheduleKind::kInterleaved1F1B};
    o.microbatch_sizes = {1};
    o.zero_levels = {0, 1, 3};
    o.tensor_parallel = {1, 2};
    o.expert_parallel = {2, 4};
    o.expert_overlaps = {ExpertOverlap::kAuto, ExpertOverlap::kOn};  // on: the combined 1F1B
    o.threads = 1;
    const int64_t global_batch = o.gpus * draw.Between(1, 4) * 4;
    std::vector<Rejection> rejected;
    std::vector<Candidate> all = Enumerate(model, cluster, o, global_batch, &rejected);
    std::shuffle(all.begin(), all.end(), draw.engine());
    std::map<std::pair<ScheduleKind, bool>, int> taken;
    std::vector<Candidate> cands;
    for (Candidate& c : all) {
      const bool pairs =
          TraitsOf(c.config.schedule).overlapped_pairs || c.config.CombinesForwardBackward();
      if (!pairs || !c.config.ExpertOverlapOn()) continue;
      if (taken[{c.config.schedule, c.config.layout.tensor_parallel == 2}]++ >= 3) continue;
      if (draw.OneIn(2)) {
        c.partition = RandomPartition(draw, c, layers);
      } else {
        Rejection why;
        ASSERT_TRUE(PartitionForMemory(model, cluster, /*capacity=*/0, &c, &why)) << c.Label();
      }
      cands.push_back(std::move(c));
    }
    Prune(model, cluster, &cands);
    PartitionCache cache(model, cluster);
    for (const Candidate& c : cands) {
      Result<SimResult> r = SimulateCandidate(model, cluster, c, /*record_timeline=*/false);
      if (!r.ok()) {
        ++refused_total;
        continue;
      }
      EXPECT_LE(c.lower_bound_ns, r->iteration_ns)
          << "case " << i << " on " << cluster_name << ": " << c.Label() << ", layers " << layers;
      EXPECT_EQ(c.lower_bound_ns, LowerBound(cache.Table(c), c));  // with and without the cache
      // And with a cache that kept the pair halves (PartitionCache::PairHalves) of the case's
      // earlier candidates, other splits of the same tables among them.
      EXPECT_EQ(c.lower_bound_ns, LowerBound(cache.Table(c), c, &cache)) << c.Label();
      const std::vector<StageCost> costs = cache.Table(c).Stages(c.partition);
      layered += std::count_if(costs.begin(), costs.end(),
                               [](const StageCost& s) { return !s.pair_layers.empty(); }) > 1;
      ++by_kind[c.config.schedule];
      ++checked;
    }
  }
  for (ScheduleKind kind : {ScheduleKind::kDualPipeV, ScheduleKind::kDualPipe, ScheduleKind::k1F1B,
                            ScheduleKind::kInterleaved1F1B}) {
    EXPECT_GE(by_kind[kind], kCases / 2) << ScheduleKindName(kind);
  }
  EXPECT_GE(layered, checked / 2);
  EXPECT_LE(refused_total * 20, checked);
  std::printf(
      "[ bound ] %d MoE candidates with the expert overlap over %d cases (%d with "
      "layered pairs), %d refused by the simulator\n",
      checked, kCases, layered, refused_total);
}

// DualPipeV on p = 2, m = 4, whose order scripts/dualpipe_order.py (a line-by-line port of
// deepseek-ai/DualPipe's dualpipev.py step() at 3da1bbe) prints as
//   rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 (0F3;3B1) (3F2;0B0) 3B2 (3F3;0B1) 3B3 0I2 0W2 0I3 0W3
//   rank 1: 1F0 2F0 1F1 2F1 1F2 2B0 (2F2;1B0) (1F3;2B1) (2F3;1B1) 2B2 1B2 2I3 1I3 2W3 1W3
// (pairs in brackets): CountRankOps counts each rank's ops alone and its pairs by (forward's
// stage, backward's stage and kind).
TEST(PruneBound, CountRankOpsOfDualPipeVByHand) {
  Candidate c;
  c.config.layout.pipeline_stages = 2;
  c.config.schedule = ScheduleKind::kDualPipeV;
  c.config.layout.chunks = 2;
  c.config.microbatches = 4;
  const std::vector<std::vector<RankOpCount>> ops = CountRankOps(c);
  ASSERT_EQ(ops.size(), 2u);
  using Count = std::tuple<int, OpKind, int, OpKind, int64_t>;
  const auto as_tuples = [](const std::vector<RankOpCount>& v) {
    std::vector<Count> out;
    for (const RankOpCount& o : v) {
      out.emplace_back(o.stage, o.kind, o.partner,
                       o.partner < 0 ? OpKind::kBackward : o.partner_kind, o.count);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  constexpr OpKind F = OpKind::kForward, B = OpKind::kBackward, I = OpKind::kBackwardInput,
                   W = OpKind::kBackwardWeight;
  std::vector<Count> rank0 = {{0, F, -1, B, 3}, {0, F, 3, B, 1},  {0, I, -1, B, 2},
                              {0, W, -1, B, 2}, {3, F, -1, B, 2}, {3, F, 0, B, 2},
                              {3, B, -1, B, 2}, {3, I, -1, B, 1}, {3, W, -1, B, 1}};
  std::vector<Count> rank1 = {
      {1, F, -1, B, 3}, {1, F, 2, B, 1}, {1, B, -1, B, 1}, {1, I, -1, B, 1}, {1, W, -1, B, 1},
      {2, F, -1, B, 2}, {2, F, 1, B, 2}, {2, B, -1, B, 2}, {2, I, -1, B, 1}, {2, W, -1, B, 1}};
  std::sort(rank0.begin(), rank0.end());
  std::sort(rank1.begin(), rank1.end());
  EXPECT_EQ(as_tuples(ops[0]), rank0);
  EXPECT_EQ(as_tuples(ops[1]), rank1);
  // Schedules without pairs have no counts: their bound is the per-stage work.
  c.config.schedule = ScheduleKind::kZBV;
  EXPECT_TRUE(CountRankOps(c).empty());
}

// The V placement worked by hand. Four layers, one per virtual stage, with F = 1, 3, 1, 3 ms
// and B = 2, 6, 2, 6 ms (I and W half each), on p = 2 ranks, m = 8, the ideal cluster.
// In a V rank 0 holds stages 0 and 3, rank 1 stages 1 and 2: each rank's work per micro-batch
// is (1 + 2) + (3 + 6) = 12 ms, 96 ms for 8; rank 1 waits for F of stage 0 (1 ms) before its
// first op. Bound: max(0 + 96, 1 + 96) = 97 ms.
// The old rule (rank s mod p: stages 0 and 2 on rank 0, 1 and 3 on rank 1) gave rank 1
// (3 + 6) + (3 + 6) = 18 ms per micro-batch: 1 + 8 x 18 = 145 ms, above every V schedule's
// simulated iteration, so a search would have pruned the fastest plan.
TEST(PruneBound, VPlacementWorkedByHand) {
  Model model = test_util::UniformModel(4, kMs, 2 * kMs);
  for (int l : {1, 3}) {
    model.layers[l].profiles[0].forward_ns = 3 * kMs;
    model.layers[l].profiles[0].backward_ns = 6 * kMs;
  }
  for (Layer& l : model.layers) {
    l.profiles[0].backward_weight_ns = l.profiles[0].backward_ns / 2;
  }
  for (ScheduleKind kind : {ScheduleKind::kZBV, ScheduleKind::kVHalf, ScheduleKind::kVMin,
                            ScheduleKind::kDualPipeV, ScheduleKind::kZBVAuto}) {
    Candidate c;
    c.config.layout.pipeline_stages = 2;
    c.config.schedule = kind;
    c.config.layout.chunks = 2;
    c.config.microbatches = 8;
    c.partition = {{0, 0}, {1, 1}, {2, 2}, {3, 3}};
    std::vector<Candidate> one = {c};
    Prune(model, IdealCluster(), &one);
    EXPECT_EQ(one[0].lower_bound_ns, 97 * kMs) << ScheduleKindName(kind);
    Result<SimResult> r = SimulateCandidate(model, IdealCluster(), one[0], false);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_GE(r->iteration_ns, 97 * kMs) << ScheduleKindName(kind);
    EXPECT_LT(r->iteration_ns, 145 * kMs) << ScheduleKindName(kind);
    std::printf("[ bound ] %s p=2 m=8: bound %.3f ms, simulated %.3f ms\n", ScheduleKindName(kind),
                NsToMs(one[0].lower_bound_ns), NsToMs(r->iteration_ns));
  }
  // DualPipe on the same costs, model stages {layers 0-1} and {2-3}, each held twice: rank 0
  // holds stage 0 (F 4, B 8 ms) and the second copy of stage 1 (F 4, B 8 ms), and runs m/2 = 4
  // micro-batches of each: 4 x 12 + 4 x 12 = 96 ms; both ranks start at once (each is the
  // entry of one direction). Bound 96 ms.
  Candidate c;
  c.config.layout.pipeline_stages = 2;
  c.config.schedule = ScheduleKind::kDualPipe;
  c.config.layout.chunks = 2;
  c.config.microbatches = 8;
  c.partition = {{0, 1}, {2, 3}, {0, 1}, {2, 3}};
  std::vector<Candidate> one = {c};
  Prune(model, IdealCluster(), &one);
  EXPECT_EQ(one[0].lower_bound_ns, 96 * kMs);
  Result<SimResult> r = SimulateCandidate(model, IdealCluster(), one[0], false);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GE(r->iteration_ns, 96 * kMs);
}

}  // namespace
}  // namespace pipecast::passes
