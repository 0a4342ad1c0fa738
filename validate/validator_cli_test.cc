// The validator as a user runs it, and the CI loop of issue 6:
// model -> planner --gpus 2 --cluster local -> validator --backend cpu and
// --backend mpi, for GPipe and 1F1B, holding the prediction to stated
// tolerances (testing/validator_cli_test_util.h). The expert-parallel runs are in
// validator_cli_moe_test.cc. Registered RUN_SERIAL: it measures time on a shared machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "testing/cli_test_util.h"
#include "testing/validator_cli_test_util.h"

namespace pipecast::validator_cli_test {
namespace {

using ::testing::AllOf;

// A busy-work model: 4 layers, 2 ms forward, 4 ms backward, 4 MiB kept per
// layer and micro-batch, 5M parameters a layer (90 MB of weights, gradients
// and optimizer state at 18 bytes a parameter: with --memory-gb 0.25 one GPU
// cannot hold the four layers' 343 MiB, so the planner must split them over 2
// stages; GPipe's 8 micro-batches then need about 236 MiB a stage). --zero 0:
// unsharded, so the plan is a 2-stage pipeline the validator runs whole
// (sharding over 2 replicas would fit one stage).
std::string BusyModel() {
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < 4; ++i) {
    layers.push_back({{"name", "block" + std::to_string(i)},
                      {"parameters", 5'000'000},
                      {"profiles",
                       {{{"microbatch_size", 1},
                         {"forward_us", 2000},
                         {"backward_us", 4000},
                         {"activation_bytes", 4 << 20},
                         {"output_bytes", 256 << 10},
                         {"workspace_bytes", 1 << 20}}}}});
  }
  return nlohmann::json{
      {"format", "pipecast-model/1"}, {"name", "busy4"}, {"global_batch", 8}, {"layers", layers}}
      .dump(1);
}

std::string Plan(const TempDir& dir, const std::string& schedule) {
  const std::string model = dir.File("model.json");
  cli_test::WriteText(model, BusyModel());
  const std::string plan = dir.File(schedule + ".plan.json");
  cli_test::ToolRun r =
      RunTool(dir, PIPECAST_PLANNER_BIN,
              "--model " + Quote(model) +
                  " --gpus 2 --cluster local --zero 0 "
                  "--schedules " +
                  schedule + " --memory-gb 0.25 --recompute off --out " + Quote(plan));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("chosen plan: p=2 d=1 " + schedule));
  return plan;
}

class ValidatorLoop : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { check_time_ = MachineCanTime(); }
  bool check_time_ = true;
};

// The same checks for tensor-parallel plans (one schedule).
class ValidatorTensorParallel : public ::testing::Test {
 protected:
  void SetUp() override { check_time_ = MachineCanTime(); }
  bool check_time_ = true;
};

TEST_P(ValidatorLoop, CpuBackendMeetsThePrediction) {
  TempDir dir;
  const std::string plan = Plan(dir, GetParam());
  ExpectWithinLoopTolerances(
      [&] { return Validator(dir, ValidatorArgs(dir, plan) + " --backend cpu"); }, check_time_);
}

TEST_P(ValidatorLoop, MpiBackendMeetsThePrediction) {
  if (!HaveMpirun()) GTEST_SKIP() << "no mpirun";
  TempDir dir;
  const std::string plan = Plan(dir, GetParam());
  ExpectWithinLoopTolerances(
      [&] { return MpiValidator(dir, ValidatorArgs(dir, plan) + " --backend mpi"); }, check_time_);
}

INSTANTIATE_TEST_SUITE_P(Schedules, ValidatorLoop, ::testing::Values("gpipe", "1f1b"));

