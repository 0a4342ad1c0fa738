// simulator: replays one pipeline schedule for one configuration and prints
// the predicted iteration time, throughput, bubble and memory per stage.
// Thin by design: flags -> SimulatorToolOptions -> RunSimulatorTool
// (report/simulator_tool.h) -> exit code (base/exit_codes.h).
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
#include "report/simulator_tool.h"
#include "sim/schedule.h"

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
  CLI::Option* stages = app.add_option("--stages", f.stages, "pipeline stages P (one per GPU)")
                            ->check(CLI::PositiveNumber);
  CLI::Option* microbatches =
      app.add_option("--microbatches", f.microbatches, "micro-batches per iteration (default P)")
          ->check(CLI::PositiveNumber);
  CLI::Option* schedule =
      app.add_option("--schedule", f.schedule,
                     "naive, gpipe, 1f1b, interleaved, pipedream, zb-h1, zb-h2 or looped-bfs "
                     "(docs/schedules.md)")
          ->check(pipecast::OneOf(pipecast::BuiltinScheduleNames()))
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
          ->check(pipecast::OneOf({"off", "selective", "full"}))
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
  CLI::Option* tensor_parallel =
      app.add_option("--tensor-parallel", f.tensor_parallel,
                     "tensor-parallel degree t: GPUs of one node that split each layer of a "
                     "stage, Megatron-style (must divide the GPUs per node; docs/simulator.md)")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  CLI::Option* sequence_parallel = app.add_flag(
      "--sequence-parallel", f.sequence_parallel,
      "sequence parallelism over the tensor-parallel group (Megatron-LM --sequence-parallel); "
      "needs --tensor-parallel > 1");
  CLI::Option* tp_comm_overlap = app.add_flag(
      "--tp-comm-overlap", f.tp_comm_overlap,
      "overlap tensor-parallel collectives with the matmuls (Megatron-LM --tp-comm-overlap; the "
      "model is in docs/simulator.md); needs --tensor-parallel > 1");
  CLI::Option* optimizer_step =
      app.add_option("--optimizer-step-us", f.optimizer_step_us,
                     "optimizer step time, in us (default: estimated from HBM bandwidth and the "
                     "bytes Adam touches per parameter, docs/simulator.md)")
          ->check(pipecast::FiniteRange(pipecast::kMaxStepUs, "microseconds"));
  CLI::Option* overlap_grad_reduce =
      app.add_option("--overlap-grad-reduce", f.overlap_grad_reduce,
                     "on: the data-parallel gradient reduction runs in buckets beside the "
                     "backward (Megatron-LM's --overlap-grad-reduce); off: after the last op")
          ->check(pipecast::OneOf({"on", "off"}))
          ->capture_default_str();
  CLI::Option* grad_bucket_params =
      app.add_option("--grad-bucket-params", f.grad_bucket_params,
                     "parameters per gradient bucket (default: Megatron-LM's max(40M, 1M x d))")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  CLI::Option* precision = app.add_option("--precision", f.precision,
                                          "training precision, for bytes per parameter: bf16, fp16 "
                                          "(mixed) or fp32 (docs/simulator.md)")
                               ->check(pipecast::OneOf({"bf16", "fp16", "fp32"}))
                               ->capture_default_str();
  CLI::Option* optimizer =
      app.add_option("--optimizer", f.optimizer,
                     "optimizer, for bytes per parameter: adam, sgd or sgd-nomomentum")
          ->check(pipecast::OneOf({"adam", "sgd", "sgd-nomomentum"}))
          ->capture_default_str();
  CLI::Option* grad_dtype =
      app.add_option(
             "--grad-dtype", f.grad_dtype,
             "main-gradient precision: fp32 (Megatron's default) or bf16 (docs/simulator.md)")
          ->check(pipecast::OneOf({"fp32", "bf16", "fp16"}))
          ->capture_default_str();
  CLI::Option* zero = app.add_option("--zero", f.zero,
                                     "ZeRO level over the data-parallel replicas: 0 none, 1 "
                                     "optimizer state (Megatron's distributed optimizer), 2 also "
                                     "gradients, 3 also parameters (FSDP)")
                          ->check(CLI::Range(0, 3))
                          ->capture_default_str();
  CLI::Option* memory_reserve =
      app.add_option("--memory-reserve-gb", f.memory_reserve_gb,
                     "override the per-GPU runtime reserve (CUDA context, cuBLAS, NCCL), in GiB")
          ->check(pipecast::FiniteRange(pipecast::kMaxMemoryGiB, "GiB"));
  CLI::Option* memory_headroom =
      app.add_option("--memory-headroom", f.memory_headroom,
                     "override the allocator margin, a fraction of capacity (presets: 0.05)")
          ->check(pipecast::FiniteRange(pipecast::kMaxMemoryHeadroom, "fraction of capacity"));
  app.add_option("--trace", f.trace_path, "write a Chrome trace (Perfetto) of the timeline")
      ->check(pipecast::OutputPath());
  app.add_option("--report", f.report_path,
                 "write a self-contained HTML report: timeline, memory, inputs (docs/report.md)")
      ->check(pipecast::OutputPath());
  app.add_option("--overlap-factor", f.overlap_factor,
                 "an overlapped F&B pair ((F;B)OVERLAP_F_B, dualpipev) lasts this x (F + B); "
                 "1: no gain, as without tensor-parallel or expert traffic to hide")
      ->check(pipecast::FiniteRange(pipecast::kMaxOverlapFactor, "x (F + B)", 0, true))
      ->capture_default_str();
  app.add_option("--schedule-out", f.schedule_out,
                 "write the schedule (as text, or see --schedule-format)")
      ->check(pipecast::OutputPath());
  app.add_option("--schedule-format", f.schedule_format,
                 "--schedule-out's format: text, or pytorch-csv (PyTorch's _load_csv reads it)")
      ->check(pipecast::OneOf({"text", "pytorch-csv"}))
      ->capture_default_str();
  CLI::Option* schedule_in = app.add_option(
      "--schedule-in", f.schedule_in,
      "read a custom schedule: text, or PyTorch's schedule CSV (compute_only or compute_comms)");
  CLI::Option* plan = app.add_option(
      "--plan", f.plan_path,
      "replay a plan.json (from planner --out): its schedule, partition, micro-batch size, "
      "data-parallel and tensor-parallel degrees, recomputation and cluster; --model is still "
      "required");
  for (CLI::Option* fixed : {stages,
                             microbatches,
                             schedule,
                             chunks,
                             recompute,
                             microbatch_size,
                             partition,
                             cluster,
                             memory_gb,
                             data_parallel,
                             tensor_parallel,
                             sequence_parallel,
                             tp_comm_overlap,
                             optimizer_step,
                             overlap_grad_reduce,
                             grad_bucket_params,
                             schedule_in,
                             precision,
                             optimizer,
                             grad_dtype,
                             zero,
                             memory_reserve,
                             memory_headroom}) {
    plan->excludes(fixed);
  }
  app.add_flag("--json", f.json, "print one JSON object instead of the summary");
  app.add_flag("--gantt", f.gantt,
               "after the summary, draw the timeline in the terminal, fitted to its width (a "
               "per-rank summary past 16 ranks); not printed with --json");
  app.add_option("--width", f.gantt_width,
                 "--gantt: the chart's width in columns (default: the terminal's, else 130)")
      ->check(CLI::Range(20, 100000));
  if (auto code = pipecast::ParseToolFlags(app, argc, argv, "simulator")) return *code;
  pipecast::RemoveTempFilesOnSignal();
  if (f.gantt_width == 0) f.gantt_width = pipecast::TerminalColumns();
  f.command_line = pipecast::QuoteCommandLine(std::vector<std::string>(argv, argv + argc));
  f.gantt_color = pipecast::GanttColorWanted(isatty(STDOUT_FILENO) != 0, std::getenv("NO_COLOR"));
  return pipecast::Run(f);
}
