#include "sim/memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pipecast {
namespace {

double Total(const MemoryConfig& m) { return ShardedBytesPerParam(m, 1).Total(); }

MemoryConfig At(MemoryConfig m, int zero) {
  m.zero = zero;
  return m;
}

TEST(MemoryConfigFor, DefaultIsMegatronsEighteenBytes) {
  // Given the flags' defaults (bf16, adam, fp32 main gradients)
  MemoryConfig m = MemoryConfigFor("bf16", "adam").value();
  // then they are the struct's defaults: 2 + 4 + 12 = 18 bytes, level 0.
  EXPECT_EQ(m.weight_bytes_per_param, MemoryConfig{}.weight_bytes_per_param);
  EXPECT_EQ(m.gradient_bytes_per_param, MemoryConfig{}.gradient_bytes_per_param);
  EXPECT_EQ(m.optimizer_bytes_per_param, MemoryConfig{}.optimizer_bytes_per_param);
  EXPECT_EQ(m.gradient_copy_bytes_per_param, MemoryConfig{}.gradient_copy_bytes_per_param);
  EXPECT_EQ(m.zero, 0);
  EXPECT_EQ(Total(m), 18);
}

TEST(MemoryConfigFor, OtherCombinations) {
  EXPECT_EQ(Total(MemoryConfigFor("fp32", "adam").value()), 4 + 4 + 8);
  EXPECT_EQ(Total(MemoryConfigFor("fp16", "adam", "fp16").value()), 2 + 2 + 4 + 8 + 4);
  EXPECT_EQ(Total(MemoryConfigFor("fp16", "sgd", "fp32").value()), 2 + 4 + 4 + 4);
  EXPECT_EQ(Total(MemoryConfigFor("fp32", "sgd-nomomentum").value()), 4 + 4);
  EXPECT_EQ(MemoryConfigFor("bf16", "sgd-nomomentum")->optimizer_bytes_per_param, 4);  // main
}

TEST(MemoryConfigFor, UnknownValuesNameTheFlag) {
  EXPECT_THAT(MemoryConfigFor("int8", "adam").status().message(),
              ::testing::HasSubstr("--precision is 'int8'"));
  EXPECT_THAT(MemoryConfigFor("bf16", "lamb").status().message(),
              ::testing::HasSubstr("--optimizer is 'lamb'"));
  EXPECT_THAT(MemoryConfigFor("bf16", "adam", "fp8").status().message(),
              ::testing::HasSubstr("--grad-dtype is 'fp8'"));
  EXPECT_THAT(MemoryConfigFor("fp32", "adam", "bf16").status().message(),
              ::testing::HasSubstr("--grad-dtype is 'bf16' but --precision is fp32"));
}

TEST(MemoryConfigValidate, ZeroLevelOutsideZeroToThreeNamesTheFlag) {
  EXPECT_TRUE(At(MemoryConfig{}, 3).Validate().ok());
  EXPECT_THAT(At(MemoryConfig{}, 4).Validate().message(), ::testing::HasSubstr("--zero is 4"));
  EXPECT_THAT(At(MemoryConfig{}, -1).Validate().message(), ::testing::HasSubstr("--zero is -1"));
}

// Megatron-LM docs/source/distrib_optimizer.md, bytes per parameter:
//   fp16 param, fp16 grads   20   4 + 16/d
//   bf16 param, fp32 grads   18   6 + 12/d
//   fp32 param, fp32 grads   16   8 + 8/d
struct MegatronRow {
  const char* precision;
  const char* grad_dtype;
  double plain;      // non-distributed optimizer
  double unsharded;  // distributed optimizer: a + b/d
  double sharded;
};

TEST(ShardedBytesPerParam, MegatronsTableExactlyAtLevelsZeroAndOne) {
  const MegatronRow rows[] = {
      {"fp16", "fp16", 20, 4, 16}, {"bf16", "fp32", 18, 6, 12}, {"fp32", "fp32", 16, 8, 8}};
  for (const MegatronRow& row : rows) {
    const MemoryConfig m = MemoryConfigFor(row.precision, "adam", row.grad_dtype).value();
    for (int d : {1, 2, 8}) {
      SCOPED_TRACE(::testing::Message() << row.precision << "/" << row.grad_dtype << " d=" << d);
      EXPECT_DOUBLE_EQ(ShardedBytesPerParam(At(m, 0), d).Total(), row.plain);
      EXPECT_DOUBLE_EQ(ShardedBytesPerParam(At(m, 1), d).Total(), row.unsharded + row.sharded / d);
    }
  }
}

TEST(ShardedBytesPerParam, ZeroTwoAndThreeAsRajbhandariEtAl) {
  // ZeRO §5 with mixed-precision Adam (fp16 parameters and gradients, K = 12):
  // P_os+g 2Ψ + 14Ψ/N_d, P_os+g+p 16Ψ/N_d. Ψ = 7.5B, N_d = 64: 16.6 and 1.9 GB.
  MemoryConfig m = MemoryConfigFor("fp16", "adam", "fp16").value();
  for (int d : {1, 4, 64}) {
    EXPECT_DOUBLE_EQ(ShardedBytesPerParam(At(m, 2), d).Total(), 2 + 14.0 / d);
    EXPECT_DOUBLE_EQ(ShardedBytesPerParam(At(m, 3), d).Total(), 16.0 / d);
  }
  EXPECT_NEAR(7.5e9 * ShardedBytesPerParam(At(m, 2), 64).Total() / 1e9, 16.6, 0.05);
  EXPECT_NEAR(7.5e9 * ShardedBytesPerParam(At(m, 3), 64).Total() / 1e9, 1.9, 0.05);
  // Generalised: bf16 parameters with fp32 main gradients, d = 8:
  // level 2 keeps 2 + (4 + 12)/8 = 4, level 3 (2 + 4 + 12)/8 = 2.25.
  m = MemoryConfigFor("bf16", "adam").value();
  const ShardedBytes two = ShardedBytesPerParam(At(m, 2), 8);
  EXPECT_DOUBLE_EQ(two.weights, 2);
  EXPECT_DOUBLE_EQ(two.gradients, 0.5);
  EXPECT_DOUBLE_EQ(two.optimizer, 1.5);
  EXPECT_DOUBLE_EQ(ShardedBytesPerParam(At(m, 3), 8).Total(), 2.25);
}

// FP8 bytes per parameter per recipe, worked by hand (docs/simulator.md
// "Memory"): bf16 parameters (2), fp32 main gradients (4), fp32 main
// parameters and Adam's moments (12), plus the FP8 weight and its transpose
// with the recipe's scales.
TEST(MemoryConfigFor, Fp8BytesPerParameterPerRecipe) {
  struct Row {
    const char* recipe;
    double fp8_copies;
  };
  const Row rows[] = {
      {"delayed", 2},                        // 2 x 1 B, one scale per tensor
      {"current", 2},                        // the same copies; the scale is this step's amax
      {"blockwise", 2 * (1 + 4.0 / 16384)},  // an fp32 scale per 128 x 128 block
      {"mxfp8", 2 * (1 + 1.0 / 32)},         // an E8M0 byte per 32 elements: 2.0625
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.recipe);
    const MemoryConfig m = MemoryConfigFor("fp8", "adam", "fp32", row.recipe).value();
    EXPECT_EQ(Fp8RecipeName(m.fp8_recipe), std::string(row.recipe));
    EXPECT_DOUBLE_EQ(m.fp8_weight_bytes_per_param, row.fp8_copies);
    const ShardedBytes plain = ShardedBytesPerParam(m, 1);
    EXPECT_DOUBLE_EQ(plain.weights, 2 + row.fp8_copies);
    EXPECT_DOUBLE_EQ(plain.fp8_weights, row.fp8_copies);
    EXPECT_DOUBLE_EQ(plain.Total(), 18 + row.fp8_copies);  // delayed: 20 B, 2 more than bf16
    EXPECT_DOUBLE_EQ(m.GatherBytesPerParam(), 2);          // bf16 gathers
    // ZeRO 3 over 8: every part / 8, the FP8 copies with the parameters.
    const ShardedBytes three = ShardedBytesPerParam(At(m, 3), 8);
    EXPECT_DOUBLE_EQ(three.fp8_weights, row.fp8_copies / 8);
    EXPECT_DOUBLE_EQ(three.Total(), (18 + row.fp8_copies) / 8);
  }
  // FP8 primary weights (Megatron-LM --fp8-param-gather): no bf16 copy, 1 B
  // gathered: 2 + 4 + 12 = 18 B, the same as bf16.
  const MemoryConfig g = MemoryConfigFor("fp8", "adam", "fp32", "delayed", true).value();
  EXPECT_DOUBLE_EQ(ShardedBytesPerParam(g, 1).Total(), 18);
  EXPECT_DOUBLE_EQ(ShardedBytesPerParam(g, 1).weights, 2);
  EXPECT_DOUBLE_EQ(g.GatherBytesPerParam(), 1);
  // The recipe defaults to delayed; bf16 has no FP8 copies.
  EXPECT_EQ(MemoryConfigFor("fp8", "adam").value().fp8_recipe, Fp8Recipe::kDelayed);
  EXPECT_DOUBLE_EQ(ShardedBytesPerParam(MemoryConfigFor("bf16", "adam").value(), 1).fp8_weights, 0);
}

