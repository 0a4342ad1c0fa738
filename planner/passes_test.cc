#include "planner/passes.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "testing/sim_test_util.h"

namespace pipecast::passes {
namespace {

using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;
using ::testing::HasSubstr;

constexpr TimeNs kF = 1000 * kNsPerUs;
constexpr TimeNs kB = 2000 * kNsPerUs;

PlannerOptions Options(int gpus) {
  PlannerOptions o;
  o.gpus = gpus;
  o.schedules = {ScheduleKind::kNaive, ScheduleKind::kGPipe, ScheduleKind::k1F1B};
  o.microbatch_sizes = {1, 2};
  o.threads = 2;
  return o;
}

TEST(PassEnumerate, DivisorsSizesSchedulesAndRecompute) {
  Model model = UniformModel(8, kF, kB);
  std::vector<Rejection> rejected;
  std::vector<Candidate> c = Enumerate(model, IdealCluster(), Options(8), 16, &rejected);
  // p in {1,2,4,8} x 2 sizes x 3 schedules x 2 recompute modes, and ZeRO
  // 0, 1 and 3 where d > 1 (p = 1, 2, 4), level 3 with and without resharding
  // after the forward (the replicas share one node: no hybrid sharding); at p = 1
  // (no pipeline) 1f1b stands for the three schedules:
  // (4 x 1 + 4 x 3 + 4 x 3 + 1 x 3) x 2 x 2 = 124.
  EXPECT_EQ(c.size(), 124u);
  EXPECT_EQ(CountConfigurations(model, IdealCluster(), Options(8)), 124);
  EXPECT_TRUE(rejected.empty());
  for (const Candidate& x : c) {
    EXPECT_EQ(x.config.layout.pipeline_stages * x.config.layout.data_parallel, 8);
    EXPECT_EQ(
        int64_t{x.config.microbatch_size} * x.config.microbatches * x.config.layout.data_parallel,
        16);
  }
}

TEST(PassEnumerate, AutoSearchesOpWhereTheModelGivesItAndListsAreTriedAsGiven) {
  Model model = UniformModel(8, kF, kB);
  PlannerOptions o = Options(8);
  // Auto: off and full (no attention core, no per-op fields).
  auto spec = [](const std::vector<RecomputeChoice>& modes) {
    std::string out;
    for (const RecomputeChoice& c : modes) out += RecomputeSpec(c.recompute, c.layers) + " ";
    return out;
  };
  EXPECT_EQ(spec(RecomputeModes(model, o)), "off full ");
  // With the per-op policy's fields, auto adds op.
  for (Layer& l : model.layers) {
    l.profiles[0].op_saved_bytes = l.profiles[0].activation_bytes / 2;
    l.profiles[0].op_recompute_ns = kF / 4;
  }
  EXPECT_EQ(spec(RecomputeModes(model, o)), "off full op ");
  // A list is searched as given: every candidate of the 124 above comes in
  // three recomputations instead of two.
  o.recompute = RecomputeMode::kListed;
  o.recompute_listed = {{Recompute::kEvery, {2}},
                        {Recompute::kOp, {}},
                        {Recompute::kFull, {.method = RecomputeMethod::kUniform, .num_layers = 2}}};
  EXPECT_EQ(spec(RecomputeModes(model, o)), "every:2 op full-uniform:2 ");
  std::vector<Rejection> rejected;
  std::vector<Candidate> c = Enumerate(model, IdealCluster(), o, 16, &rejected);
  EXPECT_EQ(c.size(), 186u);
  EXPECT_EQ(std::count_if(c.begin(), c.end(),
                          [](const Candidate& x) {
                            return x.config.recompute == Recompute::kEvery &&
                                   x.config.recompute_layers.every == 2;
                          }),
            62);
}

TEST(PassEnumerate, ShardingIsSearchedWhereItMattersAndPinnedByTheFlags) {
  // Given 16 GPUs in nodes of 8, p = 1 (d = 16: the replicas span two nodes), one schedule,
  // size and recomputation, ZeRO 0, 2 and 3, global batch 32 (m = 2)
  Model model = UniformModel(8, kF, kB);
  PlannerOptions o = Options(16);
  o.pipeline_stages = 1;
  o.zero_levels = {0, 2, 3};
  o.schedules = {ScheduleKind::k1F1B};
  o.microbatch_sizes = {1};
  o.recompute = RecomputeMode::kOff;
  const Cluster cluster = IdealCluster();  // 8 GPUs per node
  auto labels = [&](const PlannerOptions& opts, std::vector<Rejection>* rejected) {
    std::vector<std::string> out;
    for (const Candidate& c : Enumerate(model, cluster, opts, 32, rejected)) {
      out.push_back(
          fmt::format("zero={} {}", c.config.memory.zero, ShardingLabel(c.config.memory.sharding)));
    }
    return out;
  };
  std::vector<Rejection> rejected;
  // then level 0 has the defaults alone; level 2 all 16 and one node's 8 (HSDP); level 3 each
  // of those with and without resharding: 1 + 2 + 4 = 7
  EXPECT_EQ(labels(o, &rejected),
            (std::vector<std::string>{"zero=0 ", "zero=2 ", "zero=2 shard-group=8", "zero=3 ",
                                      "zero=3 shard-group=8", "zero=3 reshard=off",
                                      "zero=3 reshard=off shard-group=8"}));
  EXPECT_EQ(CountConfigurations(model, cluster, o), 7);
  // Pinned: FULL_SHARD over all replicas, reduced once per step, no prefetch
  o.sharding.reshard_after_forward = PlannerOptions::Choice::kOn;
  o.sharding.reduce_every_microbatch = PlannerOptions::Choice::kOff;
  o.sharding.prefetch = false;
  o.sharding.shard_group = 0;
  EXPECT_EQ(labels(o, &rejected),
            (std::vector<std::string>{"zero=0 ", "zero=2 prefetch=off reduce=once",
                                      "zero=3 prefetch=off reduce=once"}));
  // Both ways of reducing searched: level 2 and 3 twice each
  o.sharding.reduce_every_microbatch = PlannerOptions::Choice::kAuto;
  EXPECT_EQ(labels(o, &rejected).size(), 5u);
  // A pinned group that does not divide d is refused, saying why
  o.sharding.shard_group = 3;
  EXPECT_TRUE(rejected.empty());
  EXPECT_EQ(labels(o, &rejected).size(), 1u);
  ASSERT_EQ(rejected.size(), 4u);
  EXPECT_THAT(rejected[0].detail,
              HasSubstr("--shard-group 3 does not divide the 16 data-parallel replicas"));
  // Inside one node (8 GPUs, d = 8) no hybrid group is tried
  o = Options(8);
  o.pipeline_stages = 1;
  o.zero_levels = {3};
  o.schedules = {ScheduleKind::k1F1B};
  o.microbatch_sizes = {1};
  o.recompute = RecomputeMode::kOff;
  rejected.clear();
  EXPECT_EQ(labels(o, &rejected), (std::vector<std::string>{"zero=3 ", "zero=3 reshard=off"}));
}

TEST(PassEnumerate, StagesNeverExceedLayersAndBatchMustDivide) {
  Model model = UniformModel(3, kF, kB);
  std::vector<Rejection> rejected;
  PlannerOptions o = Options(6);
  o.recompute = RecomputeMode::kOff;
  std::vector<Candidate> c = Enumerate(model, IdealCluster(), o, 6, &rejected);
  for (const Candidate& x : c) EXPECT_LE(x.config.layout.pipeline_stages, 3);
  // p=1 (d=6) and p=3 (d=2) with mbs 2: 6 % 12 and 6 % 4 fail; p=2 (d=3) with mbs 2: 6 % 6 ok.
  ASSERT_FALSE(rejected.empty());
  EXPECT_EQ(rejected[0].reason, RejectReason::kBatchNotDivisible);
  EXPECT_THAT(rejected[0].detail, HasSubstr("not a multiple of micro-batch size 2"));
}

TEST(PassPartition, InflightByScheduleAndStage) {
  EXPECT_EQ(InflightMicrobatches(ScheduleKind::kNaive, 0, 4, 8), 1);
  EXPECT_EQ(InflightMicrobatches(ScheduleKind::kGPipe, 3, 4, 8), 8);
  EXPECT_EQ(InflightMicrobatches(ScheduleKind::k1F1B, 0, 4, 8), 4);
  EXPECT_EQ(InflightMicrobatches(ScheduleKind::k1F1B, 3, 4, 8), 1);
  EXPECT_EQ(InflightMicrobatches(ScheduleKind::k1F1B, 0, 4, 2), 2);
}

TEST(PassPartition, EstimateMatchesTheSimulatedPeakWithoutCommBuffers) {
  Model model = UniformModel(8, kF, kB, 300 * kMiB, 0, 10'000'000);
  model.layers[2].profiles[0].workspace_bytes = 5 * kMiB;
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    Candidate c;
    c.config.layout.pipeline_stages = 4;
    c.config.schedule = kind;
    c.config.microbatches = 6;
    c.partition = {{0, 0}, {1, 3}, {4, 6}, {7, 7}};
    auto sched = MakeSchedule(kind, 4, 6);
    SimOptions opts = CandidateSimOptions(c);
    auto r = Simulate(model, IdealCluster(), *sched, opts);
    ASSERT_TRUE(r.ok());
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(EstimateStageMemory(model, IdealCluster(), c, s, c.partition[s].first_layer,
                                    c.partition[s].last_layer),
                r->per_rank[s].peak_memory_bytes)
          << ScheduleKindName(kind) << " stage " << s;
    }
  }
}

