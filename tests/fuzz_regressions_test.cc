// Inputs the fuzz targets (fuzz/, scripts/fuzz.sh) found crashing, kept in
// fuzz/regressions/<target>/: each replayed through the same library calls as
// its fuzz target, with the exact error it must now give. scripts/fuzz.sh
// replays them under libFuzzer too; these run in every build, the sanitizer
// one included. docs/errors.md says how to add one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "formats/file_util.h"
#include "formats/plan.h"
#include "formats/schedule_text.h"
#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::testing::HasSubstr;

std::string Regression(const std::string& target, const std::string& name) {
  const char* dir = std::getenv("PIPECAST_SOURCE_DIR");
  const std::string path =
      std::string(dir && *dir ? dir : ".") + "/fuzz/regressions/" + target + "/" + name;
  Result<std::string> text = ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status().message();
  return text.ok() ? *text : "";
}

// fuzz_simulate: bytes 0-1 are options, the rest schedule text. This input is
// "0F0 0B0" (one micro-batch) declared as 2 iterations without a flush, as a
// plan.json can say for PipeDream. The simulator divided the micro-batch count
// by the iterations (1 / 2 = 0) and then divided by that: undefined behaviour.
// ValidateSchedule now rejects it.
TEST(FuzzRegression, SimulateIterationsOverMicrobatches) {
  const std::string input = Regression("fuzz_simulate", "iterations-over-microbatches-div-by-zero");
  ASSERT_GE(input.size(), 2u);
  Result<Schedule> schedule = ParseScheduleText(input.substr(2), "fuzz.txt");
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  schedule->iterations = 1 + (static_cast<uint8_t>(input[1]) >> 5);
  schedule->flush = false;
  ASSERT_EQ(schedule->iterations, 2);
  Result<SimResult> result = Simulate(test_util::UniformModel(1, 1000, 2000),
                                      test_util::IdealCluster(), *schedule, SimOptions{});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(),
            "schedule 'custom' spreads 1 micro-batch over 2 iterations: expected at least 1 "
            "iteration and the same whole number of micro-batches in each");
}

// fuzz_simulate in its huge mode (issue 17): byte 1 is 0xe0, 2^7 = 128
// layers per stage, each at the file limits (10^12 us forward and backward).
// GPipe on 2 stages with 40 micro-batches: each stage computes
// 40 x 128 x 2 x 10^15 ns = 1.02e19 ns, past 2^63, which wrapped the engine's
// clock to negative times. The totals check now refuses it up front:
// 256 layers x (2 x 10^15 + 10^15) ns x 40 = 3.07e19 ns > 2^62.
TEST(FuzzRegression, SimulateHugeLayersSumPast2To63) {
  const std::string input = Regression("fuzz_simulate", "huge-layers-sum-past-2-63");
  ASSERT_GE(input.size(), 2u);
  ASSERT_EQ(static_cast<uint8_t>(input[1]) >> 5, 7);
  Result<Schedule> schedule = ParseScheduleText(input.substr(2), "fuzz.txt");
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  constexpr TimeNs kHugeNs = 1'000'000'000'000'000;
  Result<SimResult> result = Simulate(test_util::UniformModel(256, kHugeNs, kHugeNs),
                                      test_util::IdealCluster(), *schedule, SimOptions{});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(),
              HasSubstr("forward_us + backward_us summed over the model's 256 layers at "
                        "micro-batch size 1, times 40 micro-batches, is 3.07e+19 ns"));
}

// fuzz_plan: a plan whose actions use stage 8 on a 2-stage pipeline. The
// schedule-text error has no line number ("<origin>: stage 2 has no
// forward"), and ReadActions took the text after a ':' that is not there:
// std::out_of_range, reported as an internal error.
TEST(FuzzRegression, PlanActionsErrorWithoutLine) {
  Result<PlanFile> plan =
      ParsePlan(Regression("fuzz_plan", "actions-error-without-line-threw"), "p.json");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "p.json: actions: stage 2 has no forward (the largest stage index is 8, so stages "
            "0..8 exist), expected its forwards on the rank that owns it");
}

}  // namespace
}  // namespace pipecast
