// The search in lower-bound order (search_pass.cc, issue 26): the bounds it orders and prunes by
// before partitioning never exceed what the candidate's own partition gives, nor its simulated
// iteration; the static-memory floor never exceeds the simulated peak's static part; and the
// pruned search chooses what simulating every candidate chooses (--top past the candidates:
// nothing can be pruned), on random small cases and on the shipped mixture-of-experts examples;
// and the memory floor the simulate pass checks before simulating never exceeds the simulated
// peak, and the search's rejections by it are the simulator's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "formats/formats.h"
#include "planner/explain.h"
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

// The fullest rank's simulated peak.
Bytes SimulatedPeak(const SimResult& r) {
  Bytes most = 0;
  for (const StageResult& s : r.per_rank) most = std::max(most, s.peak_memory_bytes);
  return most;
}

// Checks SimulatedMemoryFloor against the simulation for every candidate of `all`, partitioned
// time-balanced (no memory limit): the floor at most the simulated peak of its rank and of the
// fullest rank, its static part (weights with ZeRO-3's gathered copies, gradients, optimizer
// state) that rank's simulated one exactly, PipeDream's stashed weight versions left out. Counts
// the candidates checked, and those whose floor is within 10% of the simulated peak in `tight`.
void ExpectFloorsUnderPeaks(const Model& model, const Cluster& cluster, std::vector<Candidate> all,
                            const std::string& what, int* checked, int* tight) {
  PartitionCache cache(model, cluster);
  for (Candidate& c : all) {
    Rejection why;
    if (!PartitionForMemory(model, cluster, /*capacity=*/0, &c, &why, &cache)) continue;
    Result<CandidateSetup> setup = SetUpCandidate(model, cluster, c, /*record_timeline=*/false);
    if (!setup.ok()) continue;
    Result<SimResult> r = Simulate(model, cluster, setup->schedule, setup->options);
    if (!r.ok()) continue;  // refused by the simulator: proves nothing
    const MemoryFloor floor = SimulatedMemoryFloor(model, cluster, c, setup->schedule);
    // The search's cached table (made without the schedule's split backward) gives the same.
    EXPECT_EQ(SimulatedMemoryFloor(model, cluster, c, setup->schedule, &cache.Table(c)).bytes,
              floor.bytes)
        << what << ": " << c.Label();
    const StageResult& rank = r->per_rank[floor.rank];
    EXPECT_LE(floor.bytes, rank.peak_memory_bytes) << what << ": " << c.Label();
    EXPECT_LE(floor.bytes, SimulatedPeak(*r)) << what << ": " << c.Label();
    // PipeDream's stashed weight versions are left out of the floor.
    EXPECT_EQ(floor.parts.weights, rank.memory.weights + rank.memory.gathered_weights)
        << what << ": " << c.Label();
    // --sharded-state fsdp2: the gradients are in the floor where its fullest point has them
    // (from the rank's first backward's end), not in its static part.
    if (c.config.memory.Fsdp2()) {
      EXPECT_LE(floor.parts.gradients, rank.memory.gradients) << what << ": " << c.Label();
    } else {
      EXPECT_EQ(floor.parts.gradients, rank.memory.gradients) << what << ": " << c.Label();
    }
    EXPECT_EQ(floor.parts.optimizer, rank.memory.optimizer) << what << ": " << c.Label();
    EXPECT_LE(floor.parts.activations, rank.memory.activations_peak) << what << ": " << c.Label();
    EXPECT_GT(floor.bytes, 0) << what << ": " << c.Label();
    ++*checked;
    *tight += floor.bytes * 10 >= SimulatedPeak(*r) * 9;
  }
}

