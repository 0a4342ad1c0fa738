#include "sim/training_config.h"

#include <fmt/format.h>

#include "sim/schedule_traits.h"

namespace pipecast {

namespace {

// Megatron-LM's parallel folding (docs/simulator.md "Expert parallelism"):
// a stage's t x cp x d GPUs hold the experts as etp x ep x edp.
Status CheckExpertLayout(const ParallelLayout& l) {
  if (l.expert_parallel < 1 || l.expert_parallel > kMaxExpertParallel) {
    return Status::InvalidArgument(
        fmt::format("--expert-parallel is {}: must be from 1 (every GPU holds every expert) to {}",
                    l.expert_parallel, kMaxExpertParallel));
  }
  if (l.expert_tensor_parallel < 1 || l.expert_tensor_parallel > kMaxExpertParallel) {
    return Status::InvalidArgument(fmt::format(
        "--expert-tensor-parallel is {}: must be from 1 (each expert whole on a GPU) to {}",
        l.expert_tensor_parallel, kMaxExpertParallel));
  }
  if (l.expert_dispatcher != ExpertDispatcher::kDeepEp &&
      l.expert_dispatcher != ExpertDispatcher::kAllToAll &&
      l.expert_dispatcher != ExpertDispatcher::kAllGather) {
    return Status::InvalidArgument("--ep-dispatcher is not deepep, alltoall or allgather");
  }
  const int64_t stage = int64_t{l.tensor_parallel} * l.context_parallel * l.data_parallel;
  const int64_t experts = int64_t{l.expert_parallel} * l.expert_tensor_parallel;
  if (stage % experts != 0) {
    return Status::InvalidArgument(fmt::format(
        "--expert-parallel {} x --expert-tensor-parallel {} = {} does not divide the {} GPUs of "
        "a stage (--tensor-parallel {} x --context-parallel {} x --data-parallel {}): the "
        "experts are folded over the same GPUs as etp x ep x expert-data-parallel; choose "
        "degrees whose product divides {}",
        l.expert_parallel, l.expert_tensor_parallel, experts, stage, l.tensor_parallel,
        l.context_parallel, l.data_parallel, stage));
  }
  return Status::Ok();
}

}  // namespace

Status OptimizerStep::Validate() const {
  if (time_ns < 0) {
    return Status::InvalidArgument("--optimizer-step-us is negative: must be >= 0");
  }
  return Status::Ok();
}

Status TrainingConfig::Validate() const {
  if (microbatch_size < 1) {
    return Status::InvalidArgument(
        fmt::format("--microbatch-size is {}: must be at least 1", microbatch_size));
  }
  if (layout.data_parallel < 1) {
    return Status::InvalidArgument(
        fmt::format("--data-parallel is {}: must be at least 1", layout.data_parallel));
  }
  if (layout.pipeline_stages < 0) {
    return Status::InvalidArgument(
        fmt::format("--stages is {}: must be at least 1", layout.pipeline_stages));
  }
  if (layout.chunks < 0) {
    return Status::InvalidArgument(
        fmt::format("--chunks is {}: must be at least 1", layout.chunks));
  }
  if (microbatches < 0) {
    return Status::InvalidArgument(
        fmt::format("--microbatches is {}: must be at least 1", microbatches));
  }
  PIPECAST_RETURN_IF_ERROR(optimizer_step.Validate());
  PIPECAST_RETURN_IF_ERROR(CheckRecompute(recompute, recompute_layers));
  PIPECAST_RETURN_IF_ERROR(partition.Validate());
  const int shard_group = memory.sharding.shard_group;
  if (shard_group > 0 && layout.data_parallel % shard_group != 0) {
    return Status::InvalidArgument(fmt::format(
        "--shard-group {} does not divide --data-parallel {}: hybrid sharding replicates whole "
        "groups; use a divisor of {}",
        shard_group, layout.data_parallel, layout.data_parallel));
  }
  if (layout.tensor_parallel < 1) {
    return Status::InvalidArgument(
        fmt::format("--tensor-parallel is {}: must be at least 1", layout.tensor_parallel));
  }
  if (layout.sequence_parallel && layout.tensor_parallel == 1) {
    return Status::InvalidArgument(
        "--sequence-parallel needs --tensor-parallel above 1: sequence parallelism splits the "
        "layernorms and dropouts over the tensor-parallel group");
  }
  if (overlap.tp_comm_overlap && layout.tensor_parallel == 1) {
    return Status::InvalidArgument(
        "--tp-comm-overlap needs --tensor-parallel above 1: there is no tensor-parallel "
        "communication to overlap");
  }
  if (!(overlap.overlap_factor > 0 && overlap.overlap_factor <= kMaxOverlapFactor)) {
    return Status::InvalidArgument(fmt::format(
        "--overlap-factor is {}: an overlapped F&B pair lasts factor x (F + B), so give a factor "
        "in (0, {}] (1: no overlap gain)",
        overlap.overlap_factor, kMaxOverlapFactor));
  }
  if (layout.context_parallel < 1 || layout.context_parallel > kMaxContextParallel) {
    return Status::InvalidArgument(
        fmt::format("--context-parallel is {}: must be from 1 (no context parallelism) to {}",
                    layout.context_parallel, kMaxContextParallel));
  }
  PIPECAST_RETURN_IF_ERROR(CheckExpertLayout(layout));
  PIPECAST_RETURN_IF_ERROR(CheckExpertOverlap());
  return memory.Validate();
}

const char* ExpertOverlapName(ExpertOverlap overlap) {
  switch (overlap) {
    case ExpertOverlap::kAuto:
      return "auto";
    case ExpertOverlap::kOn:
      return "on";
    case ExpertOverlap::kOff:
      return "off";
  }
  return "auto";
}

std::optional<ExpertOverlap> ParseExpertOverlap(std::string_view name) {
  if (name == "auto") return ExpertOverlap::kAuto;
  if (name == "on") return ExpertOverlap::kOn;
  if (name == "off") return ExpertOverlap::kOff;
  return std::nullopt;
}

bool TrainingConfig::ExpertOverlapOn() const {
  switch (overlap.expert_overlap) {
    case ExpertOverlap::kOn:
      return true;
    case ExpertOverlap::kOff:
      return false;
    case ExpertOverlap::kAuto:
      return schedule != ScheduleKind::kCustom && TraitsOf(schedule).overlapped_pairs;
  }
  return false;
}

bool TrainingConfig::CombinesForwardBackward() const {
  return ExpertOverlapOn() &&
         (schedule == ScheduleKind::k1F1B || schedule == ScheduleKind::kInterleaved1F1B);
}

Status TrainingConfig::CheckExpertOverlap() const {
  if (overlap.expert_overlap != ExpertOverlap::kOn) return Status::Ok();
  if (layout.expert_parallel < 2) {
    return Status::InvalidArgument(
        "--ep-overlap on needs --expert-parallel above 1: there is no expert all-to-all to hide "
        "(Megatron-LM refuses its overlap at ep = 1 too)");
  }
  const bool combined =
      schedule == ScheduleKind::k1F1B || schedule == ScheduleKind::kInterleaved1F1B;
  const bool pairs = schedule == ScheduleKind::kCustom || TraitsOf(schedule).overlapped_pairs;
  if (!combined && !pairs) {
    return Status::InvalidArgument(fmt::format(
        "--ep-overlap on with --schedule {}: the all-to-alls hide behind another micro-batch's "
        "compute only in overlapped F&B pairs: use interleaved (Megatron-LM's combined 1F1B), "
        "1f1b on one stage, dualpipe, dualpipev or a schedule text with pairs, or --ep-overlap "
        "off",
        ScheduleKindName(schedule)));
  }
  if (schedule == ScheduleKind::k1F1B && layout.pipeline_stages > 1) {
    return Status::InvalidArgument(fmt::format(
        "--ep-overlap on with --schedule 1f1b over {} stages: Megatron-LM runs its combined 1F1B "
        "over a pipeline only with virtual stages; use --schedule interleaved",
        layout.pipeline_stages));
  }
  if (combined && recompute == Recompute::kFull) {
    return Status::InvalidArgument(
        "--ep-overlap on with --recompute full: Megatron-LM's combined 1F1B refuses full "
        "recomputation; use --recompute selective or off");
  }
  if (combined && layout.expert_dispatcher == ExpertDispatcher::kAllGather) {
    return Status::InvalidArgument(
        "--ep-overlap on with --ep-dispatcher allgather: Megatron-LM's combined 1F1B "
        "(--overlap-moe-expert-parallel-comm) runs with the alltoall or flex dispatcher only; "
        "use --ep-dispatcher alltoall or deepep, or --ep-overlap off");
  }
  return Status::Ok();
}

MemoryConfig TrainingConfig::PerGpuMemory() const {
  return TensorParallelShare(memory, layout.tensor_parallel);
}

StageCostOptions StageCostOptionsFor(const TrainingConfig& config, const Cluster& cluster) {
  StageCostOptions o = StageCostOptionsFor(config, cluster.intra_node);
  o.cp_link = ContextParallelLink(config.layout, cluster);
  o.hbm_bytes_per_s = cluster.gpu.memory_bandwidth_gbps * 1e9;
  o.expert_parallel = config.layout.expert_parallel;
  o.expert_tensor_parallel = config.layout.expert_tensor_parallel;
  o.ep_dispatcher = config.layout.expert_dispatcher;
  o.ep_intra_node = cluster.intra_node;
  o.ep_inter_node = cluster.inter_node;
  o.ep_network_gbps_per_gpu = cluster.NetworkGbpsPerGpu();
  o.gpus_per_node = cluster.gpus_per_node;
  o.gpu_sms = cluster.gpu.sms;
  return o;
}

Link ContextParallelLink(const ParallelLayout& layout, const Cluster& cluster) {
  const int64_t span = int64_t{layout.tensor_parallel} * layout.context_parallel;
  if (span <= cluster.gpus_per_node) return cluster.intra_node;
  return cluster.LinkBetween(0, cluster.gpus_per_node);  // the ring crosses nodes
}

StageCostOptions StageCostOptionsFor(const TrainingConfig& config, const Link& tp_link) {
  StageCostOptions o;
  o.microbatch_size = config.microbatch_size;
  o.recompute = config.recompute;
  o.recompute_layers = config.recompute_layers;
  o.tensor_parallel = config.layout.tensor_parallel;
  o.sequence_parallel = config.layout.sequence_parallel;
  o.tp_comm_overlap = config.overlap.tp_comm_overlap;
  o.tp_link = tp_link;
  o.context_parallel = config.layout.context_parallel;
  o.cp_algorithm = config.layout.cp_algorithm;
  o.cp_link = tp_link;
  return o;
}

Status CheckTensorParallelFitsNode(int tensor_parallel, const Cluster& cluster) {
  if (cluster.gpus_per_node % tensor_parallel == 0) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("--tensor-parallel {} does not divide the {} GPUs of a node of {}: a stage's "
                  "tensor-parallel GPUs share a node; use a divisor of {}",
                  tensor_parallel, cluster.gpus_per_node, cluster.name, cluster.gpus_per_node));
}

}  // namespace pipecast
