#include "tools/simulator_tool.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "base/terminal_text.h"
#include "base/text_table.h"
#include "formats/cluster_select.h"
#include "formats/file_util.h"
#include "formats/formats.h"
#include "formats/plan.h"
#include "formats/result_json.h"
#include "formats/schedule_text.h"
#include "report/gantt.h"
#include "report/html_report.h"
#include "report/report.h"
#include "report/trace.h"
#include "sim/memory.h"
#include "sim/memory_partition.h"
#include "sim/memory_replay.h"
#include "sim/partition.h"
#include "sim/runtime_memory.h"
#include "sim/schedule.h"
#include "sim/schedule_costs.h"
#include "sim/schedule_traits.h"
#include "sim/simulator.h"
#include "tools/export_flags.h"

namespace pipecast {
namespace {

using Flags = SimulatorToolOptions;

// The simulator's line about a cluster chosen by default (SelectCluster's rule).
Result<Cluster> PickCluster(const Flags& flags, const Model& model,
                            const SimulatorProgress& progress) {
  PIPECAST_ASSIGN_OR_RETURN(auto s, SelectToolCluster(flags.training, model));
  if (s.source != ClusterSource::kFlag) {
    progress(fmt::format("cluster '{}' ({}; choose with --cluster)", s.cluster.name,
                         s.source == ClusterSource::kIdeal
                             ? "no communication cost, unlimited memory"
                             : "the GPU the model was measured on"));
  }
  return std::move(s.cluster);
}

// The configuration the flags give before the schedule is built: the flags
// bound to it, --schedule (kCustom for --schedule-in) and --recompute. The
// shared flags fill the rest once the schedule is known (errors in that
// order, as the user reads the flags).
// --recompute, --recompute-method, --recompute-num-layers and
// --recompute-modules into `config`
// (CheckRecompute: which go together).
Status RecomputeFromFlags(const Flags& flags, TrainingConfig* config) {
  if (!ParseRecomputeSpec(flags.recompute, &config->recompute, &config->recompute_layers)) {
    return Status::InvalidArgument(fmt::format(
        "--recompute {}: expected off, selective, full, op or every:K (K >= 1)", flags.recompute));
  }
  if (!flags.recompute_method.empty()) {
    std::optional<RecomputeMethod> method = ParseRecomputeMethod(flags.recompute_method);
    if (!method) {
      return Status::InvalidArgument(
          fmt::format("--recompute-method {}: expected uniform or block", flags.recompute_method));
    }
    config->recompute_layers.method = *method;
  }
  config->recompute_layers.num_layers = flags.recompute_num_layers;
  if (!flags.recompute_modules.empty()) {
    Result<unsigned> modules = ParseRecomputeModules(flags.recompute_modules);
    if (!modules.ok()) return modules.status();
    config->recompute_layers.modules = *modules;
  }
  return CheckRecompute(config->recompute, config->recompute_layers);
}

// --ep-overlap, --ep-dispatcher and the schedule kind --schedule or --schedule-in gives, into
// `config` (the kind left as it is when --schedule names none: ConfigFromFlags says so).
Status ExpertOverlapFromFlags(const Flags& flags, TrainingConfig* config) {
  std::optional<ExpertOverlap> overlap = ParseExpertOverlap(flags.ep_overlap);
  if (!overlap) {
    return Status::InvalidArgument(
        fmt::format("--ep-overlap {}: expected auto, on or off", flags.ep_overlap));
  }
  config->overlap.expert_overlap = *overlap;
  std::optional<ExpertDispatcher> dispatcher = ParseExpertDispatcher(flags.ep_dispatcher);
  if (!dispatcher) {
    return Status::InvalidArgument(fmt::format(
        "--ep-dispatcher {}: expected deepep, alltoall or allgather", flags.ep_dispatcher));
  }
  config->layout.expert_dispatcher = *dispatcher;
  if (!flags.schedule_in.empty()) {
    config->schedule = ScheduleKind::kCustom;
  } else if (Result<ScheduleKind> kind = ParseScheduleKind(flags.schedule); kind.ok()) {
    config->schedule = *kind;
  }
  return Status::Ok();
}

Result<TrainingConfig> ConfigFromFlags(const Flags& flags) {
  TrainingConfig config = flags.config;
  PIPECAST_RETURN_IF_ERROR(RecomputeFromFlags(flags, &config));
  PIPECAST_RETURN_IF_ERROR(ExpertOverlapFromFlags(flags, &config));
  ShardingConfig& sharding = config.memory.sharding;
  sharding.reshard_after_forward = flags.reshard_after_forward == "on";
  sharding.prefetch = flags.shard_prefetch == "on";
  sharding.reduce_every_microbatch = flags.reduce_every_microbatch == "on";
  if (!flags.schedule_in.empty()) {
    config.schedule = ScheduleKind::kCustom;
    return config;
  }
  auto kind = ParseScheduleKind(flags.schedule);
  if (!kind.ok()) return kind.status().WithPrefix("--schedule");
  config.schedule = *kind;
  return config;
}

// --partition is a list of layer ranges (it starts with a digit, or a space
// or dash before one) rather than a rule's name.
bool IsPartitionList(const std::string& partition) {
  const size_t first = partition.find_first_not_of(" \t");
  return first != std::string::npos &&
         (std::isdigit(static_cast<unsigned char>(partition[first])) || partition[first] == '-' ||
          partition[first] == ',');
}

Result<Schedule> PickSchedule(const Flags& flags, const TrainingConfig& config, int num_layers,
                              const SimulatorProgress& progress) {
  const int stages_flag = config.layout.pipeline_stages;
  if (!flags.schedule_in.empty()) {
    ScheduleTextInfo info;
    PIPECAST_ASSIGN_OR_RETURN(auto s, LoadScheduleText(flags.schedule_in, &info));
    for (const std::string& note : ScheduleTextNotes(info, config.memory.zero)) {
      progress(fmt::format("{}: {}", flags.schedule_in, note));
    }
    if (stages_flag > 0 && stages_flag != s.num_ranks) {
      return Status::InvalidArgument(fmt::format("--stages {} but '{}' has {}", stages_flag,
                                                 flags.schedule_in,
                                                 Count(s.num_ranks, "rank", "ranks")));
    }
    if (config.microbatches > 0 && config.microbatches != s.num_microbatches) {
      return Status::InvalidArgument(fmt::format("--microbatches {} but '{}' has {}",
                                                 config.microbatches, flags.schedule_in,
                                                 s.num_microbatches));
    }
    return s;
  }
  const ScheduleTraits& traits = TraitsOf(config.schedule);
  const int chunks = config.layout.chunks > 0 ? config.layout.chunks : traits.default_chunks;
  // Model stages per rank: v, but 1 for a bidirectional schedule (its second copy repeats them).
  const int model_chunks = traits.bidirectional ? 1 : chunks;
  int stages = stages_flag;
  if (stages == 0 && IsPartitionList(flags.partition)) {
    // --partition lists every model stage: p·v ranges (p for a bidirectional schedule).
    stages =
        (1 + static_cast<int>(std::count(flags.partition.begin(), flags.partition.end(), ','))) /
        model_chunks;
  }
  if (stages == 0) {
    return Status::InvalidArgument("give the number of pipeline stages with --stages P");
  }
  if (int64_t{stages} * model_chunks > num_layers && model_chunks > 1) {
    return Status::InvalidArgument(fmt::format(
        "--stages {} x --chunks {} = {} virtual stages but the model has only {}", stages, chunks,
        int64_t{stages} * chunks, Count(num_layers, "layer", "layers")));
  }
  if (stages > num_layers) {
    return Status::InvalidArgument(
        fmt::format("--stages {} but the model has only {}: use at most {}", stages,
                    Count(num_layers, "layer", "layers"), Count(num_layers, "stage", "stages")));
  }
  PIPECAST_ASSIGN_OR_RETURN(
      Schedule schedule,
      MakeSchedule(config.schedule, stages, config.microbatches > 0 ? config.microbatches : stages,
                   chunks));
  if (config.CombinesForwardBackward()) {
    TrainingConfig staged = config;
    staged.layout.pipeline_stages = stages;
    PIPECAST_RETURN_IF_ERROR(staged.CheckExpertOverlap());
    PIPECAST_RETURN_IF_ERROR(CombineForwardBackward(&schedule));
  }
  return schedule;
}

// What to simulate: the cluster, the schedule and the options.
struct Setup {
  Cluster cluster;
  Schedule schedule;
  SimOptions options;
};

Result<Setup> SetupShapeFromFlags(const Flags& flags, const Model& model,
                                  const SimulatorProgress& progress) {
  Setup s;
  PIPECAST_ASSIGN_OR_RETURN(s.cluster, PickCluster(flags, model, progress));
  PIPECAST_ASSIGN_OR_RETURN(auto config, ConfigFromFlags(flags));
  PIPECAST_ASSIGN_OR_RETURN(
      s.schedule, PickSchedule(flags, config, static_cast<int>(model.layers.size()), progress));
  // The schedule states p, v and m; a schedule text that is no complete
  // iteration is Simulate()'s to explain.
  TrainingConfig& c = s.options.config;
  c = std::move(config);
  PIPECAST_RETURN_IF_ERROR(FillTrainingConfig(flags.training, &c));
  c.layout.pipeline_stages = s.schedule.num_ranks;
  c.layout.chunks = std::max(1, s.schedule.ChunksPerRank());
  c.microbatches = s.schedule.num_microbatches / std::max(1, s.schedule.iterations);
  if (IsPartitionList(flags.partition)) {
    PIPECAST_ASSIGN_OR_RETURN(s.options.partition,
                              ParsePartition(flags.partition, static_cast<int>(model.layers.size()),
                                             s.schedule.NumModelStages()));
    c.partition.rule = PartitionRule::kGiven;
    return s;
  }
  // The default partition is the planner's, by the rule --partition names
  // (balanced by default: on time among the splits whose every stage's
  // estimate fits the GPU; even: Megatron-LM's), from one home
  // (DefaultPartition, sim/memory_partition.h).
  if (!flags.partition.empty()) {
    auto rule = ParsePartitionRule(flags.partition, "--partition");
    if (!rule.ok()) {
      return Status::InvalidArgument(
          fmt::format("--partition '{}': expected balanced, even, or layer ranges such as 0-3,4-7",
                      flags.partition));
    }
    c.partition.rule = *rule;
  }
  PIPECAST_RETURN_IF_ERROR(s.options.Validate());
  // A schedule text the layers cannot fill: Simulate() says what is wrong.
  const int num_layers = static_cast<int>(model.layers.size());
  if (s.schedule.num_stages < 1 || s.schedule.NumModelStages() > num_layers) return s;
  PIPECAST_ASSIGN_OR_RETURN(MemoryAwareSplit split,
                            DefaultPartition(model, s.cluster, s.schedule, c));
  const Bytes limit = MemoryLimitBytes(s.cluster.gpu);
  if (!split.fits && c.partition.rule == PartitionRule::kEven) {
    progress(fmt::format(
        "Megatron-LM's even split puts stage {} (layers {}-{}) at {:.2f} GiB, over the {:.2f} GiB "
        "limit by the planner's estimate: simulating it as asked",
        split.worst_stage, split.partition[split.worst_stage].first_layer,
        split.partition[split.worst_stage].last_layer, ToGiB(split.worst_parts.Total()),
        ToGiB(limit)));
  } else if (!split.fits) {
    progress(fmt::format(
        "no partition of the {} layers into {} stages fits the {:.2f} GiB limit by the planner's "
        "estimate: simulating the one that needs least memory (stage {} needs {:.2f} GiB); give "
        "--partition to choose",
        num_layers, s.schedule.num_ranks, ToGiB(limit), split.worst_stage,
        ToGiB(split.worst_parts.Total())));
  }
  s.options.partition = std::move(split.partition);
  return s;
}

// --memory-limit: a count of micro-batch activations ("16", "12.5") or a size with a unit
// ("40GiB", "512MiB", "80GB"), converted by the rank that keeps most per micro-batch.
Result<double> MemoryLimitActivations(const std::string& text, const Model& model, const Setup& s,
                                      ScheduleKind kind) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (!std::isfinite(value)) used = 0;  // inf, nan: not a limit
  const std::string unit = text.substr(used);
  static constexpr std::pair<const char*, double> kUnits[] = {
      {"", 0}, {"GiB", 1024.0 * 1024 * 1024}, {"MiB", 1024.0 * 1024}, {"GB", 1e9}, {"MB", 1e6}};
  for (const auto& [name, scale] : kUnits) {
    if (used == 0 || unit != name) continue;
    if (scale == 0) return value;
    auto per_mb = LargestRankActivationBytes(model, s.cluster, s.options, kind,
                                             s.schedule.num_ranks, s.schedule.ChunksPerRank());
    if (!per_mb.ok()) return per_mb.status().WithPrefix("--memory-limit");
    if (*per_mb <= 0) {
      return Status::InvalidArgument(fmt::format(
          "--memory-limit {}: the stages keep no activations to count it in; give a number of "
          "micro-batch activations instead",
          text));
    }
    return value * scale / static_cast<double>(*per_mb);
  }
  return Status::InvalidArgument(fmt::format(
      "--memory-limit '{}': expected a number of micro-batch activations (16) or a size with a "
      "unit (40GiB, 512MiB, 80GB, 500MB)",
      Excerpt(text)));
}

// The cost-driven kinds (zb-auto, zb-v-auto) order their ops by the stage costs of the chosen
// partition: built again once the partition is known, under --memory-limit.
Result<Setup> SetupFromFlags(const Flags& flags, const Model& model,
                             const SimulatorProgress& progress) {
  auto s = SetupShapeFromFlags(flags, model, progress);
  if (!s.ok()) return s;
  if (!flags.schedule_in.empty()) {
    if (flags.memory_limit.empty()) return s;
    return Status::InvalidArgument(
        fmt::format("--memory-limit applies to the schedules built from the stage costs (zb-auto, "
                    "zb-v-auto), not to --schedule-in {}, whose order is given: leave it out",
                    flags.schedule_in));
  }
  const ScheduleKind kind = s->options.config.schedule;
  if (TraitsOf(kind).generate_from_costs == nullptr) {
    if (flags.memory_limit.empty()) return s;
    return Status::InvalidArgument(
        fmt::format("--memory-limit applies to the schedules built from the stage costs (zb-auto, "
                    "zb-v-auto), not to {}: leave it out or choose one of those",
                    flags.schedule));
  }
  double limit = 0;  // the schedule's default
  if (!flags.memory_limit.empty()) {
    PIPECAST_ASSIGN_OR_RETURN(limit, MemoryLimitActivations(flags.memory_limit, model, *s, kind));
    // More than any schedule's cells (MakeSchedule's bound) is no limit a
    // stage could reach; inf and 1e308 once came back as "holds 1.00
    // activations, over --memory-limit 1e308" (issue 28).
    constexpr double kMaxActivations = 1 << 23;
    if (std::isfinite(limit) && limit > kMaxActivations) {
      return Status::InvalidArgument(fmt::format(
          "--memory-limit {} is {:.3g} micro-batch activations, more than any schedule holds "
          "(at most {:.0f}): give 1 to {:.0f}, or leave it out for the schedule's default",
          Excerpt(flags.memory_limit), limit, kMaxActivations, kMaxActivations));
    }
    if (!(limit >= 1)) {
      return Status::InvalidArgument(fmt::format(
          "--memory-limit {} is {:.3g} micro-batch activations: every GPU must hold at least 1 (a "
          "forward keeps its activations until its weight gradient W); give 1 or more ({} = 2P "
          "is ZB-2p's)",
          flags.memory_limit, limit, 2 * s->schedule.num_ranks));
    }
  }
  const int ranks = s->schedule.num_ranks, chunks = s->schedule.ChunksPerRank();
  PIPECAST_ASSIGN_OR_RETURN(
      auto costs, ScheduleCostsFor(model, s->cluster, s->options, kind, ranks, chunks, limit));
  PIPECAST_ASSIGN_OR_RETURN(s->schedule,
                            MakeSchedule(kind, ranks, s->schedule.num_microbatches, chunks, costs));
  return s;
}

// --plan: everything but the model comes from the plan. The plan stores only
// the model's hash, so a different model file is a warning, not an error.
Result<Setup> SetupFromPlan(const Flags& flags, const std::string& model_bytes,
                            const SimulatorProgress& progress) {
  auto plan = LoadPlan(flags.plan_path);
  if (!plan.ok()) return plan.status().WithPrefix("--plan");
  const std::string hash = ModelHash(model_bytes);
  if (hash != plan->model_hash) {
    progress(
        fmt::format("warning: {} has hash {}, but {} was made for model '{}' with hash {}: "
                    "the model file changed since the plan was made",
                    flags.model_path, hash, flags.plan_path, plan->model_name, plan->model_hash));
  }
  return Setup{plan->cluster, plan->schedule, PlanSimOptions(*plan)};
}

// The files the options name, after the simulation.
Status WriteOutputs(const Flags& flags, const Model& model, const std::string& model_bytes,
                    const Setup& setup, const SimResult& result,
                    const SimulatorProgress& progress) {
  if (!flags.schedule_out.empty()) {
    auto format = ParseScheduleFormat(flags.schedule_format);
    if (!format.ok()) return format.status().WithPrefix("--schedule-format");
    PIPECAST_RETURN_IF_ERROR(
        WriteFileAtomic(flags.schedule_out, ScheduleToFormat(setup.schedule, *format))
            .WithPrefix("--schedule-out"));
  }
  if (!flags.exports.empty()) {
    PIPECAST_ASSIGN_OR_RETURN(
        auto specs, ParseExportFlags(flags.exports, flags.schedule_out, flags.schedule_format));
    // The simulated run as a plan: the configuration, partition and schedule it used.
    const PlanFile plan = MakePlanFile(model.name, ModelHash(model_bytes), setup.cluster,
                                       setup.schedule, setup.options, result);
    PIPECAST_RETURN_IF_ERROR(WriteExports(specs, plan, model, progress));
  }
  if (!flags.trace_path.empty()) {
    PIPECAST_RETURN_IF_ERROR(WriteFileAtomicStreamed(flags.trace_path, [&](const TextSink& sink) {
                               WriteTraceJson(result, TraceOptions{}, sink);
                             }).WithPrefix("--trace"));
  }
  if (!flags.report_path.empty()) {
    const ReportInputs inputs =
        MakeReportInputs(model, setup.cluster, setup.schedule, setup.options, flags.command_line);
    PIPECAST_RETURN_IF_ERROR(
        WriteFileAtomic(flags.report_path, SimulationReportHtml(result, inputs))
            .WithPrefix("--report"));
  }
  return Status::Ok();
}

}  // namespace

