// The error catalogue's rows about bad input (tests/error_catalogue.h):
// malformed files, wrong types, missing fields, bad numbers, shapes that do
// not divide, partition rules, unknown names, schedules that deadlock.
#include <string>
#include <vector>

#include "tests/error_catalogue.h"

namespace pipecast::cli_test {
namespace {

// Malformed JSON.
std::vector<Case> MalformedJsonRows() {
  std::vector<Case> c;
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
  return c;
}

// Wrong types.
std::vector<Case> WrongTypeRows() {
  std::vector<Case> c;
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
  return c;
}

// Missing fields.
std::vector<Case> MissingFieldRows() {
  std::vector<Case> c;
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
  return c;
}

// Negative, NaN, absurdly large numbers.
std::vector<Case> BadNumberRows() {
  std::vector<Case> c;
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
  c.push_back(Row("profiler_moe_dispatcher_unknown", kProfiler, {},
                  tiny + " --experts 4 --moe-dispatcher flex --out {dir}/m.json", 2,
                  "--moe-dispatcher", After::kNoOutputs));
  c.push_back(Row("profiler_moe_capacity_factor_zero", kProfiler, {},
                  tiny + " --experts 4 --moe-capacity-factor 0 --out {dir}/m.json", 1,
                  "--moe-capacity-factor 0 must be above 0 and at most 64", After::kNoOutputs));
  c.push_back(Row("profiler_moe_capacity_factor_nan", kProfiler, {},
                  tiny + " --experts 4 --moe-capacity-factor nan --out {dir}/m.json", 1,
                  "--moe-capacity-factor nan must be above 0", After::kNoOutputs));
  c.push_back(Row("profiler_moe_pad_without_capacity", kProfiler, {},
                  tiny + " --experts 4 --moe-pad-to-capacity --out {dir}/m.json", 1,
                  "--moe-pad-to-capacity needs --moe-capacity-factor", After::kNoOutputs));
  // profiler cpu's tensor-parallel shards (issue 15 part 6): refused before
  // anything is measured.
  c.push_back(Row("profiler_cpu_tensor_parallel_not_dividing_ffn", kProfiler, {},
                  "cpu --layers 1 --hidden 8 --ffn 6 --tensor-parallel 1,4", 1,
                  "--tensor-parallel 4: layer 0's ffn 6 does not divide into 4 shards",
                  After::kNoOutputs));
  c.push_back(Row("profiler_cpu_tensor_parallel_without_1", kProfiler, {},
                  "cpu --layers 1 --hidden 8 --ffn 8 --tensor-parallel 2", 1,
                  "--tensor-parallel must include 1", After::kNoOutputs));
  // profiler cpu's MoE blocks (issue 26 item 6): the hash router balances only
  // when C(experts, top-k) divides the tokens; refused before anything runs.
  c.push_back(Row("profiler_cpu_experts_unbalanced_tokens", kProfiler, {},
                  "cpu --layers 1 --hidden 8 --ffn 8 --experts 4 --top-k 2 --tokens-per-sample 64 "
                  "--out {dir}/m.json",
                  1, "--tokens-per-sample 64 is not a multiple of C(--experts 4, --top-k 2) = 6",
                  After::kNoOutputs));
  c.push_back(Row("profiler_cpu_top_k_without_experts", kProfiler, {},
                  "cpu --layers 1 --hidden 8 --ffn 8 --top-k 2 --out {dir}/m.json", 1,
                  "--top-k 2 without --experts", After::kNoOutputs));
  c.push_back(Row("profiler_cpu_experts_with_tensor_parallel", kProfiler, {},
                  "cpu --layers 1 --hidden 8 --ffn 8 --experts 2 --top-k 1 --tokens-per-sample 2 "
                  "--tensor-parallel 1,2 --out {dir}/m.json",
                  1, "--tensor-parallel 2 with --experts: MoE blocks are measured whole",
                  After::kNoOutputs));
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
  return c;
}

// Zero layers, more stages than layers, GPUs not divisible.
std::vector<Case> ShapeRows() {
  std::vector<Case> c;
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
  return c;
}

// Partition rules (issue 24 item 6: Megatron-LM's even split).
std::vector<Case> PartitionRows() {
  std::vector<Case> c;
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
                  "planner: 108 configurations, 0 simulated, none can run (the report says why)"));
  // The examples come in the order the search partitioned them: lowest bound first (issue 26).
  c.back().output =
      "schedule constraint: 108\n    e.g. p=3 d=1 interleaved v=2 mbs=8 m=64 recompute=off zero=0 "
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
  return c;
}

