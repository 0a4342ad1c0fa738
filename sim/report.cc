#include "sim/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "sim/text_table.h"

namespace pipecast {
namespace {

using Json = nlohmann::ordered_json;

Json StageJson(const StageResult& r) {
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
  j["allreduce_us"] = NsToUs(r.allreduce_ns);
  j["weight_versions"] = r.weight_versions;
  Json& m = j["memory"];
  m["weights_bytes"] = r.memory.weights;
  m["gradients_bytes"] = r.memory.gradients;
  m["optimizer_bytes"] = r.memory.optimizer;
  m["activations_peak_bytes"] = r.memory.activations_peak;
  m["comm_buffers_peak_bytes"] = r.memory.comm_buffers_peak;
  m["workspace_peak_bytes"] = r.memory.workspace_peak;
  m["stashed_weights_bytes"] = r.memory.stashed_weights;
  return j;
}

std::string StepName(const SimResult& result, const CriticalStep& step) {
  switch (step.kind) {
    case CriticalStep::Kind::kCompute:
      return ActionName(result.ops[step.op].action);
    case CriticalStep::Kind::kCommunication: {
      const TransferRecord& t = result.transfers[step.transfer];
      return fmt::format("send {} {}->{} mb{}", t.gradient ? "grad" : "act", t.src_stage,
                         t.dst_stage, t.microbatch);
    }
    case CriticalStep::Kind::kWaiting:
      return "wait";
  }
  return "?";
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
                          {"what", StepName(result, step)},
                          {"stage", step.rank},
                          {"start_us", NsToUs(step.start_ns)},
                          {"end_us", NsToUs(step.end_ns)}});
  }
  return j;
}

// "critical path 42.000 ms = compute 40.000 ms + ..." and the chain, with
// consecutive steps on one rank folded ("1F0..1F3 (4 ops)").
std::string CriticalPathText(const SimResult& result) {
  const CriticalPath& cp = *result.critical_path;
  std::string out = fmt::format(
      "critical path       {:.3f} ms = compute {:.3f} ms + communication {:.3f} ms + waiting "
      "{:.3f} ms\n",
      NsToMs(cp.length_ns), NsToMs(cp.compute_ns), NsToMs(cp.communication_ns),
      NsToMs(cp.waiting_ns));
  std::vector<std::pair<TimeNs, int>> ranks;
  for (size_t r = 0; r < cp.compute_by_rank.size(); ++r) {
    if (cp.compute_by_rank[r] > 0) ranks.push_back({-cp.compute_by_rank[r], static_cast<int>(r)});
  }
  std::sort(ranks.begin(), ranks.end());
  std::string by_rank;
  for (const auto& [neg, r] : ranks) {
    by_rank +=
        fmt::format("{}rank {} {:.3f} ms ({})", by_rank.empty() ? "" : ", ", r, NsToMs(-neg),
                    PercentText(static_cast<double>(-neg) / std::max<TimeNs>(cp.length_ns, 1)));
  }
  out += "  compute on the path by rank: " + by_rank + "\n";
  for (const auto& l : cp.communication_by_link) {
    out += fmt::format("  communication on the path, rank {} -> {}: {:.3f} ms\n", l.src_rank,
                       l.dst_rank, NsToMs(l.ns));
  }
  std::string chain;
  for (size_t i = 0; i < cp.steps.size();) {
    size_t j = i + 1;
    while (j < cp.steps.size() && cp.steps[j].kind == cp.steps[i].kind &&
           cp.steps[j].rank == cp.steps[i].rank && cp.steps[j].dst_rank == cp.steps[i].dst_rank) {
      ++j;
    }
    std::string group = StepName(result, cp.steps[i]);
    if (j - i > 1) {
      group += fmt::format("..{} ({} steps)", StepName(result, cp.steps[j - 1]), j - i);
    }
    chain += (chain.empty() ? "" : " -> ") + group;
    i = j;
  }
  out += "  path: " + chain + "\n";
  return out;
}