TEST(PassPartition, ZeroBubbleEstimateCountsWhatWKeepsAfterTheInputGradient) {
  // Given 4 layers of 300 MiB whose W keeps 100 MiB, one per stage, and
  // ZB-H2 on 4 stages with 8 micro-batches.
  Model model = UniformModel(4, kF, kB, 300 * kMiB);
  for (Layer& l : model.layers) {
    l.profiles[0].backward_weight_ns = kB / 2;
    l.profiles[0].weight_grad_bytes = 100 * kMiB;
  }
  Candidate c;
  c.config.layout.pipeline_stages = 4;
  c.config.schedule = ScheduleKind::kZBH2;
  c.config.microbatches = 8;
  // Then stage s holds 2(p-s)-1 micro-batches before their I and the rest
  // of its 2p-1 = 7 with W's bytes only (Qi et al. section 2.3):
  // stage 0: 7 x 300; stage 1: 5 x 300 + 2 x 100; stage 3: 1 x 300 + 6 x 100 MiB.
  EXPECT_EQ(EstimateStageMemory(model, IdealCluster(), c, 0, 0, 0), 2100 * kMiB);
  EXPECT_EQ(EstimateStageMemory(model, IdealCluster(), c, 1, 1, 1), 1700 * kMiB);
  EXPECT_EQ(EstimateStageMemory(model, IdealCluster(), c, 3, 3, 3), 900 * kMiB);
}