// Unknown presets and names.
std::vector<Case> UnknownNameRows() {
  std::vector<Case> c;
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
                  2, "--attention: sparse not in {flash,flash2,flash3,triton,eager,sdpa-flash2}"));
  c.push_back(Row("unknown_elementwise_profiler", kProfiler, {},
                  "analytic --name x --layers 2 --hidden 64 --heads 8 --seq 8 --vocab 8 "
                  "--elementwise compiled",
                  2, "--elementwise: compiled not in {fused,eager}"));
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
  // Megatron-LM's selective recomputation by module (--recompute-modules).
  c.push_back(Row(
      "recompute_modules_unmodelled", kSimulator, {kGoodModel},
      std::string(kSim) + " --recompute selective --recompute-modules layernorm,shared_experts", 2,
      "--recompute-modules layernorm,shared_experts: Megatron-LM's module "
      "'shared_experts' is not modelled by pipecast; the modelled ones are core_attn, "
      "layernorm, moe_act, mla_up_proj and mlp"));
  c.push_back(Row("recompute_modules_unknown", kSimulator, {kGoodModel},
                  std::string(kSim) + " --recompute selective --recompute-modules norm", 2,
                  "--recompute-modules norm: 'norm' is not a module; expected a comma list of "
                  "core_attn, layernorm, moe_act, mla_up_proj, mlp"));
  c.push_back(Row("recompute_modules_without_selective", kSimulator, {kGoodModel},
                  std::string(kSim) + " --recompute full --recompute-modules layernorm", 2,
                  "--recompute-modules layernorm is Megatron-LM's choice of what selective "
                  "recomputation reruns: use it with --recompute selective (not full)"));
  c.push_back(Row("layernorm_fields_half_given", kSimulator,
                  {{"m.json", Model(8, R"({"microbatch_size": 1, "forward_us": 100, )"
                                       R"("backward_us": 200, "activation_bytes": 1024, )"
                                       R"("output_bytes": 512, "layernorm_bytes": 64})")}},
                  kSim, 1,
                  "layers[0].profiles[0]: gives only one of layernorm_bytes and layernorm_us"));
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
  c.push_back(Row("routed_experts_without_own_t", kSimulator,
                  {{"m.json", Model(8, R"({"microbatch_size": 1, "forward_us": 100, )"
                                       R"("backward_us": 200, "activation_bytes": 1024, )"
                                       R"("output_bytes": 512, "routed_experts": [)"
                                       R"({"expert_tensor_parallel": 2, "forward_us": 10, )"
                                       R"("backward_us": 20, "backward_weight_us": 10}]})")}},
                  kSim, 1,
                  "layers[0].profiles[0].routed_experts: has no entry at expert_tensor_parallel "
                  "1 (the profile's tensor_parallel)"));
  c.push_back(Row("routed_experts_weight_over_backward", kSimulator,
                  {{"m.json", Model(8, R"({"microbatch_size": 1, "forward_us": 100, )"
                                       R"("backward_us": 200, "activation_bytes": 1024, )"
                                       R"("output_bytes": 512, "routed_experts": [)"
                                       R"({"expert_tensor_parallel": 1, "forward_us": 10, )"
                                       R"("backward_us": 20, "backward_weight_us": 30}]})")}},
                  kSim, 1,
                  "layers[0].profiles[0].routed_experts[0].backward_weight_us: 30 is more than "
                  "backward_us (20)"));
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
  // --sharded-state fsdp2 (FSDP2's sharded state) and what it cannot run with.
  c.push_back(Row("flag_unknown_sharded_state", kSimulator, {kGoodModel},
                  std::string(kSim) + " --sharded-state fsdp", 2,
                  "--sharded-state: 'fsdp' is not one of zero, fsdp2"));
  c.push_back(Row("sharded_state_fsdp2_below_zero3", kSimulator, {kGoodModel},
                  std::string(kSim) + " --data-parallel 2 --zero 1 --sharded-state fsdp2", 1,
                  "--sharded-state fsdp2 needs --zero 3 (--zero is 1)"));
  c.push_back(Row("sharded_state_fsdp2_reduce_once", kSimulator, {kGoodModel},
                  std::string(kSim) + " --data-parallel 2 --zero 3 --sharded-state fsdp2 "
                                      "--reduce-every-microbatch off",
                  1, "--sharded-state fsdp2 needs --reduce-every-microbatch on"));
  c.push_back(Row("sharded_state_fsdp2_half_gradients", kSimulator, {kGoodModel},
                  std::string(kSim) + " --data-parallel 2 --zero 3 --sharded-state fsdp2 "
                                      "--grad-dtype bf16",
                  1, "--sharded-state fsdp2 needs --grad-dtype fp32"));
  c.push_back(Row("sharded_state_fsdp2_below_zero3_planner", kPlanner, {kGoodModel},
                  "--model {dir}/m.json --gpus 2 --global-batch 8 --sharded-state fsdp2 --zero 1",
                  1, "--sharded-state fsdp2 needs --zero 3, and --zero has 1"));
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
  // NCCL_PROTO's list on a link: Simple must stay, and only NCCL's three names.
  c.push_back(Row("cluster_nccl_proto_without_simple", kSimulator,
                  {kGoodModel,
                   {"c.json", ClusterWith("\"latency_us\": 5}",
                                          "\"latency_us\": 5, \"nccl_proto\": \"LL,LL128\"}")}},
                  std::string(kSim) + " --cluster {dir}/c.json", 1,
                  "inter_node.nccl_proto: Simple must be among the protocols (\"Simple\")"));
  c.push_back(Row("cluster_nccl_proto_unknown", kSimulator,
                  {kGoodModel,
                   {"c.json", ClusterWith("\"latency_us\": 5}",
                                          "\"latency_us\": 5, \"nccl_proto\": \"Simple,Tree\"}")}},
                  std::string(kSim) + " --cluster {dir}/c.json", 1,
                  "\"tree\" is not a protocol; list LL, LL128, Simple, comma-separated"));
  // NCCL_ALGO's list on a link: Ring must stay, and only the algorithms pipecast times.
  c.push_back(Row("cluster_nccl_algo_without_ring", kSimulator,
                  {kGoodModel,
                   {"c.json", ClusterWith("\"latency_us\": 5}",
                                          "\"latency_us\": 5, \"nccl_algo\": \"Tree\"}")}},
                  std::string(kSim) + " --cluster {dir}/c.json", 1,
                  "inter_node.nccl_algo: Ring must be among the algorithms (\"Ring\")"));
  c.push_back(Row("cluster_nccl_algo_unknown", kSimulator,
                  {kGoodModel,
                   {"c.json", ClusterWith("\"latency_us\": 5}",
                                          "\"latency_us\": 5, \"nccl_algo\": \"Ring,PAT\"}")}},
                  std::string(kSim) + " --cluster {dir}/c.json", 1,
                  "\"pat\" is not an algorithm pipecast times; list Ring, Tree, NVLS, NVLSTree"));
  return c;
}

