#include "frameworks/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "sim/schedule.h"
#include "sim/schedule_traits.h"
#include "sim/stage_costs.h"

namespace pipecast {
namespace {

// docs/frameworks.md names these commits; the tests' Megatron flag list is from the first.
constexpr char kMegatronSource[] =
    "github.com/NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553 "
    "(megatron/training/arguments.py)";
constexpr char kTorchtitanSource[] =
    "github.com/pytorch/torchtitan v0.2.2 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce "
    "(torchtitan/config/job_config.py, torchtitan/distributed/pipeline_parallel.py)";
constexpr char kDeepSpeedSource[] =
    "github.com/deepspeedai/DeepSpeed 0.19.6 edaa7221267243c7be7fb49c5d5f5c4fb97b4641 "
    "(deepspeed/runtime/config.py, constants.py, zero/config.py, pipe/engine.py)";

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Which of the model's layers are the embedding and the output layer (ExportRequest).
struct LayerRoles {
  bool has_embedding = false;
  bool has_output = false;
};

LayerRoles RolesOf(const std::vector<std::string>& names) {
  LayerRoles roles;
  if (names.size() >= 2) {
    roles.has_embedding = Lower(names.front()).find("embed") != std::string::npos;
    const std::string last = Lower(names.back());
    roles.has_output =
        last.find("head") != std::string::npos || last.find("output") != std::string::npos;
  }
  return roles;
}

bool IsTransformerLayer(int layer, int num_layers, const LayerRoles& roles) {
  if (layer == 0 && roles.has_embedding) return false;
  if (layer == num_layers - 1 && roles.has_output) return false;
  return true;
}

// The plan's shape, read once.
struct Shape {
  int t, p, d, v, mbs, m, zero;
  int64_t global_batch;
  bool sp;
  bool looped;         // stage s on rank s % p (Megatron's and torchtitan's loop placement)
  bool v_placement;    // rank r holds stages r and 2p-1-r
  bool bidirectional;  // DualPipe's two paths
  ScheduleKind kind;
  std::string schedule_name;
};

Shape ShapeOf(const PlanFile& plan) {
  const TrainingConfig& c = plan.config;
  Shape s{};
  s.t = c.layout.tensor_parallel;
  s.p = c.layout.pipeline_stages;
  s.d = c.layout.data_parallel;
  s.v = c.layout.chunks;
  s.mbs = c.microbatch_size;
  s.m = c.microbatches;
  s.zero = c.memory.zero;
  s.global_batch = plan.global_batch;  // size x m x d, checked when the plan was read or made
  s.sp = c.layout.sequence_parallel;
  s.kind = c.schedule;
  s.schedule_name = plan.schedule_name;
  s.bidirectional = plan.schedule.bidirectional;
  const std::vector<int>& ranks = plan.schedule.stage_rank;
  s.looped = !s.bidirectional;
  s.v_placement = !s.bidirectional && s.v == 2 && static_cast<int>(ranks.size()) == 2 * s.p;
  for (size_t st = 0; st < ranks.size(); ++st) {
    const int i = static_cast<int>(st);
    if (ranks[st] != i % s.p) s.looped = false;
    if (ranks[st] != (i < s.p ? i : 2 * s.p - 1 - i)) s.v_placement = false;
  }
  if (s.p == 1) s.v_placement = false;
  return s;
}

std::string PlanLabel(const PlanFile& plan, const Shape& s) {
  const int cp = plan.config.layout.context_parallel;
  return fmt::format("{}: t={}{}{} p={} d={} {} v={} mbs={} m={} zero={} recompute={}",
                     plan.model_name, s.t, s.sp ? " sp" : "",
                     cp > 1 ? fmt::format(" cp={}", cp) : "", s.p, s.d, s.schedule_name, s.v, s.mbs,
                     s.m, s.zero, RecomputeName(plan.config.recompute));
}

// --- Megatron-LM ------------------------------------------------------------------------------

// How Megatron-FSDP runs the plan's sharding settings (ShardingConfig) at ZeRO 2 and 3, as flags
// written through `flag`, and what it cannot run (megatron/core/distributed/
// distributed_data_parallel_config.py and fsdp/src/megatron_fsdp/megatron_fsdp.py at the
// commit kMegatronSource names).
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
  text += fmt::format("# flag names read from {}; docs/frameworks.md\n", kMegatronSource);
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

// --- torchtitan -------------------------------------------------------------------------------

// A TOML basic string.
std::string TomlString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// PyTorch's schedule class names (torch.distributed.pipelining get_schedule_class) for the
// kinds torchtitan builds without a CSV.
const char* TorchtitanScheduleName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "GPipe";
    case ScheduleKind::k1F1B:
      return "1F1B";
    case ScheduleKind::kInterleaved1F1B:
      return "Interleaved1F1B";
    case ScheduleKind::kLoopedBFS:
      return "LoopedBFS";
    case ScheduleKind::kInterleavedZB:
      return "InterleavedZeroBubble";
    case ScheduleKind::kZBV:
      return "ZBVZeroBubble";
    case ScheduleKind::kDualPipeV:
      return "DualPipeV";
    default:
      return nullptr;
  }
}

