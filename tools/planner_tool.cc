#include "tools/planner_tool.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "base/text_table.h"
#include "formats/cluster_select.h"
#include "formats/file_util.h"
#include "formats/formats.h"
#include "formats/plan.h"
#include "formats/schedule_text.h"
#include "planner/check.h"
#include "planner/chosen_plan.h"
#include "planner/compare.h"
#include "planner/explain.h"
#include "planner/planner.h"
#include "report/gantt.h"
#include "report/planner_report.h"
#include "report/trace.h"
#include "sim/memory.h"
#include "sim/schedule.h"
#include "sim/stage_costs.h"
#include "tools/export_flags.h"

namespace pipecast {
namespace {

PlannerOptions::SequenceParallel SequenceParallelFlag(const std::string& value) {
  return value == "on"    ? PlannerOptions::SequenceParallel::kOn
         : value == "off" ? PlannerOptions::SequenceParallel::kOff
                          : PlannerOptions::SequenceParallel::kAuto;
}

}  // namespace

Result<std::vector<RecomputeChoice>> ParseRecomputeList(std::string_view text) {
  if (text == "on") text = "full";
  std::vector<RecomputeChoice> listed;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    RecomputeChoice choice;
    if (!ParseRecomputeSpec(item, &choice.recompute, &choice.layers)) {
      return Status::InvalidArgument(
          fmt::format("'{}' is not one of auto, off, selective, full, on, op, every:K (K an "
                      "integer >= 1; or a comma list of off, selective, full, op and every:K)",
                      item));
    }
    if (std::find(listed.begin(), listed.end(), choice) == listed.end()) listed.push_back(choice);
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return listed;
}

namespace {

// --recompute (auto, on, or a comma list of modes), --recompute-method and
// --recompute-num-layers (for its full entries), --recompute-modules (for its
// selective entries). A single off, selective or full (or on, the older name
// of full) without a method or modules pins it as before; anything else is a
// list.
Status PlannerRecompute(const PlannerToolOptions& flags, PlannerOptions* o) {
  RecomputeLayers method;
  if (!flags.recompute_method.empty()) {
    std::optional<RecomputeMethod> parsed = ParseRecomputeMethod(flags.recompute_method);
    if (!parsed) {
      return Status::InvalidArgument(
          fmt::format("--recompute-method {}: expected uniform or block", flags.recompute_method));
    }
    method.method = *parsed;
  }
  method.num_layers = flags.recompute_num_layers;
  const bool has_method = method != RecomputeLayers{};
  unsigned modules = 0;  // --recompute-modules, for the selective entries
  if (!flags.recompute_modules.empty()) {
    Result<unsigned> parsed = ParseRecomputeModules(flags.recompute_modules);
    if (!parsed.ok()) return parsed.status();
    modules = *parsed;
  }
  if (flags.recompute == "auto" && !has_method && modules == 0) {
    o->recompute = RecomputeMode::kAuto;
    return Status::Ok();
  }
  if (flags.recompute == "auto") {
    return Status::InvalidArgument(
        has_method ? "--recompute-method and --recompute-num-layers choose which layers full "
                     "recomputation checkpoints: give --recompute full (or a list with full)"
                   : "--recompute-modules chooses what selective recomputation reruns: give "
                     "--recompute selective (or a list with selective)");
  }
  auto listed = ParseRecomputeList(flags.recompute);
  if (!listed.ok()) return listed.status().WithPrefix("--recompute");
  o->recompute = RecomputeMode::kListed;
  o->recompute_listed = std::move(listed.value());
  for (RecomputeChoice& choice : o->recompute_listed) {
    if (choice.recompute == Recompute::kFull) choice.layers = method;
    if (choice.recompute == Recompute::kSelective) choice.layers.modules = modules;
  }
  const bool selective_listed =
      std::any_of(o->recompute_listed.begin(), o->recompute_listed.end(),
                  [](const RecomputeChoice& c) { return c.recompute == Recompute::kSelective; });
  if (modules != 0 && !selective_listed) {
    return Status::InvalidArgument(
        "--recompute-modules chooses what selective recomputation reruns: list selective in "
        "--recompute");
  }
  const bool full_listed =
      std::any_of(o->recompute_listed.begin(), o->recompute_listed.end(),
                  [](const RecomputeChoice& c) { return c.recompute == Recompute::kFull; });
  if (has_method && !full_listed) {
    return Status::InvalidArgument(
        "--recompute-method and --recompute-num-layers choose which layers full recomputation "
        "checkpoints: list full in --recompute");
  }
  for (const RecomputeChoice& c : o->recompute_listed) {
    PIPECAST_RETURN_IF_ERROR(CheckRecompute(c.recompute, c.layers));
  }
  if (o->recompute_listed.size() == 1 && !has_method && modules == 0) {
    switch (o->recompute_listed[0].recompute) {
      case Recompute::kOff:
        o->recompute = RecomputeMode::kOff;
        break;
      case Recompute::kSelective:
        o->recompute = RecomputeMode::kSelective;
        break;
      case Recompute::kFull:
        o->recompute = RecomputeMode::kFull;
        break;
      default:
        break;
    }
  }
  return Status::Ok();
}

PlannerOptions::Choice ChoiceFlag(const std::string& value) {
  if (value == "on") return PlannerOptions::Choice::kOn;
  if (value == "off") return PlannerOptions::Choice::kOff;
  return PlannerOptions::Choice::kAuto;
}

// --reshard-after-forward, --shard-prefetch, --reduce-every-microbatch and --shard-group.
Status ShardingSearchFromFlags(const PlannerToolOptions& flags,
                               PlannerOptions::ShardingSearch* search) {
  search->reshard_after_forward = ChoiceFlag(flags.reshard_after_forward);
  search->reduce_every_microbatch = ChoiceFlag(flags.reduce_every_microbatch);
  search->prefetch = flags.shard_prefetch != "off";
  if (flags.shard_group == "auto") {
    search->shard_group = -1;
    return Status::Ok();
  }
  int64_t group = -1;
  const std::string& text = flags.shard_group;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), group);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || group < 0 ||
      group > (int64_t{1} << 24)) {
    return Status::InvalidArgument(fmt::format(
        "--shard-group is '{}': expected auto, 0 (shard over all replicas) or a number of "
        "replicas per shard group, e.g. 8 (one node's)",
        flags.shard_group));
  }
  search->shard_group = static_cast<int>(group);
  return Status::Ok();
}

