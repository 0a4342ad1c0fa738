#include "sim/schedule_traits.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "sim/internal/schedule_builders.h"

namespace pipecast {
namespace {

// In-flight bounds (ScheduleTraits::inflight_microbatches), shared/SCHEDULES.md's column
// "activations held at peak on stage s".
int OneInFlight(int, int, int) { return 1; }
int AllInFlight(int, int, int m) { return m; }
int OneFOneBInFlight(int stage, int p, int m) { return std::min(p - stage, m); }
// p - s until the input gradient; deferred W ops keep up to p in all.
int ZBH1InFlight(int, int p, int m) { return std::min(p, m); }
// Warm-up forwards 2(p-s)-1, and W ops deferred until the tail keep 2p-1 activations on every
// stage (schedule_zoo.cc).
int ZBH2InFlight(int, int p, int m) { return std::min(2 * p - 1, m); }

// The zero-bubble family (ZB-H1, ZB-H2): split backward, m >= p, one wording for both.
constexpr ScheduleTraits ZeroBubble(ScheduleKind kind, const char* name, const char* source,
                                    int (*inflight)(int, int, int), void (*generate)(Schedule&)) {
  return {.kind = kind,
          .name = name,
          .rule_label = "zb-h1 and zb-h2",
          .rule_label_plural = true,
          .source = source,
          .splits_backward = true,
          .microbatch_rule = MicrobatchRule::kAtLeastStages,
          .too_few_microbatches_why =
              "with fewer there is no steady state to hide the weight gradients in",
          .inflight_microbatches = inflight,
          .generate = generate};
}

// One row per ScheduleKind, in enum order (checked below). Fields left out keep the defaults
// of ScheduleTraits: built in, searched by the planner, one chunk, whole backward, with a flush,
// looped placement, any micro-batch count.
constexpr std::array<ScheduleTraits, 9> kTraits = {{
    {.kind = ScheduleKind::kNaive,
     .name = "naive",
     .rule_label = "naive",
     .source = "GPipe paper fig. 2(b); PipeDream fig. 3",
     .inflight_microbatches = OneInFlight,
     .generate = internal::BuildNaive},
    {.kind = ScheduleKind::kGPipe,
     .name = "gpipe",
     .rule_label = "gpipe",
     .source = "Huang et al. 2019, section 2.3",
     .inflight_microbatches = AllInFlight,
     .generate = internal::BuildGPipe},
    {.kind = ScheduleKind::k1F1B,
     .name = "1f1b",
     .rule_label = "1f1b",
     .source = "Narayanan et al. SC'21 section 2.2.1; Megatron-LM "
               "forward_backward_pipelining_without_interleaving",
     .inflight_microbatches = OneFOneBInFlight,
     .generate = internal::Build1F1B},
    {.kind = ScheduleKind::kInterleaved1F1B,
     .name = "interleaved",
     .rule_label = "interleaved 1F1B",
     .source = "Narayanan et al. SC'21 section 2.2.2; Megatron-LM "
               "forward_backward_pipelining_with_interleaving",
     .uses_chunks = true,
     .default_chunks = 2,
     .microbatch_rule = MicrobatchRule::kMultipleOfStages,
     .inflight_microbatches = AllInFlight,
     .generate = internal::BuildInterleaved1F1B},
    {.kind = ScheduleKind::kPipeDream,
     .name = "pipedream",
     .rule_label = "pipedream",
     .source = "Narayanan et al. SOSP'19 (asynchronous 1F1B, weight stashing)",
     .planner_default = false,
     .flush = false,
     .inflight_microbatches = OneFOneBInFlight,
     .generate = internal::BuildPipeDream},
    ZeroBubble(ScheduleKind::kZBH1, "zb-h1", "Qi et al. ICLR'24 section 3.1, figure 3 top",
               ZBH1InFlight, internal::BuildZBH1),
    ZeroBubble(ScheduleKind::kZBH2, "zb-h2", "Qi et al. ICLR'24 section 3.1, figure 3 bottom",
               ZBH2InFlight, internal::BuildZBH2),
    {.kind = ScheduleKind::kLoopedBFS,
     .name = "looped-bfs",
     .rule_label = "looped BFS",
     .source = "Lamy-Poirier 2022 (breadth-first pipeline parallelism); PyTorch "
               "ScheduleLoopedBFS",
     .uses_chunks = true,
     .default_chunks = 2,
     .microbatch_rule = MicrobatchRule::kAtLeastStages,
     .too_few_microbatches_why = "with fewer, each rank idles between its chunks waiting for the "
                                 "first micro-batch to come round",
     .inflight_microbatches = AllInFlight,
     .generate = internal::BuildLoopedBFS},
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

}  // namespace

const ScheduleTraits& TraitsOf(ScheduleKind kind) { return kTraits[static_cast<size_t>(kind)]; }

std::span<const ScheduleTraits> AllScheduleTraits() { return kTraits; }

int StageRank(Placement placement, int stage, int ranks) {
  switch (placement) {
    case Placement::kLooped:
      return stage % ranks;
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
        fmt::format("--chunks is {}: {} takes exactly 1 model chunk per GPU; only interleaved and "
                    "looped-bfs take more",
                    chunks, t.name));
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
    case MicrobatchRule::kMultipleOfStages:
      if (microbatches % ranks == 0) return Status::Ok();
      return Status::InvalidArgument(fmt::format(
          "{} needs the micro-batch count (N = {}) to be a multiple of the pipeline stages "
          "(P = {}), as Megatron-LM requires: use --microbatches K·P, e.g. {}",
          t.rule_label, microbatches, ranks, (microbatches / ranks + 1) * ranks));
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
    case MicrobatchRule::kMultipleOfStages:
      return m % p != 0
                 ? fmt::format("{} needs m ({}) to be a multiple of p ({})", t.rule_label, m, p)
                 : "";
  }
  return "";
}

}  // namespace pipecast
