// Pass 4, simulate: the simulator on every candidate that survived, best
// lower bound first, until no remaining candidate can enter the top K.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "planner/explain.h"
#include "planner/passes.h"
#include "sim/gathered_bytes.h"
#include "sim/schedule_traits.h"

namespace pipecast::passes {

int64_t SimulationEvents(const Candidate& c) {
  const ScheduleTraits& traits = TraitsOf(c.config.schedule);
  const int64_t stages = traits.bidirectional ? c.config.layout.pipeline_stages : c.VirtualStages();
  const int64_t m = int64_t{c.config.microbatches} *
                    (c.config.schedule == ScheduleKind::kPipeDream ? kPipeDreamIterations : 1);
  const int64_t kinds = traits.splits_backward ? 3 : 2;
  return stages * m * kinds + 2 * std::max<int64_t>(stages - 1, 0) * m;
}

MemoryFloor SimulatedMemoryFloor(const Model& model, const Cluster& cluster, const Candidate& c,
                                 const Schedule& schedule, const StageCostTable* cached) {
  const TrainingConfig& config = c.config;
  // As Simulate() makes them: the table with the schedule's split backward (which changes its
  // notes only: `cached` serves), the partition per virtual stage (a bidirectional schedule's
  // stage p+k is model stage k again), the memory one GPU's share.
  std::optional<StageCostTable> own;
  if (cached == nullptr) {
    StageCostOptions cost_options = StageCostOptionsFor(config, cluster);
    cost_options.split_backward = schedule.split_backward;
    own.emplace(model, cost_options);
  }
  const StageCostTable& table = cached != nullptr ? *cached : *own;
  std::vector<StageLayers> partition = c.partition;
  if (static_cast<int>(partition.size()) == schedule.NumModelStages()) {
    for (int s = schedule.NumModelStages(); s < schedule.num_stages; ++s) {
      partition.push_back(partition[schedule.ModelStage(s)]);
    }
  }
  MemoryFloor floor;
  if (static_cast<int>(partition.size()) != schedule.num_stages) return floor;
  const std::vector<StageCost> costs = table.Stages(partition);
  const MemoryConfig memory = config.PerGpuMemory();
  const ShardedBytes per_param = ShardedBytesPerParam(memory, config.layout.GradientReplicas());
  const ShardedBytes per_expert = ExpertBytesPerParam(
      per_param, memory, config.layout.tensor_parallel, config.layout.ExpertShards());
  const int p = schedule.num_ranks;
  std::vector<MemoryParts> parts(p);
  // ZeRO-3's gathered parameters (ApplyPerOpCollectives, sim/internal/data_parallel.cc): the
  // largest layer twice (the running one and the prefetched one) and, without resharding
  // after the forward, every stage's whole gathered parameters on its rank.
  const bool gathers = memory.zero >= 3 && config.layout.GradientReplicas() > 1;
  std::vector<Bytes> gathered(p, 0), held(p, 0);
  for (int s = 0; s < schedule.num_stages; ++s) {
    const int k = schedule.stage_rank[s];
    const ParameterMemory m =
        ParameterMemoryOf(costs[s].parameters, costs[s].expert_parameters, per_param, per_expert);
    parts[k].weights += m.weights;
    parts[k].gradients += m.gradients;
    parts[k].optimizer += m.optimizer;
    if (!gathers) continue;
    const StageGathered g =
        StageGatheredOf(model, partition[s], costs[s], memory, ExpertReductionScale(config.layout));
    gathered[k] = std::max(gathered[k], 2 * g.largest_layer);
    if (!memory.sharding.reshard_after_forward) {
      held[k] += g.whole;
      gathered[k] = std::max(gathered[k], held[k]);
    }
  }
  for (int k = 0; k < p; ++k) {
    MemoryParts& part = parts[k];
    part.weights += gathered[k];
    // --sharded-state fsdp2: the gradients are made at the rank's first backward's end (as the
    // engine's sweep adds them), so they join the level from there on, not the static part.
    Bytes grads_pending = 0;
    if (memory.Fsdp2()) std::swap(grads_pending, part.gradients);
    // The ops' activations and workspace in the rank's list order, at each op's start, and
    // (fsdp2) the level just after the first backward's end, when the gradients are made.
    Bytes act = 0, grads = 0, top_act = 0, top_ws = 0, top_grads = 0;
    for (const Action& a : schedule.actions[k]) {
      const StageCost& cost = costs[a.stage];
      act += cost.ActivationsAtStart(a.kind);
      if (act + grads + cost.workspace_bytes > top_act + top_grads + top_ws) {
        top_act = act;
        top_ws = cost.workspace_bytes;
        top_grads = grads;
      }
      act -= cost.ActivationsFreedAtEnd(a.kind);
      if (grads_pending > 0 && (a.kind == OpKind::kBackward || a.kind == OpKind::kBackwardWeight)) {
        grads = grads_pending;
        grads_pending = 0;
        if (act + grads > top_act + top_grads + top_ws) {
          top_act = act;
          top_ws = 0;
          top_grads = grads;
        }
      }
    }
    part.activations = top_act;
    part.other = top_ws;
    if (memory.Fsdp2()) part.gradients = top_grads;
    if (k == 0 || part.Total() > floor.bytes) {
      floor.bytes = part.Total();
      floor.rank = k;
      floor.parts = part;
    }
  }
  return floor;
}

Rejection SimulatedOutOfMemory(Candidate c, Bytes capacity) {
  const Bytes peak = c.PeakMemory();
  const StageResult* worst = &c.result->per_rank[0];
  for (const StageResult& s : c.result->per_rank) {
    if (s.peak_memory_bytes == peak) {
      worst = &s;
      break;
    }
  }
  const MemoryBreakdown& m = worst->memory;
  MemoryParts parts;
  parts.weights = m.weights + m.stashed_weights + m.gathered_weights;
  parts.gradients = m.gradients;
  parts.optimizer = m.optimizer;
  parts.activations = m.activations_peak;
  parts.other = m.workspace_peak + m.comm_buffers_peak;
  std::string detail =
      fmt::format("stage {} needs {:.2f} GiB of the {:.2f} GiB limit (simulated peak); {}",
                  worst->rank, ToGiB(peak), ToGiB(capacity), BindingPart(parts, c));
  return Rejection{RejectReason::kOutOfMemory, std::move(c), std::move(detail),
                   static_cast<double>(peak) / static_cast<double>(capacity)};
}

namespace {

// The out-of-memory rejection of a candidate whose memory floor is over `capacity`, unsimulated:
// its words and ratio are the floor's (at most the simulated ones), made exact by
// SettleShownMemoryFloors() where the report shows them.
Rejection FloorOutOfMemory(Candidate c, const MemoryFloor& floor, Bytes capacity) {
  std::string detail = fmt::format(
      "stage {} needs at least {:.2f} GiB of the {:.2f} GiB limit (a floor on its simulated "
      "peak, not simulated); {}",
      floor.rank, ToGiB(floor.bytes), ToGiB(capacity), BindingPart(floor.parts, c));
  const double ratio = static_cast<double>(floor.bytes) / static_cast<double>(capacity);
  Rejection r(RejectReason::kOutOfMemory, std::move(c), std::move(detail), ratio);
  r.memory_floor = true;
  return r;
}

// Candidates simulated between two pruning decisions. Fixed, not tied to
// the thread count, so the set simulated is the same on every machine.
constexpr size_t kChunk = 16;

// Simulates cands[begin, end) on the options' threads. The calling thread
// (the search's) reports progress after each candidate it finishes, counting
// every thread's, so a chunk of large simulations does not go silent.
void SimulateChunk(const Model& model, const Cluster& cluster, const PlannerOptions& options,
                   std::vector<Candidate>& cands, size_t begin, size_t end,
                   std::vector<Status>& errors, std::vector<MemoryFloor>& floors,
                   const std::vector<const StageCostTable*>& tables) {
  const Bytes capacity = MemoryLimitBytes(cluster.gpu);
  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, std::min<int>(threads, static_cast<int>(end - begin)));
  std::atomic<int> done{0};
  auto work = [&](int t) {
    for (size_t i = begin + t; i < end; i += threads) {
      Candidate& c = cands[i];
      if (const int64_t events = SimulationEvents(c); events > kMaxSearchEvents) {
        errors[i] = Status::FailedPrecondition(fmt::format(
            "about {} ops and transfers to simulate, over the search's limit of {} (2^23: about "
            "0.5 GB and a second or two each): simulate it alone with the simulator, or pin "
            "fewer micro-batches or stages",
            events, kMaxSearchEvents));
        ++done;
        continue;
      }
      // SimulateCandidate(), with the memory floor between its two steps: a candidate whose
      // floor is over the limit would fail the simulated check, and is not simulated.
      Result<SimResult> r = Status::Ok();
      Result<CandidateSetup> setup = SetUpCandidate(model, cluster, c, /*record_timeline=*/false);
      if (!setup.ok()) {
        r = setup.status();
      } else if (MemoryFloor floor =
                     SimulatedMemoryFloor(model, cluster, c, setup->schedule, tables[i]);
                 capacity > 0 && floor.bytes > capacity) {
        floors[i] = std::move(floor);
        ++done;
        continue;
      } else {
        r = Simulate(model, cluster, setup->schedule, setup->options);
      }
      ++done;
      if (t == 0 && options.progress) {
        options.progress(SearchProgress{SearchProgress::Pass::kSimulate,
                                        static_cast<int>(begin) + done.load(),
                                        static_cast<int>(cands.size())});
      }
      if (r.ok()) {
        c.result = std::move(r.value());
      } else {
        errors[i] = r.status();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
}

}  // namespace

void SimulateAll(const Model& model, const Cluster& cluster, const PlannerOptions& options,
                 std::vector<Candidate>* candidates, std::vector<Rejection>* rejected,
                 PartitionCache* cache) {
  std::vector<Candidate>& cands = *candidates;
  std::vector<Status> errors(cands.size());
  std::vector<MemoryFloor> floors(cands.size());
  // The cache's tables, looked up here: the threads only read them.
  std::vector<const StageCostTable*> tables(cands.size(), nullptr);
  if (cache != nullptr) {
    for (size_t j = 0; j < cands.size(); ++j) tables[j] = &cache->Table(cands[j]);
  }
  const size_t keep = static_cast<size_t>(options.top_k) + 1;
  std::vector<TimeNs> best;  // iteration times of fitting candidates, sorted
  const Bytes capacity = MemoryLimitBytes(cluster.gpu);
  std::vector<Candidate> fitting;
  size_t i = 0;
  for (; i < cands.size(); i += kChunk) {
    if (best.size() >= keep && cands[i].lower_bound_ns > best[keep - 1]) break;
    const size_t end = std::min(cands.size(), i + kChunk);
    if (options.progress) {
      options.progress(SearchProgress{SearchProgress::Pass::kSimulate, static_cast<int>(i),
                                      static_cast<int>(cands.size())});
    }
    SimulateChunk(model, cluster, options, cands, i, end, errors, floors, tables);
    for (size_t j = i; j < end; ++j) {
      Candidate& c = cands[j];
      if (!errors[j].ok()) {
        rejected->push_back(Rejection{RejectReason::kSimulationError, c, errors[j].message(), 0});
        continue;
      }
      if (floors[j].bytes > 0) {
        rejected->push_back(FloorOutOfMemory(std::move(c), floors[j], capacity));
        continue;
      }
      if (capacity > 0 && c.PeakMemory() > capacity) {
        rejected->push_back(SimulatedOutOfMemory(std::move(c), capacity));
        continue;
      }
      best.insert(std::upper_bound(best.begin(), best.end(), c.result->iteration_ns),
                  c.result->iteration_ns);
      fitting.push_back(std::move(c));
    }
  }
  for (; i < cands.size(); ++i) {
    rejected->push_back(Rejection{
        RejectReason::kPruned, cands[i],
        fmt::format("its lower bound {:.3f} ms exceeds the iteration time {:.3f} ms of the "
                    "top {} already found",
                    NsToUs(cands[i].lower_bound_ns) / 1e3, NsToUs(best[keep - 1]) / 1e3, keep),
        0});
  }
  cands = std::move(fitting);
}

void SettleShownMemoryFloors(const Model& model, const Cluster& cluster,
                             std::vector<Rejection>* rejected) {
  if (std::none_of(rejected->begin(), rejected->end(),
                   [](const Rejection& r) { return r.memory_floor; })) {
    return;
  }
  const Bytes capacity = MemoryLimitBytes(cluster.gpu);
  while (true) {
    // The shown ones as the report picks them; a floor's ratio is at most its simulated one, so
    // a candidate that would be the closest miss simulated is picked here or has a floor
    // below the one picked, and comes up in a later turn.
    std::vector<size_t> unsettled;
    for (const RejectGroup& g : GroupRejections(*rejected)) {
      if (g.reason != RejectReason::kOutOfMemory) continue;
      if (g.closest != nullptr && g.closest->memory_floor) {
        unsettled.push_back(static_cast<size_t>(g.closest - rejected->data()));
      }
      for (const Rejection* r : g.examples) {
        if (r->memory_floor) unsettled.push_back(static_cast<size_t>(r - rejected->data()));
      }
    }
    if (unsettled.empty()) return;
    for (size_t i : unsettled) {
      Rejection& r = (*rejected)[i];
      Result<SimResult> result = SimulateCandidate(model, cluster, r.candidate, false);
      if (!result.ok()) {
        r = Rejection{RejectReason::kSimulationError, std::move(r.candidate),
                      std::string(result.status().message()), 0};
        continue;
      }
      Candidate c = std::move(r.candidate);
      c.result = std::move(result.value());
      r = SimulatedOutOfMemory(std::move(c), capacity);
    }
  }
}

}  // namespace pipecast::passes
