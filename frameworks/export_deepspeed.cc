// DeepSpeed's JSON config for a plan (--export deepspeed): the batch, zero_optimization with
// the sharding settings, AutoTP, the pipeline engine's stages and partition, and
// activation_checkpointing (docs/frameworks.md).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "frameworks/export.h"
#include "frameworks/internal/export_shape.h"
#include "sim/schedule.h"
#include "sim/stage_costs.h"

namespace pipecast::internal {
namespace {

// How DeepSpeed runs the plan's sharding settings at ZeRO stage 2 and 3 (deepspeed/runtime/
// zero/config.py, engine.py at the commit FrameworkSource(Framework::kDeepSpeed) names): keys of
// zero_optimization, and what it cannot run.
void DeepSpeedSharding(const ShardingConfig& sharding, const Shape& s, int stage,
                       nlohmann::ordered_json* zero, FrameworkExport* out) {
  if (sharding.shard_group > 0 && sharding.shard_group < s.d) {
    if (stage == 3) {
      // MiCS: shard inside groups of this many ranks, replicate across them.
      (*zero)["mics_shard_size"] = sharding.shard_group;
    } else {
      out->differences.push_back(fmt::format(
          "DeepSpeed shards in groups (MiCS, mics_shard_size) only at stage 3; the plan's ZeRO-2 "
          "hybrid shard group of {} is written as stage 2 over all {} replicas",
          sharding.shard_group, s.d));
    }
  }
  if (stage == 3 && !sharding.prefetch) (*zero)["stage3_prefetch_bucket_size"] = 0;
  if (stage == 2 && !sharding.prefetch) {
    out->differences.push_back(
        "DeepSpeed ZeRO-2 always overlaps the reduce-scatter with the backward when "
        "overlap_comm is set; the plan runs it in turn (shard prefetch off)");
  }
  if (stage == 3 && !sharding.reshard_after_forward) {
    out->differences.push_back(
        "DeepSpeed ZeRO-3 releases gathered parameters after each forward (only those under "
        "stage3_param_persistence_threshold stay); it has no setting that keeps a layer's "
        "parameters for the backward (plan: reshard_after_forward off)");
  }
  if (!sharding.reduce_every_microbatch && s.m > 1) {
    out->differences.push_back(
        "DeepSpeed reduces gradients after every micro-batch at stages 2 and 3 (its no_sync "
        "refuses gradient partitioning); the plan reduces once per step (no_sync)");
  }
}

// zero_optimization: the stage (1 at most with pipeline parallelism), overlap and buckets, and
// the sharding settings.
nlohmann::ordered_json DeepSpeedZero(const PlanFile& plan, const Shape& s, FrameworkExport* out) {
  int stage = s.zero;
  if (s.p > 1 && s.zero >= 2) {
    stage = 1;
    out->differences.push_back(fmt::format(
        "DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3 (\"ZeRO-2 and ZeRO-3 are "
        "incompatible with pipeline parallelism\"); the closest it runs, written here: stage 1 "
        "(plan: ZeRO-{})",
        s.zero));
  }
  nlohmann::ordered_json zero;
  zero["stage"] = stage;
  if (stage >= 1) {
    zero["overlap_comm"] = plan.config.overlap.overlap_grad_reduce;
    if (plan.config.overlap.grad_bucket_params > 0) {
      zero["reduce_bucket_size"] = plan.config.overlap.grad_bucket_params;
    }
  }
  if (stage >= 2 && s.d > 1) DeepSpeedSharding(plan.config.memory.sharding, s, stage, &zero, out);
  return zero;
}

// tensor_parallel (AutoTP).
void DeepSpeedTensorParallel(const PlanFile& plan, const Shape& s, nlohmann::ordered_json* j,
                             FrameworkExport* out) {
  if (s.t > 1) {
    nlohmann::ordered_json tp;
    tp["autotp_size"] = s.t;
    if (plan.config.overlap.tp_comm_overlap) tp["tp_overlap_comm"] = true;
    (*j)["tensor_parallel"] = tp;
    out->notes.push_back(
        "tensor parallelism is written as AutoTP (tensor_parallel.autotp_size); with a "
        "PipelineModule DeepSpeed takes it from the model parallel unit (mpu) you pass instead");
    if (s.sp) {
      out->differences.push_back(
          "DeepSpeed has no Megatron-style sequence parallelism over the tensor-parallel GPUs; "
          "the closest it runs, written here: tensor parallelism without it");
    }
  }
}

// pipeline: stages, partition method and checkpoint interval, and the schedule it runs.
void DeepSpeedPipeline(const PlanFile& plan, const ExportRequest& request, const Shape& s,
                       nlohmann::ordered_json* j, FrameworkExport* out) {
  if (s.p > 1) {
    nlohmann::ordered_json pipe;
    pipe["stages"] = s.p;
    const std::vector<int> per_stage = TransformerLayersPerStage(plan, request.layer_names);
    const bool even =
        !per_stage.empty() && std::all_of(per_stage.begin(), per_stage.end(),
                                          [&](int n) { return n == per_stage.front(); });
    pipe["partition"] = even ? "uniform" : "parameters";
    // DeepSpeed's interval is the layers one checkpoint covers: Megatron's uniform method's N.
    if (plan.config.recompute != Recompute::kOff) {
      const RecomputeLayers& layers = plan.config.recompute_layers;
      pipe["activation_checkpoint_interval"] =
          plan.config.recompute == Recompute::kFull && layers.method == RecomputeMethod::kUniform
              ? layers.num_layers
              : 1;
    }
    (*j)["pipeline"] = pipe;
    if (s.v > 1 || s.bidirectional ||
        (s.kind != ScheduleKind::k1F1B && s.kind != ScheduleKind::kCustom)) {
      out->differences.push_back(fmt::format(
          "DeepSpeed's pipeline engine runs one schedule, its TrainSchedule (1F1B, one stage per "
          "rank), not {}; the closest it runs, written here: that schedule with {} stages",
          s.schedule_name, s.p));
    } else if (s.kind == ScheduleKind::kCustom) {
      out->differences.push_back(
          "DeepSpeed's pipeline engine runs only its TrainSchedule (1F1B), not a custom order; "
          "written here: that schedule");
    }
    std::string bounds;
    if (!s.bidirectional && static_cast<int>(plan.partition.size()) == s.p) {
      for (const StageLayers& st : plan.partition) {
        bounds +=
            (bounds.empty() ? "" : ", ") + fmt::format("{}-{}", st.first_layer, st.last_layer);
      }
      out->notes.push_back(fmt::format(
          "PipelineModule(num_stages={}, partition_method=...) takes the stage boundaries in "
          "code; the plan's layers per stage are {} ({})",
          s.p, bounds, even ? "an even split: partition_method=\"uniform\"" : "not even"));
    }
  }
}

// activation_checkpointing, and what differs from the plan's recomputation.
void DeepSpeedCheckpointing(const PlanFile& plan, nlohmann::ordered_json* j, FrameworkExport* out) {
  if (plan.config.recompute != Recompute::kOff) {
    nlohmann::ordered_json ac;
    ac["partition_activations"] = false;
    ac["contiguous_memory_optimization"] = false;
    ac["cpu_checkpointing"] = false;
    (*j)["activation_checkpointing"] = ac;
    if (plan.config.recompute == Recompute::kSelective || plan.config.recompute == Recompute::kOp ||
        plan.config.recompute == Recompute::kEvery) {
      out->differences.push_back(fmt::format(
          "DeepSpeed checkpoints whole layers (deepspeed.checkpointing), not {}; the closest it "
          "runs, written here: full recomputation of every layer",
          RecomputeSpec(plan.config.recompute, plan.config.recompute_layers)));
    }
  }
}

// Expert parallelism, said rather than written: DeepSpeed sets it in the model code
// (deepspeed/moe/layer.py, MoE(ep_size=...)) or through AutoEP's `expert_parallel` section
// (deepspeed/module_inject/auto_ep_config.py: enabled, autoep_size, expert_tensor_parallel_size),
// which needs the model's MoE modules matched by a preset or patterns this export does not know.
// Either dispatches with all_to_all_single of the permuted rows: no DeepEP.
void DeepSpeedExperts(const PlanFile& plan, FrameworkExport* out) {
  const ParallelLayout& l = plan.config.layout;
  if (l.expert_parallel == 1 && l.expert_tensor_parallel == 1) return;
  out->differences.push_back(fmt::format(
      "DeepSpeed's expert parallelism is set in the model code (deepspeed.moe.layer.MoE "
      "ep_size) or in AutoEP's expert_parallel section (enabled, autoep_size = {}, "
      "expert_tensor_parallel_size = {}, with the model's MoE modules matched), not written "
      "here{}",
      l.expert_parallel, l.expert_tensor_parallel,
      l.expert_parallel > 1 && l.expert_dispatcher == ExpertDispatcher::kDeepEp
          ? "; it has no DeepEP dispatcher: both dispatch with all_to_all_single of one row per "
            "token and expert (the plan's deepep is closest to --ep-dispatcher alltoall there)"
      : l.expert_parallel > 1 && l.expert_dispatcher == ExpertDispatcher::kAllGather
          ? "; it has no all-gather dispatcher: both dispatch with all_to_all_single of one row "
            "per token and expert (the plan's allgather is closest to --ep-dispatcher alltoall "
            "there)"
          : ""));
}

}  // namespace

FrameworkExport ExportDeepSpeed(const PlanFile& plan, const ExportRequest& request) {
  const Shape s = ShapeOf(plan);
  FrameworkExport out;
  out.framework = Framework::kDeepSpeed;
  nlohmann::ordered_json j;
  j["train_batch_size"] = s.global_batch;
  j["train_micro_batch_size_per_gpu"] = s.mbs;
  j["gradient_accumulation_steps"] = s.m;
  j["zero_optimization"] = DeepSpeedZero(plan, s, &out);
  DeepSpeedTensorParallel(plan, s, &j, &out);
  if (plan.config.layout.context_parallel > 1) {
    out.differences.push_back(fmt::format(
        "DeepSpeed has no ring or all-gather context parallelism (its sequence parallelism, "
        "Ulysses, is an all-to-all over the attention heads, set in the model code, not in this "
        "config); the plan splits each sequence over cp = {} GPUs: the closest written here runs "
        "without it, on {} x fewer GPUs per replica",
        plan.config.layout.context_parallel, plan.config.layout.context_parallel));
  }
  DeepSpeedExperts(plan, &out);
  DeepSpeedPipeline(plan, request, s, &j, &out);
  DeepSpeedCheckpointing(plan, &j, &out);
  out.text = j.dump(2) + "\n";
  return out;
}

}  // namespace pipecast::internal
