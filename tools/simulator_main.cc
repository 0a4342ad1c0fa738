// simulator: replays one pipeline schedule for one configuration and prints
// the predicted iteration time, throughput, bubble and memory per stage.
// Thin by design: flags -> options -> library calls -> exit code.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "base/flag_checks.h"
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
#include "sim/partition.h"
#include "sim/schedule.h"
#include "sim/schedule_traits.h"
#include "sim/simulator.h"

namespace pipecast {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitBadInput = 1;
constexpr int kExitUsage = 2;

struct Flags {
  std::string model_path;
  int stages = 0;        // 0: from --partition or --schedule-in
  int microbatches = 0;  // 0: from --schedule-in, else the number of stages
  std::string schedule = "1f1b";
  int chunks = 0;  // v, model chunks per GPU; 0: 2 for interleaved and looped-bfs, else 1
  std::string recompute = "off";
  int microbatch_size = 1;
  std::string partition;
  std::string cluster;  // empty: the preset named by the model's source.device, else ideal
  double memory_gb = -1;
  int data_parallel = 1;
  double optimizer_step_us = 0;
  std::string precision = "bf16";
  std::string optimizer = "adam";
  std::string trace_path;
  std::string report_path;   // --report: the self-contained HTML report
  std::string command_line;  // as typed, shown in the report's inputs
  std::string schedule_out;
  std::string schedule_in;
  std::string plan_path;  // --plan: the configuration comes from plan.json
  bool json = false;
  bool gantt = false;  // --gantt: the timeline as a terminal chart, after the summary
};

int Fail(const Status& status) {
  fmt::print(stderr, "simulator: error: {}\n", status.message());
  return kExitBadInput;
}

Result<Cluster> PickCluster(const Flags& flags, const Model& model) {
  std::string spec = flags.cluster;
  if (spec.empty()) {
    spec = "ideal";
    for (const std::string& name : ClusterPresetNames()) {
      if (name == model.source.device) spec = name;
    }
    fmt::print(stderr, "simulator: cluster '{}' ({}; choose with --cluster)\n", spec,
               spec == "ideal" ? "no communication cost, unlimited memory"
                               : "the GPU the model was measured on");
  }
  auto cluster = LoadCluster(spec);
  if (!cluster.ok()) return cluster.status().WithPrefix("--cluster");
  if (flags.memory_gb >= 0) {
    cluster->gpu.memory_bytes = static_cast<Bytes>(flags.memory_gb * static_cast<double>(kGiB));
  }
  return cluster;
}

Result<Schedule> PickSchedule(const Flags& flags, int num_layers) {
  if (!flags.schedule_in.empty()) {
    auto s = LoadScheduleText(flags.schedule_in);
    if (!s.ok()) return s.status();
    if (flags.stages > 0 && flags.stages != s->num_ranks) {
      return Status::InvalidArgument(fmt::format("--stages {} but '{}' has {} ranks", flags.stages,
                                                 flags.schedule_in, s->num_ranks));
    }
    if (flags.microbatches > 0 && flags.microbatches != s->num_microbatches) {
      return Status::InvalidArgument(fmt::format("--microbatches {} but '{}' has {}",
                                                 flags.microbatches, flags.schedule_in,
                                                 s->num_microbatches));
    }
    return s;
  }
  auto kind = ParseScheduleKind(flags.schedule);
  if (!kind.ok()) return kind.status().WithPrefix("--schedule");
  const int chunks = flags.chunks > 0 ? flags.chunks : TraitsOf(*kind).default_chunks;
  int stages = flags.stages;
  if (stages == 0 && !flags.partition.empty()) {
    // --partition lists every virtual stage: p·v ranges.
    stages =
        (1 + static_cast<int>(std::count(flags.partition.begin(), flags.partition.end(), ','))) /
        chunks;
  }
  if (stages == 0) {
    return Status::InvalidArgument("give the number of pipeline stages with --stages P");
  }
  if (int64_t{stages} * chunks > num_layers && chunks > 1) {
    return Status::InvalidArgument(fmt::format(
        "--stages {} x --chunks {} = {} virtual stages but the model has only {} layers", stages,
        chunks, int64_t{stages} * chunks, num_layers));
  }
  if (stages > num_layers) {
    return Status::InvalidArgument(
        fmt::format("--stages {} but the model has only {} layers: use at most {} stages", stages,
                    num_layers, num_layers));
  }
  return MakeSchedule(*kind, stages, flags.microbatches > 0 ? flags.microbatches : stages, chunks);
}

// What to simulate: the cluster, the schedule and the options.
struct Setup {
  Cluster cluster;
  Schedule schedule;
  SimOptions options;
};

Result<Setup> SetupFromFlags(const Flags& flags, const Model& model) {
  Setup s;
  auto cluster = PickCluster(flags, model);
  if (!cluster.ok()) return cluster.status();
  s.cluster = std::move(cluster.value());
  auto schedule = PickSchedule(flags, static_cast<int>(model.layers.size()));
  if (!schedule.ok()) return schedule.status();
  s.schedule = std::move(schedule.value());
  s.options.microbatch_size = flags.microbatch_size;
  s.options.data_parallel = flags.data_parallel;
  s.options.optimizer_step_ns = UsToNs(flags.optimizer_step_us);
  s.options.recompute = *ParseRecompute(flags.recompute);  // checked by the flag
  auto memory = MemoryConfigFor(flags.precision, flags.optimizer);
  if (!memory.ok()) return memory.status();
  s.options.memory = *memory;
  if (!flags.partition.empty()) {
    auto part = ParsePartition(flags.partition, static_cast<int>(model.layers.size()),
                               s.schedule.num_stages);
    if (!part.ok()) return part.status();
    s.options.partition = *part;
  }
  return s;
}

// --plan: everything but the model comes from the plan. The plan stores only
// the model's hash, so a different model file is a warning, not an error.
Result<Setup> SetupFromPlan(const Flags& flags, const std::string& model_bytes) {
  auto plan = LoadPlan(flags.plan_path);
  if (!plan.ok()) return plan.status().WithPrefix("--plan");
  const std::string hash = ModelHash(model_bytes);
  if (hash != plan->model_hash) {
    fmt::print(stderr,
               "simulator: warning: {} has hash {}, but {} was made for model '{}' with hash {}: "
               "the model file changed since the plan was made\n",
               flags.model_path, hash, flags.plan_path, plan->model_name, plan->model_hash);
  }
  return Setup{plan->cluster, plan->schedule, PlanSimOptions(*plan)};
}

int Run(const Flags& flags) {
  auto bytes = ReadFile(flags.model_path);
  if (!bytes.ok()) return Fail(bytes.status());
  auto model = ParseModel(*bytes, flags.model_path);
  if (!model.ok()) return Fail(model.status());
  auto setup =
      flags.plan_path.empty() ? SetupFromFlags(flags, *model) : SetupFromPlan(flags, *bytes);
  if (!setup.ok()) return Fail(setup.status());
  // Always: the critical path in the summary and --json is derived from the timeline.
  setup->options.record_timeline = true;
  auto result = Simulate(*model, setup->cluster, setup->schedule, setup->options);
  if (!result.ok()) return Fail(result.status());

  if (!flags.schedule_out.empty()) {
    Status st = WriteFileAtomic(flags.schedule_out, ScheduleToText(setup->schedule));
    if (!st.ok()) return Fail(st.WithPrefix("--schedule-out"));
  }
  if (!flags.trace_path.empty()) {
    Status st = WriteFileAtomic(flags.trace_path, TraceJson(*result));
    if (!st.ok()) return Fail(st.WithPrefix("--trace"));
  }
  if (!flags.report_path.empty()) {
    const ReportInputs inputs = MakeReportInputs(*model, setup->cluster, setup->schedule,
                                                 setup->options, flags.command_line);
    Status st = WriteFileAtomic(flags.report_path, SimulationReportHtml(*result, inputs));
    if (!st.ok()) return Fail(st.WithPrefix("--report"));
  }
  const std::string out =
      flags.json ? ResultToJson(*result) : ResultToText(*result, setup->cluster);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (flags.gantt && !flags.json) {
    GanttOptions gantt;
    gantt.color = GanttColorWanted(isatty(STDOUT_FILENO) != 0, std::getenv("NO_COLOR"));
    const std::string chart = "\n" + GanttChart(*result, gantt);
    std::fwrite(chart.data(), 1, chart.size(), stdout);
  }
  return kExitOk;
}

}  // namespace
}  // namespace pipecast

