// plan.json (formats/plan.h): reading `pipecast-plan/1`. Field reads go through the formats
// part's JSON reader (formats/internal/json_reader.h, plan wording); like formats.cc, this file
// catches every nlohmann::json exception and turns it into a Status naming the file and the JSON
// path (`partition[2].last_layer`). The embedded cluster goes through ParseCluster, the action
// lists through ParseScheduleText and the prediction through the result JSON's key list
// (formats/result_json.cc), so their rules live in one place; the checks that the plan's parts
// agree come last (CheckConsistent). Making and writing a plan is in plan_io.cc.
#include <fmt/format.h>

#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/json_depth.h"
#include "base/text_table.h"
#include "formats/file_util.h"
#include "formats/formats.h"
#include "formats/internal/json_reader.h"
#include "formats/internal/result_reader.h"
#include "formats/plan.h"
#include "formats/schedule_text.h"

namespace pipecast {
namespace {

using json = internal::Json;
using internal::Dump;
using internal::Element;
using internal::Member;
using internal::Shown;
using internal::WithoutExceptionId;
using Reader = internal::JsonReader;

// Limits past which a count is a mistake, not a plan; they also keep every
// product (gpus = stages x dp, global batch) far from overflow.
constexpr int64_t kMaxCount = int64_t{1} << 24;
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 40;
constexpr double kMaxTimeUs = 1e12;  // 11.6 days
constexpr double kMaxBytesPerParam = 1024;

Status ReadModelRef(const Reader& r, const json& root, PlanFile* plan) {
  const json* v = nullptr;
  PIPECAST_RETURN_IF_ERROR(r.Find(root, "", "model", &v));
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(*v, "model"));
  PIPECAST_RETURN_IF_ERROR(r.CheckKeys(*v, "model", {"name", "hash"}));
  PIPECAST_RETURN_IF_ERROR(r.String(*v, "model", "name", &plan->model_name));
  return r.String(*v, "model", "hash", &plan->model_hash);
}

// The cluster object goes through ParseCluster; its errors come back with
// the path prefixed by "cluster.".
Status ReadEmbeddedCluster(const Reader& r, const json& root, Cluster* cluster) {
  const json* v = nullptr;
  PIPECAST_RETURN_IF_ERROR(r.Find(root, "", "cluster", &v));
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(*v, "cluster"));
  Result<Cluster> parsed = ParseCluster(Dump(*v), "");
  if (!parsed.ok()) {
    // ParseCluster with an empty origin says ": <path>: <what>".
    std::string msg = parsed.status().message();
    if (msg.rfind(": ", 0) == 0) msg = msg.substr(2);
    return Status::InvalidArgument(fmt::format("{}: cluster.{}", r.origin(), msg));
  }
  *cluster = std::move(parsed.value());
  return Status::Ok();
}

// "recompute_modules": Megatron-LM's modules of selective recomputation, an
// array of names ("layernorm", "moe_act", "core_attn").
Status ReadRecomputeModules(const Reader& r, const json& value, RecomputeLayers* layers) {
  std::string names;
  bool strings = value.is_array() && !value.empty();
  for (const json& item : strings ? value : json::array()) {
    strings = strings && item.is_string();
    if (!strings) break;
    names += (names.empty() ? "" : ",") + item.get<std::string>();
  }
  if (!strings) {
    return r.Error("recompute_modules",
                   fmt::format("expected an array of Megatron-LM module names (\"layernorm\", "
                               "\"moe_act\", \"core_attn\"), got {}",
                               internal::Shown(value)));
  }
  Result<unsigned> modules = ParseRecomputeModules(names);
  if (!modules.ok()) return r.Error("recompute_modules", modules.status().message());
  layers->modules = *modules;
  return Status::Ok();
}

