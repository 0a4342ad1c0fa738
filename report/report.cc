#include "report/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "base/terminal_text.h"
#include "base/text_table.h"

namespace pipecast {
namespace {

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
  if (result.tensor_parallel > 1) {
    out +=
        fmt::format("  of that compute, tensor-parallel communication inside the ops: {:.3f} ms\n",
                    NsToMs(cp.tp_comm_ns));
  }
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
    std::string group = CriticalStepName(result, cp.steps[i]);
    if (j - i > 1) {
      group += fmt::format("..{} ({} steps)", CriticalStepName(result, cp.steps[j - 1]), j - i);
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

// Over the limit (capacity - reserve - margin); unlimited memory never is.
bool OverCapacity(const SimResult& result, const StageResult& r) {
  return result.memory_limit_bytes > 0 && r.peak_memory_bytes > result.memory_limit_bytes;
}

}  // namespace

std::string DataParallelCommText(const SimResult& result) {
  if (result.zero < 2) {
    return fmt::format("{} {:.3f} ms", result.zero == 1 ? "reduce-scatter" : "all-reduce",
                       NsToMs(result.allreduce_ns));
  }
  std::string text =
      fmt::format("per-op {} {:.3f} ms exposed",
                  result.zero == 3 ? "all-gathers and reduce-scatters" : "reduce-scatters",
                  NsToMs(result.sharding_exposed_ns));
  if (result.allreduce_ns > 0) {
    text += fmt::format(", reduce-scatter {:.3f} ms", NsToMs(result.allreduce_ns));
  }
  return text;
}

namespace {

// The schedule and shape, and the iteration time with its parts.
std::string RunLines(const SimResult& result) {
  std::string out;
  std::string stages;
  if (result.stages != result.ranks && result.ranks > 0) {
    stages = fmt::format(", {} stages ({} chunks per rank)", result.stages,
                         result.stages / result.ranks);
  }
  out += fmt::format("schedule {}: {} x {} data-parallel{}, {} of size {} (global batch {})\n",
                     TerminalSafe(result.schedule_name), Count(result.ranks, "rank", "ranks"),
                     result.data_parallel, stages,
                     Count(result.microbatches, "micro-batch", "micro-batches"),
                     result.microbatch_size, result.global_batch);
  out += fmt::format(
      "iteration time      {:.3f} ms  (pipeline {:.3f} ms, {}{}, optimizer {:.3f} "
      "ms{}{})\n",
      NsToMs(result.iteration_ns), NsToMs(result.pipeline_ns), DataParallelCommText(result),
      result.overlap_grad_reduce && result.zero < 2
          ? fmt::format(" exposed, {:.3f} ms hidden behind the backward",
                        NsToMs(result.allreduce_hidden_ns))
          : "",
      NsToMs(result.optimizer_ns), result.optimizer_estimated ? " (estimated)" : "",
      result.zero == 1 || result.zero == 2
          ? fmt::format(", parameter all-gather {:.3f} ms", NsToMs(result.allgather_ns))
          : "");
  return out;
}

// The parallelism beyond the pipeline: two copies, tensor, context, FP8, ZeRO.
std::string ParallelismLines(const SimResult& result) {
  std::string out;
  if (result.bidirectional) {
    out += fmt::format(
        "two copies          bidirectional: ranks k and p-1-k hold the same two model chunks and "
        "sum their gradients after the pipeline, {:.3f} ms (before the data-parallel "
        "reduction)\n",
        NsToMs(result.copy_reduce_ns));
  }
  if (result.tensor_parallel > 1) {
    out += fmt::format(
        "tensor parallelism  t = {} GPUs of one node per rank (tp innermost: rank k on GPUs "
        "k*t..k*t+t-1), sequence parallelism {}, comm overlap {}; collectives in the ops up to "
        "{:.3f} ms per rank\n",
        result.tensor_parallel, result.sequence_parallel ? "on" : "off",
        result.tp_comm_overlap ? "on" : "off", NsToMs(result.tp_comm_ns));
  }
  if (result.context_parallel > 1) {
    const int n = result.tensor_parallel * result.context_parallel;
    out += fmt::format(
        "context parallelism cp = {} GPUs split each sample's sequence ({}; rank order t, cp, p, "
        "d: rank k on GPUs k*{}..k*{}+{}); activations / {}, gradients reduced over d x cp = {} "
        "GPUs\n",
        result.context_parallel,
        result.cp_algorithm == CpAlgorithm::kRing ? "ring: K/V blocks passed beside the attention"
                                                  : "all-gather of K/V before the attention",
        n, n, n - 1, result.context_parallel, result.data_parallel * result.context_parallel);
  }
  if (result.expert_parallel > 1 || result.expert_tensor_parallel > 1) {
    out += fmt::format(
        "expert parallelism  ep = {}, etp = {}, folded over each stage's GPUs (edp = {}); "
        "dispatch and combine all-to-alls{} in the MoE layers' ops, {:.3f} ms per iteration on "
        "the busiest rank ({}; docs/simulator.md)\n",
        result.expert_parallel, result.expert_tensor_parallel,
        static_cast<int64_t>(result.tensor_parallel) * result.context_parallel *
            result.data_parallel /
            (int64_t{result.expert_parallel} * result.expert_tensor_parallel),
        result.expert_tensor_parallel > 1 && result.ep_dispatcher == ExpertDispatcher::kAllToAll
            ? " and etp's all-gathers and reduce-scatters"
            : "",
        NsToMs(result.ep_comm_ns),
        result.ep_dispatcher == ExpertDispatcher::kAllToAll
            ? "--ep-dispatcher alltoall: Megatron-LM's NCCL all-to-all, one row per token and "
              "expert, at NCCL's NVLink and NIC rates"
        : result.ep_dispatcher == ExpertDispatcher::kAllGather
            ? "--ep-dispatcher allgather: Megatron-LM's all-gather of every token over the etp x "
              "ep group and reduce-scatter of the output, through the collective model"
            : "DeepEP's published bandwidths");
    if (result.ep_overlap) {
      out += fmt::format(
          "expert overlap      on (--ep-overlap): each all-to-all hides behind the other half's "
          "compute in its overlapped F&B pair, {} (docs/simulator.md)\n",
          result.ep_combined_1f1b ? "Megatron-LM's combined 1F1B: one more warm-up forward, "
                                    "each steady-state forward paired with a backward"
                                  : "the schedule's own pairs");
    }
  }
  if (result.fp8_recipe != Fp8Recipe::kNone) {
    out += fmt::format(
        "precision           fp8, recipe {}: weight products in FP8, attention, norms, embedding "
        "and head in bf16 (the model's profiles carry the times); FP8 weight copies in the "
        "memory table{}\n",
        Fp8RecipeName(result.fp8_recipe),
        result.fp8_param_gather ? "; FP8 primary weights, parameters gathered in FP8" : "");
  }
  if (result.zero > 0 && result.data_parallel > 1) {
    out +=
        fmt::format("data parallelism    ZeRO {} over d = {}", result.zero, result.data_parallel);
    if (result.zero >= 2) {
      out += fmt::format("; per-op gathers/reduce-scatters not hidden by compute: {:.3f} ms",
                         NsToMs(result.sharding_exposed_ns));
    }
    if (result.sharded_state == ShardedState::kFsdp2) {
      out +=
          "; FSDP2's sharded state (--sharded-state fsdp2): fp32 shards and the optimizer "
          "state, gradients made at each rank's first backward";
    }
    out += "\n";
  }
  return out;
}

// Throughput in samples, tokens and model FLOP/s, and the MFU.
std::string RateLines(const SimResult& result, const Cluster& cluster) {
  std::string out;
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
                         TerminalSafe(cluster.name));
    }
    out += fmt::format("MFU                 {}{}\n", PercentText(*result.mfu), peak);
  }
  return out;
}

