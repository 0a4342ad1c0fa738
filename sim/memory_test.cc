#include "sim/memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pipecast {
namespace {

double Total(const MemoryConfig& m) {
  return m.weight_bytes_per_param + m.gradient_bytes_per_param + m.optimizer_bytes_per_param;
}

TEST(MemoryConfigFor, MixedPrecisionAdamIsTheSixteenByteDefault) {
  MemoryConfig m = MemoryConfigFor("bf16", "adam").value();
  EXPECT_EQ(m.weight_bytes_per_param, MemoryConfig{}.weight_bytes_per_param);
  EXPECT_EQ(m.gradient_bytes_per_param, MemoryConfig{}.gradient_bytes_per_param);
  EXPECT_EQ(m.optimizer_bytes_per_param, MemoryConfig{}.optimizer_bytes_per_param);
  EXPECT_EQ(Total(m), 16);
}

TEST(MemoryConfigFor, OtherCombinations) {
  EXPECT_EQ(Total(MemoryConfigFor("fp32", "adam").value()), 4 + 4 + 8);
  EXPECT_EQ(Total(MemoryConfigFor("fp16", "sgd").value()), 2 + 2 + 4 + 4);
  EXPECT_EQ(Total(MemoryConfigFor("fp32", "sgd-nomomentum").value()), 4 + 4);
  EXPECT_EQ(MemoryConfigFor("bf16", "sgd-nomomentum")->optimizer_bytes_per_param, 4);  // master
}

TEST(MemoryConfigFor, UnknownValuesNameTheFlag) {
  EXPECT_THAT(MemoryConfigFor("int8", "adam").status().message(),
              ::testing::HasSubstr("--precision is 'int8'"));
  EXPECT_THAT(MemoryConfigFor("bf16", "lamb").status().message(),
              ::testing::HasSubstr("--optimizer is 'lamb'"));
}

}  // namespace
}  // namespace pipecast
