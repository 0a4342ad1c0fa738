// Presenting a SimResult: the `--json` object scripts rely on, and the short
// human summary. Both name the two bubble forms plainly: `bubble_ratio`
// (idle share of the pipeline span, mean over ranks) and
// `bubble_fraction_of_ideal` (Megatron-LM's bubble / ideal time).
#ifndef PIPECAST_SIM_REPORT_H_
#define PIPECAST_SIM_REPORT_H_

#include <string>

#include "sim/cluster.h"
#include "sim/simulator.h"

namespace pipecast {

// One JSON object (pretty, 2-space indent, trailing newline). Keys:
// iteration_time_us, pipeline_time_us, allreduce_time_us, optimizer_time_us,
// throughput_samples_per_s, tokens_per_s?, tflops_per_gpu?, mfu?,
// bubble_ratio, bubble_fraction_of_ideal, schedule, ranks, stages_count,
// microbatches, microbatch_size, data_parallel, global_batch,
// costs_measured, notes, memory_capacity_bytes, iterations_simulated, and
// `stages`: per rank stage, first_layer, last_layer, chunks, busy_us,
// first_start_us, last_end_us, bubble_ratio, bubble_fraction_of_ideal,
// peak_inflight_microbatches, peak_memory_bytes, allreduce_us,
// weight_versions, and `memory` {weights_bytes, gradients_bytes,
// optimizer_bytes, activations_peak_bytes, comm_buffers_peak_bytes,
// workspace_peak_bytes, stashed_weights_bytes}; then `critical_path` when
// the timeline was recorded {length_us, compute_us, communication_us,
// waiting_us, compute_by_stage, communication_by_link, steps}.
std::string ResultToJson(const SimResult& result);

// A few lines of summary and a table per rank, for people.
std::string ResultToText(const SimResult& result, const Cluster& cluster);

}  // namespace pipecast

#endif  // PIPECAST_SIM_REPORT_H_
