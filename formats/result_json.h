// The simulation result as JSON: the `--json` object of `simulator` and the
// `predicted` block of plan.json. Names both bubble forms plainly:
// `bubble_ratio` (idle share of the pipeline span, mean over ranks) and
// `bubble_fraction_of_ideal` (Megatron-LM's bubble / ideal time).
// Pure functions; thread-safe.
#ifndef PIPECAST_FORMATS_RESULT_JSON_H_
#define PIPECAST_FORMATS_RESULT_JSON_H_

#include <nlohmann/json.hpp>
#include <string>

#include "sim/simulator.h"

namespace pipecast {

// The `format` key of the simulator's --json object.
inline constexpr char kSimulationFormat[] = "pipecast-simulation/1";

// One JSON object (pretty, 2-space indent, trailing newline). Keys:
// format (kSimulationFormat), iteration_time_us, pipeline_time_us, allreduce_time_us,
// optimizer_time_us, throughput_samples_per_s, tokens_per_s?, tflops_per_gpu?, mfu?, bubble_ratio,
// bubble_fraction_of_ideal, schedule, ranks, stages_count, microbatches, microbatch_size,
// data_parallel, zero, allgather_time_us, sharding_exposed_time_us, global_batch, costs_measured,
// notes, memory_capacity_bytes, memory_reserve_bytes, memory_headroom (fraction),
// memory_headroom_bytes, memory_limit_bytes (capacity - reserve - headroom; 0 = unlimited),
// with --memory-replay memory_replay, replay_reserved_peak_bytes and replay_allocated_peak_bytes,
// fits_memory (every rank within the limit), iterations_simulated, and `stages`: per rank stage,
// first_layer, last_layer, chunks, busy_us, first_start_us, last_end_us, bubble_ratio,
// bubble_fraction_of_ideal, peak_inflight_microbatches, peak_memory_bytes, fits_memory (peak within
// memory_limit_bytes), parameters, allreduce_us, allgather_us,
// sharding_exposed_us, weight_versions, and `memory` {weights_bytes,
// gradients_bytes, optimizer_bytes, activations_peak_bytes,
// comm_buffers_peak_bytes, workspace_peak_bytes, stashed_weights_bytes,
// gathered_weights_bytes}; then `critical_path` when
// the timeline was recorded {length_us, compute_us, communication_us,
// waiting_us, compute_by_stage, communication_by_link, steps}.
std::string ResultToJson(const SimResult& result);

// The same object without `format`, as a JSON value, for callers that embed it in their own
// JSON (plan.json's `predicted`, the planner's --json). Strings are kept as
// they are: dump with error_handler_t::replace where they may not be UTF-8.
nlohmann::ordered_json ResultJson(const SimResult& result);

}  // namespace pipecast

#endif  // PIPECAST_FORMATS_RESULT_JSON_H_