// "recompute": "off", "selective", "full", "op" or "every:K", with
// "recompute_method" ("uniform" or "block") and "recompute_num_layers" beside
// "full" when a Megatron-LM method was chosen (written only then, so plans of
// the other modes read as before); plans written before the granularities
// were named carry true (whole-stage recomputation, read as full) or false
// (off).
Status ReadRecompute(const Reader& r, const json& root, Recompute* out, RecomputeLayers* layers) {
  *layers = RecomputeLayers{};
  if (root.contains("recompute") && root["recompute"].is_boolean()) {
    *out = root["recompute"].get<bool>() ? Recompute::kFull : Recompute::kOff;
    return Status::Ok();
  }
  if (!root.contains("recompute") || !root["recompute"].is_string() ||
      !ParseRecomputeSpec(root["recompute"].get<std::string>(), out, layers)) {
    return r.Error(
        "recompute",
        fmt::format("expected \"off\", \"selective\", \"full\", \"op\" or "
                    "\"every:K\" (K >= 1), or true/false as older plans wrote it, got {}",
                    root.contains("recompute") ? internal::Shown(root["recompute"])
                                               : std::string("nothing")));
  }
  if (root.contains("recompute_method")) {
    const json& method = root["recompute_method"];
    std::optional<RecomputeMethod> parsed;
    if (method.is_string()) parsed = ParseRecomputeMethod(method.get<std::string>());
    if (!parsed) {
      return r.Error("recompute_method", fmt::format("expected \"uniform\" or \"block\", got {}",
                                                     internal::Shown(method)));
    }
    layers->method = *parsed;
  }
  if (root.contains("recompute_num_layers")) {
    PIPECAST_RETURN_IF_ERROR(
        r.Int(root, "", "recompute_num_layers", 1, kMaxCount, &layers->num_layers));
  }
  if (root.contains("recompute_modules")) {
    PIPECAST_RETURN_IF_ERROR(ReadRecomputeModules(r, root["recompute_modules"], layers));
  }
  if (Status s = CheckRecompute(*out, *layers); !s.ok()) {
    return r.Error(root.contains("recompute_modules")  ? "recompute_modules"
                   : root.contains("recompute_method") ? "recompute_method"
                                                       : "recompute_num_layers",
                   s.message());
  }
  return Status::Ok();
}

// "partition_rule" (balanced, even or given) and, for even, "even_split":
// absent in plans written before the rule was recorded, read as given (the
// plan's list, by whichever rule made it).
Status ReadPartitionRule(const Reader& r, const json& root, PartitionSetting* out) {
  *out = PartitionSetting{};
  std::optional<std::string> name;
  PIPECAST_RETURN_IF_ERROR(r.String(root, "", "partition_rule", &name));
  if (!name.has_value()) {
    out->rule = PartitionRule::kGiven;
    return Status::Ok();
  }
  bool known = false;
  for (PartitionRule rule :
       {PartitionRule::kBalanced, PartitionRule::kEven, PartitionRule::kGiven}) {
    if (*name == PartitionRuleName(rule)) {
      out->rule = rule;
      known = true;
    }
  }
  if (!known) {
    return r.Error("partition_rule", fmt::format("expected \"balanced\", \"even\" or \"given\", "
                                                 "got \"{}\"",
                                                 *name));
  }
  if (!root.contains("even_split")) return Status::Ok();
  if (out->rule != PartitionRule::kEven) {
    return r.Error("even_split", "is given, but partition_rule is not \"even\"");
  }
  const json& even = root["even_split"];
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(even, "even_split"));
  PIPECAST_RETURN_IF_ERROR(r.CheckKeys(
      even, "even_split",
      {"first_stage_layers", "last_stage_layers", "account_for_embedding", "account_for_loss"}));
  EvenSplitOptions& o = out->even;
  PIPECAST_RETURN_IF_ERROR(
      r.Int(even, "even_split", "first_stage_layers", 0, kMaxCount, &o.first_stage_layers));
  PIPECAST_RETURN_IF_ERROR(
      r.Int(even, "even_split", "last_stage_layers", 0, kMaxCount, &o.last_stage_layers));
  PIPECAST_RETURN_IF_ERROR(
      r.Bool(even, "even_split", "account_for_embedding", &o.account_for_embedding));
  PIPECAST_RETURN_IF_ERROR(r.Bool(even, "even_split", "account_for_loss", &o.account_for_loss));
  if (Status valid = o.Validate(); !valid.ok()) return r.Error("even_split", valid.message());
  return Status::Ok();
}

