// The error catalogue (issue 8, docs/errors.md): one table of bad inputs
// across the tools, each run through the real binary as a user runs it, with
// the exact exit code and a fragment of the message it must print. Every row
// is its own test (Case/ErrorCatalogue.Run/<name>). A row says which files to
// write into a fresh folder and the command line; `{dir}` in the command is
// that folder and `{ex}` the repository's examples/ folder.
//
// Exit codes (docs/errors.md section 1): 1 bad input or failure, 2 usage, 4 no plan.
// (3, a check beyond tolerance, is not an error: planner_check_test and the
// validator's loop test cover it.)
//
// The validator's rows fail before any stage runs (flags, files, the
// plan's simulation, the trace's folder), so the gpt-7b baseline plan serves
// them without executing it.
//
// Writes that fail (a missing folder, a path that is a folder, a read-only
// folder) are rows too, and every such row also checks that the folder holds
// no output and no temporary file afterwards (formats/file_util.h:
// WriteFileAtomic writes `<path>.tmp.XXXXXX`, then renames it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "testing/cli_test_util.h"

namespace pipecast::cli_test {
namespace {

using ::testing::HasSubstr;

enum Tool { kSimulator, kPlanner, kProfiler, kValidator };

const char* Binary(Tool tool) {
  switch (tool) {
    case kSimulator:
      return PIPECAST_SIMULATOR_BIN;
    case kPlanner:
      return PIPECAST_PLANNER_BIN;
    case kProfiler:
      return PIPECAST_PROFILER_BIN;
    case kValidator:
      return PIPECAST_VALIDATOR_BIN;
  }
  return "";
}

// A file the row writes into the test's folder before running.
struct File {
  std::string name;
  std::string text;
};

// After the run, what the folder must look like.
enum class After {
  kAnything,
  kNoOutputs,  // no file but the inputs (and the captured stdout/stderr): nothing half-written
  kInputsUnchanged,  // kNoOutputs, and every input file still holds its text
};

struct Case {
  std::string name;  // test name: letters, digits, underscores
  Tool tool;
  std::vector<File> files;
  std::string args;  // shell text; {dir} and {ex} are replaced
  int exit_code;
  std::string error;  // must appear in stderr
  After after = After::kAnything;
  // A folder to create in the test's folder before the run, read-only (mode
  // 0555) when `read_only`.
  std::string make_dir;
  bool read_only = false;
  std::string output;  // when not empty: must appear in stdout
  // Skipped where a CUDA device exists (the row is about having none).
  bool needs_no_gpu = false;
  std::string absent;  // when not empty: must not appear in stderr
};

// gtest shows a failing row by its name.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// ---------------------------------------------------------------------------
// Inputs

// A valid model.json with `layers` identical layers; `profile` replaces the
// profile object of layer 0 when given.
std::string Model(int layers, const std::string& profile = "",
                  const std::string& parameters = "1000") {
  const std::string good = R"({"microbatch_size": 1, "forward_us": 100, "backward_us": 200, )"
                           R"("activation_bytes": 1024, "output_bytes": 512})";
  std::string text = R"({"format": "pipecast-model/1", "name": "m", "layers": [)";
  for (int i = 0; i < layers; ++i) {
    if (i > 0) text += ", ";
    text += R"({"name": "l)" + std::to_string(i) + R"(", "parameters": )" +
            (i == 0 ? parameters : std::string("1000")) + R"(, "profiles": [)" +
            (i == 0 && !profile.empty() ? profile : good) + "]}";
  }
  return text + "]}\n";
}

// A profile with one field replaced by `value` (raw JSON text), or removed
// when `value` is empty.
std::string Profile(const std::string& field, const std::string& value) {
  std::vector<std::pair<std::string, std::string>> fields = {{"microbatch_size", "1"},
                                                             {"forward_us", "100"},
                                                             {"backward_us", "200"},
                                                             {"activation_bytes", "1024"},
                                                             {"output_bytes", "512"}};
  std::string text = "{";
  for (const auto& [k, v] : fields) {
    const std::string shown = k == field ? value : v;
    if (shown.empty()) continue;
    if (text.size() > 1) text += ", ";
    text += "\"" + k + "\": " + shown;
  }
  return text + "}";
}

const char kCluster[] = R"({"format": "pipecast-cluster/1", "name": "c", "gpus_per_node": 8,
  "gpu": {"name": "g", "memory_bytes": 85899345920, "peak_tflops": 989},
  "intra_node": {"bandwidth_gbps": 450, "latency_us": 2},
  "inter_node": {"bandwidth_gbps": 50, "latency_us": 5}})";

std::string ClusterWith(const std::string& from, const std::string& to) {
  std::string text = kCluster;
  text.replace(text.find(from), from.size(), to);
  return text;
}

const File kGoodModel = {"m.json", Model(8)};

// examples/baselines/gpt-7b-8gpu.plan.json with `from` replaced by `to`.
std::string Baseline(const std::string& from, const std::string& to) {
  std::string text = ReadText(Example("baselines/gpt-7b-8gpu.plan.json"));
  const size_t at = text.find(from);
  if (at == std::string::npos) return "baseline plan lacks " + from;
  return text.replace(at, from.size(), to);
}
// Simulates with: simulator --model {dir}/m.json --stages 2 --microbatches 2.
const char kSim[] = "--model {dir}/m.json --stages 2 --microbatches 2";

Case Row(std::string name, Tool tool, std::vector<File> files, std::string args, int exit_code,
         std::string error, After after = After::kAnything, std::string make_dir = "",
         bool read_only = false) {
  return Case{std::move(name),
              tool,
              std::move(files),
              std::move(args),
              exit_code,
              std::move(error),
              after,
              std::move(make_dir),
              read_only,
              std::string(),
              false,
              std::string()};
}

