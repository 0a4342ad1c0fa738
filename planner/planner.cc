#include "planner/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "base/huge_pages.h"
#include "planner/passes.h"
#include "sim/memory_partition.h"
#include "sim/schedule_costs.h"
#include "sim/schedule_traits.h"
#include "sim/totals.h"

namespace pipecast {

Status PlannerOptions::Validate() const {
  if (gpus < 1) {
    return Status::InvalidArgument(fmt::format("--gpus is {}: need at least 1 GPU", gpus));
  }
  if (pipeline_stages < 0 || (pipeline_stages > 0 && gpus % pipeline_stages != 0)) {
    return Status::InvalidArgument(fmt::format(
        "--stages {} does not divide --gpus {}: the GPUs are t tensor-parallel x p pipeline "
        "stages x d replicas",
        pipeline_stages, gpus));
  }
  if (global_batch < 0) {
    return Status::InvalidArgument(
        fmt::format("--global-batch is {}: must be at least 1", global_batch));
  }
  if (partition_rules.empty()) {
    return Status::InvalidArgument("--partition: give balanced, even or both");
  }
  for (PartitionRule rule : partition_rules) {
    if (rule == PartitionRule::kGiven) {
      return Status::InvalidArgument(
          "--partition: the planner makes the partition; give balanced, even or both");
    }
  }
  const bool searches_even = std::find(partition_rules.begin(), partition_rules.end(),
                                       PartitionRule::kEven) != partition_rules.end();
  PIPECAST_RETURN_IF_ERROR(
      (PartitionSetting{searches_even ? PartitionRule::kEven : PartitionRule::kBalanced, even})
          .Validate());
  for (int v : chunks) {
    if (v < 2) {
      return Status::InvalidArgument(
          fmt::format("--chunks has {}: chunked schedules take at least 2 chunks per GPU", v));
    }
  }
  for (int size : microbatch_sizes) {
    if (size < 1) {
      return Status::InvalidArgument(
          fmt::format("--microbatch-sizes has {}: sizes must be at least 1", size));
    }
  }
  for (int level : zero_levels) {
    if (level < 0 || level > kMaxZeroLevel) {
      return Status::InvalidArgument(
          fmt::format("--zero has {}: ZeRO levels are 0, 1, 2 and 3", level));
    }
  }
  // --sharded-state fsdp2 is pinned, never searched: it describes a framework (FSDP2), not a
  // setting a run chooses; every candidate runs at ZeRO 3 with a reduce-scatter per micro-batch.
  MemoryConfig checked = memory;
  if (memory.Fsdp2()) {
    for (int level : zero_levels) {
      if (level != kMaxZeroLevel) {
        return Status::InvalidArgument(fmt::format(
            "--sharded-state fsdp2 needs --zero 3, and --zero has {}: FSDP2 shards the "
            "parameters, gradients and optimizer state (give --zero 3 or leave --zero out)",
            level));
      }
    }
    if (sharding.reduce_every_microbatch != Choice::kOn) {
      return Status::InvalidArgument(
          "--sharded-state fsdp2 needs --reduce-every-microbatch on: its sharded gradients are "
          "reduce-scattered in each backward");
    }
    checked.zero = kMaxZeroLevel;
  }
  PIPECAST_RETURN_IF_ERROR(checked.Validate());
  if (top_k < 0) return Status::InvalidArgument("--top must be >= 0");
  PIPECAST_RETURN_IF_ERROR(CheckTensorParallelChoices(tensor_parallel, gpus, sequence_parallel,
                                                      overlap.tp_comm_overlap));
  PIPECAST_RETURN_IF_ERROR(CheckContextParallelChoices(context_parallel, gpus));
  for (const auto& [degrees, flag] :
       {std::pair{&expert_parallel, "--expert-parallel"},
        std::pair{&expert_tensor_parallel, "--expert-tensor-parallel"}}) {
    for (int e : *degrees) {
      if (e < 1 || e > kMaxExpertParallel || (gpus > 0 && e > gpus)) {
        return Status::InvalidArgument(
            fmt::format("{} has {}: degrees must be from 1 to the GPUs ({})", flag, e, gpus));
      }
    }
  }
  if (expert_dispatchers.empty()) {
    return Status::InvalidArgument("--ep-dispatcher: no dispatcher to try (deepep, alltoall)");
  }
  if (pipeline_stages < 0 || data_parallel < 0 || microbatches < 0) {
    return Status::InvalidArgument(
        "--pipeline-stages, --data-parallel and --microbatches must be at least 1 when given");
  }
  return optimizer_step.Validate();
}

Status CheckContextParallelChoices(const std::vector<int>& context_parallel, int gpus) {
  for (int cp : context_parallel) {
    if (cp < 1 || cp > kMaxContextParallel) {
      return Status::InvalidArgument(fmt::format(
          "--context-parallel has {}: degrees must be from 1 to {}", cp, kMaxContextParallel));
    }
    if (gpus > 0 && (cp > gpus || gpus % cp != 0)) {
      return Status::InvalidArgument(
          fmt::format("--context-parallel {} {} --gpus {}: t x cp x p x d must equal the GPUs, "
                      "so cp must divide N",
                      cp, cp > gpus ? "is more than" : "does not divide", gpus));
    }
  }
  return Status::Ok();
}

Status CheckTensorParallelChoices(const std::vector<int>& tensor_parallel, int gpus,
                                  PlannerOptions::SequenceParallel sequence_parallel,
                                  bool tp_comm_overlap) {
  for (int t : tensor_parallel) {
    if (t < 1) {
      return Status::InvalidArgument(
          fmt::format("--tensor-parallel has {}: degrees must be at least 1", t));
    }
    if (gpus > 0 && (t > gpus || gpus % t != 0)) {
      return Status::InvalidArgument(fmt::format(
          "--tensor-parallel {} {} --gpus {}: t x p x d must equal the GPUs, so t must divide N", t,
          t > gpus ? "is more than" : "does not divide", gpus));
    }
  }
  const bool only_t1 = !tensor_parallel.empty() &&
                       *std::max_element(tensor_parallel.begin(), tensor_parallel.end()) == 1;
  if (sequence_parallel == PlannerOptions::SequenceParallel::kOn && only_t1) {
    return Status::InvalidArgument(
        "--sequence-parallel on needs --tensor-parallel above 1: sequence parallelism splits "
        "over the tensor-parallel group");
  }
  if (tp_comm_overlap && only_t1) {
    return Status::InvalidArgument(
        "--tp-comm-overlap needs --tensor-parallel above 1: there is no tensor-parallel "
        "communication to overlap");
  }
  return Status::Ok();
}

int Candidate::ModelStages() const {
  return TraitsOf(config.schedule).bidirectional ? config.layout.pipeline_stages : VirtualStages();
}

std::string Candidate::Label() const {
  const ParallelLayout& l = config.layout;
  std::string tp;
  if (l.tensor_parallel > 1)
    tp = fmt::format("t={} {}", l.tensor_parallel, l.sequence_parallel ? "sp " : "");
  if (l.context_parallel > 1) {
    tp += fmt::format("cp={}{} ", l.context_parallel,
                      l.cp_algorithm == CpAlgorithm::kAllGather ? " allgather" : "");
  }
  if (l.expert_parallel > 1 || l.expert_tensor_parallel > 1) {
    tp += fmt::format(
        "ep={}{} ", l.expert_parallel,
        l.expert_tensor_parallel > 1 ? fmt::format(" etp={}", l.expert_tensor_parallel) : "");
  }
  return tp +
         fmt::format("p={} d={} {}{} mbs={} m={} recompute={} zero={}", l.pipeline_stages,
                     l.data_parallel, ScheduleKindName(config.schedule),
                     l.chunks > 1 ? fmt::format(" v={}", l.chunks) : "", config.microbatch_size,
                     config.microbatches, RecomputeSpec(config.recompute, config.recompute_layers),
                     config.memory.zero) +
         (config.partition.rule == PartitionRule::kEven ? " partition=even" : "") +
         (config.overlap.expert_overlap != ExpertOverlap::kAuto && l.expert_parallel > 1
              ? fmt::format(" ep-overlap={}", ExpertOverlapName(config.overlap.expert_overlap))
              : "") +
         (l.expert_dispatcher != ExpertDispatcher::kDeepEp && l.ExpertShards() > 1
              ? fmt::format(" ep-dispatcher={}", ExpertDispatcherName(l.expert_dispatcher))
              : "") +
         (config.memory.zero >= 2 && !ShardingLabel(config.memory.sharding).empty()
              ? " " + ShardingLabel(config.memory.sharding)
              : "");
}

Bytes Candidate::PeakMemory() const {
  Bytes peak = 0;
  for (const StageResult& s : result->per_rank) peak = std::max(peak, s.peak_memory_bytes);
  return peak;
}

const char* RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kBatchNotDivisible:
      return "global batch not divisible";
    case RejectReason::kOutOfMemory:
      return "out of memory";
    case RejectReason::kPruned:
      return "cannot reach the top (lower bound)";
    case RejectReason::kSimulationError:
      return "simulation error";
    case RejectReason::kScheduleConstraint:
      return "schedule constraint";
  }
  return "?";
}