// The loop of issue 6 from the start: `profiler cpu` measures a small MLP
// workload; the validator then runs those very layers. --memory-gb 0.0075
// (8.05 MB) cannot hold the 4 layers' 9.5 MB of weights, gradients and Adam
// state (18 bytes a parameter, unsharded: --zero 0) on one GPU, so the planner splits them over 2
// stages; GPipe keeps all 8 micro-batches' activations (2 layers x 8 x 295 KB on a stage), so it
// gets 0.012 GB, still too little for one stage. 64 tokens a sample make each op about a
// millisecond: with 16 tokens (~0.2 ms ops) the per-op hand-off between threads alone put the
// measured iteration 55-70% over the forecast on a quiet machine, against 5-15% with 64.
// The loop's memory: too little for one stage, so the planner splits over 2.
std::string LoopMemory(const std::string& schedule) {
  return std::string("--memory-gb ") + (schedule == "gpipe" ? "0.012" : "0.0075");
}

// `placement`: the planner flags that fix the layout (memory here; p pinned for the pairs).
std::string ProfileAndPlan(const TempDir& dir, const std::string& schedule,
                           const std::string& placement) {
  const std::string model = dir.File("model.json");
  cli_test::ToolRun prof =
      RunTool(dir, PIPECAST_PROFILER_BIN,
              "cpu --layers 4 --hidden 128 --ffn 512 --tokens-per-sample 64 --microbatch-sizes 1 "
              "--warmup 2 --iterations 7 --global-batch 8 --out " +
                  Quote(model));
  EXPECT_EQ(prof.exit_code, 0) << prof.err;
  const std::string plan = dir.File(schedule + ".plan.json");
  cli_test::ToolRun r =
      RunTool(dir, PIPECAST_PLANNER_BIN,
              "--model " + Quote(model) + " --gpus 2 --cluster local --zero 0 --schedules " +
                  schedule + " " + placement + " --recompute off --out " + Quote(plan));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("chosen plan: p=2 d=1 " + schedule));
  return plan;
}

TEST_P(ValidatorLoop, ProfilerCpuLayersOnTheCpuBackend) {
  TempDir dir;
  const std::string plan = ProfileAndPlan(dir, GetParam(), LoopMemory(GetParam()));
  ExpectWithinLoopTolerances(
      [&] { return Validator(dir, ValidatorArgs(dir, plan) + " --backend cpu"); }, check_time_,
      "real layers of the profiler's CPU workload", kRealLayerTimeTolerance);
}

TEST_P(ValidatorLoop, ProfilerCpuLayersOnTheMpiBackend) {
  if (!HaveMpirun()) GTEST_SKIP() << "no mpirun";
#if defined(__SANITIZE_ADDRESS__)
  // Real layers in two sanitized MPI processes beside other sanitized tests
  // failed 1 run in 2 under load (2026-11-29, cause not yet found); the same
  // case runs in the normal build, and busy-work MPI runs here too.
  GTEST_SKIP() << "real layers under MPI are not run in a sanitizer build";
#endif
  TempDir dir;
  const std::string plan = ProfileAndPlan(dir, GetParam(), LoopMemory(GetParam()));
  ExpectWithinLoopTolerances(
      [&] { return MpiValidator(dir, ValidatorArgs(dir, plan) + " --backend mpi"); }, check_time_,
      "real layers of the profiler's CPU workload", kRealLayerTimeTolerance, kMpiSenderHeldBytes);
}

// One activation message of the workload below (64 tokens x hidden 128 x 4 B).
// A worker's peak is 3 MiB, so 1% is less than one message, and whether the
// next micro-batch's message has arrived at a stage's peak moment depends on
// the probed link: the forecast for the same plan came out 3145728 B and
// 3178496 B on two runs (one message apart) against a measured 3178496 B.
constexpr double kOneMessageBytes = 64 * 128 * 4;

// The CPU workload profiled whole and as one worker's half (`profiler cpu --tensor-parallel
// 1,2`): 4 blocks, hidden 128, ffn 512 (256 a worker), 64 tokens a sample.
std::string ProfileTensorParallelModel(const TempDir& dir) {
  const std::string model = dir.File("model.json");
  cli_test::ToolRun prof =
      RunTool(dir, PIPECAST_PROFILER_BIN,
              "cpu --layers 4 --hidden 128 --ffn 512 --tokens-per-sample 64 --microbatch-sizes 1 "
              "--tensor-parallel 1,2 --warmup 2 --iterations 7 --global-batch 8 --out " +
                  Quote(model));
  EXPECT_EQ(prof.exit_code, 0) << prof.err;
  return model;
}