namespace {

// Before any work: no output onto an input or onto another output.
Status CheckToolOutputs(const SimulatorToolOptions& flags) {
  std::vector<NamedPath> outputs;
  for (const NamedPath& p :
       {NamedPath{"--trace", flags.trace_path}, NamedPath{"--report", flags.report_path},
        NamedPath{"--schedule-out", flags.schedule_out}}) {
    if (!p.path.empty()) outputs.push_back(p);
  }
  PIPECAST_ASSIGN_OR_RETURN(
      auto specs, ParseExportFlags(flags.exports, flags.schedule_out, flags.schedule_format));
  for (const NamedPath& p : ExportOutputs(specs)) outputs.push_back(p);
  return CheckOutputs(outputs, {{"--model", flags.model_path},
                                {"--plan", flags.plan_path},
                                {"--schedule-in", flags.schedule_in},
                                {"--cluster", flags.training.cluster}});
}

}  // namespace

Status SimulatorToolOptions::Validate() const {
  if (auto specs = ParseExportFlags(exports, schedule_out, schedule_format); !specs.ok()) {
    return specs.status();
  }
  if (plan_path.empty()) {
    TrainingConfig with_flags = config;
    PIPECAST_RETURN_IF_ERROR(RecomputeFromFlags(*this, &with_flags));
    PIPECAST_RETURN_IF_ERROR(ExpertOverlapFromFlags(*this, &with_flags));
    return with_flags.Validate();
  }
  return config.Validate();
}

