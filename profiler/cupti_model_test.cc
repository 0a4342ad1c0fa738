// From traces to a model: the checks MeasureTraces makes before trusting a
// trace, and several processes pooled.
#include "profiler/cupti_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "profiler/activity_test_util.h"
#include "profiler/cupti_profile.h"

namespace pipecast {
namespace {

using ::testing::HasSubstr;

// Steps 0..n-1: layer L forward 10*(k+1) ns on the main thread, backward
// 20 ns on the autograd thread.
ActivityTrace Steps(int n, uint32_t pid) {
  TraceBuilder b;
  for (int k = 0; k < n; ++k) {
    const uint64_t t0 = 1000 * k;
    b.Range("pipecast:step", 1, t0, t0 + 900)
        .Range("pipecast:L:forward:params=5:out=8", 1, t0 + 100, t0 + 200)
        .Kernel(1, t0 + 150, 50000 + t0, 50000 + t0 + 10 * (k + 1))
        .Range("pipecast:L:backward", 2, t0 + 300, t0 + 400)
        .Kernel(2, t0 + 350, 60000 + t0, 60000 + t0 + 20);
  }
  b.trace().process_id = pid;
  return b.trace();
}

AggregateOptions WarmupIterations(int warmup, int iterations) {
  AggregateOptions o;
  o.warmup = warmup;
  o.iterations = iterations;
  return o;
}

TEST(MeasureTracesTest, PoolsProcessesAndSkipsThoseWithoutGpuWork) {
  ActivityTrace loader;  // a data-loader worker: CUDA initialised, no work
  loader.process_id = 3;
  loader.errors = {"enabling activity kind DEVICE failed: CUPTI_ERROR_NOT_COMPATIBLE"};
  Result<CuptiMeasurement> m =
      MeasureTraces({Steps(4, 1), Steps(4, 2), loader}, 2, WarmupIterations(1, 3));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->processes, 2);
  EXPECT_EQ(m->stats.attributed, 16u);
  ASSERT_EQ(m->aggregation.layers.size(), 1u);
  const LayerAggregate& l = m->aggregation.layers[0];
  EXPECT_EQ(l.forward_ns.samples, 6);         // 3 iterations x 2 processes
  EXPECT_DOUBLE_EQ(l.forward_ns.median, 30);  // 20, 20, 30, 30, 40, 40
  EXPECT_DOUBLE_EQ(l.backward_ns.median, 20);
  EXPECT_THAT(m->warnings, testing::Contains(HasSubstr("process 3: enabling activity kind")));
  EXPECT_THAT(DescribeMeasurement(*m), HasSubstr("16 attributed to layers"));
}

TEST(MeasureTracesTest, RefusesATraceThatLostTooMuch) {
  ActivityTrace t = Steps(4, 7);
  t.zero_timestamp_records = 1;  // 1 of 9 GPU records
  Result<CuptiMeasurement> m = MeasureTraces({t}, 1, WarmupIterations(1, 3));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(m.status().message(), HasSubstr("process 7: refusing the profile: 1 of 9"));
}

TEST(MeasureTracesTest, RangesThatNeverMeetTheWorkAreAnError) {
  TraceBuilder b;
  b.Range("pipecast:L:forward", 1, 0, 100).Kernel(2, 50, 1000, 1010);  // launched on thread 2
  Result<CuptiMeasurement> m = MeasureTraces({b.trace()}, 1, WarmupIterations(0, 1));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("no GPU record was launched inside a layer range"));
}

TEST(MeasureTracesTest, NoGpuWorkAtAllIsAnError) {
  ActivityTrace t;
  t.errors = {"cuptiSubscribe failed: CUPTI_ERROR_UNKNOWN"};
  Result<CuptiMeasurement> m = MeasureTraces({t}, 1, AggregateOptions());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("ran no GPU work"));
  EXPECT_THAT(m.status().message(), HasSubstr("cuptiSubscribe failed"));
  EXPECT_THAT(MeasureTraces({Steps(1, 1)}, 0, AggregateOptions()).status().message(),
              HasSubstr("--microbatch-size 0"));
}

}  // namespace
}  // namespace pipecast

