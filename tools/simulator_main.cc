// simulator: replays one pipeline schedule for one configuration and prints
// the predicted iteration time, throughput, bubble and memory per stage.
// Thin by design: flags -> SimulatorToolOptions -> RunSimulatorTool
// (tools/simulator_tool.h) -> exit code (base/exit_codes.h).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/cli.h"
#include "base/exit_codes.h"
#include "base/flag_checks.h"
#include "base/terminal_text.h"
#include "formats/file_util.h"
#include "report/gantt.h"
#include "report/html_report.h"
#include "sim/schedule.h"
#include "sim/stage_costs.h"
#include "tools/export_flags.h"
#include "tools/simulator_tool.h"
#include "tools/training_flags.h"

namespace pipecast {
namespace {

int Run(const SimulatorToolOptions& options) {
  if (Status st = options.Validate(); !st.ok()) {
    fmt::print(stderr, "simulator: error: {}\n", TerminalSafeLines(st.message()));
    return kExitUsage;
  }
  auto out = RunSimulatorTool(options, [](const std::string& line) {
    fmt::print(stderr, "simulator: {}\n", TerminalSafeLines(line));
  });
  if (!out.ok()) {
    fmt::print(stderr, "simulator: error: {}\n", TerminalSafeLines(out.status().message()));
    return kExitBadInput;
  }
  std::fwrite(out->data(), 1, out->size(), stdout);
  return kExitOk;
}

}  // namespace
}  // namespace pipecast