// `list` with each value once, in first-seen order; a note saying which
// values `flag` repeated (issue 28: a repeated value gave the same
// configuration twice among the choice and its runners-up).
template <typename T>
std::vector<T> Unique(const std::vector<T>& list, std::string_view flag,
                      std::vector<std::string>* notes) {
  std::vector<T> out;
  std::vector<std::string> repeated;
  for (const T& v : list) {
    if (std::find(out.begin(), out.end(), v) == out.end()) {
      out.push_back(v);
      continue;
    }
    const std::string shown = fmt::format("{}", v);
    if (std::find(repeated.begin(), repeated.end(), shown) == repeated.end()) {
      repeated.push_back(shown);
    }
  }
  if (!repeated.empty()) {
    notes->push_back(
        fmt::format("{} repeats {}: each value is tried once", flag, JoinNames(repeated)));
  }
  return out;
}

Result<PlannerOptions> MakeOptions(const PlannerToolOptions& flags,
                                   std::vector<std::string>* notes) {
  PlannerOptions o;
  o.gpus = flags.gpus;
  o.global_batch = flags.global_batch;
  for (const std::string& name : Unique(flags.schedules, "--schedules", notes)) {
    auto kind = ParseScheduleKind(name);
    if (!kind.ok()) return kind.status().WithPrefix("--schedules");
    o.schedules.push_back(*kind);
  }
  o.microbatch_sizes = Unique(flags.microbatch_sizes, "--microbatch-sizes", notes);
  o.chunks = Unique(flags.chunks, "--chunks", notes);
  PIPECAST_RETURN_IF_ERROR(PlannerRecompute(flags, &o));
  if (const size_t given = std::count(flags.recompute.begin(), flags.recompute.end(), ',') + 1;
      o.recompute == RecomputeMode::kListed && given > o.recompute_listed.size()) {
    notes->push_back(
        fmt::format("--recompute {} repeats a mode: each is tried once", flags.recompute));
  }
  o.top_k = flags.top;
  o.threads = flags.threads;
  // What every candidate shares: the shared flags' part of a configuration.
  TrainingConfig shared;
  PIPECAST_RETURN_IF_ERROR(FillTrainingConfig(flags.training, &shared));
  o.memory = shared.memory;
  o.overlap = shared.overlap;
  o.overlap.tp_comm_overlap = flags.tp_comm_overlap;
  o.optimizer_step = shared.optimizer_step;
  o.zero_levels = Unique(flags.zero, "--zero", notes);
  PIPECAST_RETURN_IF_ERROR(ShardingSearchFromFlags(flags, &o.sharding));
  o.tensor_parallel = Unique(flags.tensor_parallel, "--tensor-parallel", notes);
  o.context_parallel = Unique(flags.context_parallel, "--context-parallel", notes);
  o.expert_parallel = Unique(flags.expert_parallel, "--expert-parallel", notes);
  o.expert_tensor_parallel =
      Unique(flags.expert_tensor_parallel, "--expert-tensor-parallel", notes);
  o.cp_algorithm = shared.layout.cp_algorithm;
  o.sequence_parallel = SequenceParallelFlag(flags.sequence_parallel);
  o.pipeline_stages = flags.pipeline_stages;
  o.data_parallel = flags.data_parallel;
  o.microbatches = flags.microbatches;
  if (flags.partition == "both") {
    o.partition_rules = {PartitionRule::kBalanced, PartitionRule::kEven};
  } else {
    auto rule = ParsePartitionRule(flags.partition, "--partition");
    if (!rule.ok()) {
      return Status::InvalidArgument(
          fmt::format("--partition '{}': expected balanced, even or both", flags.partition));
    }
    o.partition_rules = {*rule};
  }
  o.even = shared.partition.even;
  if (flags.ep_overlap == "both") {
    o.expert_overlaps = {ExpertOverlap::kOff, ExpertOverlap::kOn};
  } else if (std::optional<ExpertOverlap> overlap = ParseExpertOverlap(flags.ep_overlap)) {
    o.expert_overlaps = {*overlap};
  } else {
    return Status::InvalidArgument(
        fmt::format("--ep-overlap '{}': expected auto, on, off or both", flags.ep_overlap));
  }
  if (flags.ep_dispatcher == "both") {
    o.expert_dispatchers = {ExpertDispatcher::kDeepEp, ExpertDispatcher::kAllToAll};
  } else if (flags.ep_dispatcher == "all") {
    o.expert_dispatchers = {ExpertDispatcher::kDeepEp, ExpertDispatcher::kAllToAll,
                            ExpertDispatcher::kAllGather};
  } else if (std::optional<ExpertDispatcher> d = ParseExpertDispatcher(flags.ep_dispatcher)) {
    o.expert_dispatchers = {*d};
  } else {
    return Status::InvalidArgument(fmt::format(
        "--ep-dispatcher '{}': expected deepep, alltoall, allgather, both (deepep and alltoall) "
        "or all",
        flags.ep_dispatcher));
  }
  o.progress = flags.search_progress;
  PIPECAST_RETURN_IF_ERROR(o.Validate());
  return o;
}

