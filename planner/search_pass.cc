// Passes 2-4 together, in lower-bound order: partition, prune and simulate each candidate only
// when its bound reaches the front of the search (docs/planner.md, "Bounds before
// partitioning"). RunPlanner's search; Prune() and SimulateAll() remain the passes one by one.
#include <fmt/format.h>

#include <algorithm>
#include <queue>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "planner/passes.h"
#include "sim/memory.h"

namespace pipecast::passes {

namespace {

// Candidates simulated between two pruning decisions, as SimulateAll: fixed, not tied to the
// thread count, so the set simulated is the same on every machine.
constexpr size_t kChunk = 16;

// Candidates partitioned ahead at once on the options' threads: the front's next ones, whose
// partitions the search takes when it reaches them.
constexpr size_t kAhead = 64;

// One entry of the search's front: a candidate's bound, whether it has its partition (and so
// its partitioned bound), and its place in the enumeration, which breaks ties.
struct Entry {
  TimeNs bound = 0;
  bool partitioned = false;
  size_t index = 0;
  bool operator>(const Entry& o) const {
    return std::tie(bound, partitioned, index) > std::tie(o.bound, o.partitioned, o.index);
  }
};
using Front = std::priority_queue<Entry, std::vector<Entry>, std::greater<>>;

// The out-of-memory rejection of a candidate whose weights, gradients and optimizer state
// cannot fit in any split (StaticMemoryFloor), before it is partitioned.
Rejection StaticMemoryRejection(const StageCost& all, Candidate c, Bytes floor, Bytes capacity) {
  const int p = std::max(1, c.config.layout.pipeline_stages);
  MemoryParts parts;  // the whole model's shares, averaged over the ranks, for BindingPart
  const MemoryConfig memory = c.config.PerGpuMemory();
  const ShardedBytes per_param = ShardedBytesPerParam(memory, c.config.layout.GradientReplicas());
  const ParameterMemory m =
      ParameterMemoryOf(all.parameters, all.expert_parameters, per_param,
                        ExpertBytesPerParam(per_param, memory, c.config.layout.tensor_parallel,
                                            c.config.layout.ExpertShards()));
  parts.weights = m.weights / p;
  parts.gradients = m.gradients / p;
  parts.optimizer = m.optimizer / p;
  std::string detail = fmt::format(
      "its weights, gradients and optimizer state alone need at least {:.2f} GiB "
      "of the {:.2f} GiB limit on its fullest rank, in any split (found before "
      "partitioning); {}",
      ToGiB(floor), ToGiB(capacity), BindingPart(parts, c));
  return Rejection{RejectReason::kOutOfMemory, std::move(c), std::move(detail),
                   static_cast<double>(floor) / static_cast<double>(capacity)};
}

// The search's state: the candidates, their front, the simulated iteration times of those that
// fit (sorted), and the chunk of partitioned candidates waiting for the simulator.
class BoundOrderSearch {
 public:
  BoundOrderSearch(const Model& model, const Cluster& cluster, const PlannerOptions& options,
                   std::vector<Candidate> candidates, PartitionCache* cache,
                   std::vector<Rejection>* rejected)
      : model_(model),
        cluster_(cluster),
        options_(options),
        cands_(std::move(candidates)),
        cache_(cache),
        rejected_(rejected),
        keep_(static_cast<size_t>(options.top_k) + 1),
        capacity_(MemoryLimitBytes(cluster.gpu)) {
    // The simulator's progress lines would interleave with the search's.
    quiet_ = options;
    quiet_.progress = nullptr;
    threads_ = options.threads > 0 ? options.threads
                                   : static_cast<int>(std::thread::hardware_concurrency());
    threads_ = std::max(1, threads_);
  }

