// The eager element-wise kernel set (profiler/eager_kernels.h) on hand-worked
// layers, and the sdpa-flash2 attention kind's speed
// (profiler/attention_rates.h).
#include "profiler/eager_kernels.h"

#include <gtest/gtest.h>

#include "profiler/attention_rates.h"

namespace pipecast::internal {
namespace {

double Sum(const std::vector<MemoryKernel>& kernels, bool weight_gradient_only = false) {
  double total = 0;
  for (const MemoryKernel& k : kernels) {
    if (!weight_gradient_only || k.weight_gradient) total += k.bytes_per_sample;
  }
  return total;
}

// A tiny layer: 4 tokens x hidden 8 = 32 elements, bf16 (e = 2). Forward by
// hand: float 32*6 = 192, pow 32*8 = 256, mean 32*4 + 4*4 = 144, + eps 4*8 = 32,
// rsqrt 32, x * r 32*8 + 4*4 = 272, type_as 32*6 = 192, * weight 32*4 = 128:
// 1248 bytes in 8 kernels (the fused kernel: 2 * 32 * 2 = 128).
TEST(EagerKernels, RmsNormForwardOfATinyLayer) {
  const std::vector<MemoryKernel> k = EagerRmsNorm(/*elements=*/32, /*rows=*/4, /*e=*/2);
  EXPECT_EQ(k.size(), 8u);
  EXPECT_DOUBLE_EQ(Sum(k), 1248);
}

// Backward by hand, per element at e = 2: 4 + 6 + 2 + 6 + 8 + 12 + 4 + 4 + 8 + 8
// + 12 + 12 + 6 = 92, x 32 = 2944; per row: three rsqrt-backward kernels of 8
// and mean's backward reading 4: 4 * (24 + 4) = 112. 3056 bytes in 16 kernels, 8 * 32 = 256 of them
// the weight gradient (dy * nb, 6 B/element, and its sum over tokens, 2).
TEST(EagerKernels, RmsNormBackwardOfATinyLayer) {
  const std::vector<MemoryKernel> k = EagerRmsNormBackward(32, 4, 2);
  EXPECT_EQ(k.size(), 16u);
  EXPECT_DOUBLE_EQ(Sum(k), 32 * 92 + 4 * (3 * 8 + 4));
  EXPECT_DOUBLE_EQ(Sum(k, /*weight_gradient_only=*/true), 32 * 8);
}

// repeat_kv: 8 query heads, 2 kv heads, head dim 16, v dim 16; e_split = s * e
// / t = 4 * 2 = 8 bytes per column. K: read 2*16, write 8*16 columns = 160 x 8
// = 1280 bytes; V the same. Backward the same reads and writes reversed.
TEST(EagerKernels, RepeatKvCopiesKeysAndValuesUnderGroupedQueries) {
  AttentionCore a;
  a.query_heads = 8;
  a.kv_heads = 2;
  a.qk_dim = 16;
  a.v_dim = 16;
  EXPECT_DOUBLE_EQ(Sum(RepeatKv(a, 8)), 2 * (2 + 8) * 16 * 8.0);
  EXPECT_DOUBLE_EQ(Sum(RepeatKvBackward(a, 8)), 2 * (2 + 8) * 16 * 8.0);
  a.kv_heads = 8;  // repeat_kv returns x
  EXPECT_TRUE(RepeatKv(a, 8).empty());
  EXPECT_TRUE(RepeatKvBackward(a, 8).empty());
}

// sdpa-flash2 = flash2 x the factor, the factor = pytorch/pytorch#128888's
// figure over flash2's H100 table at s 4096, head dim 128: causal 205.6 / 319
// forward, 178.5 / (310 x 319 / 368) backward.
TEST(EagerKernels, SdpaFlash2IsFlash2TimesPytorchsMeasuredRatio) {
  const std::array<double, 2> causal = SdpaFlash2Factor(true);
  EXPECT_NEAR(causal[0], 205.6 / 319, 1e-12);
  EXPECT_NEAR(causal[1], 178.5 / (310.0 * 319 / 368), 1e-12);
  const std::array<double, 2> open = SdpaFlash2Factor(false);
  EXPECT_NEAR(open[0], 300.7 / 368, 1e-12);
  EXPECT_NEAR(open[1], 245.6 / 310, 1e-12);
  const GpuSpec gpu = ClusterPreset("h100-sxm")->gpu;
  for (bool mask : {true, false}) {
    const Result<FlashRates> flash2 = FlashRatesFor(gpu, FlashKernel::kFlash2, 8192, 128, mask);
    const Result<FlashRates> sdpa = FlashRatesFor(gpu, FlashKernel::kSdpaFlash2, 8192, 128, mask);
    ASSERT_TRUE(flash2.ok() && sdpa.ok());
    const std::array<double, 2> f = SdpaFlash2Factor(mask);
    EXPECT_NEAR(sdpa->forward_flops_per_s, flash2->forward_flops_per_s * f[0], 1);
    EXPECT_NEAR(sdpa->backward_flops_per_s, flash2->backward_flops_per_s * f[1], 1);
  }
}

}  // namespace
}  // namespace pipecast::internal
