// Runs the built `profiler` tool (PIPECAST_PROFILER_BIN) and checks its exit
// codes and files: 0 ok, 1 bad input, 2 usage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
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

// A shipped HuggingFace configuration, by its path from the source root.
std::string HfFile(const std::string& name) {
  const char* dir = std::getenv("PIPECAST_SOURCE_DIR");
  return std::string(dir != nullptr && *dir != 0 ? dir : ".") + "/examples/hf/" + name;
}

TEST(ProfilerCliTest, HfConfigWritesTheModelTheFileDescribes) {
  // Given the README's walk-through: Llama-3.1-8B from its config.json.
  const std::string path = ::testing::TempDir() + "/profiler_cli_test_llama.json";
  const ToolRun run = RunProfiler("analytic --hf-config '" + HfFile("llama-3.1-8b.json") +
                                  "' --out '" + path + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // Then stderr says the sequence length was chosen for the user, and the
  // file holds the published 8,030,261,248 parameters.
  EXPECT_THAT(run.output, HasSubstr("--seq not given: 4096 tokens per sample"));
  Result<Model> model = LoadModel(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->name, "llama-3.1-8b");
  EXPECT_EQ(model->TotalParameters(), 8'030'261'248);
  EXPECT_EQ(model->sequence_length, 4096);
  const nlohmann::json arch = nlohmann::json::parse(model->source.details.at("architecture"));
  EXPECT_EQ(arch["kv_heads"], 8);
  EXPECT_EQ(arch["norm"], "rmsnorm");
  EXPECT_EQ(arch["qkv_bias"], false);
  EXPECT_THAT(model->source.details.at("architecture_from"),
              HasSubstr("model_type llama; sequence length 4096 by default"));
  EXPECT_THAT(model->source.details.at("architecture_from"), HasSubstr("rope_scaling llama3"));
}

TEST(ProfilerCliTest, FlagsWinOverTheHfConfig) {
  // --layers 2 and --seq 1024 over Llama-3.1-8B: two blocks of 1024 tokens.
  const ToolRun run = RunProfiler("analytic --hf-config '" + HfFile("llama-3.1-8b.json") +
                                      "' --layers 2 --seq 1024 --name small --microbatch-sizes 1",
                                  /*with_stderr=*/false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  Result<Model> model = ParseModel(run.output, "stdout");
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model->name, "small");
  EXPECT_EQ(model->layers.size(), 4u);
  EXPECT_EQ(model->sequence_length, 1024);
  EXPECT_EQ(model->layers[1].parameters, 218'112'000);  // the file's block, unchanged
  EXPECT_THAT(model->source.details.at("architecture_from"),
              HasSubstr("flags over the file: --name, --layers, --seq"));
  // --tied-embeddings=false unties a tied file (Llama-3.2-1B ties its head).
  const ToolRun tied = RunProfiler(
      "analytic --hf-config '" + HfFile("llama-3.2-1b.json") + "' --seq 512 --microbatch-sizes 1",
      false);
  const ToolRun untied = RunProfiler("analytic --hf-config '" + HfFile("llama-3.2-1b.json") +
                                         "' --seq 512 --microbatch-sizes 1 --tied-embeddings=false",
                                     false);
  ASSERT_EQ(tied.exit_code, 0);
  ASSERT_EQ(untied.exit_code, 0);
  const Result<Model> a = ParseModel(tied.output, "tied"), b = ParseModel(untied.output, "untied");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->TotalParameters() - a->TotalParameters(), int64_t{128'256} * 2048);
}

TEST(ProfilerCliTest, HfConfigErrorsExitOneNamingFileAndKey) {
  const std::string dir = ::testing::TempDir();
  auto run_with = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    EXPECT_TRUE(WriteFileAtomic(path, text).ok());
    return RunProfiler("analytic --hf-config '" + path + "'");
  };
  ToolRun run = run_with("broken.json", "{\"model_type\": ");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("broken.json: not valid JSON"));
  run = run_with("bert.json", R"({"model_type": "bert", "hidden_size": 768})");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("'bert' is not a model_type pipecast reads; known: "));
  run = run_with("nohidden.json", R"({"model_type": "mistral", "num_hidden_layers": 2})");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("nohidden.json: hidden_size is missing"));
  run = run_with("kv.json", R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 8, "num_key_value_heads": 3, "intermediate_size": 128,
      "vocab_size": 10})");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("num_attention_heads 8 is not divisible by "
                                    "num_key_value_heads 3"));
  run = RunProfiler("analytic --hf-config /no/such/config.json");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("--hf-config"));
  // A mixture of experts is estimated, and the counts say what one token reaches.
  run = RunProfiler("analytic --hf-config '" + HfFile("qwen3-30b-a3b.json") +
                    "' --microbatch-sizes 1 --out '" + dir + "/qwen3-30b.json'");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("B active per token"));
  // Without --hf-config the architecture flags are required (usage, exit 2).
  run = RunProfiler("analytic --name x --layers 2 --hidden 64 --heads 4 --vocab 100");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.output, HasSubstr("--seq is required (or give the model as --hf-config"));
}

TEST(ProfilerCliTest, DescribePrintsTotalAndActiveParameters) {
  const ToolRun run =
      RunProfiler("analytic --hf-config '" + HfFile("mixtral-8x7b.json") + "' --describe", false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("46,702,792,704 parameters"));
  EXPECT_THAT(run.output, HasSubstr("active per token 12,879,925,248"));
  EXPECT_THAT(run.output, HasSubstr("expert_fc1 4096x28672 x8 (each token: 2)"));
}

}  // namespace
}  // namespace pipecast