  SearchOutcome Run() {
    BoundAll();
    while (!front_.empty()) {
      if (Beyond(front_.top().bound)) {
        SimulateChunk();  // what was queued reached the front before the threshold fell
        if (Beyond(front_.top().bound)) break;
        continue;
      }
      const Entry e = front_.top();
      front_.pop();
      if (e.partitioned) {
        chunk_.push_back(e.index);
        if (chunk_.size() == kChunk) SimulateChunk();
      } else {
        if (threads_ > 1 && ahead_.find(e.index) == ahead_.end()) PartitionAhead(e);
        Partition(e);
      }
    }
    SimulateChunk();
    PruneRest();
    Progress(SearchProgress::Pass::kPartition, static_cast<int>(cands_.size()), skipped_);
    Progress(SearchProgress::Pass::kSimulate, partitioned_fits_, partitioned_fits_ - simulated_);
    return SearchOutcome{std::move(fitting_), simulated_};
  }

 private:
  // True when a bound cannot reach the top: top_k + 1 fitting candidates are known and the
  // bound exceeds the last of them.
  bool Beyond(TimeNs bound) const { return best_.size() >= keep_ && bound > best_[keep_ - 1]; }

  // Every candidate's bound before partitioning, and the rejection of those whose static memory
  // cannot fit.
  void BoundAll() {
    cache_->MakeTables(cands_, threads_);
    std::vector<Entry> entries;
    entries.reserve(cands_.size());
    for (size_t i = 0; i < cands_.size(); ++i) {
      Candidate& c = cands_[i];
      const StageCostTable& table = cache_->Table(c);
      const StageCost& whole = cache_->Whole(c);
      if (capacity_ > 0) {
        if (const Bytes floor = StaticMemoryFloor(table, c, &whole); floor > capacity_) {
          rejected_->push_back(StaticMemoryRejection(whole, std::move(c), floor, capacity_));
          ++settled_;
          continue;
        }
      }
      c.lower_bound_ns = UnpartitionedLowerBound(table, c, &whole);
      entries.push_back(Entry{c.lower_bound_ns, false, i});
    }
    front_ = Front(std::greater<>(), std::move(entries));
  }