std::string Rejection::Detail() const {
  if (pruned.top == 0) return detail;
  return fmt::format(
      "its lower bound {:.3f} ms{} exceeds the iteration time {:.3f} ms of the top {} already "
      "found",
      NsToUs(candidate.lower_bound_ns) / 1e3, pruned.partitioned ? "" : " (before partitioning)",
      NsToUs(pruned.top_ns) / 1e3, pruned.top);
}

SimOptions CandidateSimOptions(const Candidate& c) {
  SimOptions o;
  o.config = c.config;
  o.partition = c.partition;
  return o;
}

namespace {

// The cost-driven kinds' memory limit for a candidate: the micro-batch activations that every
// rank can afford beside what it holds anyway (weights, gradients, optimizer state, workspace,
// buffers: the partition pass's estimate less its activations, and one op's recomputed bytes),
// at most m (more changes nothing) and at least 1 (a rank that cannot afford one fails the
// simulated memory check, as any schedule would). m with unlimited memory.
double AffordableActivations(const Model& model, const Cluster& cluster, const Candidate& c) {
  const int m = c.config.microbatches, p = c.config.layout.pipeline_stages;
  const Bytes capacity = MemoryLimitBytes(cluster.gpu);
  if (capacity <= 0) return m;
  const StageCostTable table(model, StageCostOptionsFor(c.config, cluster));
  const PipelineShape shape = ShapeOf(c.config);
  const MemoryConfig memory = c.config.PerGpuMemory();
  const Placement placement = TraitsOf(c.config.schedule).placement;
  std::vector<Bytes> fixed(p, 0), held(p, 0);
  std::vector<Bytes> recomputed(p, 0);
  for (int st = 0; st < static_cast<int>(c.partition.size()); ++st) {
    const int r = StageRank(placement, st, p);
    const StageMemoryParts parts =
        EstimateStageMemoryParts(table, shape, memory, st, c.partition[st]);
    const StageCost cost = table.StageWithoutPairLayers(c.partition[st]);
    fixed[r] += parts.Total() - parts.activations;
    held[r] += cost.held_bytes;
    recomputed[r] = std::max(recomputed[r], cost.recomputed_bytes);
  }
  double limit = m;
  for (int r = 0; r < p; ++r) {
    if (held[r] <= 0) continue;
    const Bytes room = capacity - fixed[r] - recomputed[r];
    limit = std::min(limit, std::floor(static_cast<double>(room) / static_cast<double>(held[r])));
  }
  return std::max(1.0, limit);
}

}  // namespace