std::vector<Case> Catalogue() {
  std::vector<Case> c;
  // --- malformed JSON ------------------------------------------------------
  c.push_back(Row("model_truncated_json", kSimulator,
                  {{"m.json", R"({"format": "pipecast-model/1", "name": )"}}, kSim, 1,
                  "m.json: not valid JSON at byte"));
  // 100k nested arrays (200 KB) once overflowed the stack in every tool (issue 17).
  c.push_back(Row("model_nested_100k_levels", kSimulator,
                  {{"m.json", std::string(100000, '[') + std::string(100000, ']')}}, kSim, 1,
                  "m.json: nested deeper than 64 levels at byte 65"));
  c.push_back(Row("plan_nested_100k_levels", kSimulator,
                  {kGoodModel, {"p.json", std::string(100000, '{') + std::string(100000, '}')}},
                  "--model {dir}/m.json --plan {dir}/p.json", 1,
                  "nested deeper than 64 levels at byte 65"));
  c.push_back(Row("model_is_dev_zero", kSimulator, {}, "--model /dev/zero --stages 2", 1,
                  "'/dev/zero' is larger than 512 MiB, the limit for pipecast's input files"));
  c.push_back(Row("model_not_json_at_all", kPlanner, {{"m.json", "layers: 8\n"}},
                  "--model {dir}/m.json --gpus 8", 1, "m.json: not valid JSON at byte 1"));
  c.push_back(Row("model_nan_literal", kSimulator,
                  {{"m.json", Model(8, Profile("forward_us", "NaN"))}}, kSim, 1,
                  "m.json: not valid JSON at byte"));
  c.push_back(Row("model_repeated_key", kSimulator,
                  {{"m.json", Model(8, R"({"microbatch_size": 1, "forward_us": 1, "forward_us": 2,
                   "backward_us": 2, "activation_bytes": 0, "output_bytes": 0})")}},
                  kSim, 1, "layers[0].profiles[0].forward_us: key appears twice"));
  c.push_back(Row("cluster_truncated_json", kSimulator,
                  {kGoodModel, {"c.json", std::string(kCluster).substr(0, 40)}},
                  std::string(kSim) + " --cluster {dir}/c.json", 1,
                  "--cluster: {dir}/c.json: not valid JSON at byte"));
  c.push_back(Row("plan_truncated_json", kSimulator, {kGoodModel, {"p.json", "{\"format\": "}},
                  "--model {dir}/m.json --plan {dir}/p.json", 1,
                  "--plan: {dir}/p.json: not valid JSON"));
  c.push_back(Row("schedule_text_garbage", kSimulator, {kGoodModel, {"s.txt", "0F0 0X0\n"}},
                  "--model {dir}/m.json --schedule-in {dir}/s.txt", 1,
                  "{dir}/s.txt:1: token '0X0': unknown kind 'X', expected F, B, I or W"));
  c.push_back(Row("pytorch_csv_bad_cell", kSimulator,
                  {kGoodModel, {"s.csv", "0F0,0F1,,0B0,0B9X\r\n1F0,1B0,1F1,1B1\r\n"}},
                  "--model {dir}/m.json --schedule-in {dir}/s.csv", 1,
                  "{dir}/s.csv:1: column 5: token '0B9X': unexpected 'X' after the micro-batch "
                  "number"));
  c.push_back(Row("pytorch_csv_send_before_its_forward", kSimulator,
                  {kGoodModel, {"s.csv", "0SEND_F0,0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"}},
                  "--model {dir}/m.json --schedule-in {dir}/s.csv", 1,
                  "{dir}/s.csv:1: column 1: token '0SEND_F0' comes before 0F0, which produces "
                  "what it sends"));
  c.push_back(Row("dualpipev_too_few_microbatches", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 4 --microbatches 6 --schedule dualpipev", 1,
                  "dualpipev needs at least twice as many micro-batches (N = 6) as pipeline "
                  "stages (P = 4)"));
  c.push_back(Row("zb_auto_memory_limit_below_one", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 4 --microbatches 8 --schedule zb-auto "
                  "--memory-limit 0.5",
                  1,
                  "--memory-limit 0.5 is 0.5 micro-batch activations: every GPU must hold at "
                  "least 1"));
  c.push_back(Row("memory_limit_unit_unknown", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 4 --schedule zb-auto --memory-limit 3xb", 1,
                  "--memory-limit '3xb': expected a number of micro-batch activations (16) or a "
                  "size with a unit"));
  c.push_back(Row("memory_limit_on_another_schedule", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 4 --schedule 1f1b --memory-limit 4", 1,
                  "--memory-limit applies to the schedules built from the stage costs (zb-auto, "
                  "zb-v-auto), not to 1f1b"));
  c.push_back(Row("zb_v_auto_below_its_greedy", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 4 --microbatches 8 --schedule zb-v-auto "
                  "--memory-limit 1",
                  1, "zb-v-auto cannot keep within --memory-limit 1 on 4 ranks"));
  c.push_back(Row("dualpipe_odd_microbatches", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 4 --microbatches 9 --schedule dualpipe", 1,
                  "dualpipe needs an even number of micro-batches (N = 9), at least twice the "
                  "pipeline stages (P = 4): half the micro-batches enter at each end"));
  c.push_back(Row("schedule_text_mixed_directions", kSimulator,
                  {kGoodModel, {"s.txt", "a0F0 0F1 a0B0 0B1\nb0F0 b0B0\n"}},
                  "--model {dir}/m.json --schedule-in {dir}/s.txt", 1,
                  "{dir}/s.txt:1: token '0F1' has no direction but {dir}/s.txt:1: token 'a0F0' "
                  "has one: a bidirectional schedule names every op's direction"));
  // --- wrong types ---------------------------------------------------------
  c.push_back(Row("time_as_string", kSimulator,
                  {{"m.json", Model(8, Profile("forward_us", "\"12\""))}}, kSim, 1,
                  "layers[0].profiles[0].forward_us: must be a finite number >= 0, got string "
                  "\"12\""));
  c.push_back(Row("count_as_fraction", kSimulator, {{"m.json", Model(8, "", "1.5")}}, kSim, 1,
                  "layers[0].parameters: must be an integer >= 0, got 1.5"));
  c.push_back(Row("layers_as_object", kPlanner,
                  {{"m.json", R"({"format": "pipecast-model/1", "name": "m", "layers": {}})"}},
                  "--model {dir}/m.json --gpus 8", 1,
                  "layers: must be a list of layers, got an object"));
  c.push_back(
      Row("cluster_count_as_string", kSimulator,
          {kGoodModel, {"c.json", ClusterWith("\"gpus_per_node\": 8", "\"gpus_per_node\": \"8\"")}},
          std::string(kSim) + " --cluster {dir}/c.json", 1,
          "c.json: gpus_per_node: must be an integer >= 1, got string \"8\""));
  // --- missing fields ------------------------------------------------------
  c.push_back(Row("missing_backward_us", kSimulator,
                  {{"m.json", Model(8, Profile("backward_us", ""))}}, kSim, 1,
                  "layers[0].profiles[0].backward_us: missing; add a time in microseconds"));
  c.push_back(Row("missing_format", kSimulator, {{"m.json", R"({"name": "m", "layers": []})"}},
                  kSim, 1, "m.json: format: missing; add \"format\": \"pipecast-model/1\""));
  c.push_back(Row("cluster_missing_link", kPlanner,
                  {kGoodModel,
                   {"c.json", ClusterWith(R"(,
  "inter_node": {"bandwidth_gbps": 50, "latency_us": 5})",
                                          "")}},
                  "--model {dir}/m.json --gpus 8 --cluster {dir}/c.json", 1,
                  "c.json: inter_node: missing; add an object {bandwidth_gbps, latency_us}"));
  // --- negative, NaN, absurdly large numbers --------------------------------
  c.push_back(Row("negative_time", kSimulator, {{"m.json", Model(8, Profile("forward_us", "-1"))}},
                  kSim, 1,
                  "layers[0].profiles[0].forward_us: must be a finite number >= 0, got -1"));
  c.push_back(Row("time_1e308", kSimulator, {{"m.json", Model(8, Profile("forward_us", "1e308"))}},
                  kSim, 1,
                  "layers[0].profiles[0].forward_us: 1e+308 is over the limit of 1e12 us"));
  c.push_back(Row("time_beyond_double", kPlanner,
                  {{"m.json", Model(8, Profile("backward_us", "1e400"))}},
                  "--model {dir}/m.json --gpus 8", 1, "m.json: not valid JSON"));
  c.push_back(Row("parameters_2_pow_63", kSimulator,
                  {{"m.json", Model(8, "", "9223372036854775808")}}, kSim, 1,
                  "layers[0].parameters: 9223372036854775808 is over the limit of 2^50"));
  c.push_back(Row("negative_bytes", kSimulator,
                  {{"m.json", Model(8, Profile("activation_bytes", "-4096"))}}, kSim, 1,
                  "layers[0].profiles[0].activation_bytes: must be an integer >= 0, got -4096"));
  c.push_back(Row(
      "cluster_negative_bandwidth", kSimulator,
      {kGoodModel, {"c.json", ClusterWith("\"bandwidth_gbps\": 450", "\"bandwidth_gbps\": -450")}},
      std::string(kSim) + " --cluster {dir}/c.json", 1,
      "intra_node.bandwidth_gbps: must be a finite number >= 0, got -450"));
  // Flags: CLI11 usage errors (exit 2). --memory-gb and --optimizer-step-us
  // once took nan and 1e300 (then cast NaN to an integer) and printed their
  // range as "0.000000 to 17976931348623157081452742373...": fixed by
  // base/flag_checks.h.
  c.push_back(Row("flag_negative_memory", kSimulator, {kGoodModel},
                  std::string(kSim) + " --memory-gb -1", 2,
                  "--memory-gb: '-1' is not a number of GiB from 0 to 1048576"));
  c.push_back(Row("flag_nan_memory", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --memory-gb nan", 2,
                  "--memory-gb: 'nan' is not a number of GiB from 0 to 1048576"));
  c.push_back(Row("flag_huge_memory", kSimulator, {kGoodModel},
                  std::string(kSim) + " --memory-gb 1e300", 2,
                  "--memory-gb: '1e300' is not a number of GiB from 0 to 1048576"));
  c.push_back(
      Row("flag_nan_optimizer_step", kSimulator, {kGoodModel},
          std::string(kSim) + " --optimizer-step-us nan", 2,
          "--optimizer-step-us: 'nan' is not a number of microseconds from 0 to 1000000000000"));
  c.push_back(
      Row("flag_huge_optimizer_step", kPlanner, {kGoodModel},
          "--model {dir}/m.json --gpus 2 --global-batch 8 --optimizer-step-us 1e300", 2,
          "--optimizer-step-us: '1e300' is not a number of microseconds from 0 to 1000000000000"));
  c.push_back(Row("flag_stages_beyond_int", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 99999999999", 2,
                  "--stages: '99999999999' is not an integer from 1 to 2147483647"));
  c.push_back(Row("profiler_hidden_beyond_int", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 1099511627776 --heads 8 --seq 8 "
                  "--vocab 8",
                  2, "Could not convert: --hidden = 1099511627776"));
  c.push_back(Row("profiler_huge_hidden", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 2000000000 --heads 8 --seq 8 --vocab 8", 1,
                  "profiler: error: --hidden 2000000000 is over the limit of 1048576"));
  c.push_back(Row("profiler_nan_efficiency", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 "
                  "--matmul-efficiency nan",
                  1, "--matmul-efficiency nan must be in (0, 1]"));
  // profiler analytic --hf-config (issue 25.3): the file and the key named.
  c.push_back(Row("profiler_hf_config_unknown_model_type", kProfiler,
                  {{"c.json", R"({"model_type": "bert", "hidden_size": 768})"}},
                  "analytic --hf-config {dir}/c.json", 1,
                  "c.json: model_type 'bert' is not a model_type pipecast reads; known: "
                  "deepseek_v2, deepseek_v3, falcon, gemma2, gemma3, gemma3_text, gpt2, gpt_neox, "
                  "llama, mistral, mixtral, phi3, qwen2, qwen2_moe, qwen3, qwen3_moe"));
  c.push_back(Row("profiler_hf_config_heads_not_dividing_hidden", kProfiler,
                  {{"c.json", R"({"model_type": "llama", "hidden_size": 100,
                      "num_hidden_layers": 2, "num_attention_heads": 3,
                      "intermediate_size": 64, "vocab_size": 10})"}},
                  "analytic --hf-config {dir}/c.json", 1,
                  "c.json: hidden_size 100 is not divisible by num_attention_heads 3, and "
                  "head_dim is not given"));
  // Mixture of experts (issue 26): bad expert flags name the flag.
  const std::string tiny = "analytic --name x --layers 2 --hidden 64 --heads 4 --seq 16 --vocab 10";
  c.push_back(Row("profiler_experts_per_token_over_experts", kProfiler, {},
                  tiny + " --experts 4 --experts-per-token 5 --out {dir}/m.json", 1,
                  "--experts-per-token 5 is over the limit of 4", After::kNoOutputs));
  c.push_back(Row("profiler_expert_flag_without_experts", kProfiler, {},
                  tiny + " --expert-ffn 64 --out {dir}/m.json", 2, "--expert-ffn needs --experts",
                  After::kNoOutputs));
  c.push_back(Row("profiler_moe_imbalance_below_one", kProfiler, {},
                  tiny + " --experts 4 --moe-imbalance 0.5 --out {dir}/m.json", 1,
                  "--moe-imbalance 0.5 must be from 1", After::kNoOutputs));
  // profiler cpu's tensor-parallel shards (issue 15 part 6): refused before
  // anything is measured.
  c.push_back(Row("profiler_cpu_tensor_parallel_not_dividing_ffn", kProfiler, {},
                  "cpu --layers 1 --hidden 8 --ffn 6 --tensor-parallel 1,4", 1,
                  "--tensor-parallel 4: layer 0's ffn 6 does not divide into 4 shards",
                  After::kNoOutputs));
  c.push_back(Row("profiler_cpu_tensor_parallel_without_1", kProfiler, {},
                  "cpu --layers 1 --hidden 8 --ffn 8 --tensor-parallel 2", 1,
                  "--tensor-parallel must include 1", After::kNoOutputs));
  c.push_back(Row("profiler_tensor_parallel_not_dividing_heads", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 "
                  "--tensor-parallel 1,3",
                  1, "--tensor-parallel 3 does not divide --heads 8"));
  c.push_back(Row("profiler_builtin_tensor_parallel_not_dividing_heads", kProfiler, {},
                  "builtin --heads 16 --tensor-parallel 1,3", 1,
                  "--tensor-parallel 3 must be >= 1 and divide --heads 16 and the MLP width"));
  c.push_back(Row("profiler_efficiency_with_matmul_model", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 "
                  "--time-model matmul --matmul-efficiency 0.4",
                  1, "--matmul-efficiency applies to --time-model flat only"));
  c.push_back(Row("flag_overlap_grad_reduce_value", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --overlap-grad-reduce maybe", 2, "--overlap-grad-reduce"));
  // Once built 100 million micro-batches (out of memory or hours); now a
  // bound in MakeSchedule (sim/schedule.cc).
  c.push_back(Row("absurd_microbatch_count", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 2 --microbatches 100000000", 1,
                  "2 stages x 100000000 micro-batches = 200000000 (stage, micro-batch) pairs is "
                  "over the limit of 2^23 (8388608)"));
  c.push_back(Row("planner_absurd_global_batch", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 1000000000", 4,
                  "planner: 154 configurations, 94 simulated, none can run (the report says why)"));
  // Each candidate is refused before its schedule is built (planner/passes.h,
  // kMaxSearchEvents), saying how to simulate it.
  c.back().output =
      "about 250000000 ops and transfers to simulate, over the search's limit of 8388608";
  // --- zero layers, more stages than layers, GPUs not divisible -------------
  c.push_back(Row("zero_layers", kSimulator,
                  {{"m.json", R"({"format": "pipecast-model/1", "name": "m", "layers": []})"}},
                  kSim, 1, "m.json: layers: is empty; add the model's layers, in order"));
  c.push_back(Row("profiler_zero_layers", kProfiler, {},
                  "analytic --name x --layers 0 --hidden 64 --heads 8 --seq 8 --vocab 8", 1,
                  "profiler: error: --layers 0 must be at least 1 (transformer blocks)"));
  c.push_back(Row("more_stages_than_layers", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 9", 1,
                  "--stages 9 but the model has only 8 layers: use at most 8 stages"));
  // "1 layers", "1 stages" (issue 17): counts take their noun's number.
  c.push_back(Row("more_stages_than_one_layer", kSimulator, {{"m.json", Model(1)}},
                  "--model {dir}/m.json --stages 2", 1,
                  "--stages 2 but the model has only 1 layer: use at most 1 stage"));
  c.push_back(Row("more_virtual_stages_than_layers", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 8 --schedule interleaved --chunks 2", 1,
                  "--stages 8 x --chunks 2 = 16 virtual stages but the model has only 8 layers"));
  c.push_back(Row("v_schedule_chunks_not_two", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 2 --microbatches 4 --schedule zb-v --chunks 3", 1,
                  "--chunks is 3: zb-v takes exactly 2 model chunks per GPU, in a V (rank r holds "
                  "stages r and 2P-1-r); leave --chunks out or give 2"));
  c.push_back(
      Row("plan_gpus_not_stages_times_replicas", kSimulator,
          {{"p.json", Baseline("\"gpus\": 8", "\"gpus\": 6")}},
          "--model {ex}/gpt-7b.json --plan {dir}/p.json", 1,
          "--plan: {dir}/p.json: gpus: is 6, expected pipeline_stages x data_parallel = 1 x 8"));
  // Found by fuzz_plan: this message once came out as an internal error.
  c.push_back(Row("plan_actions_stage_without_forward", kSimulator,
                  {{"p.json", Baseline(" 0B12 ", " 8B12 ")}},
                  "--model {ex}/gpt-7b.json --plan {dir}/p.json", 1,
                  "--plan: {dir}/p.json: actions: stage 1 has no forward (the largest stage index "
                  "is 8, so stages 0..8 exist)"));
  // --- partition rules (issue 24 item 6: Megatron-LM's even split) ----------
  // gpt-7b: "embedding", 32 decoder layers, "lm_head".
  c.push_back(Row("even_split_not_divisible", kSimulator, {},
                  "--model {ex}/gpt-7b.json --stages 3 --partition even", 1,
                  "--partition even: the model's 32 decoder layers do not divide evenly over 3 "
                  "pipeline stages: choose a stage count that divides them, or give "
                  "--first-stage-layers / --last-stage-layers"));
  c.push_back(Row("even_split_virtual_stages_not_divisible", kSimulator, {},
                  "--model {ex}/gpt-7b.json --stages 4 --schedule interleaved --chunks 3 "
                  "--microbatches 8 --partition even",
                  1,
                  "--partition even: each of the 4 pipeline stages holds 8 of the 32 decoder "
                  "layers, which do not divide over its 3 virtual stages"));
  c.push_back(Row("even_split_first_plus_last_over_layers", kSimulator, {},
                  "--model {ex}/gpt-7b.json --stages 4 --partition even --first-stage-layers 20 "
                  "--last-stage-layers 20",
                  1,
                  "--first-stage-layers 20 + --last-stage-layers 20 = 40, but the model has only "
                  "32 decoder layers"));
  c.push_back(Row("even_split_middle_not_divisible", kSimulator, {},
                  "--model {ex}/gpt-7b.json --stages 4 --partition even --first-stage-layers 5 "
                  "--last-stage-layers 6",
                  1,
                  "--partition even: the 21 decoder layers left besides --first-stage-layers / "
                  "--last-stage-layers do not divide evenly over the other 2 pipeline stages"));
  c.push_back(Row("first_stage_layers_without_even", kSimulator, {},
                  "--model {ex}/gpt-7b.json --stages 4 --first-stage-layers 6", 1,
                  "--first-stage-layers shapes Megatron-LM's even split, but the partition rule is "
                  "balanced: add --partition even or leave --first-stage-layers out"));
  c.push_back(Row("stage_layers_with_account_for", kSimulator, {},
                  "--model {ex}/gpt-7b.json --stages 4 --partition even --first-stage-layers 6 "
                  "--account-for-loss",
                  1, "--first-stage-layers and --account-for-loss cannot be given together"));
  c.push_back(Row("account_for_embedding_without_embedding", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 2 --partition even --account-for-embedding", 1,
                  "--account-for-embedding: the model's first layer is not 'embedding', so there "
                  "is no embedding to count"));
  c.push_back(Row("partition_unknown_rule", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 2 --partition uneven", 1,
                  "--partition 'uneven': expected balanced, even, or layer ranges such as "
                  "0-3,4-7"));
  c.push_back(Row("planner_partition_unknown_rule", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --partition sometimes", 2,
                  "--partition: 'sometimes' is not one of balanced, even, both"));
  c.push_back(Row("planner_even_split_divides_no_configuration", kPlanner, {},
                  "--model {ex}/gpt-7b.json --gpus 3 --stages 3 --partition even", 4,
                  "planner: 72 configurations, 0 simulated, none can run (the report says why)"));
  c.back().output =
      "schedule constraint: 72\n    e.g. p=3 d=1 naive mbs=1 m=512 recompute=off zero=0 "
      "partition=even: --partition even: the model's 32 decoder layers do not divide evenly over 3 "
      "pipeline stages";
  c.push_back(Row(
      "plan_partition_rule_unknown", kSimulator,
      {{"p.json", Baseline("\"placement\":", "\"partition_rule\": \"sometimes\", \"placement\":")}},
      "--model {ex}/gpt-7b.json --plan {dir}/p.json", 1,
      "--plan: {dir}/p.json: partition_rule: expected \"balanced\", \"even\" or "
      "\"given\", got \"sometimes\""));
  c.push_back(Row("global_batch_not_divisible", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --microbatch-sizes 3", 1,
                  "--global-batch 8 is not a multiple of any micro-batch size x data-parallel "
                  "degree on 8 GPUs"));
  c.push_back(Row("plan_for_a_smaller_model", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --plan {ex}/baselines/gpt-7b-8gpu.plan.json", 1,
                  "partition stage 0 holds layers 0-33: stages must be non-empty, contiguous and "
                  "within layers 0-7"));
  // --- unknown presets and names --------------------------------------------
  c.push_back(Row(
      "unknown_cluster_preset", kSimulator, {kGoodModel}, std::string(kSim) + " --cluster h100", 1,
      "--cluster: cluster 'h100' is neither a preset (ideal, a100-80gb, h100-sxm, h200, local)"));
  c.push_back(Row("unknown_cluster_preset_planner", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --cluster dgx", 1,
                  "--cluster: cluster 'dgx' is neither a preset"));
  c.push_back(Row(
      "unknown_gpu_preset_profiler", kProfiler, {},
      "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 --gpu "
      "tpu-v5",
      1, "--gpu: cluster 'tpu-v5' is neither a preset (ideal, a100-80gb, h100-sxm, h200, local)"));
  c.push_back(Row("unknown_schedule", kSimulator, {kGoodModel},
                  std::string(kSim) + " --schedule zigzag", 2,
                  "--schedule: 'zigzag' is not one of naive, gpipe, 1f1b"));
  c.push_back(Row("unknown_schedule_planner", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --schedules 1f1b,zigzag", 2,
                  "--schedules: 'zigzag' is not one of naive, gpipe, 1f1b"));
  c.push_back(Row("unknown_recompute", kSimulator, {kGoodModel},
                  std::string(kSim) + " --recompute layer", 2,
                  "--recompute: 'layer' is not one of off, selective, full"));
  c.push_back(Row("unknown_recompute_planner", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --recompute some", 2,
                  "--recompute: 'some' is not one of auto, off, selective, full, on"));
  c.push_back(Row("unknown_attention_profiler", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 "
                  "--attention sparse",
                  2, "--attention: sparse not in {flash,flash2,flash3,triton,eager}"));
  c.push_back(Row("flash3_before_hopper", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 "
                  "--gpu a100-80gb --attention flash3",
                  1, "--attention flash3: FlashAttention-3 runs on Hopper GPUs (H100, H200) only"));
  c.push_back(
      Row("checkpoint_over_activations", kSimulator,
          {{"m.json", Model(8, R"({"microbatch_size": 1, "forward_us": 100, "backward_us": 200, )"
                               R"("activation_bytes": 1024, "output_bytes": 512, )"
                               R"("checkpoint_bytes": 999999})")}},
          kSim, 1, "layers[0].profiles[0].checkpoint_bytes: 999999 is more than activation_bytes"));
  c.push_back(Row("plan_recompute_unknown", kSimulator,
                  {{"p.json", Baseline("\"recompute\": \"off\"", "\"recompute\": \"on\"")}},
                  "--model {ex}/gpt-7b.json --plan {dir}/p.json", 1,
                  "recompute: expected \"off\", \"selective\", \"full\", \"op\" or \"every:K\" "
                  "(K >= 1), or true/false as older plans wrote it, got string \"on\""));
  // Activation checkpointing's numbers (issue 24 item 4).
  c.push_back(Row("recompute_every_zero", kSimulator, {kGoodModel},
                  std::string(kSim) + " --recompute every:0", 2,
                  "--recompute: 'every:0' is not one of off, selective, full, op, every:K (K an "
                  "integer >= 1)"));
  c.push_back(Row("recompute_method_without_full", kSimulator, {kGoodModel},
                  std::string(kSim) + " --recompute-method uniform --recompute-num-layers 2", 2,
                  "--recompute-method uniform is Megatron-LM's choice of which layers full "
                  "recomputation checkpoints: use it with --recompute full (not off)"));
  c.push_back(Row("recompute_method_without_num_layers", kSimulator, {kGoodModel},
                  std::string(kSim) + " --recompute full --recompute-method block", 2,
                  "--recompute-method block needs --recompute-num-layers N"));
  c.push_back(Row("recompute_num_layers_without_method", kSimulator, {kGoodModel},
                  std::string(kSim) + " --recompute full --recompute-num-layers 2", 2,
                  "--recompute-num-layers needs --recompute-method uniform or block"));
  c.push_back(Row("recompute_method_unknown", kSimulator, {kGoodModel},
                  std::string(kSim) + " --recompute full --recompute-method chunked", 2,
                  "--recompute-method: 'chunked' is not one of uniform, block"));
  c.push_back(Row("recompute_list_planner", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --recompute off,every:x", 2,
                  "--recompute: 'every:x' is not one of auto, off, selective, full, on, op, "
                  "every:K"));
  c.push_back(Row("recompute_method_planner_without_full", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --recompute off,op "
                  "--recompute-method block --recompute-num-layers 1",
                  1,
                  "--recompute-method and --recompute-num-layers choose which layers full "
                  "recomputation checkpoints: list full in --recompute"));
  c.push_back(Row("op_saved_over_activations", kSimulator,
                  {{"m.json", Model(8, R"({"microbatch_size": 1, "forward_us": 100, )"
                                       R"("backward_us": 200, "activation_bytes": 1024, )"
                                       R"("output_bytes": 512, "op_saved_bytes": 2048, )"
                                       R"("op_recompute_us": 10})")}},
                  kSim, 1,
                  "layers[0].profiles[0].op_saved_bytes: 2048 is more than activation_bytes"));
  c.push_back(Row("op_fields_half_given", kSimulator,
                  {{"m.json", Model(8, R"({"microbatch_size": 1, "forward_us": 100, )"
                                       R"("backward_us": 200, "activation_bytes": 1024, )"
                                       R"("output_bytes": 512, "op_recompute_us": 10})")}},
                  kSim, 1,
                  "layers[0].profiles[0]: gives only one of op_saved_bytes and op_recompute_us"));
  c.push_back(
      Row("plan_recompute_method_unknown", kSimulator,
          {{"p.json", Baseline("\"recompute\": \"off\"",
                               "\"recompute\": \"full\", \"recompute_method\": \"chunked\"")}},
          "--model {ex}/gpt-7b.json --plan {dir}/p.json", 1,
          "recompute_method: expected \"uniform\" or \"block\", got string \"chunked\""));
  c.push_back(Row("unknown_precision", kSimulator, {kGoodModel},
                  std::string(kSim) + " --precision fp4", 2,
                  "--precision: 'fp4' is not one of bf16, fp16, fp8, fp32"));
  // FP8 (issue 25): a GPU without FP8 tensor cores, an unknown recipe,
  // MXFP8 before Blackwell, a recipe without --precision fp8.
  c.push_back(Row("fp8_on_a100_profiler", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 "
                  "--gpu a100-80gb --precision fp8",
                  1, "--precision fp8: the GPU 'NVIDIA A100-SXM4-80GB' has no FP8 tensor cores"));
  c.push_back(Row("fp8_on_a100_simulator", kSimulator, {kGoodModel},
                  std::string(kSim) + " --cluster a100-80gb --precision fp8", 1,
                  "--precision fp8: the GPU 'NVIDIA A100-SXM4-80GB' has no FP8 tensor cores"));
  c.push_back(Row("unknown_fp8_recipe_simulator", kSimulator, {kGoodModel},
                  std::string(kSim) + " --cluster h100-sxm --precision fp8 --fp8-recipe tensorwise",
                  1, "--fp8-recipe is 'tensorwise': expected delayed"));
  c.push_back(Row("unknown_fp8_recipe_profiler", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 "
                  "--precision fp8 --fp8-recipe rowwise",
                  1, "--fp8-recipe is 'rowwise': expected delayed"));
  c.push_back(Row("mxfp8_on_hopper", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 "
                  "--gpu h100-sxm --precision fp8 --fp8-recipe mxfp8",
                  1, "--fp8-recipe mxfp8: the GPU 'NVIDIA H100 80GB HBM3' has no MXFP8"));
  c.push_back(Row("fp8_recipe_without_fp8", kSimulator, {kGoodModel},
                  std::string(kSim) + " --fp8-recipe delayed", 1,
                  "--fp8-recipe is set but --precision is 'bf16': FP8 settings need --precision "
                  "fp8"));
  // Memory settings (issue 14): ZeRO level, main-gradient precision, reserve
  // and allocator margin. Single bad values are usage errors naming the flag.
  c.push_back(Row("flag_zero_out_of_range", kSimulator, {kGoodModel},
                  std::string(kSim) + " --zero 4", 2, "--zero: '4' is not an integer from 0 to 3"));
  c.push_back(Row("flag_zero_out_of_range_planner", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --zero 1,5", 2,
                  "--zero: '5' is not an integer from 0 to 3"));
  // The planner's sharding pins and --compare-to (issue 24).
  c.push_back(Row("planner_shard_group_not_a_number", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --shard-group two", 1,
                  "--shard-group is 'two': expected auto, 0 (shard over all replicas) or a "
                  "number of replicas per shard group"));
  c.push_back(Row("planner_compare_to_unknown_word", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --compare-to stages=2", 1,
                  "--compare-to: 'stages=2' is not a configuration word"));
  c.push_back(Row("planner_compare_to_missing_plan", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --compare-to {dir}/no.json", 1,
                  "--compare-to"));
  c.push_back(Row("flag_unknown_grad_dtype", kSimulator, {kGoodModel},
                  std::string(kSim) + " --grad-dtype fp8", 2,
                  "--grad-dtype: 'fp8' is not one of fp32, bf16, fp16"));
  c.push_back(Row("grad_dtype_half_with_fp32_training", kSimulator, {kGoodModel},
                  std::string(kSim) + " --precision fp32 --grad-dtype bf16", 1,
                  "--grad-dtype is 'bf16' but --precision is fp32"));
  c.push_back(Row("flag_negative_reserve", kSimulator, {kGoodModel},
                  std::string(kSim) + " --memory-reserve-gb -1", 2,
                  "--memory-reserve-gb: '-1' is not a number of GiB from 0 to 1048576"));
  c.push_back(Row("flag_headroom_as_percent", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --memory-headroom 5", 2,
                  "--memory-headroom: '5' is not a number of fraction of capacity from 0 to 0.9"));
  c.push_back(Row("reserve_leaves_nothing", kSimulator, {kGoodModel},
                  std::string(kSim) + " --cluster h100-sxm --memory-reserve-gb 80", 1,
                  "the runtime reserve 80.00 GiB (--memory-reserve-gb) and allocator margin 3.96 "
                  "GiB (--memory-headroom 0.05) leave nothing of the 79.11 GiB GPU"));
  c.push_back(Row(
      "cluster_headroom_of_one", kSimulator,
      {kGoodModel,
       {"c.json",
        ClusterWith("\"peak_tflops\": 989", "\"memory_headroom\": 1, \"peak_tflops\": 989")}},
      std::string(kSim) + " --cluster {dir}/c.json", 1, "gpu.memory_headroom: must be below 1"));
  // --- schedules that deadlock ----------------------------------------------
  c.push_back(
      Row("schedule_deadlock_cycle", kSimulator,
          {kGoodModel, {"s.txt", "0F0 0B0 0F1 0B1\n1B0 1F0 1F1 1B1\n"}},
          "--model {dir}/m.json --schedule-in {dir}/s.txt", 1,
          "schedule 'custom' can never finish: stuck are rank 0 at 0B0, rank 1 at 1B0; these "
          "ops wait on each other in a cycle"));
  c.push_back(Row("plan_deadlock", kSimulator, {{"p.json", Baseline("\"0F0 0B0 ", "\"0B0 0F0 ")}},
                  "--model {ex}/gpt-7b.json --plan {dir}/p.json", 1,
                  "can never finish: stuck are rank 0 at 0B0"));
  // --- unwritable outputs: nothing half-written, no temporary file -----------
  c.push_back(Row("trace_into_missing_folder", kSimulator, {kGoodModel},
                  std::string(kSim) + " --trace {dir}/missing/t.json", 1,
                  "--trace: cannot write '{dir}/missing/t.json': No such file or directory",
                  After::kNoOutputs));
  // The temporary file is written, then rename() fails: it must be removed.
  c.push_back(Row("report_onto_a_folder", kSimulator, {kGoodModel},
                  std::string(kSim) + " --report {dir}/out", 1,
                  "--report: cannot write '{dir}/out': Is a directory", After::kNoOutputs, "out"));
  c.push_back(Row("schedule_out_under_a_file", kSimulator, {kGoodModel},
                  std::string(kSim) + " --schedule-out {dir}/m.json/s.txt", 1,
                  "--schedule-out: cannot write '{dir}/m.json/s.txt': Not a directory",
                  After::kNoOutputs));
  c.push_back(Row("trace_into_read_only_folder", kSimulator, {kGoodModel},
                  std::string(kSim) + " --trace {dir}/ro/t.json", 1,
                  "--trace: cannot write '{dir}/ro/t.json': Permission denied", After::kNoOutputs,
                  "ro", true));
  c.push_back(Row("planner_out_into_missing_folder", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --out {dir}/missing/plan.json", 1,
                  "--out: cannot write '{dir}/missing/plan.json': No such file or directory",
                  After::kNoOutputs));
  // --export FRAMEWORK=PATH (docs/frameworks.md): refused before anything is simulated.
  c.push_back(Row("export_unknown_framework", kSimulator, {kGoodModel},
                  std::string(kSim) + " --export nemo={dir}/n.yaml", 2,
                  "--export: unknown framework 'nemo': expected megatron, torchtitan or deepspeed",
                  After::kNoOutputs));
  c.push_back(Row("export_without_a_path", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --export megatron", 2,
                  "--export 'megatron': expected FRAMEWORK=PATH", After::kNoOutputs));
  c.push_back(Row("export_framework_twice", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --export deepspeed={dir}/a.json "
                  "--export deepspeed={dir}/b.json",
                  2, "--export: deepspeed is given twice", After::kNoOutputs));
  c.push_back(Row("export_into_missing_folder", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --export "
                  "deepspeed={dir}/missing/ds.json",
                  1,
                  "--export deepspeed: cannot write '{dir}/missing/ds.json': No such file or "
                  "directory",
                  After::kNoOutputs));
  c.push_back(Row("export_onto_the_model", kSimulator, {kGoodModel},
                  std::string(kSim) + " --export megatron={dir}/m.json", 1,
                  "--export megatron '{dir}/m.json' is the same file as --model",
                  After::kInputsUnchanged));
  c.push_back(Row("planner_trace_onto_a_folder", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --trace {dir}/out", 1,
                  "--trace: cannot write '{dir}/out': Is a directory", After::kNoOutputs, "out"));
  c.push_back(Row("planner_report_into_read_only_folder", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --report {dir}/ro/r.html", 1,
                  "--report: cannot write '{dir}/ro/r.html': Permission denied", After::kNoOutputs,
                  "ro", true));
  c.push_back(Row("profiler_out_into_missing_folder", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 --out "
                  "{dir}/missing/m.json",
                  1, "cannot write '{dir}/missing/m.json': No such file or directory",
                  After::kNoOutputs));
  // Issue 28: --out onto --gpu's cluster file replaced the cluster file with
  // the model; --out of profiler cpu was checked only after measuring.
  c.push_back(Row("profiler_analytic_out_onto_the_gpu_cluster_file", kProfiler,
                  {{"c.json", kCluster}},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 --gpu "
                  "{dir}/c.json --out {dir}/./c.json",
                  1,
                  "--out '{dir}/./c.json' is the same file as --gpu: pipecast never writes over "
                  "its inputs",
                  After::kInputsUnchanged));
  // Issue 28: 10^5 layers at four t ran into std::bad_alloc after 65 s,
  // writing a file no tool would read.
  c.push_back(Row("profiler_analytic_model_over_what_the_tools_read", kProfiler, {},
                  "analytic --name x --layers 100000 --hidden 64 --heads 8 --seq 8 --vocab 8 "
                  "--tensor-parallel 1,2,4,8 --out {dir}/m.json",
                  1, "MiB of model.json, over the 512 MiB that pipecast's tools read",
                  After::kNoOutputs));
  {
    Case row = Row("profiler_cpu_out_checked_before_measuring", kProfiler, {},
                   "cpu --layers 1 --hidden 8 --ffn 8 --out {dir}/missing/m.json", 1,
                   "--out: cannot write '{dir}/missing/m.json': No such file or directory",
                   After::kNoOutputs);
    row.absent = "measuring";
    c.push_back(row);
  }
  // Issue 28: 10^4 values of a list flag ran into std::bad_alloc and
  // std::terminate; the search's size is refused before it is allocated.
  // (10^4 repeated values are one value since part two: a list is
  // deduplicated; 10^4 distinct ones are refused.)
  {
    std::string sizes = "1";
    for (int i = 2; i <= 10000; ++i) sizes += "," + std::to_string(i);
    c.push_back(Row("planner_list_flag_of_10000_values", kPlanner, {},
                    "--model {ex}/gpt-7b.json --gpus 8 --microbatch-sizes " + sizes, 1,
                    "the search would enumerate 4220000 configurations, over the limit of 100000"));
  }
  // --- validator ------------------------------------------------------------
  const std::string v7b = "--model {ex}/gpt-7b.json --plan {ex}/baselines/gpt-7b-8gpu.plan.json";
  c.push_back(Row("validator_plan_truncated_json", kValidator, {{"p.json", "{\"format\": "}},
                  "--model {ex}/gpt-7b.json --plan {dir}/p.json", 1,
                  "p.json: not valid JSON: parse error at line 1, column 12"));
  c.push_back(Row("validator_plan_for_a_smaller_model", kValidator, {kGoodModel},
                  "--model {dir}/m.json --plan {ex}/baselines/gpt-7b-8gpu.plan.json", 1,
                  "partition stage 0 holds layers 0-33: stages must be non-empty, contiguous and "
                  "within layers 0-7"));
  c.push_back(Row("validator_model_missing", kValidator, {},
                  "--model {dir}/nope.json --plan {ex}/baselines/gpt-7b-8gpu.plan.json", 1,
                  "cannot read '{dir}/nope.json': No such file or directory"));
  c.push_back(Row("validator_plan_deadlock", kValidator,
                  {{"p.json", Baseline("\"0F0 0B0 ", "\"0B0 0F0 ")}},
                  "--model {ex}/gpt-7b.json --plan {dir}/p.json", 1,
                  "can never finish: stuck are rank 0 at 0B0"));
  c.push_back(Row("validator_unknown_backend", kValidator, {}, v7b + " --backend tpu", 2,
                  "--backend: 'tpu' is not one of cpu, mpi, cuda"));
  c.push_back(
      Row("validator_zero_iterations", kValidator, {}, v7b + " --iterations 0", 2, "--iterations"));
  c.push_back(Row("validator_negative_tolerance", kValidator, {}, v7b + " --tolerance -0.1", 2,
                  "--tolerance: '-0.1' is not a number of relative error above 0 up to 1000"));
  c.push_back(Row("validator_nan_memory_tolerance", kValidator, {}, v7b + " --memory-tolerance nan",
                  2, "--memory-tolerance: 'nan' is not a number of relative error above 0"));
  c.push_back(Row("validator_negative_memory_limit", kValidator, {}, v7b + " --memory-limit-mb -5",
                  2, "--memory-limit-mb: '-5' is not a number of MiB from 0 to 1073741824"));
  c.push_back(Row("validator_absurd_memory_limit", kValidator, {}, v7b + " --memory-limit-mb 1e300",
                  2, "--memory-limit-mb: '1e300' is not a number of MiB from 0 to 1073741824"));
  // Issue 28: a drop of an op that sends nothing passed, having injected nothing.
  c.push_back(Row("validator_drop_of_an_op_that_sends_nothing", kValidator, {},
                  v7b + " --inject-fault drop:0F0", 1,
                  "--inject-fault drop:0F0: 0F0 sends no message to another rank"));
  c.push_back(Row("validator_infinite_watchdog_factor", kValidator, {},
                  v7b + " --watchdog-factor inf", 2,
                  "--watchdog-factor: 'inf' is not a number of times from 1 to 1000000"));
  c.push_back(Row("validator_zero_recv_timeout", kValidator, {}, v7b + " --recv-timeout-ms 0", 2,
                  "--recv-timeout-ms: '0' is not a number of ms above 0 up to 86400000"));
  c.push_back(Row("validator_unknown_fault", kValidator, {}, v7b + " --inject-fault melt:0F0", 1,
                  "--inject-fault 'melt:0F0': expected KIND:ACTION with KIND throw, stall, drop "
                  "or oom"));
  // A fault for an op the plan does not have once ran the plan and passed (issue 17).
  c.push_back(Row("validator_fault_op_not_in_plan", kValidator, {},
                  v7b + " --inject-fault throw:5F0", 1,
                  "--inject-fault: the plan has no op 5F0 (its ranks run stages 0-0, "
                  "micro-batches 0-15, kinds F and B): name one of its ops"));
  c.push_back(Row("validator_unknown_cluster", kValidator, {}, v7b + " --cluster tpu-pod", 1,
                  "--cluster: cluster 'tpu-pod' is neither a preset"));
  // Found before the run, not after it: nothing written, nothing left.
  c.push_back(Row("validator_trace_into_missing_folder", kValidator, {},
                  v7b + " --trace {dir}/missing/t.json", 1,
                  "--trace: cannot write '{dir}/missing/t.json': No such file or directory",
                  After::kNoOutputs));
  c.push_back(Row("validator_trace_onto_a_folder", kValidator, {}, v7b + " --trace {dir}/out", 1,
                  "--trace: cannot write '{dir}/out': Is a directory", After::kNoOutputs, "out"));
  // --- measured runs (issue 27, docs/measured-runs.md) ------------------------
  const std::string step = R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#)";
  c.push_back(Row("measured_trace_malformed", kValidator,
                  {{"r0.json", "{\"traceEvents\": [\n {\"ph\": \"X\",, }]}"}},
                  "--measured {dir}/r0.json", 1, "r0.json: not valid JSON: parse error at line 2"));
  c.push_back(Row("measured_trace_field_type", kValidator,
                  {{"r0.json", R"({"traceEvents": [{"ph": "X", "cat": "kernel", "ts": "now"}]})"}},
                  "--measured {dir}/r0.json", 1,
                  "r0.json: traceEvents[0].ts: expected microseconds as a number, got a string"));
  c.push_back(Row("measured_trace_missing", kValidator, {}, "--measured {dir}/r9.json", 1,
                  "{dir}/r9.json: cannot be opened: No such file or directory"));
  c.push_back(Row("measured_trace_without_steps", kValidator,
                  {{"r0.json", R"({"traceEvents": []})"}}, "--measured {dir}/r0.json", 1,
                  "r0.json: no ProfilerStep#N range: pipecast finds iterations by them"));
  const std::string kernel =
      R"(, "pid": 1, "tid": 1, "ts": 0, "dur": 100}, {"ph": "X", "cat": "cuda_runtime", "name": "L", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"correlation": 1}}, {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": 5, "args": {"correlation": 1}}]})";
  c.push_back(Row("measured_traces_share_no_step", kValidator,
                  {{"r0.json", "{\"traceEvents\": [" + step + "1\"" + kernel},
                   {"r1.json", "{\"traceEvents\": [" + step + "2\"" + kernel}},
                  "--measured {dir}/r0.json,{dir}/r1.json", 1,
                  "the traces share no ProfilerStep number ({dir}/r0.json: steps 1; "
                  "{dir}/r1.json: steps 2)"));
  c.push_back(Row("measured_plan_without_model", kValidator, {},
                  "--measured {dir}/r0.json --plan {ex}/baselines/gpt-7b-8gpu.plan.json", 2,
                  "--plan needs --model"));
  c.push_back(Row("measured_gzip", kValidator, {{"r0.json.gz", "\x1f\x8b"}},
                  "--measured {dir}/r0.json.gz", 1, "a gzip-compressed file: decompress it first"));
  c.push_back(Row("megatron_log_without_iterations", kValidator, {{"train.log", "hello\n"}},
                  "--megatron-log {dir}/train.log", 1, "train.log: no Megatron-LM iteration line"));
  c.push_back(Row("megatron_log_bad_number", kValidator,
                  {{"train.log", " iteration 1/ 2 | elapsed time per iteration (ms): fast |\n"}},
                  "--megatron-log {dir}/train.log", 1,
                  "train.log:1: 'fast' is not a number after 'elapsed time per iteration (ms)'"));
  c.push_back(Row("profiler_trace_without_layer_ranges", kProfiler,
                  {{"r0.json", "{\"traceEvents\": [" + step + "1\"" + kernel}},
                  "trace --name m {dir}/r0.json", 1,
                  "r0.json: no layer range: mark each layer's passes with record_function ranges"));
  Case no_gpu = Row("validator_cuda_without_a_gpu", kValidator, {}, v7b + " --backend cuda", 1,
                    "the cuda backend needs an NVIDIA GPU; use --backend cpu or mpi");
  no_gpu.needs_no_gpu = true;
  c.push_back(no_gpu);
  // Tensor parallelism (issue 15): flags that contradict each other are usage
  // errors; a degree the cluster or the model cannot run is bad input.
  c.push_back(Row("tensor_parallel_not_dividing_node", kSimulator, {kGoodModel},
                  std::string(kSim) + " --cluster h100-sxm --tensor-parallel 3", 1,
                  "--tensor-parallel 3 does not divide the 8 GPUs of a node of h100-sxm: a "
                  "stage's tensor-parallel GPUs share a node; use a divisor of 8"));
  // Context parallelism (issue 25): a degree below 1 is a usage error; one the
  // sequence or the model cannot run is bad input.
  c.push_back(Row("context_parallel_zero", kSimulator, {kGoodModel},
                  std::string(kSim) + " --context-parallel 0", 2, "--context-parallel"));
  c.push_back(Row("context_parallel_not_splitting_the_sequence", kSimulator, {},
                  "--model {ex}/llama-70b.json --stages 4 --microbatches 4 --context-parallel 3", 1,
                  "--context-parallel 3: the sequence of 2048 tokens does not split into 2 x cp "
                  "= 6 equal chunks"));
  c.push_back(Row("context_parallel_without_attention_shape", kSimulator, {kGoodModel},
                  std::string(kSim) + " --context-parallel 2", 1,
                  "--context-parallel 2: the model"));
  c.push_back(Row("cp_algorithm_unknown", kSimulator, {kGoodModel},
                  std::string(kSim) + " --cp-algorithm tree", 2,
                  "--cp-algorithm: 'tree' is not one of ring, p2p, allgather, all_gather"));
  c.push_back(Row("context_parallel_not_dividing_gpus", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 4 --global-batch 8 --context-parallel 3", 2,
                  "--context-parallel 3 does not divide --gpus 4"));
  // Expert parallelism (issue 26): a degree below 1 or against the folding
  // rule is a usage error; one the model cannot run is bad input.
  c.push_back(Row("expert_parallel_zero", kSimulator, {kGoodModel},
                  std::string(kSim) + " --expert-parallel 0", 2, "--expert-parallel"));
  c.push_back(Row("expert_tensor_parallel_zero", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --expert-tensor-parallel 0", 2,
                  "--expert-tensor-parallel"));
  c.push_back(Row("expert_parallel_not_folding", kSimulator, {kGoodModel},
                  std::string(kSim) + " --data-parallel 2 --expert-parallel 4", 2,
                  "--expert-parallel 4 x --expert-tensor-parallel 1 = 4 does not divide the 2 "
                  "GPUs of a stage"));
  c.push_back(Row("expert_parallel_on_a_dense_model", kSimulator, {kGoodModel},
                  std::string(kSim) + " --data-parallel 2 --expert-parallel 2", 1,
                  "--expert-parallel 2: the model has no mixture-of-experts layer"));
  c.push_back(Row("tensor_parallel_over_gpus", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --tensor-parallel 4", 2,
                  "--tensor-parallel 4 is more than --gpus 2: t x p x d must equal the GPUs"));
  c.push_back(Row("sequence_parallel_without_tensor_parallel", kSimulator, {kGoodModel},
                  std::string(kSim) + " --sequence-parallel", 2,
                  "--sequence-parallel needs --tensor-parallel above 1"));
  c.push_back(Row("tp_comm_overlap_without_tensor_parallel", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --tensor-parallel 1 "
                  "--tp-comm-overlap",
                  2, "--tp-comm-overlap needs --tensor-parallel above 1"));
  c.push_back(Row("missing_tp_comm_bytes", kSimulator, {kGoodModel},
                  std::string(kSim) + " --tensor-parallel 2", 1,
                  "layer 0 ('l0') gives no tp_comm_bytes, so its tensor-parallel communication at "
                  "--tensor-parallel 2 is unknown: re-profile with `profiler analytic "
                  "--tensor-parallel 1,2,4,8`"));
  c.push_back(
      Row("profile_sequence_parallel_at_t1", kSimulator,
          {{"m.json", Model(8, Profile("output_bytes", "512, \"sequence_parallel\": true"))}}, kSim,
          1, "layers[0].profiles[0].sequence_parallel: is true but tensor_parallel is 1"));
  c.push_back(Row("profile_tp_comm_bytes_alone", kSimulator,
                  {{"m.json", Model(8, Profile("output_bytes", "512, \"tp_comm_bytes\": 4096"))}},
                  kSim, 1,
                  "layers[0].profiles[0]: gives only some of tp_comm_bytes, tp_forward_collectives "
                  "and tp_backward_collectives"));
  c.push_back(Row("planner_stages_not_dividing_gpus", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --stages 3 --global-batch 16", 2,
                  "--stages 3 does not divide --gpus 8: the GPUs are t tensor-parallel x p "
                  "pipeline stages x d replicas"));
  // --- sums past 64 bits (issue 17, sim/totals.h) ---------------------------
  // Layer 0's forward at the file limit (10^12 us) over 2400 micro-batches:
  // 2400 x 2 x 10^15 ns = 4.8e18 ns, past 2^62, though every field is valid.
  const File huge_model = {"m.json", Model(2, Profile("forward_us", "1e12"))};
  c.push_back(Row("simulator_times_sum_past_2_62", kSimulator, {huge_model},
                  "--model {dir}/m.json --stages 2 --microbatches 2400", 1,
                  "simulator: error: forward_us + backward_us summed over the model's 2 layers at "
                  "micro-batch size 1, times 2400 micro-batches, is 4.8e+18 ns, over the "
                  "4.61e+18 ns (2^62)"));
  c.push_back(Row("planner_times_sum_past_2_62", kPlanner, {huge_model},
                  "--model {dir}/m.json --gpus 2 --global-batch 2400", 1,
                  "planner: error: forward_us + backward_us summed over the model's 2 layers at "
                  "micro-batch size 1, times 2400 micro-batches, is 4.8e+18 ns"));
  // Layer 0 keeps 2^50 activation bytes per micro-batch: over 8192 of them,
  // 9.22e18 bytes (2^63), though the field is within its 2^50 limit.
  c.push_back(Row("simulator_bytes_sum_past_2_62", kSimulator,
                  {{"m.json", Model(2, Profile("activation_bytes", "1125899906842624"))}},
                  "--model {dir}/m.json --stages 2 --microbatches 8192", 1,
                  "activation_bytes + output_bytes + workspace_bytes (and the other memory fields) "
                  "summed over the model's 2 layers at micro-batch size 1, times 8192 "
                  "micro-batches, is 9.22e+18 bytes"));
  // --- control characters in names (issue 17, base/terminal_text.h) --------
  // A path with ESC [31m in it is shown escaped, not obeyed by the terminal.
  // --- issue 28 part two: impossible numbers -------------------------------
  // 1e15 FLOPs per sample in a 100 us forward: 10^7 TFLOP/s, above the
  // cluster's 989 TFLOP/s bf16 peak.
  const std::string fast_layer = std::string(R"({"name": "fast", "parameters": 1000, )") +
                                 R"("forward_flops": 1e15, "profiles": [)" +
                                 Profile("forward_us", "100") + "]}";
  std::string fast_model = Model(8);
  fast_model.replace(fast_model.find(R"({"name": "l0")"),
                     fast_model.find(R"(, {"name": "l1")") - fast_model.find(R"({"name": "l0")"),
                     fast_layer);
  c.push_back(Row("costs_faster_than_the_gpu", kSimulator,
                  {{"m.json", fast_model}, {"c.json", kCluster}},
                  std::string(kSim) + " --cluster {dir}/c.json", 1,
                  "{dir}/m.json: layer 0 ('fast') at micro-batch size 1 and t = 1: 1e+06 GFLOP in "
                  "a 100 us forward implies 1e+07 TFLOP/s per GPU, above the 989 TFLOP/s dense "
                  "bf16 peak of c (g): costs faster than the GPU would give an MFU of 1011122%"));
  c.push_back(Row("costs_faster_than_the_gpu_planner", kPlanner,
                  {{"m.json", fast_model}, {"c.json", kCluster}},
                  "--model {dir}/m.json --gpus 2 --global-batch 4 --cluster {dir}/c.json", 1,
                  "implies 1e+07 TFLOP/s per GPU, above the 989 TFLOP/s dense bf16 peak of c"));
  // gpt-7b's costs are profiler analytic's for h100-sxm: about twice what an
  // A100 (312 TFLOP/s) can do.
  c.push_back(Row("model_made_for_another_gpu", kPlanner, {},
                  "--model {ex}/gpt-7b.json --gpus 8 --cluster a100-80gb", 1,
                  "above the 312 TFLOP/s dense bf16 peak of a100-80gb (NVIDIA A100-SXM4-80GB): "
                  "costs faster than the GPU would give an MFU of"));
  c.push_back(Row("model_made_for_another_gpu_says_which", kSimulator, {},
                  "--model {ex}/gpt-7b.json --stages 2 --cluster a100-80gb", 1,
                  "the model's costs were made for h100-sxm: re-estimate them for this GPU "
                  "(profiler analytic --gpu a100-80gb) or run on --cluster h100-sxm"));
  c.push_back(Row("memory_gb_below_one_byte", kSimulator, {kGoodModel},
                  std::string(kSim) + " --memory-gb 1e-300", 2,
                  "--memory-gb: '1e-300' GiB is less than one byte: give 0 for unlimited, or a "
                  "size of at least one byte (9.31e-10 GiB)"));
  c.push_back(Row("memory_gb_below_one_byte_planner", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --memory-gb 5e-10", 2,
                  "--memory-gb: '5e-10' GiB is less than one byte"));
  c.push_back(Row("memory_gb_denormal", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --memory-gb 4.9e-324", 2,
                  "--memory-gb: '4.9e-324' GiB is less than one byte"));
  c.push_back(Row("validator_memory_limit_below_one_byte", kValidator, {},
                  "--plan {ex}/baselines/gpt-7b-8gpu.plan.json --model {ex}/gpt-7b.json "
                  "--memory-limit-mb 1e-9",
                  2, "--memory-limit-mb: '1e-9' MiB is less than one byte"));
  // A model of 12 heads (GPT-2 small's) on 8-GPU nodes: t = 8 fits a node but
  // splits heads.
  std::string twelve_heads = Model(8);
  twelve_heads.insert(twelve_heads.find(R"("layers")"),
                      R"("source": {"method": "manual", "architecture": )"
                      R"({"hidden": 768, "heads": 12, "kv_heads": 12}}, )");
  c.push_back(Row("simulator_tensor_parallel_not_dividing_heads", kSimulator,
                  {{"m.json", twelve_heads}, {"c.json", kCluster}},
                  std::string(kSim) + " --cluster {dir}/c.json --tensor-parallel 8", 1,
                  "--tensor-parallel 8 does not divide the model's 12 attention heads "
                  "(source.architecture): each GPU of a tensor-parallel group holds whole heads; "
                  "use a t that divides 12"));
  c.push_back(Row("planner_tensor_parallel_not_dividing_heads", kPlanner,
                  {{"m.json", twelve_heads}, {"c.json", kCluster}},
                  "--model {dir}/m.json --gpus 16 --global-batch 16 --cluster {dir}/c.json "
                  "--tensor-parallel 8",
                  1,
                  "--tensor-parallel 8 does not divide the model's 12 attention heads "
                  "(source.architecture)"));
  c.push_back(Row("simulator_far_over_memory", kSimulator, {kGoodModel},
                  std::string(kSim) + " --memory-gb 1e-6", 4,
                  "the configuration does not fit (exit 4; --allow-over-memory to exit 0)"));
  // --- issue 28 part two: messages -------------------------------------------
  c.push_back(Row("tensor_parallel_zero_names_the_range", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --tensor-parallel 0", 2,
                  "--tensor-parallel: '0' is not an integer from 1 to 2147483647"));
  c.push_back(Row("microbatches_zero_names_the_range", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 2 --microbatches 0", 2,
                  "--microbatches: '0' is not an integer from 1 to 2147483647"));
  c.push_back(Row("threads_negative_names_the_range", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --threads -1", 2,
                  "--threads: '-1' is not an integer from 0 to 2147483647"));
  c.push_back(Row("top_negative_names_the_range", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --top -1", 2,
                  "--top: '-1' is not an integer from 0 to 2147483647"));
  c.push_back(Row("long_flag_value_shortened", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --top " + std::string(400, '9'), 2,
                  "--top: '" + std::string(32, '9') +
                      "...' (400 characters) is not an integer from 0 to 2147483647"));
  {
    Case row = Row(
        "pytorch_csv_huge_token_shortened", kSimulator,
        {kGoodModel, {"s.csv", "0F0,0B" + std::string(100000, '7') + "X\n1F0,1B0\n"}},
        "--model {dir}/m.json --schedule-in {dir}/s.csv", 1,
        "{dir}/s.csv:1: column 2: token '0B" + std::string(30, '7') + "... (100003 characters)'");
    row.absent = std::string(1000, '7');
    c.push_back(row);
  }
  c.push_back(Row("memory_limit_past_any_schedule", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 4 --schedule zb-auto --memory-limit 1e308", 1,
                  "--memory-limit 1e308 is 1e+308 micro-batch activations, more than any "
                  "schedule holds (at most 8388608)"));
  c.push_back(Row("memory_limit_infinite", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 4 --schedule zb-auto --memory-limit inf", 1,
                  "--memory-limit 'inf': expected a number of micro-batch activations (16) or a "
                  "size with a unit"));
  c.push_back(Row("memory_limit_with_schedule_in", kSimulator,
                  {kGoodModel, {"s.csv", "0F0,0B0,0F1,0B1\n1F0,1B0,1F1,1B1\n"}},
                  "--model {dir}/m.json --schedule-in {dir}/s.csv --memory-limit 4", 1,
                  "--memory-limit applies to the schedules built from the stage costs (zb-auto, "
                  "zb-v-auto), not to --schedule-in {dir}/s.csv, whose order is given"));
  c.push_back(Row("empty_flag_value", kSimulator, {kGoodModel},
                  "--model {dir}/m.json --stages 4 --schedule zb-auto --memory-limit ''", 2,
                  "--memory-limit: the value is empty: give one (see --help)"));
  c.push_back(Row("empty_cluster_value", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --cluster ''", 2,
                  "--cluster: the value is empty"));
  c.push_back(Row("progress_after_nan", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --progress-after nan", 2,
                  "--progress-after: 'nan' is not a number of seconds from 0 to 1000000"));
  c.push_back(Row("pins_data_parallel_not_dividing_gpus", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --data-parallel 3", 2,
                  "--data-parallel 3 does not divide --gpus 8"));
  c.push_back(Row("pins_multiplying_past_gpus", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --tensor-parallel 2 --stages 4 "
                  "--data-parallel 2",
                  2,
                  "--tensor-parallel 2 x --stages 4 x --data-parallel 2 cannot make --gpus 8: t "
                  "x p x d must equal the GPUs, so t must be 1"));
  c.push_back(Row("pins_product_not_dividing_gpus", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 8 --global-batch 8 --stages 4 --data-parallel 4", 2,
                  "--stages 4 x --data-parallel 4 = 16 does not divide --gpus 8"));
  // --- issue 28 part two: flags -----------------------------------------------
  c.push_back(Row("schedule_out_csv_as_text", kSimulator, {kGoodModel},
                  std::string(kSim) + " --schedule-out {dir}/s.csv --schedule-format text", 2,
                  "--schedule-out {dir}/s.csv with --schedule-format text: a .csv file gets "
                  "PyTorch's schedule CSV",
                  After::kNoOutputs));
  c.push_back(Row("pytorch_class_unknown", kSimulator, {kGoodModel},
                  std::string(kSim) + " --schedule ScheduleFoo", 2,
                  "--schedule: 'ScheduleFoo' is not one of naive, gpipe, 1f1b"));
  {
    Case row = Row("validator_unknown_flag_named", kValidator, {}, "--bogus", 2, "--bogus");
    row.absent = "--plan";
    c.push_back(row);
  }
  c.push_back(Row("error_escapes_control_characters", kSimulator, {},
                  "--model \"{dir}/$(printf '\\033[31mred\\nx').json\" --stages 2", 1,
                  "\\x1b[31mred\\nx.json"));
  return c;
}

