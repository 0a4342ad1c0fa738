// Pass 7, explain: the text and JSON views of a PlanReport (planner/explain.h).
#include "planner/explain.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "base/terminal_text.h"
#include "base/text_table.h"
#include "formats/result_json.h"

namespace pipecast {
namespace {

using Json = nlohmann::ordered_json;

constexpr RejectReason kReasons[] = {
    RejectReason::kOutOfMemory, RejectReason::kPruned, RejectReason::kBatchNotDivisible,
    RejectReason::kScheduleConstraint, RejectReason::kSimulationError};

// "layers 0-7 (embedding … block6)", "layers 3-4 (block2, block3)", "layer 5 (block4)".
std::string LayerSpan(const Model& model, const StageLayers& s) {
  auto name = [&](int l) {
    return l >= 0 && l < static_cast<int>(model.layers.size()) ? TerminalSafe(model.layers[l].name)
                                                               : std::string("?");
  };
  if (s.first_layer == s.last_layer) {
    return fmt::format("layer {} ({})", s.first_layer, name(s.first_layer));
  }
  const char* sep = s.last_layer == s.first_layer + 1 ? ", " : " … ";
  return fmt::format("layers {}-{} ({}{}{})", s.first_layer, s.last_layer, name(s.first_layer), sep,
                     name(s.last_layer));
}

std::string RecomputeText(Recompute r, const RecomputeLayers& layers) {
  switch (r) {
    case Recompute::kOff:
      return "off";
    case Recompute::kSelective:
      if (layers.modules != 0) {
        return fmt::format(
            "selective of Megatron-LM's modules {} (their outputs freed, rerun in the backward)",
            RecomputeModulesName(layers.modules));
      }
      return "selective (the attention core is rerun in the backward)";
    case Recompute::kFull:
      switch (layers.method) {
        case RecomputeMethod::kUniform:
          return fmt::format(
              "full, Megatron-LM uniform method (chunks of {} layers: each chunk's input kept, "
              "the chunk rerun in the backward)",
              layers.num_layers);
        case RecomputeMethod::kBlock:
          return fmt::format(
              "full, Megatron-LM block method (the first {} layers of each stage checkpointed, "
              "the rest keep their activations)",
              layers.num_layers);
        case RecomputeMethod::kEachLayer:
          break;
      }
      return "full (each layer's input kept; layers rerun one at a time in the backward)";
    case Recompute::kOp:
      return "op (torchtitan's per-op policy: every other matmul's and the attention's outputs "
             "kept, the rest rerun in the backward)";
    case Recompute::kEvery:
      return fmt::format(
          "every:{} (blocks {}, {}, ... of each stage checkpointed and rerun; the others keep "
          "their activations)",
          layers.every, layers.every, 2 * layers.every);
  }
  return "off";
}

// "79.11 GiB per GPU (h100-sxm), limit 73.31 GiB" or "unlimited memory (ideal)".
std::string CapacityText(const Cluster& cluster) {
  const Bytes b = cluster.gpu.memory_bytes;
  const std::string name = TerminalSafe(cluster.name);
  if (b <= 0) return fmt::format("unlimited memory ({})", name);
  const Bytes limit = MemoryLimitBytes(cluster.gpu);
  if (b < kGiB / 10) {
    return fmt::format("{:.2f} MiB per GPU ({}), limit {:.2f} MiB", static_cast<double>(b) / kMiB,
                       name, static_cast<double>(limit) / kMiB);
  }
  return fmt::format("{} GiB per GPU ({}), limit {} GiB", GiBText(b), name, GiBText(limit));
}

// "level 1 (Megatron's distributed optimizer: optimizer state sharded over d = 8)".
std::string ZeroText(int zero, int d) {
  switch (zero) {
    case 0:
      return d > 1 ? "ZeRO 0 (none: every replica keeps the whole optimizer state)"
                   : "none (d = 1)";
    case 1:
      return fmt::format(
          "ZeRO 1 (Megatron's distributed optimizer: optimizer state sharded over d = {})", d);
    case 2:
      return fmt::format("ZeRO 2 (optimizer state and gradients sharded over d = {})", d);
    default:
      return fmt::format(
          "ZeRO 3 (FSDP: parameters, gradients and optimizer state sharded over d = {})", d);
  }
}

// "pipeline 12.000 ms, all-reduce 1.000 ms, optimizer 0.000 ms", with the
// sharded levels' collectives named as they run.
std::string IterationParts(const SimResult& r) {
  std::string out = fmt::format("pipeline {:.3f} ms", NsToMs(r.pipeline_ns));
  if (r.tensor_parallel > 1) {
    out += fmt::format(" incl. up to {:.3f} ms per rank of tensor-parallel collectives",
                       NsToMs(r.tp_comm_ns));
  }
  // ZeRO 2-3 reduce-scatter the gradients (and at 3 gather the parameters)
  // inside the ops: no all-reduce follows (issue 28: "all-reduce 0.000 ms").
  if (r.zero >= 2 || r.sharding_exposed_ns > 0) {
    out += fmt::format(" incl. {:.3f} ms of per-op {} not hidden by compute",
                       NsToMs(r.sharding_exposed_ns),
                       r.zero == 3 ? "all-gathers and reduce-scatters" : "reduce-scatters");
  }
  if (r.zero < 2 || r.allreduce_ns > 0) {
    out += fmt::format(", {} {:.3f} ms", r.zero >= 1 ? "reduce-scatter" : "all-reduce",
                       NsToMs(r.allreduce_ns));
    if (r.overlap_grad_reduce) {
      out += fmt::format(" exposed ({:.3f} ms hidden behind the backward)",
                         NsToMs(r.allreduce_hidden_ns));
    }
  }
  out += fmt::format(", optimizer {:.3f} ms{}", NsToMs(r.optimizer_ns),
                     r.optimizer_estimated ? " (estimated)" : "");
  if (r.zero == 1 || r.zero == 2) {
    out += fmt::format(", parameter all-gather {:.3f} ms", NsToMs(r.allgather_ns));
  }
  return out;
}

// ---------------------------------------------------------------------------
// Text

// The chosen layout: parallelism, pipeline or none, micro-batches, recomputation,
// sharding and precision.
std::string ChosenSettings(const Candidate& c, const SimResult& r, bool pipeline) {
  std::string out;
  if (c.config.layout.tensor_parallel > 1) {
    out += fmt::format(
        "  tensor parallelism   t = {} GPUs of one node per stage, sequence parallelism {}{}: "
        "(t, p, d) = ({}, {}, {}), {}\n",
        c.config.layout.tensor_parallel, c.config.layout.sequence_parallel ? "on" : "off",
        c.config.overlap.tp_comm_overlap ? ", comm overlap on" : "",
        c.config.layout.tensor_parallel, c.config.layout.pipeline_stages,
        c.config.layout.data_parallel, Count(c.config.layout.Gpus(), "GPU", "GPUs"));
  }
  if (c.config.layout.context_parallel > 1) {
    out += fmt::format(
        "  context parallelism  cp = {} GPUs split each sample's sequence ({}; rank order t, cp, "
        "p, d): (t, cp, p, d) = ({}, {}, {}, {}), gradients reduced over d x cp = {} GPUs\n",
        c.config.layout.context_parallel, CpAlgorithmName(c.config.layout.cp_algorithm),
        c.config.layout.tensor_parallel, c.config.layout.context_parallel,
        c.config.layout.pipeline_stages, c.config.layout.data_parallel,
        c.config.layout.GradientReplicas());
  }
  if (const ParallelLayout& l = c.config.layout; l.ExpertShards() > 1) {
    out += fmt::format(
        "  expert parallelism   ep = {}, etp = {}, folded over each stage's t x cp x d = {} GPUs; "
        "dispatcher {} (--ep-dispatcher)\n",
        l.expert_parallel, l.expert_tensor_parallel,
        int64_t{l.tensor_parallel} * l.context_parallel * l.data_parallel,
        l.expert_dispatcher == ExpertDispatcher::kAllToAll
            ? "alltoall: Megatron-LM's NCCL all-to-all, one row per token and expert"
        : l.expert_dispatcher == ExpertDispatcher::kAllGather
            ? "allgather: Megatron-LM's all-gather of every token over the etp x ep group"
            : "deepep: DeepEP's deduplicated dispatch at its published bandwidths");
  }
  if (pipeline) {
    out += fmt::format("  pipeline stages      {} (p), data-parallel degree {} (d): {}\n",
                       c.config.layout.pipeline_stages, c.config.layout.data_parallel,
                       Count(c.config.layout.Gpus(), "GPU", "GPUs"));
    out += fmt::format("  schedule             {}\n", ScheduleKindName(c.config.schedule));
    if (r.ep_overlap) {
      out += fmt::format(
          "  expert overlap       on: each all-to-all hides behind the other half of its "
          "overlapped F&B pair ({})\n",
          r.ep_combined_1f1b ? "Megatron-LM's combined 1F1B, --overlap-moe-expert-parallel-comm"
                             : "the schedule's own pairs");
    }
  } else {
    out += fmt::format(
        "  no pipeline          p = 1: {}data parallelism over d = {} ({}) with {} gradient "
        "accumulation {} per iteration\n",
        c.config.memory.zero > 0 && c.config.layout.data_parallel > 1 ? "sharded " : "",
        c.config.layout.data_parallel, Count(c.config.layout.Gpus(), "GPU", "GPUs"),
        c.config.microbatches, c.config.microbatches == 1 ? "step" : "steps");
  }
  out += fmt::format(
      "  micro-batches        {} of size {} (global batch {} = {} x {} x {}: size x count x d)\n",
      c.config.microbatches, c.config.microbatch_size, r.global_batch, c.config.microbatch_size,
      c.config.microbatches, c.config.layout.data_parallel);
  out += fmt::format("  recomputation        {}\n",
                     RecomputeText(c.config.recompute, c.config.recompute_layers));
  out += fmt::format("  sharding             {}{}\n",
                     ZeroText(c.config.memory.zero, c.config.layout.GradientReplicas()) +
                         (c.config.memory.Fsdp2() && c.config.memory.zero >= 3
                              ? "; FSDP2's sharded state: fp32 shards and optimizer state, "
                                "gradients made in the backward (--sharded-state fsdp2)"
                              : ""),
                     c.config.memory.zero >= 2 && c.config.layout.data_parallel > 1 &&
                             !ShardingLabel(c.config.memory.sharding).empty()
                         ? " (" + ShardingLabel(c.config.memory.sharding) + ")"
                         : "");
  if (c.config.memory.fp8_recipe != Fp8Recipe::kNone) {  // FP8 only: bf16 text as before
    out += fmt::format(
        "  precision            fp8, recipe {} (weight products in FP8; attention, norms, "
        "embedding and head bf16; {:.4g} B of FP8 weight copies per parameter{})\n",
        Fp8RecipeName(c.config.memory.fp8_recipe), c.config.memory.fp8_weight_bytes_per_param,
        c.config.memory.fp8_param_gather ? "; FP8 primary weights, gathered in FP8" : "");
  }
  return out;
}

// Iteration time, throughput and, with a pipeline, its bubble.
std::string ChosenRates(const PlanReport& report, const SimResult& r, bool pipeline) {
  std::string out;
  out += fmt::format("  iteration time       {:.3f} ms ({})\n", NsToMs(r.iteration_ns),
                     IterationParts(r));
  out += fmt::format("  throughput           {:.1f} samples/s\n", r.samples_per_s);
  if (r.tokens_per_s)
    out += fmt::format("                       {:.0f} tokens/s\n", *r.tokens_per_s);
  if (r.tflops_per_gpu) {
    out += fmt::format("                       {:.1f} TFLOP/s per GPU", *r.tflops_per_gpu);
    if (r.mfu) {
      out += fmt::format(", MFU {} of {:.0f} TFLOP/s peak", PercentText(*r.mfu),
                         report.cluster.gpu.peak_tflops);
    }
    out += "\n";
  }
  if (pipeline) {
    out += fmt::format("  bubble ratio         {} (idle share of the pipeline span)\n",
                       PercentText(r.bubble_ratio));
    out += fmt::format("  bubble/ideal         {} (Megatron-LM's bubble time fraction)\n",
                       PercentText(r.bubble_fraction_of_ideal));
    out += fmt::format(
        "  zero-bubble rate     {} (Qi et al.: 1 - busiest rank's work / longest rank "
        "span)\n",
        PercentText(r.zb_bubble_rate));
  }
  return out;
}

// The layers of each stage (and its rank, with virtual stages).
std::string ChosenLayers(const Model& model, const Candidate& c, const SimResult& r,
                         bool pipeline) {
  std::string out = pipeline ? "\n  layers per stage:\n" : "\n  layers (every GPU holds all):\n";
  // With v chunks per rank, stages are virtual: say which rank holds each.
  std::vector<int> owner(c.partition.size(), -1);
  for (const StageResult& rank : r.per_rank) {
    for (int v : rank.stages) {
      if (v >= 0 && v < static_cast<int>(owner.size())) owner[v] = rank.rank;
    }
  }
  const bool chunked = c.partition.size() != static_cast<size_t>(c.config.layout.pipeline_stages);
  for (size_t s = 0; s < c.partition.size(); ++s) {
    out += chunked ? fmt::format("    stage {} (rank {}): {}\n", s, owner[s],
                                 LayerSpan(model, c.partition[s]))
                   : fmt::format("    stage {}: {}\n", s, LayerSpan(model, c.partition[s]));
  }
  return out;
}

// Each stage's memory by part, against the limit.
std::string ChosenMemory(const PlanReport& report, const SimResult& r) {
  std::string out = fmt::format(
      "\n  memory per stage, GiB; limit {}; each part at its own peak; the reserve is the "
      "runtime's, outside the peak:\n",
      MemoryLimitText(report.cluster.gpu));
  TextTable t;
  // The FP8 weight copies (a part of weights) get a column in FP8 plans only.
  bool fp8 = false;
  for (const StageResult& s : r.per_rank) fp8 |= s.memory.fp8_weights > 0;
  for (const char* h : {"stage", "peak", "of limit", "weights", "of which fp8", "gradients",
                        "optimizer", "activations", "comm", "workspace", "reserve"}) {
    if (fp8 || std::string(h) != "of which fp8") t.AddColumn(h, TextTable::kRight);
  }
  const Bytes limit = MemoryLimitBytes(report.cluster.gpu);
  for (const StageResult& s : r.per_rank) {
    const MemoryBreakdown& m = s.memory;
    std::vector<std::string> row = {
        fmt::format("{}", s.rank), GiBText(s.peak_memory_bytes),
        limit > 0 ? PercentText(static_cast<double>(s.peak_memory_bytes) / limit) : "unlimited",
        GiBText(m.weights + m.gathered_weights)};
    if (fp8) row.push_back(GiBText(m.fp8_weights));
    for (Bytes b : {m.gradients, m.optimizer, m.activations_peak, m.comm_buffers_peak,
                    m.workspace_peak, r.memory_reserve_bytes}) {
      row.push_back(GiBText(b));
    }
    t.AddRow(row);
  }
  out += t.Render("    ");
  return out;
}

std::string ChosenText(const PlanReport& report, const Model& model) {
  const Candidate& c = report.ranked[0];
  const SimResult& r = *c.result;
  // p = 1: no pipeline, so no schedule, stages or bubble to speak of (issue 28).
  const bool pipeline = c.config.layout.pipeline_stages > 1;
  return fmt::format("chosen plan: {}\n", c.Label()) + ChosenSettings(c, r, pipeline) +
         ChosenRates(report, r, pipeline) + ChosenLayers(model, c, r, pipeline) +
         ChosenMemory(report, r);
}

std::string RunnersUpText(const PlanReport& report) {
  if (report.ranked.size() < 2) return "runners-up: none (only one configuration fits)\n";
  TextTable t;
  t.AddColumn("#", TextTable::kRight);
  t.AddColumn("configuration", TextTable::kLeft);
  t.AddColumn("iteration ms", TextTable::kRight);
  t.AddColumn("samples/s", TextTable::kRight);
  t.AddColumn("bubble ratio", TextTable::kRight);
  t.AddColumn("bubble/ideal", TextTable::kRight);
  t.AddColumn("peak GiB", TextTable::kRight);
  for (size_t i = 1; i < report.ranked.size(); ++i) {
    const Candidate& c = report.ranked[i];
    const SimResult& r = *c.result;
    t.AddRow({fmt::format("{}", i + 1), c.Label(), fmt::format("{:.3f}", NsToMs(r.iteration_ns)),
              fmt::format("{:.1f}", r.samples_per_s), PercentText(r.bubble_ratio),
              PercentText(r.bubble_fraction_of_ideal), GiBText(c.PeakMemory())});
  }
  return "runners-up (bubble ratio: idle share of the pipeline span; bubble/ideal: Megatron-LM's "
         "bubble time fraction):\n" +
         t.Render("  ");
}

std::string RejectedText(const PlanReport& report) {
  if (report.rejected.empty()) return "rejected: none\n";
  std::string out = fmt::format("rejected: {} configuration{}\n", report.rejected.size(),
                                report.rejected.size() == 1 ? "" : "s");
  for (const RejectGroup& g : GroupRejections(report.rejected)) {
    out += fmt::format("  {}: {}\n", RejectReasonName(g.reason), g.all.size());
    if (g.closest) {
      out += fmt::format("    closest miss: {}: {}\n", g.closest->candidate.Label(),
                         g.closest->Detail());
    }
    for (const Rejection* r : g.examples) {
      out += fmt::format("    e.g. {}: {}\n", r->candidate.Label(), r->Detail());
    }
    const size_t shown = g.examples.size() + (g.closest ? 1 : 0);
    if (g.all.size() > shown) out += fmt::format("    ... and {} more\n", g.all.size() - shown);
  }
  return out;
}

std::string SweepText(const PlanReport& report) {
  if (report.sweep.empty()) return "";
  const Candidate& c = report.ranked[0];
  // Without a pipeline the count only sets the global batch: nothing to weigh.
  if (c.config.layout.pipeline_stages == 1) return "";
  TextTable t;
  for (const char* h : {"m", "global batch", "iteration ms", "samples/s", "bubble ratio",
                        "bubble/ideal", "peak GiB", "fits"}) {
    t.AddColumn(h, TextTable::kRight);
  }
  t.AddColumn("", TextTable::kLeft);
  for (const SweepPoint& p : report.sweep) {
    t.AddRow({fmt::format("{}", p.microbatches), fmt::format("{}", p.global_batch),
              fmt::format("{:.3f}", NsToMs(p.iteration_ns)), fmt::format("{:.1f}", p.samples_per_s),
              PercentText(p.bubble_ratio), PercentText(p.bubble_fraction_of_ideal),
              GiBText(p.peak_memory_bytes), p.fits ? "yes" : "NO",
              p.microbatches == c.config.microbatches ? "<- chosen" : ""});
  }
  return fmt::format(
             "micro-batch count sweep: the chosen p={} d={} {} mbs={} at other counts m (the "
             "global batch changes with m):\n",
             c.config.layout.pipeline_stages, c.config.layout.data_parallel,
             ScheduleKindName(c.config.schedule), c.config.microbatch_size) +
         t.Render("  ");
}

// ---------------------------------------------------------------------------
// JSON

Json PartitionJson(const Model& model, const std::vector<StageLayers>& partition) {
  Json list = Json::array();
  for (size_t s = 0; s < partition.size(); ++s) {
    const StageLayers& l = partition[s];
    auto name = [&](int i) {
      return i >= 0 && i < static_cast<int>(model.layers.size()) ? Json(model.layers[i].name)
                                                                 : Json(nullptr);
    };
    list.push_back({{"stage", s},
                    {"first_layer", l.first_layer},
                    {"last_layer", l.last_layer},
                    {"first_layer_name", name(l.first_layer)},
                    {"last_layer_name", name(l.last_layer)}});
  }
  return list;
}

Json CandidateJson(const Candidate& c, const Model& model, bool with_predicted) {
  Json j;
  j["label"] = c.Label();
  if (c.config.layout.tensor_parallel > 1) {  // absent: t = 1
    j["tensor_parallel"] = c.config.layout.tensor_parallel;
    j["sequence_parallel"] = c.config.layout.sequence_parallel;
    j["tp_comm_overlap"] = c.config.overlap.tp_comm_overlap;
  }
  if (c.config.layout.context_parallel > 1) {  // absent: cp = 1
    j["context_parallel"] = c.config.layout.context_parallel;
    j["cp_algorithm"] = CpAlgorithmName(c.config.layout.cp_algorithm);
  }
  if (c.config.layout.expert_parallel > 1 || c.config.layout.expert_tensor_parallel > 1) {
    j["expert_parallel"] = c.config.layout.expert_parallel;  // absent: ep = etp = 1
    j["expert_tensor_parallel"] = c.config.layout.expert_tensor_parallel;
    // Absent: the all-to-alls do not hide (--ep-overlap).
    if (c.config.ExpertOverlapOn()) j["ep_overlap"] = true;
    // Absent: deepep (--ep-dispatcher).
    if (c.config.layout.ExpertShards() > 1 &&
        c.config.layout.expert_dispatcher != ExpertDispatcher::kDeepEp) {
      j["ep_dispatcher"] = ExpertDispatcherName(c.config.layout.expert_dispatcher);
    }
  }
  j["pipeline_stages"] = c.config.layout.pipeline_stages;
  j["data_parallel"] = c.config.layout.data_parallel;
  j["schedule"] = ScheduleKindName(c.config.schedule);
  j["chunks"] = c.config.layout.chunks;
  j["microbatch_size"] = c.config.microbatch_size;
  j["microbatches"] = c.config.microbatches;
  j["recompute"] = RecomputeSpec(c.config.recompute, c.config.recompute_layers);
  j["zero"] = c.config.memory.zero;
  if (c.config.memory.fp8_recipe != Fp8Recipe::kNone) {  // FP8 only: bf16 JSON as before
    j["precision"] = "fp8";
    j["fp8_recipe"] = Fp8RecipeName(c.config.memory.fp8_recipe);
    j["fp8_weight_bytes_per_param"] = c.config.memory.fp8_weight_bytes_per_param;
    j["fp8_param_gather"] = c.config.memory.fp8_param_gather;
  }
  j["partition"] = PartitionJson(model, c.partition);
  if (!c.result) return j;
  const SimResult& r = *c.result;
  j["global_batch"] = r.global_batch;
  j["iteration_time_us"] = NsToUs(r.iteration_ns);
  j["throughput_samples_per_s"] = r.samples_per_s;
  j["bubble_ratio"] = r.bubble_ratio;
  j["bubble_fraction_of_ideal"] = r.bubble_fraction_of_ideal;
  j["zb_bubble_rate"] = r.zb_bubble_rate;
  j["peak_memory_bytes"] = c.PeakMemory();
  if (with_predicted) j["predicted"] = ResultJson(r);
  return j;
}

Json RejectedJson(const PlanReport& report) {
  Json list = Json::array();
  auto one = [](const Rejection& r) {
    Json j{{"label", r.candidate.Label()}, {"detail", r.Detail()}};
    if (r.reason == RejectReason::kOutOfMemory) j["memory_ratio"] = r.memory_ratio;
    return j;
  };
  for (const RejectGroup& g : GroupRejections(report.rejected)) {
    Json j;
    j["reason"] = RejectReasonId(g.reason);
    j["description"] = RejectReasonName(g.reason);
    j["count"] = g.all.size();
    j["closest_miss"] = g.closest ? one(*g.closest) : Json(nullptr);
    j["examples"] = Json::array();
    for (const Rejection* r : g.examples) j["examples"].push_back(one(*r));
    list.push_back(std::move(j));
  }
  return list;
}

Json SweepJson(const PlanReport& report) {
  Json list = Json::array();
  for (const SweepPoint& p : report.sweep) {
    list.push_back(
        {{"microbatches", p.microbatches},
         {"global_batch", p.global_batch},
         {"iteration_time_us", NsToUs(p.iteration_ns)},
         {"throughput_samples_per_s", p.samples_per_s},
         {"bubble_ratio", p.bubble_ratio},
         {"bubble_fraction_of_ideal", p.bubble_fraction_of_ideal},
         {"peak_memory_bytes", p.peak_memory_bytes},
         {"fits", p.fits},
         {"chosen", report.Feasible() && p.microbatches == report.ranked[0].config.microbatches}});
  }
  return list;
}

}  // namespace

const char* RejectReasonId(RejectReason reason) {
  switch (reason) {
    case RejectReason::kBatchNotDivisible:
      return "batch_not_divisible";
    case RejectReason::kOutOfMemory:
      return "out_of_memory";
    case RejectReason::kPruned:
      return "pruned";
    case RejectReason::kSimulationError:
      return "simulation_error";
    case RejectReason::kScheduleConstraint:
      return "schedule_constraint";
  }
  return "unknown";
}

std::vector<RejectGroup> GroupRejections(const std::vector<Rejection>& rejected) {
  // One pass over the rejections (a search may have 100,000 and more), each to its reason's list.
  constexpr size_t kCount = std::size(kReasons);
  std::vector<const Rejection*> of[kCount];
  size_t counts[kCount] = {};
  auto slot = [](RejectReason reason) {
    return static_cast<size_t>(std::find(std::begin(kReasons), std::end(kReasons), reason) -
                               std::begin(kReasons));
  };
  for (const Rejection& r : rejected) ++counts[slot(r.reason)];
  for (size_t i = 0; i < kCount; ++i) of[i].reserve(counts[i]);
  for (const Rejection& r : rejected) of[slot(r.reason)].push_back(&r);
  std::vector<RejectGroup> groups;
  for (size_t i = 0; i < kCount; ++i) {
    const RejectReason reason = kReasons[i];
    RejectGroup g{reason, std::move(of[i]), nullptr, {}};
    if (g.all.empty()) continue;
    // Closest miss: the least memory over capacity, or the best lower bound.
    for (const Rejection* r : g.all) {
      if (reason == RejectReason::kOutOfMemory &&
          (g.closest == nullptr || r->memory_ratio < g.closest->memory_ratio)) {
        g.closest = r;
      }
      if (reason == RejectReason::kPruned &&
          (g.closest == nullptr ||
           r->candidate.lower_bound_ns < g.closest->candidate.lower_bound_ns)) {
        g.closest = r;
      }
    }
    for (const Rejection* r : g.all) {
      if (r == g.closest) continue;
      if (static_cast<int>(g.examples.size()) >= kRejectionExamples) break;
      g.examples.push_back(r);
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

namespace {

// --compare-to: the given configuration as simulated and the choice's expected gain over it.
std::string ComparisonText(const PlanReport& report) {
  if (!report.comparison) return "";
  const ConfigurationComparison& c = *report.comparison;
  std::string out =
      fmt::format("against the given configuration (--compare-to {}):\n", TerminalSafe(c.given));
  if (!c.compared) return out + "  it cannot run: " + TerminalSafe(c.why_not) + "\n";
  const SimResult& r = *c.compared->result;
  out += fmt::format("  {}\n    iteration {:.3f} ms, {:.1f} samples/s", c.compared->Label(),
                     NsToMs(r.iteration_ns), r.samples_per_s);
  if (r.mfu) out += fmt::format(", MFU {}", PercentText(*r.mfu));
  out += fmt::format(", peak memory {:.1f} GiB\n", ToGiB(c.compared->PeakMemory()));
  if (c.same_as_choice) return out + "  the choice is this configuration: nothing to beat\n";
  const double chosen = report.ranked[0].result->samples_per_s;
  out +=
      fmt::format("  the choice is expected to be {:.1f}% {} ({:.1f} against {:.1f} samples/s)\n",
                  100 * std::abs(c.expected_gain), c.expected_gain >= 0 ? "faster" : "slower",
                  chosen, r.samples_per_s);
  return out;
}

Json ComparisonJson(const PlanReport& report, const Model& model) {
  const ConfigurationComparison& c = *report.comparison;
  Json j;
  j["given"] = c.given;
  j["compared"] = c.compared ? CandidateJson(*c.compared, model, true) : Json(nullptr);
  j["why_not"] = c.why_not;
  j["same_as_choice"] = c.same_as_choice;
  j["expected_gain"] = c.compared ? Json(c.expected_gain) : Json(nullptr);
  return j;
}

}  // namespace

std::string PlanReportToText(const PlanReport& report, const Model& model) {
  std::string out = fmt::format("planner: {} on {}, {}, global batch {}\n",
                                TerminalSafe(model.name), Count(report.gpus, "GPU", "GPUs"),
                                CapacityText(report.cluster), report.global_batch);
  out += fmt::format("searched {} configurations, simulated {}\n\n", report.enumerated,
                     report.simulated);
  if (!report.Feasible()) {
    out += fmt::format(
        "no configuration fits: none of the {} of {} on {} with {} can run; why, by reason:\n",
        Count(report.enumerated, "configuration", "configurations"), TerminalSafe(model.name),
        Count(report.gpus, "GPU", "GPUs"), CapacityText(report.cluster));
    out += RejectedText(report);
    out += "\nsuggestions:\n";
    for (const std::string& s : report.suggestions) out += "  - " + s + "\n";
    if (report.suggestions.empty()) out += "  (none)\n";
    for (const std::string& note : report.notes) out += "note: " + TerminalSafe(note) + "\n";
    return TerminalSafeLines(out);
  }
  out += ChosenText(report, model);
  if (report.comparison) out += "\n" + ComparisonText(report) + "\n";
  for (const std::string& note : report.notes) out += "note: " + TerminalSafe(note) + "\n";
  out += "\n" + RunnersUpText(report);
  out += "\n" + RejectedText(report);
  const std::string sweep = SweepText(report);
  if (!sweep.empty()) out += "\n" + sweep;
  if (!out.empty() && out.back() != '\n') out += '\n';
  // Names were escaped where they were formatted; this catches the rest.
  return TerminalSafeLines(out);
}

std::string PlanReportToJson(const PlanReport& report, const Model& model,
                             const CheckOutcome* check) {
  Json j;
  j["format"] = kPlannerReportFormat;
  j["feasible"] = report.Feasible();
  j["model"] = model.name;
  j["gpus"] = report.gpus;
  j["global_batch"] = report.global_batch;
  j["cluster"] = report.cluster.name;
  j["memory_capacity_bytes"] = report.cluster.gpu.memory_bytes;
  j["memory_reserve_bytes"] = report.cluster.gpu.memory_reserve_bytes;
  j["memory_headroom"] = report.cluster.gpu.memory_headroom;
  j["memory_limit_bytes"] = MemoryLimitBytes(report.cluster.gpu);
  j["enumerated"] = report.enumerated;
  j["simulated"] = report.simulated;
  j["chosen"] = report.Feasible() ? CandidateJson(report.ranked[0], model, true) : Json(nullptr);
  j["runners_up"] = Json::array();
  for (size_t i = 1; i < report.ranked.size(); ++i) {
    j["runners_up"].push_back(CandidateJson(report.ranked[i], model, false));
  }
  j["rejected"] = RejectedJson(report);
  j["sweep"] = SweepJson(report);
  j["notes"] = report.notes;
  j["suggestions"] = report.suggestions;
  if (report.comparison) j["comparison"] = ComparisonJson(report, model);
  if (check != nullptr) {
    j["check"] = {{"passed", check->passed}, {"failures", check->failures}, {"diff", check->diff}};
  }
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace pipecast