// The bubble, three ways.
std::string BubbleLines(const SimResult& result) {
  std::string out;
  out += fmt::format(
      "bubble ratio        {} of the pipeline span idle (mean over ranks: 1 - busy/span)\n",
      PercentText(result.bubble_ratio));
  out += fmt::format("bubble / ideal      {} (Megatron-LM's bubble time fraction: idle / busy)\n",
                     PercentText(result.bubble_fraction_of_ideal));
  out += fmt::format(
      "zero-bubble rate    {} (Qi et al.: 1 - busiest rank's work / longest rank span)\n",
      PercentText(result.zb_bubble_rate));
  return out;
}

// Memory capacity and limit, and whether every cost was measured.
std::string MemoryLines(const SimResult& result, const Cluster& cluster) {
  std::string out;
  if (result.memory_capacity_bytes > 0) {
    out += fmt::format("memory capacity     {} GiB per GPU ({})\n",
                       GiBText(result.memory_capacity_bytes), TerminalSafe(cluster.name));
    out += fmt::format("memory limit        {}\n", MemoryLimitText(cluster.gpu));
  } else {
    out += fmt::format("memory capacity     unlimited ({})\n", TerminalSafe(cluster.name));
  }
  if (!result.costs_measured) {
    out += "costs               not all measured: estimated or interpolated (see the notes)\n";
  }
  return out;
}