// Expert parallelism: optional, absent at ep = etp = 1; its overlap absent at auto, its
// dispatcher absent at deepep.
Status ReadExpertLayout(const Reader& r, const json& root, PlanFile* plan) {
  if (root.contains("expert_parallel")) {
    PIPECAST_RETURN_IF_ERROR(r.Int(root, "", "expert_parallel", 1, kMaxExpertParallel,
                                   &plan->config.layout.expert_parallel));
  }
  if (root.contains("expert_tensor_parallel")) {
    PIPECAST_RETURN_IF_ERROR(r.Int(root, "", "expert_tensor_parallel", 1, kMaxExpertParallel,
                                   &plan->config.layout.expert_tensor_parallel));
  }
  if (root.contains("ep_overlap")) {  // absent: auto
    std::string overlap;
    PIPECAST_RETURN_IF_ERROR(r.String(root, "", "ep_overlap", &overlap));
    std::optional<ExpertOverlap> parsed = ParseExpertOverlap(overlap);
    if (!parsed) return r.Error("ep_overlap", "must be \"auto\", \"on\" or \"off\"");
    plan->config.overlap.expert_overlap = *parsed;
  }
  if (root.contains("ep_dispatcher")) {  // absent: deepep
    std::string dispatcher;
    PIPECAST_RETURN_IF_ERROR(r.String(root, "", "ep_dispatcher", &dispatcher));
    std::optional<ExpertDispatcher> parsed = ParseExpertDispatcher(dispatcher);
    if (!parsed) {
      return r.Error("ep_dispatcher",
                     fmt::format("expected \"deepep\", \"alltoall\" or \"allgather\" (the expert "
                                 "dispatcher, --ep-dispatcher), got \"{}\"",
                                 dispatcher));
    }
    plan->config.layout.expert_dispatcher = *parsed;
  }
  return Status::Ok();
}

Status ReadCounts(const Reader& r, const json& root, PlanFile* plan) {
  PIPECAST_RETURN_IF_ERROR(r.Int(root, "", "gpus", 1, kMaxCount, &plan->gpus));
  PIPECAST_RETURN_IF_ERROR(
      r.Int(root, "", "pipeline_stages", 1, kMaxCount, &plan->config.layout.pipeline_stages));
  PIPECAST_RETURN_IF_ERROR(
      r.Int(root, "", "data_parallel", 1, kMaxCount, &plan->config.layout.data_parallel));
  // Tensor parallelism: optional, for plans written before it (and at t = 1).
  if (root.contains("tensor_parallel")) {
    PIPECAST_RETURN_IF_ERROR(
        r.Int(root, "", "tensor_parallel", 1, kMaxCount, &plan->config.layout.tensor_parallel));
  }
  if (root.contains("sequence_parallel")) {
    PIPECAST_RETURN_IF_ERROR(
        r.Bool(root, "", "sequence_parallel", &plan->config.layout.sequence_parallel));
  }
  if (root.contains("tp_comm_overlap")) {
    PIPECAST_RETURN_IF_ERROR(
        r.Bool(root, "", "tp_comm_overlap", &plan->config.overlap.tp_comm_overlap));
  }
  // Context parallelism: optional, for plans written before it (and at cp = 1).
  if (root.contains("context_parallel")) {
    PIPECAST_RETURN_IF_ERROR(r.Int(root, "", "context_parallel", 1, kMaxContextParallel,
                                   &plan->config.layout.context_parallel));
  }
  PIPECAST_RETURN_IF_ERROR(ReadExpertLayout(r, root, plan));
  if (root.contains("cp_algorithm")) {
    std::string algorithm;
    PIPECAST_RETURN_IF_ERROR(r.String(root, "", "cp_algorithm", &algorithm));
    std::optional<CpAlgorithm> parsed = ParseCpAlgorithm(algorithm);
    if (!parsed) return r.Error("cp_algorithm", "must be \"ring\" or \"allgather\"");
    plan->config.layout.cp_algorithm = *parsed;
  }
  if ((plan->config.layout.sequence_parallel || plan->config.overlap.tp_comm_overlap) &&
      plan->config.layout.tensor_parallel == 1) {
    return r.Error(plan->config.layout.sequence_parallel ? "sequence_parallel" : "tp_comm_overlap",
                   "is true but tensor_parallel is 1 (or absent); it needs tensor_parallel > 1");
  }
  PIPECAST_RETURN_IF_ERROR(
      r.Int(root, "", "microbatch_size", 1, kMaxCount, &plan->config.microbatch_size));
  PIPECAST_RETURN_IF_ERROR(
      r.Int(root, "", "microbatches", 1, kMaxCount, &plan->config.microbatches));
  PIPECAST_RETURN_IF_ERROR(
      r.Int(root, "", "global_batch", 1, kMaxGlobalBatch, &plan->global_batch));
  const json* schedule = nullptr;
  PIPECAST_RETURN_IF_ERROR(r.Find(root, "", "schedule", &schedule));
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(*schedule, "schedule"));
  PIPECAST_RETURN_IF_ERROR(
      r.CheckKeys(*schedule, "schedule", {"name", "virtual_stages", "iterations", "flush"}));
  PIPECAST_RETURN_IF_ERROR(r.String(*schedule, "schedule", "name", &plan->schedule_name));
  Result<ScheduleKind> kind = ParseScheduleKind(plan->schedule_name);
  plan->config.schedule = kind.ok() ? *kind : ScheduleKind::kCustom;
  PIPECAST_RETURN_IF_ERROR(
      r.Int(*schedule, "schedule", "virtual_stages", 1, kMaxCount, &plan->config.layout.chunks));
  // Optional: only asynchronous schedules (PipeDream) differ from 1 and true.
  // Kept in plan->schedule, whose action text cannot say them.
  plan->schedule.iterations = 1;
  plan->schedule.flush = true;
  if (schedule->contains("iterations")) {
    PIPECAST_RETURN_IF_ERROR(
        r.Int(*schedule, "schedule", "iterations", 1, kMaxCount, &plan->schedule.iterations));
  }
  if (schedule->contains("flush")) {
    PIPECAST_RETURN_IF_ERROR(r.Bool(*schedule, "schedule", "flush", &plan->schedule.flush));
  }
  return ReadRecompute(r, root, &plan->config.recompute, &plan->config.recompute_layers);
}

