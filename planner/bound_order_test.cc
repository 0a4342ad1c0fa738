// The search in lower-bound order (search_pass.cc, issue 26): the bounds it orders and prunes by
// before partitioning never exceed what the candidate's own partition gives, nor its simulated
// iteration; the static-memory floor never exceeds the simulated peak's static part; and the
// pruned search chooses what simulating every candidate chooses (--top past the candidates:
// nothing can be pruned), on random small cases and on the shipped mixture-of-experts examples.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "formats/formats.h"
#include "planner/passes.h"
#include "sim/schedule_traits.h"
#include "testing/sim_test_util.h"

namespace pipecast::passes {
namespace {

using ::pipecast::test_util::IdealCluster;

constexpr TimeNs kMs = 1'000'000;

// Uniform in [lo, hi] from std::mt19937_64 (whose sequence the standard fixes).
int64_t Between(std::mt19937_64& engine, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(engine() % static_cast<uint64_t>(hi - lo + 1));
}

// Random layers (F 0.1-3 ms, B 1.2-3 x F, W 20-60% of B, 1-64 MiB of activations, 0.1-4 G
// parameters, the tensor-parallel collectives t = 2 needs), micro-batch sizes 1 and 2.
Model RandomModel(std::mt19937_64& engine, int layers) {
  Model model;
  model.name = "random";
  for (int l = 0; l < layers; ++l) {
    Layer layer;
    layer.name = "layer" + std::to_string(l);
    layer.parameters = Between(engine, 100, 1500) * 1'000'000;
    for (int size : {1, 2}) {
      LayerProfile p;
      p.microbatch_size = size;
      p.forward_ns = Between(engine, 100'000, 3'000'000) * size;
      p.backward_ns = p.forward_ns * Between(engine, 12, 30) / 10;
      p.backward_weight_ns = p.backward_ns * Between(engine, 20, 60) / 100;
      p.activation_bytes = Between(engine, 1, 64) * kMiB * size * 64;
      p.output_bytes = Between(engine, 0, 32) * kMiB * size;
      p.workspace_bytes = Between(engine, 0, 8) * kMiB;
      p.checkpoint_bytes = p.output_bytes;
      p.attention_core_bytes = p.activation_bytes / 4;
      p.attention_core_ns = p.forward_ns / 5;
      p.tp_comm_bytes = Between(engine, 1, 64) * kMiB * size;
      p.tp_forward_collectives = 2;
      p.tp_backward_collectives = 2;
      layer.profiles.push_back(p);
    }
    model.layers.push_back(layer);
  }
  return model;
}

Model Example(const std::string& name) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  const std::filesystem::path path =
      std::filesystem::path(root != nullptr ? root : ".") / "examples" / name;
  Result<Model> m = LoadModel(path.string());
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *m : Model{};
}

// The largest rank's weights, gradients and optimizer state, as simulated.
Bytes SimulatedStatic(const SimResult& r) {
  Bytes most = 0;
  for (const StageResult& s : r.per_rank) {
    most = std::max(most, s.memory.weights + s.memory.gradients + s.memory.optimizer);
  }
  return most;
}

// Given random models, clusters, GPU counts, batches and every built-in schedule, when each
// enumerated candidate is bounded before partitioning and then partitioned (time-balanced, as
// the partition pass does without a memory limit) and simulated, then the bound before
// partitioning is at most the partitioned bound and the simulated iteration, and the static
// floor at most the simulated static memory of the fullest rank.
TEST(BoundOrder, BoundsBeforePartitioningNeverAboveThePartitionedOnesOrTheSimulation) {
  std::mt19937_64 engine(20261203);
  int checked = 0, pairs = 0, tight = 0;
  for (int i = 0; i < 60; ++i) {
    const Model model = RandomModel(engine, static_cast<int>(Between(engine, 4, 10)));
    const Cluster cluster = i % 2 == 0 ? IdealCluster() : *ClusterPreset("h100-sxm");
    PlannerOptions o;
    o.gpus = static_cast<int>(std::vector<int64_t>{2, 4, 8}[Between(engine, 0, 2)]);
    o.schedules = BuiltinScheduleKinds();
    o.microbatch_sizes = {1, 2};
    o.zero_levels = {0, 1, 3};
    o.tensor_parallel = {1, 2};
    o.threads = 1;
    std::vector<Rejection> rejected;
    std::vector<Candidate> all =
        Enumerate(model, cluster, o, o.gpus * Between(engine, 1, 8) * 2, &rejected);
    std::shuffle(all.begin(), all.end(), engine);
    if (all.size() > 24) all.resize(24);
    PartitionCache cache(model, cluster);
    for (Candidate& c : all) {
      const TimeNs before = UnpartitionedLowerBound(cache.Table(c), c);
      const Bytes floor = StaticMemoryFloor(cache.Table(c), c);
      Rejection why;
      ASSERT_TRUE(PartitionForMemory(model, cluster, /*capacity=*/0, &c, &why, &cache))
          << c.Label();
      const TimeNs after = LowerBound(cache.Table(c), c);
      EXPECT_LE(before, after) << "case " << i << ": " << c.Label();
      Result<SimResult> r = SimulateCandidate(model, cluster, c, /*record_timeline=*/false);
      if (!r.ok()) continue;  // refused by the simulator: proves nothing
      EXPECT_LE(before, r->iteration_ns) << c.Label();
      EXPECT_LE(after, r->iteration_ns) << c.Label();
      EXPECT_LE(floor, SimulatedStatic(*r)) << c.Label();
      EXPECT_GT(before, 0) << c.Label();
      ++checked;
      pairs += TraitsOf(c.config.schedule).overlapped_pairs;
      tight += before * 10 >= after * 9;
    }
  }
  EXPECT_GE(checked, 1000);
  EXPECT_GE(pairs, 100);
  std::printf(
      "[ bound ] %d candidates, %d with overlapped pairs; bound before partitioning "
      "within 10%% of the partitioned one for %d\n",
      checked, pairs, tight);
}

// Hand-worked: four layers of F = 1 ms, B = 2 ms (T = 12 ms for the model) under 1F1B on
// p = 2, m = 4. Before partitioning: the work average m·T/p = 24 ms, and the weighted fill and
// tail T / (1 - (1 - 1/m)^p) = 12 / (1 - 9/16) = 192/7 = 27.428571 ms (rounded down, less a
// part in 10^9 and 1 ns). The even split's bound is (m + p - 1)(F + B) per stage =
// 5 x 6 = 30 ms, the simulated iteration on the ideal cluster.
TEST(BoundOrder, OneFOneBBeforePartitioningWorkedByHand) {
  const Model model = test_util::UniformModel(4, kMs, 2 * kMs);
  Candidate c;
  c.config.layout.pipeline_stages = 2;
  c.config.schedule = ScheduleKind::k1F1B;
  c.config.microbatches = 4;
  const Cluster cluster = IdealCluster();  // the cache keeps a reference to it
  PartitionCache cache(model, cluster);
  const TimeNs before = UnpartitionedLowerBound(cache.Table(c), c);
  EXPECT_NEAR(static_cast<double>(before), 192.0 / 7 * kMs, 30.0);
  EXPECT_LE(before, 192 * kMs / 7);
  c.partition = {{0, 1}, {2, 3}};
  EXPECT_EQ(LowerBound(cache.Table(c), c), 30 * kMs);
  c.config.schedule = ScheduleKind::kZBH1;  // split backward: the work average alone
  EXPECT_EQ(UnpartitionedLowerBound(cache.Table(c), c), 24 * kMs);
  c.config.schedule = ScheduleKind::kNaive;  // one micro-batch at a time: m·T
  EXPECT_EQ(UnpartitionedLowerBound(cache.Table(c), c), 48 * kMs);
}

// The chosen plan and its runners-up, labels and iteration times, from a search.
std::vector<std::pair<std::string, TimeNs>> TopOf(const PlanReport& report, size_t n) {
  std::vector<std::pair<std::string, TimeNs>> out;
  for (size_t i = 0; i < std::min(n, report.ranked.size()); ++i) {
    out.emplace_back(report.ranked[i].Label(), report.ranked[i].result->iteration_ns);
  }
  return out;
}

// Runs the search with the default top 3 and with nothing pruned (--top past every candidate),
// and expects the same four best.
void ExpectSameTopAsExhaustive(const Model& model, const Cluster& cluster, PlannerOptions o,
                               const std::string& what) {
  o.threads = 2;
  o.top_k = 3;
  Result<PlanReport> pruned = RunPlanner(model, cluster, o);
  o.top_k = 1'000'000;
  Result<PlanReport> all = RunPlanner(model, cluster, o);
  ASSERT_TRUE(pruned.ok() && all.ok()) << what;
  EXPECT_EQ(TopOf(*pruned, 4), TopOf(*all, 4)) << what;
  EXPECT_LE(pruned->simulated, all->simulated) << what;
  std::printf("[ exhaustive ] %s: %s; simulated %d of %d (exhaustive %d)\n", what.c_str(),
              pruned->Feasible() ? pruned->ranked[0].Label().c_str() : "nothing fits",
              pruned->simulated, pruned->enumerated, all->simulated);
}

// Given random models on 4, 8 and 16 GPUs of h100-sxm (80 GB: some candidates do not fit, some
// are refused before partitioning for their static memory) and of the ideal cluster, every
// default schedule, micro-batch size, recomputation, t and ZeRO level, when the planner searches
// in bound order, then its four best are those of the search that simulates every candidate.
TEST(BoundOrder, PrunedSearchChoosesWhatTheExhaustiveSearchChoosesOnRandomModels) {
  std::mt19937_64 engine(7);
  for (int i = 0; i < 12; ++i) {
    const Model model = RandomModel(engine, static_cast<int>(Between(engine, 6, 16)));
    const Cluster cluster = i % 3 == 2 ? IdealCluster() : *ClusterPreset("h100-sxm");
    PlannerOptions o;
    o.gpus = static_cast<int>(std::vector<int64_t>{4, 8, 16}[i % 3]);
    o.global_batch = o.gpus * 8;
    o.tensor_parallel = {1, 2};
    ExpectSameTopAsExhaustive(model, cluster, o, "random case " + std::to_string(i));
  }
}

// The shipped mixture-of-experts examples, ep searched with t, p, d and every schedule
// (DualPipe and DualPipeV's pairs hiding the all-to-alls), on h100-sxm.
TEST(BoundOrder, PrunedSearchChoosesWhatTheExhaustiveSearchChoosesOnMoeExamples) {
  const Cluster h100 = *ClusterPreset("h100-sxm");
  for (const auto& [file, gpus] : std::vector<std::pair<std::string, int>>{
           {"mixtral-8x7b.json", 16}, {"qwen3-30b-a3b.json", 32}}) {
    const Model model = Example(file);
    ASSERT_FALSE(model.layers.empty()) << file;
    PlannerOptions o;
    o.gpus = gpus;
    o.microbatch_sizes = {1};
    ExpectSameTopAsExhaustive(model, h100, o, file + " on " + std::to_string(gpus));
  }
}

}  // namespace
}  // namespace pipecast::passes
