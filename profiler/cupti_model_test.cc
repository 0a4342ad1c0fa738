// From traces to a model: the checks MeasureTraces makes before trusting a
// trace, and several processes pooled.
#include "profiler/cupti_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "profiler/activity_test_util.h"

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
