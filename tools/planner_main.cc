// planner: chooses pipeline stages, partition, schedule, micro-batch size and
// count, and recomputation for a model on N GPUs, and explains the choice.
// With --check it is a CI guard: exit 3 when the prediction regressed against
// a stored plan. Thin by design: flags -> options -> library calls -> exit code.
//
// Exit codes: 0 ok (or check passed), 1 bad input or failure, 2 usage
// (including --gpus 0 and a --tolerance outside [0, 1)), 3 the --check failed
// (also when nothing fits under --check), 4 no configuration fits.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "base/flag_checks.h"
#include "formats/file_util.h"
#include "formats/formats.h"
#include "formats/plan.h"
#include "planner/check.h"
#include "planner/explain.h"
#include "planner/planner.h"
#include "report/gantt.h"
#include "report/planner_report.h"
#include "report/trace.h"
#include "sim/memory.h"
#include "sim/schedule.h"

namespace pipecast {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitBadInput = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCheckFailed = 3;
constexpr int kExitNoFeasiblePlan = 4;

struct Flags {
  std::string model_path;
  int gpus = 0;
  int64_t global_batch = 0;  // 0: the model's global_batch
  std::string cluster;       // empty: the model's device if it is a preset, else ideal
  double memory_gb = -1;     // < 0: the cluster's
  std::vector<std::string> schedules;
  std::vector<int> microbatch_sizes;
  std::vector<int> chunks = {2};
  std::string recompute = "auto";
  int top = 3;
  int threads = 0;
  double optimizer_step_us = 0;
  std::string precision = "bf16";
  std::string optimizer = "adam";
  bool json = false;
  std::string out;
  std::string trace;
  bool gantt = false;  // --gantt: the chosen plan's timeline as a terminal chart
  std::string check;
  double tolerance = 0.02;
  std::string report;        // --report: the self-contained HTML report
  std::string command_line;  // as typed, shown in the report's inputs
};

int Fail(const Status& status, int code = kExitBadInput) {
  fmt::print(stderr, "planner: error: {}\n", status.message());
  return code;
}

// The cluster, and a note saying how it was chosen when --cluster was not given.
Result<Cluster> PickCluster(const Flags& flags, const Model& model, std::string* note) {
  std::string spec = flags.cluster;
  if (spec.empty()) {
    spec = "ideal";
    for (const std::string& name : ClusterPresetNames()) {
      if (name == model.source.device) spec = name;
    }
    *note = fmt::format("cluster '{}' chosen by default ({}); choose with --cluster", spec,
                        spec == "ideal" ? "the model names no preset device; ideal has no "
                                          "communication cost and unlimited memory"
                                        : "the GPU the model was measured on");
  }
  auto cluster = LoadCluster(spec);
  if (!cluster.ok()) return cluster.status().WithPrefix("--cluster");
  if (flags.memory_gb >= 0) {
    cluster->gpu.memory_bytes = static_cast<Bytes>(flags.memory_gb * static_cast<double>(kGiB));
    if (!note->empty()) {
      *note += fmt::format("; its GPU memory is set to {:g} GiB by --memory-gb", flags.memory_gb);
    }
  }
  if (!note->empty()) fmt::print(stderr, "planner: {}\n", *note);
  return cluster;
}

Result<PlannerOptions> MakeOptions(const Flags& flags) {
  PlannerOptions o;
  o.gpus = flags.gpus;
  o.global_batch = flags.global_batch;
  for (const std::string& name : flags.schedules) {
    auto kind = ParseScheduleKind(name);
    if (!kind.ok()) return kind.status().WithPrefix("--schedules");
    o.schedules.push_back(*kind);
  }
  o.microbatch_sizes = flags.microbatch_sizes;
  o.chunks = flags.chunks;
  // "on" is the older name of full, kept so existing commands still run.
  o.recompute = flags.recompute == "off"                               ? RecomputeMode::kOff
                : flags.recompute == "selective"                       ? RecomputeMode::kSelective
                : flags.recompute == "full" || flags.recompute == "on" ? RecomputeMode::kFull
                                                                       : RecomputeMode::kAuto;
  o.top_k = flags.top;
  o.threads = flags.threads;
  o.optimizer_step_ns = UsToNs(flags.optimizer_step_us);
  auto memory = MemoryConfigFor(flags.precision, flags.optimizer);
  if (!memory.ok()) return memory.status();
  o.memory = *memory;
  PIPECAST_RETURN_IF_ERROR(o.Validate());
  return o;
}

// The chosen plan's schedule and options, and, when --trace, --gantt or
// --report needs it, one replay with its timeline recorded (the search
// simulates without timelines).
struct ChosenReplay {
  Schedule schedule;
  SimOptions sim;
  std::optional<SimResult> timeline;
};

Result<ChosenReplay> ReplayChosen(const Flags& flags, const Model& model, const Cluster& cluster,
                                  const PlannerOptions& options, const Candidate& chosen) {
  auto schedule =
      MakeSchedule(chosen.schedule, chosen.pipeline_stages, chosen.microbatches, chosen.chunks);
  if (!schedule.ok()) return schedule.status();
  ChosenReplay r{std::move(schedule.value()), CandidateSimOptions(chosen, options), std::nullopt};
  if (!flags.trace.empty() || flags.gantt || !flags.report.empty()) {
    SimOptions sim = r.sim;
    sim.record_timeline = true;
    auto replay = Simulate(model, cluster, r.schedule, sim);
    if (!replay.ok()) return replay.status().WithPrefix("replaying the chosen plan");
    r.timeline = std::move(replay.value());
  }
  return r;
}

// --out and --trace for the chosen plan; with --gantt, its chart into *gantt.
Status WriteOutputs(const Flags& flags, const Model& model, const std::string& model_hash,
                    const Cluster& cluster, const Candidate& chosen, const ChosenReplay& replay,
                    std::string* gantt) {
  if (!flags.out.empty()) {
    PlanFile plan =
        MakePlanFile(model.name, model_hash, cluster, replay.schedule, replay.sim, *chosen.result);
    PIPECAST_RETURN_IF_ERROR(WriteFileAtomic(flags.out, PlanToJson(plan)).WithPrefix("--out"));
    fmt::print(stderr, "planner: wrote the chosen plan to {}\n", flags.out);
  }
  if (flags.gantt) {
    GanttOptions chart;
    chart.color = GanttColorWanted(isatty(STDOUT_FILENO) != 0, std::getenv("NO_COLOR"));
    *gantt = GanttChart(*replay.timeline, chart);
  }
  if (!flags.trace.empty()) {
    PIPECAST_RETURN_IF_ERROR(
        WriteFileAtomic(flags.trace, TraceJson(*replay.timeline)).WithPrefix("--trace"));
    fmt::print(stderr, "planner: wrote the chosen plan's trace to {}\n", flags.trace);
  }
  return Status::Ok();
}

// --report: the HTML report with the chosen plan's timeline; when nothing
// fits (`replay` null), the rejections and suggestions only.
Status WriteReport(const Flags& flags, const Model& model, const Cluster& cluster,
                   const PlanReport& report, const ChosenReplay* replay) {
  ReportInputs inputs;
  inputs.model_name = model.name;
  inputs.model_layers = static_cast<int>(model.layers.size());
  inputs.cluster = cluster;
  if (replay) inputs = MakeReportInputs(model, cluster, replay->schedule, replay->sim, "");
  inputs.tool = "planner";
  inputs.command_line = flags.command_line;
  const std::string html =
      PlanReportHtml(report, model, replay ? &*replay->timeline : nullptr, inputs);
  PIPECAST_RETURN_IF_ERROR(WriteFileAtomic(flags.report, html).WithPrefix("--report"));
  fmt::print(stderr, "planner: wrote the HTML report to {}\n", flags.report);
  return Status::Ok();
}

int Run(const Flags& flags) {
  auto bytes = ReadFile(flags.model_path);
  if (!bytes.ok()) return Fail(bytes.status());
  auto model = ParseModel(*bytes, flags.model_path);
  if (!model.ok()) return Fail(model.status());
  const std::string model_hash = ModelHash(*bytes);
  CheckOptions check_options;
  check_options.tolerance = flags.tolerance;
  check_options.model_hash = model_hash;
  if (Status st = check_options.Validate(); !st.ok()) return Fail(st, kExitUsage);
  auto options = MakeOptions(flags);
  if (!options.ok()) return Fail(options.status());
  std::string cluster_note;
  auto cluster = PickCluster(flags, *model, &cluster_note);
  if (!cluster.ok()) return Fail(cluster.status());
  std::optional<PlanFile> baseline;
  if (!flags.check.empty()) {
    auto loaded = LoadPlan(flags.check);
    if (!loaded.ok()) return Fail(loaded.status().WithPrefix("--check"));
    baseline = std::move(loaded.value());
  }

  fmt::print(stderr, "planner: searching plans for {} ({} layers) on {} GPUs of {}\n", model->name,
             model->layers.size(), flags.gpus, cluster->name);
  auto report = RunPlanner(*model, *cluster, *options);
  if (!report.ok()) return Fail(report.status());
  if (!cluster_note.empty()) report->notes.push_back(cluster_note);
  fmt::print(stderr, "planner: {} configurations, {} simulated, {}\n", report->enumerated,
             report->simulated,
             report->Feasible() ? "a plan was chosen" : "none can run (the report says why)");

  std::string gantt;
  std::optional<ChosenReplay> replay;
  if (report->Feasible()) {
    auto chosen = ReplayChosen(flags, *model, *cluster, *options, report->ranked[0]);
    if (!chosen.ok()) return Fail(chosen.status());
    replay = std::move(chosen.value());
    Status st =
        WriteOutputs(flags, *model, model_hash, *cluster, report->ranked[0], *replay, &gantt);
    if (!st.ok()) return Fail(st);
  } else if (!flags.out.empty() || !flags.trace.empty()) {
    fmt::print(stderr, "planner: nothing fits, so no --out or --trace file was written\n");
  }
  if (!flags.report.empty()) {
    Status st = WriteReport(flags, *model, *cluster, *report, replay ? &*replay : nullptr);
    if (!st.ok()) return Fail(st);
  }
  std::optional<CheckOutcome> check;
  if (baseline) {
    auto outcome = CheckAgainstBaseline(*baseline, *report, *model, *cluster, check_options);
    if (!outcome.ok()) return Fail(outcome.status());
    check = std::move(outcome.value());
  }

  std::string text = flags.json ? PlanReportToJson(*report, *model, check ? &*check : nullptr)
                                : PlanReportToText(*report, *model);
  if (check && !flags.json) text += "\n" + check->diff;
  if (flags.gantt && !flags.json) {
    text += report->Feasible() ? "\n" + gantt : "\nno chart (--gantt): no configuration fits\n";
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (check) {
    fmt::print(stderr, "planner: check against {} {}\n", flags.check,
               check->passed ? "passed" : "FAILED");
    return check->passed ? kExitOk : kExitCheckFailed;
  }
  return report->Feasible() ? kExitOk : kExitNoFeasiblePlan;
}

}  // namespace
}  // namespace pipecast

