#include "planner/compare.h"

#include <fmt/format.h>

#include <charconv>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "planner/explain.h"

namespace pipecast {
namespace {

std::optional<int> PositiveInt(const std::string& text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 0) {
    return std::nullopt;
  }
  return value;
}

Status BadWord(const std::string& word, const std::string& expected) {
  return Status::InvalidArgument(
      fmt::format("--compare-to: '{}' is not a configuration word: {}", word, expected));
}

// A bare word of PinConfiguration (sp, or a schedule's name) into `o`.
Status PinBareWord(const std::string& word, PlannerOptions* o) {
  if (word == "sp") {
    o->sequence_parallel = PlannerOptions::SequenceParallel::kOn;
    return Status::Ok();
  }
  if (Result<ScheduleKind> kind = ParseScheduleKind(word); kind.ok()) {
    o->schedules = {*kind};
    return Status::Ok();
  }
  return BadWord(word,
                 "expected key=value (t=, p=, d=, v=, mbs=, m=, recompute=, zero=, ...), "
                 "sp, or a schedule's name");
}

// A key=value word of PinConfiguration, and the checks of its value.
struct KeyValue {
  std::string word, key, value;
  std::optional<int> number;  // the value as a whole number >= 0, if it is one

  Status NeedNumber(int min) const {
    if (!number || *number < min) {
      return BadWord(word, fmt::format("{} takes a whole number of at least {}", key, min));
    }
    return Status::Ok();
  }
  Status OnOff(PlannerOptions::Choice* out, const char* on, const char* off) const {
    if (value == on) {
      *out = PlannerOptions::Choice::kOn;
    } else if (value == off) {
      *out = PlannerOptions::Choice::kOff;
    } else {
      return BadWord(word, fmt::format("{} is {} or {}", key, on, off));
    }
    return Status::Ok();
  }
};

// The layout keys (t, sp, p, d, v, mbs, m) into `o`; nullopt for another key.
std::optional<Status> PinLayoutKey(const KeyValue& kv, PlannerOptions* o) {
  if (kv.key == "t") {
    PIPECAST_RETURN_IF_ERROR(kv.NeedNumber(1));
    o->tensor_parallel = {*kv.number};
  } else if (kv.key == "sp") {
    PlannerOptions::Choice sp = PlannerOptions::Choice::kAuto;
    PIPECAST_RETURN_IF_ERROR(kv.OnOff(&sp, "on", "off"));
    o->sequence_parallel = sp == PlannerOptions::Choice::kOn
                               ? PlannerOptions::SequenceParallel::kOn
                               : PlannerOptions::SequenceParallel::kOff;
  } else if (kv.key == "p") {
    PIPECAST_RETURN_IF_ERROR(kv.NeedNumber(1));
    o->pipeline_stages = *kv.number;
  } else if (kv.key == "d") {
    PIPECAST_RETURN_IF_ERROR(kv.NeedNumber(1));
    o->data_parallel = *kv.number;
  } else if (kv.key == "v") {
    PIPECAST_RETURN_IF_ERROR(kv.NeedNumber(2));
    o->chunks = {*kv.number};
  } else if (kv.key == "mbs") {
    PIPECAST_RETURN_IF_ERROR(kv.NeedNumber(1));
    o->microbatch_sizes = {*kv.number};
  } else if (kv.key == "m") {
    PIPECAST_RETURN_IF_ERROR(kv.NeedNumber(1));
    o->microbatches = *kv.number;
  } else if (kv.key == "ep") {
    PIPECAST_RETURN_IF_ERROR(kv.NeedNumber(1));
    o->expert_parallel = {*kv.number};
  } else if (kv.key == "etp") {
    PIPECAST_RETURN_IF_ERROR(kv.NeedNumber(1));
    o->expert_tensor_parallel = {*kv.number};
  } else {
    return std::nullopt;
  }
  return Status::Ok();
}

// The schedule, recomputation, ZeRO, partition and sharding keys into `o`;
// nullopt for another key.
std::optional<Status> PinRunKey(const KeyValue& kv, PlannerOptions* o) {
  if (kv.key == "schedule") {
    Result<ScheduleKind> kind = ParseScheduleKind(kv.value);
    if (!kind.ok()) return BadWord(kv.word, kind.status().message());
    o->schedules = {*kind};
  } else if (kv.key == "recompute") {
    RecomputeChoice choice;
    if (!ParseRecomputeSpec(kv.value, &choice.recompute, &choice.layers)) {
      return BadWord(kv.word, "recompute is off, selective, full, op or every:K");
    }
    o->recompute = RecomputeMode::kListed;
    o->recompute_listed = {choice};
  } else if (kv.key == "zero") {
    PIPECAST_RETURN_IF_ERROR(kv.NeedNumber(0));
    if (*kv.number > kMaxZeroLevel) return BadWord(kv.word, "zero is 0, 1, 2 or 3");
    o->zero_levels = {*kv.number};
  } else if (kv.key == "partition") {
    Result<PartitionRule> rule = ParsePartitionRule(kv.value, "--compare-to partition");
    if (!rule.ok() || *rule == PartitionRule::kGiven) {
      return BadWord(kv.word, "partition is balanced or even");
    }
    o->partition_rules = {*rule};
  } else if (kv.key == "reshard") {
    PIPECAST_RETURN_IF_ERROR(kv.OnOff(&o->sharding.reshard_after_forward, "on", "off"));
  } else if (kv.key == "prefetch") {
    PlannerOptions::Choice prefetch = PlannerOptions::Choice::kAuto;
    PIPECAST_RETURN_IF_ERROR(kv.OnOff(&prefetch, "on", "off"));
    o->sharding.prefetch = prefetch == PlannerOptions::Choice::kOn;
  } else if (kv.key == "reduce") {
    PIPECAST_RETURN_IF_ERROR(kv.OnOff(&o->sharding.reduce_every_microbatch, "every", "once"));
  } else if (kv.key == "shard-group") {
    PIPECAST_RETURN_IF_ERROR(kv.NeedNumber(0));
    o->sharding.shard_group = *kv.number;
  } else if (kv.key == "ep-overlap") {
    std::optional<ExpertOverlap> overlap = ParseExpertOverlap(kv.value);
    if (!overlap) return BadWord(kv.word, "ep-overlap is auto, on or off");
    o->expert_overlaps = {*overlap};
  } else if (kv.key == "ep-dispatcher") {
    std::optional<ExpertDispatcher> dispatcher = ParseExpertDispatcher(kv.value);
    if (!dispatcher) return BadWord(kv.word, "ep-dispatcher is deepep, alltoall or allgather");
    o->expert_dispatchers = {*dispatcher};
  } else {
    return std::nullopt;
  }
  return Status::Ok();
}

// One word of PinConfiguration into `o`.
Status PinWord(const std::string& word, PlannerOptions* o) {
  const size_t eq = word.find('=');
  if (eq == std::string::npos) return PinBareWord(word, o);
  const KeyValue kv{.word = word,
                    .key = word.substr(0, eq),
                    .value = word.substr(eq + 1),
                    .number = PositiveInt(word.substr(eq + 1))};
  if (std::optional<Status> pinned = PinLayoutKey(kv, o)) return *pinned;
  if (std::optional<Status> pinned = PinRunKey(kv, o)) return *pinned;
  return BadWord(word,
                 "the keys are t, sp, p, d, v, mbs, m, ep, etp, schedule, recompute, zero, "
                 "partition, reshard, prefetch, reduce, shard-group, ep-overlap and "
                 "ep-dispatcher");
}

}  // namespace