// "0-3", or "0-1,8-9" for a rank with two chunks; a single layer is "5".
std::string LayerRanges(const std::vector<StageLayers>& layers) {
  std::string out;
  for (const StageLayers& l : layers) {
    if (!out.empty()) out += ",";
    out += l.first_layer == l.last_layer ? fmt::format("{}", l.first_layer)
                                         : fmt::format("{}-{}", l.first_layer, l.last_layer);
  }
  return out.empty() ? "-" : out;
}

bool OverCapacity(const SimResult& result, const StageResult& r) {
  return result.memory_capacity_bytes > 0 && r.peak_memory_bytes > result.memory_capacity_bytes;
}

std::string Summary(const SimResult& result, const Cluster& cluster) {
  std::string out;
  std::string stages;
  if (result.stages != result.ranks && result.ranks > 0) {
    stages = fmt::format(", {} stages ({} chunks per rank)", result.stages,
                         result.stages / result.ranks);
  }
  out += fmt::format(
      "schedule {}: {} ranks x {} data-parallel{}, {} micro-batches of size {} (global batch "
      "{})\n",
      result.schedule_name, result.ranks, result.data_parallel, stages, result.microbatches,
      result.microbatch_size, result.global_batch);
  out += fmt::format(
      "iteration time      {:.3f} ms  (pipeline {:.3f} ms, all-reduce {:.3f} ms, optimizer "
      "{:.3f} ms)\n",
      NsToMs(result.iteration_ns), NsToMs(result.pipeline_ns), NsToMs(result.allreduce_ns),
      NsToMs(result.optimizer_ns));
  out += fmt::format("throughput          {:.1f} samples/s\n", result.samples_per_s);
  if (result.tokens_per_s) {
    out += fmt::format("                    {:.0f} tokens/s\n", *result.tokens_per_s);
  }
  if (result.tflops_per_gpu) {
    out += fmt::format("model FLOP/s        {:.1f} TFLOP/s per GPU\n", *result.tflops_per_gpu);
  }
  if (result.mfu) {
    std::string peak;
    if (cluster.gpu.peak_tflops > 0) {
      peak = fmt::format(" of {:.1f} TFLOP/s peak per GPU ({})", cluster.gpu.peak_tflops,
                         cluster.name);
    }
    out += fmt::format("MFU                 {}{}\n", PercentText(*result.mfu), peak);
  }
  out += fmt::format(
      "bubble ratio        {} of the pipeline span idle (mean over ranks: 1 - busy/span)\n",
      PercentText(result.bubble_ratio));
  out += fmt::format("bubble / ideal      {} (Megatron-LM's bubble time fraction: idle / busy)\n",
                     PercentText(result.bubble_fraction_of_ideal));
  if (result.memory_capacity_bytes > 0) {
    out += fmt::format("memory capacity     {} GiB per GPU ({})\n",
                       GiBText(result.memory_capacity_bytes), cluster.name);
  } else {
    out += fmt::format("memory capacity     unlimited ({})\n", cluster.name);
  }
  if (!result.costs_measured) {
    out += "costs               not all measured: some are interpolated (see the notes)\n";
  }
  return out;
}