  // Partitions `e` and the front's next unpartitioned candidates that can still reach the top,
  // up to kAhead, on the threads, for Partition() to take as it reaches each: the order the
  // search takes them in, and so everything it does, is that of partitioning one at a time
  // (a partition reads only its candidate and the cache's table and split, looked up here).
  // The front's entries are put back as they were; at most kAhead - 1 partitions are made for
  // candidates the search then prunes unpartitioned.
  void PartitionAhead(const Entry& e) {
    std::vector<Entry> popped;
    std::vector<size_t> batch{e.index};
    while (batch.size() < kAhead && !front_.empty() && !Beyond(front_.top().bound)) {
      const Entry next = front_.top();
      front_.pop();
      popped.push_back(next);
      if (!next.partitioned && ahead_.find(next.index) == ahead_.end()) {
        batch.push_back(next.index);
      }
    }
    for (const Entry& p : popped) front_.push(p);
    struct Lent {
      const StageCostTable* table;
      const std::vector<StageLayers>* time_balanced;
    };
    std::vector<Lent> lent;
    lent.reserve(batch.size());
    for (size_t i : batch) {
      const Candidate& c = cands_[i];
      lent.push_back(Lent{&cache_->Table(c), c.config.partition.rule != PartitionRule::kEven
                                                 ? &cache_->TimeBalanced(c, c.ModelStages())
                                                 : nullptr});
    }
    std::vector<Ahead> made(batch.size());
    const int threads = std::min<int>(threads_, static_cast<int>(batch.size()));
    auto work = [&](int t) {
      for (size_t j = t; j < batch.size(); j += threads) {
        made[j].fits = PartitionWith(model_, *lent[j].table, lent[j].time_balanced, capacity_,
                                     &cands_[batch[j]], &made[j].why);
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
    work(0);
    for (std::thread& th : pool) th.join();
    for (size_t j = 0; j < batch.size(); ++j) ahead_.emplace(batch[j], std::move(made[j]));
  }

  void Partition(const Entry& e) {
    Candidate& c = cands_[e.index];
    Rejection why;
    ++settled_;
    Progress(SearchProgress::Pass::kPartition, settled_, 0);
    bool fits = false;
    if (auto it = ahead_.find(e.index); it != ahead_.end()) {
      fits = it->second.fits;
      why = std::move(it->second.why);
      ahead_.erase(it);
    } else {
      fits = PartitionForMemory(model_, cluster_, capacity_, &c, &why, cache_);
    }
    if (!fits) {
      rejected_->push_back(std::move(why));
      return;
    }
    ++partitioned_fits_;
    c.lower_bound_ns = std::max(e.bound, LowerBound(cache_->Table(c), c, cache_));
    front_.push(Entry{c.lower_bound_ns, true, e.index});
  }

  void SimulateChunk() {
    if (chunk_.empty()) return;
    std::vector<Candidate> batch;
    batch.reserve(chunk_.size());
    for (size_t i : chunk_) batch.push_back(std::move(cands_[i]));
    chunk_.clear();
    std::vector<Rejection> refused;
    const size_t before = batch.size();
    SimulateAll(model_, cluster_, quiet_, &batch, &refused, cache_);
    simulated_ += static_cast<int>(before);
    for (Rejection& r : refused) rejected_->push_back(std::move(r));
    for (Candidate& c : batch) {
      best_.insert(std::upper_bound(best_.begin(), best_.end(), c.result->iteration_ns),
                   c.result->iteration_ns);
      fitting_.push_back(std::move(c));
    }
  }

  // What is left on the front cannot enter the top: pruned, with or without a partition.
  void PruneRest() {
    while (!front_.empty()) {
      const Entry e = front_.top();
      front_.pop();
      Candidate& c = cands_[e.index];
      // Partitioned ahead but pruned before the search reached it: as never partitioned.
      if (!e.partitioned && ahead_.erase(e.index) > 0) c.partition.clear();
      skipped_ += e.partitioned ? 0 : 1;
      // Its detail is made when read (Rejection::Detail): most are only counted.
      rejected_->push_back(Rejection::PrunedBelow(
          std::move(c),
          Rejection::Pruned{best_[keep_ - 1], static_cast<int>(keep_), e.partitioned}));
    }
  }

  void Progress(SearchProgress::Pass pass, int done, int pruned) const {
    if (!options_.progress) return;
    const int total = pass == SearchProgress::Pass::kPartition ? static_cast<int>(cands_.size())
                                                               : partitioned_fits_;
    options_.progress(SearchProgress{pass, done, total, pruned});
  }

  const Model& model_;
  const Cluster& cluster_;
  const PlannerOptions& options_;
  PlannerOptions quiet_;
  std::vector<Candidate> cands_;
  PartitionCache* cache_;
  std::vector<Rejection>* rejected_;
  const size_t keep_;
  const Bytes capacity_;
  int threads_ = 1;
  // Partitions made ahead (PartitionAhead), by candidate, until the search reaches them.
  struct Ahead {
    bool fits = false;
    Rejection why;
  };
  std::unordered_map<size_t, Ahead> ahead_;
  Front front_;
  std::vector<size_t> chunk_;
  std::vector<TimeNs> best_;
  std::vector<Candidate> fitting_;
  int settled_ = 0;           // rejected for static memory or partitioned
  int skipped_ = 0;           // pruned before partitioning
  int partitioned_fits_ = 0;  // partitioned and fitting
  int simulated_ = 0;
};

}  // namespace

SearchOutcome SearchInBoundOrder(const Model& model, const Cluster& cluster,
                                 const PlannerOptions& options, std::vector<Candidate> candidates,
                                 PartitionCache* cache, std::vector<Rejection>* rejected) {
  return BoundOrderSearch(model, cluster, options, std::move(candidates), cache, rejected).Run();
}

}  // namespace pipecast::passes
