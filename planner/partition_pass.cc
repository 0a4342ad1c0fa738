// Pass 2, partition: split the layers into p stages balanced on time, with
// every stage's estimated peak memory under the GPU's capacity. The estimate
// follows the schedule: stage s holds InflightMicrobatches() micro-batches of
// activations, so under 1F1B stage 0 may take fewer layers than the last.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "planner/passes.h"
#include "sim/schedule_traits.h"
#include "sim/stage_costs.h"

namespace pipecast::passes {

int InflightMicrobatches(ScheduleKind schedule, int stage, int p, int m) {
  return TraitsOf(schedule).inflight_microbatches(stage, p, m);
}

namespace {

// Layers whose unsharded parameters a ZeRO-3 rank holds at once (the
// simulator's rule, sim/simulator.h): the running layer and the prefetched one.
constexpr int kGatheredLayers = 2;

// In-flight activations of stage `stage`: micro-batches before their input gradient hold what
// the forward kept, those past it (split backwards, when the model gives weight_grad_bytes)
// what W keeps; plus one rebuild, and what I allocates beyond the forward's bytes.
Bytes ActivationMemory(const StageCost& sc, const Candidate& c, int stage, int inflight) {
  const ScheduleTraits& traits = TraitsOf(c.schedule);
  if (!sc.weight_grad_known || traits.before_input_gradient == nullptr) {
    return inflight * sc.held_bytes + sc.recomputed_bytes;
  }
  const int before =
      std::min(inflight, traits.before_input_gradient(stage, c.pipeline_stages, c.microbatches));
  return before * sc.held_bytes + (inflight - before) * sc.weight_grad_bytes +
         sc.ActivationsAtStart(OpKind::kBackwardInput);
}

// What a stage of layers [first, last] keeps whatever its place in the
// pipeline: its costs and its static bytes (weights with ZeRO-3's gathered
// layers, gradients, optimizer state) and buffers.
struct FixedParts {
  StageCost sc;
  Bytes plain_weights = 0;  // the rank's weights, before stashes and gathers
  MemoryParts parts;        // activations 0: they depend on the stage's in-flight count
};

FixedParts Fixed(const Model& model, const StageCostTable& t, const Candidate& c,
                 const MemoryConfig& memory_in, int first, int last) {
  MemoryConfig memory = memory_in;
  memory.zero = c.zero;
  FixedParts f;
  f.sc = t.Stage(StageLayers{first, last});
  const StageCost& sc = f.sc;
  // Each GPU of a t-way tensor-parallel group keeps 1/t of every parameter
  // (the simulator's rule, sim/simulator.h).
  const double tp = c.tensor_parallel;
  ShardedBytes per_param = ShardedBytesPerParam(memory, c.data_parallel);
  per_param.weights /= tp;
  per_param.gradients /= tp;
  per_param.optimizer /= tp;
  f.plain_weights = ParameterBytes(sc.parameters, per_param.weights);
  f.parts.weights = f.plain_weights;
  f.parts.gradients = ParameterBytes(sc.parameters, per_param.gradients);
  f.parts.optimizer = ParameterBytes(sc.parameters, per_param.optimizer);
  if (c.zero >= 3 && c.data_parallel > 1) {
    Bytes largest = 0;
    for (int l = first; l <= last; ++l) {
      largest = std::max(
          largest, ParameterBytes(model.layers[l].parameters, memory.weight_bytes_per_param / tp));
    }
    f.parts.weights += kGatheredLayers * largest;
  }
  const Bytes output = last + 1 < t.NumLayers() ? sc.output_bytes : 0;
  f.parts.other = sc.workspace_bytes + sc.input_bytes + output;
  return f;
}

// The stage's costs and activation memory come from the simulator's model
// (sim/stage_costs.h), its static bytes from sim/memory.h at the
// candidate's ZeRO level; the planner adds the schedule's in-flight count
// and the communication buffers.
MemoryParts PartsAt(const FixedParts& f, const Candidate& c, int stage) {
  MemoryParts parts = f.parts;
  const int inflight = InflightMicrobatches(c.schedule, stage, c.pipeline_stages, c.microbatches);
  // PipeDream stashes one weight version per in-flight micro-batch.
  if (c.schedule == ScheduleKind::kPipeDream) parts.weights += (inflight - 1) * f.plain_weights;
  parts.activations = ActivationMemory(f.sc, c, stage, inflight);
  return parts;
}

MemoryParts StageParts(const Model& model, const StageCostTable& t, const Candidate& c,
                       const MemoryConfig& memory, int stage, int first, int last) {
  return PartsAt(Fixed(model, t, c, memory, first, last), c, stage);
}

// Fixed() of every (first, last) a search asks for, computed once: the
// partition's dynamic programme asks for each range once per stage. Valid
// for every candidate with the key's micro-batch size, recomputation, t,
// sequence parallelism, d and ZeRO level.
class FixedCache {
 public:
  FixedCache(const Model& model, const StageCostTable& t, const Candidate& key,
             const MemoryConfig& memory)
      : model_(model),
        t_(t),
        key_(key),
        memory_(memory),
        n_(t.NumLayers()),
        entries_(static_cast<size_t>(n_) * n_) {}
  MemoryParts Parts(const Candidate& c, int stage, int first, int last) {
    std::optional<FixedParts>& e = entries_[static_cast<size_t>(first) * n_ + last];
    if (!e) e = Fixed(model_, t_, key_, memory_, first, last);
    return PartsAt(*e, c, stage);
  }