// Stage i must be entry i, and the stages must tile the layers from 0 on;
// whether they end at the model's last layer is the simulator's check. With
// two virtual stages per rank the tiling may start again at entry p: a
// bidirectional plan's second copy, which CheckConsistent holds to the first.
Status ReadPartition(const Reader& r, const json& root, const PlanFile& plan,
                     std::vector<StageLayers>* partition) {
  const json* list = nullptr;
  PIPECAST_RETURN_IF_ERROR(r.Array(root, "", "partition", &list));
  if (list->empty()) return r.Error("partition", "is empty; expected one entry per stage");
  partition->clear();
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string path = Element("partition", i);
    const json& e = (*list)[i];
    PIPECAST_RETURN_IF_ERROR(r.CheckObject(e, path));
    PIPECAST_RETURN_IF_ERROR(r.CheckKeys(e, path, {"stage", "first_layer", "last_layer"}));
    int stage = 0;
    StageLayers s;
    PIPECAST_RETURN_IF_ERROR(r.Int(e, path, "stage", 0, kMaxCount, &stage));
    PIPECAST_RETURN_IF_ERROR(r.Int(e, path, "first_layer", 0, kMaxCount, &s.first_layer));
    PIPECAST_RETURN_IF_ERROR(r.Int(e, path, "last_layer", 0, kMaxCount, &s.last_layer));
    if (stage != static_cast<int>(i)) {
      return r.Error(Member(path, "stage"),
                     fmt::format("is {}, expected {}: list the stages in order", stage, i));
    }
    const int expected_first = i == 0 ? 0 : partition->back().last_layer + 1;
    const bool second_copy = plan.config.layout.chunks == 2 &&
                             static_cast<int64_t>(i) == plan.config.layout.pipeline_stages &&
                             s.first_layer == 0;
    if (s.first_layer != expected_first && !second_copy) {
      return r.Error(Member(path, "first_layer"),
                     fmt::format("is {}, expected {}: stages hold contiguous layers from 0 on",
                                 s.first_layer, expected_first));
    }
    if (s.last_layer < s.first_layer) {
      return r.Error(Member(path, "last_layer"),
                     fmt::format("is {}, before first_layer {}: a stage holds at least one layer",
                                 s.last_layer, s.first_layer));
    }
    partition->push_back(s);
  }
  return Status::Ok();
}

Status ReadPlacement(const Reader& r, const json& root, PlanFile* plan) {
  const json* list = nullptr;
  PIPECAST_RETURN_IF_ERROR(r.Array(root, "", "placement", &list));
  if (static_cast<int64_t>(list->size()) != plan->config.layout.pipeline_stages) {
    return r.Error("placement", fmt::format("has {} entries, expected one GPU per rank ({})",
                                            list->size(), plan->config.layout.pipeline_stages));
  }
  std::set<int> seen;
  plan->placement.clear();
  for (size_t i = 0; i < list->size(); ++i) {
    int64_t gpu = 0;
    PIPECAST_RETURN_IF_ERROR(r.IntegerValue((*list)[i], Element("placement", i),
                                            {0, plan->gpus - 1, nullptr, ""}, &gpu));
    if (!seen.insert(static_cast<int>(gpu)).second) {
      return r.Error(Element("placement", i),
                     fmt::format("GPU {} is already used by another rank", gpu));
    }
    plan->placement.push_back(static_cast<int>(gpu));
  }
  return Status::Ok();
}

