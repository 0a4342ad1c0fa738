// `planner` run as a user runs it, and its plan.json replayed by
// `simulator --plan`. Exit codes: 0 ok, 1 bad input, 2 usage (--gpus 0 is
// one: CLI11 rejects a non-positive --gpus), 3 --check failed, 4 nothing fits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
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

TEST_F(PlannerCli, ScheduleOutWritesTheChosenPlansScheduleInEitherFormat) {
  const std::string plan = dir_.File("plan.json");
  const std::string text = dir_.File("chosen.txt");
  const std::string csv = dir_.File("chosen.csv");
  ToolRun run = Plan(ToyOn8() + " --out " + Quote(plan) + " --schedule-out " + Quote(text));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("wrote the chosen plan's schedule to"));
  ToolRun as_csv =
      Plan(ToyOn8() + " --schedule-out " + Quote(csv) + " --schedule-format pytorch-csv");
  ASSERT_EQ(as_csv.exit_code, 0) << as_csv.err;
  // The same schedule: plan.json's actions are the text's lines; the CSV has the same cells.
  json p = json::parse(ReadText(plan));
  std::string want_text, want_csv;
  for (const json& line : p["actions"]) {
    const std::string l = line.get<std::string>();
    want_text += l + "\n";
    std::string cells = l;
    std::replace(cells.begin(), cells.end(), ' ', ',');
    want_csv += cells + "\r\n";
  }
  EXPECT_EQ(ReadText(text), want_text);
  EXPECT_EQ(ReadText(csv), want_csv);
  ToolRun bad = Plan(ToyOn8() + " --schedule-out " + Quote(csv) + " --schedule-format csv");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--schedule-format"));
}

// --export (docs/frameworks.md): the chosen plan as each framework's settings, beside plan.json;
// torchtitan's TOML names the schedule CSV written with it, which is the plan's schedule as
// --schedule-format pytorch-csv writes it. frameworks_test reads the files back.
TEST_F(PlannerCli, ExportWritesTheChosenPlanForEachFramework) {
  const std::string plan = dir_.File("plan.json");
  const std::string args = dir_.File("megatron.args");
  const std::string toml = dir_.File("titan.toml");
  const std::string ds = dir_.File("ds.json");
  ToolRun run = Plan(ToyOn8() + " --schedules 1f1b --stages 2 --out " + Quote(plan) +
                     " --export megatron=" + Quote(args) + " --export torchtitan=" + Quote(toml) +
                     " --export deepspeed=" + Quote(ds));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("wrote the plan as megatron settings to"));
  EXPECT_THAT(run.err, HasSubstr("wrote the plan as torchtitan settings to"));
  EXPECT_THAT(run.err, HasSubstr("wrote the plan as deepspeed settings to"));
  const json p = json::parse(ReadText(plan));
  const int stages = p["pipeline_stages"].get<int>();
  ASSERT_EQ(stages, 2);
  const std::string megatron = ReadText(args);
  EXPECT_THAT(megatron, HasSubstr("--pipeline-model-parallel-size " + std::to_string(stages)));
  EXPECT_THAT(megatron, HasSubstr("--global-batch-size 16\n"));
  const json d = json::parse(ReadText(ds));
  EXPECT_EQ(d["train_batch_size"], 16);
  EXPECT_EQ(d["gradient_accumulation_steps"], p["microbatches"]);
  const std::string csv = dir_.File("titan.csv");
  ASSERT_TRUE(Exists(csv));
  EXPECT_THAT(ReadText(toml), HasSubstr("pipeline_parallel_schedule_csv = \"" + csv + "\""));
  std::string want_csv;
  for (const json& line : p["actions"]) {
    std::string cells = line.get<std::string>();
    std::replace(cells.begin(), cells.end(), ' ', ',');
    want_csv += cells + "\r\n";
  }
  EXPECT_EQ(ReadText(csv), want_csv);
}

// A schedule a framework lacks: the file holds the closest, and stderr says so.
TEST_F(PlannerCli, ExportSaysWhatAFrameworkCannotRun) {
  const std::string args = dir_.File("megatron.args");
  ToolRun run =
      Plan(ToyOn8() + " --schedules dualpipev --stages 4 --export megatron=" + Quote(args));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("megatron cannot run the plan as planned: Megatron-LM has no "
                                 "dualpipev schedule"));
  EXPECT_THAT(ReadText(args), HasSubstr("# differs from the plan: Megatron-LM has no dualpipev"));
  EXPECT_THAT(ReadText(args), HasSubstr("--pipeline-model-parallel-size 4\n"));
}

