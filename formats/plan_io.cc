// plan.json (formats/plan.h): making a plan from a simulation (MakePlanFile, the model's
// fingerprint ModelHash, PlanSimOptions) and writing it as `pipecast-plan/1` (PlanToJson; the
// embedded cluster through ClusterJson and the prediction through ResultJson, so their rules
// live in one place). Reading it back is in plan_read.cc.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/formats.h"
#include "formats/internal/json_reader.h"
#include "formats/plan.h"
#include "formats/result_json.h"
#include "formats/schedule_text.h"

namespace pipecast {
namespace {

using json = internal::Json;
using internal::Dump;

// FNV-1a, 64-bit (Fowler, Noll, Vo): not cryptographic, only a fingerprint.
constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

// A result's metrics without its timeline.
SimResult PredictionOf(const SimResult& result) {
  SimResult p = result;
  p.critical_path.reset();
  p.ops.clear();
  p.transfers.clear();
  for (StageResult& rank : p.per_rank) rank.memory_timeline.clear();
  return p;
}

}  // namespace

std::string ModelHash(const std::string& bytes) {
  uint64_t h = kFnvOffsetBasis;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= kFnvPrime;
  }
  return fmt::format("fnv1a64:{:016x}", h);
}

PlanFile MakePlanFile(const std::string& model_name, const std::string& model_hash,
                      const Cluster& cluster, const Schedule& schedule, const SimOptions& options,
                      const SimResult& result) {
  PlanFile plan;
  plan.model_name = model_name;
  plan.model_hash = model_hash;
  plan.cluster = cluster;
  TrainingConfig& config = plan.config;
  config = options.config;
  config.layout.pipeline_stages = schedule.num_ranks;
  config.layout.chunks = std::max(1, schedule.ChunksPerRank());
  // Per iteration: asynchronous schedules number micro-batches across the
  // iterations their action lists cover.
  config.microbatches = schedule.num_microbatches / std::max(1, schedule.iterations);
  plan.gpus = static_cast<int>(config.layout.Gpus());
  plan.global_batch =
      int64_t{config.microbatch_size} * config.microbatches * config.layout.data_parallel;
  plan.schedule_name = schedule.name;
  // The partition the simulation used (options.partition may be empty:
  // the default), per virtual stage.
  plan.partition.assign(schedule.num_stages, StageLayers{});
  for (const StageResult& rank : result.per_rank) {
    for (size_t i = 0; i < rank.stages.size() && i < rank.layers.size(); ++i) {
      if (rank.stages[i] >= 0 && rank.stages[i] < schedule.num_stages) {
        plan.partition[rank.stages[i]] = rank.layers[i];
      }
    }
  }
  for (int r = 0; r < schedule.num_ranks; ++r) {
    plan.placement.push_back(r * config.layout.tensor_parallel * config.layout.context_parallel);
  }
  plan.schedule = schedule;
  plan.predicted = PredictionOf(result);
  return plan;
}

Bytes PlanFile::LargestPredictedPeak() const {
  Bytes peak = 0;
  for (const StageResult& rank : predicted.per_rank) peak = std::max(peak, rank.peak_memory_bytes);
  return peak;
}

SimOptions PlanSimOptions(const PlanFile& plan) {
  SimOptions o;
  o.config = plan.config;
  o.partition = plan.partition;
  return o;
}

