// planner: chooses pipeline stages, partition, schedule, micro-batch size and
// count, and recomputation for a model on N GPUs, and explains the choice.
// With --check it is a CI guard: exit 3 when the prediction regressed against
// a stored plan. Thin by design: flags -> PlannerToolOptions -> RunPlannerTool
// (tools/planner_tool.h) -> exit code.
//
// Exit codes (base/exit_codes.h): 0 ok (or check passed), 1 bad input or
// failure, 2 usage (including --gpus 0 and a --tolerance outside [0, 1)),
// 3 the --check failed (also when nothing fits under --check), 4 no
// configuration fits.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/cli.h"
#include "base/clock.h"
#include "base/exit_codes.h"
#include "base/flag_checks.h"
#include "base/terminal_text.h"
#include "formats/file_util.h"
#include "report/gantt.h"
#include "report/html_report.h"
#include "report/search_progress.h"
#include "sim/schedule.h"
#include "sim/stage_costs.h"
#include "sim/training_config.h"
#include "tools/export_flags.h"
#include "tools/planner_tool.h"
#include "tools/training_flags.h"

namespace pipecast {
namespace {

int Fail(const Status& status, int code = kExitBadInput) {
  fmt::print(stderr, "planner: error: {}\n", TerminalSafeLines(status.message()));
  return code;
}

int Run(PlannerToolOptions options, double progress_after_s) {
  if (Status st = options.Validate(); !st.ok()) return Fail(st, kExitUsage);
  // Progress on stderr: a bar on a terminal, plain lines otherwise.
  const SteadyClock clock;
  SearchProgressStyle style;
  style.bar = isatty(STDERR_FILENO) != 0;
  style.after_ns = static_cast<TimeNs>(progress_after_s * 1e9);
  SearchProgressDisplay display(clock, style, [](const std::string& text) {
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  });
  options.search_progress = [&display](const SearchProgress& p) { display.Update(p); };
  auto result = RunPlannerTool(options, [&display](const std::string& line) {
    display.Finish();
    fmt::print(stderr, "planner: {}\n", TerminalSafeLines(line));
  });
  display.Finish();
  if (!result.ok()) return Fail(result.status());
  std::fwrite(result->text.data(), 1, result->text.size(), stdout);
  if (result->checked) {
    fmt::print(stderr, "planner: check against {} {}\n", options.check,
               result->check_passed ? "passed" : "FAILED");
    return result->check_passed ? kExitOk : kExitCheckFailed;
  }
  return result->feasible ? kExitOk : kExitNoFeasiblePlan;
}

// The flags, in groups (docs/planner.md lists them). Each Add*Flags binds
// its group to `f`, which must outlive the parse.

// What is planned for: the model, the GPUs, the batch and the shared flags.
void AddProblemFlags(CLI::App& app, PlannerToolOptions* f) {
  app.add_option("--model", f->model_path, "model.json (pipecast-model/1)")->required();
  app.add_option("--gpus", f->gpus,
                 "GPUs N = t tensor-parallel x p pipeline stages x d data-parallel replicas")
      ->required()
      ->check(IntRange(1));
  app.add_option("--global-batch", f->global_batch,
                 "samples per iteration (default: the model's global_batch)")
      ->check(IntRange(1, INT64_MAX));
  AddTrainingFlags(app, &f->training, "override the GPU memory, in GiB (0 = unlimited)");
}

// What the search tries: schedules, chunks, micro-batch sizes, recomputation
// and partition. A list flag that repeats a value tries it once.
void AddSearchFlags(CLI::App& app, PlannerToolOptions* f) {
  app.add_option(
         "--schedules,--schedule", f->schedules,
         "comma list of schedules to try: " + JoinNames(BuiltinScheduleNames()) +
             ", or PyTorch's schedule classes (ScheduleGPipe, Schedule1F1B, "
             "ScheduleInterleaved1F1B, ...; docs/schedules.md) (default: the planner's set)")
      ->delimiter(',')
      ->check(ScheduleChoice());
  app.add_option("--chunks", f->chunks,
                 "comma list of chunks per GPU tried for interleaved and looped-bfs (default 2)")
      ->delimiter(',')
      ->check(IntRange(2, 64));
  app.add_option("--microbatch-sizes,--microbatch-size", f->microbatch_sizes,
                 "comma list of micro-batch sizes (default: the sizes the model was measured at)")
      ->delimiter(',')
      ->check(IntRange(1));
  app.add_option("--recompute", f->recompute,
                 "activation recomputation: auto (search off, selective, full, and op when the "
                 "model gives the per-op policy's fields), or a comma list of off, selective "
                 "(the attention core), full (layer by layer), op (torchtitan's per-op policy) "
                 "and every:K (every K-th block); on = full (docs/planner.md)")
      ->check(
          [](const std::string& v) -> std::string {
            if (v == "auto") return "";
            Result<std::vector<RecomputeChoice>> listed = ParseRecomputeList(v);
            return listed.ok() ? "" : listed.status().message();
          },
          "RECOMPUTE")
      ->capture_default_str();
  app.add_option("--recompute-method", f->recompute_method,
                 "Megatron-LM's choice of layers for the full entries of --recompute: uniform or "
                 "block; needs --recompute-num-layers")
      ->check(OneOf({"uniform", "block"}));
  app.add_option("--recompute-num-layers", f->recompute_num_layers,
                 "N of --recompute-method (Megatron-LM --recompute-num-layers)")
      ->check(IntRange(1, 1 << 20));
  app.add_option("--recompute-modules", f->recompute_modules,
                 "Megatron-LM's modules for the selective entries of --recompute: a comma list "
                 "of core_attn (the default), layernorm, moe_act, mla_up_proj and mlp "
                 "(docs/simulator.md)")
      ->option_text("MODULE[,MODULE...]");
  app.add_option("--partition", f->partition,
                 "how the layers split into stages: balanced (pipecast's: on time among the "
                 "splits that fit), even (Megatron-LM's even split of the decoder layers; see "
                 "--first-stage-layers) or both (each configuration with each; the report says "
                 "which the choice uses)")
      ->check(OneOf({"balanced", "even", "both"}))
      ->capture_default_str();
  app.add_option("--top", f->top, "runners-up to keep besides the choice")
      ->check(IntRange(0))
      ->capture_default_str();
  app.add_option("--threads", f->threads, "simulation threads (0 = every core)")
      ->check(IntRange(0));
}

// The parallel layout: ZeRO, tensor, context and sequence parallelism, and the pins.
void AddLayoutFlags(CLI::App& app, PlannerToolOptions* f) {
  app.add_option("--zero", f->zero,
                 "comma list of ZeRO levels to try: 0 none, 1 optimizer state (Megatron's "
                 "distributed optimizer), 2 also gradients, 3 also parameters (FSDP) (default: "
                 "0,1,3 when d > 1)")
      ->delimiter(',')
      ->check(IntRange(0, 3));
  app.add_option("--tensor-parallel", f->tensor_parallel,
                 "comma list of tensor-parallel degrees t to try (default: every t dividing the "
                 "GPUs per node, N and the heads, where the model has tensor-parallel costs)")
      ->delimiter(',')
      ->check(IntRange(1));
  app.add_option("--context-parallel", f->context_parallel,
                 "comma list of context-parallel degrees cp to try (default: 1, and from 8192 "
                 "tokens per sample every power of two whose 2 x cp divides the sequence; "
                 "docs/planner.md)")
      ->delimiter(',')
      ->check(IntRange(1, kMaxContextParallel));
  app.add_option("--expert-parallel", f->expert_parallel,
                 "comma list of expert-parallel degrees ep to try (default: 1, and for an MoE "
                 "model every power of two up to N dividing its experts; each folded over a "
                 "stage's t x cp x d GPUs; docs/planner.md)")
      ->delimiter(',')
      ->check(IntRange(1, kMaxExpertParallel));
  app.add_option("--expert-tensor-parallel", f->expert_tensor_parallel,
                 "comma list of expert-tensor-parallel degrees etp to try (default: 1)")
      ->delimiter(',')
      ->check(IntRange(1, kMaxExpertParallel));
  app.add_option("--sequence-parallel", f->sequence_parallel,
                 "sequence parallelism at t > 1: auto (try off and on), on or off")
      ->check(OneOf({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_flag("--tp-comm-overlap", f->tp_comm_overlap,
               "overlap tensor-parallel collectives with the matmuls (Megatron-LM "
               "--tp-comm-overlap; docs/simulator.md)");
  app.add_option("--ep-overlap", f->ep_overlap,
                 "hide expert all-to-alls behind another micro-batch's compute in overlapped F&B "
                 "pairs: auto (the schedule decides: on for dualpipe and dualpipev), on "
                 "(interleaved and one-stage 1f1b run Megatron-LM's combined 1F1B), off, or both "
                 "(each configuration with off and, where it can run it, on; docs/planner.md)")
      ->check(OneOf({"auto", "on", "off", "both"}))
      ->capture_default_str();
  app.add_option("--ep-dispatcher", f->ep_dispatcher,
                 "the expert dispatcher at ep > 1 or etp > 1: deepep (DeepEP's deduplicated "
                 "dispatch), alltoall (Megatron-LM's NCCL all-to-all, one row per token and "
                 "expert), allgather (Megatron-LM's all-gather of every token over the etp x ep "
                 "group), both (each such configuration with deepep and alltoall) or all (with "
                 "each of the three; docs/planner.md)")
      ->check(OneOf({"deepep", "alltoall", "allgather", "both", "all"}))
      ->capture_default_str();
  app.add_option("--stages,--pipeline-stages", f->pipeline_stages,
                 "pin the pipeline degree p (a divisor of --gpus; default: searched)")
      ->check(IntRange(1));
  app.add_option("--data-parallel", f->data_parallel, "pin the data-parallel degree d")
      ->check(IntRange(1));
  app.add_option("--microbatches", f->microbatches,
                 "pin the micro-batch count m (global batch = size x m x d)")
      ->check(IntRange(1));
}

// How ZeRO 2 and 3 run (PlannerOptions::sharding; docs/planner.md), and a configuration to
// compare the choice with.
void AddShardingFlags(CLI::App& app, PlannerToolOptions* f) {
  app.add_option("--reshard-after-forward", f->reshard_after_forward,
                 "ZeRO 3: free gathered parameters after each forward (on: FSDP FULL_SHARD), "
                 "keep them for the backward (off: SHARD_GRAD_OP), or try both (auto)")
      ->check(OneOf({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--shard-prefetch", f->shard_prefetch,
                 "ZeRO 2/3: gathers and reduce-scatters beside the compute (FSDP prefetch); "
                 "off: in turn")
      ->check(OneOf({"on", "off"}))
      ->capture_default_str();
  app.add_option("--reduce-every-microbatch", f->reduce_every_microbatch,
                 "ZeRO 2/3: reduce-scatter each micro-batch's gradients (on), once per step (off: "
                 "FSDP no_sync), or try both (auto)")
      ->check(OneOf({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--shard-group", f->shard_group,
                 "ZeRO 2/3: shard over groups of N replicas and replicate across them (FSDP "
                 "HYBRID_SHARD); 0: all replicas; auto: try all and, where the replicas span "
                 "nodes, one node's")
      ->capture_default_str();
  app.add_option("--compare-to", f->compare_to,
                 "a configuration to compare the choice with: its words, e.g. \"d=8 zero=3 "
                 "mbs=2 recompute=full\" (those of a label the planner prints; unnamed fields are "
                 "searched), or a plan.json; the report says how much faster the choice is "
                 "expected to be");
}

// What is written: the report's form, the files, the chart, the check and
// the progress display. Returns --schedule-format, for ResolveScheduleFormat.
CLI::Option* AddOutputFlags(CLI::App& app, PlannerToolOptions* f, double* progress_after_s) {
  app.add_flag("--json", f->json, "print one JSON object instead of the text report");
  app.add_option("--out", f->out, "write the chosen plan (pipecast-plan/1) here")
      ->check(OutputPath());
  app.add_option("--trace", f->trace, "write a Chrome trace (Perfetto) of the chosen plan")
      ->check(OutputPath());
  CLI::Option* schedule_format =
      AddScheduleOutFlags(app, &f->schedule_out, &f->schedule_format,
                          "write the chosen plan's schedule (as text, or see --schedule-format)");
  AddExportFlag(app, &f->exports);
  app.add_option("--report", f->report,
                 "write a self-contained HTML report: trade-off charts, the chosen plan's "
                 "timeline and memory, candidates, rejections (docs/report.md)")
      ->check(OutputPath());
  AddGanttFlags(app, &f->gantt, &f->gantt_width,
                "after the report, draw the chosen plan's timeline in the terminal (a "
                "per-rank summary past 16 ranks or 240 columns); not printed with --json");
  app.add_option("--check", f->check,
                 "compare with a baseline plan.json; exit 3 when throughput or bubble ratio "
                 "regressed beyond --tolerance or the baseline no longer fits");
  app.add_option("--tolerance", f->tolerance,
                 "--check tolerance: relative for throughput (0.02 = 2% drop allowed), absolute "
                 "for bubble ratio (0.02 = 2 points rise allowed)")
      ->capture_default_str();
  app.add_option("--progress-after", *progress_after_s,
                 "show the search's progress on stderr once it has run this many seconds (a "
                 "bar on a terminal, plain lines otherwise; 0 = from the start)")
      ->capture_default_str()
      ->check(FiniteRange(1e6, "seconds"));
  return schedule_format;
}

}  // namespace
}  // namespace pipecast

int main(int argc, char** argv) {
  pipecast::PlannerToolOptions f;
  CLI::App app{
      "planner: choose pipeline stages, layer partition, schedule, micro-batch size and count, "
      "and recomputation for a model on N GPUs, ranked by simulated throughput.\n"
      "Example: planner --model examples/gpt-small.json --gpus 8 --cluster h100-sxm --out "
      "plan.json"};
  double progress_after_s = 2;
  pipecast::AddProblemFlags(app, &f);
  pipecast::AddSearchFlags(app, &f);
  pipecast::AddLayoutFlags(app, &f);
  pipecast::AddShardingFlags(app, &f);
  CLI::Option* schedule_format = pipecast::AddOutputFlags(app, &f, &progress_after_s);
  if (auto code = pipecast::ParseToolFlags(app, argc, argv, "planner")) return *code;
  if (const std::string error =
          pipecast::ResolveScheduleFormat(*schedule_format, f.schedule_out, &f.schedule_format);
      !error.empty()) {
    return pipecast::Fail(pipecast::Status::InvalidArgument(error), pipecast::kExitUsage);
  }
  pipecast::RemoveTempFilesOnSignal();
  if (f.gantt_width == 0) f.gantt_width = pipecast::TerminalColumns();
  f.command_line = pipecast::QuoteCommandLine(std::vector<std::string>(argv, argv + argc));
  f.gantt_color = pipecast::GanttColorWanted(isatty(STDOUT_FILENO) != 0, std::getenv("NO_COLOR"));
  return pipecast::Run(f, progress_after_s);
}