TEST(MemoryConfigFor, Fp8GathersKeepTheEmbeddingAndTheHeadInBf16) {
  // torchao swaps only nn.Linear for Float8Linear and torchtitan filters the
  // output out (filter_fqns = ["output"], llama3_8b.toml @ e7c0cae): with
  // FP8 gathers a block gathers 1 B per parameter, the embedding and the
  // head 2 B (bf16, FSDP2's param_dtype).
  const MemoryConfig g = MemoryConfigFor("fp8", "adam", "fp32", "current", true).value();
  EXPECT_DOUBLE_EQ(g.GatherBytesPerParam("block.0"), 1);
  EXPECT_DOUBLE_EQ(g.GatherBytesPerParam("embedding"), 2);
  EXPECT_DOUBLE_EQ(g.GatherBytesPerParam("lm_head"), 2);
  EXPECT_DOUBLE_EQ(g.KeptBf16GatherBytesPerParam(), 2);
  // Without FP8 gathers, and in bf16, every layer gathers its weights' 2 B.
  for (const MemoryConfig& m : {MemoryConfigFor("fp8", "adam", "fp32", "current").value(),
                                MemoryConfigFor("bf16", "adam").value()}) {
    EXPECT_DOUBLE_EQ(m.GatherBytesPerParam("block.0"), 2);
    EXPECT_DOUBLE_EQ(m.GatherBytesPerParam("embedding"), 2);
    EXPECT_DOUBLE_EQ(m.KeptBf16GatherBytesPerParam(), 2);
  }
  EXPECT_TRUE(KeptInBf16UnderFp8("lm_head"));
  EXPECT_FALSE(KeptInBf16UnderFp8("block.31"));
}