Result<CandidateSetup> SetUpCandidate(const Model& model, const Cluster& cluster,
                                      const Candidate& c, bool record_timeline) {
  SimOptions sim = CandidateSimOptions(c);
  sim.record_timeline = record_timeline;
  const TrainingConfig& config = c.config;
  const int p = config.layout.pipeline_stages, v = config.layout.chunks, m = config.microbatches;
  Schedule schedule;
  if (TraitsOf(config.schedule).generate_from_costs != nullptr && !c.partition.empty()) {
    const double limit = AffordableActivations(model, cluster, c);
    PIPECAST_ASSIGN_OR_RETURN(auto costs,
                              ScheduleCostsFor(model, cluster, sim, config.schedule, p, v, limit));
    PIPECAST_ASSIGN_OR_RETURN(schedule, MakeSchedule(config.schedule, p, m, v, costs));
  } else {
    PIPECAST_ASSIGN_OR_RETURN(schedule, MakeSchedule(config.schedule, p, m, v));
  }
  if (config.CombinesForwardBackward()) PIPECAST_RETURN_IF_ERROR(CombineForwardBackward(&schedule));
  return CandidateSetup{std::move(schedule), std::move(sim)};
}

Result<SimResult> SimulateCandidate(const Model& model, const Cluster& cluster,
                                    const Candidate& candidate, bool record_timeline) {
  PIPECAST_ASSIGN_OR_RETURN(auto setup, SetUpCandidate(model, cluster, candidate, record_timeline));
  return Simulate(model, cluster, setup.schedule, setup.options);
}

