#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "formats/file_util.h"
#include "formats/formats.h"
#include "formats/plan.h"
#include "formats/result_json.h"
#include "formats/schedule_text.h"
#include "testing/sim_test_util.h"

namespace pipecast {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::ordered_json;

// Given 8 uniform layers with weights and activations on 4 ranks x 2
// replicas of h100-sxm, 1F1B with 8 micro-batches and recomputation.
struct World {
  Model model =
      test_util::UniformModel(8, UsToNs(1000), UsToNs(2000), 64 * kMiB, 16 * kMiB, 50'000'000);
  Cluster cluster;
  Schedule schedule;
  SimOptions options = [] {
    SimOptions o;
    o.critical_path = true;  // as the tools simulate: a plan must drop it
    return o;
  }();
  SimResult result;
};

World MakeWorld() {
  World w;
  w.cluster = ClusterPreset("h100-sxm").value();
  w.schedule = MakeSchedule(ScheduleKind::k1F1B, 4, 8).value();
  w.options.config.layout.data_parallel = 2;
  w.options.config.recompute = Recompute::kFull;
  w.options.config.optimizer_step.time_ns = UsToNs(500);
  w.options.partition = {{0, 1}, {2, 4}, {5, 6}, {7, 7}};
  w.result = Simulate(w.model, w.cluster, w.schedule, w.options).value();
  return w;
}

std::string PlanText() {
  World w = MakeWorld();
  return PlanToJson(
      MakePlanFile("uniform", ModelHash("{}"), w.cluster, w.schedule, w.options, w.result));
}

// The error ParsePlan gives after `edit` changes a valid plan.
template <typename Edit>
std::string ErrorAfter(Edit edit) {
  json j = json::parse(PlanText());
  edit(j);
  Result<PlanFile> plan = ParsePlan(j.dump(2), "plan.json");
  EXPECT_FALSE(plan.ok());
  return plan.ok() ? "" : plan.status().message();
}

TEST(PlanFileTest, RecomputeIsWrittenByNameAndOlderBooleansAreRead) {
  // Given a plan written with full recomputation.
  json j = json::parse(PlanText());
  // Then the file names the granularity.
  EXPECT_EQ(j["recompute"], "full");
  // And plans written before the granularities had names still read:
  // true (whole-stage recomputation) as full, false as off.
  for (auto [old, want] : {std::pair{true, Recompute::kFull}, std::pair{false, Recompute::kOff}}) {
    j["recompute"] = old;
    Result<PlanFile> plan = ParsePlan(j.dump(2), "plan.json");
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    EXPECT_EQ(plan->config.recompute, want);
  }
  j["recompute"] = "selective";
  EXPECT_EQ(ParsePlan(j.dump(2), "plan.json")->config.recompute, Recompute::kSelective);
}

TEST(PlanFileTest, NewerRecomputeModesRoundTripWithTheirNumbers) {
  // Given plans made with each newer mode (the uniform model's layers hold
  // 64 MiB, their input 16 MiB: each is a block).
  struct Case {
    Recompute recompute;
    RecomputeLayers layers;
    const char* written;
  };
  const Case cases[] = {
      {Recompute::kOp, {}, "op"},
      {Recompute::kEvery, {3}, "every:3"},
      {Recompute::kFull, {.method = RecomputeMethod::kUniform, .num_layers = 2}, "full"},
      {Recompute::kFull, {.method = RecomputeMethod::kBlock, .num_layers = 1}, "full"},
      {Recompute::kSelective, {.modules = kRecomputeLayernorm | kRecomputeMoeAct}, "selective"}};
  for (const Case& c : cases) {
    World w = MakeWorld();
    w.options.config.recompute = c.recompute;
    w.options.config.recompute_layers = c.layers;
    w.result = Simulate(w.model, w.cluster, w.schedule, w.options).value();
    const std::string text =
        PlanToJson(MakePlanFile("uniform", "h", w.cluster, w.schedule, w.options, w.result));
    // Then the file spells the mode as the flag does, the method beside full,
    const json j = json::parse(text);
    EXPECT_EQ(j["recompute"], c.written);
    const bool method = c.layers.method != RecomputeMethod::kEachLayer;
    EXPECT_EQ(j.contains("recompute_method"), method);
    if (method) {
      EXPECT_EQ(j["recompute_method"], RecomputeMethodName(c.layers.method));
      EXPECT_EQ(j["recompute_num_layers"], c.layers.num_layers);
    }
    // Megatron-LM's modules beside selective, as an array of its names,
    EXPECT_EQ(j.contains("recompute_modules"), c.layers.modules != 0);
    if (c.layers.modules != 0) {
      EXPECT_EQ(j["recompute_modules"], json::array({"layernorm", "moe_act"}));
    }
    // and reading it back gives the same mode and the same prediction.
    Result<PlanFile> parsed = ParsePlan(text, "plan.json");
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_EQ(parsed->config.recompute, c.recompute);
    EXPECT_EQ(parsed->config.recompute_layers, c.layers);
    SimResult replay =
        Simulate(w.model, parsed->cluster, parsed->schedule, PlanSimOptions(*parsed)).value();
    EXPECT_EQ(replay.iteration_ns, w.result.iteration_ns);
    EXPECT_EQ(replay.per_rank[0].peak_memory_bytes, w.result.per_rank[0].peak_memory_bytes);
    EXPECT_EQ(PlanToJson(*parsed), text);
  }
  // A plan of the older modes has no new key.
  EXPECT_FALSE(json::parse(PlanText()).contains("recompute_method"));
  EXPECT_FALSE(json::parse(PlanText()).contains("recompute_modules"));
}

TEST(PlanFileTest, BadRecomputeNumbersAreNamed) {
  EXPECT_THAT(ErrorAfter([](json& j) {
                j["recompute"] = "selective";
                j["recompute_modules"] = json::array({"moe"});
              }),
              HasSubstr("recompute_modules: --recompute-modules moe: Megatron-LM's module 'moe' "
                        "is not modelled"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["recompute_modules"] = "layernorm"; }),
              HasSubstr("recompute_modules: expected an array of Megatron-LM module names"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["recompute_modules"] = json::array({"layernorm"}); }),
              HasSubstr("use it with --recompute selective (not full)"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["recompute"] = "every:0"; }),
              HasSubstr("recompute: expected"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["recompute_method"] = "chunked"; }),
              HasSubstr("recompute_method: expected \"uniform\" or \"block\""));
  EXPECT_THAT(ErrorAfter([](json& j) { j["recompute_method"] = "uniform"; }),
              HasSubstr("needs --recompute-num-layers"));
  EXPECT_THAT(ErrorAfter([](json& j) {
                j["recompute"] = "op";
                j["recompute_method"] = "block";
                j["recompute_num_layers"] = 2;
              }),
              HasSubstr("use it with --recompute full"));
}