// [training]: the batch and sequence length.
std::vector<std::string> TorchtitanTraining(const Shape& s, const ExportRequest& request) {
  std::vector<std::string> training;
  // torchtitan's train.py: gradient accumulation steps = global / (local x d). With pipeline
  // parallelism the schedule splits local_batch_size into m micro-batches (one step); without,
  // each step is one micro-batch (m steps).
  training.push_back(fmt::format("local_batch_size = {}", s.p > 1 ? int64_t{s.mbs} * s.m : s.mbs));
  training.push_back(fmt::format("global_batch_size = {}", s.global_batch));
  if (request.sequence_length > 0) {
    training.push_back(fmt::format("seq_len = {}", request.sequence_length));
  }
  return training;
}

// Data parallelism: DDP (replicate) only alone; FSDP (shard) and HSDP otherwise.
void TorchtitanDataParallel(const PlanFile& plan, const Shape& s,
                            std::vector<std::string>* parallelism, FrameworkExport* out) {
  int replicate = 1, shard = 1;
  std::string reshard;
  if (s.d > 1) {
    const ShardingConfig& sharding = plan.config.memory.sharding;
    if (s.zero == 0 && s.t == 1 && s.p == 1) {
      replicate = s.d;
    } else {
      const int group = sharding.shard_group > 0 && sharding.shard_group < s.d && s.zero >= 2
                            ? sharding.shard_group
                            : s.d;
      shard = group;
      replicate = s.d / group;
      const bool reshard_after = s.zero == 3 && sharding.reshard_after_forward;
      reshard = reshard_after ? "always" : "never";
      if (s.zero == 0) {
        out->differences.push_back(
            "torchtitan runs DDP (replicated data parallelism, ZeRO-0) only without tensor or "
            "pipeline parallelism; the closest it runs, written here: FSDP over the d replicas "
            "with fsdp_reshard_after_forward = \"never\"");
      } else if (s.zero < 3) {
        out->differences.push_back(fmt::format(
            "torchtitan has no ZeRO-{} (it shards parameters, gradients and optimizer state "
            "together with FSDP); the closest it runs, written here: FSDP with "
            "fsdp_reshard_after_forward = \"never\" (parameters stay gathered from forward to "
            "backward)",
            s.zero));
      }
      if (s.zero >= 2 && !sharding.prefetch) {
        out->differences.push_back(
            "torchtitan's FSDP2 always prefetches the next layer's parameters (the plan runs "
            "gathers and reduce-scatters in turn with the compute, shard prefetch off); it "
            "has no setting to turn that off");
      }
      if (s.zero >= 2 && !sharding.reduce_every_microbatch && s.m > 1) {
        out->differences.push_back(
            "torchtitan reduce-scatters gradients after every micro-batch (FSDP2 without "
            "set_requires_gradient_sync(False)); the plan reduces once per step (no_sync), which "
            "torchtitan has no setting for");
      }
    }
  }
  parallelism->push_back(fmt::format("data_parallel_replicate_degree = {}", replicate));
  parallelism->push_back(fmt::format("data_parallel_shard_degree = {}", shard));
  if (!reshard.empty()) {
    parallelism->push_back("fsdp_reshard_after_forward = " + TomlString(reshard));
  }
}

// Tensor and context parallelism.
void TorchtitanTensorAndContext(const PlanFile& plan, const Shape& s,
                                std::vector<std::string>* parallelism, FrameworkExport* out) {
  parallelism->push_back(fmt::format("tensor_parallel_degree = {}", s.t));
  if (plan.config.layout.context_parallel > 1) {
    // PyTorch's context parallelism: "alltoall" rotates the K/V shards around the ring,
    // "allgather" gathers them (torchtitan's default).
    parallelism->push_back(
        fmt::format("context_parallel_degree = {}", plan.config.layout.context_parallel));
    parallelism->push_back(fmt::format(
        "context_parallel_rotate_method = {}",
        TomlString(plan.config.layout.cp_algorithm == CpAlgorithm::kAllGather ? "allgather"
                                                                              : "alltoall")));
  }
  if (s.t > 1 && !s.sp) {
    out->differences.push_back(
        "torchtitan's tensor parallelism always shards the norms over the sequence (sequence "
        "parallelism); the plan has it off: the closest torchtitan runs is with it on");
  }
  if (plan.config.overlap.tp_comm_overlap) {
    parallelism->push_back("enable_async_tensor_parallel = true");
    out->notes.push_back(
        "enable_async_tensor_parallel takes effect only with torch.compile ([compile] enable)");
  }
}

