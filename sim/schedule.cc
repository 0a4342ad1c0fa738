#include "sim/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <string_view>
#include <type_traits>

#include "base/text_table.h"
#include "sim/internal/schedule_builders.h"
#include "sim/schedule_traits.h"

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

std::string ActionName(const Schedule& s, const Action& a) {
  if (!s.bidirectional) return ActionName(a);
  const bool b = a.stage >= s.num_ranks;
  const int half = s.num_microbatches / 2;
  return fmt::format("{}{}{}{}", b ? 'b' : 'a', b ? a.stage - s.num_ranks : a.stage,
                     OpKindLetter(a.kind), b ? a.microbatch - half : a.microbatch);
}

const char* ScheduleKindName(ScheduleKind kind) { return TraitsOf(kind).name; }

std::vector<ScheduleKind> BuiltinScheduleKinds() {
  std::vector<ScheduleKind> kinds;
  for (const ScheduleTraits& t : AllScheduleTraits()) {
    if (t.builtin) kinds.push_back(t.kind);
  }
  return kinds;
}

std::vector<std::string> BuiltinScheduleNames() {
  std::vector<std::string> names;
  for (ScheduleKind kind : BuiltinScheduleKinds()) names.push_back(ScheduleKindName(kind));
  return names;
}

bool UsesChunks(ScheduleKind kind) { return TraitsOf(kind).uses_chunks; }

bool SplitsBackward(ScheduleKind kind) { return TraitsOf(kind).splits_backward; }