TEST(ModelHashTest, IsFnv1a64InHex) {
  EXPECT_EQ(ModelHash(""), "fnv1a64:cbf29ce484222325");
  EXPECT_EQ(ModelHash("a"), "fnv1a64:af63dc4c8601ec8c");
  EXPECT_NE(ModelHash("model A"), ModelHash("model B"));
}

TEST(PlanFileTest, MakePlanFileDescribesTheSimulation) {
  World w = MakeWorld();
  PlanFile p = MakePlanFile("uniform", "fnv1a64:0", w.cluster, w.schedule, w.options, w.result);
  EXPECT_EQ(p.gpus, 8);
  EXPECT_EQ(p.config.layout.pipeline_stages, 4);
  EXPECT_EQ(p.config.layout.data_parallel, 2);
  EXPECT_EQ(p.config.microbatches, 8);
  EXPECT_EQ(p.global_batch, 16);
  EXPECT_EQ(p.schedule_name, "1f1b");
  EXPECT_EQ(p.config.layout.chunks, 1);
  EXPECT_EQ(p.config.recompute, Recompute::kFull);
  EXPECT_EQ(p.partition, w.options.partition);
  EXPECT_EQ(p.placement, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(p.predicted.iteration_ns, w.result.iteration_ns);
  ASSERT_EQ(p.predicted.per_rank.size(), 4u);
  EXPECT_EQ(p.predicted.per_rank[0].peak_memory_bytes, w.result.per_rank[0].peak_memory_bytes);
  // The prediction is the metrics: the timeline is not part of a plan.
  EXPECT_TRUE(w.result.critical_path.has_value());
  EXPECT_FALSE(p.predicted.critical_path.has_value());
  EXPECT_TRUE(p.predicted.ops.empty());
  SimResult metrics = w.result;
  metrics.critical_path.reset();
  EXPECT_EQ(ResultToJson(p.predicted), ResultToJson(metrics));
}

TEST(PlanFileTest, MakePlanFileRecordsTheBalancedPartitionWhenNoneWasGiven) {
  World w = MakeWorld();
  w.options.partition.clear();
  w.result = Simulate(w.model, w.cluster, w.schedule, w.options).value();
  PlanFile p = MakePlanFile("uniform", "h", w.cluster, w.schedule, w.options, w.result);
  EXPECT_EQ(p.partition, (std::vector<StageLayers>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

// The rule that made the partition is recorded (issue 24 item 6): a plan made with Megatron-LM's
// even split and its first/last-stage counts says so and reads back the same; a plan written
// before the rule was recorded (no partition_rule) reads as "given", its list as before.
TEST(PlanFileTest, PartitionRuleRoundTripsAndOldPlansReadAsGiven) {
  World w = MakeWorld();
  w.options.config.partition.rule = PartitionRule::kEven;
  w.options.config.partition.even.first_stage_layers = 1;
  w.options.config.partition.even.last_stage_layers = 1;
  PlanFile made = MakePlanFile("uniform", "h", w.cluster, w.schedule, w.options, w.result);
  const std::string text = PlanToJson(made);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["partition_rule"], "even");
  EXPECT_EQ(j["even_split"]["first_stage_layers"], 1);
  EXPECT_EQ(j["even_split"]["last_stage_layers"], 1);
  Result<PlanFile> parsed = ParsePlan(text, "plan.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->config.partition, made.config.partition);

  w.options.config.partition = PartitionSetting{};
  const nlohmann::json balanced = nlohmann::json::parse(
      PlanToJson(MakePlanFile("uniform", "h", w.cluster, w.schedule, w.options, w.result)));
  EXPECT_EQ(balanced["partition_rule"], "balanced");
  EXPECT_FALSE(balanced.contains("even_split"));

  nlohmann::json old = balanced;
  old.erase("partition_rule");
  Result<PlanFile> read_old = ParsePlan(old.dump(), "old.json");
  ASSERT_TRUE(read_old.ok()) << read_old.status().message();
  EXPECT_EQ(read_old->config.partition.rule, PartitionRule::kGiven);
  EXPECT_EQ(read_old->partition, made.partition);

  nlohmann::json bad = balanced;
  bad["partition_rule"] = "uneven";
  EXPECT_THAT(ParsePlan(bad.dump(), "bad.json").status().message(),
              HasSubstr("partition_rule: expected \"balanced\", \"even\" or \"given\""));
  bad["partition_rule"] = "balanced";
  bad["even_split"] = j["even_split"];
  EXPECT_THAT(ParsePlan(bad.dump(), "bad.json").status().message(),
              HasSubstr("even_split: is given, but partition_rule is not \"even\""));
}

TEST(PlanFileTest, MemorySettingsRoundTripAndReplay) {
  // Given a ZeRO-3 plan with bf16 main gradients (and their fp32 copy) on a
  // GPU with a 2 GiB reserve and a 10% margin
  World w = MakeWorld();
  w.options.config.memory = MemoryConfigFor("bf16", "adam", "bf16").value();
  w.options.config.memory.zero = 3;
  w.cluster.gpu.memory_reserve_bytes = 2 * kGiB;
  w.cluster.gpu.memory_headroom = 0.1;
  w.result = Simulate(w.model, w.cluster, w.schedule, w.options).value();
  PlanFile made = MakePlanFile("uniform", "h", w.cluster, w.schedule, w.options, w.result);
  // when written and read back
  Result<PlanFile> parsed = ParsePlan(PlanToJson(made), "plan.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  // then every setting survives, and the replay predicts the same
  EXPECT_EQ(parsed->config.memory.zero, 3);
  EXPECT_EQ(parsed->config.memory.gradient_bytes_per_param, 2);
  EXPECT_EQ(parsed->config.memory.gradient_copy_bytes_per_param, 4);
  EXPECT_EQ(parsed->cluster.gpu.memory_reserve_bytes, 2 * kGiB);
  EXPECT_EQ(parsed->cluster.gpu.memory_headroom, 0.1);
  SimResult replay =
      Simulate(w.model, parsed->cluster, parsed->schedule, PlanSimOptions(*parsed)).value();
  EXPECT_EQ(replay.iteration_ns, w.result.iteration_ns);
  EXPECT_EQ(replay.per_rank[0].peak_memory_bytes, w.result.per_rank[0].peak_memory_bytes);
  EXPECT_EQ(replay.memory_limit_bytes, w.result.memory_limit_bytes);
}

TEST(PlanFileTest, ShardingSettingsRoundTripReplayAndDefaultPlansWriteNone) {
  // Given a ZeRO-3 plan over d = 4 run as HSDP in groups of 2, parameters kept
  // gathered from forward to backward, gradients reduced once per step, no prefetch
  World w = MakeWorld();
  w.options.config.layout.data_parallel = 4;
  w.options.config.memory.zero = 3;
  ShardingConfig& sharding = w.options.config.memory.sharding;
  sharding = {.reshard_after_forward = false,
              .prefetch = false,
              .reduce_every_microbatch = false,
              .shard_group = 2};
  w.result = Simulate(w.model, w.cluster, w.schedule, w.options).value();
  PlanFile made = MakePlanFile("uniform", "h", w.cluster, w.schedule, w.options, w.result);
  // when written and read back
  const std::string text = PlanToJson(made);
  EXPECT_EQ(json::parse(text)["memory"]["sharding"],
            json::parse(R"({"reshard_after_forward": false, "prefetch": false,
                            "reduce_every_microbatch": false, "shard_group": 2})"));
  Result<PlanFile> parsed = ParsePlan(text, "plan.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  // then every setting survives, the text is the same, and the replay predicts the same
  EXPECT_EQ(parsed->config.memory.sharding, sharding);
  EXPECT_EQ(PlanToJson(*parsed), text);
  SimResult replay =
      Simulate(w.model, parsed->cluster, parsed->schedule, PlanSimOptions(*parsed)).value();
  EXPECT_EQ(replay.iteration_ns, w.result.iteration_ns);
  EXPECT_EQ(replay.per_rank[0].peak_memory_bytes, w.result.per_rank[0].peak_memory_bytes);
  // and the defaults write no key (plans are as before), an absent key reads as the defaults
  json plain = json::parse(PlanText());
  EXPECT_EQ(plain["memory"].count("sharding"), 0);
  EXPECT_EQ(ParsePlan(plain.dump(), "old.json")->config.memory.sharding, ShardingConfig{});
  // one key alone keeps the others' defaults
  plain["memory"]["zero"] = 3;
  plain["memory"]["sharding"] = {{"reshard_after_forward", false}};
  Result<PlanFile> one = ParsePlan(plain.dump(), "one.json");
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_FALSE(one->config.memory.sharding.reshard_after_forward);
  EXPECT_TRUE(one->config.memory.sharding.prefetch);
  EXPECT_EQ(one->config.memory.sharding.shard_group, 0);
  // bad values name the field
  EXPECT_THAT(ErrorAfter([](json& j) {
                j["memory"]["sharding"] = {{"prefetch", 1}};
              }),
              HasSubstr("memory.sharding.prefetch"));
  EXPECT_THAT(ErrorAfter([](json& j) {
                j["memory"]["sharding"] = {{"rechard", true}};
              }),
              HasSubstr("memory.sharding"));
  EXPECT_THAT(
      ErrorAfter([](json& j) {
        j["memory"]["zero"] = 3;
        j["memory"]["sharding"] = {{"shard_group", 3}};
      }),
      HasSubstr("memory.sharding.shard_group: is 3, which does not divide data_parallel 2"));
  EXPECT_THAT(ErrorAfter([](json& j) {
                j["memory"]["sharding"] = {{"shard_group", 2}};
              }),
              HasSubstr("hybrid sharding needs ZeRO 2 or 3"));
}

TEST(PlanFileTest, Fp8MemorySettingsRoundTripAndBf16PlansHaveNone) {
  // Given an FP8 plan (blockwise, FP8 parameter gathers) at ZeRO 3
  World w = MakeWorld();
  w.options.config.memory = MemoryConfigFor("fp8", "adam", "fp32", "blockwise", true).value();
  w.options.config.memory.zero = 3;
  w.result = Simulate(w.model, w.cluster, w.schedule, w.options).value();
  PlanFile made = MakePlanFile("uniform", "h", w.cluster, w.schedule, w.options, w.result);
  // when written and read back, the recipe, copies and gathers survive
  const std::string text = PlanToJson(made);
  Result<PlanFile> parsed = ParsePlan(text, "plan.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->config.memory.fp8_recipe, Fp8Recipe::kBlockwise);
  EXPECT_EQ(parsed->config.memory.fp8_weight_bytes_per_param, 2 * (1 + 4.0 / 16384));
  EXPECT_TRUE(parsed->config.memory.fp8_param_gather);
  SimResult replay =
      Simulate(w.model, parsed->cluster, parsed->schedule, PlanSimOptions(*parsed)).value();
  EXPECT_EQ(replay.per_rank[0].peak_memory_bytes, w.result.per_rank[0].peak_memory_bytes);
  // and a bf16 plan writes no FP8 keys (its text is as before)
  EXPECT_EQ(json::parse(PlanText())["memory"].count("fp8_recipe"), 0);
  EXPECT_THAT(ErrorAfter([](json& j) { j["memory"]["fp8_recipe"] = "fp4"; }),
              HasSubstr("memory.fp8_recipe"));
}

TEST(PlanFileTest, Fsdp2ShardedStateRoundTripsAndZeroPlansWriteNone) {
  // Given a ZeRO-3 plan over d = 2 with FSDP2's sharded state
  World w = MakeWorld();
  w.options.config.memory.zero = 3;
  w.options.config.memory.sharded_state = ShardedState::kFsdp2;
  w.result = Simulate(w.model, w.cluster, w.schedule, w.options).value();
  PlanFile made = MakePlanFile("uniform", "h", w.cluster, w.schedule, w.options, w.result);
  // when written and read back
  const std::string text = PlanToJson(made);
  EXPECT_EQ(json::parse(text)["memory"]["sharded_state"], "fsdp2");
  EXPECT_EQ(json::parse(text)["predicted"]["sharded_state"], "fsdp2");
  Result<PlanFile> parsed = ParsePlan(text, "plan.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  // then the mode survives, the text is the same and the replay predicts the same peak
  EXPECT_TRUE(parsed->config.memory.Fsdp2());
  EXPECT_EQ(parsed->predicted.sharded_state, ShardedState::kFsdp2);
  EXPECT_EQ(PlanToJson(*parsed), text);
  SimResult replay =
      Simulate(w.model, parsed->cluster, parsed->schedule, PlanSimOptions(*parsed)).value();
  EXPECT_EQ(replay.per_rank[0].peak_memory_bytes, w.result.per_rank[0].peak_memory_bytes);
  // and a plan with the ZeRO accounting writes no key; an absent key reads as zero
  json plain = json::parse(PlanText());
  EXPECT_EQ(plain["memory"].count("sharded_state"), 0);
  EXPECT_FALSE(ParsePlan(plain.dump(), "old.json")->config.memory.Fsdp2());
  EXPECT_THAT(ErrorAfter([](json& j) { j["memory"]["sharded_state"] = "fsdp1"; }),
              HasSubstr("memory.sharded_state: must be \"zero\" or \"fsdp2\""));
  EXPECT_THAT(ErrorAfter([](json& j) {
                j["memory"]["zero"] = 1;
                j["memory"]["sharded_state"] = "fsdp2";
              }),
              HasSubstr("memory.sharded_state: is \"fsdp2\", but memory.zero is 1"));
}

TEST(PlanFileTest, AnOldPlanWithoutTheSettingsReadsAsLevelZeroWithTheWholeMemory) {
  json j = json::parse(PlanText());
  j["memory"].erase("zero");
  j["memory"].erase("gradient_copy_bytes_per_param");
  j["cluster"]["gpu"].erase("memory_reserve_bytes");
  j["cluster"]["gpu"].erase("memory_headroom");
  Result<PlanFile> plan = ParsePlan(j.dump(2), "old.plan.json");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->config.memory.zero, 0);
  EXPECT_EQ(plan->config.memory.gradient_copy_bytes_per_param, 0);
  EXPECT_EQ(MemoryLimitBytes(plan->cluster.gpu), plan->cluster.gpu.memory_bytes);
  EXPECT_THAT(ErrorAfter([](json& j) { j["memory"]["zero"] = 7; }), HasSubstr("memory.zero"));
}

TEST(PlanFileTest, RoundTripsAndReplaysToTheSamePrediction) {
  World w = MakeWorld();
  PlanFile made =
      MakePlanFile("uniform", ModelHash("{}"), w.cluster, w.schedule, w.options, w.result);
  const std::string text = PlanToJson(made);

  Result<PlanFile> parsed = ParsePlan(text, "plan.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(PlanToJson(*parsed), text);
  EXPECT_EQ(parsed->model_name, "uniform");
  EXPECT_EQ(parsed->model_hash, made.model_hash);
  EXPECT_EQ(parsed->cluster.name, "h100-sxm");
  EXPECT_EQ(parsed->cluster.gpu.memory_bytes, 81008 * kMiB);
  EXPECT_EQ(parsed->cluster.gpu.memory_reserve_bytes, made.cluster.gpu.memory_reserve_bytes);
  EXPECT_EQ(parsed->cluster.gpu.memory_headroom, 0.05);
  EXPECT_EQ(parsed->schedule.name, "1f1b");
  EXPECT_EQ(parsed->schedule.actions, w.schedule.actions);
  EXPECT_EQ(parsed->schedule.stage_rank, w.schedule.stage_rank);
  EXPECT_EQ(parsed->partition, made.partition);
  EXPECT_EQ(parsed->config.optimizer_step.time_ns, UsToNs(500));
  EXPECT_EQ(parsed->predicted.iteration_ns, made.predicted.iteration_ns);
  EXPECT_DOUBLE_EQ(parsed->predicted.samples_per_s, made.predicted.samples_per_s);
  EXPECT_DOUBLE_EQ(parsed->predicted.bubble_ratio, made.predicted.bubble_ratio);
  EXPECT_DOUBLE_EQ(parsed->predicted.bubble_fraction_of_ideal,
                   made.predicted.bubble_fraction_of_ideal);
  EXPECT_EQ(parsed->LargestPredictedPeak(), made.LargestPredictedPeak());
  EXPECT_EQ(ResultToJson(parsed->predicted), ResultToJson(made.predicted));

  // When replayed, then the simulator predicts exactly what the plan says.
  Result<SimResult> replay =
      Simulate(w.model, parsed->cluster, parsed->schedule, PlanSimOptions(*parsed));
  ASSERT_TRUE(replay.ok()) << replay.status().message();
  replay->critical_path.reset();
  EXPECT_EQ(ResultToJson(*replay), ResultToJson(parsed->predicted));
}

// A plan whose prediction carries every key the result JSON has, those of features written only
// when in use included: tensor parallelism, a bidirectional schedule, FP8, several iterations,
// the throughput metrics and a rank's FP8 weight copies.
PlanFile PlanWithEveryResultKey() {
  World w = MakeWorld();
  PlanFile p = MakePlanFile("uniform", "h", w.cluster, w.schedule, w.options, w.result);
  SimResult& r = p.predicted;
  r.tensor_parallel = 2;
  r.sequence_parallel = true;
  r.tp_comm_overlap = true;
  r.tp_comm_ns = 1234567;
  r.bidirectional = true;
  r.copy_reduce_ns = 7654321;
  r.fp8_recipe = Fp8Recipe::kBlockwise;
  r.fp8_param_gather = true;
  r.iterations_simulated = 2;
  r.first_iteration_ns = r.iteration_ns + 1000;
  r.tokens_per_s = 12345.5;
  r.tflops_per_gpu = 321.25;
  r.mfu = 0.375;
  r.notes = {"a note"};
  r.per_rank[1].memory.fp8_weights = 4096;
  r.per_rank[2].tp_comm_ns = 2000;
  r.per_rank[3].copy_reduce_ns = 3000;
  return p;
}

// Paths of every scalar in `j` ("stages[1].memory.weights_bytes"), lists of strings whole.
void ScalarPaths(const json& j, const std::string& path, std::vector<std::string>* out) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      ScalarPaths(value, path.empty() ? key : path + "." + key, out);
    }
  } else if (j.is_array() && !j.empty() && !j[0].is_string()) {
    for (size_t i = 0; i < j.size(); ++i) {
      ScalarPaths(j[i], path + "[" + std::to_string(i) + "]", out);
    }
  } else {
    out->push_back(path);
  }
}

json& At(json& j, const std::string& path) {
  json* at = &j;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.') ++i;
    if (path[i] == '[') {
      const size_t close = path.find(']', i);
      at = &(*at)[std::stoul(path.substr(i + 1, close - i - 1))];
      i = close + 1;
    } else {
      const size_t end = path.find_first_of(".[", i);
      at = &(*at)[path.substr(i, end == std::string::npos ? std::string::npos : end - i)];
      i = end == std::string::npos ? path.size() : end;
    }
  }
  return *at;
}

// Written, read and written again, a prediction with every key gives the same text, and its
// typed fields survive.
TEST(ResultKeysTest, EveryKeyWrittenIsReadBackToTheSameText) {
  const PlanFile made = PlanWithEveryResultKey();
  const std::string text = PlanToJson(made);
  for (const char* key : {"tensor_parallel", "copy_reduce_time_us", "fp8_recipe",
                          "first_iteration_time_us", "mfu", "tokens_per_s"}) {
    EXPECT_TRUE(json::parse(text)["predicted"].contains(key)) << key;
  }
  Result<PlanFile> parsed = ParsePlan(text, "plan.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(PlanToJson(*parsed), text);
  EXPECT_EQ(parsed->predicted.fp8_recipe, Fp8Recipe::kBlockwise);
  EXPECT_EQ(parsed->predicted.per_rank[1].memory.fp8_weights, 4096);
  EXPECT_EQ(parsed->predicted.first_iteration_ns, made.predicted.first_iteration_ns);
  EXPECT_EQ(ResultToJson(parsed->predicted), ResultToJson(made.predicted));
}

// The other way: each value of the written prediction, changed in the file, is read and written
// back changed, so the reader takes every key the writer writes (none is recomputed or dropped).
// Derived keys are the exceptions: `precision` (from fp8_recipe), `fits_memory` at the top (from
// the ranks) and a rank's first_layer/last_layer (from its chunks).
TEST(ResultKeysTest, EveryValueInTheFileIsTheOneRead) {
  const std::string text = PlanToJson(PlanWithEveryResultKey());
  std::vector<std::string> paths;
  ScalarPaths(json::parse(text)["predicted"], "", &paths);
  EXPECT_GT(paths.size(), 120u);
  int changed = 0;
  for (const std::string& path : paths) {
    if (path == "precision" || path == "fits_memory" || path.find("first_layer") != path.npos ||
        path.find("last_layer") != path.npos) {
      continue;
    }
    json j = json::parse(text);
    json& v = At(j["predicted"], path);
    if (v.is_boolean()) {
      // A true flag that guards other keys (bidirectional) stays: false would drop them.
      if (v.get<bool>() && path == "bidirectional") continue;
      v = !v.get<bool>();
    } else if (v.is_number_integer()) {
      v = v.get<int64_t>() + 1;
    } else if (v.is_number()) {
      v = v.get<double>() == 0 ? 0.5 : v.get<double>() / 2;
    } else if (v.is_string()) {
      v = path == "fp8_recipe" ? "current" : v.get<std::string>() + "x";
    } else if (v.is_array()) {
      v.push_back("another note");
    } else {
      continue;  // null chunk stage
    }
    Result<PlanFile> parsed = ParsePlan(j.dump(2), "plan.json");
    ASSERT_TRUE(parsed.ok()) << path << ": " << parsed.status().message();
    json again = json::parse(PlanToJson(*parsed));
    const json& read = At(again["predicted"], path);
    if (v.is_number_float()) {
      EXPECT_NEAR(read.get<double>(), v.get<double>(), 1e-3) << path;
    } else {
      EXPECT_EQ(read, v) << path;
    }
    ++changed;
  }
  EXPECT_GT(changed, 100);
}

// The stored baselines that `planner --check` reads: read typed, written
// back, they give their own bytes (nothing is kept verbatim).
TEST(PlanFileTest, TheExampleBaselinesRoundTripByteForByte) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  const std::string dir = std::string(root ? root : ".") + "/examples/baselines/";
  for (const char* name :
       {"gpt-7b-8gpu.plan.json", "gpt-13b-16gpu.plan.json", "llama-70b-64gpu.plan.json"}) {
    Result<std::string> text = ReadFile(dir + name);
    ASSERT_TRUE(text.ok()) << text.status().message();
    Result<PlanFile> plan = ParsePlan(*text, name);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    EXPECT_EQ(PlanToJson(*plan), *text) << name;
  }
}

TEST(PlanFileTest, KeepsTheIterationsOfAnAsynchronousSchedule) {
  // Given a plan whose action lists cover several iterations without a flush.
  World w = MakeWorld();
  PlanFile p = MakePlanFile("uniform", "h", w.cluster, w.schedule, w.options, w.result);
  p.schedule = MakeSchedule(ScheduleKind::k1F1B, 4, 24).value();
  p.schedule.iterations = 3;
  p.schedule.flush = false;
  p.config.microbatches = 8;
  // When it round-trips, then iterations and flush survive the action text.
  Result<PlanFile> parsed = ParsePlan(PlanToJson(p), "plan.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->schedule.iterations, 3);
  EXPECT_FALSE(parsed->schedule.flush);
  EXPECT_EQ(parsed->config.microbatches, 8);
  EXPECT_EQ(parsed->schedule.num_microbatches, 24);
}

TEST(PlanFileTest, EmbedsPredictedAsAnObjectAndActionsAsLines) {
  json j = json::parse(PlanText());
  EXPECT_EQ(j["format"], "pipecast-plan/1");
  EXPECT_TRUE(j["predicted"].is_object());
  EXPECT_TRUE(j["predicted"].contains("iteration_time_us"));
  EXPECT_EQ(j["cluster"]["format"], "pipecast-cluster/1");
  ASSERT_EQ(j["actions"].size(), 4u);
  EXPECT_THAT(j["actions"][0].get<std::string>(), ::testing::StartsWith("0F0 0F1 0F2 0F3 0B0"));
  EXPECT_EQ(j["schedule"]["name"], "1f1b");
}

TEST(PlanFileTest, ErrorsNameTheFileAndThePath) {
  EXPECT_THAT(ErrorAfter([](json& j) { j["partition"][2]["last_layer"] = "six"; }),
              HasSubstr("plan.json: partition[2].last_layer: expected an integer"));
  EXPECT_THAT(ErrorAfter([](json& j) { j.erase("predicted"); }),
              HasSubstr("plan.json: predicted: missing"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["predicted"]["bubble_ratio"] = "x"; }),
              HasSubstr("plan.json: predicted.bubble_ratio: expected a finite number"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["cluster"]["gpu"]["memory_bytes"] = -1; }),
              HasSubstr("plan.json: cluster.gpu.memory_bytes"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["actions"][1] = "1F0 1X1"; }),
              HasSubstr("plan.json: actions[1]: token '1X1'"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["actions"][1] = ""; }),
              HasSubstr("plan.json: actions[1]: is empty"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["recompute"] = 1; }),
              HasSubstr("plan.json: recompute: expected \"off\", \"selective\", \"full\", "
                        "\"op\" or \"every:K\""));
  EXPECT_THAT(ErrorAfter([](json& j) { j["recompute"] = "on"; }), HasSubstr("got string \"on\""));
  EXPECT_THAT(ErrorAfter([](json& j) { j["schedule"]["name"] = 3; }),
              HasSubstr("plan.json: schedule.name: expected a string"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["model"]["hashh"] = "x"; }),
              HasSubstr("plan.json: model.hashh: unknown key"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["format"] = "pipecast-plan/9"; }),
              HasSubstr("plan.json: format: \"pipecast-plan/9\" is not supported"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["partition"][1]["first_layer"] = 3; }),
              HasSubstr("plan.json: partition[1].first_layer: is 3, expected 2"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["placement"][3] = 0; }),
              HasSubstr("plan.json: placement[3]: GPU 0 is already used"));
}