// The per-rank action strings, joined one per line and parsed as schedule
// text. Each must be one non-empty line, so that line i stays rank i.
Status ReadActions(const Reader& r, const json& root, PlanFile* plan) {
  const json* list = nullptr;
  PIPECAST_RETURN_IF_ERROR(r.Array(root, "", "actions", &list));
  std::string text;
  for (size_t i = 0; i < list->size(); ++i) {
    const json& e = (*list)[i];
    const std::string path = Element("actions", i);
    if (!e.is_string()) return r.Error(path, "expected a string of actions, got " + Shown(e));
    const std::string& line = e.get_ref<const std::string&>();
    if (line.find_first_of("\n#") != std::string::npos) {
      return r.Error(path, "expected one line of actions without '#' comments");
    }
    if (line.find_first_not_of(" \t,\r") == std::string::npos) {
      return r.Error(path, fmt::format("is empty; rank {} must run at least one action", i));
    }
    text += line + "\n";
  }
  if (list->empty()) return r.Error("actions", "is empty; expected one string per rank");
  // Schedule-text errors say "<origin>:<line>:"; line n is actions[n-1].
  Result<Schedule> schedule = ParseScheduleText(text, "\x01");
  if (!schedule.ok()) {
    std::string msg = schedule.status().message();
    // "\x01:<line>: ..." names a line; "\x01: ..." the whole text (found by
    // fuzzing: the second form once threw out_of_range here).
    const size_t end = msg.find(':', 2);
    if (msg.rfind("\x01:", 0) == 0 && msg.size() > 2 && msg[2] >= '0' && msg[2] <= '9' &&
        end != std::string::npos) {
      int line = std::atoi(msg.substr(2, end - 2).c_str());
      msg = fmt::format("actions[{}]{}", line - 1, msg.substr(end));
    } else if (msg.rfind("\x01", 0) == 0) {
      msg = "actions" + msg.substr(1);
    }
    return Status::InvalidArgument(fmt::format("{}: {}", r.origin(), msg));
  }
  const int iterations = plan->schedule.iterations;
  const bool flush = plan->schedule.flush;
  plan->schedule = std::move(schedule.value());
  plan->schedule.name = plan->schedule_name;
  plan->schedule.iterations = iterations;
  plan->schedule.flush = flush;
  return Status::Ok();
}

// memory.sharding (ShardingConfig): optional, written only when a setting
// differs from the defaults, so plans without it (and plans written before
// it existed) read as FSDP's defaults. Each key inside is optional too.
Status ReadSharding(const Reader& r, const json& memory, ShardingConfig* sharding) {
  *sharding = ShardingConfig{};
  if (!memory.contains("sharding")) return Status::Ok();
  const json& v = memory["sharding"];
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(v, "memory.sharding"));
  PIPECAST_RETURN_IF_ERROR(
      r.CheckKeys(v, "memory.sharding",
                  {"reshard_after_forward", "prefetch", "reduce_every_microbatch", "shard_group"}));
  const char* path = "memory.sharding";
  if (v.contains("reshard_after_forward")) {
    PIPECAST_RETURN_IF_ERROR(
        r.Bool(v, path, "reshard_after_forward", &sharding->reshard_after_forward));
  }
  if (v.contains("prefetch")) {
    PIPECAST_RETURN_IF_ERROR(r.Bool(v, path, "prefetch", &sharding->prefetch));
  }
  if (v.contains("reduce_every_microbatch")) {
    PIPECAST_RETURN_IF_ERROR(
        r.Bool(v, path, "reduce_every_microbatch", &sharding->reduce_every_microbatch));
  }
  if (v.contains("shard_group")) {
    PIPECAST_RETURN_IF_ERROR(r.Int(v, path, "shard_group", 0, kMaxCount, &sharding->shard_group));
  }
  return Status::Ok();
}

