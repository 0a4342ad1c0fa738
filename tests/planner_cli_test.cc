// `planner` run as a user runs it, and its plan.json replayed by
// `simulator --plan`. Exit codes: 0 ok, 1 bad input, 2 usage (--gpus 0 is
// one: CLI11 rejects a non-positive --gpus), 3 --check failed, 4 nothing fits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "testing/cli_test_util.h"

namespace pipecast::cli_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::ordered_json;

const std::string kPlanner = PIPECAST_PLANNER_BIN;
const std::string kSimulator = PIPECAST_SIMULATOR_BIN;

std::string Toy() { return Quote(Example("toy-uniform.json")); }
// The toy model has no global_batch of its own.
std::string ToyOn8() { return "--model " + Toy() + " --gpus 8 --cluster ideal --global-batch 16"; }

class PlannerCli : public ::testing::Test {
 protected:
  ToolRun Plan(const std::string& args) { return RunTool(dir_, kPlanner, args); }
  ToolRun Sim(const std::string& args) { return RunTool(dir_, kSimulator, args); }
  // Plans the toy model on 8 ideal GPUs and writes plan.json.
  std::string WritePlan() {
    const std::string plan = dir_.File("plan.json");
    ToolRun run = Plan(ToyOn8() + " --out " + Quote(plan));
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return plan;
  }
  TempDir dir_;
};

TEST_F(PlannerCli, ChoosesAPlanAndSimulatorReplaysItExactly) {
  const std::string plan_path = dir_.File("plan.json");
  ToolRun run = Plan(ToyOn8() + " --out " + Quote(plan_path));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("chosen plan: p="));
  EXPECT_THAT(run.out, HasSubstr("bubble ratio"));
  EXPECT_THAT(run.out, HasSubstr("bubble/ideal"));
  json plan = json::parse(ReadText(plan_path));
  EXPECT_EQ(plan["format"], "pipecast-plan/1");
  EXPECT_EQ(plan["gpus"], 8);
  EXPECT_EQ(plan["global_batch"], 16);

  ToolRun replay = Sim("--model " + Toy() + " --plan " + Quote(plan_path) + " --json");
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_THAT(replay.err, Not(HasSubstr("warning")));
  json result = json::parse(replay.out);
  EXPECT_EQ(result["iteration_time_us"], plan["predicted"]["iteration_time_us"]);
  // The replay adds the critical path (the planner's search does not record
  // timelines); everything else is the same, byte for byte.
  ASSERT_TRUE(result.contains("critical_path"));
  result.erase("critical_path");
  EXPECT_EQ(result, plan["predicted"]);
}

TEST_F(PlannerCli, PinnedZeroLevelAndTheReserveTravelInThePlanAndReplay) {
  // Given --zero 1 on h100-sxm with a 2 GiB reserve, the plan records the
  // level and the embedded cluster the reserve; simulator --plan reuses both.
  const std::string plan_path = dir_.File("plan.json");
  ToolRun run = Plan("--model " + Toy() +
                     " --gpus 8 --cluster h100-sxm --global-batch 16 --zero 1 "
                     "--memory-reserve-gb 2 --out " +
                     Quote(plan_path));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("zero=1"));
  EXPECT_THAT(run.out, HasSubstr("2.00 GiB runtime reserve"));
  json plan = json::parse(ReadText(plan_path));
  EXPECT_EQ(plan["memory"]["zero"], 1);
  EXPECT_EQ(plan["cluster"]["gpu"]["memory_reserve_bytes"], int64_t{2} << 30);
  ToolRun replay = Sim("--model " + Toy() + " --plan " + Quote(plan_path) + " --json");
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  json result = json::parse(replay.out);
  EXPECT_EQ(result["zero"], 1);
  EXPECT_EQ(result["memory_reserve_bytes"], int64_t{2} << 30);
  result.erase("critical_path");
  EXPECT_EQ(result, plan["predicted"]);
}

TEST_F(PlannerCli, DefaultClusterIsNamedOnStderrAndInTheReport) {
  ToolRun run = Plan("--model " + Toy() + " --gpus 8 --global-batch 16");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("cluster 'ideal' chosen by default"));
  EXPECT_THAT(run.out, HasSubstr("note: cluster 'ideal' chosen by default"));
}

TEST_F(PlannerCli, JsonAndTraceOutputs) {
  const std::string trace = dir_.File("trace.json");
  ToolRun run = Plan(ToyOn8() + " --json --trace " + Quote(trace));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  json j = json::parse(run.out);
  EXPECT_TRUE(j["feasible"].get<bool>());
  EXPECT_TRUE(j["chosen"]["predicted"].is_object());
  EXPECT_TRUE(json::parse(ReadText(trace)).contains("traceEvents"));
  // The same search gives the same bytes.
  EXPECT_EQ(Plan(ToyOn8() + " --json --threads 1").out, run.out);
}

TEST_F(PlannerCli, CheckAgainstItsOwnPlanPasses) {
  const std::string plan = WritePlan();
  ToolRun run = Plan(ToyOn8() + " --check " + Quote(plan));
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("check PASSED"));
}

TEST_F(PlannerCli, CheckAgainstAFasterBaselineFailsWithExit3) {
  json plan = json::parse(ReadText(WritePlan()));
  plan["predicted"]["throughput_samples_per_s"] =
      plan["predicted"]["throughput_samples_per_s"].get<double>() * 1.10;
  const std::string baseline = dir_.File("baseline.json");
  WriteText(baseline, plan.dump(2));
  ToolRun run = Plan(ToyOn8() + " --check " + Quote(baseline));
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("throughput"));
  EXPECT_THAT(run.out, HasSubstr("REGRESSED"));
  EXPECT_THAT(run.out, HasSubstr("check FAILED"));
  // A 15% tolerance lets the 9.1% drop through.
  EXPECT_EQ(Plan(ToyOn8() + " --check " + Quote(baseline) + " --tolerance 0.15").exit_code, 0);
}

