// Scaling benchmarks of the simulator: cost per simulated op as the pipeline
// (p ranks) and the number of micro-batches (m) grow, for every built-in
// schedule, and a check that the cost grows linearly with the number of ops
// (issue 8). Planner wall time and peak memory are measured by scripts/bench.sh
// on the real `planner` binary (docs/benchmarks.md).
//
// Grid: p in {8, 32, 64, 128}, m in {64, 256, 1024, 4096}, every schedule of
// BuiltinScheduleKinds(); combinations a schedule cannot take (looped-bfs
// needs m >= p) are not registered, nor the V family past m = 1024 (its
// generators are superlinear in m). The chunked schedules use v = 2 chunks
// per GPU. The model is synthetic: one layer per virtual stage, one
// profile at micro-batch size 1, backward twice the forward; the cluster is
// the h100-sxm preset, so pipelines past 8 ranks cross nodes and every op
// boundary between ranks is a transfer. The timeline is not recorded
// (record_timeline = false, as in the planner's search).
//
// Counters per benchmark: `ops` (Schedule::NumActions(): compute ops per
// simulated call; PipeDream's covers its 4 simulated iterations),
// `ops_per_s` (simulated compute ops per second of wall time), `ns_per_op`
// (wall) and `cpu_ns_per_op` (this thread's CPU time).
//
// After the runs a summary per schedule compares CPU ns/op at the largest grid
// point that ran with the smallest (CPU time, so that other work on the
// machine does not decide the verdict). With --linear_factor=F (default 4) the
// program exits 1 when any schedule's ratio exceeds F: a simulator whose cost
// per op is constant (linear total cost) stays near 1 plus cache effects, an
// O(n log n) one grows by about log(1M)/log(1k) = 2, and one quadratic in the
// ops grows by about 1000 over this grid. --min_ops_per_s=R (default 0: off)
// also fails the run when a schedule's slowest grid point is under R.
//
//   build/bench/scaling_bench                      (or scripts/bench.sh)
//   build/bench/scaling_bench --benchmark_filter=1f1b --linear_factor=4
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/units.h"
#include "bench/bench_util.h"
#include "formats/formats.h"
#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/schedule_traits.h"
#include "sim/simulator.h"