// The partition, as torchtitan's module names (generate_llm_fqn_per_model_part's).
std::string TorchtitanModuleFqns(const PlanFile& plan, const ExportRequest& request) {
  const int num_layers = static_cast<int>(request.layer_names.size());
  const LayerRoles roles = RolesOf(request.layer_names);
  std::string parts = "module_fqns_per_model_part = [";
  int next_block = 0;
  for (size_t st = 0; st < plan.partition.size(); ++st) {
    std::vector<std::string> names;
    if (st == 0) names.push_back("tok_embeddings");
    for (int l = plan.partition[st].first_layer; l <= plan.partition[st].last_layer; ++l) {
      if (IsTransformerLayer(l, num_layers, roles)) {
        names.push_back(fmt::format("layers.{}", next_block++));
      }
    }
    if (st + 1 == plan.partition.size()) {
      names.push_back("norm");
      names.push_back("output");
    }
    std::string row;
    for (const std::string& n : names) row += (row.empty() ? "" : ", ") + TomlString(n);
    parts += (st == 0 ? "[" : ", [") + row + "]";
  }
  return parts + "]";
}

// Pipeline parallelism: the schedule class, its CSV and the partition.
void TorchtitanPipeline(const PlanFile& plan, const ExportRequest& request, const Shape& s,
                        std::vector<std::string>* parallelism, FrameworkExport* out) {
  parallelism->push_back(fmt::format("pipeline_parallel_degree = {}", s.p));
  if (s.p > 1) {
    // The placement comes from the schedule class's name; the order from the CSV.
    const char* name = s.v_placement ? "ZBVZeroBubble" : s.v > 1 ? "Interleaved1F1B" : "1F1B";
    if (const char* builtin = TorchtitanScheduleName(s.kind); builtin != nullptr) {
      const bool v_kind = s.kind == ScheduleKind::kZBV || s.kind == ScheduleKind::kDualPipeV;
      const bool single = s.kind == ScheduleKind::kGPipe || s.kind == ScheduleKind::k1F1B;
      if (v_kind ? s.v_placement : single ? s.v == 1 : s.v > 1 && s.looped) name = builtin;
    }
    if (s.bidirectional || s.kind == ScheduleKind::kPipeDream) {
      out->differences.push_back(fmt::format(
          "torchtitan cannot run {} ({}); the closest it runs, written here: {} without the "
          "schedule CSV",
          s.schedule_name,
          s.bidirectional ? "two copies of the parameters, micro-batches from both ends"
                          : "asynchronous, no flush",
          name));
    }
    parallelism->push_back("pipeline_parallel_schedule = " + TomlString(name));
    if (!s.bidirectional && s.kind != ScheduleKind::kPipeDream) {
      if (request.schedule_csv.empty()) {
        out->notes.push_back(fmt::format(
            "no schedule CSV was written, so torchtitan runs its own {} order, not the plan's",
            name));
      } else {
        parallelism->push_back("pipeline_parallel_schedule_csv = " +
                               TomlString(request.schedule_csv));
      }
    }
    parallelism->push_back(fmt::format("pipeline_parallel_microbatch_size = {}", s.mbs));
    if (TraitsOf(s.kind).overlapped_pairs && !request.schedule_csv.empty()) {
      out->notes.push_back(
          "the CSV's overlapped F&B pairs (OVERLAP_F_B) run one after the other unless a custom "
          "OVERLAP_F_B function is registered: torchtitan registers its overlap only on "
          "ScheduleDualPipeV built without a CSV");
    }
    if (!s.bidirectional) parallelism->push_back(TorchtitanModuleFqns(plan, request));
  }
}

// [activation_checkpoint]: the mode and option closest to the plan's recomputation.
std::vector<std::string> TorchtitanCheckpoint(const TrainingConfig& config, FrameworkExport* out) {
  std::vector<std::string> checkpoint;
  switch (config.recompute) {
    case Recompute::kOff:
      checkpoint.push_back("mode = \"none\"");
      break;
    case Recompute::kSelective:
      checkpoint.push_back("mode = \"selective\"");
      checkpoint.push_back("selective_ac_option = \"op\"");
      out->notes.push_back(
          "torchtitan's selective (op) checkpointing keeps a policy's list of ops (matmuls, "
          "attention), not exactly the plan's recomputed attention core");
      break;
    case Recompute::kFull:
      checkpoint.push_back("mode = \"full\"");
      if (config.recompute_layers.method != RecomputeMethod::kEachLayer) {
        out->differences.push_back(fmt::format(
            "torchtitan has no Megatron-LM recompute method ({} {}); the closest it runs, "
            "written here: full checkpointing of every block",
            RecomputeMethodName(config.recompute_layers.method),
            config.recompute_layers.num_layers));
      }
      break;
    case Recompute::kOp:
      checkpoint.push_back("mode = \"selective\"");
      checkpoint.push_back("selective_ac_option = \"op\"");
      break;
    case Recompute::kEvery:
      checkpoint.push_back("mode = \"selective\"");
      checkpoint.push_back(
          fmt::format("selective_ac_option = \"{}\"", config.recompute_layers.every));
      break;
  }
  return checkpoint;
}