TEST_F(PlannerCli, CheckWithAnUnreadableBaselineIsBadInput) {
  ToolRun run = Plan(ToyOn8() + " --check " + Quote(dir_.File("missing.json")));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("--check"));
  EXPECT_THAT(run.err, HasSubstr("missing.json"));
}

TEST_F(PlannerCli, ZeroGpusIsAUsageError) {
  ToolRun run = Plan("--model " + Toy() + " --gpus 0 --global-batch 16");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("--gpus"));
}

TEST_F(PlannerCli, IndivisibleGlobalBatchIsBadInput) {
  // Size 2 on 8 GPUs needs a global batch that is a multiple of 2 x d.
  ToolRun run = Plan("--model " + Toy() + " --gpus 8 --global-batch 7 --microbatch-sizes 2");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("--global-batch 7"));
}

TEST_F(PlannerCli, OneGpuIsSingular) {
  // "1 stages" and "1 GPUs" slips (issue 17): counts take their noun's number.
  ToolRun run = Plan("--model " + Toy() + " --gpus 1 --cluster ideal --global-batch 1");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("toy-uniform on 1 GPU, unlimited memory"));
  EXPECT_THAT(run.out, HasSubstr("data-parallel degree 1 (d): 1 GPU\n"));
  EXPECT_THAT(run.err, HasSubstr("on 1 GPU of ideal"));
  EXPECT_THAT(run.out + run.err, Not(HasSubstr("1 GPUs")));
}

TEST_F(PlannerCli, UnknownScheduleIsAUsageErrorNamingTheFlag) {
  ToolRun run = Plan(ToyOn8() + " --schedules 1f1b,zigzag");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("--schedules"));
  EXPECT_THAT(run.err, HasSubstr("zigzag"));
}

TEST_F(PlannerCli, NothingFitsExits4WithSuggestions) {
  const std::string plan = dir_.File("plan.json");
  ToolRun run = Plan(ToyOn8() + " --memory-gb 0.001 --out " + Quote(plan));
  EXPECT_EQ(run.exit_code, 4) << run.err;
  EXPECT_THAT(run.out, HasSubstr("no configuration fits"));
  EXPECT_THAT(run.out, HasSubstr("suggestions:"));
  EXPECT_THAT(run.out, HasSubstr("closest miss"));
  EXPECT_FALSE(Exists(plan));
}

TEST_F(PlannerCli, SimulatorPlanRejectsFlagsThePlanFixes) {
  const std::string plan = WritePlan();
  for (const char* flag : {"--stages 2", "--schedule gpipe", "--microbatch-size 2",
                           "--data-parallel 2", "--cluster h100-sxm", "--partition 0-7"}) {
    ToolRun run = Sim("--model " + Toy() + " --plan " + Quote(plan) + " " + flag);
    EXPECT_EQ(run.exit_code, 2) << flag;
    const std::string name = std::string(flag).substr(0, std::string(flag).find(' '));
    EXPECT_THAT(run.err, HasSubstr(name)) << flag;
  }
}

TEST_F(PlannerCli, SimulatorPlanWarnsWhenTheModelFileChanged) {
  const std::string plan = WritePlan();
  const std::string model = dir_.File("toy-edited.json");
  WriteText(model, ReadText(Example("toy-uniform.json")) + "\n");
  ToolRun run = Sim("--model " + Quote(model) + " --plan " + Quote(plan) + " --json");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("warning"));
  EXPECT_THAT(run.err, HasSubstr("hash"));
}

TEST_F(PlannerCli, SimulatorPlanWithABrokenPlanIsBadInputNamingThePath) {
  json plan = json::parse(ReadText(WritePlan()));
  plan["partition"][0]["last_layer"] = "x";
  const std::string broken = dir_.File("broken.json");
  WriteText(broken, plan.dump(2));
  ToolRun run = Sim("--model " + Toy() + " --plan " + Quote(broken));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("broken.json: partition[0].last_layer"));
}

TEST_F(PlannerCli, GanttDrawsTheChosenPlanAfterTheReport) {
  ToolRun run = Plan(ToyOn8() + " --gantt");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const size_t chart = run.out.find(" cells of ");
  ASSERT_NE(chart, std::string::npos) << run.out;
  EXPECT_LT(run.out.find("chosen plan: p="), chart);
  EXPECT_THAT(run.out.substr(chart), HasSubstr("\nrank 0  "));
  EXPECT_THAT(run.out.substr(chart), HasSubstr("digits: a forward"));
}

// Issue 17: progress of a long search on stderr, as plain lines when stderr
// is not a terminal (here a file), never on stdout: --json stays one object.
TEST_F(PlannerCli, PlannerProgressIsPlainLinesOnStderrNeverInJson) {
  ToolRun run = Plan(ToyOn8() + " --json --progress-after 0");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("configurations partitioned\n"));
  EXPECT_THAT(run.err,
              ::testing::ContainsRegex("planner: [0-9]+/[0-9]+ configurations simulated\n"));
  EXPECT_THAT(run.err, Not(HasSubstr("\r"))) << "no bar when stderr is a file";
  EXPECT_THAT(run.out, Not(HasSubstr("configurations simulated")));
  EXPECT_NO_THROW(json::parse(run.out));
  // The default waits 2 s: the toy search is quicker, so it shows nothing.
  ToolRun quick = Plan(ToyOn8());
  ASSERT_EQ(quick.exit_code, 0) << quick.err;
  EXPECT_THAT(quick.err, Not(HasSubstr("configurations simulated\n")));
}

}  // namespace
}  // namespace pipecast::cli_test