namespace {

std::vector<std::string> Suggestions(const Model& model, const Cluster& cluster,
                                     const PlannerOptions& options,
                                     const std::vector<Rejection>& rejected) {
  std::vector<std::string> out;
  const Bytes cap = MemoryLimitBytes(cluster.gpu);
  MemoryConfig unsharded = options.memory;
  if (unsharded.Fsdp2()) unsharded.zero = kMaxZeroLevel;  // FSDP2's 16 B, not 18
  const double per_param = ShardedBytesPerParam(unsharded, 1).Total();
  const double fixed = static_cast<double>(model.TotalParameters()) * per_param;
  if (cap > 0) {
    const int need = static_cast<int>(std::ceil(fixed / static_cast<double>(cap)));
    const bool fsdp_searched = options.zero_levels.empty() ||
                               std::find(options.zero_levels.begin(), options.zero_levels.end(),
                                         3) != options.zero_levels.end();
    if (need > options.gpus && !fsdp_searched) {
      out.push_back(fmt::format(
          "the weights, gradients and optimizer state alone take {:.1f} GiB ({:.0f} bytes per "
          "parameter) unsharded: sharding them over the data-parallel replicas (--zero 3) "
          "divides them by d",
          fixed / kGiB, per_param));
    } else if (need > options.gpus) {
      out.push_back(fmt::format(
          "the weights, gradients and optimizer state alone take {:.1f} GiB ({:.0f} bytes per "
          "parameter): a pipeline needs at least {} GPUs with a {:.1f} GiB limit each, so try "
          "--gpus {} or more",
          fixed / kGiB, per_param, need, ToGiB(cap), need));
    } else {
      out.push_back(
          fmt::format("more GPUs split the layers further: try --gpus {}", options.gpus * 2));
    }
  }
  const bool full_listed =
      std::any_of(options.recompute_listed.begin(), options.recompute_listed.end(),
                  [](const RecomputeChoice& c) { return c.recompute == Recompute::kFull; });
  if (options.recompute != RecomputeMode::kAuto && options.recompute != RecomputeMode::kFull &&
      !(options.recompute == RecomputeMode::kListed && full_listed)) {
    out.push_back(
        "full activation recomputation keeps only each layer's input: try --recompute auto");
  }
  if (*std::min_element(options.microbatch_sizes.begin(), options.microbatch_sizes.end()) > 1) {
    out.push_back("smaller micro-batches hold fewer activations: try --microbatch-sizes 1");
  }
  bool only_gpipe = std::all_of(options.schedules.begin(), options.schedules.end(),
                                [](ScheduleKind k) { return k == ScheduleKind::kGPipe; });
  if (only_gpipe) out.push_back("1F1B holds p micro-batches instead of m: try --schedules 1f1b");
  if (rejected.empty()) out.push_back("no configuration was possible with these options");
  return out;
}

}  // namespace

Result<int64_t> GlobalBatchFor(const Model& model, const PlannerOptions& options) {
  const int64_t global_batch =
      options.global_batch > 0 ? options.global_batch : model.global_batch.value_or(0);
  if (global_batch <= 0) {
    return Status::InvalidArgument(fmt::format(
        "no global batch: the model '{}' gives none (global_batch) and --global-batch was not "
        "given; give --global-batch N, the samples per training iteration (e.g. 512), or write "
        "it into the model with profiler analytic ... --global-batch N",
        model.name));
  }
  return global_batch;
}

