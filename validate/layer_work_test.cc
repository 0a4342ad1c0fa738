#include "validate/layer_work.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "testing/validate_test_util.h"
#include "validate/runtime.h"

namespace pipecast::validate {
namespace {

constexpr cpu::BlockShape kShape{.hidden = 16, .ffn = 32, .tokens_per_sample = 4};

// A model as `profiler cpu` would write it for `layers` blocks of kShape
// (times are placeholders: these tests check data and memory, not time).
Model WorkloadModel(int layers) {
  cpu::WorkloadSpec spec;
  spec.shape = kShape;
  spec.layers = layers;
  Model m = testing::UniformModel(layers);
  m.name = "cpu-workload";
  m.source.method = "cpu";
  m.source.details[cpu::kWorkloadSourceKey] = cpu::WorkloadToSourceJson(spec);
  cpu::Block block(kShape, 1);
  for (Layer& l : m.layers) {
    l.parameters = block.Parameters();
    l.profiles[0].activation_bytes = block.ActivationBytes(1);
    l.profiles[0].output_bytes = block.OutputBytes(1);
    l.profiles[0].workspace_bytes = block.TransientBytes(1);
  }
  return m;
}

// Two ranks in threads of this process, with unlimited pools; runs `w`'s
// plan for `iterations` measured iterations and no warm-up.
struct TwoStages {
  SteadyClock clock;
  MemoryPool p0{"stage 0", 0, &clock};
  MemoryPool p1{"stage 1", 0, &clock};
  InProcessTransport transport{{&p0, &p1}};

  Result<std::vector<StageRun>> Run(const testing::World& w, OpWork* work, int iterations) {
    RuntimeOptions o;
    o.warmup_iterations = 0;
    o.iterations = iterations;
    return RunStages(w.exec, {0, 1}, o, RuntimeEnv{&transport, work, &clock, {&p0, &p1}, true});
  }
};

TEST(LayerWork, APipelinedRunGivesTheGradientsOfASequentialOne) {
  // Given 4 layers on 2 ranks under 1F1B with 3 micro-batches.
  Result<Schedule> s = MakeSchedule(ScheduleKind::k1F1B, 2, 3);
  testing::World w = testing::MakeWorld(WorkloadModel(4), *s);
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(w.model, w.plan);
  ASSERT_TRUE(work.ok()) << work.status().message();
  TwoStages stages;

  Result<std::vector<StageRun>> runs = stages.Run(w, work->get(), 1);
  ASSERT_TRUE(runs.ok()) << runs.status().message();

  // Then the same blocks run one micro-batch at a time, all layers in a row,
  // accumulate bit-identical weight gradients (same inputs, same order).
  std::vector<cpu::Block> ref;
  for (int l = 0; l < 4; ++l) ref.emplace_back(kShape, 1 + l);
  const size_t n = 4 * 16;
  std::vector<float> input(n), grad(n, 1.0f / n);
  for (size_t i = 0; i < n; ++i) input[i] = std::sin(0.01f * static_cast<float>(i));
  for (int mb = 0; mb < 3; ++mb) {
    std::vector<cpu::Saved> saved;
    std::vector<float> x = input, y(n);
    for (cpu::Block& b : ref) {
      saved.push_back(b.Forward(x, y, 1));
      x.swap(y);
    }
    std::vector<float> dy = grad, dx(n);
    for (int l = 3; l >= 0; --l) {
      ref[l].Backward(saved[l], dy, dx);
      dy.swap(dx);
    }
  }
  for (int l = 0; l < 4; ++l) {
    const auto got = (*work)->blocks()[l].GradientW1();
    const auto want = ref[l].GradientW1();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "layer " << l;
    EXPECT_NE(want[0], 0.0f);
  }
  // And stage 0 (1F1B, 2 ranks) held 2 micro-batches of 2 layers' real
  // activations at most, which is what the model predicts.
  EXPECT_EQ((*runs)[0].peak_activation_bytes, 2 * 2 * cpu::Block(kShape, 1).ActivationBytes(1));
  EXPECT_EQ((*runs)[0].peak_activation_bytes, w.predicted.per_rank[0].memory.activations_peak);
}

TEST(LayerWork, AModelNotMeasuredOnTheWorkloadIsRefused) {
  Model m = WorkloadModel(2);
  m.layers[1].profiles[0].output_bytes += 4;
  Result<Schedule> s = MakeSchedule(ScheduleKind::kGPipe, 2, 1);
  testing::World w = testing::MakeWorld(m, *s);
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(m, w.plan);
  ASSERT_FALSE(work.ok());
  EXPECT_THAT(work.status().message(), ::testing::HasSubstr("layers[1].output_bytes"));
}

TEST(LayerWork, ZeroBubbleSplitRunsAndFreesEverythingAtW) {
  Result<Schedule> s = MakeSchedule(ScheduleKind::kZBH1, 2, 4);
  testing::World w = testing::MakeWorld(WorkloadModel(2), *s);
  Result<std::unique_ptr<LayerWork>> work = LayerWork::Make(w.model, w.plan);
  ASSERT_TRUE(work.ok()) << work.status().message();
  TwoStages stages;

  Result<std::vector<StageRun>> runs = stages.Run(w, work->get(), 2);
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  EXPECT_EQ(stages.p0.held(), 0);
  EXPECT_EQ(stages.p1.held(), 0);
}

}  // namespace
}  // namespace pipecast::validate