// What the run reads before it searches.
struct Inputs {
  Model model;
  std::string model_hash;
  PlannerOptions options;
  ClusterSelection cluster;
  std::string gpu_warning;  // the model's costs were made for another GPU (CheckModelOnCluster)
  // The model's costs were made for another expert dispatcher (ModelDispatcherMismatch).
  std::string dispatcher_warning;
  std::optional<PlanFile> baseline;          // --check
  std::optional<PlannerOptions> compare_to;  // --compare-to, pinned
};

// --compare-to: a plan file (a path ending in .json) or a configuration's words.
Result<PlannerOptions> CompareToOptions(const std::string& given, const PlannerOptions& base) {
  if (given.size() > 5 && given.ends_with(".json")) {
    auto plan = LoadPlan(given);
    if (!plan.ok()) return plan.status().WithPrefix("--compare-to");
    return PinPlan(base, *plan);
  }
  return PinConfiguration(base, given);
}

Result<Inputs> LoadInputs(const PlannerToolOptions& flags, const PlannerProgress& progress) {
  PIPECAST_ASSIGN_OR_RETURN(auto bytes, ReadFile(flags.model_path));
  Inputs in;
  PIPECAST_ASSIGN_OR_RETURN(in.model, ParseModel(bytes, flags.model_path));
  in.model_hash = ModelHash(bytes);
  std::vector<std::string> notes;
  PIPECAST_ASSIGN_OR_RETURN(auto options, MakeOptions(flags, &notes));
  for (const std::string& note : notes) progress(note);
  in.options = std::move(options);
  PIPECAST_ASSIGN_OR_RETURN(in.cluster, SelectToolCluster(flags.training, in.model));
  if (!in.cluster.note.empty()) progress(in.cluster.note);
  if (!flags.compare_to.empty()) {
    PIPECAST_ASSIGN_OR_RETURN(in.compare_to, CompareToOptions(flags.compare_to, in.options));
  }
  PIPECAST_ASSIGN_OR_RETURN(in.gpu_warning,
                            CheckModelOnCluster(in.model, flags.model_path, in.cluster.cluster));
  if (!in.gpu_warning.empty()) progress(in.gpu_warning);
  // Searched at ep > 1 unless every --expert-parallel is 1.
  const std::vector<int>& eps = in.options.expert_parallel;
  if (eps.empty() || std::any_of(eps.begin(), eps.end(), [](int ep) { return ep > 1; })) {
    in.dispatcher_warning =
        ModelDispatcherMismatch(in.model, flags.model_path, in.options.expert_dispatchers);
    if (!in.dispatcher_warning.empty()) progress(in.dispatcher_warning);
  }
  // A pinned tensor-parallel degree obeys the heads rule the search applies.
  for (int t : in.options.tensor_parallel) {
    PIPECAST_RETURN_IF_ERROR(CheckTensorParallelHeads(in.model, t));
  }
  // Pinned expert degrees obey the model's experts (the search's own degrees do).
  for (int ep : in.options.expert_parallel) {
    PIPECAST_RETURN_IF_ERROR(CheckExpertParallelCosts(in.model, ep, 1));
  }
  for (int etp : in.options.expert_tensor_parallel) {
    PIPECAST_RETURN_IF_ERROR(CheckExpertParallelCosts(in.model, 1, etp));
  }
  if (!flags.check.empty()) {
    auto loaded = LoadPlan(flags.check);
    if (!loaded.ok()) return loaded.status().WithPrefix("--check");
    in.baseline = std::move(loaded.value());
  }
  return in;
}