// The job config: comments (the plan, where the keys come from, what differs from the plan),
// then its three sections.
std::string TorchtitanText(const PlanFile& plan, const Shape& s, const FrameworkExport& out,
                           const std::vector<std::string>& training,
                           const std::vector<std::string>& parallelism,
                           const std::vector<std::string>& checkpoint) {
  std::string text = "# torchtitan job config for the pipecast plan " + PlanLabel(plan, s) + "\n";
  text += fmt::format("# keys read from {}; docs/frameworks.md\n", kTorchtitanSource);
  text += "# merge into your model's train config ([model], [optimizer], data are yours)\n";
  for (const std::string& d : out.differences) text += "# differs from the plan: " + d + "\n";
  auto section = [&](const char* title, const std::vector<std::string>& lines) {
    text += fmt::format("\n[{}]\n", title);
    for (const std::string& l : lines) text += l + "\n";
  };
  section("training", training);
  section("parallelism", parallelism);
  section("activation_checkpoint", checkpoint);
  return text;
}

FrameworkExport ExportTorchtitan(const PlanFile& plan, const ExportRequest& request) {
  const Shape s = ShapeOf(plan);
  FrameworkExport out;
  out.framework = Framework::kTorchtitan;
  const std::vector<std::string> training = TorchtitanTraining(s, request);
  std::vector<std::string> parallelism;
  TorchtitanDataParallel(plan, s, &parallelism, &out);
  TorchtitanTensorAndContext(plan, s, &parallelism, &out);
  TorchtitanPipeline(plan, request, s, &parallelism, &out);
  const std::vector<std::string> checkpoint = TorchtitanCheckpoint(plan.config, &out);
  out.text = TorchtitanText(plan, s, out, training, parallelism, checkpoint);
  return out;
}

// --- DeepSpeed --------------------------------------------------------------------------------

// How DeepSpeed runs the plan's sharding settings at ZeRO stage 2 and 3 (deepspeed/runtime/
// zero/config.py, engine.py at the commit kDeepSpeedSource names): keys of zero_optimization,
// and what it cannot run.
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
  DeepSpeedPipeline(plan, request, s, &j, &out);
  DeepSpeedCheckpointing(plan, &j, &out);
  out.text = j.dump(2) + "\n";
  return out;
}

}  // namespace

const char* FrameworkName(Framework framework) {
  switch (framework) {
    case Framework::kMegatron:
      return "megatron";
    case Framework::kTorchtitan:
      return "torchtitan";
    case Framework::kDeepSpeed:
      return "deepspeed";
  }
  return "";
}

std::vector<std::string> FrameworkNames() { return {"megatron", "torchtitan", "deepspeed"}; }

Result<Framework> ParseFramework(std::string_view name) {
  for (Framework f : {Framework::kMegatron, Framework::kTorchtitan, Framework::kDeepSpeed}) {
    if (name == FrameworkName(f)) return f;
  }
  return Status::InvalidArgument(
      fmt::format("unknown framework '{}': expected megatron, torchtitan or deepspeed", name));
}

const char* FrameworkSource(Framework framework) {
  switch (framework) {
    case Framework::kMegatron:
      return kMegatronSource;
    case Framework::kTorchtitan:
      return kTorchtitanSource;
    case Framework::kDeepSpeed:
      return kDeepSpeedSource;
  }
  return "";
}

std::vector<int> TransformerLayersPerStage(const PlanFile& plan,
                                           const std::vector<std::string>& layer_names) {
  const LayerRoles roles = RolesOf(layer_names);
  const int num_layers = static_cast<int>(layer_names.size());
  std::vector<int> out;
  for (const StageLayers& st : plan.partition) {
    int n = 0;
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      n += IsTransformerLayer(l, num_layers, roles);
    }
    out.push_back(n);
  }
  return out;
}

FrameworkExport ExportPlan(Framework framework, const PlanFile& plan,
                           const ExportRequest& request) {
  switch (framework) {
    case Framework::kMegatron:
      return ExportMegatron(plan, request);
    case Framework::kTorchtitan:
      return ExportTorchtitan(plan, request);
    case Framework::kDeepSpeed:
      return ExportDeepSpeed(plan, request);
  }
  return {};
}

}  // namespace pipecast