namespace pipecast {
namespace {

// The built-in block's shard at t (cupti_profile.h), h = 1024, a = 16, f = 4096, s = 512.
TEST(BuiltinShardTest, ShardSizesFollowMegatronsSplit) {
  BlockShape whole;
  BlockShape half = whole;
  half.tensor_parallel = 2;
  ASSERT_TRUE(half.Validate().ok());
  EXPECT_EQ(half.LocalHeads(), 8);
  EXPECT_EQ(half.LocalFfn(), 2048);
  EXPECT_EQ(half.AttentionWidth(), 512);
  // The whole block: 4h^2 + 2hf + 4h = 4194304 + 8388608 + 4096.
  EXPECT_EQ(whole.ParametersPerBlock(), 12587008);
  EXPECT_EQ(whole.ParametersPerGpu(), whole.ParametersPerBlock());
  // Half of the four products, the layernorms whole: 6291456 + 4096.
  EXPECT_EQ(half.ParametersPerGpu(), 6295552);
  EXPECT_EQ(half.ParametersPerBlock(), 12587008);  // the whole count, as model.json keeps it
  // b = 1, T = 512: 7 [T,h] + 2 [T,f] + a s^2 bf16 + 16 T fp32 bytes at t = 1 ...
  const int64_t T = 512;
  EXPECT_EQ(whole.ActivationBytes(1), 2 * (7 * T * 1024 + 2 * T * 4096 + 16 * T * T) + 16 * T);
  // ... and 3 [T,h] + 4 [T,h/2] + 2 [T,f/2] + (a/2) s^2 at t = 2.
  EXPECT_EQ(half.ActivationBytes(1),
            2 * (3 * T * 1024 + 4 * T * 512 + 2 * T * 2048 + 8 * T * T) + 16 * T);
  EXPECT_EQ(whole.WeightGradBytes(1), whole.ActivationBytes(1) + 2 * T * (4096 + 6 * 1024));
  EXPECT_EQ(half.WeightGradBytes(1), half.ActivationBytes(1) + 2 * T * (2048 + 3 * 1024 + 3 * 512));
  EXPECT_EQ(half.HiddenBytes(2), whole.HiddenBytes(2));  // the residual stream stays whole
}

TEST(BuiltinShardTest, DegreesMustDivideTheHeadsAndTheMlp) {
  BlockShape shape;
  shape.tensor_parallel = 3;
  Status st = shape.Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("--tensor-parallel 3"));
  BuiltinOptions o;
  o.tensor_parallel = {1, 2, 32};
  EXPECT_THAT(o.Validate().message(), HasSubstr("--tensor-parallel 32"));
  o.tensor_parallel = {2, 2};
  EXPECT_THAT(o.Validate().message(), HasSubstr("lists 2 twice"));
  o.tensor_parallel = {8, 2};
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_EQ(o.Degrees(), (std::vector<int>{1, 2, 8}));
}

Model TwoLayers(TimeNs forward) {
  Model m;
  m.name = "b";
  for (const char* name : {"block.0", "block.1"}) {
    Layer l;
    l.name = name;
    l.parameters = 100;
    LayerProfile p;
    p.microbatch_size = 2;
    p.forward_ns = forward;
    p.backward_ns = 2 * forward;
    l.profiles.push_back(p);
    m.layers.push_back(l);
  }
  return m;
}

TEST(BuiltinShardTest, ShardProfilesJoinTheWholeModelWithTheirCollectives) {
  Model base = TwoLayers(1000);
  const Model at2 = TwoLayers(600);
  ASSERT_TRUE(
      AddTensorParallelProfiles(
          &base, at2, 2,
          {.comm_bytes_per_sample = 2048, .forward_collectives = 2, .backward_collectives = 2})
          .ok());
  for (const Layer& l : base.layers) {
    ASSERT_EQ(l.profiles.size(), 2u);
    EXPECT_EQ(l.profiles[0].tensor_parallel, 1);
    EXPECT_FALSE(l.profiles[0].tp_comm_bytes.has_value());
    const LayerProfile& p = l.profiles[1];
    EXPECT_EQ(p.tensor_parallel, 2);
    EXPECT_FALSE(p.sequence_parallel);
    EXPECT_EQ(p.forward_ns, 600);
    EXPECT_EQ(p.tp_comm_bytes, 2 * 2048);  // micro-batch size 2
    EXPECT_EQ(p.tp_forward_collectives, 2);
    EXPECT_EQ(p.tp_backward_collectives, 2);
  }
}

TEST(BuiltinShardTest, ShardOfAnotherModelIsRefused) {
  Model base = TwoLayers(1000);
  Model other = TwoLayers(600);
  other.layers[1].parameters = 50;  // a per-GPU count where the whole one belongs
  Status st = AddTensorParallelProfiles(&base, other, 2, {});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("layer 1 differs"));
  other.layers.pop_back();
  EXPECT_THAT(AddTensorParallelProfiles(&base, other, 2, {}).message(),
              HasSubstr("measured 1 layer, the run at 1 measured 2"));
  EXPECT_THAT(AddTensorParallelProfiles(&base, TwoLayers(600), 1, {}).message(),
              HasSubstr("t >= 2"));
}

}  // namespace
}  // namespace pipecast
