#include "sim/schedule_traits.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "sim/internal/schedule_builders.h"

namespace pipecast {
namespace {

// In-flight bounds (ScheduleTraits::inflight_microbatches), docs/schedules.md's column
// "activations held at peak on stage s".
int OneInFlight(int, int, int) { return 1; }
int AllInFlight(int, int, int m) { return m; }
int OneFOneBInFlight(int stage, int p, int m) { return std::min(p - stage, m); }
// p - s until the input gradient; deferred W ops keep up to p in all.
int ZBH1InFlight(int, int p, int m) { return std::min(p, m); }
// Warm-up forwards 2(p-s)-1, and W ops deferred until the tail keep 2p-1 activations on every
// stage (schedule_zoo.cc).
int ZBH2InFlight(int, int p, int m) { return std::min(2 * p - 1, m); }
// Of those, the ones whose input gradient has not run yet (the rest wait only for W, holding
// what W keeps): the warm-up forwards, p - s for ZB-H1 and 2(p-s)-1 for ZB-H2; Qi et al.
// section 2.3: worker i holds (p-i+1) M_B + (i-1) M_W (ZB-H1), (2p-2i+1) M_B + (2i-2) M_W (ZB-H2).
int ZBH1BeforeInputGradient(int stage, int p, int m) { return std::min(p - stage, m); }
int ZBH2BeforeInputGradient(int stage, int p, int m) { return std::min(2 * (p - stage) - 1, m); }
// zb-auto at its default limit: 2p activations (ZB-2p), or m when fewer.
int ZBAutoInFlight(int, int p, int m) { return std::min(2 * p, m); }
// The default memory limits of the cost-driven kinds, in micro-batch activations per rank:
// ZB-2p's 2p for zb-auto (Qi et al. ICLR'24 section 3), ZB-V's p (2p chunk activations, 1F1B's
// memory) for zb-v-auto.
double TwicePipeline(int p) { return 2.0 * p; }
double OncePipeline(int p) { return 1.0 * p; }

// A synchronous one-chunk schedule with a whole backward that takes any m (naive, GPipe, 1F1B).
constexpr ScheduleTraits OneChunk(ScheduleKind kind, const char* name, const char* source,
                                  int (*inflight)(int, int, int), void (*generate)(Schedule&)) {
  return {.kind = kind,
          .name = name,
          .rule_label = name,
          .source = source,
          .inflight_microbatches = inflight,
          .generate = generate};
}

// `row` without a flush between iterations (PipeDream). The planner searches it only when asked
// to: weight stashing trains with stale weights, which a plan should not choose silently.
constexpr ScheduleTraits Asynchronous(ScheduleTraits row) {
  row.flush = false;
  row.planner_default = false;
  return row;
}

// A schedule of v model chunks per rank (interleaved 1F1B, looped BFS): v = 2 unless --chunks
// says otherwise; the partition pass assumes all m micro-batches in flight and the simulate pass
// measures the real peak per chunk.
constexpr ScheduleTraits Chunked(ScheduleKind kind, const char* name, const char* rule_label,
                                 const char* source, MicrobatchRule rule, const char* why,
                                 void (*generate)(Schedule&)) {
  return {.kind = kind,
          .name = name,
          .rule_label = rule_label,
          .source = source,
          .uses_chunks = true,
          .default_chunks = 2,
          .microbatch_rule = rule,
          .too_few_microbatches_why = why,
          .inflight_microbatches = AllInFlight,
          .generate = generate};
}

// `row` with the backward split into I and W (interleaved zero bubble).
constexpr ScheduleTraits SplitBackward(ScheduleTraits row) {
  row.splits_backward = true;
  return row;
}

// `row` searched by the planner only when --schedules names it. The schedules of issue 16 start
// so: adding them to the default search changes every baseline plan, a step of its own.
constexpr ScheduleTraits NamedOnly(ScheduleTraits row) {
  row.planner_default = false;
  return row;
}

// The zero-bubble family (ZB-H1, ZB-H2): split backward, any m >= 1 (with m < p the warm-up is
// capped at m, as sail-sg's runs at p = 8, m = 2), one wording for both.
constexpr ScheduleTraits ZeroBubble(ScheduleKind kind, const char* name, const char* source,
                                    int (*inflight)(int, int, int),
                                    int (*before_input_gradient)(int, int, int),
                                    void (*generate)(Schedule&)) {
  return {.kind = kind,
          .name = name,
          .rule_label = "zb-h1 and zb-h2",
          .rule_label_plural = true,
          .source = source,
          .splits_backward = true,
          .inflight_microbatches = inflight,
          .before_input_gradient = before_input_gradient,
          .generate = generate};
}

// The V family (ZB-V, V-Half, V-Min; Qi et al. 2024): split backward, exactly two chunks per rank
// in a V, any m >= 1. The partition pass balances the 2p chunks on time (as for every chunked
// kind) and the simulate pass measures the peak. Searched by the planner when --schedules names
// them: their generators are sail-sg's greedy heuristics, superlinear in m (V-Half: 0.5 s of CPU
// at p = 64, m = 256), and the planner builds one schedule per candidate (docs/planner.md).
constexpr ScheduleTraits VShape(ScheduleKind kind, const char* name, const char* source,
                                void (*generate)(Schedule&)) {
  return {.kind = kind,
          .name = name,
          .rule_label = name,
          .source = source,
          .planner_default = false,
          .uses_chunks = true,
          .default_chunks = 2,
          .fixed_chunks = 2,
          .splits_backward = true,
          .placement = Placement::kV,
          .inflight_microbatches = AllInFlight,
          .generate = generate};
}

// One row per ScheduleKind, in enum order (checked below). Fields left out keep the defaults
// of ScheduleTraits: built in, searched by the planner, one chunk, whole backward, with a flush,
// looped placement, any micro-batch count.
constexpr std::array<ScheduleTraits, 17> kTraits = {{
    OneChunk(ScheduleKind::kNaive, "naive", "GPipe paper fig. 2(b); PipeDream fig. 3", OneInFlight,
             internal::BuildNaive),
    OneChunk(ScheduleKind::kGPipe, "gpipe", "Huang et al. 2019, section 2.3", AllInFlight,
             internal::BuildGPipe),
    OneChunk(ScheduleKind::k1F1B, "1f1b",
             "Narayanan et al. SC'21 section 2.2.1; Megatron-LM "
             "forward_backward_pipelining_without_interleaving",
             OneFOneBInFlight, internal::Build1F1B),
    Chunked(ScheduleKind::kInterleaved1F1B, "interleaved", "interleaved 1F1B",
            "Narayanan et al. SC'21 section 2.2.2; PyTorch ScheduleInterleaved1F1B (Megatron-LM's "
            "order when m is a multiple of p > p)",
            MicrobatchRule::kAny, "", internal::BuildInterleaved1F1B),
    Asynchronous(OneChunk(ScheduleKind::kPipeDream, "pipedream",
                          "Narayanan et al. SOSP'19 (asynchronous 1F1B, weight stashing)",
                          OneFOneBInFlight, internal::BuildPipeDream)),
    ZeroBubble(ScheduleKind::kZBH1, "zb-h1", "Qi et al. ICLR'24 section 3.1, figure 3 top",
               ZBH1InFlight, ZBH1BeforeInputGradient, internal::BuildZBH1),
    ZeroBubble(ScheduleKind::kZBH2, "zb-h2", "Qi et al. ICLR'24 section 3.1, figure 3 bottom",
               ZBH2InFlight, ZBH2BeforeInputGradient, internal::BuildZBH2),
    Chunked(ScheduleKind::kLoopedBFS, "looped-bfs", "looped BFS",
            "Lamy-Poirier 2022 (breadth-first pipeline parallelism); PyTorch ScheduleLoopedBFS",
            MicrobatchRule::kAtLeastStages,
            "with fewer, each rank idles between its chunks waiting for the first micro-batch to "
            "come round",
            internal::BuildLoopedBFS),
    VShape(ScheduleKind::kZBV, "zb-v",
           "Qi et al. 2024, Pipeline Parallelism with Controllable Memory, section 4 (ZB-V); "
           "sail-sg/zero-bubble-pipeline-parallelism scheduler/zbv.py",
           internal::BuildZBV),
    VShape(ScheduleKind::kVHalf, "v-half",
           "Qi et al. 2024, Pipeline Parallelism with Controllable Memory (V-Half); "
           "sail-sg/zero-bubble-pipeline-parallelism scheduler/zbv_greedy.py",
           internal::BuildVHalf),
    VShape(ScheduleKind::kVMin, "v-min",
           "Qi et al. 2024, Pipeline Parallelism with Controllable Memory (V-Min); "
           "sail-sg/zero-bubble-pipeline-parallelism scheduler/zbv_greedy.py",
           internal::BuildVMin),
    NamedOnly(SplitBackward(
        Chunked(ScheduleKind::kInterleavedZB, "interleaved-zb", "interleaved-zb",
                "PyTorch ScheduleInterleavedZeroBubble (ZB1P of Qi et al. ICLR'24 with v "
                "chunks per rank)",
                MicrobatchRule::kAny, "", internal::BuildInterleavedZB))),
    // DualPipeV: two chunks in a V and nothing else (--chunks 2); m >= 2p as its step() asserts.
    // The partition pass assumes all m in flight, as for the other chunked kinds; the simulate
    // pass measures the peak (p+1 chunk activations on rank 0, docs/schedules.md).
    {.kind = ScheduleKind::kDualPipeV,
     .name = "dualpipev",
     .rule_label = "dualpipev",
     .source = "deepseek-ai/DualPipe dualpipev.py (commit 3da1bbe); DeepSeek-V3 report; PyTorch "
               "ScheduleDualPipeV",
     .uses_chunks = true,
     .default_chunks = 2,
     .fixed_chunks = 2,
     .splits_backward = true,
     .overlapped_pairs = true,
     .placement = Placement::kV,
     .microbatch_rule = MicrobatchRule::kAtLeastTwiceStages,
     .too_few_microbatches_why = "both chunks' warm-ups must fill before its steady state",
     .inflight_microbatches = AllInFlight,
     .generate = internal::BuildDualPipeV},
    // The cost-driven zero bubble: the order comes from the stage costs and a memory limit
    // (MakeSchedule with ScheduleCosts; docs/schedules.md). zb-auto is searched by default: the
    // shipped baselines keep their plans and the 1024-GPU search stays well under 2 s
    // (docs/planner.md); zb-v-auto, like the other V kinds, only when named.
    {.kind = ScheduleKind::kZBAuto,
     .name = "zb-auto",
     .rule_label = "zb-auto",
     .source = "Qi et al. ICLR'24 section 3 (ZB-1p / ZB-2p); sail-sg/zero-bubble-pipeline-"
               "parallelism scheduler/zb.py (commit 39f2c186)",
     .splits_backward = true,
     .inflight_microbatches = ZBAutoInFlight,
     .generate = internal::BuildZBAuto,
     .generate_from_costs = internal::BuildZBAutoFromCosts,
     .default_memory_limit = TwicePipeline},
    {.kind = ScheduleKind::kZBVAuto,
     .name = "zb-v-auto",
     .rule_label = "zb-v-auto",
     .source = "Qi et al. 2024, Pipeline Parallelism with Controllable Memory, section 4 (ZB-V); "
               "sail-sg/zero-bubble-pipeline-parallelism scheduler/zbv.py with the stage costs",
     .planner_default = false,
     .uses_chunks = true,
     .default_chunks = 2,
     .fixed_chunks = 2,
     .splits_backward = true,
     .placement = Placement::kV,
     .inflight_microbatches = AllInFlight,
     .generate = internal::BuildZBVAuto,
     .generate_from_costs = internal::BuildZBVAutoFromCosts,
     .default_memory_limit = OncePipeline},
    // DualPipe: bidirectional, 2p virtual stages in a V over p model chunks (rank r holds chunks
    // r and p-1-r); p even, m even and >= 2p as its step() asserts. Searched by the planner only
    // when named: it doubles the parameters. The in-flight bound is all m, as for dualpipev; the
    // simulate pass measures the peak (p+1 chunk activations, docs/schedules.md).
    {.kind = ScheduleKind::kDualPipe,
     .name = "dualpipe",
     .rule_label = "dualpipe",
     .source = "deepseek-ai/DualPipe dualpipe.py (commit 3da1bbe); DeepSeek-V3 technical report, "
               "section 3.2.1",
     .planner_default = false,
     .uses_chunks = true,
     .default_chunks = 2,
     .fixed_chunks = 2,
     .splits_backward = true,
     .bidirectional = true,
     .overlapped_pairs = true,
     .placement = Placement::kV,
     .microbatch_rule = MicrobatchRule::kBidirectional,
     .too_few_microbatches_why = "half the micro-batches enter at each end and both halves' "
                                 "warm-ups must fill before its steady state",
     .inflight_microbatches = AllInFlight,
     .generate = internal::BuildDualPipe},
    {.kind = ScheduleKind::kCustom,
     .name = "custom",
     .rule_label = "custom",
     .source = "schedule text (--schedule-in)",
     .builtin = false,
     .planner_default = false,
     .inflight_microbatches = OneFOneBInFlight},
}};

constexpr bool RowsInEnumOrder() {
  for (size_t i = 0; i < kTraits.size(); ++i) {
    if (static_cast<size_t>(kTraits[i].kind) != i) return false;
  }
  return true;
}
static_assert(RowsInEnumOrder(), "kTraits must list the kinds in ScheduleKind order");

// A bound far past real pipelines (1024 stages x 8192 micro-batches) that keeps the action
// lists, and the simulation of them, finite: without it --microbatches 100000000 ran out of
// memory or ran for hours (issue 8).
constexpr int64_t kMaxScheduleCells = int64_t{1} << 23;

// "interleaved, looped-bfs, ...": the kinds that take more than one chunk, in table order.
std::string ChunkedKindNames() {
  std::string out;
  for (const ScheduleTraits& t : kTraits) {
    if (t.uses_chunks) out += fmt::format("{}{}", out.empty() ? "" : ", ", t.name);
  }
  return out;
}

}  // namespace

const ScheduleTraits& TraitsOf(ScheduleKind kind) { return kTraits[static_cast<size_t>(kind)]; }

std::span<const ScheduleTraits> AllScheduleTraits() { return kTraits; }

int StageRank(Placement placement, int stage, int ranks) {
  switch (placement) {
    case Placement::kLooped:
      return stage % ranks;
    case Placement::kV:
      return stage < ranks ? stage : 2 * ranks - 1 - stage;
  }
  return stage % ranks;
}

Status CheckShape(ScheduleKind kind, int ranks, int microbatches, int chunks) {
  const ScheduleTraits& t = TraitsOf(kind);
  if (ranks < 1) {
    return Status::InvalidArgument(
        fmt::format("--stages is {}: a pipeline needs at least 1 stage", ranks));
  }
  if (microbatches < 1) {
    return Status::InvalidArgument(fmt::format(
        "--microbatches is {}: an iteration needs at least 1 micro-batch", microbatches));
  }
  if (chunks < 1 || (chunks > 1 && !t.uses_chunks)) {
    return Status::InvalidArgument(
        fmt::format("--chunks is {}: {} takes exactly 1 model chunk per GPU; only {} take more",
                    chunks, t.name, ChunkedKindNames()));
  }
  if (t.fixed_chunks > 0 && chunks != t.fixed_chunks) {
    return Status::InvalidArgument(
        fmt::format("--chunks is {}: {} takes exactly {} model chunks per GPU, in a V (rank r "
                    "holds stages r and 2P-1-r); leave --chunks out or give {}",
                    chunks, t.name, t.fixed_chunks, t.fixed_chunks));
  }
  const int64_t stages = int64_t{ranks} * chunks;
  if (stages * microbatches > kMaxScheduleCells) {
    return Status::InvalidArgument(fmt::format(
        "{} stages x {} micro-batches = {} (stage, micro-batch) pairs is over the limit of "
        "2^23 ({}): use fewer micro-batches or stages",
        stages, microbatches, stages * microbatches, kMaxScheduleCells));
  }
  switch (t.microbatch_rule) {
    case MicrobatchRule::kAny:
      return Status::Ok();
    case MicrobatchRule::kAtLeastStages:
      if (microbatches >= ranks) return Status::Ok();
      return Status::InvalidArgument(fmt::format(
          "{} needs at least as many micro-batches (N = {}) as pipeline stages (P = {}): {}; use "
          "--microbatches {} or more",
          t.name, microbatches, ranks, t.too_few_microbatches_why, ranks));
    case MicrobatchRule::kAtLeastTwiceStages:
      if (microbatches >= 2 * ranks) return Status::Ok();
      return Status::InvalidArgument(fmt::format(
          "{} needs at least twice as many micro-batches (N = {}) as pipeline stages (P = {}): "
          "{}; use --microbatches {} or more",
          t.name, microbatches, ranks, t.too_few_microbatches_why, 2 * ranks));
    case MicrobatchRule::kBidirectional:
      if (ranks % 2 != 0) {
        return Status::InvalidArgument(fmt::format(
            "--stages is {}: {} needs an even number of pipeline stages (rank r and rank P-1-r "
            "hold the same two model chunks); use --stages {}",
            ranks, t.name,
            ranks > 1 ? fmt::format("{} or {}", ranks - 1, ranks + 1) : std::to_string(ranks + 1)));
      }
      if (microbatches % 2 == 0 && microbatches >= 2 * ranks) return Status::Ok();
      return Status::InvalidArgument(fmt::format(
          "{} needs an even number of micro-batches (N = {}), at least twice the pipeline "
          "stages (P = {}): {}; use --microbatches {}",
          t.name, microbatches, ranks, t.too_few_microbatches_why,
          std::max(2 * ranks, microbatches + microbatches % 2)));
  }
  return Status::Ok();
}

std::string MicrobatchRuleConflict(ScheduleKind kind, int p, int m) {
  const ScheduleTraits& t = TraitsOf(kind);
  switch (t.microbatch_rule) {
    case MicrobatchRule::kAny:
      return "";
    case MicrobatchRule::kAtLeastStages:
      return m < p ? fmt::format("{} {} m ({}) >= p ({})", t.rule_label,
                                 t.rule_label_plural ? "need" : "needs", m, p)
                   : "";
    case MicrobatchRule::kAtLeastTwiceStages:
      return m < 2 * p ? fmt::format("{} needs m ({}) >= 2p ({})", t.rule_label, m, 2 * p) : "";
    case MicrobatchRule::kBidirectional:
      if (p % 2 != 0) return fmt::format("{} needs an even p ({})", t.rule_label, p);
      if (m % 2 != 0 || m < 2 * p) {
        return fmt::format("{} needs an even m ({}) >= 2p ({})", t.rule_label, m, 2 * p);
      }
      return "";
  }
  return "";
}

}  // namespace pipecast