Result<PlannerOptions> PinConfiguration(const PlannerOptions& base, const std::string& words) {
  PlannerOptions o = base;
  o.progress = nullptr;
  o.top_k = 0;
  std::istringstream in(words);
  int count = 0;
  for (std::string word; in >> word; ++count) PIPECAST_RETURN_IF_ERROR(PinWord(word, &o));
  if (count == 0) {
    return Status::InvalidArgument(
        "--compare-to is empty: give a configuration's words, e.g. \"d=8 zero=3 mbs=2\", or a "
        "plan.json");
  }
  PIPECAST_RETURN_IF_ERROR(o.Validate().WithPrefix("--compare-to"));
  return o;
}

PlannerOptions PinPlan(const PlannerOptions& base, const PlanFile& plan) {
  const TrainingConfig& c = plan.config;
  PlannerOptions o = base;
  o.progress = nullptr;
  o.top_k = 0;
  o.tensor_parallel = {c.layout.tensor_parallel};
  o.sequence_parallel = c.layout.sequence_parallel ? PlannerOptions::SequenceParallel::kOn
                                                   : PlannerOptions::SequenceParallel::kOff;
  o.pipeline_stages = c.layout.pipeline_stages;
  o.data_parallel = c.layout.data_parallel;
  if (c.layout.chunks >= 2) o.chunks = {c.layout.chunks};
  o.microbatch_sizes = {c.microbatch_size};
  o.microbatches = c.microbatches;
  o.schedules = {c.schedule};
  o.recompute = RecomputeMode::kListed;
  o.recompute_listed = {{c.recompute, c.recompute_layers}};
  o.zero_levels = {c.memory.zero};
  const ShardingConfig& s = c.memory.sharding;
  auto pin = [](bool on) {
    return on ? PlannerOptions::Choice::kOn : PlannerOptions::Choice::kOff;
  };
  o.sharding = {.reshard_after_forward = pin(s.reshard_after_forward),
                .reduce_every_microbatch = pin(s.reduce_every_microbatch),
                .prefetch = s.prefetch,
                .shard_group = s.shard_group};
  if (c.partition.rule != PartitionRule::kGiven) {
    o.partition_rules = {c.partition.rule};
    if (c.partition.rule == PartitionRule::kEven) o.even = c.partition.even;
  }
  // The plan's expert layout, overlap and dispatcher (the last matters at ep > 1 only).
  o.expert_parallel = {c.layout.expert_parallel};
  o.expert_tensor_parallel = {c.layout.expert_tensor_parallel};
  o.expert_overlaps = {c.overlap.expert_overlap};
  o.expert_dispatchers = {c.layout.expert_dispatcher};
  return o;
}