namespace {

// The options with their defaults filled: every default schedule, and the
// micro-batch sizes the model was measured at. InvalidArgument for bad
// options or a model without layers.
Result<PlannerOptions> WithDefaults(const Model& model, const PlannerOptions& given) {
  PIPECAST_RETURN_IF_ERROR(given.Validate());
  if (model.layers.empty()) return Status::InvalidArgument("the model has no layers");
  PlannerOptions options = given;
  if (options.schedules.empty()) {
    for (const ScheduleTraits& t : AllScheduleTraits()) {
      if (t.planner_default) options.schedules.push_back(t.kind);
    }
  }
  if (options.microbatch_sizes.empty()) {
    std::set<int> sizes;
    for (const LayerProfile& p : model.layers[0].profiles) sizes.insert(p.microbatch_size);
    options.microbatch_sizes.assign(sizes.begin(), sizes.end());
  }
  return options;
}

// An empty report for the search: GPUs, cluster and global batch, the
// latter checked to keep every candidate's sums inside 64 bits.
Result<PlanReport> EmptyReport(const Model& model, const Cluster& cluster,
                               const PlannerOptions& options) {
  PlanReport report;
  report.gpus = options.gpus;
  report.cluster = cluster;
  PIPECAST_ASSIGN_OR_RETURN(int64_t global_batch, GlobalBatchFor(model, options));
  report.global_batch = global_batch;
  // Every candidate's sums stay inside 64 bits (sim/totals.h): checked once
  // for the largest of each, rather than refused candidate by candidate.
  for (int size : options.microbatch_sizes) {
    PIPECAST_RETURN_IF_ERROR(
        CheckTotals(model, cluster,
                    TotalsInput{size, std::max<int64_t>(1, report.global_batch / size),
                                std::min<int>(options.gpus, static_cast<int>(model.layers.size())),
                                options.memory, options.optimizer_step.time_ns}));
  }
  return report;
}

// InvalidArgument when the search would enumerate more configurations than
// it may hold (passes.h, kMaxConfigurations): refused before anything is
// allocated.
Status CheckSearchSize(const Model& model, const Cluster& cluster, const PlannerOptions& options) {
  // Refused before anything is allocated (passes.h, kMaxConfigurations).
  if (const int64_t n = passes::CountConfigurations(model, cluster, options);
      n > passes::kMaxConfigurations) {
    const size_t experts = passes::ExpertParallelDegrees(model, options).size();
    return Status::InvalidArgument(fmt::format(
        "the search would enumerate {} configurations, over the limit of {} (each is held in "
        "memory while the search runs): {} micro-batch sizes x {} schedules x {} chunk counts x "
        "{} ZeRO levels x {} tensor-parallel degrees{} over the pipeline depths {} GPUs allow; "
        "give fewer values to --microbatch-sizes, --schedules, --chunks, --zero or "
        "--tensor-parallel{}, or pin --stages, --data-parallel or --microbatches",
        n, passes::kMaxConfigurations, options.microbatch_sizes.size(), options.schedules.size(),
        options.chunks.size(), options.zero_levels.empty() ? 3 : options.zero_levels.size(),
        options.tensor_parallel.empty() ? std::string("the")
                                        : std::to_string(options.tensor_parallel.size()),
        experts > 1 ? fmt::format(" x {} expert-parallel degrees", experts) : "", options.gpus,
        experts > 1 ? ", --expert-parallel" : ""));
  }
  return Status::Ok();
}

// InvalidArgument when the enumeration left nothing to partition because
// every configuration was refused (naming one), not because none was asked.
Status CheckSomeCanRun(const std::vector<Candidate>& candidates, const PlanReport& report,
                       const PlannerOptions& options) {
  if (!candidates.empty() || report.rejected.empty()) return Status::Ok();
  const bool all_batch =
      std::all_of(report.rejected.begin(), report.rejected.end(),
                  [](const Rejection& r) { return r.reason == RejectReason::kBatchNotDivisible; });
  if (!all_batch) {
    return Status::InvalidArgument(fmt::format(
        "no configuration of {} GPUs can run the requested schedules (e.g. {}: {}): allow more "
        "schedules with --schedules or change --gpus",
        options.gpus, report.rejected.back().candidate.Label(), report.rejected.back().Detail()));
  }
  return Status::InvalidArgument(fmt::format(
      "--global-batch {} is not a multiple of any micro-batch size x data-parallel degree on "
      "{} GPUs (e.g. {}): choose a global batch divisible by the sizes in "
      "--microbatch-sizes times N/p",
      report.global_batch, options.gpus, report.rejected.front().Detail()));
}

// With both partition rules searched: which one the choice has, and the best
// candidate of the other rule against it. `ranked` is best first.
std::string PartitionRuleNote(const std::vector<Candidate>& ranked) {
  const Candidate& chosen = ranked.front();
  const PartitionRule rule = chosen.config.partition.rule;
  const PartitionRule other =
      rule == PartitionRule::kEven ? PartitionRule::kBalanced : PartitionRule::kEven;
  std::string text = fmt::format(
      "partition: searched pipecast's balanced split and Megatron-LM's even split; the choice "
      "uses the {} split",
      PartitionRuleName(rule));
  for (const Candidate& c : ranked) {
    if (c.config.partition.rule != other || !c.result) continue;
    const double slower = static_cast<double>(c.result->iteration_ns) /
                              static_cast<double>(chosen.result->iteration_ns) -
                          1.0;
    if (c.partition == chosen.partition && c.result->iteration_ns == chosen.result->iteration_ns) {
      return text + fmt::format(
                        "; the best with the {} split ({}) makes the same split ({}) and "
                        "takes as long",
                        PartitionRuleName(other), c.Label(), PartitionToString(c.partition));
    }
    return text + fmt::format(
                      "; the best with the {} split ({}, {}) takes {:.1f}% longer per "
                      "iteration",
                      PartitionRuleName(other), c.Label(), PartitionToString(c.partition),
                      100.0 * slower);
  }
  return text + fmt::format(
                    "; no configuration with the {} split was simulated (none could be "
                    "made, fitted, or reached the top; a one-stage layout is tried with the "
                    "balanced split only, both give it every layer)",
                    PartitionRuleName(other));
}

// The ranked candidates the report keeps: the choice and top_k runners-up.
std::vector<Candidate> Top(std::vector<Candidate> ranked, int top_k) {
  if (ranked.size() > static_cast<size_t>(top_k) + 1) ranked.resize(top_k + 1);
  return ranked;
}

// After ranking: with a choice, its notes and the sweep of its micro-batch
// count; without one, what would make something fit.
void Conclude(const Model& model, const Cluster& cluster, const PlannerOptions& options,
              PlanReport* report) {
  if (!report->Feasible()) {
    report->suggestions = Suggestions(model, cluster, options, report->rejected);
    return;
  }
  std::vector<std::string> search_notes = std::move(report->notes);
  report->notes = report->ranked[0].result->notes;
  for (std::string& note : search_notes) report->notes.push_back(std::move(note));
  if (options.recompute == RecomputeMode::kAuto && !passes::HasAttentionCore(model)) {
    report->notes.push_back(
        "selective recomputation was not searched: the model gives no attention core to drop "
        "(attention_core_bytes absent or 0, as with FlashAttention), so it would change nothing");
  }
  report->sweep = passes::Sweep(model, cluster, options, report->ranked[0]);
}

}  // namespace

