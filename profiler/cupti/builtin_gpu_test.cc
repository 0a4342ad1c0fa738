// GPU tests (ctest label `gpu`): profile the built-in block through the real
// CUPTI path. Each skips itself when no CUDA device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "profiler/cupti/builtin_block.h"
#include "profiler/cupti/injection_runner.h"
#include "profiler/cupti_profile.h"

namespace pipecast {
namespace {

#define SKIP_WITHOUT_GPU()                                \
  do {                                                    \
    if (Status st = CheckCudaDevice(); !st.ok()) {        \
      GTEST_SKIP() << "no CUDA device: " << st.message(); \
    }                                                     \
  } while (0)

BuiltinOptions Tiny() {
  BuiltinOptions o;
  o.shape.hidden = 256;
  o.shape.heads = 4;
  o.shape.seq = 128;
  o.shape.layers = 2;
  o.microbatch_sizes = {1, 2};
  o.aggregate.warmup = 2;
  o.aggregate.iterations = 5;
  return o;
}

TEST(BuiltinGpuTest, TimesArePositiveAndBackwardSplits) {
  SKIP_WITHOUT_GPU();
  std::string report;
  Result<Model> model = ProfileBuiltin(Tiny(), &report);
  ASSERT_TRUE(model.ok()) << model.status().message() << "\n" << report;
  ASSERT_EQ(model->layers.size(), 2u);
  EXPECT_EQ(model->source.method, "cupti");
  for (const Layer& layer : model->layers) {
    ASSERT_EQ(layer.profiles.size(), 2u) << layer.name;
    for (const LayerProfile& p : layer.profiles) {
      EXPECT_GT(p.forward_ns, 0) << layer.name;
      ASSERT_TRUE(p.backward_weight_ns.has_value()) << layer.name;
      EXPECT_GT(*p.backward_weight_ns, 0) << layer.name;
      EXPECT_GT(p.backward_ns, *p.backward_weight_ns) << layer.name;
    }
    // Twice the tokens cost more.
    EXPECT_GT(layer.profiles[1].forward_ns, layer.profiles[0].forward_ns) << layer.name;
  }
}

TEST(BuiltinGpuTest, ActivationBytesMatchTheBlocksAllocations) {
  SKIP_WITHOUT_GPU();
  const BuiltinOptions o = Tiny();
  std::string report;
  Result<Model> model = ProfileBuiltin(o, &report);
  ASSERT_TRUE(model.ok()) << model.status().message();
  Result<std::unique_ptr<TransformerBlock>> block = TransformerBlock::Create(o.shape, 1);
  ASSERT_TRUE(block.ok()) << block.status().message();
  for (const LayerProfile& p : model->layers.front().profiles) {
    // MEMORY2 reports the bytes each cudaMalloc asked for.
    EXPECT_EQ(p.activation_bytes, (*block)->ActivationBytes(p.microbatch_size))
        << "micro-batch " << p.microbatch_size;
    EXPECT_EQ(p.output_bytes, (*block)->HiddenBytes(p.microbatch_size));
  }
  EXPECT_EQ(model->layers.front().parameters, o.shape.ParametersPerBlock());
}

TEST(BuiltinGpuTest, PassesAddUpToTheWholeStep) {
  SKIP_WITHOUT_GPU();
  BuiltinOptions o = Tiny();
  o.microbatch_sizes = {2};
  std::string report;
  Result<Model> model = ProfileBuiltin(o, &report);
  ASSERT_TRUE(model.ok()) << model.status().message();
  double passes_ns = 0;
  for (const Layer& layer : model->layers) {
    passes_ns += layer.profiles[0].forward_ns + layer.profiles[0].backward_ns;
  }
  const auto spread = nlohmann::json::parse(model->source.details.at("spread"));
  const double step_us = spread["microbatch_size=2"]["step_busy"]["median_us"].get<double>();
  // Every kernel of a step belongs to some pass: the medians of the parts
  // add up to the median step within noise.
  EXPECT_NEAR(passes_ns / 1000.0, step_us, 0.1 * step_us) << report;
}

}  // namespace
}  // namespace pipecast
