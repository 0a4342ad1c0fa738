// The validator's end-to-end runs of expert parallelism (validator_cli_test.cc
// has the loop of issue 6 and the other layouts): `profiler cpu` measures MoE
// blocks, the planner lays them out over ep (and etp) workers, and the
// validator runs the plan on the cpu and mpi backends, held to the loop's
// tolerances (testing/validator_cli_test_util.h). Registered RUN_SERIAL with
// the rest of validator_cli_test: it measures time on a shared machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "testing/cli_test_util.h"
#include "testing/validator_cli_test_util.h"

namespace pipecast::validator_cli_test {
namespace {

using ::testing::Not;

// Issue 26 item 6: expert parallelism. `profiler cpu --experts 4 --top-k 2`
// measures 4 MoE blocks (4 experts of hidden 128 and ffn 128 each, top-2 by
// the hash router; 48 tokens a sample, a multiple of C(4, 2) = 6, so every
// expert gets the same 24 of a micro-batch's 96 token-expert pairs); the
// planner is pinned to ep = 2 over d = 2 replicas. The validator then runs 2
// workers a stage, each a replica holding 2 of every layer's 4 experts, the
// MoE layers' dispatch and combine as real all-to-alls between them.
class ValidatorExpertParallel : public ::testing::Test {
 protected:
  void SetUp() override { check_time_ = MachineCanTime(); }
  bool check_time_ = true;
};

// One activation message of the MoE workload (48 tokens x hidden 128 x 4 B).
constexpr double kMoeMessageBytes = 48 * 128 * 4;

std::string ProfileMoeModel(const TempDir& dir) {
  const std::string model = dir.File("model.json");  // the name ValidatorArgs passes
  cli_test::ToolRun prof =
      RunTool(dir, PIPECAST_PROFILER_BIN,
              "cpu --layers 4 --hidden 128 --ffn 128 --experts 4 --top-k 2 --tokens-per-sample 48 "
              "--microbatch-sizes 1 --warmup 2 --iterations 7 --global-batch 8 --out " +
                  Quote(model));
  EXPECT_EQ(prof.exit_code, 0) << prof.err;
  return model;
}

// An ep = 2 plan over `stages` pipeline stages (d = 2: 2 x stages GPUs), its
// tokens exchanged by `dispatcher` (the planner's --ep-dispatcher; "" for its
// default).
std::string PlanExpertParallel(const TempDir& dir, const std::string& model, int stages,
                               const std::string& dispatcher = "") {
  const std::string plan = dir.File("ep" + std::to_string(stages) + dispatcher + ".plan.json");
  cli_test::ToolRun r = RunTool(
      dir, PIPECAST_PLANNER_BIN,
      "--model " + Quote(model) + " --gpus " + std::to_string(2 * stages) +
          " --expert-parallel 2 --pipeline-stages " + std::to_string(stages) +
          (dispatcher.empty() ? "" : " --ep-dispatcher " + dispatcher) +
          " --cluster local --zero 0 --schedules 1f1b --recompute off --out " + Quote(plan));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("p=" + std::to_string(stages) + " d=2 1f1b"));
  const nlohmann::json j = nlohmann::json::parse(cli_test::ReadText(plan));
  EXPECT_EQ(j["expert_parallel"], 2);
  if (!dispatcher.empty()) {
    EXPECT_EQ(j["ep_dispatcher"], dispatcher);
  }
  return plan;
}

// An ep 2 x etp 2 plan of `model` on one stage (d = 4), `dispatcher` alltoall or allgather.
std::string PlanExpertTensorParallel(const TempDir& dir, const std::string& model,
                                     const std::string& dispatcher) {
  const std::string plan = dir.File("etp-" + dispatcher + ".plan.json");
  const cli_test::ToolRun p =
      RunTool(dir, PIPECAST_PLANNER_BIN,
              "--model " + Quote(model) +
                  " --gpus 4 --expert-parallel 2 --expert-tensor-parallel 2 --pipeline-stages 1 "
                  "--ep-dispatcher " +
                  dispatcher + " --cluster local --zero 0 --schedules 1f1b --recompute off --out " +
                  Quote(plan));
  EXPECT_EQ(p.exit_code, 0) << p.err;
  return plan;
}

// The rows an expert-parallel validation adds: an all-to-all time per stage,
// measured beside predicted, and every worker's own peak (a stage's two hold
// the same: the same static bytes, and the same 96 expert rows a micro-batch).
void ExpectExpertParallelRows(const cli_test::ToolRun& r, int stages) {
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["expert_parallel"], 2);
  EXPECT_THAT(j["ops"].get<std::string>(), HasSubstr("over 2 expert-parallel workers"));
  int rows = 0;
  for (const auto& m : j["metrics"]) {
    if (m["metric"] != "ep all-to-all") continue;
    ++rows;
    // The prediction uses the link the validator probes on this machine. Under load the probe
    // can time a large message no slower than a tiny one, read that as an unbounded bandwidth
    // and predict 0 (seen with two busy loops on the 2 cores: 262144 GB/s, 0.000 ms), so only
    // its sign is held here; the charged bytes are held exactly by the LayerWork and
    // collectives tests.
    EXPECT_GE(m["predicted"].get<double>(), 0);
    EXPECT_GT(m["measured"].get<double>(), 0);
    EXPECT_FALSE(m["checked"].get<bool>());
  }
  EXPECT_EQ(rows, stages);
  ASSERT_EQ(j["workers"].size(), static_cast<size_t>(2 * stages));
  for (const auto& w : j["workers"]) {
    for (const auto& other : j["workers"]) {
      if (other["stage"] != w["stage"]) continue;
      EXPECT_NEAR(w["peak_memory_bytes"].get<double>(), other["peak_memory_bytes"].get<double>(),
                  kMoeMessageBytes);
    }
  }
}