Status ReadMemory(const Reader& r, const json& root, PlanFile* plan) {
  const json* v = nullptr;
  PIPECAST_RETURN_IF_ERROR(r.Find(root, "", "memory", &v));
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(*v, "memory"));
  PIPECAST_RETURN_IF_ERROR(r.CheckKeys(
      *v, "memory",
      {"weight_bytes_per_param", "gradient_bytes_per_param", "optimizer_bytes_per_param",
       "gradient_copy_bytes_per_param", "zero", "fp8_recipe", "fp8_weight_bytes_per_param",
       "fp8_param_gather", "sharding", "sharded_state"}));
  MemoryConfig& m = plan->config.memory;
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, "memory", "weight_bytes_per_param", kMaxBytesPerParam,
                                    &m.weight_bytes_per_param));
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, "memory", "gradient_bytes_per_param", kMaxBytesPerParam,
                                    &m.gradient_bytes_per_param));
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, "memory", "optimizer_bytes_per_param", kMaxBytesPerParam,
                                    &m.optimizer_bytes_per_param));
  // Optional: plans written before sharding existed are level 0, no copy.
  m.gradient_copy_bytes_per_param = 0;
  if (v->contains("gradient_copy_bytes_per_param")) {
    PIPECAST_RETURN_IF_ERROR(r.Number(*v, "memory", "gradient_copy_bytes_per_param",
                                      kMaxBytesPerParam, &m.gradient_copy_bytes_per_param));
  }
  // Optional: FP8 plans only (--precision fp8).
  if (v->contains("fp8_recipe")) {
    const json& name = (*v)["fp8_recipe"];
    Result<Fp8Recipe> recipe = name.is_string() ? ParseFp8Recipe(name.get<std::string>())
                                                : Status::InvalidArgument("not a string");
    if (!recipe.ok()) {
      return r.Error("memory.fp8_recipe",
                     "must be delayed, current, blockwise or mxfp8 (the FP8 recipe)");
    }
    m.fp8_recipe = *recipe;
    PIPECAST_RETURN_IF_ERROR(r.Number(*v, "memory", "fp8_weight_bytes_per_param", kMaxBytesPerParam,
                                      &m.fp8_weight_bytes_per_param));
    if (v->contains("fp8_param_gather")) {
      if (!(*v)["fp8_param_gather"].is_boolean()) {
        return r.Error("memory.fp8_param_gather", "must be true or false");
      }
      m.fp8_param_gather = (*v)["fp8_param_gather"].get<bool>();
    }
  }
  m.zero = 0;
  if (v->contains("zero")) {
    PIPECAST_RETURN_IF_ERROR(r.Int(*v, "memory", "zero", 0, kMaxZeroLevel, &m.zero));
  }
  PIPECAST_RETURN_IF_ERROR(ReadSharding(r, *v, &m.sharding));
  // Optional: written only for --sharded-state fsdp2; absent reads as zero.
  m.sharded_state = ShardedState::kZero;
  if (v->contains("sharded_state")) {
    const json& name = (*v)["sharded_state"];
    Result<ShardedState> state = name.is_string() ? ParseShardedState(name.get<std::string>())
                                                  : Status::InvalidArgument("not a string");
    if (!state.ok()) return r.Error("memory.sharded_state", "must be \"zero\" or \"fsdp2\"");
    m.sharded_state = *state;
    if (m.Fsdp2() && m.zero != kMaxZeroLevel) {
      return r.Error("memory.sharded_state",
                     fmt::format("is \"fsdp2\", but memory.zero is {}: FSDP2's sharded state "
                                 "needs ZeRO 3",
                                 m.zero));
    }
  }
  double us = 0;
  PIPECAST_RETURN_IF_ERROR(r.Number(root, "", "optimizer_step_us", kMaxTimeUs, &us));
  plan->config.optimizer_step.time_ns = UsToNs(us);
  // Optional: plans written before issue 15 read as the simulator's defaults.
  plan->config.optimizer_step.estimate = true;
  if (root.contains("estimate_optimizer_step")) {
    PIPECAST_RETURN_IF_ERROR(
        r.Bool(root, "", "estimate_optimizer_step", &plan->config.optimizer_step.estimate));
  }
  plan->config.overlap.overlap_grad_reduce = true;
  if (root.contains("overlap_grad_reduce")) {
    PIPECAST_RETURN_IF_ERROR(
        r.Bool(root, "", "overlap_grad_reduce", &plan->config.overlap.overlap_grad_reduce));
  }
  plan->config.overlap.grad_bucket_params = 0;
  if (root.contains("grad_bucket_params")) {
    PIPECAST_RETURN_IF_ERROR(r.Int(root, "", "grad_bucket_params", 0, int64_t{1} << 50,
                                   &plan->config.overlap.grad_bucket_params));
  }
  return Status::Ok();
}

// The embedded ResultJson object, typed (formats/result_json.cc reads it).
Status ReadPredicted(const Reader& r, const json& root, PlanFile* plan) {
  const json* v = nullptr;
  PIPECAST_RETURN_IF_ERROR(r.Find(root, "", "predicted", &v));
  return internal::ReadResultJson(r, *v, "predicted", plan->config.layout.pipeline_stages,
                                  &plan->predicted);
}

