#include "planner/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::IdealCluster;
using ::pipecast::test_util::UniformModel;
using ::testing::HasSubstr;

constexpr TimeNs kF = 1000 * kNsPerUs;
constexpr TimeNs kB = 2000 * kNsPerUs;

TEST(Planner, IdealClusterPicksPureDataParallelAtTheClosedForm) {
  // With free communication and unlimited memory, p=1 has no bubble: each of
  // the 8 replicas runs m = 32/8 = 4 micro-batches through 8 layers:
  // 4 x 8 x 3 ms = 96 ms for 32 samples.
  Model model = UniformModel(8, kF, kB);
  PlannerOptions o;
  o.gpus = 8;
  o.global_batch = 32;
  auto r = RunPlanner(model, IdealCluster(), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->Feasible());
  const Candidate& best = r->ranked[0];
  EXPECT_EQ(best.pipeline_stages, 1);
  EXPECT_EQ(best.data_parallel, 8);
  EXPECT_EQ(best.result->iteration_ns, 96 * kF);
  EXPECT_NEAR(best.result->samples_per_s, 32 / 0.096, 1e-9);
  // Every runner-up with p > 1 pays (p-1)/(m+p-1) of bubble (GPipe/1F1B).
  for (const Candidate& c : r->ranked) {
    if ((c.schedule != ScheduleKind::kGPipe && c.schedule != ScheduleKind::k1F1B) ||
        c.recompute != Recompute::kOff) {
      continue;
    }
    const int p = c.pipeline_stages, m = c.microbatches;
    EXPECT_NEAR(c.result->bubble_ratio, (p - 1.0) / (m + p - 1), 1e-12) << c.Label();
  }
  EXPECT_FALSE(r->sweep.empty());
}

TEST(Planner, ModelTooBigForFewGpusGetsAtLeastFourStages) {
  // 8 layers of 1e9 parameters: 16 GB of weights, gradients and Adam state
  // each, 128 GB in all; 40 GiB GPUs hold at most 2 layers.
  Model model = UniformModel(8, kF, kB, 100 * kMiB, kMiB, 1'000'000'000);
  Cluster c = IdealCluster();
  c.gpu.memory_bytes = 40 * kGiB;
  PlannerOptions o;
  o.gpus = 8;
  o.global_batch = 16;
  auto r = RunPlanner(model, c, o);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->Feasible());
  EXPECT_GE(r->ranked[0].pipeline_stages, 4);
  int small_p_rejections = 0;
  for (const Rejection& rej : r->rejected) {
    if (rej.candidate.pipeline_stages < 4 && rej.reason != RejectReason::kScheduleConstraint) {
      EXPECT_EQ(rej.reason, RejectReason::kOutOfMemory) << rej.candidate.Label();
      EXPECT_THAT(rej.detail, HasSubstr("GiB of 40.0 GiB"));
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
  EXPECT_THAT(r->suggestions[0], HasSubstr("at least 3 GPUs"));  // 32e9 B / 10 GiB
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

}  // namespace
}  // namespace pipecast
