// Megatron-LM's arguments for a plan (--export megatron): the layout and batch, the schedule
// it runs, the partition, recomputation, the expert degrees and dispatcher, ZeRO through the
// distributed optimizer or Megatron-FSDP, and the overlap switches, one argument a line
// (docs/frameworks.md).
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "frameworks/export.h"
#include "frameworks/internal/export_shape.h"
#include "sim/schedule.h"
#include "sim/stage_costs.h"

namespace pipecast::internal {
namespace {

// How Megatron-FSDP runs the plan's sharding settings (ShardingConfig) at ZeRO 2 and 3, as flags
// written through `flag`, and what it cannot run (megatron/core/distributed/
// distributed_data_parallel_config.py and fsdp/src/megatron_fsdp/megatron_fsdp.py at the
// commit FrameworkSource(Framework::kMegatron) names).
template <typename Flag>
void MegatronFsdpSharding(const ShardingConfig& sharding, bool overlap_grad_reduce, const Shape& s,
                          Flag&& flag, FrameworkExport* out) {
  // HSDP: shard inside groups, replicate across the d / group instances.
  if (sharding.shard_group > 0 && sharding.shard_group < s.d) {
    flag("--num-distributed-optimizer-instances", std::to_string(s.d / sharding.shard_group));
    flag("--outer-dp-sharding-strategy", "no_shard");
  }
  // Gathers beside the compute; Megatron-LM takes --overlap-param-gather only with
  // --overlap-grad-reduce (arguments.py).
  if (sharding.prefetch && overlap_grad_reduce) flag("--overlap-param-gather");
  if (s.zero == 3 && !sharding.reshard_after_forward) {
    out->differences.push_back(
        "Megatron-FSDP's optim_grads_params frees gathered parameters after each forward; it "
        "has no setting that keeps them for the backward (plan: reshard_after_forward off); "
        "the closest, written here: optim_grads_params, which gathers again in the backward");
  }
  if (!sharding.reduce_every_microbatch && s.m > 1) {
    out->differences.push_back(
        "Megatron-FSDP reduce-scatters sharded gradients after every micro-batch (its no_sync "
        "is a no-op when gradients are sharded); the plan reduces once per step (no_sync): the "
        "closest, written here, reduces every micro-batch");
  }
}

// Megatron-LM --pipeline-model-parallel-layout: stages split by '|', E the
// embedding on the first, L the loss on the last, one t per decoder layer,
// in Megatron's virtual-stage order (stage s on rank s % p). Written out, not
// as Megatron's `t*n` shorthand, so `$(grep -v '^#' FILE)` passes it as one
// word with no '*' for the shell to expand and no quotes to keep.
std::string MegatronLayout(const std::vector<int>& per_stage) {
  std::string out;
  for (size_t s = 0; s < per_stage.size(); ++s) {
    if (s > 0) out += '|';
    if (s == 0) out += 'E';
    out += std::string(per_stage[s], 't');
    if (s + 1 == per_stage.size()) out += 'L';
  }
  return out;
}

// Megatron-LM's arguments in the order they are written: a name and its value ("" for a
// switch), added as flag(name, value).
struct MegatronFlags {
  std::vector<std::pair<std::string, std::string>> list;
  void operator()(std::string name, std::string value = "") {
    list.emplace_back(std::move(name), std::move(value));
  }
};

// The layout and batch.
void MegatronLayoutFlags(const PlanFile& plan, const ExportRequest& request, const Shape& s,
                         MegatronFlags& flag) {
  flag("--tensor-model-parallel-size", std::to_string(s.t));
  flag("--pipeline-model-parallel-size", std::to_string(s.p));
  if (s.sp) flag("--sequence-parallel");
  if (plan.config.layout.context_parallel > 1) {
    flag("--context-parallel-size", std::to_string(plan.config.layout.context_parallel));
    flag("--cp-comm-type",
         plan.config.layout.cp_algorithm == CpAlgorithm::kAllGather ? "all_gather" : "p2p");
  }
  if (plan.config.layout.expert_parallel > 1 || plan.config.layout.expert_tensor_parallel > 1) {
    flag("--expert-model-parallel-size", std::to_string(plan.config.layout.expert_parallel));
    // pipecast's etp (1 unless set) stated: Megatron-LM's default is the tensor-parallel size.
    flag("--expert-tensor-parallel-size",
         std::to_string(plan.config.layout.expert_tensor_parallel));
  }
  // The dispatcher at ep > 1 (megatron/core/transformer/transformer_config.py at the commit
  // FrameworkSource names): moe_token_dispatcher_type is allgather (Megatron-LM's default),
  // alltoall or flex; flex's backend is deepep by default, written out. --moe-enable-deepep
  // still parses there but is deprecated for --moe-flex-dispatcher-backend deepep.
  if (plan.config.layout.expert_parallel > 1) {
    if (plan.config.layout.expert_dispatcher == ExpertDispatcher::kAllToAll) {
      flag("--moe-token-dispatcher-type", "alltoall");
    } else if (plan.config.layout.expert_dispatcher == ExpertDispatcher::kAllGather) {
      flag("--moe-token-dispatcher-type", "allgather");
    } else {
      flag("--moe-token-dispatcher-type", "flex");
      flag("--moe-flex-dispatcher-backend", "deepep");
    }
  }
  // The expert capacity the model was estimated at (profiler analytic --moe-capacity-factor):
  // --moe-expert-capacity-factor and --moe-pad-expert-input-to-capacity (transformer_config.py:
  // padding needs the factor). Dropped tokens go by the router's probs, Megatron-LM's default
  // --moe-token-drop-policy.
  if (request.moe_capacity_factor) {
    flag("--moe-expert-capacity-factor", fmt::format("{}", *request.moe_capacity_factor));
    if (request.moe_pad_to_capacity) flag("--moe-pad-expert-input-to-capacity");
  }
  flag("--micro-batch-size", std::to_string(s.mbs));
  flag("--global-batch-size", std::to_string(s.global_batch));
  if (request.sequence_length > 0) flag("--seq-length", std::to_string(request.sequence_length));
}

// The schedule: Megatron-LM runs 1F1B (v = 1) and interleaved 1F1B (v > 1), and no pipeline
// schedule at p = 1.
void MegatronScheduleDifferences(const Shape& s, FrameworkExport* out) {
  const bool exact_schedule = s.p == 1 || (s.v == 1 && s.kind == ScheduleKind::k1F1B) ||
                              (s.v > 1 && s.looped && s.kind == ScheduleKind::kInterleaved1F1B);
  if (!exact_schedule) {
    const std::string closest =
        s.v > 1 ? fmt::format("interleaved 1F1B with {} virtual stages per rank", s.v) : "1F1B";
    out->differences.push_back(fmt::format(
        "Megatron-LM has no {} schedule (it runs 1F1B and interleaved 1F1B); the closest it "
        "runs, written here: {}",
        s.schedule_name, closest));
    if (s.v > 1 && !s.looped) {
      out->differences.push_back(fmt::format(
          "Megatron-LM places virtual stage s on rank s % p, not in the plan's {} placement: the "
          "stages keep their layers, but rank r holds stages r, r+p, ... instead",
          s.bidirectional ? "bidirectional" : "V"));
    }
  }
}

// The partition. An even split needs no flag (or only --num-layers-per-virtual-pipeline-stage);
// uneven first and last stages at v = 1 have their own flags; anything else is a layout.
void MegatronPartitionFlags(const PlanFile& plan, const ExportRequest& request, const Shape& s,
                            MegatronFlags& flag, FrameworkExport* out) {
  const std::vector<int> per_stage = TransformerLayersPerStage(plan, request.layer_names);
  int total = 0;
  for (int n : per_stage) total += n;
  flag("--num-layers", std::to_string(total));
  if (s.p > 1 && static_cast<int>(per_stage.size()) == s.p * s.v && !s.bidirectional) {
    const bool even = std::all_of(per_stage.begin(), per_stage.end(),
                                  [&](int n) { return n == per_stage.front(); });
    if (even) {
      if (s.v > 1) flag("--num-layers-per-virtual-pipeline-stage", std::to_string(per_stage[0]));
    } else if (s.v == 1 && (s.p == 2 || std::all_of(per_stage.begin() + 1, per_stage.end() - 1,
                                                    [&](int n) { return n == per_stage[1]; }))) {
      const int middle = s.p == 2 ? -1 : per_stage[1];
      if (per_stage.front() != middle) {
        flag("--decoder-first-pipeline-num-layers", std::to_string(per_stage.front()));
      }
      if (per_stage.back() != middle) {
        flag("--decoder-last-pipeline-num-layers", std::to_string(per_stage.back()));
      }
    } else {
      flag("--pipeline-model-parallel-layout", MegatronLayout(per_stage));
    }
  } else if (s.p > 1) {
    out->differences.push_back(
        "Megatron-LM cannot express this partition (a bidirectional schedule's two copies); the "
        "closest it runs, written here: the even split of --num-layers over p stages");
  }
}

// Recomputation: the granularity, method and layers.
void MegatronRecomputeFlags(const TrainingConfig& config, MegatronFlags& flag,
                            FrameworkExport* out) {
  switch (config.recompute) {
    case Recompute::kOff:
      break;
    case Recompute::kSelective:
      flag("--recompute-granularity", "selective");
      if (config.recompute_layers.modules != 0) {
        // Megatron-LM's list flag (nargs '*'): the names separated by spaces.
        std::string modules = RecomputeModulesName(config.recompute_layers.modules);
        std::replace(modules.begin(), modules.end(), ',', ' ');
        flag("--recompute-modules", modules);
      }
      break;
    case Recompute::kFull: {
      const RecomputeLayers& layers = config.recompute_layers;
      flag("--recompute-granularity", "full");
      if (layers.method == RecomputeMethod::kEachLayer) {
        flag("--recompute-method", "uniform");
        flag("--recompute-num-layers", "1");
      } else {
        flag("--recompute-method", RecomputeMethodName(layers.method));
        flag("--recompute-num-layers", std::to_string(layers.num_layers));
      }
      break;
    }
    case Recompute::kOp:
      flag("--recompute-granularity", "selective");
      out->differences.push_back(
          "Megatron-LM has no per-op policy (save the matmul outputs, recompute the rest); the "
          "closest it runs, written here: selective recomputation of the attention core");
      break;
    case Recompute::kEvery:
      flag("--recompute-granularity", "full");
      flag("--recompute-method", "uniform");
      flag("--recompute-num-layers", "1");
      out->differences.push_back(fmt::format(
          "Megatron-LM cannot checkpoint every {}-th layer only; the closest it runs, written "
          "here: full recomputation of every layer (more recomputation, less memory)",
          config.recompute_layers.every));
      break;
  }
}

// ZeRO: the distributed optimizer is ZeRO-1; Megatron-FSDP shards gradients (2) and
// parameters (3), written only without pipeline parallelism. Then the overlap switches.
void MegatronDataParallelFlags(const PlanFile& plan, const Shape& s, MegatronFlags& flag,
                               FrameworkExport* out) {
  if (s.d > 1 && s.zero >= 1) {
    if (s.zero == 1) {
      flag("--use-distributed-optimizer");
    } else if (s.p == 1) {
      flag("--use-megatron-fsdp");
      flag("--data-parallel-sharding-strategy", s.zero == 2 ? "optim_grads" : "optim_grads_params");
      MegatronFsdpSharding(plan.config.memory.sharding, plan.config.overlap.overlap_grad_reduce, s,
                           flag, out);
    } else {
      flag("--use-distributed-optimizer");
      out->differences.push_back(fmt::format(
          "ZeRO-{} with pipeline parallelism: Megatron-LM shards gradients and parameters only "
          "in Megatron-FSDP, which this export does not combine with p > 1; the closest, written "
          "here: --use-distributed-optimizer (ZeRO-1)",
          s.zero));
    }
  }
  const OverlapSettings& overlap = plan.config.overlap;
  if (s.d > 1 && overlap.overlap_grad_reduce) flag("--overlap-grad-reduce");
  if (s.d > 1 && overlap.grad_bucket_params > 0) {
    flag("--ddp-bucket-size", std::to_string(overlap.grad_bucket_params));
  }
  if (overlap.tp_comm_overlap) flag("--tp-comm-overlap");
  // The combined 1F1B (docs/simulator.md "Expert all-to-all overlap"), as Megatron's MoE guide
  // enables it.
  if (plan.config.CombinesForwardBackward() && plan.config.layout.expert_parallel > 1) {
    flag("--overlap-moe-expert-parallel-comm");
    flag("--delay-wgrad-compute");
  }
}

// The arguments file: comments (the plan, where the names come from, the world size, what
// differs from the plan), then one argument a line.
std::string MegatronText(const PlanFile& plan, const Shape& s, const FrameworkExport& out,
                         const MegatronFlags& flags) {
  std::string text = "# Megatron-LM arguments for the pipecast plan " + PlanLabel(plan, s) + "\n";
  text += fmt::format("# flag names read from {}; docs/frameworks.md\n",
                      FrameworkSource(Framework::kMegatron));
  text += fmt::format(
      "# world size: {} GPUs (Megatron-LM takes d = world size / (t x {}p) = {} from the "
      "launcher)\n",
      int64_t{s.t} * s.p * s.d * plan.config.layout.context_parallel,
      plan.config.layout.context_parallel > 1 ? "cp x " : "", s.d);
  text +=
      "# use: pretrain_gpt.py $(grep -v '^#' THIS_FILE) with your model, data, optimizer "
      "and precision flags\n";
  for (const std::string& d : out.differences) text += "# differs from the plan: " + d + "\n";
  for (const auto& [name, value] : flags.list) {
    text += value.empty() ? name + "\n" : name + " " + value + "\n";
  }
  return text;
}

}  // namespace

FrameworkExport ExportMegatron(const PlanFile& plan, const ExportRequest& request) {
  const Shape s = ShapeOf(plan);
  FrameworkExport out;
  out.framework = Framework::kMegatron;
  MegatronFlags flags;
  MegatronLayoutFlags(plan, request, s, flags);
  MegatronScheduleDifferences(s, &out);
  MegatronPartitionFlags(plan, request, s, flags, &out);
  MegatronRecomputeFlags(plan.config, flags, &out);
  MegatronDataParallelFlags(plan, s, flags, &out);
  out.text = MegatronText(plan, s, out, flags);
  return out;
}

}  // namespace pipecast::internal
