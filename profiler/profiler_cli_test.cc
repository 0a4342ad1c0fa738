// Runs the built `profiler` tool (PIPECAST_PROFILER_BIN) and checks its exit
// codes and files: 0 ok, 1 bad input, 2 usage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/file_util.h"
#include "formats/formats.h"

namespace pipecast {
namespace {

using ::testing::HasSubstr;

struct ToolRun {
  int exit_code = -1;
  std::string output;  // stdout, and stderr when asked for
};

// Runs the profiler with `args` (already shell-quoted where needed).
ToolRun RunProfiler(const std::string& args, bool with_stderr = true) {
  const std::string command = std::string("'") + PIPECAST_PROFILER_BIN + "' " + args +
                              (with_stderr ? " 2>&1" : " 2>/dev/null");
  ToolRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buffer;
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    run.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

constexpr char kTinyFlags[] =
    "analytic --name tiny --layers 2 --hidden 64 --heads 4 --seq 32 --vocab 100 "
    "--microbatch-sizes 1,2";

TEST(ProfilerCliTest, HelpExitsZero) {
  ToolRun run = RunProfiler("--help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.output, HasSubstr("analytic"));
  run = RunProfiler("analytic --help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.output, HasSubstr("--microbatch-sizes"));
}

TEST(ProfilerCliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(RunProfiler("").exit_code, 2);                   // no subcommand
  EXPECT_EQ(RunProfiler("analytic --name x").exit_code, 2);  // required flags missing
  EXPECT_EQ(RunProfiler(std::string(kTinyFlags) + " --layers many").exit_code, 2);
  EXPECT_EQ(RunProfiler(std::string(kTinyFlags) + " --no-such-flag").exit_code, 2);
}

TEST(ProfilerCliTest, BadValuesExitOneNamingTheFlag) {
  ToolRun run =
      RunProfiler("analytic --name x --layers 2 --hidden 100 --heads 3 --seq 8 --vocab 10");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("--hidden 100 is not divisible by --heads 3"));
  run = RunProfiler(std::string(kTinyFlags) + " --gpu no-such-gpu");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("--gpu"));
  run = RunProfiler(std::string(kTinyFlags) + " --out /no/such/folder/model.json");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("--out"));
  // FlashAttention-3 needs Hopper.
  run = RunProfiler(std::string(kTinyFlags) + " --gpu a100-80gb --attention flash3");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("--attention flash3"));
  EXPECT_EQ(RunProfiler(std::string(kTinyFlags) + " --attention flash4").exit_code, 2);
}

TEST(ProfilerCliTest, AttentionKernelsAreStatedInTheModel) {
  // 'flash' is FlashAttention-2; each kernel's rates are written to source.
  for (const char* kernel : {"flash", "flash2", "flash3", "triton"}) {
    ToolRun run = RunProfiler(std::string(kTinyFlags) + " --attention " + kernel, false);
    ASSERT_EQ(run.exit_code, 0) << kernel;
    const nlohmann::json doc = nlohmann::json::parse(run.output);
    const std::string name = std::string(kernel) == "flash" ? "flash2" : kernel;
    EXPECT_EQ(doc["source"]["attention"], name);
    EXPECT_EQ(doc["source"]["attention_kernel"]["kernel"], name);
    EXPECT_GT(doc["source"]["attention_kernel"]["forward_tflops"].get<double>(), 0);
  }
}

TEST(ProfilerCliTest, PrintsTheModelToStdout) {
  const ToolRun run = RunProfiler(kTinyFlags, /*with_stderr=*/false);
  ASSERT_EQ(run.exit_code, 0);
  Result<Model> model = ParseModel(run.output, "stdout");
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->name, "tiny");
  EXPECT_EQ(model->layers.size(), 4u);
}

TEST(ProfilerCliTest, OutWritesALoadableModel) {
  const std::string path = ::testing::TempDir() + "/profiler_cli_test_model.json";
  const ToolRun run = RunProfiler(std::string(kTinyFlags) +
                                  " --ffn-hidden 128 --tied-embeddings --global-batch 16 "
                                  "--matmul-efficiency 0.4 --out '" +
                                  path + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  Result<Model> model = LoadModel(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->source.method, "analytic");
  EXPECT_EQ(model->source.device, "h100-sxm");
  EXPECT_EQ(model->global_batch, 16);
  EXPECT_EQ(model->layers.back().parameters, 2 * 64);  // tied: the final layernorm only
  EXPECT_EQ(model->source.details.at("matmul_efficiency"), "0.4");
  ASSERT_EQ(model->layers[1].profiles.size(), 2u);
  EXPECT_EQ(model->layers[1].profiles[1].microbatch_size, 2);
}

TEST(ProfilerCliTest, GivenMatmulEfficiencySelectsTheFlatModel) {
  const ToolRun flat = RunProfiler(std::string(kTinyFlags) + " --matmul-efficiency 0.4");
  ASSERT_EQ(flat.exit_code, 0) << flat.output;
  Result<Model> model = ParseModel(flat.output, "stdout");
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->source.details.at("time_model"), "\"flat\"");
  const ToolRun matmul = RunProfiler(kTinyFlags);
  ASSERT_EQ(matmul.exit_code, 0) << matmul.output;
  model = ParseModel(matmul.output, "stdout");
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(model->source.details.at("time_model"), "\"matmul\"");
  EXPECT_TRUE(model->source.details.count("gemm_table"));
}

TEST(ProfilerCliTest, TensorParallelWritesPerDegreeProfiles) {
  // Given --tensor-parallel 1,2,4 (tiny: 4 heads, micro-batch sizes 1 and 2).
  const ToolRun run = RunProfiler(std::string(kTinyFlags) + " --tensor-parallel 1,2,4");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json doc = nlohmann::json::parse(run.output);
  // Then every layer has 2 sizes x (1 + 2 degrees x 2 sequence-parallel settings).
  for (const nlohmann::json& layer : doc["layers"]) {
    EXPECT_EQ(layer["profiles"].size(), 2u * 5) << layer["name"];
  }
  EXPECT_EQ(doc["source"]["tensor_parallel"]["degrees"], nlohmann::json({1, 2, 4}));
  // And the default writes t = 1 only, the same bytes as --tensor-parallel 1.
  EXPECT_EQ(RunProfiler(kTinyFlags).output,
            RunProfiler(std::string(kTinyFlags) + " --tensor-parallel 1").output);
}

}  // namespace
}  // namespace pipecast