 private:
  const Model& model_;
  const StageCostTable& t_;
  Candidate key_;  // its zero, d and t
  const MemoryConfig& memory_;
  int n_;
  std::vector<std::optional<FixedParts>> entries_;
};

// Splits n layers into p contiguous stages minimising the largest
// value(stage, first, last) among splits where every stage is allowed.
// Returns an empty vector when no split is allowed. O(p n^2).
std::vector<StageLayers> MinMaxSplit(int n, int p,
                                     const std::function<int64_t(int, int, int)>& value,
                                     const std::function<bool(int, int, int)>& allowed) {
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(p + 1, std::vector<int64_t>(n + 1, kInf));
  std::vector<std::vector<int>> cut(p + 1, std::vector<int>(n + 1, -1));
  best[0][0] = 0;
  for (int k = 1; k <= p; ++k) {
    for (int i = k; i <= n - (p - k); ++i) {
      for (int j = k - 1; j < i; ++j) {
        if (best[k - 1][j] == kInf || !allowed(k - 1, j, i - 1)) continue;
        int64_t v = std::max(best[k - 1][j], value(k - 1, j, i - 1));
        if (v < best[k][i]) {
          best[k][i] = v;
          cut[k][i] = j;
        }
      }
    }
  }
  if (best[p][n] == kInf) return {};
  std::vector<StageLayers> out(p);
  for (int k = p, end = n; k >= 1; --k) {
    out[k - 1] = StageLayers{cut[k][end], end - 1};
    end = cut[k][end];
  }
  return out;
}

}  // namespace

Bytes EstimateStageMemory(const Model& model, const Candidate& c, const MemoryConfig& memory,
                          int stage, int first, int last) {
  const StageCostTable t(model, c.CostOptions());
  return StageParts(model, t, c, memory, stage, first, last).Total();
}

std::string BindingPart(const MemoryParts& parts, const Candidate& c) {
  struct Part {
    const char* name;
    Bytes bytes;
  };
  const Part all[] = {{"optimizer state", parts.optimizer},
                      {"weights", parts.weights},
                      {"gradients", parts.gradients},
                      {"activations", parts.activations},
                      {"workspace and buffers", parts.other}};
  const Part* top = &all[0];
  for (const Part& p : all) {
    if (p.bytes > top->bytes) top = &p;
  }
  std::string hint;
  const bool replicas = c.data_parallel > 1;
  const std::string name = top->name;
  if (name == "optimizer state" && replicas && c.zero < 1) {
    hint = "try --zero 1 (Megatron's distributed optimizer keeps 1/d of it)";
  } else if (name == "gradients" && replicas && c.zero < 2) {
    hint = "try --zero 2 (sharded gradients)";
  } else if ((name == "weights" || name == "optimizer state" || name == "gradients") && replicas &&
             c.zero < 3) {
    hint = "try --zero 3 (FSDP shards parameters too)";
  } else if (name == "activations" && c.recompute != Recompute::kFull) {
    hint = "try --recompute full or smaller --microbatch-sizes";
  } else if (name == "activations") {
    hint = "try smaller --microbatch-sizes or more pipeline stages";
  } else if (name != "workspace and buffers") {
    hint = replicas ? "more GPUs split it further" : "more pipeline stages split it";
  }
  return fmt::format("largest part: {} {:.1f} GiB{}{}", top->name, ToGiB(top->bytes),
                     hint.empty() ? "" : " — ", hint);
}

struct PartitionMemo::Impl {
  struct Entry {
    Entry(const Model& model, const Candidate& c, const MemoryConfig& memory)
        : table(model, c.CostOptions()), cache(model, table, c, memory) {}
    StageCostTable table;
    FixedCache cache;
  };
  using Key = std::tuple<int, Recompute, int, bool, int, int>;
  std::tuple<int, bool, int> scope{-1, false, -1};  // (t, sp, d) of the entries
  std::map<Key, std::unique_ptr<Entry>> entries;