int main(int argc, char** argv) {
  pipecast::SimulatorToolOptions f;
  CLI::App app{
      "simulator: replay a pipeline-parallel training schedule and predict its iteration time, "
      "throughput, bubble and per-stage memory.\n"
      "Example: simulator --model examples/gpt-small.json --stages 4 --microbatches 8 "
      "--schedule 1f1b --cluster h100-sxm"};
  app.add_option("--model", f.model_path, "model.json (pipecast-model/1)")->required();
  CLI::Option* stages =
      app.add_option("--stages", f.config.layout.pipeline_stages, "pipeline stages P (one per GPU)")
          ->check(CLI::PositiveNumber);
  CLI::Option* microbatches = app.add_option("--microbatches", f.config.microbatches,
                                             "micro-batches per iteration (default P)")
                                  ->check(CLI::PositiveNumber);
  CLI::Option* schedule =
      app.add_option("--schedule", f.schedule,
                     "one of " + pipecast::JoinNames(pipecast::BuiltinScheduleNames()) +
                         " (docs/schedules.md)")
          ->check(pipecast::OneOf(pipecast::BuiltinScheduleNames()))
          ->capture_default_str();
  CLI::Option* chunks =
      app.add_option("--chunks", f.config.layout.chunks,
                     "model chunks per GPU (v) for interleaved and looped-bfs (default 2)")
          ->check(CLI::PositiveNumber);
  CLI::Option* memory_limit = app.add_option(
      "--memory-limit", f.memory_limit,
      "zb-auto, zb-v-auto: activations a GPU may hold, in micro-batches (16) or bytes (40GiB); "
      "default 2P for zb-auto, P for zb-v-auto");
  CLI::Option* recompute =
      app.add_option(
             "--recompute", f.recompute,
             "activation recomputation: off (default), selective (rerun the attention "
             "core), full (keep each layer's input, rerun layer by layer), op (torchtitan's "
             "per-op policy: keep every other matmul's and the attention's outputs, rerun "
             "the rest) or every:K (checkpoint every K-th block); a bare --recompute "
             "means full (docs/simulator.md)")
          ->expected(0, 1)
          ->default_str("full")  // what a bare --recompute sets
          ->check(
              [](const std::string& v) -> std::string {
                pipecast::Recompute r;
                pipecast::RecomputeLayers l;
                if (pipecast::ParseRecomputeSpec(v, &r, &l)) return "";
                return "'" + v +
                       "' is not one of off, selective, full, op, every:K (K an integer >= 1)";
              },
              "RECOMPUTE")
          ->option_text("off|selective|full|op|every:K (default off; bare: full)");
  CLI::Option* recompute_method =
      app.add_option("--recompute-method", f.recompute_method,
                     "with --recompute full, Megatron-LM's choice of layers: uniform (chunks of N "
                     "layers, each chunk's input kept and the chunk rerun) or block (the first N "
                     "layers of each stage checkpointed, the rest keep their activations); needs "
                     "--recompute-num-layers")
          ->check(pipecast::OneOf({"uniform", "block"}));
  CLI::Option* recompute_num_layers =
      app.add_option("--recompute-num-layers", f.recompute_num_layers,
                     "N of --recompute-method (Megatron-LM --recompute-num-layers)")
          ->check(CLI::Range(1, 1 << 20));
  CLI::Option* microbatch_size =
      app.add_option("--microbatch-size", f.config.microbatch_size,
                     "samples per micro-batch; unmeasured sizes are interpolated")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  CLI::Option* partition = app.add_option(
      "--partition", f.partition,
      "how the layers split into stages: balanced (the default, the planner's: balanced on time "
      "among the splits that fit the GPU's memory), even (Megatron-LM's even split of the "
      "decoder layers; see --first-stage-layers), or the layers per stage, e.g. 0-3,4-7");
  std::vector<CLI::Option*> fixed =
      pipecast::AddTrainingFlags(app, &f.training, "override the GPU memory, in GiB");
  CLI::Option* data_parallel =
      app.add_option("--data-parallel", f.config.layout.data_parallel, "data-parallel replicas")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  CLI::Option* tensor_parallel =
      app.add_option("--tensor-parallel", f.config.layout.tensor_parallel,
                     "tensor-parallel degree t: GPUs of one node that split each layer of a "
                     "stage, Megatron-style (must divide the GPUs per node; docs/simulator.md)")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  CLI::Option* context_parallel =
      app.add_option("--context-parallel", f.config.layout.context_parallel,
                     "context-parallel degree cp: GPUs that split each sample's sequence, with "
                     "the attention's K/V exchanged (--cp-algorithm); rank order t, cp, p, d "
                     "(docs/simulator.md)")
          ->check(CLI::Range(1, pipecast::kMaxContextParallel))
          ->capture_default_str();
  CLI::Option* sequence_parallel = app.add_flag(
      "--sequence-parallel", f.config.layout.sequence_parallel,
      "sequence parallelism over the tensor-parallel group (Megatron-LM --sequence-parallel); "
      "needs --tensor-parallel > 1");
  CLI::Option* tp_comm_overlap = app.add_flag(
      "--tp-comm-overlap", f.config.overlap.tp_comm_overlap,
      "overlap tensor-parallel collectives with the matmuls (Megatron-LM --tp-comm-overlap; the "
      "model is in docs/simulator.md); needs --tensor-parallel > 1");
  CLI::Option* zero = app.add_option("--zero", f.config.memory.zero,
                                     "ZeRO level over the data-parallel replicas: 0 none, 1 "
                                     "optimizer state (Megatron's distributed optimizer), 2 also "
                                     "gradients, 3 also parameters (FSDP)")
                          ->check(CLI::Range(0, 3))
                          ->capture_default_str();
  // How ZeRO 2 and 3 run (sim/memory.h ShardingConfig; docs/simulator.md).
  CLI::Option* reshard = app.add_option("--reshard-after-forward", f.reshard_after_forward,
                                        "ZeRO 3: free gathered parameters after each forward "
                                        "(FSDP FULL_SHARD) or keep them for the backward (off: "
                                        "SHARD_GRAD_OP)")
                             ->check(pipecast::OneOf({"on", "off"}))
                             ->capture_default_str();
  CLI::Option* prefetch = app.add_option("--shard-prefetch", f.shard_prefetch,
                                         "ZeRO 2/3: gathers and reduce-scatters run beside the "
                                         "compute (FSDP forward/backward prefetch); off: in turn")
                              ->check(pipecast::OneOf({"on", "off"}))
                              ->capture_default_str();
  CLI::Option* reduce_every =
      app.add_option("--reduce-every-microbatch", f.reduce_every_microbatch,
                     "ZeRO 2/3: reduce-scatter each micro-batch's gradients "
                     "(FSDP, DeepSpeed); off: once per step (FSDP no_sync)")
          ->check(pipecast::OneOf({"on", "off"}))
          ->capture_default_str();
  CLI::Option* shard_group = app.add_option("--shard-group", f.config.memory.sharding.shard_group,
                                            "ZeRO 2/3: shard over groups of this many replicas "
                                            "and replicate across them (FSDP HYBRID_SHARD, ZeRO++ "
                                            "hpZ); 0: all of them")
                                 ->check(CLI::NonNegativeNumber)
                                 ->capture_default_str();
  app.add_option("--trace", f.trace_path, "write a Chrome trace (Perfetto) of the timeline")
      ->check(pipecast::OutputPath());
  app.add_option("--report", f.report_path,
                 "write a self-contained HTML report: timeline, memory, inputs (docs/report.md)")
      ->check(pipecast::OutputPath());
  app.add_option("--overlap-factor", f.config.overlap.overlap_factor,
                 "an overlapped F&B pair ((F;B)OVERLAP_F_B, dualpipev) lasts this x (F + B less "
                 "the tensor-parallel communication each half hides behind the other's compute)")
      ->check(pipecast::FiniteRange(pipecast::kMaxOverlapFactor, "x (F + B)", 0, true))
      ->capture_default_str();
  pipecast::AddScheduleOutFlags(app, &f.schedule_out, &f.schedule_format,
                                "write the schedule (as text, or see --schedule-format)");
  pipecast::AddExportFlag(app, &f.exports);
  CLI::Option* schedule_in = app.add_option(
      "--schedule-in", f.schedule_in,
      "read a custom schedule: text, or PyTorch's schedule CSV (compute_only or compute_comms)");
  CLI::Option* plan = app.add_option(
      "--plan", f.plan_path,
      "replay a plan.json (from planner --out): its schedule, partition, micro-batch size, "
      "data-parallel and tensor-parallel degrees, recomputation and cluster; --model is still "
      "required");
  for (CLI::Option* o : {stages,
                         microbatches,
                         schedule,
                         chunks,
                         recompute,
                         recompute_method,
                         recompute_num_layers,
                         microbatch_size,
                         partition,
                         data_parallel,
                         tensor_parallel,
                         context_parallel,
                         sequence_parallel,
                         tp_comm_overlap,
                         schedule_in,
                         zero,
                         memory_limit,
                         reshard,
                         prefetch,
                         reduce_every,
                         shard_group}) {
    fixed.push_back(o);
  }
  for (CLI::Option* o : fixed) plan->excludes(o);
  app.add_flag("--json", f.json, "print one JSON object instead of the summary");
  pipecast::AddGanttFlags(app, &f.gantt, &f.gantt_width,
                          "after the summary, draw the timeline in the terminal, fitted to its "
                          "width (a per-rank summary past 16 ranks); not printed with --json");
  if (auto code = pipecast::ParseToolFlags(app, argc, argv, "simulator")) return *code;
  pipecast::RemoveTempFilesOnSignal();
  if (f.gantt_width == 0) f.gantt_width = pipecast::TerminalColumns();
  f.command_line = pipecast::QuoteCommandLine(std::vector<std::string>(argv, argv + argc));
  f.gantt_color = pipecast::GanttColorWanted(isatty(STDOUT_FILENO) != 0, std::getenv("NO_COLOR"));
  return pipecast::Run(f);
}