namespace {

// PyTorch pipelining's schedule classes (torch/distributed/pipelining/
// schedules.py) and the kinds that run their order. get_schedule_class
// accepts the class name with or without "Schedule", in any case; so do we.
struct PyTorchScheduleClass {
  const char* name;  // without the "Schedule" prefix
  ScheduleKind kind;
};
constexpr PyTorchScheduleClass kPyTorchScheduleClasses[] = {
    {"GPipe", ScheduleKind::kGPipe},
    {"1F1B", ScheduleKind::k1F1B},
    {"Interleaved1F1B", ScheduleKind::kInterleaved1F1B},
    {"LoopedBFS", ScheduleKind::kLoopedBFS},
    {"InterleavedZeroBubble", ScheduleKind::kInterleavedZB},
    {"ZBVZeroBubble", ScheduleKind::kZBV},
    {"DualPipeV", ScheduleKind::kDualPipeV},
};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<ScheduleKind> PyTorchScheduleKind(std::string_view name) {
  std::string lower = Lower(name);
  if (lower.rfind("schedule", 0) == 0) lower = lower.substr(std::string_view("schedule").size());
  for (const PyTorchScheduleClass& c : kPyTorchScheduleClasses) {
    if (lower == Lower(c.name)) return c.kind;
  }
  return std::nullopt;
}

std::vector<std::string> PyTorchScheduleClassNames() {
  std::vector<std::string> names;
  for (const PyTorchScheduleClass& c : kPyTorchScheduleClasses) {
    names.push_back(std::string("Schedule") + c.name);
  }
  return names;
}

Result<ScheduleKind> ParseScheduleKind(const std::string& name) {
  std::string known;
  if (std::optional<ScheduleKind> kind = PyTorchScheduleKind(name)) return *kind;
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

Result<double> EffectiveMemoryLimit(ScheduleKind kind, int num_ranks, const ScheduleCosts& costs) {
  const ScheduleTraits& t = TraitsOf(kind);
  if (costs.memory_limit == 0) {
    return t.default_memory_limit != nullptr ? t.default_memory_limit(num_ranks) : 0.0;
  }
  if (!(costs.memory_limit >= 1)) {
    return Status::InvalidArgument(fmt::format(
        "--memory-limit is {:g}: every stage must hold at least 1 micro-batch's activations (a "
        "forward keeps them until its weight gradient W); give 1 or more ({} = 2p is ZB-2p's)",
        costs.memory_limit, 2 * num_ranks));
  }
  return costs.memory_limit;
}

namespace {

// The time of every op when a cost-driven kind is built from the shape alone (MakeSchedule
// without costs): equal F, I and W, free communication.
constexpr TimeNs kDefaultOpNs = 1'000'000;

// `costs` with empty fields filled by the defaults and the memory limit resolved.
Result<ScheduleCosts> ResolveCosts(ScheduleKind kind, const Schedule& s, ScheduleCosts costs) {
  const size_t n = static_cast<size_t>(s.num_stages);
  auto fill = [&](auto& v, auto value, const char* what) -> Status {
    using T = typename std::decay_t<decltype(v)>::value_type;
    if (v.empty()) v.assign(n, static_cast<T>(value));
    if (v.size() != n) {
      return Status::InvalidArgument(fmt::format("{} costs has {} entries for {} virtual stages",
                                                 what, v.size(), s.num_stages));
    }
    return Status::Ok();
  };
  PIPECAST_RETURN_IF_ERROR(fill(costs.forward_ns, kDefaultOpNs, "forward"));
  PIPECAST_RETURN_IF_ERROR(fill(costs.input_grad_ns, kDefaultOpNs, "input-gradient"));
  PIPECAST_RETURN_IF_ERROR(fill(costs.weight_grad_ns, kDefaultOpNs, "weight-gradient"));
  PIPECAST_RETURN_IF_ERROR(fill(costs.kept_after_input, 1.0, "kept-after-input"));
  PIPECAST_ASSIGN_OR_RETURN(auto limit, EffectiveMemoryLimit(kind, s.num_ranks, costs));
  costs.memory_limit = limit;
  return costs;
}

}  // namespace

Schedule ScheduleShape(ScheduleKind kind, int num_ranks, int num_microbatches, int chunks) {
  const ScheduleTraits& traits = TraitsOf(kind);
  Schedule s;
  s.name = traits.name;
  s.num_ranks = num_ranks;
  s.num_stages = num_ranks * chunks;
  s.num_microbatches = num_microbatches;
  s.stage_rank.resize(s.num_stages);
  for (int st = 0; st < s.num_stages; ++st) {
    s.stage_rank[st] = StageRank(traits.placement, st, num_ranks);
  }
  s.actions.resize(num_ranks);
  s.split_backward = traits.splits_backward;
  s.bidirectional = traits.bidirectional;
  return s;
}

Result<Schedule> MakeSchedule(ScheduleKind kind, int num_ranks, int num_microbatches, int chunks) {
  return MakeSchedule(kind, num_ranks, num_microbatches, chunks, ScheduleCosts{});
}

Result<Schedule> MakeSchedule(ScheduleKind kind, int num_ranks, int num_microbatches, int chunks,
                              const ScheduleCosts& costs) {
  PIPECAST_RETURN_IF_ERROR(CheckShape(kind, num_ranks, num_microbatches, chunks));
  const ScheduleTraits& traits = TraitsOf(kind);
  if (traits.generate == nullptr) {
    return Status::InvalidArgument(
        "the custom schedule has no generator: give its text with --schedule-in FILE");
  }
  Schedule s = ScheduleShape(kind, num_ranks, num_microbatches, chunks);
  if (traits.generate_from_costs == nullptr) {
    traits.generate(s);
    return s;
  }
  PIPECAST_ASSIGN_OR_RETURN(auto resolved, ResolveCosts(kind, s, costs));
  PIPECAST_RETURN_IF_ERROR(traits.generate_from_costs(s, resolved));
  return s;
}

void internal::BuildFromDefaultCosts(Schedule& s, ScheduleKind kind) {
  auto costs = ResolveCosts(kind, s, ScheduleCosts{});
  // The defaults always resolve and the generators keep within their default limits
  // (schedule_zoo_auto_test.cc); a failure leaves the lists empty for ValidateSchedule.
  if (costs.ok() && !TraitsOf(kind).generate_from_costs(s, *costs).ok())
    s.actions.assign(s.num_ranks, {});
}

Status CombineForwardBackward(Schedule* schedule) {
  for (int r = 0; r < schedule->num_ranks; ++r) {
    std::vector<Action>& list = schedule->actions[r];
    std::vector<Action> forwards, backwards;
    size_t warmup = 0;  // leading forwards
    while (warmup < list.size() && list[warmup].kind == OpKind::kForward) ++warmup;
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      // Past the warm-up a forward comes only right before a backward.
      const bool stepped = i < warmup || a.kind != OpKind::kForward ||
                           (i + 1 < list.size() && list[i + 1].kind == OpKind::kBackward);
      if (a.overlapped || (a.kind != OpKind::kForward && a.kind != OpKind::kBackward) || !stepped) {
        return Status::InvalidArgument(fmt::format(
            "schedule '{}' rank {}: op {} does not fit the 1F1B order the combined 1F1B of "
            "--ep-overlap is made from (warm-up forwards, forward-backward steps, cool-down "
            "backwards, no pairs)",
            schedule->name, r, ActionName(a)));
      }
      (a.kind == OpKind::kForward ? forwards : backwards).push_back(a);
    }
    if (forwards.size() != backwards.size()) {
      return Status::InvalidArgument(
          fmt::format("schedule '{}' rank {} has {} forwards and {} backwards: not a 1F1B order",
                      schedule->name, r, forwards.size(), backwards.size()));
    }
    // The leading forwards are the warm-up and the first step's forward: the combined order's
    // warm-up, one more than 1F1B's.
    const size_t total = forwards.size(), combined_warmup = warmup;
    list.clear();
    for (size_t k = 0; k < combined_warmup; ++k) list.push_back(forwards[k]);
    for (size_t k = 0; k + combined_warmup < total; ++k) {
      list.push_back(forwards[combined_warmup + k]);
      list.push_back(backwards[k]);
      list[list.size() - 2].overlapped = list.back().overlapped = true;
    }
    for (size_t k = total - combined_warmup; k < total; ++k) list.push_back(backwards[k]);
  }
  return Status::Ok();
}

namespace {

// Overlapped ops come in pairs: a forward and, next on the list, a backward (B or I) of
// another (stage, micro-batch), both marked `overlapped`.
Status CheckOverlappedPairs(const std::vector<Action>& list, int rank) {
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (!a.overlapped) continue;
    if (a.kind != OpKind::kForward) {
      return Status::InvalidArgument(fmt::format(
          "op {} on rank {} is marked overlapped but is not the backward half of a pair after a "
          "forward: write the pair as (forward;backward)OVERLAP_F_B",
          ActionName(a), rank));
    }
    const Action* next = i + 1 < list.size() ? &list[i + 1] : nullptr;
    if (next == nullptr || !next->overlapped ||
        (next->kind != OpKind::kBackward && next->kind != OpKind::kBackwardInput)) {
      return Status::InvalidArgument(fmt::format(
          "overlapped pair on rank {} starting with {} has no backward (B or I) as its second "
          "half: write the pair as (forward;backward)OVERLAP_F_B",
          rank, ActionName(a)));
    }
    if (next->stage == a.stage && next->microbatch == a.microbatch) {
      return Status::InvalidArgument(fmt::format(
          "overlapped pair ({};{}) on rank {} overlaps an op with its own backward: the two "
          "halves must be of different (stage, micro-batch)",
          ActionName(a), ActionName(*next), rank));
    }
    ++i;
  }
  return Status::Ok();
}

// The shape two paths need: 2p stages, an even number of micro-batches, one synchronous
// iteration.
Status CheckBidirectionalShape(const Schedule& s) {
  if (!s.bidirectional) return Status::Ok();
  if (s.num_stages != 2 * s.num_ranks) {
    return Status::InvalidArgument(fmt::format(
        "bidirectional schedule '{}' has {} stages on {} ranks: it needs 2 x {} = {}, stages "
        "0..{} for direction a and {}..{} for direction b",
        s.name, s.num_stages, s.num_ranks, s.num_ranks, 2 * s.num_ranks, s.num_ranks - 1,
        s.num_ranks, 2 * s.num_ranks - 1));
  }
  if (s.num_microbatches % 2 != 0) {
    return Status::InvalidArgument(fmt::format(
        "bidirectional schedule '{}' has {} micro-batches: it needs an even number, half "
        "entering at each end",
        s.name, s.num_microbatches));
  }
  if (s.iterations != 1 || !s.flush) {
    return Status::InvalidArgument(fmt::format(
        "bidirectional schedule '{}' spans {} iterations without a flush: only a synchronous "
        "iteration can be bidirectional",
        s.name, s.iterations));
  }
  return Status::Ok();
}

// The schedule's sizes, iterations, list lengths, bidirectional shape and
// stage owners.
Status CheckScheduleShape(const Schedule& s) {
  if (s.num_ranks < 1 || s.num_stages < 1 || s.num_microbatches < 1) {
    return Status::InvalidArgument(fmt::format(
        "schedule '{}' has {} ranks, {} stages and {} micro-batches: each must be at least 1",
        s.name, s.num_ranks, s.num_stages, s.num_microbatches));
  }
  // Asynchronous schedules number micro-batches across iterations: each
  // iteration must hold a whole, equal share (found by fuzzing: 1 micro-batch
  // over 3 iterations divided by zero in the simulator).
  if (s.iterations < 1 || s.num_microbatches % s.iterations != 0) {
    return Status::InvalidArgument(
        fmt::format("schedule '{}' spreads {} over {}: expected at least 1 "
                    "iteration and the same whole number of micro-batches in each",
                    s.name, Count(s.num_microbatches, "micro-batch", "micro-batches"),
                    Count(s.iterations, "iteration", "iterations")));
  }
  if (static_cast<int>(s.actions.size()) != s.num_ranks ||
      static_cast<int>(s.stage_rank.size()) != s.num_stages) {
    return Status::Internal(
        fmt::format("schedule '{}' is inconsistent: {} action lists for {} "
                    "ranks, {} stage owners for {} stages",
                    s.name, s.actions.size(), s.num_ranks, s.stage_rank.size(), s.num_stages));
  }
  PIPECAST_RETURN_IF_ERROR(CheckBidirectionalShape(s));
  for (int st = 0; st < s.num_stages; ++st) {
    if (s.stage_rank[st] < 0 || s.stage_rank[st] >= s.num_ranks) {
      return Status::InvalidArgument(
          fmt::format("schedule '{}': stage {} has no rank in 0..{}", s.name, st, s.num_ranks - 1));
    }
  }
  return Status::Ok();
}

// Op `a` on rank `r`'s list: its stage and micro-batch in range, on the
// micro-batch's path, and on the rank that owns its stage.
Status CheckActionPlace(const Schedule& s, const Action& a, int r) {
  if (a.stage < 0 || a.stage >= s.num_stages) {
    return Status::InvalidArgument(fmt::format("op {} on rank {}: stage {} is out of range 0..{}",
                                               ActionName(a), r, a.stage, s.num_stages - 1));
  }
  if (a.microbatch < 0 || a.microbatch >= s.num_microbatches) {
    return Status::InvalidArgument(
        fmt::format("op {} on rank {}: micro-batch {} is out of range 0..{}", ActionName(a), r,
                    a.microbatch, s.num_microbatches - 1));
  }
  if (!s.OnPath(a.stage, a.microbatch)) {
    const bool b = a.microbatch >= s.num_microbatches / 2;
    return Status::InvalidArgument(fmt::format(
        "op {} on rank {}: micro-batch {} enters at rank {} (direction {}, stages {}..{}) "
        "and never runs stage {} of bidirectional schedule '{}'",
        ActionName(a), r, a.microbatch, b ? s.num_ranks - 1 : 0, b ? 'b' : 'a', b ? s.num_ranks : 0,
        b ? s.num_stages - 1 : s.num_ranks - 1, a.stage, s.name));
  }
  if (s.stage_rank[a.stage] != r) {
    return Status::InvalidArgument(
        fmt::format("op {} is on rank {}'s list, but stage {} belongs to rank {}: move it to that "
                    "rank's line",
                    ActionName(a), r, a.stage, s.stage_rank[a.stage]));
  }
  return Status::Ok();
}

// Which ops a schedule lists: of_kind[kind][stage * m + micro-batch], 0 or 1.
struct OpCounts {
  std::vector<uint8_t> of_kind[4];
};

// Counts each rank's ops, each in its place and listed once, and checks
// each rank's overlapped pairs.
Result<OpCounts> CountOps(const Schedule& s) {
  const int64_t cells = static_cast<int64_t>(s.num_stages) * s.num_microbatches;
  OpCounts counts;
  for (auto& c : counts.of_kind) c.assign(cells, 0);
  for (int r = 0; r < s.num_ranks; ++r) {
    for (const Action& a : s.actions[r]) {
      PIPECAST_RETURN_IF_ERROR(CheckActionPlace(s, a, r));
      uint8_t& c = counts.of_kind[static_cast<int>(a.kind)]
                                 [a.stage * int64_t{s.num_microbatches} + a.microbatch];
      if (c > 0) {
        return Status::InvalidArgument(fmt::format(
            "op {} appears more than once (rank {}): each op runs exactly once per iteration",
            ActionName(a), r));
      }
      c = 1;
    }
    PIPECAST_RETURN_IF_ERROR(CheckOverlappedPairs(s.actions[r], r));
  }
  return counts;
}

// Every stage on a micro-batch's path runs its forward and one backward, whole
// or split into I and W.
Status CheckEveryOpListed(const Schedule& s, const OpCounts& listed) {
  const auto& counts = listed.of_kind;
  for (int st = 0; st < s.num_stages; ++st) {
    for (int mb = 0; mb < s.num_microbatches; ++mb) {
      if (!s.OnPath(st, mb)) continue;
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

}  // namespace

Status ValidateSchedule(const Schedule& s) {
  PIPECAST_RETURN_IF_ERROR(CheckScheduleShape(s));
  PIPECAST_ASSIGN_OR_RETURN(const OpCounts counts, CountOps(s));
  return CheckEveryOpListed(s, counts);
}

}  // namespace pipecast