// The fullest rank's memory as the GPU reports it (sim/runtime_memory.h), for the text summary;
// "" when the GPU's memory is unlimited.
std::string DeviceMemorySection(const SimResult& result, const Cluster& cluster,
                                const TrainingConfig& config, const Schedule& schedule,
                                const std::optional<ReplayedMemory>& replay) {
  if (cluster.gpu.memory_bytes <= 0 || result.per_rank.empty()) return "";
  const StageResult* fullest = &result.per_rank.front();
  for (const StageResult& r : result.per_rank) {
    if (r.peak_memory_bytes > fullest->peak_memory_bytes) fullest = &r;
  }
  // Point-to-point pairs: the previous and next rank; a looped or V placement (v > 1) reaches
  // both from every rank.
  const int p = static_cast<int>(result.per_rank.size());
  const bool looped = static_cast<int>(schedule.stage_rank.size()) > p;
  int neighbours = 0;
  if (p == 2) {
    neighbours = 1;
  } else if (p > 2) {
    neighbours = looped || (fullest->rank > 0 && fullest->rank < p - 1) ? 2 : 1;
  }
  const DeviceMemory memory =
      replay ? DeviceMemoryFromReplay(
                   cluster, config, replay->allocated_peak, replay->reserved_peak,
                   fmt::format("replay of {}", MemoryReplayName(replay->replay)), neighbours)
             : DeviceMemoryFor(cluster, config, fullest->peak_memory_bytes, neighbours);
  return fmt::format(
             "\nmemory as the GPU reports it (nvidia-smi), rank {}, per GPU{}; estimated terms "
             "say so (docs/simulator.md):\n",
             fullest->rank,
             replay ? fmt::format(", from --memory-replay {} (reserved {:.2f} GiB)",
                                  MemoryReplayName(replay->replay), ToGiB(memory.ReservedBytes()))
                    : "") +
         DeviceMemoryText(memory);
}