namespace pipecast {
namespace {

constexpr int kRanks[] = {8, 32, 64, 128};
constexpr int kMicrobatches[] = {64, 256, 1024, 4096};
constexpr int kChunks = 2;  // v for interleaved and looped-bfs
constexpr char kClusterPreset[] = "h100-sxm";

using bench::SyntheticModel;
using bench::ThreadCpuNs;

int ChunksFor(ScheduleKind kind) {
  const int fixed = TraitsOf(kind).fixed_chunks;  // the V family: always 2
  return fixed > 0 ? fixed : (UsesChunks(kind) ? kChunks : 1);
}

// The V family's generators are sail-sg's greedy heuristics, superlinear in m (V-Half: 0.5 s of CPU
// at p = 64, m = 256, 2.1 s at m = 1024): the larger grid points would spend the run, and the
// registration, generating schedules, so those kinds run only up to this many micro-batches.
constexpr int kMaxVMicrobatches = 1024;

void BM_Scaling(benchmark::State& state, ScheduleKind kind, int ranks, int microbatches) {
  const int chunks = ChunksFor(kind);
  const Model model = SyntheticModel(ranks * chunks);
  const Result<Cluster> cluster = ClusterPreset(kClusterPreset);
  const Result<Schedule> schedule = MakeSchedule(kind, ranks, microbatches, chunks);
  if (!cluster.ok() || !schedule.ok()) {
    state.SkipWithError(!cluster.ok() ? cluster.status().message().c_str()
                                      : schedule.status().message().c_str());
    return;
  }
  SimOptions options;
  options.record_timeline = false;
  const int64_t ops = schedule->NumActions();

  const auto start = std::chrono::steady_clock::now();
  const double cpu_start_ns = ThreadCpuNs();
  for (auto _ : state) {
    Result<SimResult> result = Simulate(model, *cluster, *schedule, options);
    if (!result.ok()) {
      state.SkipWithError(result.status().message().c_str());
      return;
    }
    benchmark::DoNotOptimize(result);
  }
  const double wall_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  const double cpu_ns = ThreadCpuNs() - cpu_start_ns;
  const double total_ops = static_cast<double>(state.iterations()) * static_cast<double>(ops);
  state.SetItemsProcessed(static_cast<int64_t>(total_ops));
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["ns_per_op"] = wall_ns / total_ops;
  state.counters["ops_per_s"] = total_ops / (wall_ns * 1e-9);
  state.counters["cpu_ns_per_op"] = cpu_ns / total_ops;
}

// One grid point's result, keyed by schedule.
struct Point {
  int ranks = 0;
  int microbatches = 0;
  double ops = 0;
  double ns_per_op = 0;
  double cpu_ns_per_op = 0;
  double ops_per_s = 0;
};
std::map<std::string, std::vector<Point>>& Points() {
  static std::map<std::string, std::vector<Point>> points;
  return points;
}

// The console table as usual, and each run's counters kept for the summary.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  // Colour only on a terminal.
  CollectingReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_Defaults : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
      // Name: BM_Scaling/<schedule>/p:<p>/m:<m>
      const std::string name = run.benchmark_name();
      Point point;
      char schedule[64] = {0};
      if (std::sscanf(name.c_str(), "BM_Scaling/%63[^/]/p:%d/m:%d", schedule, &point.ranks,
                      &point.microbatches) != 3) {
        continue;
      }
      auto counter = [&run](const char* key) {
        auto it = run.counters.find(key);
        return it == run.counters.end() ? 0.0 : it->second.value;
      };
      point.ops = counter("ops");
      point.ns_per_op = counter("ns_per_op");
      point.ops_per_s = counter("ops_per_s");
      point.cpu_ns_per_op = counter("cpu_ns_per_op");
      Points()[schedule].push_back(point);
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

// Prints the summary; returns false when a check fails.
bool Summarize(double linear_factor, double min_ops_per_s) {
  bool ok = true;
  std::printf(
      "\nscaling summary: ns per simulated compute op, CPU / wall, timeline off; ratio = CPU "
      "ns/op largest / smallest; min ops/s = the slowest grid point, wall time\n"
      "%-12s %28s %28s %8s %12s %s\n",
      "schedule", "smallest: ns/op", "largest: ns/op", "ratio", "min ops/s", "verdict");
  for (const auto& [schedule, points] : Points()) {
    if (points.empty()) continue;
    auto by_ops = [](const Point& a, const Point& b) { return a.ops < b.ops; };
    const Point& small = *std::min_element(points.begin(), points.end(), by_ops);
    const Point& large = *std::max_element(points.begin(), points.end(), by_ops);
    const Point& slowest =
        *std::min_element(points.begin(), points.end(),
                          [](const Point& a, const Point& b) { return a.ops_per_s < b.ops_per_s; });
    const double ratio = small.cpu_ns_per_op > 0 ? large.cpu_ns_per_op / small.cpu_ns_per_op : 0;
    std::string verdict = "linear";
    if (points.size() < 2) {
      verdict = "one point: not checked";
    } else if (ratio > linear_factor) {
      verdict = "NOT LINEAR (ratio > " + std::to_string(linear_factor) + ")";
      ok = false;
    }
    if (min_ops_per_s > 0 && slowest.ops_per_s < min_ops_per_s) {
      verdict += "; under the ops/s target";
      ok = false;
    }
    char small_text[80], large_text[80];
    std::snprintf(small_text, sizeof small_text, "%.0f / %.0f (p%d m%d)", small.cpu_ns_per_op,
                  small.ns_per_op, small.ranks, small.microbatches);
    std::snprintf(large_text, sizeof large_text, "%.0f / %.0f (p%d m%d)", large.cpu_ns_per_op,
                  large.ns_per_op, large.ranks, large.microbatches);
    std::printf("%-12s %28s %28s %8.2f %12.3g %s\n", schedule.c_str(), small_text, large_text,
                ratio, slowest.ops_per_s, verdict.c_str());
  }
  return ok;
}

void RegisterAll() {
  for (ScheduleKind kind : BuiltinScheduleKinds()) {
    for (int ranks : kRanks) {
      for (int microbatches : kMicrobatches) {
        // Only what the schedule can take (looped-bfs: m >= p), checked without generating it.
        if (!CheckShape(kind, ranks, microbatches, ChunksFor(kind)).ok()) continue;
        if (TraitsOf(kind).placement == Placement::kV && microbatches > kMaxVMicrobatches) {
          continue;
        }
        const std::string name = std::string("BM_Scaling/") + ScheduleKindName(kind) +
                                 "/p:" + std::to_string(ranks) +
                                 "/m:" + std::to_string(microbatches);
        benchmark::RegisterBenchmark(name.c_str(), BM_Scaling, kind, ranks, microbatches)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
}

// Removes --name=value from argv; returns the value or `fallback`.
double TakeFlag(int* argc, char** argv, const char* name, double fallback) {
  const std::string prefix = std::string("--") + name + "=";
  double value = fallback;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      value = std::atof(argv[i] + prefix.size());
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  return value;
}

}  // namespace
}  // namespace pipecast

int main(int argc, char** argv) {
  const double linear_factor = pipecast::TakeFlag(&argc, argv, "linear_factor", 4.0);
  const double min_ops_per_s = pipecast::TakeFlag(&argc, argv, "min_ops_per_s", 0.0);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  pipecast::RegisterAll();
  pipecast::CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return pipecast::Summarize(linear_factor, min_ops_per_s) ? 0 : 1;
}