std::string Summary(const SimResult& result, const Cluster& cluster) {
  return RunLines(result) + ParallelismLines(result) + RateLines(result, cluster) +
         BubbleLines(result) + MemoryLines(result, cluster);
}

std::string RankTable(const SimResult& result) {
  const bool tp = result.tensor_parallel > 1 || result.context_parallel > 1;
  TextTable t;
  t.AddColumn("rank", TextTable::kRight);
  if (tp) t.AddColumn("GPUs", TextTable::kLeft);
  t.AddColumn("layers", TextTable::kLeft);
  t.AddColumn("busy ms", TextTable::kRight);
  if (tp) t.AddColumn("TP comm ms", TextTable::kRight);
  t.AddColumn("first start ms", TextTable::kRight);
  t.AddColumn("last end ms", TextTable::kRight);
  t.AddColumn("bubble ratio", TextTable::kRight);
  t.AddColumn("bubble / ideal", TextTable::kRight);
  t.AddColumn("peak in-flight", TextTable::kRight);
  t.AddColumn("peak memory GiB", TextTable::kRight);
  t.AddColumn("of limit", TextTable::kRight);
  t.AddColumn("", TextTable::kLeft);
  for (const StageResult& r : result.per_rank) {
    std::string of_capacity = "unlimited";
    if (result.memory_limit_bytes > 0) {
      of_capacity = PercentText(static_cast<double>(r.peak_memory_bytes) /
                                static_cast<double>(result.memory_limit_bytes));
    }
    std::vector<std::string> row = {fmt::format("{}", r.rank)};
    if (tp) {
      row.push_back(RankGpusText(r.rank, result.tensor_parallel, result.context_parallel));
    }
    row.push_back(LayerRanges(r.layers));
    row.push_back(fmt::format("{:.3f}", NsToMs(r.busy_ns)));
    if (tp) row.push_back(fmt::format("{:.3f}", NsToMs(r.tp_comm_ns)));
    for (std::string cell :
         {fmt::format("{:.3f}", NsToMs(r.first_start_ns)),
          fmt::format("{:.3f}", NsToMs(r.last_end_ns)), PercentText(r.bubble_ratio),
          PercentText(r.bubble_fraction_of_ideal), fmt::format("{}", r.peak_inflight_microbatches),
          GiBText(r.peak_memory_bytes), of_capacity,
          std::string(OverCapacity(result, r) ? "OVER" : "")}) {
      row.push_back(std::move(cell));
    }
    t.AddRow(std::move(row));
  }
  std::string out = t.Render();
  for (const StageResult& r : result.per_rank) {
    if (OverCapacity(result, r)) {
      out += fmt::format(
          "OVER: rank {} needs {} GiB, over the {} GiB limit (capacity - reserve - margin) by {} "
          "GiB\n",
          r.rank, GiBText(r.peak_memory_bytes), GiBText(result.memory_limit_bytes),
          GiBText(r.peak_memory_bytes - result.memory_limit_bytes));
    }
  }
  return out;
}