Result<PlanReport> RunPlanner(const Model& model, const Cluster& cluster,
                              const PlannerOptions& given) {
  PIPECAST_ASSIGN_OR_RETURN(PlannerOptions options, WithDefaults(model, given));
  PIPECAST_ASSIGN_OR_RETURN(PlanReport report, EmptyReport(model, cluster, options));
  PIPECAST_RETURN_IF_ERROR(CheckSearchSize(model, cluster, options));
  // enumerate -> (bound -> partition -> prune -> simulate, in bound order) -> rank -> sweep
  // (planner.h).
  std::vector<Candidate> candidates = passes::Enumerate(
      model, cluster, options, report.global_batch, &report.rejected, &report.notes);
  report.enumerated = static_cast<int>(candidates.size() + report.rejected.size());
  PIPECAST_RETURN_IF_ERROR(CheckSomeCanRun(candidates, report, options));
  // Nearly every configuration ends up rejected: room for all at once, not grown by copies.
  report.rejected.reserve(static_cast<size_t>(report.enumerated));
  AdviseHugePages(report.rejected);  // touched once, entry by entry: fewer page faults
  passes::PartitionCache cache(model, cluster);
  // partition, prune and simulate in lower-bound order: a candidate is partitioned only when
  // its bound reaches the front (passes.h, SearchInBoundOrder).
  passes::SearchOutcome outcome = passes::SearchInBoundOrder(
      model, cluster, options, std::move(candidates), &cache, &report.rejected);
  // The out-of-memory rejections the report shows carry simulated figures, as if every
  // candidate the search sent to the simulator had run (passes.h, SimulatedMemoryFloor).
  passes::SettleShownMemoryFloors(model, cluster, &report.rejected);
  report.simulated = outcome.simulated;
  std::vector<Candidate> fitting = std::move(outcome.fitting);
  passes::Rank(&fitting);
  if (options.partition_rules.size() > 1 && !fitting.empty()) {
    report.notes.push_back(PartitionRuleNote(fitting));
  }
  report.ranked = Top(std::move(fitting), options.top_k);
  Conclude(model, cluster, options, &report);
  return report;
}

}  // namespace pipecast
