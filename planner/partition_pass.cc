// Pass 2, partition: split the layers into p stages balanced on time, with
// every stage's estimated peak memory under the GPU's capacity. The split
// and the estimate are the simulation core's (sim/memory_partition.h), which
// the simulator's default partition uses too: stage s holds
// InflightMicrobatches() micro-batches of activations, so under 1F1B stage 0
// may take fewer layers than the last.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "planner/passes.h"
#include "sim/memory.h"
#include "sim/schedule_traits.h"
#include "sim/stage_costs.h"

namespace pipecast::passes {

int InflightMicrobatches(ScheduleKind schedule, int stage, int p, int m) {
  return TraitsOf(schedule).inflight_microbatches(stage, p, m);
}

namespace {

PartitionCache::Key KeyOf(const Candidate& c) {
  const TrainingConfig& config = c.config;
  return PartitionCache::Key{config.microbatch_size,          config.recompute,
                             config.recompute_layers,         config.layout.tensor_parallel,
                             config.layout.sequence_parallel, config.overlap.tp_comm_overlap,
                             config.layout.context_parallel,  config.layout.cp_algorithm,
                             config.layout.expert_parallel,   config.layout.expert_tensor_parallel,
                             config.layout.expert_dispatcher};
}

}  // namespace

const StageCostTable& PartitionCache::Table(const Candidate& c) {
  std::unique_ptr<StageCostTable>& t = tables_[KeyOf(c)];
  if (!t) t = std::make_unique<StageCostTable>(model_, StageCostOptionsFor(c.config, cluster_));
  return *t;
}

void PartitionCache::MakeTables(const std::vector<Candidate>& candidates, int threads) {
  std::vector<std::pair<Key, const Candidate*>> missing;
  {
    std::map<Key, const Candidate*> first;
    for (const Candidate& c : candidates) {
      const Key key = KeyOf(c);
      if (tables_.find(key) == tables_.end()) first.try_emplace(key, &c);
    }
    missing.assign(first.begin(), first.end());
  }
  std::vector<std::unique_ptr<StageCostTable>> made(missing.size());
  threads = std::max(1, std::min<int>(threads, static_cast<int>(missing.size())));
  auto work = [&](int t) {
    for (size_t i = t; i < missing.size(); i += threads) {
      made[i] = std::make_unique<StageCostTable>(
          model_, StageCostOptionsFor(missing[i].second->config, cluster_));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
  for (size_t i = 0; i < missing.size(); ++i) tables_[missing[i].first] = std::move(made[i]);
}

const std::vector<StageLayers>& PartitionCache::TimeBalanced(const Candidate& c, int stages) {
  auto [it, added] = splits_.try_emplace({KeyOf(c), stages});
  if (added) it->second = TimeBalancedSplit(Table(c), stages);
  return it->second;
}

const StageCost& PartitionCache::Whole(const Candidate& c) {
  auto [it, added] = whole_.try_emplace(KeyOf(c));
  if (added) {
    const StageCostTable& t = Table(c);
    if (t.NumLayers() > 0) it->second = t.Stage(StageLayers{0, t.NumLayers() - 1});
  }
  return it->second;
}

const std::vector<std::vector<RankOpCount>>& PartitionCache::RankOps(const Candidate& c) {
  const TrainingConfig& config = c.config;
  auto [it, added] = rank_ops_.try_emplace(
      std::make_tuple(config.schedule, config.layout.pipeline_stages, config.microbatches,
                      config.layout.chunks, config.CombinesForwardBackward()));
  if (added) it->second = CountRankOps(c);
  return it->second;
}

PairHalvesNs PartitionCache::PairHalves(const StageCostTable& table, const StageCost& f,
                                        StageLayers f_layers, const StageCost& b,
                                        StageLayers b_layers, OpKind b_kind,
                                        const PairOverlap& overlap) {
  auto [it, added] = pair_halves_.try_emplace(std::make_tuple(
      &table, f_layers.first_layer, f_layers.last_layer, b_layers.first_layer, b_layers.last_layer,
      b_kind, overlap.factor, overlap.expert_comm, overlap.combined_1f1b));
  if (added) it->second = OverlappedPairNs(f, b, b_kind, overlap);
  return it->second;
}

Bytes EstimateStageMemory(const Model& model, const Cluster& cluster, const Candidate& c, int stage,
                          int first, int last) {
  const StageCostTable t(model, StageCostOptionsFor(c.config, cluster));
  return EstimateStageMemoryParts(t, ShapeOf(c.config), c.config.PerGpuMemory(), stage,
                                  StageLayers{first, last})
      .Total();
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
  const bool replicas = c.config.layout.GradientReplicas() > 1;
  const int zero = c.config.memory.zero;
  const std::string name = top->name;
  if (name == "optimizer state" && replicas && zero < 1) {
    hint = "try --zero 1 (Megatron's distributed optimizer keeps 1/d of it)";
  } else if (name == "gradients" && replicas && zero < 2) {
    hint = "try --zero 2 (sharded gradients)";
  } else if ((name == "weights" || name == "optimizer state" || name == "gradients") && replicas &&
             zero < 3) {
    hint = "try --zero 3 (FSDP shards parameters too)";
  } else if (name == "activations" && c.config.recompute != Recompute::kFull) {
    hint = "try --recompute full or smaller --microbatch-sizes";
  } else if (name == "activations") {
    hint = "try smaller --microbatch-sizes or more pipeline stages";
  } else if (name != "workspace and buffers") {
    hint = replicas ? "more GPUs split it further" : "more pipeline stages split it";
  }
  return fmt::format("largest part: {} {:.1f} GiB{}{}", top->name, ToGiB(top->bytes),
                     hint.empty() ? "" : " — ", hint);
}

Bytes StaticMemoryFloor(const StageCostTable& table, const Candidate& c, const StageCost* whole) {
  if (table.NumLayers() == 0) return 0;
  // Read in place: a copy of the whole model's StageCost copies its pair layers (a heap block
  // per candidate, 123,726 of them for DeepSeek-V3 on 2048 GPUs).
  StageCost own;
  if (whole == nullptr) own = table.StageBytes(StageLayers{0, table.NumLayers() - 1});
  const StageCost& all = whole != nullptr ? *whole : own;
  const TrainingConfig& config = c.config;
  const MemoryConfig memory = config.PerGpuMemory();
  const ShardedBytes per_param = ShardedBytesPerParam(memory, config.layout.GradientReplicas());
  const ShardedBytes per_expert_param = ExpertBytesPerParam(
      per_param, memory, config.layout.tensor_parallel, config.layout.ExpertShards());
  const ParameterMemory m =
      ParameterMemoryOf(all.parameters, all.expert_parameters, per_param, per_expert_param);
  const bool two_copies = TraitsOf(config.schedule).bidirectional;
  const int p = std::max(1, config.layout.pipeline_stages);
  const int64_t stages = int64_t{p} * std::max(1, config.layout.chunks) * (two_copies ? 2 : 1);
  // Each stage rounds its six parts (three, for dense and expert parameters) to the byte, as
  // the whole does: at most 3 bytes each way per rounding set.
  const Bytes sum =
      (two_copies ? 2 : 1) * (m.weights + m.gradients + m.optimizer) - 3 * (stages + 1);
  return std::max<Bytes>(0, sum / p);
}

bool PartitionForMemory(const Model& model, const Cluster& cluster, Bytes capacity, Candidate* c,
                        Rejection* rejection, PartitionCache* cache) {
  if (cache != nullptr) {
    const std::vector<StageLayers>* time_balanced = c->config.partition.rule != PartitionRule::kEven
                                                        ? &cache->TimeBalanced(*c, c->ModelStages())
                                                        : nullptr;
    return PartitionWith(model, cache->Table(*c), time_balanced, capacity, c, rejection);
  }
  const StageCostTable own(model, StageCostOptionsFor(c->config, cluster));
  return PartitionWith(model, own, nullptr, capacity, c, rejection);
}

bool PartitionWith(const Model& model, const StageCostTable& table,
                   const std::vector<StageLayers>* time_balanced, Bytes capacity, Candidate* c,
                   Rejection* rejection) {
  const StageCostTable* t = &table;
  const PipelineShape shape = ShapeOf(c->config);
  std::vector<int> stage_rank;
  if (c->config.partition.rule == PartitionRule::kEven) {
    stage_rank =
        ScheduleShape(shape.schedule, shape.stages, shape.microbatches, shape.chunks).stage_rank;
  }
  Result<MemoryAwareSplit> made =
      PartitionFor(*t, EndsOf(model), shape, stage_rank, c->config, capacity, time_balanced);
  if (!made.ok()) {
    c->partition.clear();
    *rejection = Rejection{RejectReason::kScheduleConstraint, *c, made.status().message(), 0};
    return false;
  }
  MemoryAwareSplit& split = *made;
  if (split.fits) {
    c->partition = std::move(split.partition);
    return true;
  }
  // Nothing fits: the split that needs the least memory is the closest miss
  // (for the even split, the split itself); name its fullest stage.
  c->partition.clear();
  const int worst = split.worst_stage;
  const StageLayers lean = split.partition[worst];
  const Bytes worst_bytes = split.worst_parts.Total();
  Candidate copy = *c;
  copy.partition = std::move(split.partition);
  *rejection = Rejection{
      RejectReason::kOutOfMemory, copy,
      fmt::format("stage {} (layers {}-{}) needs {:.2f} GiB of the {:.2f} GiB limit {}; {}", worst,
                  lean.first_layer, lean.last_layer, ToGiB(worst_bytes), ToGiB(capacity),
                  c->config.partition.rule == PartitionRule::kEven
                      ? "in Megatron-LM's even split"
                      : "even in the split that needs least memory",
                  BindingPart(split.worst_parts, *c)),
      static_cast<double>(worst_bytes) / static_cast<double>(capacity)};
  return false;
}

}  // namespace pipecast::passes
