// --compare-to: the given configuration searched alone and the choice's expected gain over it,
// on an ideal cluster where every number is worked by hand.
#include "planner/compare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::pipecast::test_util::UniformModel;
using ::testing::HasSubstr;

constexpr TimeNs kF = 1000 * kNsPerUs;  // 1 ms forward per layer
constexpr TimeNs kB = 2000 * kNsPerUs;  // 2 ms backward per layer

// 8 layers of 1 GiB activations each on 8 GPUs of 10 GiB, no communication cost, global batch 16.
struct World {
  Model model = UniformModel(8, kF, kB, kGiB);
  Cluster cluster = [] {
    Cluster c;
    c.name = "ideal-10gib";
    c.gpu.memory_bytes = 10 * kGiB;
    return c;
  }();
  PlannerOptions options = [] {
    PlannerOptions o;
    o.gpus = 8;
    o.global_batch = 16;
    o.schedules = {ScheduleKind::kGPipe, ScheduleKind::k1F1B};
    o.microbatch_sizes = {1};
    o.threads = 2;
    return o;
  }();
};

TEST(CompareTo, SaysHowMuchFasterTheChoiceIsThanAPipelineOfEight) {
  World s;
  const PlanReport report = RunPlanner(s.model, s.cluster, s.options).value();
  // The choice: p = 1, d = 8, m = 2, no bubble: 2 x 8 layers x (1 + 2) ms = 48 ms, 16 / 48 ms
  // = 333.3 samples/s.
  const Candidate& chosen = report.ranked.at(0);
  EXPECT_EQ(chosen.config.layout.pipeline_stages, 1);
  EXPECT_EQ(chosen.result->iteration_ns, 48 * 1000 * kNsPerUs);
  // Against 1F1B over p = 8 (one layer per stage), d = 1, m = 16: (m + p - 1) x (F + B) =
  // 23 x 3 ms = 69 ms, 231.9 samples/s; the choice is 69 / 48 - 1 = 43.75% faster.
  const PlannerOptions pinned = PinConfiguration(s.options, "p=8 d=1 1f1b mbs=1").value();
  const ConfigurationComparison c =
      CompareWithChoice(s.model, s.cluster, pinned, report, "p=8 d=1").value();
  ASSERT_TRUE(c.compared.has_value()) << c.why_not;
  EXPECT_EQ(c.compared->result->iteration_ns, 69 * 1000 * kNsPerUs);
  EXPECT_NEAR(c.expected_gain, 69.0 / 48.0 - 1, 1e-9);
  EXPECT_FALSE(c.same_as_choice);
  // The label the planner printed pins the same configuration.
  const PlannerOptions from_label = PinConfiguration(s.options, c.compared->Label()).value();
  const ConfigurationComparison again =
      CompareWithChoice(s.model, s.cluster, from_label, report, "x").value();
  ASSERT_TRUE(again.compared.has_value());
  EXPECT_EQ(again.compared->Label(), c.compared->Label());
  // The choice's own label: nothing to beat.
  const ConfigurationComparison self =
      CompareWithChoice(s.model, s.cluster, PinConfiguration(s.options, chosen.Label()).value(),
                        report, chosen.Label())
          .value();
  EXPECT_TRUE(self.same_as_choice);
  EXPECT_EQ(self.expected_gain, 0);
}

TEST(CompareTo, AConfigurationThatDoesNotFitSaysWhy) {
  World s;
  const PlanReport report = RunPlanner(s.model, s.cluster, s.options).value();
  // GPipe over p = 8 without recomputation keeps all 16 micro-batches' activations: 16 GiB of
  // the 10 GiB. (Unpinned, recomputation would be searched, and full recomputation fits.)
  const ConfigurationComparison c =
      CompareWithChoice(s.model, s.cluster,
                        PinConfiguration(s.options, "p=8 gpipe recompute=off").value(), report,
                        "p=8 gpipe recompute=off")
          .value();
  EXPECT_FALSE(c.compared.has_value());
  EXPECT_THAT(c.why_not, HasSubstr("p=8 d=1 gpipe"));
  EXPECT_THAT(c.why_not, HasSubstr("GiB"));
}

TEST(CompareTo, WordsArePinnedAndBadWordsNamed) {
  World s;
  const PlannerOptions o =
      PinConfiguration(s.options,
                       "t=1 p=2 d=4 v=2 interleaved mbs=1 m=8 recompute=full zero=3 "
                       "partition=even reshard=off prefetch=off reduce=once shard-group=2")
          .value();
  EXPECT_EQ(o.tensor_parallel, std::vector<int>{1});
  EXPECT_EQ(o.pipeline_stages, 2);
  EXPECT_EQ(o.data_parallel, 4);
  EXPECT_EQ(o.chunks, std::vector<int>{2});
  EXPECT_EQ(o.schedules, std::vector<ScheduleKind>{ScheduleKind::kInterleaved1F1B});
  EXPECT_EQ(o.microbatches, 8);
  EXPECT_EQ(o.recompute_listed.at(0).recompute, Recompute::kFull);
  EXPECT_EQ(o.zero_levels, std::vector<int>{3});
  EXPECT_EQ(o.partition_rules, std::vector<PartitionRule>{PartitionRule::kEven});
  EXPECT_EQ(o.sharding.reshard_after_forward, PlannerOptions::Choice::kOff);
  EXPECT_FALSE(o.sharding.prefetch);
  EXPECT_EQ(o.sharding.reduce_every_microbatch, PlannerOptions::Choice::kOff);
  EXPECT_EQ(o.sharding.shard_group, 2);
  EXPECT_THAT(PinConfiguration(s.options, "p=two").status().message(),
              HasSubstr("--compare-to: 'p=two' is not a configuration word"));
  EXPECT_THAT(PinConfiguration(s.options, "stages=2").status().message(),
              HasSubstr("the keys are t, sp, p, d"));
  EXPECT_THAT(PinConfiguration(s.options, "zero=4").status().message(),
              HasSubstr("zero is 0, 1, 2 or 3"));
  EXPECT_THAT(PinConfiguration(s.options, " ").status().message(),
              HasSubstr("--compare-to is empty"));
}

}  // namespace
}  // namespace pipecast