// Issue 15 part 6: a t=2 x p=2 plan of the CPU workload. `profiler cpu
// --tensor-parallel 1,2` measures each block whole and as one worker's half
// (ffn 256 of 512); the planner is pinned to t = 2 on 4 GPUs, and --memory-gb
// 0.0045 (4.8 MB) cannot hold the 4 layers' 4.7 MB of per-GPU weights,
// gradients and Adam state (half of 9.4 MB at t = 2) with their activations
// on one stage, so it splits them over p = 2. The validator then runs 4
// worker threads, 2 a stage, with in-process all-reduces.
std::string ProfileAndPlanTensorParallel(const TempDir& dir) {
  const std::string model = ProfileTensorParallelModel(dir);
  const std::string plan = dir.File("tp.plan.json");
  cli_test::ToolRun r =
      RunTool(dir, PIPECAST_PLANNER_BIN,
              "--model " + Quote(model) +
                  " --gpus 4 --tensor-parallel 2 --sequence-parallel off --cluster local --zero 0 "
                  "--schedules 1f1b --memory-gb 0.0045 --recompute off --out " +
                  Quote(plan));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("p=2 d=1 1f1b"));
  const nlohmann::json j = nlohmann::json::parse(cli_test::ReadText(plan));
  EXPECT_EQ(j["tensor_parallel"], 2);
  EXPECT_EQ(j["pipeline_stages"], 2);
  return plan;
}

// The rows a tensor-parallel validation adds: an all-reduce time per stage,
// measured beside predicted.
void ExpectTensorParallelRows(const cli_test::ToolRun& r) {
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tensor_parallel"], 2);
  EXPECT_THAT(j["ops"].get<std::string>(), HasSubstr("split over 2 tensor-parallel workers"));
  int rows = 0;
  for (const auto& m : j["metrics"]) {
    if (m["metric"] != "tp all-reduce") continue;
    ++rows;
    EXPECT_GT(m["predicted"].get<double>(), 0);
    EXPECT_GT(m["measured"].get<double>(), 0);
    EXPECT_FALSE(m["checked"].get<bool>());
  }
  EXPECT_EQ(rows, 2);
  // Each of the 4 workers' own peak; a stage's two hold the same (one GPU's share each).
  ASSERT_EQ(j["workers"].size(), 4u);
  for (const auto& w : j["workers"]) {
    for (const auto& other : j["workers"]) {
      if (other["stage"] != w["stage"]) continue;
      EXPECT_NEAR(w["peak_memory_bytes"].get<double>(), other["peak_memory_bytes"].get<double>(),
                  kOneMessageBytes);
    }
  }
}

TEST_F(ValidatorTensorParallel, CpuBackendRunsTwoByTwo) {
  TempDir dir;
  const std::string plan = ProfileAndPlanTensorParallel(dir);
  const cli_test::ToolRun r = ExpectWithinLoopTolerances(
      [&] { return Validator(dir, ValidatorArgs(dir, plan) + " --backend cpu"); },
      check_time_ && CoresForWorkers(4), "real layers of the profiler's CPU workload",
      kRealLayerTimeTolerance, kOneMessageBytes);
  ExpectTensorParallelRows(r);

  // What it does not run is refused before anything runs: sequence parallelism.
  nlohmann::json j = nlohmann::json::parse(cli_test::ReadText(plan));
  j["sequence_parallel"] = true;
  const std::string sp = dir.File("sp.plan.json");
  cli_test::WriteText(sp, j.dump(1));
  const cli_test::ToolRun refused = Validator(dir, ValidatorArgs(dir, sp) + " --backend cpu");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("sequence parallelism, which the validator does not run"));
}