TEST_F(PlannerCli, DualPipeVPlansKeepTheirPairsAndReplayExactly) {
  const std::string plan_path = dir_.File("dualpipev.plan.json");
  ToolRun run = Plan(ToyOn8() + " --schedules dualpipev --out " + Quote(plan_path));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("chosen plan: p="));
  EXPECT_THAT(run.out, HasSubstr(" dualpipev v=2 "));
  // plan.json's actions keep each overlapped pair as one token.
  const std::string text = ReadText(plan_path);
  EXPECT_THAT(text, HasSubstr(")OVERLAP_F_B"));
  json plan = json::parse(text);
  ToolRun replay = Sim("--model " + Toy() + " --plan " + Quote(plan_path) + " --json");
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_EQ(json::parse(replay.out)["iteration_time_us"], plan["predicted"]["iteration_time_us"]);
}

// Issue 17: a format key in every --json object, first, so that a script can
// tell the simulator's answer from the planner's (and from a file) before
// reading anything else.
TEST_F(PlannerCli, FormatKeyInEveryJsonObject) {
  ToolRun plan = Plan(ToyOn8() + " --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  json p = json::parse(plan.out);
  EXPECT_EQ(p.begin().key(), "format");
  EXPECT_EQ(p["format"], "pipecast-planner/1");
  // The embedded simulation results are blocks of this object, not files.
  EXPECT_FALSE(p["chosen"]["predicted"].contains("format"));

  ToolRun sim = Sim("--model " + Toy() + " --stages 2 --cluster ideal --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  json s = json::parse(sim.out);
  EXPECT_EQ(s.begin().key(), "format");
  EXPECT_EQ(s["format"], "pipecast-simulation/1");
}

// Issue 17: a layer or model name with ESC and a newline reached the terminal
// as it was: ESC [31m recoloured it, the newline forged a report line. The
// text outputs show them escaped; --json keeps the names as they are.
TEST_F(PlannerCli, ControlCharactersInNamesAreEscapedInTextOutput) {
  std::string text = ReadText(Example("toy-uniform.json"));
  auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  };
  replace("\"name\": \"toy-uniform\"", R"("name": "toy\u001b]0;pwned\u0007")");
  replace("\"name\": \"layer0\"", R"("name": "emb\u001b[31m\nforged line")");
  const std::string model = dir_.File("m.json");
  WriteText(model, text);

  ToolRun plan = Plan("--model " + Quote(model) + " --gpus 2 --cluster ideal --global-batch 16");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_EQ(plan.out.find('\x1b'), std::string::npos);
  EXPECT_EQ(plan.out.find('\x07'), std::string::npos);
  EXPECT_THAT(plan.out, HasSubstr("planner: toy\\x1b]0;pwned\\x07 on 2 GPUs"));
  EXPECT_THAT(plan.out, HasSubstr("(emb\\x1b[31m\\nforged line"));
  EXPECT_THAT(plan.out, Not(HasSubstr("\nforged line")));

  json j = json::parse(
      Plan("--model " + Quote(model) + " --gpus 2 --cluster ideal --global-batch 16 --json").out);
  EXPECT_EQ(j["model"], "toy\x1b]0;pwned\x07");
  EXPECT_EQ(j["chosen"]["partition"][0]["first_layer_name"], "emb\x1b[31m\nforged line");
}

// The README's validator walk-through plans 2 GPUs for `mpirun -np 2`, which
// needs 2 pipeline stages; the search alone may prefer 2 replicas of 1.
TEST_F(PlannerCli, StagesPinsThePipelineDepth) {
  const std::string plan = dir_.File("plan.json");
  ToolRun run = Plan(ToyOn8() + " --stages 2 --out " + Quote(plan));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  json p = json::parse(ReadText(plan));
  EXPECT_EQ(p["pipeline_stages"], 2);
  EXPECT_EQ(p["data_parallel"], 4);
}

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
  result.erase("format");  // the --json object's own; plan.json's block has none
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
  result.erase("format");  // the --json object's own; plan.json's block has none
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

// A list flag that repeats a value tries it once, and says so; the choice
// and its runners-up are distinct configurations (issue 28).
TEST_F(PlannerCli, RepeatedListValuesAreTriedOnceAndSaidSo) {
  ToolRun run = Plan(ToyOn8() +
                     " --zero 0,0 --schedules 1f1b,gpipe,1f1b --tensor-parallel 1,1 "
                     "--top 20 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("planner: --zero repeats 0: each value is tried once"));
  EXPECT_THAT(run.err, HasSubstr("planner: --schedules repeats 1f1b: each value is tried once"));
  EXPECT_THAT(run.err, HasSubstr("planner: --tensor-parallel repeats 1: each value is tried once"));
  const json j = json::parse(run.out);
  std::vector<std::string> labels = {j["chosen"]["label"].get<std::string>()};
  for (const json& r : j["runners_up"]) labels.push_back(r["label"].get<std::string>());
  ASSERT_GT(labels.size(), 2u);
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(std::adjacent_find(labels.begin(), labels.end()), labels.end());
}

// At p = 1 there is no pipeline: one plain schedule stands for all, the
// chunked kinds are not tried (nor counted as rejected), and the text says
// what runs instead of naming a schedule and its bubble (issue 28).
TEST_F(PlannerCli, OneStageIsNoPipeline) {
  ToolRun run = Plan(ToyOn8() + " --stages 1 --zero 0 --top 20");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // 16 samples over d = 8 at micro-batch size 1: m = 2.
  EXPECT_THAT(run.out, HasSubstr("  no pipeline          p = 1: data parallelism over d = 8 (8 "
                                 "GPUs) with 2 gradient accumulation steps per iteration\n"));
  EXPECT_THAT(run.out, Not(HasSubstr("  schedule    ")));
  EXPECT_THAT(run.out, Not(HasSubstr("  bubble ratio         ")));
  EXPECT_THAT(run.out, Not(HasSubstr("micro-batch count sweep")));
  EXPECT_THAT(run.out, Not(HasSubstr("interleaved")));
  EXPECT_THAT(run.out, Not(HasSubstr("zb-h")));
  EXPECT_THAT(run.out, HasSubstr("chosen plan: p=1 d=8 1f1b"));
}

TEST_F(PlannerCli, OneGpuIsSingular) {
  // "1 stages" and "1 GPUs" slips (issue 17): counts take their noun's number.
  ToolRun run = Plan("--model " + Toy() + " --gpus 1 --cluster ideal --global-batch 1");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("toy-uniform on 1 GPU, unlimited memory"));
  EXPECT_THAT(run.out, HasSubstr("data parallelism over d = 1 (1 GPU) with 1 gradient "
                                 "accumulation step per iteration\n"));
  EXPECT_THAT(run.err, HasSubstr("on 1 GPU of ideal"));
  EXPECT_THAT(run.out + run.err, Not(HasSubstr("1 GPUs")));
}

// Issue 16: the new schedules enter the search when --schedules names them, and the chosen one
// comes with the usual explanation and replays exactly from its plan.json.
TEST_F(PlannerCli, ChoosesAmongTheVSchedulesWhenNamed) {
  const std::string plan_path = dir_.File("plan.json");
  ToolRun run =
      Plan(ToyOn8() + " --schedules zb-v,v-half,v-min,interleaved-zb --out " + Quote(plan_path));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("chosen plan: p="));
  EXPECT_THAT(run.out, HasSubstr("bubble ratio"));
  EXPECT_THAT(run.out, HasSubstr("zero-bubble rate"));
  json plan = json::parse(ReadText(plan_path));
  const std::string chosen = plan["schedule"]["name"].get<std::string>();
  EXPECT_THAT((std::vector<std::string>{"zb-v", "v-half", "v-min", "interleaved-zb"}),
              ::testing::Contains(chosen));
  EXPECT_TRUE(plan["predicted"].contains("zb_bubble_rate"));
  ToolRun replay = Sim("--model " + Toy() + " --plan " + Quote(plan_path) + " --json");
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  json result = json::parse(replay.out);
  EXPECT_EQ(result["iteration_time_us"], plan["predicted"]["iteration_time_us"]);
  EXPECT_EQ(result["zb_bubble_rate"], plan["predicted"]["zb_bubble_rate"]);
}

