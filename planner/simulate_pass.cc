// Pass 4, simulate: the simulator on every candidate that survived, best
// lower bound first, until no remaining candidate can enter the top K.
#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "planner/passes.h"

namespace pipecast::passes {

namespace {

// Candidates simulated between two pruning decisions. Fixed, not tied to
// the thread count, so the set simulated is the same on every machine.
constexpr size_t kChunk = 16;

void SimulateChunk(const Model& model, const Cluster& cluster, const PlannerOptions& options,
                   std::vector<Candidate>& cands, size_t begin, size_t end,
                   std::vector<Status>& errors) {
  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, std::min<int>(threads, static_cast<int>(end - begin)));
  auto work = [&](int t) {
    for (size_t i = begin + t; i < end; i += threads) {
      Candidate& c = cands[i];
      auto r = SimulateCandidate(model, cluster, c, /*record_timeline=*/false);
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
                 std::vector<Candidate>* candidates, std::vector<Rejection>* rejected) {
  std::vector<Candidate>& cands = *candidates;
  std::vector<Status> errors(cands.size());
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
    SimulateChunk(model, cluster, options, cands, i, end, errors);
    for (size_t j = i; j < end; ++j) {
      Candidate& c = cands[j];
      if (!errors[j].ok()) {
        rejected->push_back(Rejection{RejectReason::kSimulationError, c, errors[j].message(), 0});
        continue;
      }
      const Bytes peak = c.PeakMemory();
      if (capacity > 0 && peak > capacity) {
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
        rejected->push_back(Rejection{
            RejectReason::kOutOfMemory, c,
            fmt::format("stage {} needs {:.2f} GiB of the {:.2f} GiB limit (simulated peak); {}",
                        worst->rank, ToGiB(peak), ToGiB(capacity), BindingPart(parts, c)),
            static_cast<double>(peak) / static_cast<double>(capacity)});
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

}  // namespace pipecast::passes