TEST(MemoryConfigFor, Fp8SettingsAreRefusedWithTheFlagNamed) {
  const Result<MemoryConfig> unknown = MemoryConfigFor("fp8", "adam", "fp32", "tensorwise");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), ::testing::HasSubstr("--fp8-recipe is 'tensorwise'"));
  const Result<MemoryConfig> bf16 = MemoryConfigFor("bf16", "adam", "fp32", "delayed");
  ASSERT_FALSE(bf16.ok());
  EXPECT_THAT(bf16.status().message(), ::testing::HasSubstr("need --precision fp8"));
  EXPECT_FALSE(MemoryConfigFor("bf16", "adam", "fp32", "", true).ok());
}

TEST(CheckFp8Support, A100HasNoFp8AndHopperNoMxfp8) {
  const GpuSpec a100{.name = "NVIDIA A100-SXM4-80GB", .peak_tflops = 312};
  const GpuSpec h100{.name = "NVIDIA H100 80GB HBM3", .peak_tflops = 989, .peak_fp8_tflops = 1979};
  const Status no_fp8 = CheckFp8Support(Fp8Recipe::kDelayed, a100);
  ASSERT_FALSE(no_fp8.ok());
  EXPECT_THAT(no_fp8.message(), ::testing::HasSubstr("--precision fp8"));
  EXPECT_THAT(no_fp8.message(), ::testing::HasSubstr("no FP8 tensor cores"));
  EXPECT_TRUE(CheckFp8Support(Fp8Recipe::kNone, a100).ok());
  EXPECT_TRUE(CheckFp8Support(Fp8Recipe::kBlockwise, h100).ok());
  const Status mx = CheckFp8Support(Fp8Recipe::kMxfp8, h100);
  ASSERT_FALSE(mx.ok());
  EXPECT_THAT(mx.message(), ::testing::HasSubstr("--fp8-recipe mxfp8"));
  GpuSpec blackwell = h100;
  blackwell.mxfp8 = true;
  EXPECT_TRUE(CheckFp8Support(Fp8Recipe::kMxfp8, blackwell).ok());
  EXPECT_TRUE(CheckFp8Support(Fp8Recipe::kDelayed, GpuSpec{.name = "ideal"}).ok());  // unknown
}

}  // namespace
}  // namespace pipecast
