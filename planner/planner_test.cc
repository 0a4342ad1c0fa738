#include "planner/planner.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/result_json.h"
#include "planner/chosen_plan.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;
using ::testing::HasSubstr;

constexpr TimeNs kF = 1000 * kNsPerUs;
constexpr TimeNs kB = 2000 * kNsPerUs;

// The planner's defaults on `gpus` GPUs with `global_batch` samples.
PlannerOptions OnGpus(int gpus, int64_t global_batch) {
  PlannerOptions o;
  o.gpus = gpus;
  o.global_batch = global_batch;
  return o;
}

TEST(Planner, IdealClusterPicksPureDataParallelAtTheClosedForm) {
  // With free communication and unlimited memory, p=1 has no bubble: each of
  // the 8 replicas runs m = 32/8 = 4 micro-batches through 8 layers:
  // 4 x 8 x 3 ms = 96 ms for 32 samples.
  Model model = UniformModel(8, kF, kB);
  auto r = RunPlanner(model, IdealCluster(), OnGpus(8, 32));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->Feasible());
  const Candidate& best = r->ranked[0];
  EXPECT_EQ(best.config.layout.pipeline_stages, 1);
  EXPECT_EQ(best.config.layout.data_parallel, 8);
  EXPECT_EQ(best.result->iteration_ns, 96 * kF);
  EXPECT_NEAR(best.result->samples_per_s, 32 / 0.096, 1e-9);
  // Every runner-up with p > 1 pays (p-1)/(m+p-1) of bubble (GPipe/1F1B).
  for (const Candidate& c : r->ranked) {
    if ((c.config.schedule != ScheduleKind::kGPipe && c.config.schedule != ScheduleKind::k1F1B) ||
        c.config.recompute != Recompute::kOff) {
      continue;
    }
    const int p = c.config.layout.pipeline_stages, m = c.config.microbatches;
    EXPECT_NEAR(c.result->bubble_ratio, (p - 1.0) / (m + p - 1), 1e-12) << c.Label();
  }
  EXPECT_FALSE(r->sweep.empty());
}