// Where the machine has fewer cores than the 2 x 2 plan's four workers (CI's two), time is
// checked on one stage of t = 2: two worker threads, each block's two halves and their
// all-reduces, against the simulator's prediction from the per-t profiles, within the
// validator's tolerance for real layers.
TEST_F(ValidatorTensorParallel, CpuBackendTimesOneStageOfTwoWorkers) {
  TempDir dir;
  const std::string model = ProfileTensorParallelModel(dir);
  const std::string plan = dir.File("tp1.plan.json");
  cli_test::ToolRun planned =
      RunTool(dir, PIPECAST_PLANNER_BIN,
              "--model " + Quote(model) +
                  " --gpus 2 --tensor-parallel 2 --pipeline-stages 1 --sequence-parallel off "
                  "--cluster local --zero 0 --schedules 1f1b --recompute off --out " +
                  Quote(plan));
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_THAT(planned.out, HasSubstr("t=2 p=1 d=1 1f1b"));
  const cli_test::ToolRun r = ExpectWithinLoopTolerances(
      [&] { return Validator(dir, ValidatorArgs(dir, plan) + " --backend cpu"); },
      check_time_ && CoresForWorkers(2), "real layers of the profiler's CPU workload",
      kRealLayerTimeTolerance, kOneMessageBytes, /*stages=*/1);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tensor_parallel"], 2);
  EXPECT_EQ(j["workers"].size(), 2u);
}

TEST_F(ValidatorTensorParallel, MpiBackendRunsTwoByTwoOnFourProcesses) {
  if (!HaveMpirun()) GTEST_SKIP() << "no mpirun";
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "real layers under MPI are not run in a sanitizer build";
#endif
  TempDir dir;
  const std::string plan = ProfileAndPlanTensorParallel(dir);
  const cli_test::ToolRun r = ExpectWithinLoopTolerances(
      [&] {
        return MpiValidator(dir, ValidatorArgs(dir, plan) + " --backend mpi", /*processes=*/4);
      },
      check_time_ && CoresForWorkers(4), "real layers of the profiler's CPU workload",
      kRealLayerTimeTolerance, kMpiSenderHeldBytes);
  ExpectTensorParallelRows(r);
}

// Issue 16's last part: the schedules with overlapped F&B pairs. The busy-work model with a
// split backward (backward_weight_us: half of the backward), which both need. dualpipev fits
// the loop's 0.25 GB (a V of 4 chunks, 1 layer each); dualpipe holds two copies of the model
// on each of its 2 ranks (343 MiB of static memory each), so it gets 1 GB and p pinned to 2.
std::string PairsPlan(const TempDir& dir, const std::string& schedule) {
  nlohmann::json busy = nlohmann::json::parse(BusyModel());
  for (auto& layer : busy["layers"]) layer["profiles"][0]["backward_weight_us"] = 2000;
  const std::string model = dir.File("model.json");
  cli_test::WriteText(model, busy.dump(1));
  const std::string plan = dir.File(schedule + ".plan.json");
  cli_test::ToolRun r = RunTool(
      dir, PIPECAST_PLANNER_BIN,
      "--model " + Quote(model) + " --gpus 2 --pipeline-stages 2 --cluster local --zero 0 " +
          "--schedules " + schedule + " --memory-gb " + (schedule == "dualpipe" ? "1" : "0.25") +
          " --recompute off --out " + Quote(plan));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("chosen plan: p=2 d=1 " + schedule));
  return plan;
}

// dualpipe's rows for the copy reduce: one per rank, reported beside the prediction.
void ExpectCopyReduceRows(const cli_test::ToolRun& r, const std::string& schedule) {
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  int rows = 0;
  for (const auto& m : j["metrics"]) {
    if (m["metric"] != "copy reduce") continue;
    ++rows;
    EXPECT_GT(m["predicted"].get<double>(), 0);
    EXPECT_GT(m["measured"].get<double>(), 0);
    EXPECT_FALSE(m["checked"].get<bool>());
  }
  EXPECT_EQ(rows, schedule == "dualpipe" ? 2 : 0);
}

