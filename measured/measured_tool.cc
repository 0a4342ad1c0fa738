#include "measured/measured_tool.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/text_table.h"
#include "formats/file_util.h"
#include "measured/compare_measured.h"
#include "measured/megatron_log.h"
#include "measured/pair_check.h"
#include "measured/report_html.h"
#include "measured/summary.h"
#include "report/trace.h"

namespace pipecast::measured {
namespace {

using Json = nlohmann::ordered_json;

double Us(TimeNs ns) { return NsToUs(ns); }

Json StepJson(const RankStep& s) {
  Json j;
  j["step"] = s.step;
  j["window_us"] = Us(s.span_ns());
  j["compute_us"] = Us(s.compute_ns);
  j["comm_us"] = Us(s.comm_ns);
  j["exposed_comm_us"] = Us(s.exposed_comm_ns);
  Json kinds = Json::object();
  for (int k = 0; k < kCommKinds; ++k) {
    if (s.comm_by_kind[k] == 0) continue;
    kinds[CommKindName(static_cast<CommKind>(k))] = {{"us", Us(s.comm_by_kind[k])},
                                                     {"exposed_us", Us(s.exposed_by_kind[k])}};
  }
  j["comm_by_kind"] = kinds;
  Json phases = Json::object();
  for (int p = 0; p < kPhases; ++p) {
    if (s.compute_by_phase[p] == 0 && s.comm_by_phase[p] == 0) continue;
    phases[PhaseName(static_cast<Phase>(p))] = {{"compute_us", Us(s.compute_by_phase[p])},
                                                {"comm_us", Us(s.comm_by_phase[p])}};
  }
  j["phases"] = phases;
  Json streams = Json::array();
  for (const auto& [stream, busy] : s.stream_busy) {
    streams.push_back(
        {{"stream", stream}, {"busy_us", Us(busy)}, {"idle_us", Us(s.span_ns() - busy)}});
  }
  j["streams"] = streams;
  j["ops"] = s.ops.size();
  j["phases_inferred"] = s.phases_inferred;
  if (s.peak_allocated_bytes >= 0) j["peak_allocated_bytes"] = s.peak_allocated_bytes;
  if (std::optional<PairCheck> pair = CheckPair(s)) {
    j["pair_model"] = {{"forward_compute_us", Us(pair->forward_compute_ns)},
                       {"forward_comm_us", Us(pair->forward_comm_ns)},
                       {"backward_compute_us", Us(pair->backward_compute_ns)},
                       {"weight_compute_us", Us(pair->weight_compute_ns)},
                       {"backward_comm_us", Us(pair->backward_comm_ns)},
                       {"predicted_us", Us(pair->predicted_ns)},
                       {"measured_us", Us(pair->measured_ns)},
                       {"error", pair->error}};
  }
  return j;
}

Json RunJson(const MeasuredRun& run) {
  Json j;
  j["steps"] = run.steps;
  Json iters = Json::array();
  for (TimeNs t : run.iteration_ns) iters.push_back(Us(t));
  j["iterations_us"] = iters;
  j["median_step"] = run.steps[run.median];
  Json ranks = Json::array();
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    const MeasuredRank& m = run.ranks[r];
    Json e;
    e["rank"] = m.rank;
    e["file"] = m.file;
    e["global_rank"] = m.global_rank ? Json(*m.global_rank) : Json(nullptr);
    e["world_size"] = m.world_size ? Json(*m.world_size) : Json(nullptr);
    e["device"] = m.device;
    e["ops_from"] = m.ops_from;
    const RankStep& s = run.Step(static_cast<int>(r), run.median);
    const TimeNs iteration = run.iteration_ns[run.median];
    // 1 - busy / iteration, as the validator's per-stage row.
    e["bubble_ratio"] =
        iteration > 0 ? 1.0 - static_cast<double>(s.compute_ns) / static_cast<double>(iteration)
                      : 0.0;
    e["median_step"] = StepJson(s);
    ranks.push_back(std::move(e));
  }
  j["ranks"] = ranks;
  j["notes"] = run.notes;
  return j;
}

std::string Dump(const Json& j) {
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::string LogSummaryText(const MegatronLog& log) {
  std::string out = fmt::format("Megatron-LM log {}: {} iteration lines, {} memory reports\n",
                                log.origin, log.iterations.size(), log.memory.size());
  TextTable t;
  t.AddColumn("iteration", TextTable::kRight);
  t.AddColumn("elapsed per iteration (ms)", TextTable::kRight);
  t.AddColumn("TFLOP/s/GPU", TextTable::kRight);
  t.AddColumn("global batch", TextTable::kRight);
  for (const MegatronIteration& it : log.iterations) {
    t.AddRow({std::to_string(it.iteration), fmt::format("{:.1f}", it.elapsed_ms),
              it.tflops ? fmt::format("{:.1f}", *it.tflops) : "-",
              it.global_batch ? std::to_string(*it.global_batch) : "-"});
  }
  out += t.Render("  ");
  if (!log.memory.empty()) {
    out += "\n";
    TextTable m;
    m.AddColumn("rank", TextTable::kRight);
    m.AddColumn("max allocated (MiB)", TextTable::kRight);
    for (const auto& [rank, bytes] : log.MaxAllocatedBytes()) {
      m.AddRow({std::to_string(rank), fmt::format("{:.1f}", static_cast<double>(bytes) / kMiB)});
    }
    out += m.Render("  ");
  }
  return out;
}

ReportInputs InputsOf(const Prediction& p, const std::string& command_line) {
  ReportInputs in;
  in.tool = "validator";
  in.model_name = p.model_name;
  in.cluster = p.cluster;
  in.schedule = p.plan.schedule_name;
  in.pipeline_stages = p.plan.config.layout.pipeline_stages;
  in.chunks = p.plan.config.layout.chunks;
  in.microbatches = p.plan.config.microbatches;
  in.microbatch_size = p.plan.config.microbatch_size;
  in.data_parallel = p.plan.config.layout.data_parallel;
  in.recompute = p.plan.config.recompute;
  in.command_line = command_line;
  return in;
}

std::string ComparisonText(const std::string& what, const Prediction& p,
                           const validate::Comparison& c, const std::vector<std::string>& notes) {
  std::string out = fmt::format(
      "validator: measured run against the plan: model {}, schedule {}, {} stages{}, {} "
      "micro-batches of {}\n",
      p.model_name, p.plan.schedule_name, p.plan.config.layout.pipeline_stages,
      p.plan.config.layout.data_parallel > 1
          ? fmt::format(" x {} data-parallel", p.plan.config.layout.data_parallel)
          : "",
      p.plan.config.microbatches, p.plan.config.microbatch_size);
  out += fmt::format("  measured: {}\n", what);
  out += fmt::format("  predicted on cluster '{}'\n", p.cluster.name);
  for (const std::string& n : notes) out += "  note: " + n + "\n";
  std::string iters;
  for (TimeNs t : c.iteration_ns) iters += fmt::format(" {:.3f}", NsToMs(t));
  out += fmt::format("  measured iterations (ms):{}; the table shows the median\n\n", iters);
  out += validate::ComparisonTableText(c.rows, "  ");
  out += c.within_tolerance ? "\nverdict: every checked metric is within tolerance\n"
                            : "\nverdict: BEYOND TOLERANCE (exit 3)\n";
  return out;
}

std::string RunWhat(const MeasuredRun& run) {
  std::string files;
  for (const MeasuredRank& r : run.ranks) {
    if (files.find(r.file) == std::string::npos) files += (files.empty() ? "" : ", ") + r.file;
  }
  return fmt::format("{} rank{} ({}), step {} (the median of {})", run.ranks.size(),
                     run.ranks.size() == 1 ? "" : "s", files, run.steps[run.median],
                     run.steps.size());
}

// The comparison as --json writes it: the measured side as `measured`, the
// plan's model and schedule when `p` is given.
std::string ComparisonJson(Json measured, const Prediction* p, const validate::Comparison& c,
                           const std::vector<std::string>& notes) {
  Json j;
  j["format"] = "pipecast-measured-comparison/1";
  if (p != nullptr) {
    j["model"] = p->model_name;
    j["schedule"] = p->plan.schedule_name;
  }
  j["measured"] = std::move(measured);
  j["notes"] = notes;
  j["metrics"] = validate::ComparisonRowsJson(c.rows);
  j["within_tolerance"] = c.within_tolerance;
  return Dump(j);
}

}  // namespace

Status MeasuredToolOptions::Validate() const {
  if (traces.empty() == megatron_log.empty()) {
    return Status::InvalidArgument(
        "give either --measured (traces, one per pipeline rank) or --megatron-log, not both");
  }
  if (!plan_path.empty() && model_path.empty()) {
    return Status::InvalidArgument(
        "--plan needs --model: the model.json the plan was made for, to simulate it again");
  }
  if (!report_out.empty() && plan_path.empty()) {
    return Status::InvalidArgument(
        "--report draws the predicted and measured timelines one above the other: give --plan "
        "and --model");
  }
  if (!trace_out.empty() && !megatron_log.empty()) {
    return Status::InvalidArgument("--trace needs traces (--measured): a log has no timeline");
  }
  PIPECAST_RETURN_IF_ERROR(measure.Validate());
  PIPECAST_RETURN_IF_ERROR(ParseMegatronRankOrder(rank_order).status());
  return tolerances.Validate();
}

Result<MeasuredToolResult> RunMeasuredTool(const MeasuredToolOptions& o) {
  PIPECAST_RETURN_IF_ERROR(o.Validate());
  std::vector<NamedPath> inputs;
  for (const std::string& t : o.traces) inputs.push_back({"--measured", t});
  if (!o.megatron_log.empty()) inputs.push_back({"--megatron-log", o.megatron_log});
  if (!o.plan_path.empty()) inputs.push_back({"--plan", o.plan_path});
  if (!o.model_path.empty()) inputs.push_back({"--model", o.model_path});
  std::vector<NamedPath> outputs;
  if (!o.trace_out.empty()) outputs.push_back({"--trace", o.trace_out});
  if (!o.report_out.empty()) outputs.push_back({"--report", o.report_out});
  PIPECAST_RETURN_IF_ERROR(CheckOutputs(outputs, inputs));

  MeasuredToolResult out;
  if (!o.megatron_log.empty()) {
    PIPECAST_ASSIGN_OR_RETURN(MegatronLog log, ReadMegatronLog(o.megatron_log));
    if (o.plan_path.empty()) {
      out.text = LogSummaryText(log);
      return out;
    }
    PIPECAST_ASSIGN_OR_RETURN(Prediction p, PredictPlan(o.plan_path, o.model_path, o.cluster));
    std::vector<std::string> notes = p.notes;
    PIPECAST_ASSIGN_OR_RETURN(validate::Comparison c,
                              CompareLog(p, log, *ParseMegatronRankOrder(o.rank_order),
                                         o.measure.skip_steps, o.tolerances, &notes));
    const std::string what = fmt::format("Megatron-LM log {}", o.megatron_log);
    out.compared = true;
    out.within_tolerance = c.within_tolerance;
    out.text =
        o.json ? ComparisonJson(Json(what), nullptr, c, notes) : ComparisonText(what, p, c, notes);
    return out;
  }

  PIPECAST_ASSIGN_OR_RETURN(MeasuredRun run, MeasureFiles(o.traces, o.measure));
  const SimResult measured = MeasuredTimeline(run, run.median);
  if (o.plan_path.empty()) {
    if (!o.trace_out.empty()) {
      PIPECAST_RETURN_IF_ERROR(
          WriteFileAtomic(o.trace_out, TraceJson(measured, TraceOptions{"measured", 0}))
              .WithPrefix("--trace"));
    }
    if (o.json) {
      Json j;
      j["format"] = "pipecast-measured-run/1";
      const Json body = RunJson(run);
      for (const auto& [k, v] : body.items()) j[k] = v;
      out.text = Dump(j);
    } else {
      out.text = MeasuredRunText(run);
    }
    return out;
  }
  PIPECAST_ASSIGN_OR_RETURN(Prediction p, PredictPlan(o.plan_path, o.model_path, o.cluster));
  std::vector<std::string> notes = p.notes;
  notes.insert(notes.end(), run.notes.begin(), run.notes.end());
  PIPECAST_ASSIGN_OR_RETURN(validate::Comparison c, CompareRun(p, run, o.tolerances, &notes));
  out.compared = true;
  out.within_tolerance = c.within_tolerance;
  if (!o.trace_out.empty()) {
    PIPECAST_RETURN_IF_ERROR(
        WriteFileAtomic(o.trace_out, validate::SideBySideTrace(p.predicted, measured))
            .WithPrefix("--trace"));
  }
  const std::string what = RunWhat(run);
  if (!o.report_out.empty()) {
    ComparisonPage page;
    page.title = fmt::format("{}: measured run against its plan", p.model_name);
    page.inputs = InputsOf(p, o.command_line);
    page.measured_what = what;
    page.rows = c.rows;
    page.notes = notes;
    page.predicted = &p.predicted;
    page.measured = &measured;
    PIPECAST_RETURN_IF_ERROR(
        WriteFileAtomic(o.report_out, ComparisonReportHtml(page)).WithPrefix("--report"));
  }
  out.text =
      o.json ? ComparisonJson(RunJson(run), &p, c, notes) : ComparisonText(what, p, c, notes);
  return out;
}

}  // namespace pipecast::measured