TEST(PlanFileTest, InconsistentFieldsAreNamed) {
  EXPECT_THAT(ErrorAfter([](json& j) { j["microbatches"] = 4; }),
              HasSubstr("plan.json: microbatches: is 4, but the actions run 8 micro-batches"));
  EXPECT_THAT(ErrorAfter([](json& j) {
                j["pipeline_stages"] = 3;
                j["placement"] = {0, 1, 2};
                j["predicted"]["stages"].erase(3);
              }),
              HasSubstr("plan.json: actions: has 4 ranks, but pipeline_stages is 3"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["gpus"] = 16; }),
              HasSubstr("plan.json: gpus: is 16, expected pipeline_stages x data_parallel"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["partition"].erase(3); }),
              HasSubstr("plan.json: partition: has 3 stages, but the actions use 4"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["global_batch"] = 17; }),
              HasSubstr("plan.json: global_batch: is 17"));
}

// A bidirectional plan (dualpipe): actions with directions, a partition per virtual stage whose
// entries p..2p-1 repeat 0..p-1; read back, it replays to its prediction. A second copy that
// differs is named.
TEST(PlanFileTest, BidirectionalPlansRoundTripWithTheirSecondCopy) {
  World w;
  w.cluster = ClusterPreset("h100-sxm").value();
  for (Layer& l : w.model.layers) l.profiles[0].backward_weight_ns = UsToNs(1000);
  w.schedule = MakeSchedule(ScheduleKind::kDualPipe, 4, 8, 2).value();
  w.result = Simulate(w.model, w.cluster, w.schedule, w.options).value();
  const PlanFile made =
      MakePlanFile("uniform", ModelHash("{}"), w.cluster, w.schedule, w.options, w.result);
  ASSERT_EQ(made.partition.size(), 8u);
  EXPECT_EQ(made.partition[4], made.partition[0]);
  const std::string text = PlanToJson(made);
  Result<PlanFile> parsed = ParsePlan(text, "plan.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(PlanToJson(*parsed), text);
  EXPECT_TRUE(parsed->schedule.bidirectional);
  EXPECT_EQ(parsed->schedule.actions, w.schedule.actions);
  Result<SimResult> replay =
      Simulate(w.model, parsed->cluster, parsed->schedule, PlanSimOptions(*parsed));
  ASSERT_TRUE(replay.ok()) << replay.status().message();
  EXPECT_EQ(replay->iteration_ns, made.predicted.iteration_ns);

  json j = json::parse(text);
  j["partition"][5]["first_layer"] = 3;
  j["partition"][4]["last_layer"] = 2;
  Result<PlanFile> bad = ParsePlan(j.dump(2), "plan.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("plan.json: partition[4]: holds layers 0-2, expected 0-1: in a "
                        "bidirectional plan stage 4 is the second copy of stage 0"));
}