std::string Expand(std::string text, const TempDir& dir) {
  const std::string examples = Example("");
  for (const auto& [key, value] :
       {std::pair<std::string, std::string>{"{dir}", dir.path()}, {"{ex}/", examples}}) {
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at)) {
      text.replace(at, key.size(), value);
      at += value.size();
    }
  }
  return text;
}

// Every file under `dir`, relative, except the captured output and `inputs`.
std::vector<std::string> Outputs(const TempDir& dir, const std::vector<File>& inputs) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (entry.is_directory()) continue;
    const std::string rel = std::filesystem::relative(entry.path(), dir.path()).string();
    if (rel == ".stdout" || rel == ".stderr") continue;
    bool input = false;
    for (const File& f : inputs) input = input || f.name == rel;
    if (!input) found.push_back(rel);
  }
  return found;
}

class ErrorCatalogue : public ::testing::TestWithParam<Case> {};

TEST_P(ErrorCatalogue, Run) {
  const Case& c = GetParam();
  if (c.needs_no_gpu && std::filesystem::exists("/dev/nvidiactl")) {
    GTEST_SKIP() << "this machine has an NVIDIA device";
  }
  TempDir dir;
  for (const File& f : c.files) WriteText(dir.File(f.name), f.text);
  if (!c.make_dir.empty()) {
    const std::string made = dir.File(c.make_dir);
    ASSERT_EQ(::mkdir(made.c_str(), c.read_only ? 0555 : 0755), 0) << made;
    // root writes anywhere: the permission bits cannot make the write fail.
    if (c.read_only && ::access(made.c_str(), W_OK) == 0) {
      GTEST_SKIP() << "running as root: a read-only folder is still writable (the rows "
                      "*_onto_a_folder and *_under_a_file make writes fail for root too)";
    }
  }
  const ToolRun run = RunTool(dir, Binary(c.tool), Expand(c.args, dir));
  EXPECT_EQ(run.exit_code, c.exit_code) << "stderr:\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr(Expand(c.error, dir)));
  // No crash report, no stack: a clean one-line diagnosis.
  EXPECT_THAT(run.err, ::testing::Not(HasSubstr("terminate called")));
  EXPECT_THAT(run.err, ::testing::Not(HasSubstr("Sanitizer")));
  if (!c.output.empty()) {
    EXPECT_THAT(run.out, HasSubstr(c.output));
  }
  if (!c.absent.empty()) {
    EXPECT_THAT(run.err, ::testing::Not(HasSubstr(Expand(c.absent, dir))));
  }
  if (c.after == After::kNoOutputs || c.after == After::kInputsUnchanged) {
    EXPECT_THAT(Outputs(dir, c.files), ::testing::IsEmpty());
  }
  if (c.after == After::kInputsUnchanged) {
    for (const File& f : c.files) EXPECT_EQ(ReadText(dir.File(f.name)), f.text) << f.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Case, ErrorCatalogue, ::testing::ValuesIn(Catalogue()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// Every row has a unique name and says something.
TEST(ErrorCatalogueTable, RowsAreWellFormed) {
  std::vector<std::string> names;
  for (const Case& c : Catalogue()) {
    EXPECT_FALSE(c.error.empty()) << c.name;
    EXPECT_NE(c.exit_code, 0) << c.name;
    names.push_back(c.name);
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
}

}  // namespace
}  // namespace pipecast::cli_test
