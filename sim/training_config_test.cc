// TrainingConfig (sim/training_config.h): the one check of a run's settings,
// with the flags' words; the rules derived from it once (per-GPU bytes, GPU
// count, stage-cost options, t against a node); and Simulate() holding a
// stated p, v and m to the schedule it replays.
#include "sim/training_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim/schedule.h"
#include "sim/simulator.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using test_util::IdealCluster;
using test_util::UniformModel;
using ::testing::HasSubstr;

std::string Message(const TrainingConfig& config) {
  const Status st = config.Validate();
  return st.ok() ? "ok" : st.message();
}

TEST(TrainingConfig, DefaultsAreValid) { EXPECT_EQ(Message(TrainingConfig{}), "ok"); }

TEST(TrainingConfig, EachRuleNamesTheFlagThatSetsIt) {
  TrainingConfig c;
  c.microbatch_size = 0;
  EXPECT_EQ(Message(c), "--microbatch-size is 0: must be at least 1");
  c = TrainingConfig{};
  c.layout.data_parallel = 0;
  EXPECT_EQ(Message(c), "--data-parallel is 0: must be at least 1");
  c = TrainingConfig{};
  c.layout.tensor_parallel = 0;
  EXPECT_EQ(Message(c), "--tensor-parallel is 0: must be at least 1");
  c = TrainingConfig{};
  c.optimizer_step.time_ns = -1;
  EXPECT_EQ(Message(c), "--optimizer-step-us is negative: must be >= 0");
  c = TrainingConfig{};
  c.overlap.overlap_factor = 2.5;
  EXPECT_THAT(Message(c), HasSubstr("--overlap-factor is 2.5"));
  c = TrainingConfig{};
  c.memory.zero = 4;
  EXPECT_EQ(Message(c), "--zero is 4: expected 0, 1, 2 or 3 (the ZeRO level)");
}

TEST(TrainingConfig, SequenceParallelismAndCommOverlapNeedTensorParallelism) {
  TrainingConfig c;
  c.layout.sequence_parallel = true;
  EXPECT_EQ(Message(c),
            "--sequence-parallel needs --tensor-parallel above 1: sequence parallelism splits the "
            "layernorms and dropouts over the tensor-parallel group");
  c.layout.tensor_parallel = 2;
  EXPECT_EQ(Message(c), "ok");
  c = TrainingConfig{};
  c.overlap.tp_comm_overlap = true;
  EXPECT_EQ(Message(c),
            "--tp-comm-overlap needs --tensor-parallel above 1: there is no tensor-parallel "
            "communication to overlap");
}

TEST(TrainingConfig, ContextDegreeFromOneAndExpertDegreesFoldedOverTheStage) {
  TrainingConfig c;
  c.layout.context_parallel = 2;
  EXPECT_EQ(Message(c), "ok");  // modelled (docs/simulator.md "Context parallelism")
  c.layout.context_parallel = 0;
  EXPECT_EQ(Message(c),
            "--context-parallel is 0: must be from 1 (no context parallelism) to 65536");
  // ep x etp must divide t x cp x d (docs/simulator.md "Expert parallelism").
  c = TrainingConfig{};
  c.layout.expert_parallel = 4;
  EXPECT_THAT(Message(c), HasSubstr("--expert-parallel 4 x --expert-tensor-parallel 1 = 4 does "
                                    "not divide the 1 GPUs of a stage"));
  c.layout.data_parallel = 4;
  EXPECT_EQ(Message(c), "ok");
}

TEST(TrainingConfig, GpusAreTheProductOfTheDegrees) {
  ParallelLayout l;
  l.tensor_parallel = 2;
  l.pipeline_stages = 4;
  l.data_parallel = 3;
  EXPECT_EQ(l.Gpus(), 24);
  l.context_parallel = 4;  // t x cp x p x d
  EXPECT_EQ(l.Gpus(), 96);
  EXPECT_EQ(l.GradientReplicas(), 12);  // d x cp hold the same weights
}

