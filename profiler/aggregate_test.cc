// Aggregation over iterations and the model it writes: hand-worked medians.
#include "profiler/aggregate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "formats/formats.h"
#include "profiler/cupti_model.h"

namespace pipecast {
namespace {

using ::testing::HasSubstr;

LayerSample Sample(const std::string& layer, Pass pass, int step, uint64_t busy, int64_t kept = 0) {
  LayerSample s;
  s.layer = layer;
  s.pass = pass;
  s.step = step;
  s.occurrence = step;
  s.start_ns = 1000 * step + (layer == "b" ? 500 : 0) + static_cast<int>(pass) * 100;
  s.busy_ns = busy;
  s.kept_bytes = kept;
  s.peak_bytes = kept;
  return s;
}

TEST(SummarizeTest, QuartilesInterpolateLikeNumpy) {
  const Spread s = Summarize({4, 1, 3, 2});
  EXPECT_EQ(s.samples, 4);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.q1, 1.75);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.q3, 3.25);
  EXPECT_DOUBLE_EQ(s.max, 4);
  EXPECT_DOUBLE_EQ(s.RelativeIqr(), 1.5 / 2.5);
  EXPECT_DOUBLE_EQ(Summarize({7}).median, 7);
}

// Layer "a": forward 100 (warm-up), then 10, 20, 30, 40 in steps 1..4.
Attribution FiveSteps() {
  Attribution a;
  const uint64_t fw[] = {100, 10, 20, 30, 40};
  for (int step = 0; step < 5; ++step) {
    a.samples.push_back(Sample("a", Pass::kForward, step, fw[step], 1000 + step));
    a.samples.push_back(Sample("a", Pass::kBackward, step, 2 * fw[step]));
    a.samples.push_back(Sample("a", Pass::kWeightGrad, step, fw[step]));
    a.samples.push_back(Sample("b", Pass::kForward, step, 5));
    a.samples.push_back(Sample("b", Pass::kBackward, step, 7));
  }
  a.samples[0].parameters = 123;
  a.samples[0].output_bytes = 64;
  return a;
}

TEST(AggregateTest, SkipsWarmupAndTakesTheMedian) {
  AggregateOptions o;
  o.warmup = 1;
  o.iterations = 3;  // steps 1, 2, 3: forward 10, 20, 30
  Result<Aggregation> agg = Aggregate({FiveSteps()}, o);
  ASSERT_TRUE(agg.ok()) << agg.status().message();
  ASSERT_EQ(agg->layers.size(), 2u);
  const LayerAggregate& a = agg->layers[0];
  EXPECT_EQ(a.name, "a");  // first forward first
  EXPECT_EQ(a.forward_ns.samples, 3);
  EXPECT_DOUBLE_EQ(a.forward_ns.median, 20);
  EXPECT_DOUBLE_EQ(a.forward_ns.min, 10);
  EXPECT_DOUBLE_EQ(a.forward_ns.max, 30);
  EXPECT_DOUBLE_EQ(a.backward_ns.median, 40);
  ASSERT_TRUE(a.weight_grad_ns.has_value());
  EXPECT_DOUBLE_EQ(a.weight_grad_ns->median, 20);
  EXPECT_DOUBLE_EQ(a.activation_bytes.median, 1002);
  EXPECT_EQ(a.parameters, 123);
  EXPECT_EQ(agg->iterations_seen, 5);
  // Layer b has no sizes in its range names: said, not hidden.
  EXPECT_THAT(agg->warnings, testing::Contains(HasSubstr("layer b: parameter count unknown")));
}

