#include "sim/schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/internal/schedule_builders.h"

namespace pipecast {

char OpKindLetter(OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return 'F';
    case OpKind::kBackward:
      return 'B';
    case OpKind::kBackwardInput:
      return 'I';
    case OpKind::kBackwardWeight:
      return 'W';
  }
  return '?';
}

std::string ActionName(const Action& action) {
  return fmt::format("{}{}{}", action.stage, OpKindLetter(action.kind), action.microbatch);
}

const char* ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kNaive:
      return "naive";
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved1F1B:
      return "interleaved";
    case ScheduleKind::kPipeDream:
      return "pipedream";
    case ScheduleKind::kZBH1:
      return "zb-h1";
    case ScheduleKind::kZBH2:
      return "zb-h2";
    case ScheduleKind::kLoopedBFS:
      return "looped-bfs";
    case ScheduleKind::kCustom:
      return "custom";
  }
  return "?";
}

std::vector<ScheduleKind> BuiltinScheduleKinds() {
  return {ScheduleKind::kNaive,     ScheduleKind::kGPipe,
          ScheduleKind::k1F1B,      ScheduleKind::kInterleaved1F1B,
          ScheduleKind::kPipeDream, ScheduleKind::kZBH1,
          ScheduleKind::kZBH2,      ScheduleKind::kLoopedBFS};
}

bool UsesChunks(ScheduleKind kind) {
  return kind == ScheduleKind::kInterleaved1F1B || kind == ScheduleKind::kLoopedBFS;
}

bool SplitsBackward(ScheduleKind kind) {
  return kind == ScheduleKind::kZBH1 || kind == ScheduleKind::kZBH2;
}

Result<ScheduleKind> ParseScheduleKind(const std::string& name) {
  std::string known;
  for (ScheduleKind k : BuiltinScheduleKinds()) {
    if (name == ScheduleKindName(k)) return k;
    known += known.empty() ? "" : ", ";
    known += ScheduleKindName(k);
  }
  return Status::InvalidArgument(fmt::format(
      "unknown schedule '{}': expected one of {} (or --schedule-in FILE for a custom schedule)",
      name, known));
}

int64_t Schedule::NumActions() const {
  int64_t n = 0;
  for (const auto& list : actions) n += static_cast<int64_t>(list.size());
  return n;
}

namespace {

Action F(int stage, int mb) { return Action{stage, OpKind::kForward, mb}; }
Action B(int stage, int mb) { return Action{stage, OpKind::kBackward, mb}; }

// Naive model parallelism: one micro-batch at a time through the whole
// pipeline and back (GPipe paper fig. 2(b); PipeDream fig. 3). Each rank
// alternates F(i), B(i); the data dependencies keep a single micro-batch in
// flight, so an iteration takes m·p·(F+B).
void BuildNaive(Schedule& s) {
  for (int r = 0; r < s.num_ranks; ++r) {
    for (int i = 0; i < s.num_microbatches; ++i) {
      s.actions[r].push_back(F(r, i));
      s.actions[r].push_back(B(r, i));
    }
  }
}

// GPipe (Huang et al. 2019, section 2.3): all forwards, then all backwards,
// then a flush. Backwards in micro-batch order, as PyTorch's ScheduleGPipe.
void BuildGPipe(Schedule& s) {
  for (int r = 0; r < s.num_ranks; ++r) {
    for (int i = 0; i < s.num_microbatches; ++i) s.actions[r].push_back(F(r, i));
    for (int i = 0; i < s.num_microbatches; ++i) s.actions[r].push_back(B(r, i));
  }
}

// 1F1B with flush (PipeDream-Flush; Narayanan et al. SC'21 section 2.2.1).
// Megatron-LM's `forward_backward_pipelining_without_interleaving`: rank r
// runs min(p-r-1, m) warm-up forwards, then alternates one forward and one
// backward, then drains the remaining backwards. Rank r holds at most
// min(p-r, m) micro-batches' activations.
void Build1F1B(Schedule& s) {
  const int p = s.num_ranks;
  const int m = s.num_microbatches;
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(p - r - 1, m);
    const int steady = m - warmup;
    auto& list = s.actions[r];
    for (int i = 0; i < warmup; ++i) list.push_back(F(r, i));
    for (int i = 0; i < steady; ++i) {
      list.push_back(F(r, warmup + i));
      list.push_back(B(r, i));
    }
    for (int i = steady; i < m; ++i) list.push_back(B(r, i));
  }
}