// Random models (4-10 layers) on the ideal cluster and h100-sxm in turn, 2, 4 or 8 GPUs, every
// built-in schedule, micro-batch sizes 1 and 2, t 1 and 2, `set` choosing the memory settings:
// `cases` cases of at most 30 candidates each (`check` looks at each case's), every floor checked
// against its simulated peak. Returns the candidates checked; `tight` counts floors within 10%.
int FloorsUnderPeaksOnRandomModels(uint64_t seed, int cases, const std::string& label,
                                   const std::function<void(PlannerOptions*)>& set,
                                   const std::function<void(const Candidate&)>& check, int* tight) {
  std::mt19937_64 engine(seed);
  int checked = 0;
  for (int i = 0; i < cases; ++i) {
    const Model model = RandomModel(engine, static_cast<int>(Between(engine, 4, 10)));
    const Cluster cluster = i % 2 == 0 ? IdealCluster() : *ClusterPreset("h100-sxm");
    PlannerOptions o;
    o.gpus = static_cast<int>(std::vector<int64_t>{2, 4, 8}[Between(engine, 0, 2)]);
    o.schedules = BuiltinScheduleKinds();
    o.microbatch_sizes = {1, 2};
    o.tensor_parallel = {1, 2};
    set(&o);
    EXPECT_TRUE(o.Validate().ok()) << o.Validate().message();
    std::vector<Rejection> rejected;
    std::vector<Candidate> all =
        Enumerate(model, cluster, o, o.gpus * Between(engine, 1, 8) * 2, &rejected);
    for (const Candidate& c : all) check(c);
    std::shuffle(all.begin(), all.end(), engine);
    if (all.size() > 30) all.resize(30);
    ExpectFloorsUnderPeaks(model, cluster, std::move(all), label + " case " + std::to_string(i),
                           &checked, tight);
  }
  return checked;
}

// Given random models, every recomputation and ZeRO levels 0, 1 and 3 (resharding on and off),
// when each candidate is partitioned and simulated, then its memory floor is at most the
// simulated peak.
TEST(MemoryFloor, NeverAboveTheSimulatedPeakOnRandomModels) {
  int tight = 0;
  const int checked = FloorsUnderPeaksOnRandomModels(
      20261204, 40, "zero",
      [](PlannerOptions* o) {
        o->zero_levels = {0, 1, 3};
      },
      [](const Candidate&) {}, &tight);
  EXPECT_GE(checked, 800);
  std::printf("[ floor ] %d candidates; memory floor within 10%% of the simulated peak for %d\n",
              checked, tight);
}

// The same under --sharded-state fsdp2 (ZeRO 3 alone, resharding on and off, shard groups): the
// gradients join the floor's level at each rank's first backward's end, as the engine's sweep
// adds them, so the floor stays at most the simulated peak.
TEST(MemoryFloor, NeverAboveTheSimulatedPeakOnRandomModelsUnderFsdp2) {
  int tight = 0;
  const int checked = FloorsUnderPeaksOnRandomModels(
      20261205, 30, "fsdp2",
      [](PlannerOptions* o) { o->memory.sharded_state = ShardedState::kFsdp2; },
      [](const Candidate& c) {
        EXPECT_EQ(c.config.memory.zero, 3) << c.Label();
        EXPECT_TRUE(c.config.memory.Fsdp2()) << c.Label();
      },
      &tight);
  EXPECT_GE(checked, 400);
  std::printf(
      "[ floor ] fsdp2: %d candidates; memory floor within 10%% of the simulated peak "
      "for %d\n",
      checked, tight);
}

// The shipped mixture-of-experts examples (expert parallelism, DualPipe's pairs, per-op
// recomputation keeping the all-to-all outputs), DeepSeek-V3 on 256 GPUs included.
TEST(MemoryFloor, NeverAboveTheSimulatedPeakOnMoeExamples) {
  const Cluster h100 = *ClusterPreset("h100-sxm");
  std::mt19937_64 engine(26);
  int checked = 0, tight = 0;
  for (const auto& [file, gpus] : std::vector<std::pair<std::string, int>>{
           {"mixtral-8x7b.json", 16}, {"qwen3-30b-a3b.json", 32}, {"deepseek-v3.json", 256}}) {
    const Model model = Example(file);
    ASSERT_FALSE(model.layers.empty()) << file;
    PlannerOptions o;
    o.gpus = gpus;
    o.schedules = BuiltinScheduleKinds();
    o.microbatch_sizes = {1};
    std::vector<Rejection> rejected;
    std::vector<Candidate> all =
        Enumerate(model, h100, o, *model.global_batch / (gpus >= 256 ? 4 : 1), &rejected);
    std::shuffle(all.begin(), all.end(), engine);
    if (all.size() > 60) all.resize(60);
    ExpectFloorsUnderPeaks(model, h100, std::move(all), file, &checked, &tight);
  }
  EXPECT_GE(checked, 120);
  std::printf("[ floor ] MoE examples: %d candidates; floor within 10%% for %d\n", checked, tight);
}

