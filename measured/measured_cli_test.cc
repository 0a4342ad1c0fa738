// `validator --measured`, `validator --megatron-log` and `profiler trace` as a user runs them,
// and the round trip of issue 27: a validator run's trace, read back through the importer,
// gives the validator's own measured figures to the nanosecond.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "testing/cli_test_util.h"

namespace pipecast {
namespace {

using cli_test::Quote;
using cli_test::RunTool;
using cli_test::TempDir;
using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string Fixture(const std::string& name) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  return std::string(root != nullptr ? root : PIPECAST_SOURCE_DIR_DEFAULT) + "/tests/traces/" +
         name;
}

// A busy-work model of 4 layers (1 ms forward, 2 ms backward) that does not fit one 0.25 GB
// "GPU", so the planner splits it over 2 stages.
std::string Model(const TempDir& dir) {
  Json layers = Json::array();
  for (int i = 0; i < 4; ++i) {
    layers.push_back({{"name", "block" + std::to_string(i)},
                      {"parameters", 5'000'000},
                      {"profiles",
                       {{{"microbatch_size", 1},
                         {"forward_us", 1000},
                         {"backward_us", 2000},
                         {"activation_bytes", 1 << 20},
                         {"output_bytes", 64 << 10}}}}});
  }
  const std::string path = dir.File("model.json");
  cli_test::WriteText(path, Json{{"format", "pipecast-model/1"},
                                 {"name", "busy4"},
                                 {"global_batch", 4},
                                 {"layers", layers}}
                                .dump(1));
  return path;
}

std::string Plan(const TempDir& dir) {
  const std::string model = Model(dir);
  const std::string plan = dir.File("plan.json");
  cli_test::ToolRun r = RunTool(dir, PIPECAST_PLANNER_BIN,
                                "--model " + Quote(model) +
                                    " --gpus 2 --cluster local --zero 0 --schedules 1f1b "
                                    "--memory-gb 0.25 --recompute off --out " +
                                    Quote(plan));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return plan;
}

cli_test::ToolRun Validator(const TempDir& dir, const std::string& args) {
  return RunTool(dir, "timeout", "120 " + Quote(PIPECAST_VALIDATOR_BIN) + " " + args);
}

// A JSON time in us as integer ns (the validator scales by 1e-3, the importer divides by 1e3:
// equal ns, possibly a different last bit).
int64_t Ns(const Json& us) { return std::llround(us.get<double>() * 1e3); }

const Json& Metric(const Json& j, const std::string& metric, const Json& stage) {
  for (const Json& m : j["metrics"]) {
    if (m["metric"] == metric && m["stage"] == stage) return m;
  }
  ADD_FAILURE() << "no metric " << metric << " " << stage.dump();
  return j;
}

// The validator's trace of a cpu-backend run, read back: the iteration time, every rank's busy
// time and bubble ratio equal the validator's own measured figures exactly (the trace's times
// are microseconds with the nanoseconds as decimals, read back exactly).
TEST(MeasuredCli, AValidatorTraceReadBackGivesTheValidatorsFigures) {
  TempDir dir;
  const std::string plan = Plan(dir);
  const std::string trace = dir.File("validator-trace.json");
  cli_test::ToolRun v = Validator(
      dir, "--plan " + Quote(plan) + " --model " + Quote(dir.File("model.json")) +
               " --backend cpu --warmup 0 --iterations 1 --tolerance 1000 --json --trace " +
               Quote(trace));
  ASSERT_TRUE(v.exit_code == 0 || v.exit_code == 3) << v.err;
  const Json validated = Json::parse(v.out);

  cli_test::ToolRun m = Validator(dir, "--measured " + Quote(trace) + " --json");
  ASSERT_EQ(m.exit_code, 0) << m.err;
  const Json measured = Json::parse(m.out);
  EXPECT_EQ(measured["format"], "pipecast-measured-run/1");
  ASSERT_EQ(measured["ranks"].size(), 2u);
  EXPECT_EQ(Ns(measured["iterations_us"][0]),
            Ns(Metric(validated, "iteration time", nullptr)["measured"]));
  for (int r = 0; r < 2; ++r) {
    const Json& step = measured["ranks"][r]["median_step"];
    EXPECT_EQ(Ns(step["compute_us"]), Ns(Metric(validated, "busy time", r)["measured"]))
        << "rank " << r;
    EXPECT_EQ(measured["ranks"][r]["bubble_ratio"].get<double>(),
              Metric(validated, "bubble ratio", r)["measured"].get<double>())
        << "rank " << r;
  }
  EXPECT_EQ(measured["ranks"][0]["ops_from"], "pipecast trace ('measured' processes)");

  // The same trace compared with the plan: the measured side of each row is the validator's.
  cli_test::ToolRun c =
      Validator(dir, "--measured " + Quote(trace) + " --plan " + Quote(plan) + " --model " +
                         Quote(dir.File("model.json")) + " --tolerance 1000 --json --report " +
                         Quote(dir.File("report.html")));
  ASSERT_TRUE(c.exit_code == 0 || c.exit_code == 3) << c.err;
  const Json compared = Json::parse(c.out);
  EXPECT_EQ(Ns(Metric(compared, "iteration time", nullptr)["measured"]),
            Ns(Metric(validated, "iteration time", nullptr)["measured"]));
  EXPECT_EQ(Ns(Metric(compared, "compute", 1)["measured"]),
            Ns(Metric(validated, "busy time", 1)["measured"]));
  const std::string html = cli_test::ReadText(dir.File("report.html"));
  EXPECT_THAT(html, HasSubstr("<h2>Predicted timeline</h2>"));
  EXPECT_THAT(html, HasSubstr("<h2>Measured timeline</h2>"));
  EXPECT_THAT(html, HasSubstr("data-metric=\"iteration time\""));
}

// A validator run's own --report: the comparison and both timelines on one page.
TEST(MeasuredCli, TheValidatorsReportDrawsBothTimelines) {
  TempDir dir;
  const std::string plan = Plan(dir);
  cli_test::ToolRun v =
      Validator(dir, "--plan " + Quote(plan) + " --model " + Quote(dir.File("model.json")) +
                         " --backend cpu --warmup 0 --iterations 1 --tolerance 1000 --report " +
                         Quote(dir.File("run.html")));
  ASSERT_TRUE(v.exit_code == 0 || v.exit_code == 3) << v.err;
  const std::string html = cli_test::ReadText(dir.File("run.html"));
  EXPECT_THAT(html, HasSubstr("validator run against its plan"));
  EXPECT_THAT(html, HasSubstr("<div class=\"measured\">\n<div class=\"legend\""));
}

TEST(MeasuredCli, PublishedTracesAreSummarised) {
  TempDir dir;
  cli_test::ToolRun r =
      Validator(dir, "--measured " + Quote(Fixture("hta/trace_filter_rank0_step552.json")) + "," +
                         Quote(Fixture("hta/trace_filter_rank1_step552.json")) + " --trace " +
                         Quote(dir.File("t.json")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("measured run: 2 ranks, step 552 common to all"));
  EXPECT_THAT(r.out, HasSubstr("all-to-all (exposed)"));
  EXPECT_THAT(r.out, HasSubstr("rank 0 streams in step 552"));
  EXPECT_THAT(cli_test::ReadText(dir.File("t.json")), HasSubstr("\"measured rank 1"));
}

TEST(MeasuredCli, BadInputIsExitOneNamingTheFileAndUsageIsExitTwo) {
  TempDir dir;
  cli_test::WriteText(dir.File("bad.json"), "{\"traceEvents\": [ {\"ph\": \"X\",, ]}");
  cli_test::ToolRun r = Validator(dir, "--measured " + Quote(dir.File("bad.json")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("bad.json: not valid JSON"));
  r = Validator(dir, "--measured " + Quote(dir.File("missing.json")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("missing.json: cannot be opened"));
  cli_test::WriteText(dir.File("nostep.json"), "{\"traceEvents\": []}");
  r = Validator(dir, "--measured " + Quote(dir.File("nostep.json")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("nostep.json: no ProfilerStep#N range"));
  r = Validator(dir, "--measured " + Quote(dir.File("nostep.json")) + " --plan p.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--plan needs --model"));
  r = Validator(dir, "--backend cpu");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--plan is required"));
  cli_test::WriteText(dir.File("train.log"), "nothing here\n");
  r = Validator(dir, "--megatron-log " + Quote(dir.File("train.log")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no Megatron-LM iteration line"));
}

TEST(MeasuredCli, ProfilerTraceWritesAModel) {
  TempDir dir;
  // Two steps of one layer: forward 30 us, backward 50 us of kernels.
  Json ev = Json::array();
  for (int s = 0; s < 2; ++s) {
    const double t = 1000.0 * s;
    ev.push_back({{"ph", "X"},
                  {"cat", "user_annotation"},
                  {"name", "ProfilerStep#" + std::to_string(s)},
                  {"pid", 1},
                  {"tid", 1},
                  {"ts", t},
                  {"dur", 900}});
    ev.push_back({{"ph", "X"},
                  {"cat", "user_annotation"},
                  {"name", "pipecast:mlp:forward:params=64"},
                  {"pid", 1},
                  {"tid", 1},
                  {"ts", t + 10},
                  {"dur", 10}});
    ev.push_back({{"ph", "X"},
                  {"cat", "user_annotation"},
                  {"name", "pipecast:mlp:backward"},
                  {"pid", 1},
                  {"tid", 1},
                  {"ts", t + 30},
                  {"dur", 10}});
    for (int k = 0; k < 2; ++k) {
      const int corr = 10 * s + k + 1;
      ev.push_back({{"ph", "X"},
                    {"cat", "cuda_runtime"},
                    {"name", "cudaLaunchKernel"},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", t + 11 + 20 * k},
                    {"dur", 1},
                    {"args", {{"correlation", corr}}}});
      ev.push_back({{"ph", "X"},
                    {"cat", "kernel"},
                    {"name", "gemm"},
                    {"pid", 0},
                    {"tid", 7},
                    {"ts", t + 100 + 100 * k},
                    {"dur", k == 0 ? 30 : 50},
                    {"args", {{"correlation", corr}, {"stream", 7}}}});
    }
  }
  cli_test::WriteText(dir.File("rank0.json"), Json{{"traceEvents", ev}}.dump());
  cli_test::ToolRun r =
      RunTool(dir, PIPECAST_PROFILER_BIN,
              "trace --name mlp1 --warmup 0 --iterations 2 --out " + Quote(dir.File("model.json")) +
                  " " + Quote(dir.File("rank0.json")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json model = Json::parse(cli_test::ReadText(dir.File("model.json")));
  EXPECT_EQ(model["source"]["method"], "trace");
  EXPECT_EQ(model["layers"][0]["name"], "mlp");
  EXPECT_EQ(model["layers"][0]["profiles"][0]["forward_us"].get<double>(), 30);
  EXPECT_EQ(model["layers"][0]["profiles"][0]["backward_us"].get<double>(), 50);
  r = RunTool(dir, PIPECAST_PROFILER_BIN, "trace --name x " + Quote(dir.File("none.json")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("none.json: cannot be opened"));
}

}  // namespace
}  // namespace pipecast