class ValidatorPairs : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { check_time_ = MachineCanTime(); }
  bool check_time_ = true;
};

TEST_P(ValidatorPairs, CpuBackendRunsTheSchedule) {
  TempDir dir;
  const std::string plan = PairsPlan(dir, GetParam());
  const cli_test::ToolRun r = ExpectWithinLoopTolerances(
      [&] { return Validator(dir, ValidatorArgs(dir, plan) + " --backend cpu"); }, check_time_);
  ExpectCopyReduceRows(r, GetParam());
}

TEST_P(ValidatorPairs, MpiBackendRunsTheSchedule) {
  if (!HaveMpirun()) GTEST_SKIP() << "no mpirun";
  TempDir dir;
  const std::string plan = PairsPlan(dir, GetParam());
  const cli_test::ToolRun r = ExpectWithinLoopTolerances(
      [&] { return MpiValidator(dir, ValidatorArgs(dir, plan) + " --backend mpi"); }, check_time_);
  ExpectCopyReduceRows(r, GetParam());
}

// The same with the real layers of `profiler cpu` (which measures backward_weight_us), p pinned
// to 2 and memory unlimited: dualpipe's direction b then starts at rank 1's virtual stage 2 with
// the workload's input, and its second copies of the blocks accumulate their own gradients.
std::string ProfileAndPlanPairs(const TempDir& dir, const std::string& schedule) {
  return ProfileAndPlan(dir, schedule, "--pipeline-stages 2");
}

TEST_P(ValidatorPairs, ProfilerCpuLayersOnTheCpuBackend) {
  TempDir dir;
  const std::string plan = ProfileAndPlanPairs(dir, GetParam());
  const cli_test::ToolRun r = ExpectWithinLoopTolerances(
      [&] { return Validator(dir, ValidatorArgs(dir, plan) + " --backend cpu"); }, check_time_,
      "real layers of the profiler's CPU workload", kRealLayerTimeTolerance, kOneMessageBytes);
  ExpectCopyReduceRows(r, GetParam());
}