// The cpu backend's in-process all-to-all is timed where the machine can time. On the quiet 2-core
// VM (2026-12-02 17:08) the same one-stage ep = 2 plan measured up to +206% over its forecast,
// 40-60 ms a run inside the all-to-all's barriers, while the mpi backend's MPI_Ialltoallv run of
// it measured -5%: the barrier's 200 us yield-spin gave the core away for whole time slices. It
// now spins 20 us without yielding, then sleeps. Where the test's two threads have a core each
// (2026-12-03, load 10 from other builds, the test's session given priority over them: two
// threads get 62-84% of a core) 10 of 10 emulated test runs passed in their first run, -24% to
// +69%, and this test passed 20 of 20 (9 timed). Where they have not (14-20% of a core) the
// exchanges wait 60-130 ms for a descheduled partner, whatever the barrier does; MachineCanTime
// refuses to time there (docs/validator.md, "Expert parallelism").
constexpr bool kCpuExpertParallelTimeChecked = true;

// `plan` validated on the cpu backend, held to the loop's tolerances: memory, and time with
// the real-layer tolerance where `workers` threads have a core each.
cli_test::ToolRun ValidateOnCpu(const TempDir& dir, const std::string& plan, bool check_time,
                                int workers, double sender_held_bytes, int stages) {
  return ExpectWithinLoopTolerances(
      [&] { return Validator(dir, ValidatorArgs(dir, plan) + " --backend cpu"); },
      kCpuExpertParallelTimeChecked && check_time && CoresForWorkers(workers),
      "real layers of the profiler's CPU workload", kRealLayerTimeTolerance, sender_held_bytes,
      stages);
}

// The check: an ep = 2 plan of the MoE workload on the cpu backend,
// memory exact (the loop's 1%) and time within the real-layer tolerance:
// one stage, two worker threads, so two cores time it.
TEST_F(ValidatorExpertParallel, CpuBackendRunsOneStageOfTwoReplicas) {
  TempDir dir;
  const std::string plan = PlanExpertParallel(dir, ProfileMoeModel(dir), 1);
  const cli_test::ToolRun r = ValidateOnCpu(dir, plan, check_time_, /*workers=*/2,
                                            /*sender_held_bytes=*/0, /*stages=*/1);
  ExpectExpertParallelRows(r, 1);
}

