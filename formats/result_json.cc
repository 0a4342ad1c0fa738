#include "formats/result_json.h"

#include <nlohmann/json.hpp>
#include <string>

namespace pipecast {
namespace {

using Json = nlohmann::ordered_json;

// `tensor_parallel`: the result's t is above 1 (tp_comm_us is written only then);
// `bidirectional`: the schedule is (copy_reduce_us is written only then).
Json StageJson(const StageResult& r, bool tensor_parallel, bool bidirectional) {
  Json j;
  j["stage"] = r.rank;
  if (r.layers.empty()) {
    j["first_layer"] = nullptr;
    j["last_layer"] = nullptr;
  } else {
    j["first_layer"] = r.layers.front().first_layer;
    j["last_layer"] = r.layers.back().last_layer;
  }
  j["chunks"] = Json::array();
  for (size_t i = 0; i < r.layers.size(); ++i) {
    Json chunk;
    chunk["stage"] = i < r.stages.size() ? Json(r.stages[i]) : Json(nullptr);
    chunk["first_layer"] = r.layers[i].first_layer;
    chunk["last_layer"] = r.layers[i].last_layer;
    j["chunks"].push_back(std::move(chunk));
  }
  j["busy_us"] = NsToUs(r.busy_ns);
  j["first_start_us"] = NsToUs(r.first_start_ns);
  j["last_end_us"] = NsToUs(r.last_end_ns);
  j["bubble_ratio"] = r.bubble_ratio;
  j["bubble_fraction_of_ideal"] = r.bubble_fraction_of_ideal;
  j["peak_inflight_microbatches"] = r.peak_inflight_microbatches;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["fits_memory"] = r.fits_memory;
  j["parameters"] = r.parameters;
  j["allreduce_us"] = NsToUs(r.allreduce_ns);
  j["allreduce_hidden_us"] = NsToUs(r.allreduce_hidden_ns);
  j["grad_buckets"] = r.grad_buckets;
  j["optimizer_us"] = NsToUs(r.optimizer_ns);
  j["allgather_us"] = NsToUs(r.allgather_ns);
  j["sharding_exposed_us"] = NsToUs(r.sharding_exposed_ns);
  if (tensor_parallel) j["tp_comm_us"] = NsToUs(r.tp_comm_ns);
  if (bidirectional) j["copy_reduce_us"] = NsToUs(r.copy_reduce_ns);
  j["weight_versions"] = r.weight_versions;
  Json& m = j["memory"];
  m["weights_bytes"] = r.memory.weights;
  m["gradients_bytes"] = r.memory.gradients;
  m["optimizer_bytes"] = r.memory.optimizer;
  m["activations_peak_bytes"] = r.memory.activations_peak;
  m["comm_buffers_peak_bytes"] = r.memory.comm_buffers_peak;
  m["workspace_peak_bytes"] = r.memory.workspace_peak;
  m["stashed_weights_bytes"] = r.memory.stashed_weights;
  m["gathered_weights_bytes"] = r.memory.gathered_weights;
  // FP8 runs only: the FP8 weight copies, a part of weights_bytes.
  if (r.memory.fp8_weights > 0) m["fp8_weight_copy_bytes"] = r.memory.fp8_weights;
  return j;
}

const char* StepKind(CriticalStep::Kind kind) {
  switch (kind) {
    case CriticalStep::Kind::kCompute:
      return "compute";
    case CriticalStep::Kind::kCommunication:
      return "communication";
    case CriticalStep::Kind::kWaiting:
      return "waiting";
  }
  return "?";
}

Json CriticalPathJson(const SimResult& result) {
  const CriticalPath& cp = *result.critical_path;
  Json j;
  j["length_us"] = NsToUs(cp.length_ns);
  j["compute_us"] = NsToUs(cp.compute_ns);
  if (result.tensor_parallel > 1) j["tp_comm_us"] = NsToUs(cp.tp_comm_ns);
  j["communication_us"] = NsToUs(cp.communication_ns);
  j["waiting_us"] = NsToUs(cp.waiting_ns);
  j["compute_by_stage"] = Json::array();
  for (size_t r = 0; r < cp.compute_by_rank.size(); ++r) {
    j["compute_by_stage"].push_back({{"stage", r}, {"us", NsToUs(cp.compute_by_rank[r])}});
  }
  j["communication_by_link"] = Json::array();
  for (const auto& l : cp.communication_by_link) {
    j["communication_by_link"].push_back(
        {{"src_stage", l.src_rank}, {"dst_stage", l.dst_rank}, {"us", NsToUs(l.ns)}});
  }
  j["steps"] = Json::array();
  for (const CriticalStep& step : cp.steps) {
    j["steps"].push_back({{"kind", StepKind(step.kind)},
                          {"what", CriticalStepName(result, step)},
                          {"stage", step.rank},
                          {"start_us", NsToUs(step.start_ns)},
                          {"end_us", NsToUs(step.end_ns)}});
  }
  return j;
}

}  // namespace

Json ResultJson(const SimResult& result) {
  Json j;
  j["iteration_time_us"] = NsToUs(result.iteration_ns);
  j["pipeline_time_us"] = NsToUs(result.pipeline_ns);
  j["allreduce_time_us"] = NsToUs(result.allreduce_ns);
  j["optimizer_time_us"] = NsToUs(result.optimizer_ns);
  j["throughput_samples_per_s"] = result.samples_per_s;
  if (result.tokens_per_s) j["tokens_per_s"] = *result.tokens_per_s;
  if (result.tflops_per_gpu) j["tflops_per_gpu"] = *result.tflops_per_gpu;
  if (result.mfu) j["mfu"] = *result.mfu;
  j["bubble_ratio"] = result.bubble_ratio;
  j["bubble_fraction_of_ideal"] = result.bubble_fraction_of_ideal;
  j["zb_bubble_rate"] = result.zb_bubble_rate;
  j["schedule"] = result.schedule_name;
  j["ranks"] = result.ranks;
  j["stages_count"] = result.stages;
  j["microbatches"] = result.microbatches;
  j["microbatch_size"] = result.microbatch_size;
  j["data_parallel"] = result.data_parallel;
  // Written only with tensor parallelism, so t = 1 output is as before; absent reads as 1.
  if (result.tensor_parallel > 1) {
    j["tensor_parallel"] = result.tensor_parallel;
    j["sequence_parallel"] = result.sequence_parallel;
    j["tp_comm_overlap"] = result.tp_comm_overlap;
    j["tp_comm_time_us"] = NsToUs(result.tp_comm_ns);
  }
  // Written only with context parallelism, so cp = 1 output is as before; absent reads as 1.
  if (result.context_parallel > 1) {
    j["context_parallel"] = result.context_parallel;
    j["cp_algorithm"] = CpAlgorithmName(result.cp_algorithm);
  }
  // Written only for bidirectional schedules (DualPipe), so other output is as before.
  if (result.bidirectional) {
    j["bidirectional"] = true;
    j["copy_reduce_time_us"] = NsToUs(result.copy_reduce_ns);
  }
  j["zero"] = result.zero;
  // Written only for FP8 runs, so other output is as before.
  if (result.fp8_recipe != Fp8Recipe::kNone) {
    j["precision"] = "fp8";
    j["fp8_recipe"] = Fp8RecipeName(result.fp8_recipe);
    j["fp8_param_gather"] = result.fp8_param_gather;
  }
  j["allgather_time_us"] = NsToUs(result.allgather_ns);
  j["sharding_exposed_time_us"] = NsToUs(result.sharding_exposed_ns);
  j["optimizer_estimated"] = result.optimizer_estimated;
  j["allreduce_hidden_time_us"] = NsToUs(result.allreduce_hidden_ns);
  j["overlap_grad_reduce"] = result.overlap_grad_reduce;
  j["global_batch"] = result.global_batch;
  j["costs_measured"] = result.costs_measured;
  j["notes"] = result.notes;
  j["memory_capacity_bytes"] = result.memory_capacity_bytes;
  j["memory_reserve_bytes"] = result.memory_reserve_bytes;
  j["memory_headroom"] = result.memory_headroom;
  j["memory_headroom_bytes"] = result.memory_headroom_bytes;
  j["memory_limit_bytes"] = result.memory_limit_bytes;
  j["fits_memory"] = result.FitsMemory();  // every rank within the limit
  j["iterations_simulated"] = result.iterations_simulated;
  if (result.iterations_simulated > 1) {
    j["first_iteration_time_us"] = NsToUs(result.first_iteration_ns);  // with the warm-up
  }
  j["stages"] = Json::array();
  for (const StageResult& r : result.per_rank)
    j["stages"].push_back(StageJson(r, result.tensor_parallel > 1, result.bidirectional));
  if (result.critical_path) j["critical_path"] = CriticalPathJson(result);
  return j;
}

std::string ResultToJson(const SimResult& result) {
  // The format key first, as in every file pipecast writes; plan.json's
  // `predicted` block (ResultJson alone) is inside a file that has its own.
  Json j;
  j["format"] = kSimulationFormat;
  j.update(ResultJson(result));
  // Invalid UTF-8 in a name or note becomes U+FFFD instead of throwing.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace pipecast