int main(int argc, char** argv) {
  using pipecast::Flags;
  Flags f;
  CLI::App app{
      "simulator: replay a pipeline-parallel training schedule and predict its iteration time, "
      "throughput, bubble and per-stage memory.\n"
      "Example: simulator --model examples/gpt-small.json --stages 4 --microbatches 8 "
      "--schedule 1f1b --cluster h100-sxm"};
  app.add_option("--model", f.model_path, "model.json (pipecast-model/1)")->required();
  CLI::Option* stages = app.add_option("--stages", f.stages, "pipeline stages P (one per GPU)")
                            ->check(CLI::PositiveNumber);
  CLI::Option* microbatches =
      app.add_option("--microbatches", f.microbatches, "micro-batches per iteration (default P)")
          ->check(CLI::PositiveNumber);
  CLI::Option* schedule =
      app.add_option("--schedule", f.schedule,
                     "naive, gpipe, 1f1b, interleaved, pipedream, zb-h1, zb-h2 or looped-bfs "
                     "(docs/schedules.md)")
          ->capture_default_str();
  CLI::Option* chunks =
      app.add_option("--chunks", f.chunks,
                     "model chunks per GPU (v) for interleaved and looped-bfs (default 2)")
          ->check(CLI::PositiveNumber);
  CLI::Option* recompute =
      app.add_option("--recompute", f.recompute,
                     "activation recomputation: off (default), selective (rerun the attention "
                     "core) or full (keep each layer's input, rerun layer by layer); a bare "
                     "--recompute means full")
          ->expected(0, 1)
          ->default_str("full")  // what a bare --recompute sets
          ->check(CLI::IsMember({"off", "selective", "full"}))
          ->option_text("off|selective|full (default off; bare: full)");
  CLI::Option* microbatch_size =
      app.add_option("--microbatch-size", f.microbatch_size,
                     "samples per micro-batch; unmeasured sizes are interpolated")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  CLI::Option* partition = app.add_option(
      "--partition", f.partition, "layers per stage, e.g. 0-3,4-7 (default: balanced on time)");
  CLI::Option* cluster = app.add_option(
      "--cluster", f.cluster,
      "preset (ideal, a100-80gb, h100-sxm, h200, local) or cluster JSON file (default: the "
      "model's device if it is a preset, else ideal)");
  CLI::Option* memory_gb =
      app.add_option("--memory-gb", f.memory_gb, "override the GPU memory, in GiB")
          ->check(pipecast::FiniteRange(pipecast::kMaxMemoryGiB, "GiB"));
  CLI::Option* data_parallel =
      app.add_option("--data-parallel", f.data_parallel, "data-parallel replicas")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  CLI::Option* optimizer_step =
      app.add_option("--optimizer-step-us", f.optimizer_step_us, "optimizer step time, in us")
          ->check(pipecast::FiniteRange(pipecast::kMaxStepUs, "microseconds"));
  CLI::Option* precision = app.add_option("--precision", f.precision,
                                          "training precision, for bytes per parameter: bf16, fp16 "
                                          "(mixed) or fp32 (docs/simulator.md)")
                               ->capture_default_str();
  CLI::Option* optimizer =
      app.add_option("--optimizer", f.optimizer,
                     "optimizer, for bytes per parameter: adam, sgd or sgd-nomomentum")
          ->capture_default_str();
  app.add_option("--trace", f.trace_path, "write a Chrome trace (Perfetto) of the timeline");
  app.add_option("--report", f.report_path,
                 "write a self-contained HTML report: timeline, memory, inputs (docs/report.md)");
  app.add_option("--schedule-out", f.schedule_out, "write the schedule as text");
  CLI::Option* schedule_in =
      app.add_option("--schedule-in", f.schedule_in, "read a custom schedule text");
  CLI::Option* plan = app.add_option(
      "--plan", f.plan_path,
      "replay a plan.json (from planner --out): its schedule, partition, micro-batch size, "
      "data-parallel degree, recomputation and cluster; --model is still required");
  for (CLI::Option* fixed :
       {stages, microbatches, schedule, chunks, recompute, microbatch_size, partition, cluster,
        memory_gb, data_parallel, optimizer_step, schedule_in, precision, optimizer}) {
    plan->excludes(fixed);
  }
  app.add_flag("--json", f.json, "print one JSON object instead of the summary");
  app.add_flag("--gantt", f.gantt,
               "after the summary, draw the timeline in the terminal (a per-rank summary past 16 "
               "ranks or 240 columns); not printed with --json");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : pipecast::kExitUsage;
  }
  f.command_line = pipecast::QuoteCommandLine(std::vector<std::string>(argv, argv + argc));
  return pipecast::Run(f);
}