// The same check with Megatron-LM's all-gather dispatcher: the workers
// all-gather each MoE block's routing map, probs and tokens and reduce-scatter
// its outputs (docs/validator.md, "Expert parallelism"); memory exact,
// predicted against measured as with the all-to-alls. The gathered buffers
// are the layer's workspace in the prediction (sim/collectives.h), which the
// runtime allocates for each op as it allocates every workspace.
TEST_F(ValidatorExpertParallel, CpuBackendRunsTheAllGatherDispatcher) {
  TempDir dir;
  const std::string plan = PlanExpertParallel(dir, ProfileMoeModel(dir), 1, "allgather");
  const cli_test::ToolRun r = ValidateOnCpu(dir, plan, check_time_, /*workers=*/2,
                                            /*sender_held_bytes=*/0, /*stages=*/1);
  ExpectExpertParallelRows(r, 1);
  EXPECT_THAT(r.out, HasSubstr("all-gather dispatcher"));
}

TEST_F(ValidatorExpertParallel, CpuBackendRunsTwoStagesOfTwoReplicas) {
  TempDir dir;
  const std::string plan = PlanExpertParallel(dir, ProfileMoeModel(dir), 2);
  const cli_test::ToolRun r =
      ValidateOnCpu(dir, plan, check_time_, /*workers=*/4, kMoeMessageBytes, /*stages=*/2);
  ExpectExpertParallelRows(r, 2);
}

// Expert tensor parallelism: ep 2 x etp 2, one stage, the all-to-all dispatcher (d = 4: four
// worker threads, member (j, r) holding slice r of expert rank j's experts). Memory exact as
// at etp 1 (the simulator counts etp x the expert rows of x, ExpertAllToAll::etp_kept_bytes);
// time within the real-layer tolerance where four cores time it; the 'ep all-to-all' row sums
// the all-to-alls with etp's all-gathers and reduce-scatters, predicted and measured.
TEST_F(ValidatorExpertParallel, CpuBackendRunsExpertTensorParallelism) {
  TempDir dir;
  const std::string model = ProfileMoeModel(dir);
  const std::string plan = PlanExpertTensorParallel(dir, model, "alltoall");
  const cli_test::ToolRun r = ValidateOnCpu(dir, plan, check_time_, /*workers=*/4,
                                            /*sender_held_bytes=*/0, /*stages=*/1);
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["expert_parallel"], 2);
  EXPECT_THAT(j["ops"].get<std::string>(), HasSubstr("over 4 expert-parallel workers"));
  EXPECT_THAT(j["ops"].get<std::string>(), HasSubstr("split 2 ways by expert tensor parallelism"));
  ASSERT_EQ(j["workers"].size(), 4u);
  for (const auto& w : j["workers"]) {
    EXPECT_EQ(w["peak_memory_bytes"], j["workers"][0]["peak_memory_bytes"]);
  }
  // DeepEP's wider all-to-all at etp is refused before anything runs.
  nlohmann::json deepep = nlohmann::json::parse(cli_test::ReadText(plan));
  deepep["ep_dispatcher"] = "deepep";
  const std::string refused_plan = dir.File("etp-deepep.plan.json");
  cli_test::WriteText(refused_plan, deepep.dump());
  const cli_test::ToolRun refused =
      Validator(dir, ValidatorArgs(dir, refused_plan) + " --backend cpu");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("--ep-dispatcher alltoall or allgather"));
}

TEST_F(ValidatorExpertParallel, MpiBackendRunsMpiAlltoallvOnASubCommunicator) {
  if (!HaveMpirun()) GTEST_SKIP() << "no mpirun";
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "real layers under MPI are not run in a sanitizer build";
#endif
  TempDir dir;
  const std::string model = ProfileMoeModel(dir);
  for (int stages : {1, 2}) {
    const std::string plan = PlanExpertParallel(dir, model, stages);
    const cli_test::ToolRun r = ExpectWithinLoopTolerances(
        [&] {
          return MpiValidator(dir, ValidatorArgs(dir, plan) + " --backend mpi",
                              /*processes=*/2 * stages);
        },
        check_time_ && CoresForWorkers(2 * stages), "real layers of the profiler's CPU workload",
        kRealLayerTimeTolerance, kMpiSenderHeldBytes, stages);
    ExpectExpertParallelRows(r, stages);
    EXPECT_THAT(r.out, HasSubstr("MPI_Ialltoallv"));
  }
  // Megatron-LM's all-gather dispatcher: MPI_Iallgather and MPI_Ireduce_scatter_block on the
  // same sub-communicators.
  const std::string gather = PlanExpertParallel(dir, model, 1, "allgather");
  const cli_test::ToolRun g = ExpectWithinLoopTolerances(
      [&] {
        return MpiValidator(dir, ValidatorArgs(dir, gather) + " --backend mpi", /*processes=*/2);
      },
      check_time_ && CoresForWorkers(2), "real layers of the profiler's CPU workload",
      kRealLayerTimeTolerance, kMpiSenderHeldBytes, 1);
  ExpectExpertParallelRows(g, 1);
  EXPECT_THAT(g.out, HasSubstr("MPI_Iallgather"));
  // A process count that does not match the plan's stages x replicas is refused.
  const std::string plan = dir.File("ep2.plan.json");
  const cli_test::ToolRun wrong =
      MpiValidator(dir, ValidatorArgs(dir, plan) + " --backend mpi", /*processes=*/2);
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_THAT(wrong.err, HasSubstr("2 expert-parallel workers but 2 processes were started: run "
                                   "mpirun -np 4"));
}