namespace {

// The rank furthest over the memory limit, as a line; empty when all fit.
std::string OverMemory(const SimResult& result) {
  if (result.FitsMemory() || result.memory_limit_bytes <= 0) return "";
  const StageResult* worst = nullptr;
  for (const StageResult& r : result.per_rank) {
    if (worst == nullptr || r.peak_memory_bytes > worst->peak_memory_bytes) worst = &r;
  }
  if (worst == nullptr) return "";
  return fmt::format(
      "rank {} needs {:.2f} GiB, {:.1f}% of the {:.2f} GiB limit (capacity - reserve - margin): "
      "the configuration does not fit (exit 4; --allow-over-memory to exit 0)",
      worst->rank, ToGiB(worst->peak_memory_bytes),
      100.0 * static_cast<double>(worst->peak_memory_bytes) /
          static_cast<double>(result.memory_limit_bytes),
      ToGiB(result.memory_limit_bytes));
}

}  // namespace

Result<SimulatorToolResult> RunSimulatorTool(const SimulatorToolOptions& flags,
                                             const SimulatorProgress& progress) {
  PIPECAST_RETURN_IF_ERROR(CheckToolOutputs(flags));
  PIPECAST_ASSIGN_OR_RETURN(auto bytes, ReadFile(flags.model_path));
  PIPECAST_ASSIGN_OR_RETURN(auto model, ParseModel(bytes, flags.model_path));
  PIPECAST_ASSIGN_OR_RETURN(auto setup, flags.plan_path.empty()
                                            ? SetupFromFlags(flags, model, progress)
                                            : SetupFromPlan(flags, bytes, progress));
  // Always: the critical path in the summary and --json is derived from the timeline.
  setup.options.record_timeline = true;
  setup.options.critical_path = true;
  // --overlap-factor applies to a replayed plan too (a plan does not store it).
  setup.options.config.overlap.overlap_factor = flags.config.overlap.overlap_factor;
  PIPECAST_ASSIGN_OR_RETURN(std::string gpu_warning,
                            CheckModelOnCluster(model, flags.model_path, setup.cluster));
  if (!gpu_warning.empty()) progress(gpu_warning);
  const ParallelLayout& layout = setup.options.config.layout;
  const std::string dispatcher_warning =
      layout.expert_parallel > 1
          ? ModelDispatcherMismatch(model, flags.model_path, {layout.expert_dispatcher})
          : "";
  if (!dispatcher_warning.empty()) progress(dispatcher_warning);
  // --memory-replay: refused before any work when the configuration is not the replay's.
  std::optional<ReplayedMemory> replay;
  if (std::optional<MemoryReplay> kind = ParseMemoryReplay(flags.memory_replay); !kind) {
    return Status::InvalidArgument(
        fmt::format("--memory-replay {}: expected off or torchtitan-fsdp2", flags.memory_replay));
  } else if (*kind == MemoryReplay::kTorchtitanFsdp2) {
    PIPECAST_ASSIGN_OR_RETURN(replay,
                              ReplayTorchtitanFsdp2(model, setup.cluster, setup.options.config));
  }
  PIPECAST_ASSIGN_OR_RETURN(auto result,
                            Simulate(model, setup.cluster, setup.schedule, setup.options));
  if (replay) {
    const DeviceMemory device =
        DeviceMemoryFromReplay(setup.cluster, setup.options.config, replay->allocated_peak,
                               replay->reserved_peak, "replay", 0);
    result.memory_replay = MemoryReplayName(replay->replay);
    result.replay_reserved_peak_bytes = device.ReservedBytes();
    result.replay_allocated_peak_bytes = replay->allocated_peak;
    result.notes.push_back(
        ReplayedMemoryNote(*replay, device.ReservedBytes() - replay->reserved_peak));
  }
  if (!gpu_warning.empty()) result.notes.push_back(gpu_warning);
  if (!dispatcher_warning.empty()) result.notes.push_back(dispatcher_warning);
  PIPECAST_RETURN_IF_ERROR(WriteOutputs(flags, model, bytes, setup, result, progress));
  std::string out = flags.json ? ResultToJson(result) : ResultToText(result, setup.cluster);
  if (!flags.json) {
    out += DeviceMemorySection(result, setup.cluster, setup.options.config, setup.schedule, replay);
  }
  if (flags.gantt && !flags.json) {
    GanttOptions gantt;
    gantt.color = flags.gantt_color;
    gantt.max_columns = GanttCellsForWidth(flags.gantt_width);
    out += "\n" + GanttChart(result, gantt);
  }
  return SimulatorToolResult{std::move(out), OverMemory(result)};
}

}  // namespace pipecast
