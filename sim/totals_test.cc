#include "sim/totals.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sim/simulator.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using test_util::IdealCluster;
using test_util::UniformModel;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr TimeNs kMaxOpNs = 1'000'000'000'000'000;  // 10^12 us, the file limit for one op
constexpr Bytes kMaxFieldBytes = Bytes{1} << 50;    // the file limit for one size

Result<SimResult> GPipe(const Model& model, int microbatches, const Cluster& cluster) {
  Result<Schedule> s = MakeSchedule(ScheduleKind::kGPipe, 2, microbatches);
  EXPECT_TRUE(s.ok()) << s.status().message();
  SimOptions o;
  o.record_timeline = false;
  return Simulate(model, cluster, *s, o);
}

// Issue 17: per-op times and sizes each within their limits summed past 2^63
// and wrapped. The bound: 2 layers x (2 x 10^15 ns) x m <= 2^62 (4.61e18)
// holds up to m = 1152 (4.608e18 ns) and fails at 1153; at 1200 it is 4.8e18.
TEST(SumOverflow, TimesEachWithinTheirLimitAreRefusedWhenTheirSumPasses2To62) {
  const Model model = UniformModel(2, kMaxOpNs, 0);

  Result<SimResult> over = GPipe(model, 1200, IdealCluster());
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(over.status().message(),
              AllOf(HasSubstr("forward_us + backward_us summed over the model's 2 layers at "
                              "micro-batch size 1, times 1200 micro-batches, is 4.8e+18 ns, "
                              "over the 4.61e+18 ns (2^62)"),
                    HasSubstr("--microbatches")));
  EXPECT_FALSE(GPipe(model, 1153, IdealCluster()).ok());

  // Just inside: GPipe on 2 stages with B = 0 ends after (m + 1) forwards,
  // exactly, and positive.
  Result<SimResult> inside = GPipe(model, 1152, IdealCluster());
  ASSERT_TRUE(inside.ok()) << inside.status().message();
  EXPECT_EQ(inside->iteration_ns, 1153 * kMaxOpNs);
}

// 2 layers of 2^50 activation bytes: GPipe's stage 0 holds all m forwards'
// activations at once, m x 2^50 bytes. The bound 2 x 2^50 x m <= 2^62 holds
// up to m = 2048.
TEST(SumOverflow, SizesEachWithinTheirLimitAreRefusedWhenTheirSumPasses2To62) {
  const Model model = UniformModel(2, 1000, 1000, kMaxFieldBytes);

  Result<SimResult> over = GPipe(model, 2049, IdealCluster());
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(),
              AllOf(HasSubstr("activation_bytes + output_bytes + workspace_bytes"),
                    HasSubstr("times 2049 micro-batches"), HasSubstr("bytes (2^62)")));

  Result<SimResult> inside = GPipe(model, 2048, IdealCluster());
  ASSERT_TRUE(inside.ok()) << inside.status().message();
  EXPECT_EQ(inside->per_rank[0].peak_memory_bytes, 2048 * kMaxFieldBytes);  // 2^61
}

// 256 layers of 2^50 parameters at the default 2 + 4 + 12 bytes each, on 2
// stages: 2^58 x 18 x 2 = 1.04e19 bytes, past 2^62.
TEST(SumOverflow, ParametersSummedOverLayersAreRefusedNamingTheField) {
  const Model model = UniformModel(256, 1000, 1000, 0, 0, int64_t{1} << 50);
  Result<SimResult> r = GPipe(model, 2, IdealCluster());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              AllOf(HasSubstr("parameters summed over the model's 256 layers (2.88e+17) times 18 "
                              "bytes per parameter, times 2 stages"),
                    HasSubstr("a count, not bytes")));
}

// A link of 10^-9 GB/s (1 byte/s) carrying 2^40 bytes: 1.1e21 ns per transfer.
TEST(SumOverflow, TransfersOverASlowLinkAreRefusedNamingTheBandwidth) {
  const Model model = UniformModel(2, 1000, 1000, 0, Bytes{1} << 40);
  Cluster slow = IdealCluster();
  slow.intra_node.bandwidth_gbps = 1e-9;
  slow.inter_node.bandwidth_gbps = 1e-9;
  Result<SimResult> r = GPipe(model, 2, slow);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              AllOf(HasSubstr("output_bytes summed over the model's 2 layers"),
                    HasSubstr("1e-09 GB/s"), HasSubstr("bandwidth_gbps")));
}

TEST(SumOverflow, ARealModelIsFarInside) {
  // gpt-7b-like: 32 layers of 10 ms, 1 GiB activations, 200M parameters, m = 1024.
  const Model model = UniformModel(32, 10'000'000, 20'000'000, kGiB, 16 * kMiB, 200'000'000);
  TotalsInput in;
  in.microbatches = 1024;
  in.stages = 8;
  EXPECT_TRUE(CheckTotals(model, IdealCluster(), in).ok());
}

}  // namespace
}  // namespace pipecast
