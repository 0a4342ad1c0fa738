// Megatron-LM's log lines (measured/megatron_log.h), in the formats of megatron/training/
// training.py (training_log) and megatron/training/utils/common_utils.py (report_memory) at
// NVIDIA/Megatron-LM d98e8a64.
#include "measured/megatron_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pipecast::measured {
namespace {

using ::testing::HasSubstr;

// Lines as training_log and report_memory print them: a timestamp, '|'-separated fields with
// padded numbers, fields present or absent by flags.
constexpr char kLog[] =
    "training ...\n"
    " [2025-04-13 23:41:12] iteration       10/    1000 | consumed samples:          160 | "
    "elapsed time per iteration (ms): 1147.6 | learning rate: 0.000000E+00 | global batch size: "
    "   16 | loss scale: 8388608.0 | number of skipped iterations:  10 | number of nan "
    "iterations:   0 |\n"
    "Theoretical memory footprints: weight and optimizer=2121.85 MB\n"
    "[Rank 0] (after 10 iterations) memory (MB) | allocated: 1464.33154296875 | max allocated: "
    "1464.3408203125 | reserved: 1576.0 | max reserved: 1576.0\n"
    "[Rank 4] (after 10 iterations) memory (MB) | allocated: 1000.0 | max allocated: 2048.0 | "
    "reserved: 3000.0 | max reserved: 3000.0\n"
    " [2025-04-13 23:41:20] iteration       20/    1000 | consumed samples:          320 | "
    "elapsed time per iteration (ms): 820.7 | throughput per GPU (TFLOP/s/GPU): 123.4 | "
    "learning rate: 4.000000E-05 | global batch size:    16 | lm loss: 1.072453E+01 | loss "
    "scale: 131072.0 | grad norm: 3.874 | num zeros: 71.0 | number of skipped iterations:   6 | "
    "number of nan iterations:   0 |\n";

TEST(MegatronLog, IterationAndMemoryLines) {
  Result<MegatronLog> log = ParseMegatronLog(kLog, "train.log");
  ASSERT_TRUE(log.ok()) << log.status().message();
  ASSERT_EQ(log->iterations.size(), 2u);
  EXPECT_EQ(log->iterations[0].iteration, 10);
  EXPECT_DOUBLE_EQ(log->iterations[0].elapsed_ms, 1147.6);
  EXPECT_FALSE(log->iterations[0].tflops.has_value());
  EXPECT_EQ(log->iterations[0].global_batch, 16);
  EXPECT_EQ(log->iterations[0].line, 2);
  EXPECT_EQ(log->iterations[1].iteration, 20);
  EXPECT_DOUBLE_EQ(log->iterations[1].elapsed_ms, 820.7);
  EXPECT_EQ(log->iterations[1].tflops, 123.4);
  ASSERT_EQ(log->memory.size(), 2u);
  EXPECT_EQ(log->memory[1].rank, 4);
  EXPECT_DOUBLE_EQ(log->memory[0].max_allocated_mb, 1464.3408203125);
  EXPECT_DOUBLE_EQ(log->memory[0].max_reserved_mb, 1576.0);
  // MB are MiB (Megatron divides by 1024 * 1024): 1464.3408203125 MiB = 1535472640 bytes.
  EXPECT_EQ(log->MaxAllocatedBytes().at(0), 1'535'472'640);
  EXPECT_EQ(log->MaxAllocatedBytes().at(4), int64_t{2048} << 20);
}

TEST(MegatronLog, BadNumbersAndLogsWithoutIterationsAreNamed) {
  Result<MegatronLog> log =
      ParseMegatronLog("x\n iteration 1/ 2 | elapsed time per iteration (ms): fast |\n", "a.log");
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().message(),
            "a.log:2: 'fast' is not a number after 'elapsed time per iteration (ms)'");
  log = ParseMegatronLog("hello\n", "b.log");
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(log.status().message(), HasSubstr("b.log: no Megatron-LM iteration line"));
}

// Megatron-LM's RankGenerator: the default order tp-cp-ep-dp-pp puts the pipeline outermost.
TEST(MegatronLog, PipelineRankOfAGlobalRank) {
  // t = 2, p = 2, d = 2: ranks 0-3 are pipeline rank 0, 4-7 pipeline rank 1.
  EXPECT_EQ(MegatronPipelineRank(3, 2, 2, 2, MegatronRankOrder::kTpDpPp), 0);
  EXPECT_EQ(MegatronPipelineRank(4, 2, 2, 2, MegatronRankOrder::kTpDpPp), 1);
  // tp-pp-dp: ranks 0-1 pipeline rank 0, 2-3 rank 1, 4-5 rank 0 again.
  EXPECT_EQ(MegatronPipelineRank(2, 2, 2, 2, MegatronRankOrder::kTpPpDp), 1);
  EXPECT_EQ(MegatronPipelineRank(4, 2, 2, 2, MegatronRankOrder::kTpPpDp), 0);
  EXPECT_FALSE(ParseMegatronRankOrder("pp-dp-tp").ok());
}

}  // namespace
}  // namespace pipecast::measured