int main(int argc, char** argv) {
  pipecast::Flags f;
  CLI::App app{
      "planner: choose pipeline stages, layer partition, schedule, micro-batch size and count, "
      "and recomputation for a model on N GPUs, ranked by simulated throughput.\n"
      "Example: planner --model examples/gpt-small.json --gpus 8 --cluster h100-sxm --out "
      "plan.json\n"
      "Exit codes: 0 ok, 1 bad input, 2 usage, 3 --check failed, 4 no configuration fits."};
  app.add_option("--model", f.model_path, "model.json (pipecast-model/1)")->required();
  app.add_option("--gpus", f.gpus, "GPUs N: p pipeline stages x N/p data-parallel replicas")
      ->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--global-batch", f.global_batch,
                 "samples per iteration (default: the model's global_batch)")
      ->check(CLI::PositiveNumber);
  app.add_option(
      "--cluster", f.cluster,
      "preset (ideal, a100-80gb, h100-sxm, h200, local) or cluster JSON file (default: the "
      "model's device if it is a preset, else ideal)");
  app.add_option("--memory-gb", f.memory_gb, "override the GPU memory, in GiB (0 = unlimited)")
      ->check(pipecast::FiniteRange(pipecast::kMaxMemoryGiB, "GiB"));
  std::string kinds;
  for (pipecast::ScheduleKind k : pipecast::BuiltinScheduleKinds()) {
    kinds += (kinds.empty() ? "" : ", ") + std::string(pipecast::ScheduleKindName(k));
  }
  app.add_option("--schedules", f.schedules,
                 "comma list of schedules to try: " + kinds + " (default: the planner's set)")
      ->delimiter(',');
  app.add_option("--chunks", f.chunks,
                 "comma list of chunks per GPU tried for interleaved and looped-bfs (default 2)")
      ->delimiter(',')
      ->check(CLI::Range(2, 64));
  app.add_option("--microbatch-sizes", f.microbatch_sizes,
                 "comma list of micro-batch sizes (default: the sizes the model was measured at)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--recompute", f.recompute,
                 "activation recomputation: auto (search off, selective and full), off, selective "
                 "(the attention core) or full (layer by layer); on = full")
      ->check(CLI::IsMember({"auto", "off", "selective", "full", "on"}))
      ->capture_default_str();
  app.add_option("--top", f.top, "runners-up to keep besides the choice")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--threads", f.threads, "simulation threads (0 = every core)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--optimizer-step-us", f.optimizer_step_us, "optimizer step time, in us")
      ->check(pipecast::FiniteRange(pipecast::kMaxStepUs, "microseconds"));
  app.add_option("--precision", f.precision,
                 "training precision, for bytes per parameter: bf16, fp16 (mixed) or fp32 "
                 "(docs/simulator.md)")
      ->capture_default_str();
  app.add_option("--optimizer", f.optimizer,
                 "optimizer, for bytes per parameter: adam, sgd or sgd-nomomentum")
      ->capture_default_str();
  app.add_flag("--json", f.json, "print one JSON object instead of the text report");
  app.add_option("--out", f.out, "write the chosen plan (pipecast-plan/1) here");
  app.add_option("--trace", f.trace, "write a Chrome trace (Perfetto) of the chosen plan");
  app.add_option("--report", f.report,
                 "write a self-contained HTML report: trade-off charts, the chosen plan's "
                 "timeline and memory, candidates, rejections (docs/report.md)");
  app.add_flag("--gantt", f.gantt,
               "after the report, draw the chosen plan's timeline in the terminal (a per-rank "
               "summary past 16 ranks or 240 columns); not printed with --json");
  app.add_option("--check", f.check,
                 "compare with a baseline plan.json; exit 3 when throughput or bubble ratio "
                 "regressed beyond --tolerance or the baseline no longer fits");
  app.add_option("--tolerance", f.tolerance,
                 "--check tolerance: relative for throughput (0.02 = 2% drop allowed), absolute "
                 "for bubble ratio (0.02 = 2 points rise allowed)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : pipecast::kExitUsage;
  }
  f.command_line = pipecast::QuoteCommandLine(std::vector<std::string>(argv, argv + argc));
  return pipecast::Run(f);
}