// PipeDream asynchronous 1F1B with weight stashing (Narayanan et al.,
// SOSP'19): the 1F1B order without a flush between iterations. Simulated as
// kPipeDreamIterations iterations back to back, micro-batches numbered
// across them, so the steady state shows; each rank stashes one weight
// version per in-flight micro-batch (p - s on stage s).
void BuildPipeDream(Schedule& s) {
  s.iterations = kPipeDreamIterations;
  s.flush = false;
  const int per_iteration = s.num_microbatches;
  s.num_microbatches = per_iteration * s.iterations;
  Build1F1B(s);
}

}  // namespace

Result<Schedule> MakeSchedule(ScheduleKind kind, int num_ranks, int num_microbatches, int chunks) {
  if (num_ranks < 1) {
    return Status::InvalidArgument(
        fmt::format("--stages is {}: a pipeline needs at least 1 stage", num_ranks));
  }
  if (num_microbatches < 1) {
    return Status::InvalidArgument(fmt::format(
        "--microbatches is {}: an iteration needs at least 1 micro-batch", num_microbatches));
  }
  if (chunks < 1 || (chunks > 1 && !UsesChunks(kind))) {
    return Status::InvalidArgument(
        fmt::format("--chunks is {}: {} takes exactly 1 model chunk per GPU; only interleaved and "
                    "looped-bfs take more",
                    chunks, ScheduleKindName(kind)));
  }
  // A bound far past real pipelines (1024 stages x 8192 micro-batches) that
  // keeps the action lists, and the simulation of them, finite: without it
  // --microbatches 100000000 ran out of memory or ran for hours (issue 8).
  constexpr int64_t kMaxScheduleCells = int64_t{1} << 23;
  const int64_t stages = int64_t{num_ranks} * chunks;
  if (stages * num_microbatches > kMaxScheduleCells) {
    return Status::InvalidArgument(fmt::format(
        "{} stages x {} micro-batches = {} (stage, micro-batch) pairs is over the limit of "
        "2^23 ({}): use fewer micro-batches or stages",
        stages, num_microbatches, stages * num_microbatches, kMaxScheduleCells));
  }
  Schedule s;
  s.name = ScheduleKindName(kind);
  s.num_ranks = num_ranks;
  s.num_stages = num_ranks * chunks;
  s.num_microbatches = num_microbatches;
  s.stage_rank.resize(s.num_stages);
  for (int st = 0; st < s.num_stages; ++st) s.stage_rank[st] = st % num_ranks;
  s.actions.resize(num_ranks);
  s.split_backward = SplitsBackward(kind);
  Status built;
  switch (kind) {
    case ScheduleKind::kNaive:
      BuildNaive(s);
      break;
    case ScheduleKind::kGPipe:
      BuildGPipe(s);
      break;
    case ScheduleKind::k1F1B:
      Build1F1B(s);
      break;
    case ScheduleKind::kPipeDream:
      BuildPipeDream(s);
      break;
    case ScheduleKind::kInterleaved1F1B:
      built = internal::BuildInterleaved1F1B(s);
      break;
    case ScheduleKind::kZBH1:
      built = internal::BuildZBH1(s);
      break;
    case ScheduleKind::kZBH2:
      built = internal::BuildZBH2(s);
      break;
    case ScheduleKind::kLoopedBFS:
      built = internal::BuildLoopedBFS(s);
      break;
    case ScheduleKind::kCustom:
      return Status::InvalidArgument(
          "the custom schedule has no generator: give its text with --schedule-in FILE");
  }
  if (!built.ok()) return built;
  return s;
}