// The MoE examples under --sharded-state fsdp2 (ZeRO 3 alone).
TEST(MemoryFloor, NeverAboveTheSimulatedPeakOnMoeExamplesUnderFsdp2) {
  const Cluster h100 = *ClusterPreset("h100-sxm");
  std::mt19937_64 engine(27);
  int checked = 0, tight = 0;
  for (const auto& [file, gpus] : std::vector<std::pair<std::string, int>>{
           {"mixtral-8x7b.json", 16}, {"qwen3-30b-a3b.json", 32}}) {
    const Model model = Example(file);
    ASSERT_FALSE(model.layers.empty()) << file;
    PlannerOptions o;
    o.gpus = gpus;
    o.schedules = BuiltinScheduleKinds();
    o.microbatch_sizes = {1};
    o.memory.sharded_state = ShardedState::kFsdp2;
    std::vector<Rejection> rejected;
    std::vector<Candidate> all = Enumerate(model, h100, o, *model.global_batch, &rejected);
    std::shuffle(all.begin(), all.end(), engine);
    if (all.size() > 40) all.resize(40);
    ExpectFloorsUnderPeaks(model, h100, std::move(all), std::string("fsdp2 ") + file, &checked,
                           &tight);
  }
  EXPECT_GE(checked, 40);
  std::printf("[ floor ] MoE examples, fsdp2: %d candidates; floor within 10%% for %d\n", checked,
              tight);
}

// The hand-worked floors' model: four layers of 100 M parameters, 64 MiB of activations and
// 8 MiB of workspace each, no output kept.
Model FourLayersOf100MParameters() {
  Model model = test_util::UniformModel(4, kMs, 2 * kMs);
  for (Layer& l : model.layers) {
    l.parameters = 100'000'000;
    for (LayerProfile& p : l.profiles) {
      p.activation_bytes = 64 * kMiB;
      p.workspace_bytes = 8 * kMiB;
      p.output_bytes = 0;
    }
  }
  return model;
}

// Hand-worked: four layers of 64 MiB activations, 8 MiB workspace and 100 M parameters, under
// 1F1B on p = 2, m = 4, two layers a stage, on the ideal cluster (no limit, no buffers that
// matter). Rank 0 holds min(p, m) = 2 micro-batches' activations at its second forward: 2 x 2 x
// 64 MiB = 256 MiB, plus that forward's 8 MiB of workspace; rank 1 one micro-batch, 128 + 8 MiB.
// The static part is the simulator's: 100 M parameters a layer at 18 bytes each (2 of bf16
// weights, 4 of fp32 gradients, 12 of Adam state) x 2 layers = 3.6 GB.
TEST(MemoryFloor, OneFOneBWorkedByHand) {
  const Model model = FourLayersOf100MParameters();
  Candidate c;
  c.config.layout.pipeline_stages = 2;
  c.config.schedule = ScheduleKind::k1F1B;
  c.config.microbatches = 4;
  c.partition = {{0, 1}, {2, 3}};
  const Cluster cluster = IdealCluster();
  Result<CandidateSetup> setup = SetUpCandidate(model, cluster, c, false);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  const MemoryFloor floor = SimulatedMemoryFloor(model, cluster, c, setup->schedule);
  EXPECT_EQ(floor.rank, 0);
  EXPECT_EQ(floor.parts.activations, 256 * kMiB);
  EXPECT_EQ(floor.parts.other, 8 * kMiB);
  EXPECT_EQ(floor.parts.weights + floor.parts.gradients + floor.parts.optimizer,
            Bytes{2} * 100'000'000 * 18);
  Result<SimResult> r = Simulate(model, cluster, setup->schedule, setup->options);
  ASSERT_TRUE(r.ok()) << r.status().message();
  // No transfers hold buffers here (no output bytes): the floor is the simulated peak.
  EXPECT_EQ(floor.bytes, r->per_rank[0].peak_memory_bytes);
}