// Issue 16 part 4: the cost-driven schedules are searched when named, chosen and explained like
// the others, and their plan replays to the same prediction (the plan stores the actions).
TEST_F(PlannerCli, ChoosesAmongTheCostDrivenSchedulesWhenNamed) {
  const std::string plan_path = dir_.File("plan.json");
  // Pinned to 2 stages: at p = 1 there is no pipeline to explain (issue 28).
  ToolRun run = Plan(ToyOn8() + " --stages 2 --schedules zb-auto,zb-v-auto,zb-h1 --top 5 --out " +
                     Quote(plan_path));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("chosen plan: p="));
  EXPECT_THAT(run.out, HasSubstr("zero-bubble rate"));
  EXPECT_THAT(run.out, HasSubstr("zb-auto"));
  EXPECT_THAT(run.out, HasSubstr("zb-v-auto"));
  json plan = json::parse(ReadText(plan_path));
  ToolRun replay = Sim("--model " + Toy() + " --plan " + Quote(plan_path) + " --json");
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  json result = json::parse(replay.out);
  EXPECT_EQ(result["iteration_time_us"], plan["predicted"]["iteration_time_us"]);
}

// Issue 16: dualpipe (bidirectional, two parameter copies) is searched only when named, and its
// plan replays exactly: the actions name directions, the partition repeats per copy.
TEST_F(PlannerCli, ChoosesDualPipeOnlyWhenNamed) {
  ToolRun plain = Plan(ToyOn8());
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_THAT(plain.out, Not(HasSubstr("dualpipe ")));
  const std::string plan_path = dir_.File("plan.json");
  ToolRun run = Plan(ToyOn8() + " --schedules dualpipe --out " + Quote(plan_path));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("chosen plan: p="));
  json plan = json::parse(ReadText(plan_path));
  EXPECT_EQ(plan["schedule"]["name"], "dualpipe");
  const int p = plan["pipeline_stages"].get<int>();
  EXPECT_EQ(p % 2, 0);
  ASSERT_EQ(plan["partition"].size(), 2u * p);
  for (int k = 0; k < p; ++k) {
    EXPECT_EQ(plan["partition"][k]["first_layer"], plan["partition"][p + k]["first_layer"]);
    EXPECT_EQ(plan["partition"][k]["last_layer"], plan["partition"][p + k]["last_layer"]);
  }
  EXPECT_EQ(plan["actions"][0].get<std::string>().substr(0, 3), "a0F");
  ToolRun replay = Sim("--model " + Toy() + " --plan " + Quote(plan_path) + " --json");
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  json result = json::parse(replay.out);
  EXPECT_EQ(result["iteration_time_us"], plan["predicted"]["iteration_time_us"]);
  EXPECT_EQ(result["bidirectional"], true);
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
  EXPECT_THAT(run.err, ::testing::ContainsRegex("configurations partitioned \\([0-9.]+ s\\)\n"));
  EXPECT_THAT(run.err, ::testing::ContainsRegex(
                           "planner: [0-9]+/[0-9]+ configurations (simulated|done: [^\n]*) "
                           "\\([0-9.]+ s\\)\n"));
  EXPECT_THAT(run.err, Not(HasSubstr("\r"))) << "no bar when stderr is a file";
  EXPECT_THAT(run.out, Not(HasSubstr("configurations simulated")));
  EXPECT_NO_THROW(json::parse(run.out));
  // The default waits 2 s: the toy search is quicker, so it shows nothing.
  ToolRun quick = Plan(ToyOn8());
  ASSERT_EQ(quick.exit_code, 0) << quick.err;
  EXPECT_THAT(quick.err, Not(HasSubstr("configurations simulated")));
}