// --out, --trace, --schedule-out and --export for the chosen plan; with --gantt, its chart
// into *gantt.
Status WriteOutputs(const PlannerToolOptions& flags, const Inputs& in, const ChosenPlan& chosen,
                    const PlannerProgress& progress, std::string* gantt) {
  if (!flags.out.empty()) {
    PIPECAST_RETURN_IF_ERROR(
        WriteFileAtomic(flags.out, PlanToJson(chosen.plan)).WithPrefix("--out"));
    progress(fmt::format("wrote the chosen plan to {}", flags.out));
  }
  if (!flags.schedule_out.empty()) {
    auto format = ParseScheduleFormat(flags.schedule_format);
    if (!format.ok()) return format.status().WithPrefix("--schedule-format");
    PIPECAST_RETURN_IF_ERROR(
        WriteFileAtomic(flags.schedule_out, ScheduleToFormat(chosen.plan.schedule, *format))
            .WithPrefix("--schedule-out"));
    progress(fmt::format("wrote the chosen plan's schedule to {}", flags.schedule_out));
  }
  if (!flags.exports.empty()) {
    PIPECAST_ASSIGN_OR_RETURN(
        auto specs, ParseExportFlags(flags.exports, flags.schedule_out, flags.schedule_format));
    PIPECAST_RETURN_IF_ERROR(WriteExports(specs, chosen.plan, in.model, progress));
  }
  if (flags.gantt) {
    GanttOptions chart;
    chart.color = flags.gantt_color;
    chart.max_columns = GanttCellsForWidth(flags.gantt_width);
    *gantt = GanttChart(*chosen.timeline, chart);
  }
  if (!flags.trace.empty()) {
    PIPECAST_RETURN_IF_ERROR(WriteFileAtomicStreamed(flags.trace, [&](const TextSink& sink) {
                               WriteTraceJson(*chosen.timeline, TraceOptions{}, sink);
                             }).WithPrefix("--trace"));
    progress(fmt::format("wrote the chosen plan's trace to {}", flags.trace));
  }
  return Status::Ok();
}