Status ValidateSchedule(const Schedule& s) {
  if (s.num_ranks < 1 || s.num_stages < 1 || s.num_microbatches < 1) {
    return Status::InvalidArgument(fmt::format(
        "schedule '{}' has {} ranks, {} stages and {} micro-batches: each must be at least 1",
        s.name, s.num_ranks, s.num_stages, s.num_microbatches));
  }
  // Asynchronous schedules number micro-batches across iterations: each
  // iteration must hold a whole, equal share (found by fuzzing: 1 micro-batch
  // over 3 iterations divided by zero in the simulator).
  if (s.iterations < 1 || s.num_microbatches % s.iterations != 0) {
    return Status::InvalidArgument(fmt::format(
        "schedule '{}' spreads {} micro-batches over {} iterations: expected at least 1 "
        "iteration and the same whole number of micro-batches in each",
        s.name, s.num_microbatches, s.iterations));
  }
  if (static_cast<int>(s.actions.size()) != s.num_ranks ||
      static_cast<int>(s.stage_rank.size()) != s.num_stages) {
    return Status::Internal(
        fmt::format("schedule '{}' is inconsistent: {} action lists for {} "
                    "ranks, {} stage owners for {} stages",
                    s.name, s.actions.size(), s.num_ranks, s.stage_rank.size(), s.num_stages));
  }
  for (int st = 0; st < s.num_stages; ++st) {
    if (s.stage_rank[st] < 0 || s.stage_rank[st] >= s.num_ranks) {
      return Status::InvalidArgument(
          fmt::format("schedule '{}': stage {} has no rank in 0..{}", s.name, st, s.num_ranks - 1));
    }
  }
  // counts[kind][stage * m + mb]
  const int64_t cells = static_cast<int64_t>(s.num_stages) * s.num_microbatches;
  std::vector<uint8_t> counts[4];
  for (auto& c : counts) c.assign(cells, 0);
  for (int r = 0; r < s.num_ranks; ++r) {
    for (const Action& a : s.actions[r]) {
      if (a.stage < 0 || a.stage >= s.num_stages) {
        return Status::InvalidArgument(
            fmt::format("op {} on rank {}: stage {} is out of range 0..{}", ActionName(a), r,
                        a.stage, s.num_stages - 1));
      }
      if (a.microbatch < 0 || a.microbatch >= s.num_microbatches) {
        return Status::InvalidArgument(
            fmt::format("op {} on rank {}: micro-batch {} is out of range 0..{}", ActionName(a), r,
                        a.microbatch, s.num_microbatches - 1));
      }
      if (s.stage_rank[a.stage] != r) {
        return Status::InvalidArgument(fmt::format(
            "op {} is on rank {}'s list, but stage {} belongs to rank {}: move it to that "
            "rank's line",
            ActionName(a), r, a.stage, s.stage_rank[a.stage]));
      }
      uint8_t& c =
          counts[static_cast<int>(a.kind)][a.stage * int64_t{s.num_microbatches} + a.microbatch];
      if (c > 0) {
        return Status::InvalidArgument(fmt::format(
            "op {} appears more than once (rank {}): each op runs exactly once per iteration",
            ActionName(a), r));
      }
      c = 1;
    }
  }
  for (int st = 0; st < s.num_stages; ++st) {
    for (int mb = 0; mb < s.num_microbatches; ++mb) {
      int64_t i = st * int64_t{s.num_microbatches} + mb;
      bool f = counts[0][i], b = counts[1][i], in = counts[2][i], w = counts[3][i];
      auto name = [&](OpKind k) { return ActionName(Action{st, k, mb}); };
      if (!f) {
        return Status::InvalidArgument(fmt::format(
            "op {} is missing: every stage runs a forward for every micro-batch (rank {})",
            name(OpKind::kForward), s.stage_rank[st]));
      }
      if (b && (in || w)) {
        return Status::InvalidArgument(fmt::format(
            "stage {} micro-batch {} has both a whole backward {} and a split one (I/W): use "
            "one or the other",
            st, mb, name(OpKind::kBackward)));
      }
      if (!b && !in && !w) {
        return Status::InvalidArgument(
            fmt::format("op {} is missing: every stage runs a backward (B, or I and W) for every "
                        "micro-batch (rank {})",
                        name(OpKind::kBackward), s.stage_rank[st]));
      }
      if (!b && in != w) {
        return Status::InvalidArgument(
            fmt::format("op {} is missing: a split backward needs both I and W",
                        name(in ? OpKind::kBackwardWeight : OpKind::kBackwardInput)));
      }
    }
  }
  return Status::Ok();
}

}  // namespace pipecast
