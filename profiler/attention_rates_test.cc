// FlashAttention speeds (profiler/attention_rates.h) against the published
// figures they come from (docs/research/kernel-benchmarks.md section 2).
#include "profiler/attention_rates.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace pipecast {
namespace {

GpuSpec Gpu(const char* preset) { return ClusterPreset(preset)->gpu; }

FlashRates At(const char* preset, FlashKernel kernel, double seq, double head_dim, bool causal) {
  Result<FlashRates> r = FlashRatesFor(Gpu(preset), kernel, seq, head_dim, causal);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : FlashRates{};
}

// The combined forward + backward speed of a split: 3.5 FLOP units over the
// forward's 1 and the backward's 2.5.
double Combined(const FlashRates& r) {
  return 3.5 / (1 / r.forward_flops_per_s + 2.5 / r.backward_flops_per_s);
}

TEST(AttentionRates, PublishedPointsAreReadAsPublished) {
  // Shah et al. 2024, Figure 5 (forward) and Figure 6 (backward), H100.
  EXPECT_DOUBLE_EQ(At("h100-sxm", FlashKernel::kFlash3, 2048, 128, true).forward_flops_per_s,
                   521e12);
  EXPECT_DOUBLE_EQ(At("h100-sxm", FlashKernel::kFlash2, 8192, 64, false).forward_flops_per_s,
                   322e12);
  EXPECT_DOUBLE_EQ(At("h100-sxm", FlashKernel::kFlash2, 2048, 128, false).backward_flops_per_s,
                   291e12);
  EXPECT_DOUBLE_EQ(At("h100-sxm", FlashKernel::kFlash3, 16384, 64, false).backward_flops_per_s,
                   474e12);
}

TEST(AttentionRates, CausalBackwardScalesAsTheForwardDoes) {
  // FlashAttention-2, H100, head dim 128, s 2k: backward without a mask 291,
  // forward 362 without and 298 with: 291 x 298 / 362 with the mask.
  const FlashRates r = At("h100-sxm", FlashKernel::kFlash2, 2048, 128, true);
  EXPECT_NEAR(r.backward_flops_per_s, 291e12 * 298 / 362, 1e6);
  // Head dim 256 has no published backward: head dim 128's scaled by the
  // forward, 322 x 326 / 370 at 16k.
  EXPECT_NEAR(At("h100-sxm", FlashKernel::kFlash2, 16384, 256, false).backward_flops_per_s,
              322e12 * 326 / 370, 1e6);
}

TEST(AttentionRates, SplitTablesMatchFlashAttentionTwosCombinedFigureOnH100) {
  // The README's H100 forward + backward figure (Dao-AILab/flash-attention
  // assets/flash2_h100_fwd_bwd_benchmark.png), head dims 64 and 128, with
  // and without a causal mask, against the split tables of a later
  // FlashAttention-2 (the FlashAttention-3 paper's), within 12%.
  struct Row {
    int head_dim;
    bool causal;
    double tflops[6];
  };
  const Row rows[] = {{64, false, {215, 254, 274, 288, 294, 296}},
                      {128, false, {248, 294, 320, 326, 335, 338}},
                      {64, true, {141, 192, 232, 257, 273, 284}},
                      {128, true, {163, 221, 265, 294, 308, 328}}};
  for (const Row& row : rows) {
    for (int i = 0; i < 6; ++i) {
      const double seq = 512 << i;
      const double predicted =
          Combined(At("h100-sxm", FlashKernel::kFlash2, seq, row.head_dim, row.causal)) / 1e12;
      EXPECT_NEAR(predicted, row.tflops[i], 0.12 * row.tflops[i])
          << "head dim " << row.head_dim << " causal " << row.causal << " s " << seq;
    }
  }
}

TEST(AttentionRates, CombinedTablesSplitBackIntoTheirFigure) {
  // A100, FlashAttention's Triton kernel, causal, head dim 128 (the README's
  // A100 figure): 50, 61, 68, 74, 78, 80 TFLOP/s forward + backward, the
  // backward at 0.8 x the forward's speed.
  const double published[] = {50, 61, 68, 74, 78, 80};
  for (int i = 0; i < 6; ++i) {
    const FlashRates r = At("a100-80gb", FlashKernel::kTriton, 512 << i, 128, true);
    EXPECT_NEAR(Combined(r) / 1e12, published[i], 1e-9);
    EXPECT_NEAR(r.backward_flops_per_s / r.forward_flops_per_s, kCombinedBackwardOverForward,
                1e-12);
  }
}

TEST(AttentionRates, InterpolatedInLogSequenceAndHeadDimClampedOutside) {
  const auto fwd = [](double seq, double head_dim) {
    return At("h100-sxm", FlashKernel::kFlash3, seq, head_dim, true).forward_flops_per_s / 1e12;
  };
  // Halfway between 1k and 2k in log2: (423 + 521) / 2.
  EXPECT_NEAR(fwd(1024 * std::sqrt(2.0), 128), (423 + 521) / 2.0, 1e-9);
  // Head dim 96, halfway between 64 (371) and 128 (521) at 2k.
  EXPECT_NEAR(fwd(2048, 96), (371 + 521) / 2.0, 1e-9);
  // Outside: the nearest published point.
  EXPECT_NEAR(fwd(128, 128), 292, 1e-9);
  EXPECT_NEAR(fwd(131072, 128), 616, 1e-9);
  EXPECT_NEAR(fwd(2048, 32), 371, 1e-9);
  EXPECT_NEAR(fwd(2048, 512), 537, 1e-9);
  // The combined tables stop at head dim 128.
  EXPECT_NEAR(Combined(At("a100-80gb", FlashKernel::kFlash2, 2048, 256, true)) / 1e12, 155, 1e-9);
}

TEST(AttentionRates, FlashAttentionThreeNeedsHopper) {
  Result<FlashRates> r = FlashRatesFor(Gpu("a100-80gb"), FlashKernel::kFlash3, 2048, 128, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--attention flash3"), std::string::npos);
}

TEST(AttentionRates, OtherGpusUseTheHundredTable) {
  // The H200 has the H100's SMs and clocks: its table, unscaled.
  const FlashRates h200 = At("h200", FlashKernel::kFlash2, 2048, 128, true);
  EXPECT_DOUBLE_EQ(h200.forward_flops_per_s, 298e12);
  EXPECT_FALSE(h200.scaled);
  // A GPU without a table: the H100's scaled by its peak, and it says so.
  GpuSpec other;
  other.name = "some GPU";
  other.peak_tflops = 494.5;
  Result<FlashRates> r = FlashRatesFor(other, FlashKernel::kFlash2, 2048, 128, true);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->forward_flops_per_s, 149e12);
  EXPECT_TRUE(r->scaled);
  EXPECT_NE(r->table.find("scaled"), std::string::npos);
}

TEST(AttentionRates, PowerLimitedGpusRunTheirTableAtTheirPeak) {
  // An H100 capped at 500 W (torchtitan's Grand Teton hosts; bf16 peak 835
  // TFLOP/s) runs the H100 table at 835 / 989 of its speed, as any GPU
  // without its own table runs the H100's at its peak.
  GpuSpec capped = Gpu("h100-sxm");
  capped.peak_tflops = 835;
  Result<FlashRates> r = FlashRatesFor(capped, FlashKernel::kFlash2, 2048, 128, true);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->forward_flops_per_s, 298e12 * 835 / 989, 1e3);
  EXPECT_TRUE(r->scaled);
  EXPECT_NE(r->table.find("835 / 989"), std::string::npos);
  // An A100 at another peak: its own table, scaled the same way.
  GpuSpec a100 = Gpu("a100-80gb");
  a100.peak_tflops = 156;
  r = FlashRatesFor(a100, FlashKernel::kFlash2, 2048, 128, true);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(Combined(*r) / 1e12, 155 / 2.0, 1e-9);
  // The presets are the tables' own GPUs at their peaks: unscaled.
  for (const char* preset : {"h100-sxm", "a100-80gb", "h200"}) {
    EXPECT_FALSE(At(preset, FlashKernel::kFlash2, 2048, 128, true).scaled) << preset;
  }
}

}  // namespace
}  // namespace pipecast