TEST(TrainingConfig, OneGpuKeepsATthOfEveryParametersBytes) {
  TrainingConfig c;  // bf16, fp32 main gradients, Adam: 2 + 4 + 12 bytes
  c.layout.tensor_parallel = 4;
  c.memory.zero = 1;
  const MemoryConfig m = c.PerGpuMemory();
  EXPECT_DOUBLE_EQ(m.weight_bytes_per_param, 0.5);
  EXPECT_DOUBLE_EQ(m.gradient_bytes_per_param, 1);
  EXPECT_DOUBLE_EQ(m.optimizer_bytes_per_param, 3);
  EXPECT_EQ(m.zero, 1);
}

TEST(TrainingConfig, StageCostsTimeTensorParallelCollectivesOnTheIntraNodeLink) {
  Cluster cluster = IdealCluster();
  cluster.intra_node = Link{7, 123};
  cluster.inter_node = Link{1, 1};
  TrainingConfig c;
  c.microbatch_size = 2;
  c.recompute = Recompute::kFull;
  c.layout.tensor_parallel = 2;
  c.layout.sequence_parallel = true;
  c.overlap.tp_comm_overlap = true;
  const StageCostOptions o = StageCostOptionsFor(c, cluster);
  EXPECT_EQ(o.microbatch_size, 2);
  EXPECT_EQ(o.recompute, Recompute::kFull);
  EXPECT_EQ(o.tensor_parallel, 2);
  EXPECT_TRUE(o.sequence_parallel);
  EXPECT_TRUE(o.tp_comm_overlap);
  EXPECT_FALSE(o.split_backward);
  EXPECT_DOUBLE_EQ(o.tp_link.bandwidth_gbps, cluster.intra_node.bandwidth_gbps);
  EXPECT_DOUBLE_EQ(o.tp_link.latency_us, cluster.intra_node.latency_us);
}

TEST(TrainingConfig, TensorParallelismMustDivideANode) {
  Cluster cluster = IdealCluster();
  cluster.name = "eight";
  cluster.gpus_per_node = 8;
  EXPECT_TRUE(CheckTensorParallelFitsNode(4, cluster).ok());
  EXPECT_EQ(CheckTensorParallelFitsNode(3, cluster).message(),
            "--tensor-parallel 3 does not divide the 8 GPUs of a node of eight: a stage's "
            "tensor-parallel GPUs share a node; use a divisor of 8");
}

TEST(TrainingConfig, SimulateHoldsAStatedShapeToTheSchedule) {
  // Given a 1F1B schedule of 2 ranks and 4 micro-batches,
  const Model model = UniformModel(4, 1000, 2000);
  const Schedule schedule = MakeSchedule(ScheduleKind::k1F1B, 2, 4).value();
  SimOptions o;
  // unstated p, v and m are the schedule's,
  EXPECT_TRUE(Simulate(model, IdealCluster(), schedule, o).ok());
  // stated ones that agree are accepted,
  o.config.layout.pipeline_stages = 2;
  o.config.layout.chunks = 1;
  o.config.microbatches = 4;
  EXPECT_TRUE(Simulate(model, IdealCluster(), schedule, o).ok());
  // and each that disagrees is named.
  o.config.layout.pipeline_stages = 3;
  EXPECT_THAT(Simulate(model, IdealCluster(), schedule, o).status().message(),
              HasSubstr("the configuration has 3 pipeline stages but schedule '1f1b' has 2 ranks"));
  o.config.layout.pipeline_stages = 2;
  o.config.microbatches = 8;
  EXPECT_THAT(
      Simulate(model, IdealCluster(), schedule, o).status().message(),
      HasSubstr("the configuration has 8 micro-batches per iteration but schedule '1f1b' has 4"));
}

}  // namespace
}  // namespace pipecast