// Hand-worked under --sharded-state fsdp2: the model and schedule above at ZeRO 3 over d = 2
// (4 GPUs). Per rank 2 layers x 100 M parameters: the fp32 shard 4 B and Adam's moments 8 B, / 2:
// 1.2 GB static; the gradients, 4 B / 2 = 0.4 GB, made at the rank's first backward's end;
// ZeRO-3's gathered copies, the largest layer twice at 2 B: 0.4 GB. Rank 0 (F0 F1 B0 F2 B1 F3 B2
// B3): its fullest point is F2's start, after B0 made the gradients: 2 micro-batches' activations
// (256 MiB) + 8 MiB of workspace + 0.4 GB of gradients. On the ideal cluster (no buffers) the
// floor is the simulated peak: 1.2 + 0.4 + 0.4 GB + 264 MiB.
TEST(MemoryFloor, OneFOneBUnderFsdp2WorkedByHand) {
  const Model model = FourLayersOf100MParameters();
  Candidate c;
  c.config.layout.pipeline_stages = 2;
  c.config.layout.data_parallel = 2;
  c.config.schedule = ScheduleKind::k1F1B;
  c.config.microbatches = 4;
  c.config.memory.zero = 3;
  c.config.memory.sharded_state = ShardedState::kFsdp2;
  c.partition = {{0, 1}, {2, 3}};
  const Cluster cluster = IdealCluster();
  Result<CandidateSetup> setup = SetUpCandidate(model, cluster, c, false);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  const MemoryFloor floor = SimulatedMemoryFloor(model, cluster, c, setup->schedule);
  EXPECT_EQ(floor.rank, 0);
  EXPECT_EQ(floor.parts.activations, 256 * kMiB);
  EXPECT_EQ(floor.parts.other, 8 * kMiB);
  EXPECT_EQ(floor.parts.gradients, Bytes{400'000'000});
  EXPECT_EQ(floor.parts.optimizer, Bytes{800'000'000});
  EXPECT_EQ(floor.parts.weights, Bytes{400'000'000} + Bytes{400'000'000});
  EXPECT_EQ(floor.bytes, Bytes{2'000'000'000} + 264 * kMiB);
  Result<SimResult> r = Simulate(model, cluster, setup->schedule, setup->options);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(floor.bytes, r->per_rank[0].peak_memory_bytes);
}

// Hand-worked, ZeRO 3 with expert parallelism: two MoE layers of 50M parameters (40M of them 8
// routed experts), one stage, d = 4, resharding on and off. The floor's static part is the
// simulator's: 100M x 18 B / 4 = 450 MB sharded, plus the gathered copies of the local experts
// only (StageGatheredOf): at ep 2 (edp 2) two layers of 10M + 20M at 2 B = 120 MB, at ep 4 (edp
// 1, none gathered) 2 x 10M x 2 B = 40 MB; without resharding the stage's, the same here.
TEST(MemoryFloor, ZeroThreeWithExpertParallelismGathersTheLocalExpertsOnly) {
  Model model = test_util::UniformModel(2, kMs, 2 * kMs, 0, 0, 50'000'000);
  model.sequence_length = 1024;
  for (Layer& l : model.layers) {
    l.moe = MoeRouting{.experts = 8, .top_k = 2, .hidden = 1024, .expert_parameters = 40'000'000};
  }
  const Cluster cluster = IdealCluster();
  for (const auto& [ep, gathered] :
       std::vector<std::pair<int, Bytes>>{{2, 120'000'000}, {4, 40'000'000}}) {
    for (bool reshard : {true, false}) {
      Candidate c;
      c.config.layout.data_parallel = 4;
      c.config.layout.expert_parallel = ep;
      c.config.memory.zero = 3;
      c.config.memory.sharding.reshard_after_forward = reshard;
      c.config.schedule = ScheduleKind::k1F1B;
      c.config.microbatches = 2;
      c.partition = {{0, 1}};
      Result<CandidateSetup> setup = SetUpCandidate(model, cluster, c, false);
      ASSERT_TRUE(setup.ok()) << setup.status().message();
      const MemoryFloor floor = SimulatedMemoryFloor(model, cluster, c, setup->schedule);
      Result<SimResult> r = Simulate(model, cluster, setup->schedule, setup->options);
      ASSERT_TRUE(r.ok()) << r.status().message();
      const MemoryBreakdown& m = r->per_rank[0].memory;
      EXPECT_EQ(m.gathered_weights, gathered) << "ep " << ep << " reshard " << reshard;
      EXPECT_EQ(floor.parts.weights, m.weights + m.gathered_weights) << "ep " << ep;
      EXPECT_EQ(floor.parts.weights + floor.parts.gradients + floor.parts.optimizer,
                450'000'000 + gathered)
          << "ep " << ep << " reshard " << reshard;
      EXPECT_LE(floor.bytes, r->per_rank[0].peak_memory_bytes) << "ep " << ep;
    }
  }
}

// Given DeepSeek-V3 on 256 GPUs of h100-sxm, micro-batch size 1 (where most candidates the
// simulate pass receives are over the limit), when the planner searches, then every candidate it
// rejected by the memory floor unsimulated is over the limit when simulated, with a simulated
// ratio at least its floor's, and the report's closest miss and examples carry simulated figures:
// the report is that of simulating them all.
TEST(MemoryFloor, FloorRejectionsAreTheSimulatorsAndTheShownOnesAreSimulated) {
  const Cluster h100 = *ClusterPreset("h100-sxm");
  const Model model = Example("deepseek-v3.json");
  ASSERT_FALSE(model.layers.empty());
  PlannerOptions o;
  o.gpus = 256;
  o.global_batch = 1024;
  o.microbatch_sizes = {1};
  o.threads = 2;
  Result<PlanReport> report = RunPlanner(model, h100, o);
  ASSERT_TRUE(report.ok()) << report.status().message();
  const Bytes capacity = MemoryLimitBytes(h100.gpu);
  int floored = 0;
  std::string first;
  for (const Rejection& r : report->rejected) {
    if (!r.memory_floor) continue;
    ASSERT_EQ(r.reason, RejectReason::kOutOfMemory);
    if (first.empty()) first = r.candidate.Label() + ": " + r.Detail();
    if (++floored > 40) continue;  // the first 40 simulated: enough, and quick
    Result<SimResult> sim = SimulateCandidate(model, h100, r.candidate, false);
    ASSERT_TRUE(sim.ok()) << r.candidate.Label() << ": " << sim.status().message();
    EXPECT_GT(SimulatedPeak(*sim), capacity) << r.candidate.Label();
    EXPECT_LE(r.memory_ratio,
              static_cast<double>(SimulatedPeak(*sim)) / static_cast<double>(capacity))
        << r.candidate.Label();
  }
  EXPECT_GT(floored, 0);
  // Shown alone, a floor rejection is settled to the simulator's words and ratio.
  std::vector<Rejection> alone;
  for (const Rejection& r : report->rejected) {
    if (r.memory_floor && alone.size() < 2) alone.push_back(r);
  }
  ASSERT_EQ(alone.size(), 2u);
  const double floor_ratio = alone[0].memory_ratio;
  SettleShownMemoryFloors(model, h100, &alone);
  for (const Rejection& r : alone) {
    EXPECT_FALSE(r.memory_floor) << r.Detail();
    EXPECT_NE(r.Detail().find("(simulated peak)"), std::string::npos) << r.Detail();
  }
  Result<SimResult> first_sim = SimulateCandidate(model, h100, alone[0].candidate, false);
  ASSERT_TRUE(first_sim.ok());
  EXPECT_EQ(alone[0].memory_ratio,
            static_cast<double>(SimulatedPeak(*first_sim)) / static_cast<double>(capacity));
  EXPECT_LE(floor_ratio, alone[0].memory_ratio);
  for (const RejectGroup& g : GroupRejections(report->rejected)) {
    if (g.closest != nullptr) {
      EXPECT_FALSE(g.closest->memory_floor) << g.closest->Detail();
    }
    for (const Rejection* r : g.examples) EXPECT_FALSE(r->memory_floor) << r->Detail();
  }
  std::printf(
      "[ floor ] deepseek-v3 on 256: %d rejected by the memory floor unsimulated, e.g. %s\n",
      floored, first.c_str());
}

}  // namespace
}  // namespace pipecast::passes