// The validator itself under mpirun at ep 2 x etp 2 (one stage of four processes), with the
// all-to-all and the all-gather dispatchers: memory within the loop's 1% (the simulator counts
// etp x the expert rows of x), the same peak on every worker, time within the real-layer
// tolerance where four cores time it, and the backend's note naming the MPI collectives.
TEST_F(ValidatorExpertParallel, MpiBackendRunsExpertTensorParallelism) {
  if (!HaveMpirun()) GTEST_SKIP() << "no mpirun";
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "real layers under MPI are not run in a sanitizer build";
#endif
  TempDir dir;
  const std::string model = ProfileMoeModel(dir);
  for (const std::string dispatcher : {"alltoall", "allgather"}) {
    const std::string plan = PlanExpertTensorParallel(dir, model, dispatcher);
    const cli_test::ToolRun r = ExpectWithinLoopTolerances(
        [&] {
          return MpiValidator(dir, ValidatorArgs(dir, plan) + " --backend mpi", /*processes=*/4);
        },
        check_time_ && CoresForWorkers(4), "real layers of the profiler's CPU workload",
        kRealLayerTimeTolerance, /*sender_held_bytes=*/0, /*stages=*/1);
    ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_THAT(j["ops"].get<std::string>(),
                HasSubstr("split 2 ways by expert tensor parallelism"));
    ASSERT_EQ(j["workers"].size(), 4u);
    for (const auto& w : j["workers"]) {
      EXPECT_EQ(w["peak_memory_bytes"], j["workers"][0]["peak_memory_bytes"]) << dispatcher;
    }
    EXPECT_THAT(r.out, HasSubstr(dispatcher == "alltoall" ? "MPI_Ialltoallv" : "MPI_Iallgather"));
  }
}

// The mpi backend's expert tensor parallelism, ep 2 x etp 2 on one stage of four MPI processes,
// with the all-to-all and the all-gather dispatchers: validate/mpi/mpi_expert_test.cc runs each
// on the validator's mpi backend and holds every member's expert gradients to the sequential
// run's (within 1e-4 of the largest) and every worker's activation peak to the simulator's
// (exactly), as LayerWork's tests hold the cpu backend's in-process groups. Tiny blocks (hidden
// 16) and no time checked; its watchdog is wide (240 s against a few seconds quiet) for a busy
// machine, inside ctest's 300 s.
TEST(ValidatorExpertTensorParallelMpi, FourProcessesGiveTheSequentialGradients) {
#ifndef PIPECAST_MPI_EXPERT_TEST_BIN
  GTEST_SKIP() << "built without MPI";
#else
  if (!HaveMpirun()) GTEST_SKIP() << "no mpirun";
  TempDir dir;
  const cli_test::ToolRun r =
      UnderMpirun(dir, PIPECAST_MPI_EXPERT_TEST_BIN, "--gtest_color=no", /*processes=*/4,
                  /*timeout_s=*/240);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Each of the 4 processes ran both dispatchers' tests (none skipped) and passed them.
  size_t passed = 0;
  for (size_t at = r.out.find("[  PASSED  ] 2 tests."); at != std::string::npos;
       at = r.out.find("[  PASSED  ] 2 tests.", at + 1)) {
    ++passed;
  }
  EXPECT_EQ(passed, 4u) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("SKIPPED")));
#endif
}

}  // namespace
}  // namespace pipecast::validator_cli_test