// The schedule's ranks, stages and micro-batches, and the partition, against
// the layout.
Status CheckScheduleMatches(const Reader& r, const PlanFile& plan) {
  const Schedule& s = plan.schedule;
  if (s.num_ranks != plan.config.layout.pipeline_stages) {
    return r.Error("actions", fmt::format("has {}, but pipeline_stages is {}",
                                          Count(s.num_ranks, "rank", "ranks"),
                                          plan.config.layout.pipeline_stages));
  }
  if (s.num_stages != plan.config.layout.pipeline_stages * plan.config.layout.chunks) {
    return r.Error(
        "schedule.virtual_stages",
        fmt::format("is {}, but the actions use {} on {}", plan.config.layout.chunks,
                    Count(s.num_stages, "stage", "stages"), Count(s.num_ranks, "rank", "ranks")));
  }
  if (static_cast<int>(plan.partition.size()) != s.num_stages) {
    return r.Error("partition",
                   fmt::format("has {}, but the actions use {}",
                               Count(plan.partition.size(), "stage", "stages"), s.num_stages));
  }
  // A restart at entry p (ReadPartition) is a bidirectional plan's second copy, and only that.
  const int p = s.num_ranks;
  if (s.num_stages > p && plan.partition[p].first_layer == 0) {
    for (int k = 0; k < p && s.bidirectional; ++k) {
      const StageLayers& a = plan.partition[k];
      const StageLayers& b = plan.partition[p + k];
      if (a.first_layer != b.first_layer || a.last_layer != b.last_layer) {
        return r.Error(
            Element("partition", p + k),
            fmt::format("holds layers {}-{}, expected {}-{}: in a bidirectional plan "
                        "stage {} is the second copy of stage {}",
                        b.first_layer, b.last_layer, a.first_layer, a.last_layer, p + k, k));
      }
    }
    if (!s.bidirectional) {
      return r.Error(Member(Element("partition", p), "first_layer"),
                     fmt::format("is 0, expected {}: stages hold contiguous layers from 0 on",
                                 plan.partition[p - 1].last_layer + 1));
    }
  }
  if (s.num_microbatches != int64_t{plan.config.microbatches} * s.iterations) {
    return r.Error("microbatches",
                   s.iterations == 1
                       ? fmt::format("is {}, but the actions run {}", plan.config.microbatches,
                                     Count(s.num_microbatches, "micro-batch", "micro-batches"))
                       : fmt::format("is {} per iteration, but the actions run {} over {}",
                                     plan.config.microbatches,
                                     Count(s.num_microbatches, "micro-batch", "micro-batches"),
                                     Count(s.iterations, "iteration", "iterations")));
  }
  return Status::Ok();
}

// gpus against the layout's t x cp x p x d.
Status CheckGpuCount(const Reader& r, const PlanFile& plan) {
  if (plan.config.layout.Gpus() != plan.gpus) {
    if (plan.config.layout.context_parallel > 1) {
      const ParallelLayout& l = plan.config.layout;
      return r.Error("gpus", fmt::format("is {}, expected tensor_parallel x context_parallel x "
                                         "pipeline_stages x data_parallel = {} x {} x {} x {}",
                                         plan.gpus, l.tensor_parallel, l.context_parallel,
                                         l.pipeline_stages, l.data_parallel));
    }
    if (plan.config.layout.tensor_parallel == 1) {
      return r.Error(
          "gpus",
          fmt::format("is {}, expected pipeline_stages x data_parallel = {} x {}", plan.gpus,
                      plan.config.layout.pipeline_stages, plan.config.layout.data_parallel));
    }
    return r.Error(
        "gpus", fmt::format("is {}, expected pipeline_stages x data_parallel x "
                            "tensor_parallel = {} x {} x {}",
                            plan.gpus, plan.config.layout.pipeline_stages,
                            plan.config.layout.data_parallel, plan.config.layout.tensor_parallel));
  }
  return Status::Ok();
}