  Entry& Get(const Model& model, const Candidate& c, const MemoryConfig& memory) {
    const std::tuple<int, bool, int> now(c.tensor_parallel, c.sequence_parallel, c.data_parallel);
    if (now != scope) {  // the enumeration moves on: keep memory bounded
      entries.clear();
      scope = now;
    }
    const Key key(c.microbatch_size, c.recompute, c.tensor_parallel, c.sequence_parallel,
                  c.data_parallel, c.zero);
    std::unique_ptr<Entry>& e = entries[key];
    if (!e) e = std::make_unique<Entry>(model, c, memory);
    return *e;
  }
};

PartitionMemo::PartitionMemo() : impl(std::make_unique<Impl>()) {}
PartitionMemo::~PartitionMemo() = default;

bool PartitionForMemory(const Model& model, const MemoryConfig& memory, Bytes capacity,
                        Candidate* c, Rejection* rejection, PartitionMemo* memo) {
  std::optional<PartitionMemo::Impl::Entry> own;
  PartitionMemo::Impl::Entry& entry =
      memo != nullptr ? memo->impl->Get(model, *c, memory) : own.emplace(model, *c, memory);
  const StageCostTable& t = entry.table;
  const int n = t.NumLayers();
  const int p = c->pipeline_stages;
  auto time = [&](int, int first, int last) { return t.TrainingTimeNs(StageLayers{first, last}); };
  if (c->chunks > 1) {
    // A rank's memory sums v separate chunks, which a split over contiguous
    // ranges cannot bound stage by stage: balance the p·v chunks on time and
    // let the simulate pass check the exact peak.
    c->partition = MinMaxSplit(n, c->VirtualStages(), time, [](int, int, int) { return true; });
    return true;
  }
  auto mem = [&](int stage, int first, int last) {
    return entry.cache.Parts(*c, stage, first, last).Total();
  };
  auto fits = [&](int stage, int first, int last) {
    return capacity <= 0 || mem(stage, first, last) <= capacity;
  };
  c->partition = MinMaxSplit(n, p, time, fits);
  if (!c->partition.empty()) return true;
  // Nothing fits: find the split that needs the least memory, for the
  // closest miss, and name its fullest stage.
  std::vector<StageLayers> lean = MinMaxSplit(n, p, mem, [](int, int, int) { return true; });
  int worst = 0;
  Bytes worst_bytes = 0;
  for (int s = 0; s < p; ++s) {
    Bytes b = mem(s, lean[s].first_layer, lean[s].last_layer);
    if (b > worst_bytes) {
      worst_bytes = b;
      worst = s;
    }
  }
  Candidate copy = *c;
  copy.partition = lean;
  const MemoryParts parts =
      StageParts(model, t, *c, memory, worst, lean[worst].first_layer, lean[worst].last_layer);
  *rejection = Rejection{
      RejectReason::kOutOfMemory, copy,
      fmt::format("stage {} (layers {}-{}) needs {:.2f} GiB of the {:.2f} GiB limit even in the "
                  "split that needs least memory; {}",
                  worst, lean[worst].first_layer, lean[worst].last_layer, ToGiB(worst_bytes),
                  ToGiB(capacity), BindingPart(parts, *c)),
      static_cast<double>(worst_bytes) / static_cast<double>(capacity)};
  return false;
}

}  // namespace pipecast::passes