TEST_P(ValidatorPairs, ProfilerCpuLayersOnTheMpiBackend) {
  if (!HaveMpirun()) GTEST_SKIP() << "no mpirun";
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "real layers under MPI are not run in a sanitizer build";
#endif
  TempDir dir;
  const std::string plan = ProfileAndPlanPairs(dir, GetParam());
  const cli_test::ToolRun r = ExpectWithinLoopTolerances(
      [&] { return MpiValidator(dir, ValidatorArgs(dir, plan) + " --backend mpi"); }, check_time_,
      "real layers of the profiler's CPU workload", kRealLayerTimeTolerance, kMpiSenderHeldBytes);
  ExpectCopyReduceRows(r, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Schedules, ValidatorPairs, ::testing::Values("dualpipev", "dualpipe"));

TEST(ValidatorCli, UnderMpiALostOutputOfAPairIsDiagnosedWithinTheReceiveTimeout) {
  if (!HaveMpirun()) GTEST_SKIP() << "no mpirun";
  TempDir dir;
  // dualpipev p=2, m=8: rank 0's first pair is (0F3;3B1); rank 1's (1F3;2B1) needs 0F3's
  // activation.
  const std::string plan = PairsPlan(dir, "dualpipev");
  const auto start = std::chrono::steady_clock::now();
  cli_test::ToolRun r =
      MpiValidator(dir, ValidatorArgs(dir, plan) +
                            " --backend mpi --recv-timeout-ms 1000 --inject-fault drop:0F3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, AllOf(HasSubstr("stage 1 (rank 1) op 1F3: the activation of 0F3 from rank 0"),
                           HasSubstr("did not arrive")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(ValidatorCli, TensorParallelBusyWorkIsRefusedWithTheFix) {
  TempDir dir;
  // The busy-work model, with what its layers' all-reduces would move so the
  // planner can forecast t = 2 (the t = 1 costs scaled).
  nlohmann::json busy = nlohmann::json::parse(BusyModel());
  for (auto& layer : busy["layers"]) {
    layer["profiles"][0]["tp_comm_bytes"] = 256 << 10;
    layer["profiles"][0]["tp_forward_collectives"] = 2;
    layer["profiles"][0]["tp_backward_collectives"] = 2;
  }
  const std::string model = dir.File("model.json");
  cli_test::WriteText(model, busy.dump(1));
  const std::string plan = dir.File("tp.plan.json");
  cli_test::ToolRun p =
      RunTool(dir, PIPECAST_PLANNER_BIN,
              "--model " + Quote(model) +
                  " --gpus 4 --tensor-parallel 2 --sequence-parallel off --cluster local --zero 0 "
                  "--schedules 1f1b --recompute off --out " +
                  Quote(plan));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  cli_test::ToolRun r = Validator(dir, ValidatorArgs(dir, plan));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--tensor-parallel 1,2"));
}

TEST(ValidatorCli, WritesASideBySideTraceAndTheHumanTable) {
  TempDir dir;
  const std::string plan = Plan(dir, "1f1b");
  const std::string trace = dir.File("t.json");
  cli_test::ToolRun r =
      Validator(dir, "--plan " + Quote(plan) + " --model " + Quote(dir.File("model.json")) +
                         " --warmup 0 --iterations 1 --tolerance 100 --bubble-tolerance 1 "
                         "--trace " +
                         Quote(trace));
  // Time and bubble checks are opened wide: this test is about the outputs,
  // and a loaded or sanitized run may time anything (memory stays checked).
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.exit_code << ": " << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("ops are busy-work of the profiled durations"),
                           HasSubstr("iteration time"), HasSubstr("peak memory"),
                           HasSubstr("measured by a probe")));
  const std::string text = cli_test::ReadText(trace);
  EXPECT_THAT(text, AllOf(HasSubstr("predicted rank 1"), HasSubstr("measured rank 1")));
}

TEST(ValidatorCli, AnInjectedThrowEndsWithADiagnosisAndExit1) {
  TempDir dir;
  const std::string plan = Plan(dir, "1f1b");
  const auto start = std::chrono::steady_clock::now();
  cli_test::ToolRun r = Validator(dir, ValidatorArgs(dir, plan) + " --inject-fault throw:1F2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("rank 1"), HasSubstr("threw")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(ValidatorCli, UnderMpiALostMessageIsDiagnosedWithinTheReceiveTimeout) {
  if (!HaveMpirun()) GTEST_SKIP() << "no mpirun";
  TempDir dir;
  const std::string plan = Plan(dir, "1f1b");
  const auto start = std::chrono::steady_clock::now();
  cli_test::ToolRun r =
      MpiValidator(dir, ValidatorArgs(dir, plan) +
                            " --backend mpi --recv-timeout-ms 1000 --inject-fault "
                            "drop:0F1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err,
              AllOf(HasSubstr("the activation of 0F1 from rank 0"), HasSubstr("did not arrive")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(ValidatorCli, AStageOverItsMemoryLimitIsReportedAsOutOfMemory) {
  TempDir dir;
  const std::string plan = Plan(dir, "gpipe");
  cli_test::ToolRun r = Validator(dir, ValidatorArgs(dir, plan) + " --memory-limit-mb 150");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("out of memory on stage"), HasSubstr("150.0 MiB")));
}

TEST(ValidatorCli, CudaWithoutADeviceOrToolkitSaysSo) {
  TempDir dir;
  const std::string plan = Plan(dir, "gpipe");
  cli_test::ToolRun r = Validator(dir, ValidatorArgs(dir, plan) + " --backend cuda");
  if (r.exit_code == 0 || r.exit_code == 3) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err,
              ::testing::AnyOf(HasSubstr("this build has no CUDA"), HasSubstr("no CUDA device")));
}

TEST(ValidatorCli, MissingFlagsAreUsageErrors) {
  TempDir dir;
  EXPECT_EQ(Validator(dir, "--plan x.json").exit_code, 2);
}

}  // namespace
}  // namespace pipecast::validator_cli_test