// Brute force: the smallest bottleneck over splits whose stages all fit.
TimeNs BestFitting(const Model& model, const Candidate& c, Bytes cap, int stage, int first) {
  const int n = static_cast<int>(model.layers.size());
  const int p = c.config.layout.pipeline_stages;
  TimeNs best = std::numeric_limits<TimeNs>::max();
  for (int last = first; last <= n - (p - stage); ++last) {
    if (stage == p - 1 && last != n - 1) continue;
    if (EstimateStageMemory(model, IdealCluster(), c, stage, first, last) > cap) continue;
    TimeNs t = 0;
    for (int l = first; l <= last; ++l)
      t += model.layers[l].profiles[0].forward_ns + model.layers[l].profiles[0].backward_ns;
    TimeNs rest = stage == p - 1 ? 0 : BestFitting(model, c, cap, stage + 1, last + 1);
    if (rest == std::numeric_limits<TimeNs>::max()) continue;
    best = std::min(best, std::max(t, rest));
  }
  return best;
}

TEST(PassPartition, MemoryAwareSplitMatchesBruteForce) {
  // Unequal layers; 1F1B: stage 0 holds 4 micro-batches, so it must stay small.
  Model model = UniformModel(8, kF, kB, 1 * kGiB, 0, 100'000'000);
  for (int l = 0; l < 8; ++l) model.layers[l].profiles[0].forward_ns = kF * (1 + l % 3);
  Candidate c;
  c.config.layout.pipeline_stages = 4;
  c.config.schedule = ScheduleKind::k1F1B;
  c.config.microbatches = 8;
  for (Bytes cap : {Bytes{6} * kGiB, Bytes{8} * kGiB, Bytes{12} * kGiB, Bytes{100} * kGiB}) {
    Rejection why;
    bool ok = PartitionForMemory(model, IdealCluster(), cap, &c, &why);
    TimeNs brute = BestFitting(model, c, cap, 0, 0);
    ASSERT_EQ(ok, brute != std::numeric_limits<TimeNs>::max()) << ToGiB(cap);
    if (!ok) continue;
    TimeNs worst = 0;
    for (int s = 0; s < 4; ++s) {
      const StageLayers& st = c.partition[s];
      EXPECT_LE(EstimateStageMemory(model, IdealCluster(), c, s, st.first_layer, st.last_layer),
                cap);
      TimeNs t = 0;
      for (int l = st.first_layer; l <= st.last_layer; ++l) {
        t += model.layers[l].profiles[0].forward_ns + model.layers[l].profiles[0].backward_ns;
      }
      worst = std::max(worst, t);
    }
    EXPECT_EQ(worst, brute) << ToGiB(cap);
  }
}