// --report: the HTML report with the chosen plan's timeline; when nothing
// fits (`chosen` null), the rejections and suggestions only.
Status WriteReport(const PlannerToolOptions& flags, const Inputs& in, const PlanReport& report,
                   const ChosenPlan* chosen, const PlannerProgress& progress) {
  const Cluster& cluster = in.cluster.cluster;
  ReportInputs inputs;
  inputs.model_name = in.model.name;
  inputs.model_layers = static_cast<int>(in.model.layers.size());
  inputs.cluster = cluster;
  if (chosen) {
    inputs =
        MakeReportInputs(in.model, cluster, chosen->replay.schedule, chosen->replay.options, "");
  }
  inputs.tool = "planner";
  inputs.command_line = flags.command_line;
  const std::string html =
      PlanReportHtml(report, in.model, chosen ? &*chosen->timeline : nullptr, inputs);
  PIPECAST_RETURN_IF_ERROR(WriteFileAtomic(flags.report, html).WithPrefix("--report"));
  progress(fmt::format("wrote the HTML report to {}", flags.report));
  return Status::Ok();
}

// The search, with its progress lines and the cluster note in the report.
Result<PlanReport> Search(const PlannerToolOptions& flags, const Inputs& in,
                          const PlannerProgress& progress) {
  // Asked for before the search starts, not found missing after it.
  if (Result<int64_t> batch = GlobalBatchFor(in.model, in.options); !batch.ok()) {
    return batch.status();
  }
  progress(fmt::format("searching plans for {} ({}) on {} of {}", in.model.name,
                       Count(static_cast<int64_t>(in.model.layers.size()), "layer", "layers"),
                       Count(flags.gpus, "GPU", "GPUs"), in.cluster.cluster.name));
  PIPECAST_ASSIGN_OR_RETURN(auto report, RunPlanner(in.model, in.cluster.cluster, in.options));
  if (!in.cluster.note.empty()) report.notes.push_back(in.cluster.note);
  if (!in.gpu_warning.empty()) report.notes.push_back(in.gpu_warning);
  if (!in.dispatcher_warning.empty()) report.notes.push_back(in.dispatcher_warning);
  if (in.compare_to && report.Feasible()) {
    progress(fmt::format("searching the given configuration (--compare-to {})", flags.compare_to));
    PIPECAST_ASSIGN_OR_RETURN(
        report.comparison,
        CompareWithChoice(in.model, in.cluster.cluster, *in.compare_to, report, flags.compare_to));
  }
  progress(
      fmt::format("{} configurations, {} simulated, {}", report.enumerated, report.simulated,
                  report.Feasible() ? "a plan was chosen" : "none can run (the report says why)"));
  return report;
}

// The stdout text: the report (text or JSON), the --check diff, the chart.
std::string ReportText(const PlannerToolOptions& flags, const Inputs& in, const PlanReport& report,
                       const CheckOutcome* check, const std::string& gantt) {
  std::string text =
      flags.json ? PlanReportToJson(report, in.model, check) : PlanReportToText(report, in.model);
  if (check && !flags.json) text += "\n" + check->diff;
  if (flags.gantt && !flags.json) {
    text += report.Feasible() ? "\n" + gantt : "\nno chart (--gantt): no configuration fits\n";
  }
  return text;
}

}  // namespace

namespace {

// The pinned degrees against --gpus, before anything is read: t x p x d must
// equal N for some t tried (issue 28: pins that cannot multiply to N ended in
// "no feasible plan" after the search).
Status CheckPins(const PlannerToolOptions& f) {
  if (f.gpus <= 0) return Status::Ok();
  std::string pins;
  int64_t pinned = 1;
  for (const auto& [flag, value] : {std::pair<const char*, int>{"--stages", f.pipeline_stages},
                                    {"--data-parallel", f.data_parallel}}) {
    if (value <= 0) continue;
    pins += fmt::format("{}{} {}", pins.empty() ? "" : " x ", flag, value);
    pinned *= value;
  }
  if (pins.empty()) return Status::Ok();
  if (f.gpus % pinned != 0) {
    return Status::InvalidArgument(fmt::format(
        "{}{} does not divide --gpus {}: the GPUs are t tensor-parallel x p pipeline stages x d "
        "replicas; pin degrees whose product divides {}",
        pins, pins.find(" x ") != std::string::npos ? fmt::format(" = {}", pinned) : "", f.gpus,
        f.gpus));
  }
  const bool both = f.pipeline_stages > 0 && f.data_parallel > 0;
  const int64_t t_needed = f.gpus / pinned;
  if (f.tensor_parallel.empty()) return Status::Ok();
  for (int t : f.tensor_parallel) {
    if (both ? t == t_needed : t_needed % t == 0) return Status::Ok();
  }
  return Status::InvalidArgument(fmt::format(
      "--tensor-parallel {} x {} cannot make --gpus {}: t x p x d must equal the GPUs{}",
      JoinNames([&] {
        std::vector<std::string> ts;
        for (int t : f.tensor_parallel) ts.push_back(std::to_string(t));
        return ts;
      }()),
      pins, f.gpus,
      both ? fmt::format(", so t must be {}", t_needed)
           : fmt::format(", so t must divide {}", t_needed)));
}

}  // namespace