// The hybrid shard group against ZeRO and d, and the global batch against
// size x m x d.
Status CheckShardingAndBatch(const Reader& r, const PlanFile& plan) {
  if (const int group = plan.config.memory.sharding.shard_group; group > 0) {
    if (plan.config.memory.zero < 2) {
      return r.Error("memory.sharding.shard_group",
                     fmt::format("is {}, but memory.zero is {}: hybrid sharding needs ZeRO 2 or 3",
                                 group, plan.config.memory.zero));
    }
    if (plan.config.layout.data_parallel % group != 0) {
      return r.Error("memory.sharding.shard_group",
                     fmt::format("is {}, which does not divide data_parallel {}", group,
                                 plan.config.layout.data_parallel));
    }
  }
  const int64_t batch = int64_t{plan.config.microbatch_size} * plan.config.microbatches *
                        plan.config.layout.data_parallel;
  if (plan.global_batch != batch) {
    return r.Error("global_batch",
                   fmt::format("is {}, expected microbatch_size x microbatches x data_parallel "
                               "= {} x {} x {} = {}",
                               plan.global_batch, plan.config.microbatch_size,
                               plan.config.microbatches, plan.config.layout.data_parallel, batch));
  }
  return Status::Ok();
}

// The fields must describe one configuration.
Status CheckConsistent(const Reader& r, const PlanFile& plan) {
  PIPECAST_RETURN_IF_ERROR(CheckScheduleMatches(r, plan));
  PIPECAST_RETURN_IF_ERROR(CheckGpuCount(r, plan));
  return CheckShardingAndBatch(r, plan);
}

Status ReadPlan(const Reader& r, const json& root, PlanFile* plan) {
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(root, ""));
  std::string format;
  PIPECAST_RETURN_IF_ERROR(r.String(root, "", "format", &format));
  if (format != kPlanFormat) {
    return r.Error("format", fmt::format("\"{}\" is not supported; this build reads \"{}\"", format,
                                         kPlanFormat));
  }
  PIPECAST_RETURN_IF_ERROR(r.CheckKeys(root, "",
                                       {"format",
                                        "model",
                                        "cluster",
                                        "gpus",
                                        "pipeline_stages",
                                        "data_parallel",
                                        "tensor_parallel",
                                        "sequence_parallel",
                                        "tp_comm_overlap",
                                        "context_parallel",
                                        "cp_algorithm",
                                        "expert_parallel",
                                        "expert_tensor_parallel",
                                        "ep_overlap",
                                        "ep_dispatcher",
                                        "microbatch_size",
                                        "microbatches",
                                        "global_batch",
                                        "schedule",
                                        "recompute",
                                        "recompute_method",
                                        "recompute_num_layers",
                                        "recompute_modules",
                                        "partition",
                                        "partition_rule",
                                        "even_split",
                                        "placement",
                                        "actions",
                                        "memory",
                                        "optimizer_step_us",
                                        "estimate_optimizer_step",
                                        "overlap_grad_reduce",
                                        "grad_bucket_params",
                                        "predicted"}));
  PIPECAST_RETURN_IF_ERROR(ReadModelRef(r, root, plan));
  PIPECAST_RETURN_IF_ERROR(ReadEmbeddedCluster(r, root, &plan->cluster));
  PIPECAST_RETURN_IF_ERROR(ReadCounts(r, root, plan));
  PIPECAST_RETURN_IF_ERROR(ReadPartition(r, root, *plan, &plan->partition));
  PIPECAST_RETURN_IF_ERROR(ReadPartitionRule(r, root, &plan->config.partition));
  PIPECAST_RETURN_IF_ERROR(ReadPlacement(r, root, plan));
  PIPECAST_RETURN_IF_ERROR(ReadActions(r, root, plan));
  PIPECAST_RETURN_IF_ERROR(ReadMemory(r, root, plan));
  PIPECAST_RETURN_IF_ERROR(ReadPredicted(r, root, plan));
  return CheckConsistent(r, *plan);
}

}  // namespace

Result<PlanFile> ParsePlan(const std::string& text, const std::string& origin) {
  const Reader reader(origin, internal::kPlanWording);
  try {
    json root;
    if (auto deep = JsonTooDeep(text)) return reader.Error("", *deep);
    try {
      root = json::parse(text);
    } catch (const json::exception& e) {
      return reader.Error("", "not valid JSON: " + WithoutExceptionId(e.what()));
    }
    PlanFile plan;
    PIPECAST_RETURN_IF_ERROR(ReadPlan(reader, root, &plan));
    return plan;
  } catch (const std::exception& e) {
    return Status::Internal(origin + ": unexpected error while reading the plan: " + e.what());
  }
}

Result<PlanFile> LoadPlan(const std::string& path) {
  PIPECAST_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParsePlan(text, path);
}

}  // namespace pipecast