// Issue 28: the README's chain, `profiler analytic ... --out model.json` then
// `planner --model model.json --gpus 8`, failed "no global batch" after
// "searching plans". It is asked for before the search, naming both ways to
// give it; with --global-batch the chain plans.
TEST_F(PlannerCli, TheReadmeChainAsksForTheGlobalBatchBeforeSearching) {
  const std::string model = dir_.File("model.json");
  WriteText(model, ReadText(Example("toy-uniform.json")));  // no global_batch

  ToolRun run = Plan("--model " + Quote(model) + " --gpus 8 --cluster ideal");

  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("no global batch: the model 'toy-uniform' gives none"));
  EXPECT_THAT(run.err, HasSubstr("give --global-batch N"));
  EXPECT_THAT(run.err, Not(HasSubstr("searching plans")));
  EXPECT_EQ(
      Plan("--model " + Quote(model) + " --gpus 8 --cluster ideal --global-batch 16").exit_code, 0);
}

// Issue 28: every output flag refused a legal 250-byte file name, because
// its temporary name, `<name>.tmp.XXXXXX`, outgrew NAME_MAX (255).
TEST_F(PlannerCli, EveryOutputFlagTakesALegal250ByteFileName) {
  auto name = [](const std::string& ext) { return std::string(250 - ext.size(), 'n') + ext; };
  const std::string out = dir_.File(name(".json")), trace = dir_.File(name(".trace")),
                    report = dir_.File(name(".html")), schedule = dir_.File(name(".txt"));

  ToolRun run = Plan(ToyOn8() + " --out " + Quote(out) + " --trace " + Quote(trace) + " --report " +
                     Quote(report) + " --schedule-out " + Quote(schedule));

  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const std::string& path : {out, trace, report, schedule}) {
    EXPECT_FALSE(ReadText(path).empty()) << path;
  }
}

}  // namespace
}  // namespace pipecast::cli_test
