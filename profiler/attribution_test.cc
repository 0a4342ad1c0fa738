// Attribution over plain events: hand-built traces with hand-worked answers.
#include "profiler/attribution.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "profiler/activity_test_util.h"

namespace pipecast {
namespace {

using ::testing::HasSubstr;

Attribution MustAttribute(const ActivityTrace& t) {
  Result<Attribution> a = Attribute(t);
  EXPECT_TRUE(a.ok()) << a.status().message();
  return a.ok() ? *a : Attribution();
}

const LayerSample* Find(const Attribution& a, const std::string& layer, Pass pass, int occ = 0) {
  for (const LayerSample& s : a.samples) {
    if (s.layer == layer && s.pass == pass && s.occurrence == occ) return &s;
  }
  return nullptr;
}

TEST(RangeNameTest, ParsesTheConvention) {
  Result<std::optional<LayerRangeName>> n =
      ParseLayerRangeName("pipecast:block.3:forward:params=1024:out=4096");
  ASSERT_TRUE(n.ok() && n->has_value());
  EXPECT_EQ((*n)->layer, "block.3");
  EXPECT_EQ((*n)->pass, Pass::kForward);
  EXPECT_EQ((*n)->parameters, 1024);
  EXPECT_EQ((*n)->output_bytes, 4096);
  EXPECT_FALSE((*n)->checkpoint_bytes.has_value());
  n = ParseLayerRangeName("pipecast:block.3:forward:out=4096:ckpt=4096:wgrad=65536");
  ASSERT_TRUE(n.ok() && n->has_value());
  EXPECT_EQ((*n)->checkpoint_bytes, 4096);
  EXPECT_EQ((*n)->weight_grad_bytes, 65536);
  n = ParseLayerRangeName("pipecast:lm_head:weight_grad");
  ASSERT_TRUE(n.ok() && n->has_value());
  EXPECT_EQ((*n)->pass, Pass::kWeightGrad);
  // Other names are not layers.
  for (const char* other : {"aten::mm", "pipecast:step", "pipecastx:a:forward"}) {
    n = ParseLayerRangeName(other);
    ASSERT_TRUE(n.ok()) << other;
    EXPECT_FALSE(n->has_value()) << other;
  }
}

TEST(RangeNameTest, TyposAreErrorsNotSilentlyDroppedLayers) {
  for (const char* bad : {"pipecast:block.0:fwd", "pipecast:block.0", "pipecast::forward",
                          "pipecast:a:forward:params=-3", "pipecast:a:forward:color=red"}) {
    Result<std::optional<LayerRangeName>> n = ParseLayerRangeName(bad);
    ASSERT_FALSE(n.ok()) << bad;
    EXPECT_THAT(n.status().message(), HasSubstr(bad));
  }
}

TEST(AttributionTest, KernelsGoToTheInnermostLayerRangeOnTheLaunchingThread) {
  TraceBuilder b;
  b.Range("pipecast:L0:forward", 1, 100, 200)
      .Range("pipecast:L0.attn:forward", 1, 120, 150)  // a sub-layer: folded into L0
      .Range("aten::mm", 1, 125, 140)                  // not a layer: transparent
      .Kernel(1, 110, 1000, 1100)
      .Kernel(1, 130, 1100, 1300)
      .Kernel(1, 250, 1400, 1500)   // after the range: outside layers
      .Kernel(0, 0, 1500, 1600)     // no API record: unmatched
      .Kernel(2, 130, 1600, 1650);  // another thread with no range open
  const Attribution a = MustAttribute(b.trace());
  ASSERT_EQ(a.samples.size(), 1u);
  const LayerSample& s = a.samples[0];
  EXPECT_EQ(s.layer, "L0");
  EXPECT_EQ(s.gpu_records, 2);
  EXPECT_EQ(s.busy_ns, 300u);
  EXPECT_EQ(s.sum_ns, 300u);
  EXPECT_EQ(a.stats.attributed, 2u);
  EXPECT_EQ(a.stats.outside_layers, 2u);
  EXPECT_EQ(a.stats.unmatched, 1u);
  EXPECT_EQ(a.stats.unattributed_busy_ns, 250u);
}

TEST(AttributionTest, OverlappingStreamsCountOnceButDevicesAdd) {
  TraceBuilder b;
  b.Range("pipecast:L:forward", 1, 0, 100)
      .Kernel(1, 10, 1000, 1100, /*device=*/0, /*stream=*/1)
      .Kernel(1, 20, 1050, 1150, 0, 2)   // overlaps the first by 50
      .Kernel(1, 30, 1000, 1100, 1, 1);  // device 1: its own timeline
  const Attribution a = MustAttribute(b.trace());
  ASSERT_EQ(a.samples.size(), 1u);
  EXPECT_EQ(a.samples[0].sum_ns, 300u);
  EXPECT_EQ(a.samples[0].busy_ns, 150u + 100u);
}

TEST(AttributionTest, ThreadsKeepTheirOwnRanges) {
  // Forward on the main thread while the autograd thread runs a backward:
  // the ranges overlap in time, the launching thread decides.
  TraceBuilder b;
  b.Range("pipecast:A:forward", 1, 0, 1000)
      .Range("pipecast:B:backward", 2, 100, 900)
      .Kernel(1, 500, 2000, 2010)
      .Kernel(2, 500, 2010, 2040);
  const Attribution a = MustAttribute(b.trace());
  ASSERT_NE(Find(a, "A", Pass::kForward), nullptr);
  ASSERT_NE(Find(a, "B", Pass::kBackward), nullptr);
  EXPECT_EQ(Find(a, "A", Pass::kForward)->busy_ns, 10u);
  EXPECT_EQ(Find(a, "B", Pass::kBackward)->busy_ns, 30u);
}

TEST(AttributionTest, BackwardIncludesWeightGradNestedOrSeparate) {
  TraceBuilder b;
  // Occurrence 0: weight_grad nested inside backward.
  b.Range("pipecast:L:backward", 1, 0, 100)
      .Range("pipecast:L:weight_grad", 1, 50, 90)
      .Kernel(1, 10, 1000, 1030)   // input gradient
      .Kernel(1, 60, 1030, 1050);  // weight gradient
  // Occurrence 1: run separately, as split-backward schedules do.
  b.Range("pipecast:L:backward", 1, 200, 300)
      .Kernel(1, 210, 2000, 2030)
      .Range("pipecast:L:weight_grad", 1, 400, 500)
      .Kernel(1, 410, 3000, 3020);
  const Attribution a = MustAttribute(b.trace());
  for (int occ : {0, 1}) {
    const LayerSample* bw = Find(a, "L", Pass::kBackward, occ);
    const LayerSample* wg = Find(a, "L", Pass::kWeightGrad, occ);
    ASSERT_NE(bw, nullptr);
    ASSERT_NE(wg, nullptr);
    EXPECT_EQ(bw->busy_ns, 50u) << occ;
    EXPECT_EQ(wg->busy_ns, 20u) << occ;
  }
}

TEST(AttributionTest, MemoryKeptAndPeakFromAllocationReplay) {
  TraceBuilder b;
  b.Malloc(1, 10, 0xA0, 1000)  // before the range: sets the baseline
      .Range("pipecast:L:forward", 1, 100, 200)
      .Malloc(1, 110, 0xB0, 100)  // kept for the backward
      .Malloc(1, 120, 0xC0, 50)   // a temporary...
      .Free(1, 140, 0xC0, 50)     // ...freed inside the range
      .Free(1, 150, 0xA0, 1000)   // older memory freed: lowers the total, not the kept bytes
      .Range("pipecast:L:backward", 1, 300, 400)
      .Free(1, 310, 0xB0, 100);
  const Attribution a = MustAttribute(b.trace());
  const LayerSample* fw = Find(a, "L", Pass::kForward);
  ASSERT_NE(fw, nullptr);
  EXPECT_EQ(fw->kept_bytes, 100);
  EXPECT_EQ(fw->peak_bytes, 150);  // 1000 before; 1150 at t=120
  const LayerSample* bw = Find(a, "L", Pass::kBackward);
  ASSERT_NE(bw, nullptr);
  EXPECT_EQ(bw->kept_bytes, 0);
  EXPECT_EQ(bw->peak_bytes, 0);
  EXPECT_EQ(a.stats.memory_attributed, 5u);  // all but the first malloc, outside any range
}

TEST(AttributionTest, StepRangesNumberTheIterations) {
  TraceBuilder b;
  for (int step = 0; step < 3; ++step) {
    const uint64_t t0 = 1000 * step;
    b.Range("pipecast:step", 1, t0, t0 + 900)
        .Range("pipecast:L:forward", 1, t0 + 100, t0 + 200)
        .Kernel(1, t0 + 150, 10000 + t0, 10000 + t0 + 10 * (step + 1))
        .Range("pipecast:L:backward", 2, t0 + 300, t0 + 400)  // autograd thread
        .Kernel(2, t0 + 350, 20000 + t0, 20000 + t0 + 5)
        .Kernel(1, t0 + 800, 30000 + t0, 30000 + t0 + 7);  // optimizer: no layer
  }
  b.Range("pipecast:L:forward", 1, 5000, 5100);  // after the last step
  const Attribution a = MustAttribute(b.trace());
  EXPECT_EQ(a.stats.steps, 3);
  EXPECT_EQ(a.stats.samples_outside_steps, 1u);
  ASSERT_EQ(a.steps.size(), 3u);
  for (int step = 0; step < 3; ++step) {
    const LayerSample* fw = Find(a, "L", Pass::kForward, step);
    ASSERT_NE(fw, nullptr);
    EXPECT_EQ(fw->step, step);
    EXPECT_EQ(fw->busy_ns, 10u * (step + 1));
    EXPECT_EQ(a.steps[step].busy_ns, 10u * (step + 1) + 5 + 7);
    EXPECT_EQ(a.steps[step].wall_ns, 900u);
  }
}

TEST(AttributionTest, UnbalancedMarkersAreCounted) {
  ActivityTrace t;
  t.markers.push_back({MarkerEvent::Phase::kStart, 10, 1, 1, "pipecast:L:forward", ""});
  t.markers.push_back({MarkerEvent::Phase::kEnd, 20, 2, 1, "", ""});  // no START with id 2
  // END before START in the vector (buffers from two threads) still pairs.
  t.markers.push_back({MarkerEvent::Phase::kEnd, 50, 3, 1, "", ""});
  t.markers.push_back({MarkerEvent::Phase::kStart, 30, 3, 1, "pipecast:M:forward", ""});
  const Attribution a = MustAttribute(t);
  EXPECT_EQ(a.stats.unclosed_ranges, 1u);
  EXPECT_EQ(a.stats.unmatched_range_ends, 1u);
  ASSERT_EQ(a.samples.size(), 1u);
  EXPECT_EQ(a.samples[0].layer, "M");
}

TEST(AttributionTest, SizesComeFromRangeNamesOrInstantMarkers) {
  TraceBuilder b;
  b.Range("pipecast:A:forward:params=10", 1, 0, 10).Range("pipecast:B:forward", 1, 20, 30);
  b.trace().markers.push_back(
      {MarkerEvent::Phase::kInstant, 29, 99, 1, "pipecast:B:forward:params=7:out=64", ""});
  const Attribution a = MustAttribute(b.trace());
  ASSERT_EQ(a.samples.size(), 2u);
  EXPECT_EQ(a.samples[0].parameters, 10);
  EXPECT_FALSE(a.samples[0].output_bytes.has_value());
  EXPECT_EQ(a.samples[1].parameters, 7);
  EXPECT_EQ(a.samples[1].output_bytes, 64);
}

TEST(AttributionTest, MalformedLayerNameFailsTheTrace) {
  TraceBuilder b;
  b.Range("pipecast:L:forwrd", 1, 0, 10);
  Result<Attribution> a = Attribute(b.trace());
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("unknown pass 'forwrd'"));
}

TEST(RecordLossTest, RefusesPastOnePercent) {
  ActivityTrace t;
  t.gpu.resize(99);
  t.zero_timestamp_records = 1;  // 1 of 100: exactly the limit, accepted
  EXPECT_TRUE(CheckRecordLoss(t, 0).ok());
  t.zero_timestamp_records = 2;  // 2 of 101
  Status st = CheckRecordLoss(t, 0);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("2 of 101 GPU records have no timestamps"));
  EXPECT_THAT(st.message(), HasSubstr("--device-buffer-mib"));

  t.zero_timestamp_records = 0;
  t.dropped_records = 5;  // 5 of 104
  EXPECT_THAT(CheckRecordLoss(t, 0).message(), HasSubstr("dropped"));
  t.dropped_records = 0;
  EXPECT_THAT(CheckRecordLoss(t, 2).message(), HasSubstr("no launching API record"));
  EXPECT_TRUE(CheckRecordLoss(t, 2, /*max_fraction=*/0.05).ok());
}

}  // namespace
}  // namespace pipecast