Result<ConfigurationComparison> CompareWithChoice(const Model& model, const Cluster& cluster,
                                                  const PlannerOptions& pinned,
                                                  const PlanReport& report, std::string given) {
  ConfigurationComparison out;
  out.given = std::move(given);
  Result<PlanReport> searched = RunPlanner(model, cluster, pinned);
  if (!searched.ok()) return searched.status().WithPrefix("--compare-to");
  if (!searched->Feasible()) {
    // The first group's reason is the most telling (out of memory before the rest).
    const std::vector<RejectGroup> groups = GroupRejections(searched->rejected);
    if (groups.empty() || groups.front().all.empty()) {
      out.why_not =
          "the search space has no such configuration (check --gpus, --global-batch and the "
          "words given)";
    } else {
      const Rejection* r =
          groups.front().closest != nullptr ? groups.front().closest : groups.front().all.front();
      out.why_not = fmt::format("{}: {}", r->candidate.Label(), r->Detail());
    }
    return out;
  }
  const Candidate& chosen = report.ranked.front();
  out.compared = searched->ranked.front();
  out.same_as_choice = out.compared->Label() == chosen.Label();
  out.expected_gain = chosen.result->samples_per_s / out.compared->result->samples_per_s - 1;
  return out;
}

}  // namespace pipecast