TEST(PlanFileTest, BadJsonAndMissingFilesAreErrorsNotExceptions) {
  Result<PlanFile> bad = ParsePlan("{\"format\": ", "plan.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("plan.json: not valid JSON"));
  Result<PlanFile> array = ParsePlan("[]", "plan.json");
  ASSERT_FALSE(array.ok());
  EXPECT_THAT(array.status().message(), HasSubstr("plan.json: expected an object"));
  Result<PlanFile> missing = LoadPlan("/nonexistent/plan.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/plan.json"));
}

}  // namespace
}  // namespace pipecast

namespace pipecast {
namespace {

TEST(PlanFileTest, TensorParallelPlansRoundTripAndOldOnesReadAsOne) {
  // Given a t = 2 plan with sequence parallelism of a model whose layers give
  // their collectives
  World w = MakeWorld();
  for (Layer& l : w.model.layers) {
    l.profiles[0].tp_comm_bytes = 16 * kMiB;
    l.profiles[0].tp_forward_collectives = 2;
    l.profiles[0].tp_backward_collectives = 2;
  }
  w.options.config.layout.tensor_parallel = 2;
  w.options.config.layout.sequence_parallel = true;
  w.result = Simulate(w.model, w.cluster, w.schedule, w.options).value();
  PlanFile made = MakePlanFile("uniform", "h", w.cluster, w.schedule, w.options, w.result);
  // then gpus counts t, placement names each rank's first GPU,
  EXPECT_EQ(made.gpus, 4 * 2 * 2);
  EXPECT_EQ(made.placement, (std::vector<int>{0, 2, 4, 6}));
  // and written and read back, the settings survive and replay the same
  const std::string text = PlanToJson(made);
  Result<PlanFile> parsed = ParsePlan(text, "plan.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->config.layout.tensor_parallel, 2);
  EXPECT_TRUE(parsed->config.layout.sequence_parallel);
  EXPECT_FALSE(parsed->config.overlap.tp_comm_overlap);
  EXPECT_EQ(parsed->predicted.tp_comm_ns, w.result.tp_comm_ns);
  EXPECT_GT(w.result.tp_comm_ns, 0);
  const SimResult replay =
      Simulate(w.model, parsed->cluster, parsed->schedule, PlanSimOptions(*parsed)).value();
  EXPECT_EQ(replay.iteration_ns, w.result.iteration_ns);
  EXPECT_EQ(PlanToJson(*parsed), text);
  // A t = 1 plan writes none of the keys (so older plans and baselines are unchanged).
  EXPECT_EQ(PlanText().find("tensor_parallel"), std::string::npos);
  // gpus must count t.
  json j = json::parse(text);
  j["gpus"] = 8;
  Result<PlanFile> bad = ParsePlan(j.dump(2), "plan.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.status().message().find(
          "gpus: is 8, expected pipeline_stages x data_parallel x tensor_parallel = 4 x 2 x 2"),
      std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace pipecast
