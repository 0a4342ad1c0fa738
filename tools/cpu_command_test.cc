// `profiler cpu` run as a user runs it, and what it writes accepted by the
// project's loader, the planner and the simulator. Exit codes: 0 ok, 1 bad
// value, 2 usage. Layers are tiny so that each run takes well under a second.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "formats/formats.h"
#include "profiler/cpu/workload.h"
#include "testing/cli_test_util.h"

namespace pipecast::cli_test {
namespace {

using ::testing::HasSubstr;

const std::string kProfiler = PIPECAST_PROFILER_BIN;
const std::string kPlanner = PIPECAST_PLANNER_BIN;
const std::string kSimulator = PIPECAST_SIMULATOR_BIN;

// Four small layers, the second 4x wider; two sizes; few iterations.
constexpr char kSmall[] =
    "cpu --layers 4 --hidden 32 --ffn 64 --tokens-per-sample 8 --microbatch-sizes 1,2 "
    "--warmup 1 --iterations 3 --layer-ffn 1:256";

class CpuCommand : public ::testing::Test {
 protected:
  ToolRun Profile(const std::string& args) { return RunTool(dir_, kProfiler, args); }
  TempDir dir_;
};

TEST_F(CpuCommand, WritesAModelThePlannerAndSimulatorAccept) {
  const std::string model_path = dir_.File("cpu.json");
  ToolRun run =
      Profile(std::string(kSmall) + " --name tiny-mlp --global-batch 8 --out " + Quote(model_path));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("wrote"));
  EXPECT_EQ(run.out, "");

  Result<Model> model = LoadModel(model_path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->name, "tiny-mlp");
  EXPECT_EQ(model->global_batch, 8);
  EXPECT_EQ(model->sequence_length, 8);
  EXPECT_EQ(model->source.method, "cpu");
  ASSERT_EQ(model->layers.size(), 4u);
  EXPECT_EQ(model->layers[1].parameters, 2 * 32 * 256);
  EXPECT_EQ(model->layers[0].profiles[1].activation_bytes, 4 * 16 * (32 + 2 * 64));
  for (const char* key : {"clock", "warmup", "iterations", "spread", "workload"}) {
    EXPECT_TRUE(model->source.details.count(key)) << key;
  }

  const std::string plan = dir_.File("plan.json");
  ToolRun planned =
      RunTool(dir_, kPlanner,
              "--model " + Quote(model_path) + " --gpus 2 --cluster ideal --out " + Quote(plan));
  ASSERT_EQ(planned.exit_code, 0) << planned.err << planned.out;
  EXPECT_THAT(planned.out, HasSubstr("chosen plan"));
  ToolRun simulated =
      RunTool(dir_, kSimulator, "--model " + Quote(model_path) + " --plan " + Quote(plan));
  EXPECT_EQ(simulated.exit_code, 0) << simulated.err;
}

TEST_F(CpuCommand, ShippedExampleDescribesItsWorkloadExactly) {
  // examples/cpu-mlp.json (scripts/make-examples.sh) loads, names the
  // workload it measured, and its bytes are that workload's, layer by layer.
  Result<Model> model = LoadModel(Example("cpu-mlp.json"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->source.method, "cpu");
  EXPECT_THAT(model->source.details.at("note"), HasSubstr("measured on"));
  Result<cpu::WorkloadSpec> spec = cpu::WorkloadFromSource(model->source);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_EQ(spec->LayerCount(), static_cast<int>(model->layers.size()));
  const std::vector<cpu::Block> blocks = spec->Build();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(model->layers[i].parameters, blocks[i].Parameters()) << i;
    for (const LayerProfile& p : model->layers[i].profiles) {
      EXPECT_EQ(p.activation_bytes, blocks[i].ActivationBytes(p.microbatch_size)) << i;
      EXPECT_EQ(p.output_bytes, blocks[i].OutputBytes(p.microbatch_size)) << i;
      EXPECT_GT(p.forward_ns, 0) << i;
    }
  }
  ToolRun planned = RunTool(
      dir_, kPlanner, "--model " + Quote(Example("cpu-mlp.json")) + " --gpus 2 --cluster ideal");
  EXPECT_EQ(planned.exit_code, 0) << planned.err;
}

TEST_F(CpuCommand, WritesToStdoutWithoutOut) {
  ToolRun run = Profile(
      "cpu --layers 1 --hidden 8 --ffn 8 --tokens-per-sample 2 "
      "--microbatch-sizes 1 --warmup 0 --iterations 1 --device 'test box'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Result<Model> model = ParseModel(run.out, "stdout");
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->source.device, "test box");
}

TEST_F(CpuCommand, HelpListsTheFlags) {
  ToolRun run = Profile("cpu --help");
  EXPECT_EQ(run.exit_code, 0);
  for (const char* flag : {"--layers", "--hidden", "--ffn", "--tokens-per-sample", "--layer-ffn",
                           "--microbatch-sizes", "--warmup", "--iterations"}) {
    EXPECT_THAT(run.out, HasSubstr(flag));
  }
}

TEST_F(CpuCommand, UsageErrorsExitTwo) {
  EXPECT_EQ(Profile("cpu --no-such-flag").exit_code, 2);
  EXPECT_EQ(Profile("cpu --layers many").exit_code, 2);
  EXPECT_EQ(Profile("cpu --microbatch-sizes 1,x").exit_code, 2);
}

TEST_F(CpuCommand, BadValuesExitOneNamingTheFlagAndWriteNothing) {
  const std::string out = dir_.File("m.json");
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c :
       {Case{"--layers 0", "--layers 0"}, Case{"--hidden 0", "--hidden 0"},
        Case{"--iterations 0", "--iterations 0"},
        Case{"--microbatch-sizes 1,1", "--microbatch-sizes lists 1 twice"},
        Case{"--layers 2 --layer-ffn 5:64", "layer 5 does not exist"},
        Case{"--layer-ffn wide", "is not LAYER:FFN"}, Case{"--layer-ffn 0:0", "--layer-ffn 0:0"}}) {
    ToolRun run = Profile(std::string("cpu ") + c.args + " --out " + Quote(out));
    EXPECT_EQ(run.exit_code, 1) << c.args;
    EXPECT_THAT(run.err, HasSubstr(c.says)) << c.args;
    EXPECT_FALSE(Exists(out)) << c.args;
  }
  ToolRun run = Profile("cpu --layers 1 --hidden 8 --ffn 8 --iterations 1 --warmup 0 --out " +
                        Quote(dir_.File("no/such/folder/m.json")));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("--out"));
}

}  // namespace
}  // namespace pipecast::cli_test