namespace {

// recompute, and its method and layers where Megatron-LM's differ from each layer.
void AddRecomputeJson(const TrainingConfig& config, json* root) {
  (*root)["recompute"] = RecomputeName(config.recompute);
  const RecomputeLayers& recompute = config.recompute_layers;
  if (config.recompute == Recompute::kEvery) {
    (*root)["recompute"] = RecomputeSpec(config.recompute, recompute);
  }
  if (recompute.method != RecomputeMethod::kEachLayer) {
    (*root)["recompute_method"] = RecomputeMethodName(recompute.method);
    (*root)["recompute_num_layers"] = recompute.num_layers;
  }
  // Megatron-LM's --recompute-modules of selective, written only when they
  // are not the default (core_attn).
  if (recompute.modules != 0) {
    json modules = json::array();
    const std::string names = RecomputeModulesName(recompute.modules);
    for (size_t start = 0; start <= names.size();) {
      const size_t comma = std::min(names.find(',', start), names.size());
      modules.push_back(names.substr(start, comma - start));
      start = comma + 1;
    }
    (*root)["recompute_modules"] = std::move(modules);
  }
}

// The partition per virtual stage and the rule that made it.
void AddPartitionJson(const PlanFile& plan, json* root) {
  (*root)["partition"] = json::array();
  for (size_t i = 0; i < plan.partition.size(); ++i) {
    (*root)["partition"].push_back({{"stage", i},
                                    {"first_layer", plan.partition[i].first_layer},
                                    {"last_layer", plan.partition[i].last_layer}});
  }
  // A listed partition (given) writes no rule, as plans did before the rule was recorded: they
  // read back and write again byte for byte.
  if (plan.config.partition.rule != PartitionRule::kGiven) {
    (*root)["partition_rule"] = PartitionRuleName(plan.config.partition.rule);
  }
  if (plan.config.partition.rule == PartitionRule::kEven) {
    const EvenSplitOptions& even = plan.config.partition.even;
    (*root)["even_split"] = {{"first_stage_layers", even.first_stage_layers},
                             {"last_stage_layers", even.last_stage_layers},
                             {"account_for_embedding", even.account_for_embedding},
                             {"account_for_loss", even.account_for_loss}};
  }
}

// One string per rank: ScheduleToText's lines.
json ActionsJson(const Schedule& schedule) {
  json actions = json::array();
  const std::string text = ScheduleToText(schedule);
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    actions.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return actions;
}

// The memory settings; FP8 and sharding keys only where they are set.
json MemoryJson(const MemoryConfig& config) {
  json memory = {{"weight_bytes_per_param", config.weight_bytes_per_param},
                 {"gradient_bytes_per_param", config.gradient_bytes_per_param},
                 {"optimizer_bytes_per_param", config.optimizer_bytes_per_param},
                 {"gradient_copy_bytes_per_param", config.gradient_copy_bytes_per_param},
                 {"zero", config.zero}};
  if (config.fp8_recipe != Fp8Recipe::kNone) {  // FP8 plans only
    memory["fp8_recipe"] = Fp8RecipeName(config.fp8_recipe);
    memory["fp8_weight_bytes_per_param"] = config.fp8_weight_bytes_per_param;
    memory["fp8_param_gather"] = config.fp8_param_gather;
  }
  // Only under --sharded-state fsdp2: plans with the ZeRO accounting are written as before.
  if (config.Fsdp2()) memory["sharded_state"] = ShardedStateName(config.sharded_state);
  // Only where a setting differs from FSDP's defaults: plans that keep them are written as
  // before.
  if (const ShardingConfig& sharding = config.sharding; sharding != ShardingConfig{}) {
    memory["sharding"] = {{"reshard_after_forward", sharding.reshard_after_forward},
                          {"prefetch", sharding.prefetch},
                          {"reduce_every_microbatch", sharding.reduce_every_microbatch},
                          {"shard_group", sharding.shard_group}};
  }
  return memory;
}

}  // namespace

std::string PlanToJson(const PlanFile& plan) {
  json root;
  root["format"] = kPlanFormat;
  root["model"] = {{"name", plan.model_name}, {"hash", plan.model_hash}};
  root["cluster"] = ClusterJson(plan.cluster);
  root["gpus"] = plan.gpus;
  root["pipeline_stages"] = plan.config.layout.pipeline_stages;
  root["data_parallel"] = plan.config.layout.data_parallel;
  if (plan.config.layout.tensor_parallel > 1) {
    root["tensor_parallel"] = plan.config.layout.tensor_parallel;
    root["sequence_parallel"] = plan.config.layout.sequence_parallel;
    root["tp_comm_overlap"] = plan.config.overlap.tp_comm_overlap;
  }
  if (plan.config.layout.context_parallel > 1) {  // absent at cp = 1: older plans read the same
    root["context_parallel"] = plan.config.layout.context_parallel;
    root["cp_algorithm"] = CpAlgorithmName(plan.config.layout.cp_algorithm);
  }
  if (plan.config.layout.expert_parallel > 1 || plan.config.layout.expert_tensor_parallel > 1) {
    root["expert_parallel"] = plan.config.layout.expert_parallel;
    root["expert_tensor_parallel"] = plan.config.layout.expert_tensor_parallel;
    if (plan.config.overlap.expert_overlap != ExpertOverlap::kAuto) {  // absent: auto
      root["ep_overlap"] = ExpertOverlapName(plan.config.overlap.expert_overlap);
    }
    // Absent: deepep, the default (--ep-dispatcher); nothing moves at ep = etp = 1.
    if (plan.config.layout.ExpertShards() > 1 &&
        plan.config.layout.expert_dispatcher != ExpertDispatcher::kDeepEp) {
      root["ep_dispatcher"] = ExpertDispatcherName(plan.config.layout.expert_dispatcher);
    }
  }
  root["microbatch_size"] = plan.config.microbatch_size;
  root["microbatches"] = plan.config.microbatches;
  root["global_batch"] = plan.global_batch;
  root["schedule"] = {{"name", plan.schedule_name},
                      {"virtual_stages", plan.config.layout.chunks},
                      {"iterations", plan.schedule.iterations},
                      {"flush", plan.schedule.flush}};
  AddRecomputeJson(plan.config, &root);
  AddPartitionJson(plan, &root);
  root["placement"] = plan.placement;
  root["actions"] = ActionsJson(plan.schedule);
  root["memory"] = MemoryJson(plan.config.memory);
  root["optimizer_step_us"] = NsToUs(plan.config.optimizer_step.time_ns);
  root["estimate_optimizer_step"] = plan.config.optimizer_step.estimate;
  root["overlap_grad_reduce"] = plan.config.overlap.overlap_grad_reduce;
  root["grad_bucket_params"] = plan.config.overlap.grad_bucket_params;
  root["predicted"] = ResultJson(plan.predicted);
  return Dump(root);
}

}  // namespace pipecast