TEST(AggregateTest, TooFewIterationsIsAnError) {
  AggregateOptions o;
  o.warmup = 2;
  o.iterations = 4;
  Result<Aggregation> agg = Aggregate({FiveSteps()}, o);
  ASSERT_FALSE(agg.ok());
  EXPECT_EQ(agg.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(agg.status().message(), HasSubstr("5 iteration(s)"));
  EXPECT_THAT(agg.status().message(), HasSubstr("--iterations"));
  o.iterations = 0;
  EXPECT_THAT(Aggregate({FiveSteps()}, o).status().message(), HasSubstr("--iterations 0"));
}

TEST(AggregateTest, NoLayerRangesExplainsTheConvention) {
  Attribution empty;
  empty.samples.push_back(Sample("a", Pass::kForward, 0, 1));
  empty.samples.clear();
  Result<Aggregation> agg = Aggregate({empty}, AggregateOptions());
  ASSERT_FALSE(agg.ok());
  EXPECT_THAT(agg.status().message(), HasSubstr("pipecast:<layer>:forward"));
}

TEST(AggregateTest, ModelHasOneProfilePerMicrobatchSizeAndItsProvenance) {
  AggregateOptions o;
  o.warmup = 1;
  o.iterations = 3;
  std::vector<CuptiMeasurement> ms(2);
  for (int i = 0; i < 2; ++i) {
    Result<Aggregation> agg = Aggregate({FiveSteps()}, o);
    ASSERT_TRUE(agg.ok());
    ms[i].aggregation = *agg;
    ms[i].microbatch_size = 4 >> i;  // 4, then 2: sorted on output
    ms[i].devices = {{0, "NVIDIA H200", 9, 0, 1980000, 141ull << 30, 132}};
  }
  Result<Model> model = BuildCuptiModel("m", ms, o, {{"command", "[\"python\"]"}});
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->source.method, "cupti");
  EXPECT_EQ(model->source.device, "NVIDIA H200");
  ASSERT_EQ(model->layers.size(), 2u);
  const Layer& a = model->layers[0];
  ASSERT_EQ(a.profiles.size(), 2u);
  EXPECT_EQ(a.profiles[0].microbatch_size, 2);
  EXPECT_EQ(a.profiles[0].forward_ns, 20);
  EXPECT_EQ(a.profiles[0].backward_ns, 40);
  EXPECT_EQ(a.profiles[0].backward_weight_ns, 20);
  EXPECT_EQ(a.profiles[0].activation_bytes, 1002);
  EXPECT_EQ(a.profiles[0].output_bytes, 64);
  EXPECT_EQ(a.parameters, 123);
  for (const char* key : {"devices", "clocks", "warmup", "iterations", "spread", "records",
                          "time_metric", "memory_metric", "command", "warnings"}) {
    EXPECT_TRUE(model->source.details.count(key)) << key;
  }
  EXPECT_EQ(model->source.details.at("warmup"), "1");
  EXPECT_THAT(model->source.details.at("devices"), HasSubstr("\"sm_clock_mhz\":1980"));
  // The writer accepts it and the reader gives it back.
  Result<Model> back = ParseModel(ModelToJson(*model), "model.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->layers[1].profiles[1].backward_ns, 7);
}

TEST(AggregateTest, DeclaredCheckpointAndWeightGradBytesReachTheProfile) {
  // Layer a keeps 1002 bytes (median of 1001..1003); it declares a
  // checkpoint of 64 and a weight-gradient set of 5000 (more than it keeps:
  // the output gradients are new). Layer b declares a checkpoint of 4096,
  // more than the 0 bytes it keeps: capped at its activation.
  Attribution a = FiveSteps();
  a.samples[0].checkpoint_bytes = 64;
  a.samples[0].weight_grad_bytes = 5000;
  a.samples[3].checkpoint_bytes = 4096;
  AggregateOptions o;
  o.warmup = 1;
  o.iterations = 3;
  Result<Aggregation> agg = Aggregate({a}, o);
  ASSERT_TRUE(agg.ok()) << agg.status().message();
  Model model;
  ASSERT_TRUE(AddProfiles(*agg, 1, &model).ok());
  ASSERT_EQ(model.layers.size(), 2u);
  const LayerProfile& pa = model.layers[0].profiles[0];
  EXPECT_EQ(pa.activation_bytes, 1002);
  EXPECT_EQ(pa.checkpoint_bytes, 64);
  EXPECT_EQ(pa.weight_grad_bytes, 5000);
  const LayerProfile& pb = model.layers[1].profiles[0];
  EXPECT_EQ(pb.checkpoint_bytes, 0);
  EXPECT_FALSE(pb.weight_grad_bytes.has_value());
}

TEST(CuptiModelTest, RecordsTheMeasuredContextAndTheGpuPreset) {
  // Two runs on one H200: contexts of 500 and 520 MiB; the larger is what a
  // plan must leave free, the smaller usable total the capacity.
  AggregateOptions o;
  o.warmup = 1;
  o.iterations = 3;
  std::vector<CuptiMeasurement> ms(2);
  for (int i = 0; i < 2; ++i) {
    Result<Aggregation> agg = Aggregate({FiveSteps()}, o);
    ASSERT_TRUE(agg.ok());
    ms[i].aggregation = *agg;
    ms[i].microbatch_size = 1 + i;
    ms[i].devices = {{0, "NVIDIA H200", 9, 0, 1980000, 150000000000, 132,
                      150110011392u - (i * 1048576u), (500u + 20u * i) * 1048576u}};
  }
  Result<Model> model = BuildCuptiModel("m", ms, o, {});
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->source.details.at(kGpuPresetKey), "\"h200\"");
  const auto mem = nlohmann::json::parse(model->source.details.at(kMeasuredMemoryKey));
  EXPECT_EQ(mem["device"], "NVIDIA H200");
  EXPECT_EQ(mem["cuda_context_bytes"], 520u * 1048576u);
  EXPECT_EQ(mem["usable_bytes"], 150110011392u - 1048576u);
  // Without a context figure (an older injection library) neither is guessed.
  for (CuptiMeasurement& m : ms) m.devices[0].context_memory_bytes = 0;
  model = BuildCuptiModel("m", ms, o, {});
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(model->source.details.count(kMeasuredMemoryKey), 0u);
}

}  // namespace
}  // namespace pipecast
