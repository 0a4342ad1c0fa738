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

}  // namespace
}  // namespace pipecast