std::string MemoryTable(const SimResult& result) {
  TextTable t;
  t.AddColumn("rank", TextTable::kRight);
  t.AddColumn("weights", TextTable::kRight);
  // FP8 runs only, so other tables stay as they were.
  bool fp8 = false;
  for (const StageResult& r : result.per_rank) fp8 |= r.memory.fp8_weights > 0;
  if (fp8) t.AddColumn("of which fp8", TextTable::kRight);
  t.AddColumn("grads", TextTable::kRight);
  t.AddColumn("optimizer", TextTable::kRight);
  t.AddColumn("activations peak", TextTable::kRight);
  t.AddColumn("comm peak", TextTable::kRight);
  t.AddColumn("workspace peak", TextTable::kRight);
  t.AddColumn("total peak", TextTable::kRight);
  t.AddColumn("reserve", TextTable::kRight);
  for (const StageResult& r : result.per_rank) {
    const MemoryBreakdown& m = r.memory;
    std::vector<std::string> row = {fmt::format("{}", r.rank),
                                    GiBText(m.weights + m.gathered_weights)};
    if (fp8) row.push_back(GiBText(m.fp8_weights));
    for (Bytes b : {m.gradients, m.optimizer, m.activations_peak, m.comm_buffers_peak,
                    m.workspace_peak, r.peak_memory_bytes, result.memory_reserve_bytes}) {
      row.push_back(GiBText(b));
    }
    t.AddRow(row);
  }
  std::string margin;
  if (result.memory_capacity_bytes > 0) {
    margin = fmt::format(
        "; reserve: the runtime's before training (CUDA context, cuBLAS, NCCL), "
        "outside the peak; allocator margin {} GiB ({:g}% of capacity) also kept "
        "free",
        GiBText(result.memory_headroom_bytes), 100 * result.memory_headroom);
  }
  std::string title =
      "memory per rank, GiB (each part's own peak; the total is the peak of their sum" + margin +
      ")\n";
  if (result.tensor_parallel > 1) {
    title += fmt::format(
        "per GPU of each rank's {} tensor-parallel GPUs (weights, gradients and "
        "optimizer state / {})\n",
        result.tensor_parallel, result.tensor_parallel);
  }
  if (result.zero >= 3 && result.data_parallel > 1) {
    title +=
        "weights: the rank's shard plus two layers gathered (the running and the prefetched)\n";
  }
  return title + t.Render();
}

}  // namespace

std::string RankGpusText(int rank, int tensor_parallel, int context_parallel) {
  if (context_parallel > 1) {  // rank order t, cp, p, d: the rank's t x cp GPUs are adjacent
    const int n = tensor_parallel * context_parallel;
    return fmt::format("t={} cp={}: GPUs {}-{}", tensor_parallel, context_parallel, rank * n,
                       rank * n + n - 1);
  }
  if (tensor_parallel <= 1) return fmt::format("GPU {}", rank);
  return fmt::format("t={}: GPUs {}-{}", tensor_parallel, rank * tensor_parallel,
                     rank * tensor_parallel + tensor_parallel - 1);
}

std::string ResultToText(const SimResult& result, const Cluster& cluster) {
  std::string out = Summary(result, cluster);
  if (result.critical_path) out += CriticalPathText(result);
  out += "\n" + RankTable(result);
  out += "\n" + MemoryTable(result);
  if (!result.notes.empty()) out += "\n";
  for (const std::string& note : result.notes) out += "note: " + TerminalSafe(note) + "\n";
  // Names were escaped where they were formatted; this catches the rest (a
  // note quoting a layer name), keeping the report's own line breaks.
  return TerminalSafeLines(out);
}

}  // namespace pipecast