// Schedules that deadlock.
std::vector<Case> DeadlockRows() {
  std::vector<Case> c;
  c.push_back(
      Row("schedule_deadlock_cycle", kSimulator,
          {kGoodModel, {"s.txt", "0F0 0B0 0F1 0B1\n1B0 1F0 1F1 1B1\n"}},
          "--model {dir}/m.json --schedule-in {dir}/s.txt", 1,
          "schedule 'custom' can never finish: stuck are rank 0 at 0B0, rank 1 at 1B0; these "
          "ops wait on each other in a cycle"));
  c.push_back(Row("plan_deadlock", kSimulator, {{"p.json", Baseline("\"0F0 0B0 ", "\"0B0 0F0 ")}},
                  "--model {ex}/gpt-7b.json --plan {dir}/p.json", 1,
                  "can never finish: stuck are rank 0 at 0B0"));
  return c;
}

}  // namespace

// Rows about bad input, in the catalogue's order.
std::vector<Case> InputRows() {
  std::vector<Case> rows;
  for (const std::vector<Case>& part :
       {MalformedJsonRows(), WrongTypeRows(), MissingFieldRows(), BadNumberRows(), ShapeRows(),
        PartitionRows(), UnknownNameRows(), DeadlockRows()}) {
    rows.insert(rows.end(), part.begin(), part.end());
  }
  return rows;
}

}  // namespace pipecast::cli_test
