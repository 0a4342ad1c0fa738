// Pass 4, simulate: the simulator on every candidate that survived, best
// lower bound first, until no remaining candidate can enter the top K.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "planner/passes.h"
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

namespace {

// Candidates simulated between two pruning decisions. Fixed, not tied to
// the thread count, so the set simulated is the same on every machine.
constexpr size_t kChunk = 16;

// Simulates cands[begin, end) on the options' threads. The calling thread
// (the search's) reports progress after each candidate it finishes, counting
// every thread's, so a chunk of large simulations does not go silent.
void SimulateChunk(const Model& model, const Cluster& cluster, const PlannerOptions& options,
                   std::vector<Candidate>& cands, size_t begin, size_t end,
                   std::vector<Status>& errors) {
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
      auto r = SimulateCandidate(model, cluster, c, /*record_timeline=*/false);
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
