// torchtitan's job config for a plan (--export torchtitan): [training], [parallelism] (data,
// tensor, context, expert and pipeline parallelism with the schedule class, its CSV and the
// partition's module names) and [activation_checkpoint], as TOML (docs/frameworks.md).
#include <fmt/format.h>

#include <string>
#include <vector>

#include "frameworks/export.h"
#include "frameworks/internal/export_shape.h"
#include "sim/schedule.h"
#include "sim/schedule_traits.h"
#include "sim/stage_costs.h"

namespace pipecast::internal {
namespace {

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

// Expert parallelism (torchtitan/config/job_config.py, Parallelism, and
// torchtitan/distributed/parallel_dims.py at the commit FrameworkSource names): the degrees, and
// at ep > 1 the dispatcher as expert_parallel_comm_backend: "deepep" (DeepEP's kernels) or
// "standard" (PyTorch's all-to-all of the permuted rows, Megatron-LM's alltoall counterpart,
// and the closest to its allgather).
void TorchtitanExperts(const PlanFile& plan, const Shape& s, std::vector<std::string>* parallelism,
                       FrameworkExport* out) {
  const ParallelLayout& l = plan.config.layout;
  if (l.expert_parallel == 1 && l.expert_tensor_parallel == 1) return;
  parallelism->push_back(fmt::format("expert_parallel_degree = {}", l.expert_parallel));
  parallelism->push_back(
      fmt::format("expert_tensor_parallel_degree = {}", l.expert_tensor_parallel));
  if (l.expert_parallel > 1) {
    parallelism->push_back(fmt::format(
        "expert_parallel_comm_backend = {}",
        TomlString(l.expert_dispatcher == ExpertDispatcher::kDeepEp ? "deepep" : "standard")));
    if (l.expert_dispatcher == ExpertDispatcher::kAllGather) {
      out->differences.push_back(
          "torchtitan has no all-gather dispatcher (expert_parallel_comm_backend is standard or "
          "deepep); the closest, written here: standard, an all-to-all of one row per token and "
          "expert");
    }
    if (l.expert_tensor_parallel != 1 && l.expert_tensor_parallel != s.t) {
      out->differences.push_back(fmt::format(
          "torchtitan runs expert tensor parallelism only at etp = 1 or etp = t "
          "(parallel_dims.py); the plan's etp = {} with t = {} is written as planned and "
          "torchtitan refuses it",
          l.expert_tensor_parallel, s.t));
    }
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
  TorchtitanExperts(plan, s, parallelism, out);
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
          config.recompute_layers.modules == 0
              ? std::string("torchtitan's selective (op) checkpointing keeps a policy's list of "
                            "ops (matmuls, attention), not exactly the plan's recomputed "
                            "attention core")
              : fmt::format("torchtitan's selective (op) checkpointing keeps a policy's list of "
                            "ops (matmuls, attention), not the plan's Megatron-LM modules ({})",
                            RecomputeModulesName(config.recompute_layers.modules)));
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
  text += fmt::format("# keys read from {}; docs/frameworks.md\n",
                      FrameworkSource(Framework::kTorchtitan));
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

}  // namespace

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

}  // namespace pipecast::internal