TEST(PassPartition, NothingFitsNamesTheClosestMiss) {
  // 8 layers of 1e9 parameters = 18 GB of state each (12 of them optimizer
  // state); 2 stages hold 4 each.
  Model model = UniformModel(8, kF, kB, 0, 0, 1'000'000'000);
  Candidate c;
  c.config.layout.pipeline_stages = 2;
  c.config.schedule = ScheduleKind::k1F1B;
  c.config.microbatches = 4;
  Rejection why;
  ASSERT_FALSE(PartitionForMemory(model, IdealCluster(), 40 * kGiB, &c, &why));
  EXPECT_EQ(why.reason, RejectReason::kOutOfMemory);
  EXPECT_THAT(why.detail, HasSubstr("needs 67.06 GiB of the 40.00 GiB limit"));  // 72e9 bytes
  EXPECT_THAT(why.detail, HasSubstr("largest part: optimizer state 44.7 GiB"));  // 48e9
  EXPECT_NEAR(why.memory_ratio, 72e9 / (40.0 * kGiB), 1e-9);
}

TEST(PassPrune, BoundIsExactForEqualStagesOnIdealAndNeverAboveTheSimulation) {
  Model model = UniformModel(8, kF, kB);
  std::vector<Rejection> rejected;
  PlannerOptions o = Options(8);
  std::vector<Candidate> cands = Enumerate(model, IdealCluster(), o, 16, &rejected);
  for (Candidate& c : cands) {
    Rejection why;
    ASSERT_TRUE(PartitionForMemory(model, IdealCluster(), 0, &c, &why));
  }
  Prune(model, IdealCluster(), &cands);
  for (size_t i = 1; i < cands.size(); ++i) {
    EXPECT_LE(cands[i - 1].lower_bound_ns, cands[i].lower_bound_ns);
  }
  for (const Candidate& c : cands) {
    auto sched =
        MakeSchedule(c.config.schedule, c.config.layout.pipeline_stages, c.config.microbatches);
    auto r = Simulate(model, IdealCluster(), *sched, CandidateSimOptions(c));
    ASSERT_TRUE(r.ok());
    EXPECT_LE(c.lower_bound_ns, r->iteration_ns) << c.Label();
    if (c.config.schedule != ScheduleKind::kNaive && c.config.recompute == Recompute::kOff) {
      EXPECT_EQ(c.lower_bound_ns, r->iteration_ns) << c.Label();  // (m+p-1)(F+B)
    }
  }
}

TEST(PassSimulate, PrunesOnlyWhatCannotReachTheTop) {
  Model model = UniformModel(8, kF, kB);
  std::vector<Rejection> rejected;
  PlannerOptions o = Options(8);
  o.top_k = 1;
  std::vector<Candidate> cands = Enumerate(model, IdealCluster(), o, 16, &rejected);
  for (Candidate& c : cands) {
    Rejection why;
    ASSERT_TRUE(PartitionForMemory(model, IdealCluster(), 0, &c, &why));
  }
  Prune(model, IdealCluster(), &cands);
  std::vector<Candidate> all = cands;
  SimulateAll(model, IdealCluster(), o, &cands, &rejected);
  Rank(&cands);
  ASSERT_GE(cands.size(), 2u);
  // Whatever was pruned has a bound above the second best simulated time.
  for (const Rejection& r : rejected) {
    ASSERT_EQ(r.reason, RejectReason::kPruned);
    EXPECT_GT(r.candidate.lower_bound_ns, cands[1].result->iteration_ns);
  }
  EXPECT_EQ(cands.size() + rejected.size(), all.size());
}

TEST(PassSimulate, SameOutcomeOnOneThreadAndTwo) {
  Model model = UniformModel(8, kF, kB, 10 * kMiB, kMiB, 1000);
  Cluster c = IdealCluster();
  c.intra_node = Link{10.0, 5.0};
  PlannerOptions o = Options(8);
  auto run = [&](int threads) {
    o.threads = threads;
    std::vector<Rejection> rejected;
    std::vector<Candidate> cands = Enumerate(model, IdealCluster(), o, 32, &rejected);
    for (Candidate& x : cands) {
      Rejection why;
      EXPECT_TRUE(PartitionForMemory(model, IdealCluster(), 0, &x, &why));
    }
    Prune(model, IdealCluster(), &cands);
    SimulateAll(model, c, o, &cands, &rejected);
    Rank(&cands);
    std::vector<std::string> labels;
    for (const Candidate& x : cands) labels.push_back(x.Label());
    return labels;
  };
  EXPECT_EQ(run(1), run(2));
}

}  // namespace
}  // namespace pipecast::passes