// A pruned rejection keeps its numbers and says them when read: its bound (the candidate's
// lower_bound_ns) against the top's iteration time, in ms to the microsecond.
TEST(Planner, PrunedRejectionSaysItsBoundWhenRead) {
  Candidate c;
  c.lower_bound_ns = 6'007'186'400;  // 6007.1864 ms
  const Rejection before =
      Rejection::PrunedBelow(c, Rejection::Pruned{5'999'999'600, 4, /*partitioned=*/false});
  EXPECT_EQ(before.reason, RejectReason::kPruned);
  EXPECT_TRUE(before.detail.empty());  // made only when read
  EXPECT_EQ(before.Detail(),
            "its lower bound 6007.186 ms (before partitioning) exceeds the iteration time "
            "6000.000 ms of the top 4 already found");
  const Rejection after = Rejection::PrunedBelow(c, Rejection::Pruned{5'999'999'600, 4, true});
  EXPECT_EQ(after.Detail(),
            "its lower bound 6007.186 ms exceeds the iteration time 6000.000 ms of the top 4 "
            "already found");
  // Any other rejection says its detail as given.
  EXPECT_EQ(Rejection(RejectReason::kOutOfMemory, c, "stage 0 needs more").Detail(),
            "stage 0 needs more");
}

TEST(Planner, ModelTooBigForFewGpusGetsAtLeastFourStages) {
  // 8 layers of 1e9 parameters: 18 GB of weights, gradients and Adam state
  // each, 144 GB in all; unsharded (ZeRO 0), 40 GiB GPUs hold at most 2 layers.
  Model model = UniformModel(8, kF, kB, 100 * kMiB, kMiB, 1'000'000'000);
  Cluster c = IdealCluster();
  c.gpu.memory_bytes = 40 * kGiB;
  PlannerOptions o;
  o.gpus = 8;
  o.global_batch = 16;
  o.zero_levels = {0};
  auto r = RunPlanner(model, c, o);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->Feasible());
  EXPECT_GE(r->ranked[0].config.layout.pipeline_stages, 4);
  int small_p_rejections = 0;
  for (const Rejection& rej : r->rejected) {
    if (rej.candidate.config.layout.pipeline_stages < 4 &&
        rej.reason != RejectReason::kScheduleConstraint) {
      EXPECT_EQ(rej.reason, RejectReason::kOutOfMemory) << rej.candidate.Label();
      EXPECT_THAT(rej.detail, HasSubstr("GiB of the 40.00 GiB limit"));
      ++small_p_rejections;
    }
  }
  EXPECT_GT(small_p_rejections, 0);
}

TEST(Planner, NothingFitsGivesSuggestions) {
  Model model = UniformModel(2, kF, kB, 0, 0, 1'000'000'000);
  Cluster c = IdealCluster();
  c.gpu.memory_bytes = 10 * kGiB;
  PlannerOptions o;
  o.gpus = 2;
  o.global_batch = 4;
  auto r = RunPlanner(model, c, o);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->Feasible());
  ASSERT_FALSE(r->suggestions.empty());
  EXPECT_THAT(r->suggestions[0], HasSubstr("at least 4 GPUs"));  // 36e9 B / 10 GiB
}

TEST(Planner, ShardedDataParallelismFitsWhatPlainReplicasCannot) {
  // Given the 8 x 1e9-parameter model on 8 GPUs of 40 GiB, as above, but the
  // default search (ZeRO 0, 1 and 3 when d > 1): p=1 d=8 at ZeRO 1 keeps
  // 6 + 12/8 = 7.5 B a parameter, 60 GB, still too much; ZeRO 3 keeps
  // 18/8 = 2.25 B, 18 GB, plus two gathered layers of 2 GB: it fits, and it has
  // no pipeline bubble, so on the ideal cluster (free links) it is chosen.
  Model model = UniformModel(8, kF, kB, 100 * kMiB, kMiB, 1'000'000'000);
  Cluster c = IdealCluster();
  c.gpu.memory_bytes = 40 * kGiB;
  PlannerOptions o;
  o.gpus = 8;
  o.global_batch = 16;
  auto r = RunPlanner(model, c, o);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->Feasible());
  const Candidate& best = r->ranked[0];
  EXPECT_EQ(best.config.layout.pipeline_stages, 1) << best.Label();
  EXPECT_EQ(best.config.memory.zero, 3) << best.Label();
  EXPECT_EQ(best.result->per_rank[0].memory.weights, 2'000'000'000);           // 8e9 x 2 B / 8
  EXPECT_EQ(best.result->per_rank[0].memory.gathered_weights, 4'000'000'000);  // 2 layers
  bool plain_dp_rejected = false;
  for (const Rejection& rej : r->rejected) {
    if (rej.reason == RejectReason::kOutOfMemory &&
        rej.candidate.config.layout.pipeline_stages == 1 && rej.candidate.config.memory.zero == 0) {
      plain_dp_rejected = true;
      EXPECT_THAT(rej.detail, HasSubstr("largest part: optimizer state"));
      EXPECT_THAT(rej.detail, HasSubstr("try --zero 1"));
    }
  }
  EXPECT_TRUE(plain_dp_rejected);
}

// Issue 24 item 6: Megatron-LM's even split as a stated choice. 10 layers: "embedding" (0.1 ms
// forward), 8 blocks (1 ms + 2 ms), "lm_head" (3 ms + 6 ms, three blocks' worth), 1F1B on p = 2.
// Megatron-LM gives each stage 4 blocks, the embedding to the first and the head to the last:
// 0-4 | 5-9, stages of 12.3 and 21 ms per micro-batch. pipecast's balanced split moves one
// block forward: 0-5 | 6-9, 15.3 and 18 ms (0-6 | 7-9 would be 18.3 and 15).
Model EmbeddingBlocksHead() {
  Model model = UniformModel(10, kF, kB);
  model.layers.front().name = "embedding";
  model.layers.front().profiles[0].forward_ns = kF / 10;
  model.layers.front().profiles[0].backward_ns = kB / 10;
  model.layers.back().name = "lm_head";
  model.layers.back().profiles[0].forward_ns = 3 * kF;
  model.layers.back().profiles[0].backward_ns = 3 * kB;
  return model;
}

PlannerOptions TwoStages1F1B(std::vector<PartitionRule> rules) {
  PlannerOptions o = OnGpus(2, 8);
  o.pipeline_stages = 2;
  o.schedules = {ScheduleKind::k1F1B};
  o.recompute = RecomputeMode::kOff;
  o.partition_rules = std::move(rules);
  return o;
}

TEST(Planner, PartitionEvenIsMegatronsSplitWhenAsked) {
  auto r = RunPlanner(EmbeddingBlocksHead(), IdealCluster(), TwoStages1F1B({PartitionRule::kEven}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->Feasible());
  const Candidate& best = r->ranked[0];
  EXPECT_EQ(best.config.partition.rule, PartitionRule::kEven);
  EXPECT_EQ(PartitionToString(best.partition), "0-4,5-9");
  EXPECT_THAT(best.Label(), HasSubstr("partition=even"));
  // The chosen plan records the rule.
  const Result<ChosenPlan> plan =
      MakeChosenPlan(EmbeddingBlocksHead(), "h", IdealCluster(), best, false);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->plan.config.partition.rule, PartitionRule::kEven);
  // With the first stage given 6 blocks (Megatron-LM's --decoder-first-pipeline-num-layers),
  // the last holds the other 2 and the head.
  PlannerOptions first6 = TwoStages1F1B({PartitionRule::kEven});
  first6.even.first_stage_layers = 6;
  auto six = RunPlanner(EmbeddingBlocksHead(), IdealCluster(), first6);
  ASSERT_TRUE(six.ok()) << six.status().message();
  ASSERT_TRUE(six->Feasible());
  EXPECT_EQ(PartitionToString(six->ranked[0].partition), "0-6,7-9");
}

TEST(Planner, PartitionBothSearchesEachRuleAndSaysWhichItChose) {
  auto r = RunPlanner(EmbeddingBlocksHead(), IdealCluster(),
                      TwoStages1F1B({PartitionRule::kBalanced, PartitionRule::kEven}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->Feasible());
  const Candidate& best = r->ranked[0];
  EXPECT_EQ(best.config.partition.rule, PartitionRule::kBalanced);
  EXPECT_EQ(PartitionToString(best.partition), "0-5,6-9");
  const Candidate* even = nullptr;
  for (const Candidate& c : r->ranked) {
    if (c.config.partition.rule == PartitionRule::kEven && even == nullptr) even = &c;
  }
  ASSERT_NE(even, nullptr);
  EXPECT_EQ(PartitionToString(even->partition), "0-4,5-9");
  EXPECT_GT(even->result->iteration_ns, best.result->iteration_ns);
  const double longer = 100.0 * (static_cast<double>(even->result->iteration_ns) /
                                     static_cast<double>(best.result->iteration_ns) -
                                 1.0);
  bool noted = false;
  for (const std::string& note : r->notes) {
    noted |= note.find("the choice uses the balanced split") != std::string::npos &&
             note.find(fmt::format("takes {:.1f}% longer", longer)) != std::string::npos;
  }
  EXPECT_TRUE(noted);
  // Asking for the even options without the even rule is refused.
  PlannerOptions bad = TwoStages1F1B({PartitionRule::kBalanced});
  bad.even.last_stage_layers = 2;
  EXPECT_THAT(RunPlanner(EmbeddingBlocksHead(), IdealCluster(), bad).status().message(),
              HasSubstr("--last-stage-layers shapes Megatron-LM's even split"));
}

TEST(Planner, BadOptions) {
  Model model = UniformModel(2, kF, kB);
  PlannerOptions o;
  o.gpus = 0;
  EXPECT_THAT(RunPlanner(model, IdealCluster(), o).status().message(), HasSubstr("--gpus is 0"));
  o.gpus = 4;
  EXPECT_THAT(RunPlanner(model, IdealCluster(), o).status().message(),
              HasSubstr("no global batch"));
  o.global_batch = 3;  // p in {1,2}: d 4 or 2, never divides 3
  EXPECT_THAT(RunPlanner(model, IdealCluster(), o).status().message(), HasSubstr("not a multiple"));
}

TEST(Planner, SimulateCandidateReplaysWhatTheSearchPredicted) {
  // Given the planner's choice on 4 GPUs, when it is simulated again, then
  // the metrics are the search's and the timeline is there only when asked.
  const Model model = UniformModel(8, kF, kB);
  const PlannerOptions o = OnGpus(4, 16);
  auto r = RunPlanner(model, IdealCluster(), o);
  ASSERT_TRUE(r.ok() && r->Feasible());
  const Candidate& best = r->ranked[0];
  auto again = SimulateCandidate(model, IdealCluster(), best, /*record_timeline=*/false);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(ResultToJson(*again), ResultToJson(*best.result));
  EXPECT_TRUE(again->ops.empty());

  auto chosen = MakeChosenPlan(model, "fnv1a64:0", IdealCluster(), best, true);
  ASSERT_TRUE(chosen.ok()) << chosen.status().message();
  EXPECT_EQ(chosen->plan.config.layout.pipeline_stages, best.config.layout.pipeline_stages);
  EXPECT_EQ(chosen->plan.gpus, 4);
  EXPECT_EQ(ResultToJson(chosen->plan.predicted), ResultToJson(*best.result));
  ASSERT_TRUE(chosen->timeline.has_value());
  EXPECT_FALSE(chosen->timeline->ops.empty());
  EXPECT_EQ(chosen->timeline->iteration_ns, best.result->iteration_ns);
  auto without = MakeChosenPlan(model, "fnv1a64:0", IdealCluster(), best, false);
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without->timeline.has_value());
}

}  // namespace
}  // namespace pipecast
