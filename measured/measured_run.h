// A measured run: what the traces of a real training run (one Chrome trace per
// pipeline rank) say in pipecast's own terms -- per iteration and rank the GPU
// window, compute busy time, communication by collective and how much of it
// showed (not overlapped by compute), idle time per stream, time per phase,
// and the pipeline's ops where the trace names them -- and the same as a
// SimResult timeline, so that the validator's comparison, its Chrome trace and
// the HTML report serve measured runs as they serve simulations.
//
// Two sources:
//  - PyTorch profiler (Kineto) traces. Iterations are ProfilerStep#N ranges;
//    a GPU kernel, memcpy or memset belongs to the step, phase and action of
//    the CPU ranges around the runtime call that launched it (joined by
//    correlation id): the innermost phase-bearing range on the launching
//    thread at the launch, else the innermost on another thread of the
//    process (the main thread's "## backward ##" covers the autograd
//    thread's launches), else a PyTorch autograd op around the launch
//    (backward). When a step marks no phase at all, kernels the main thread
//    launched outside the optimizer are the forward (inferred, and the notes
//    say so). Communication kernels are classified by name
//    (measured/names.h), refined by the enclosing "nccl:<op>" range.
//  - Traces pipecast wrote (simulator --trace, validator --trace): the op
//    events themselves, of the processes labelled `label` ("measured" in a
//    validator's side-by-side trace), one iteration.
//
// Definitions (docs/measured-runs.md), per step and rank:
//   window: first GPU activity start to last end of the work launched in the
//     step; compute: the union of its non-communication activity; comm: the
//     union of its communication kernels; exposed comm: comm not overlapped
//     by compute; a stream's idle time: the window less the stream's union.
// Across ranks the run's iteration time for step N is the latest window end
// less the earliest window start over the ranks (the ranks' clocks are taken
// as one: Kineto stamps with the host's real-time clock), and the report
// describes the step with the median iteration time.
//
// Units: ns, bytes. Plain values; pure functions; thread-safe.
#ifndef PIPECAST_MEASURED_MEASURED_RUN_H_
#define PIPECAST_MEASURED_MEASURED_RUN_H_

#include <array>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "measured/names.h"
#include "measured/trace_file.h"
#include "sim/simulator.h"

namespace pipecast::measured {

// One op of the pipeline as measured: a pipeline action (PP:<action>, or a
// pipecast trace's op), or for traces without action names a run of
// same-phase work (`inferred`: numbered in order, not by micro-batch).
struct MeasuredOp {
  Action action;
  TimeNs start_ns = 0;    // its GPU work's first start (CPU range when it launched none)
  TimeNs end_ns = 0;      // and last end
  TimeNs compute_ns = 0;  // union of its compute kernels
  TimeNs comm_ns = 0;     // union of its communication kernels
  // Not a pipeline action (phase ranges, or inferred phases): its
  // micro-batch is its number among the rank's ops of its kind, in order.
  bool inferred = false;
};

struct RankStep {
  int step = 0;                             // N of ProfilerStep#N (pipecast traces: 0)
  TimeNs start_ns = 0, end_ns = 0;          // the GPU window (absolute, the trace's clock)
  TimeNs cpu_start_ns = 0, cpu_end_ns = 0;  // the ProfilerStep range
  TimeNs compute_ns = 0;
  TimeNs comm_ns = 0;
  TimeNs exposed_comm_ns = 0;
  std::array<TimeNs, kCommKinds> comm_by_kind{};     // union per collective
  std::array<TimeNs, kCommKinds> exposed_by_kind{};  // of which not under compute
  std::array<TimeNs, kPhases> compute_by_phase{};    // union per phase
  std::array<TimeNs, kPhases> comm_by_phase{};       // union per phase
  std::map<int, TimeNs> stream_busy;                 // stream -> union of its activity
  // (phase, stream) -> plain sum of kernel durations: what a hand count of a
  // profile adds up (docs/calibration.md's pair table).
  std::map<std::pair<int, int>, TimeNs> kernel_sum_by_phase_stream;
  std::vector<MeasuredOp> ops;  // by start
  int gpu_activities = 0;
  int comm_kernels = 0;
  Bytes peak_allocated_bytes = -1;  // PyTorch "[memory]" Total Allocated; -1: none in the trace
  bool phases_inferred = false;     // no phase range: forward inferred from the main thread
  bool forward_backward_interleave = false;  // F and B ranges alternate: an overlapped pair

  TimeNs span_ns() const { return end_ns - start_ns; }
};

struct MeasuredRank {
  std::string file;
  int rank = 0;                    // position in the run (pipeline rank)
  std::optional<int> global_rank;  // distributedInfo.rank
  std::optional<int> world_size;
  std::string device;
  std::string ops_from;  // "pipeline actions (PP:...)", "phase ranges", "pipecast trace", ...
  std::vector<RankStep> steps;  // by step number
  int unmatched_launches = 0;   // GPU work whose launch is not in the trace
  int outside_steps = 0;        // GPU work launched outside every ProfilerStep
};

struct MeasuredRun {
  std::vector<MeasuredRank> ranks;
  std::vector<int> steps;            // step numbers every rank has, ascending
  std::vector<TimeNs> iteration_ns;  // per common step: latest end - earliest start
  int median = 0;                    // index into steps: the median iteration
  bool pipecast_trace = false;
  std::vector<std::string> notes;

  // Rank r's record of common step index `i`.
  const RankStep& Step(int r, int i) const;
};

struct MeasureOptions {
  // Pipecast traces: the processes whose name starts with this label
  // ("measured rank 0 ..."); empty = "measured" when a process has it, else
  // every rank process of the file.
  std::string label;
  // Steps skipped at the start of each rank's trace (warm-up).
  int skip_steps = 0;
  Status Validate() const;
};

// Builds the run from its traces, one per pipeline rank in rank order (a
// pipecast trace may hold every rank in one file). InvalidArgument naming the
// file: a Kineto trace with no ProfilerStep range or no GPU work in its steps;
// traces that disagree (world sizes, the same distributedInfo rank twice, no
// step number common to all); FailedPrecondition when skip_steps leaves none.
Result<MeasuredRun> BuildMeasuredRun(const std::vector<TraceFile>& traces,
                                     const MeasureOptions& options = {});

// Reads the files and builds the run (ReadTraceFile errors pass through).
Result<MeasuredRun> MeasureFiles(const std::vector<std::string>& paths,
                                 const MeasureOptions& options = {});

// Common step `i` as a SimResult timeline in the simulator's terms, its time
// origin at the earliest rank's window start: ops per rank, and per rank
// busy_ns = compute (the sum of op durations for pipecast traces, as the
// validator counts), first/last times, bubble ratio 1 - busy / span, peak
// memory when measured; pipeline_ns = iteration_ns = the iteration time.
SimResult MeasuredTimeline(const MeasuredRun& run, int i);

}  // namespace pipecast::measured

#endif  // PIPECAST_MEASURED_MEASURED_RUN_H_
