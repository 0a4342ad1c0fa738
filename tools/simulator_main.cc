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
#include "sim/training_config.h"
#include "tools/export_flags.h"
#include "tools/simulator_tool.h"
#include "tools/training_flags.h"

namespace pipecast {
namespace {

int Fail(const Status& status, int code) {
  fmt::print(stderr, "simulator: error: {}\n", TerminalSafeLines(status.message()));
  return code;
}

int Run(const SimulatorToolOptions& options) {
  if (Status st = options.Validate(); !st.ok()) return Fail(st, kExitUsage);
  auto out = RunSimulatorTool(options, [](const std::string& line) {
    fmt::print(stderr, "simulator: {}\n", TerminalSafeLines(line));
  });
  if (!out.ok()) return Fail(out.status(), kExitBadInput);
  std::fwrite(out->text.data(), 1, out->text.size(), stdout);
  if (out->over_memory.empty()) return kExitOk;
  // Far over memory is no plan that runs: exit 4 as the planner does when
  // nothing fits (docs/errors.md), unless the user asked to see it anyway.
  fmt::print(stderr, "simulator: {}{}\n",
             options.allow_over_memory ? "warning: " : "error: ", out->over_memory);
  return options.allow_over_memory ? kExitOk : kExitNoFeasiblePlan;
}

// The flags, in groups (docs/simulator.md lists them). Each Add*Flags binds
// its group to `f`, which must outlive the parse, and returns the options a
// --plan replaces (--plan excludes them).

// The pipeline and its schedule: stages, micro-batches, schedule, chunks.
std::vector<CLI::Option*> AddScheduleFlags(CLI::App& app, SimulatorToolOptions* f) {
  TrainingConfig& c = f->config;
  return {
      app.add_option("--stages,--pipeline-stages", c.layout.pipeline_stages,
                     "pipeline stages P (one per GPU)")
          ->check(IntRange(1)),
      app.add_option("--microbatches", c.microbatches, "micro-batches per iteration (default P)")
          ->check(IntRange(1)),
      app.add_option("--schedule", f->schedule,
                     "one of " + JoinNames(BuiltinScheduleNames()) +
                         ", or PyTorch's schedule class of the same order (ScheduleGPipe, "
                         "Schedule1F1B, ScheduleInterleaved1F1B, ScheduleZBVZeroBubble, "
                         "ScheduleDualPipeV, ...; docs/schedules.md)")
          ->check(ScheduleChoice())
          ->capture_default_str(),
      app.add_option("--chunks", c.layout.chunks,
                     "model chunks per GPU (v) for interleaved and looped-bfs (default 2)")
          ->check(IntRange(1)),
      app.add_option("--memory-limit", f->memory_limit,
                     "zb-auto, zb-v-auto: activations a GPU may hold, in micro-batches (16) or "
                     "bytes (40GiB); default 2P for zb-auto, P for zb-v-auto"),
      app.add_option("--schedule-in", f->schedule_in,
                     "read a custom schedule: text, or PyTorch's schedule CSV (compute_only or "
                     "compute_comms)"),
  };
}

// --recompute, --recompute-method, --recompute-num-layers, --recompute-modules.
std::vector<CLI::Option*> AddRecomputeFlags(CLI::App& app, SimulatorToolOptions* f) {
  return {
      app.add_option(
             "--recompute", f->recompute,
             "activation recomputation: off (default), selective (rerun the attention "
             "core), full (keep each layer's input, rerun layer by layer), op (torchtitan's "
             "per-op policy: keep every other matmul's and the attention's outputs, rerun "
             "the rest) or every:K (checkpoint every K-th block); a bare --recompute "
             "means full (docs/simulator.md)")
          ->expected(0, 1)
          ->default_str("full")  // what a bare --recompute sets
          ->check(
              [](const std::string& v) -> std::string {
                Recompute r;
                RecomputeLayers l;
                if (ParseRecomputeSpec(v, &r, &l)) return "";
                return "'" + v +
                       "' is not one of off, selective, full, op, every:K (K an integer >= 1)";
              },
              "RECOMPUTE")
          ->option_text("off|selective|full|op|every:K (default off; bare: full)"),
      app.add_option("--recompute-method", f->recompute_method,
                     "with --recompute full, Megatron-LM's choice of layers: uniform (chunks of "
                     "N layers, each chunk's input kept and the chunk rerun) or block (the first "
                     "N layers of each stage checkpointed, the rest keep their activations); "
                     "needs --recompute-num-layers")
          ->check(OneOf({"uniform", "block"})),
      app.add_option("--recompute-num-layers", f->recompute_num_layers,
                     "N of --recompute-method (Megatron-LM --recompute-num-layers)")
          ->check(IntRange(1, 1 << 20)),
      app.add_option("--recompute-modules", f->recompute_modules,
                     "with --recompute selective, Megatron-LM's modules to recompute, a comma "
                     "list of core_attn (the default), layernorm (the input and pre-MLP norms' "
                     "outputs), moe_act (the routed experts' activation), mla_up_proj (MLA's "
                     "up-projections and rotary) and mlp (a dense block's MLP); "
                     "docs/simulator.md")
          ->option_text("MODULE[,MODULE...]"),
  };
}

// The layout: micro-batch size, partition, data, tensor and context parallelism.
std::vector<CLI::Option*> AddLayoutFlags(CLI::App& app, SimulatorToolOptions* f) {
  TrainingConfig& c = f->config;
  return {
      app.add_option("--microbatch-size", c.microbatch_size,
                     "samples per micro-batch; unmeasured sizes are interpolated")
          ->check(IntRange(1))
          ->capture_default_str(),
      app.add_option("--partition", f->partition,
                     "how the layers split into stages: balanced (the default, the planner's: "
                     "balanced on time among the splits that fit the GPU's memory), even "
                     "(Megatron-LM's even split of the decoder layers; see "
                     "--first-stage-layers), or the layers per stage, e.g. 0-3,4-7"),
      app.add_option("--data-parallel", c.layout.data_parallel, "data-parallel replicas")
          ->check(IntRange(1))
          ->capture_default_str(),
      app.add_option("--tensor-parallel", c.layout.tensor_parallel,
                     "tensor-parallel degree t: GPUs of one node that split each layer of a "
                     "stage, Megatron-style (must divide the GPUs per node and the model's "
                     "heads; docs/simulator.md)")
          ->check(IntRange(1))
          ->capture_default_str(),
      app.add_option("--context-parallel", c.layout.context_parallel,
                     "context-parallel degree cp: GPUs that split each sample's sequence, with "
                     "the attention's K/V exchanged (--cp-algorithm); rank order t, cp, p, d "
                     "(docs/simulator.md)")
          ->check(IntRange(1, kMaxContextParallel))
          ->capture_default_str(),
      app.add_option("--expert-parallel", c.layout.expert_parallel,
                     "expert-parallel degree ep: each GPU holds experts / ep of every MoE "
                     "layer's experts, tokens dispatched and combined by all-to-all; folded "
                     "over the t x cp x d GPUs of a stage (docs/simulator.md)")
          ->check(IntRange(1, kMaxExpertParallel))
          ->capture_default_str(),
      app.add_option("--expert-tensor-parallel", c.layout.expert_tensor_parallel,
                     "expert-tensor-parallel degree etp: GPUs that split each expert; etp x ep "
                     "must divide t x cp x d (docs/simulator.md)")
          ->check(IntRange(1, kMaxExpertParallel))
          ->capture_default_str(),
      app.add_flag("--sequence-parallel", c.layout.sequence_parallel,
                   "sequence parallelism over the tensor-parallel group (Megatron-LM "
                   "--sequence-parallel); needs --tensor-parallel > 1"),
      app.add_flag("--tp-comm-overlap", c.overlap.tp_comm_overlap,
                   "overlap tensor-parallel collectives with the matmuls (Megatron-LM "
                   "--tp-comm-overlap; the model is in docs/simulator.md); needs "
                   "--tensor-parallel > 1"),
      app.add_option("--ep-overlap", f->ep_overlap,
                     "hide each expert all-to-all behind another micro-batch's compute in "
                     "overlapped F&B pairs: on (interleaved and 1f1b on one stage: Megatron-LM's "
                     "combined 1F1B, --overlap-moe-expert-parallel-comm), off, or auto (on for "
                     "dualpipe and dualpipev, whose pairs are made for it; docs/simulator.md)")
          ->check(OneOf({"auto", "on", "off"}))
          ->capture_default_str(),
      app.add_option("--ep-dispatcher", f->ep_dispatcher,
                     "how the expert all-to-alls send tokens: deepep (DeepEP's kernels, one copy "
                     "per destination rank or node, at its published bandwidths), alltoall "
                     "(Megatron-LM's --moe-token-dispatcher-type alltoall: NCCL all-to-all of "
                     "one row per token and expert) or allgather (Megatron-LM's allgather: every "
                     "token all-gathered over the etp x ep group, the output reduce-scattered; "
                     "docs/simulator.md)")
          ->check(OneOf({"deepep", "alltoall", "allgather"}))
          ->capture_default_str(),
  };
}

// ZeRO and how levels 2 and 3 run (sim/memory.h ShardingConfig;
// docs/simulator.md).
std::vector<CLI::Option*> AddShardingFlags(CLI::App& app, SimulatorToolOptions* f) {
  return {
      app.add_option("--zero", f->config.memory.zero,
                     "ZeRO level over the data-parallel replicas: 0 none, 1 optimizer state "
                     "(Megatron's distributed optimizer), 2 also gradients, 3 also parameters "
                     "(FSDP)")
          ->check(IntRange(0, 3))
          ->capture_default_str(),
      app.add_option("--reshard-after-forward", f->reshard_after_forward,
                     "ZeRO 3: free gathered parameters after each forward (FSDP FULL_SHARD) or "
                     "keep them for the backward (off: SHARD_GRAD_OP)")
          ->check(OneOf({"on", "off"}))
          ->capture_default_str(),
      app.add_option("--shard-prefetch", f->shard_prefetch,
                     "ZeRO 2/3: gathers and reduce-scatters run beside the compute (FSDP "
                     "forward/backward prefetch); off: in turn")
          ->check(OneOf({"on", "off"}))
          ->capture_default_str(),
      app.add_option("--reduce-every-microbatch", f->reduce_every_microbatch,
                     "ZeRO 2/3: reduce-scatter each micro-batch's gradients (FSDP, DeepSpeed); "
                     "off: once per step (FSDP no_sync)")
          ->check(OneOf({"on", "off"}))
          ->capture_default_str(),
      app.add_option("--memory-replay", f->memory_replay,
                     "memory as the GPU reports it from a replay of a framework's step through "
                     "PyTorch's caching allocator instead of the flat allocator margin: "
                     "torchtitan-fsdp2 (torchtitan's FSDP2 Llama step: --stages 1 "
                     "--microbatches 1 --zero 3 --recompute op, bf16; docs/simulator.md)")
          ->check(OneOf({"off", "torchtitan-fsdp2"}))
          ->capture_default_str(),
      app.add_option("--shard-group", f->config.memory.sharding.shard_group,
                     "ZeRO 2/3: shard over groups of this many replicas and replicate across "
                     "them (FSDP HYBRID_SHARD, ZeRO++ hpZ); 0: all of them")
          ->check(IntRange(0))
          ->capture_default_str(),
  };
}

// What is written and shown: files, the overlap factor, the summary's form.
// Returns --schedule-format, for ResolveScheduleFormat.
CLI::Option* AddOutputFlags(CLI::App& app, SimulatorToolOptions* f) {
  app.add_option("--trace", f->trace_path, "write a Chrome trace (Perfetto) of the timeline")
      ->check(OutputPath());
  app.add_option("--report", f->report_path,
                 "write a self-contained HTML report: timeline, memory, inputs (docs/report.md)")
      ->check(OutputPath());
  app.add_option("--overlap-factor", f->config.overlap.overlap_factor,
                 "an overlapped F&B pair ((F;B)OVERLAP_F_B, dualpipev) lasts this x (F + B less "
                 "the tensor-parallel communication each half hides behind the other's compute)")
      ->check(FiniteRange(kMaxOverlapFactor, "x (F + B)", 0, true))
      ->capture_default_str();
  CLI::Option* schedule_format =
      AddScheduleOutFlags(app, &f->schedule_out, &f->schedule_format,
                          "write the schedule (as text, or see --schedule-format)");
  AddExportFlag(app, &f->exports);
  app.add_flag("--json", f->json, "print one JSON object instead of the summary");
  AddGanttFlags(app, &f->gantt, &f->gantt_width,
                "after the summary, draw the timeline in the terminal, fitted to its "
                "width (a per-rank summary past 16 ranks); not printed with --json");
  app.add_flag("--allow-over-memory", f->allow_over_memory,
               "exit 0 when a rank's peak memory is over the GPU's limit (default: exit 4, as "
               "the planner does when nothing fits)");
  return schedule_format;
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
  std::vector<CLI::Option*> fixed = pipecast::AddScheduleFlags(app, &f);
  for (const auto& add :
       {pipecast::AddRecomputeFlags, pipecast::AddLayoutFlags, pipecast::AddShardingFlags}) {
    for (CLI::Option* o : add(app, &f)) fixed.push_back(o);
  }
  for (CLI::Option* o : pipecast::AddTrainingFlags(
           app, &f.training, "override the GPU memory, in GiB (0 = unlimited)"))
    fixed.push_back(o);
  CLI::Option* schedule_format = pipecast::AddOutputFlags(app, &f);
  CLI::Option* plan = app.add_option(
      "--plan", f.plan_path,
      "replay a plan.json (from planner --out): its schedule, partition, micro-batch size, "
      "data-parallel and tensor-parallel degrees, recomputation and cluster; --model is still "
      "required");
  for (CLI::Option* o : fixed) plan->excludes(o);
  if (auto code = pipecast::ParseToolFlags(app, argc, argv, "simulator")) return *code;
  if (const std::string error =
          pipecast::ResolveScheduleFormat(*schedule_format, f.schedule_out, &f.schedule_format);
      !error.empty()) {
    return pipecast::Fail(pipecast::Status::InvalidArgument(error), pipecast::kExitUsage);
  }
  pipecast::RemoveTempFilesOnSignal();
  if (f.gantt_width == 0) f.gantt_width = pipecast::TerminalColumns();
  f.command_line = pipecast::QuoteCommandLine(std::vector<std::string>(argv, argv + argc));
  f.gantt_color = pipecast::GanttColorWanted(isatty(STDOUT_FILENO) != 0, std::getenv("NO_COLOR"));
  return pipecast::Run(f);
}