Status PlannerToolOptions::Validate() const {
  PIPECAST_RETURN_IF_ERROR(CheckTensorParallelChoices(
      tensor_parallel, gpus, SequenceParallelFlag(sequence_parallel), tp_comm_overlap));
  PIPECAST_RETURN_IF_ERROR(CheckContextParallelChoices(context_parallel, gpus));
  PIPECAST_RETURN_IF_ERROR(CheckPins(*this));
  if (auto specs = ParseExportFlags(exports, schedule_out, schedule_format); !specs.ok()) {
    return specs.status();
  }
  CheckOptions check_options;
  check_options.tolerance = tolerance;
  return check_options.Validate();
}

namespace {

// Before the search: no output onto an input or onto another output.
Status CheckToolOutputs(const PlannerToolOptions& flags) {
  std::vector<NamedPath> outputs;
  for (const NamedPath& p :
       {NamedPath{"--out", flags.out}, NamedPath{"--trace", flags.trace},
        NamedPath{"--report", flags.report}, NamedPath{"--schedule-out", flags.schedule_out}}) {
    if (!p.path.empty()) outputs.push_back(p);
  }
  PIPECAST_ASSIGN_OR_RETURN(
      auto specs, ParseExportFlags(flags.exports, flags.schedule_out, flags.schedule_format));
  for (const NamedPath& p : ExportOutputs(specs)) outputs.push_back(p);
  return CheckOutputs(outputs, {{"--model", flags.model_path},
                                {"--cluster", flags.training.cluster},
                                {"--check", flags.check}});
}

}  // namespace

Result<PlannerToolResult> RunPlannerTool(const PlannerToolOptions& flags,
                                         const PlannerProgress& progress) {
  PIPECAST_RETURN_IF_ERROR(CheckToolOutputs(flags));
  PIPECAST_ASSIGN_OR_RETURN(auto in, LoadInputs(flags, progress));
  PIPECAST_ASSIGN_OR_RETURN(auto report, Search(flags, in, progress));
  std::string gantt;
  std::optional<ChosenPlan> chosen;
  if (report.Feasible()) {
    const bool timeline = !flags.trace.empty() || flags.gantt || !flags.report.empty();
    PIPECAST_ASSIGN_OR_RETURN(chosen, MakeChosenPlan(in.model, in.model_hash, in.cluster.cluster,
                                                     report.ranked[0], timeline));
    PIPECAST_RETURN_IF_ERROR(WriteOutputs(flags, in, *chosen, progress, &gantt));
  } else if (!flags.out.empty() || !flags.trace.empty() || !flags.schedule_out.empty() ||
             !flags.exports.empty()) {
    progress("nothing fits, so no --out, --trace, --schedule-out or --export file was written");
  }
  if (!flags.report.empty()) {
    PIPECAST_RETURN_IF_ERROR(WriteReport(flags, in, report, chosen ? &*chosen : nullptr, progress));
  }
  PlannerToolResult result;
  std::optional<CheckOutcome> check;
  if (in.baseline) {
    CheckOptions check_options;
    check_options.tolerance = flags.tolerance;
    check_options.model_hash = in.model_hash;
    PIPECAST_ASSIGN_OR_RETURN(check, CheckAgainstBaseline(*in.baseline, report, in.model,
                                                          in.cluster.cluster, check_options));
    result.checked = true;
    result.check_passed = check->passed;
  }
  result.text = ReportText(flags, in, report, check ? &*check : nullptr, gantt);
  result.feasible = report.Feasible();
  return result;
}

}  // namespace pipecast