std::string RankTable(const SimResult& result) {
  TextTable t;
  t.AddColumn("rank", TextTable::kRight);
  t.AddColumn("layers", TextTable::kLeft);
  t.AddColumn("busy ms", TextTable::kRight);
  t.AddColumn("first start ms", TextTable::kRight);
  t.AddColumn("last end ms", TextTable::kRight);
  t.AddColumn("bubble ratio", TextTable::kRight);
  t.AddColumn("bubble / ideal", TextTable::kRight);
  t.AddColumn("peak in-flight", TextTable::kRight);
  t.AddColumn("peak memory GiB", TextTable::kRight);
  t.AddColumn("of capacity", TextTable::kRight);
  t.AddColumn("", TextTable::kLeft);
  for (const StageResult& r : result.per_rank) {
    std::string of_capacity = "unlimited";
    if (result.memory_capacity_bytes > 0) {
      of_capacity = PercentText(static_cast<double>(r.peak_memory_bytes) /
                                static_cast<double>(result.memory_capacity_bytes));
    }
    t.AddRow(
        {fmt::format("{}", r.rank), LayerRanges(r.layers), fmt::format("{:.3f}", NsToMs(r.busy_ns)),
         fmt::format("{:.3f}", NsToMs(r.first_start_ns)),
         fmt::format("{:.3f}", NsToMs(r.last_end_ns)), PercentText(r.bubble_ratio),
         PercentText(r.bubble_fraction_of_ideal), fmt::format("{}", r.peak_inflight_microbatches),
         GiBText(r.peak_memory_bytes), of_capacity, OverCapacity(result, r) ? "OVER" : ""});
  }
  std::string out = t.Render();
  for (const StageResult& r : result.per_rank) {
    if (OverCapacity(result, r)) {
      out += fmt::format("OVER: rank {} needs {} GiB, over the {} GiB capacity by {} GiB\n", r.rank,
                         GiBText(r.peak_memory_bytes), GiBText(result.memory_capacity_bytes),
                         GiBText(r.peak_memory_bytes - result.memory_capacity_bytes));
    }
  }
  return out;
}

std::string MemoryTable(const SimResult& result) {
  TextTable t;
  t.AddColumn("rank", TextTable::kRight);
  t.AddColumn("weights", TextTable::kRight);
  t.AddColumn("grads", TextTable::kRight);
  t.AddColumn("optimizer", TextTable::kRight);
  t.AddColumn("activations peak", TextTable::kRight);
  t.AddColumn("comm peak", TextTable::kRight);
  t.AddColumn("workspace peak", TextTable::kRight);
  t.AddColumn("total peak", TextTable::kRight);
  for (const StageResult& r : result.per_rank) {
    const MemoryBreakdown& m = r.memory;
    t.AddRow({fmt::format("{}", r.rank), GiBText(m.weights), GiBText(m.gradients),
              GiBText(m.optimizer), GiBText(m.activations_peak), GiBText(m.comm_buffers_peak),
              GiBText(m.workspace_peak), GiBText(r.peak_memory_bytes)});
  }
  return "memory per rank, GiB (each part's own peak; the total is the peak of their sum)\n" +
         t.Render();
}

}  // namespace

std::string ResultToJson(const SimResult& result) {
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
  j["schedule"] = result.schedule_name;
  j["ranks"] = result.ranks;
  j["stages_count"] = result.stages;
  j["microbatches"] = result.microbatches;
  j["microbatch_size"] = result.microbatch_size;
  j["data_parallel"] = result.data_parallel;
  j["global_batch"] = result.global_batch;
  j["costs_measured"] = result.costs_measured;
  j["notes"] = result.notes;
  j["memory_capacity_bytes"] = result.memory_capacity_bytes;
  j["iterations_simulated"] = result.iterations_simulated;
  if (result.iterations_simulated > 1) {
    j["first_iteration_time_us"] = NsToUs(result.first_iteration_ns);  // with the warm-up
  }
  j["stages"] = Json::array();
  for (const StageResult& r : result.per_rank) j["stages"].push_back(StageJson(r));
  if (result.critical_path) j["critical_path"] = CriticalPathJson(result);
  // Invalid UTF-8 in a name or note becomes U+FFFD instead of throwing.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::string ResultToText(const SimResult& result, const Cluster& cluster) {
  std::string out = Summary(result, cluster);
  if (result.critical_path) out += CriticalPathText(result);
  out += "\n" + RankTable(result);
  out += "\n" + MemoryTable(result);
  if (!result.notes.empty()) out += "\n";
  for (const std::string& note : result.notes) out += "note: " + note + "\n";
  return out;
}

}  // namespace pipecast
