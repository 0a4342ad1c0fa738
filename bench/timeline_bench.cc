// The simulator's timeline cost (issue 17): one Simulate() call with the
// timeline off (the planner's search) and on (traces, reports, the critical
// path), on the ideal cluster (transfers take no time, so many events fall at
// one instant) and on h100-sxm, side by side.
//
// Model: one synthetic layer per stage (100 us forward, 200 us backward of
// which 100 us weight gradient, 1 MiB activations and outputs). Shapes: GPipe
// and 1F1B at p=64, m=1024 (the case) and ZB-H1 at p=64, m=1024.
//
// Counters: ns_per_op (wall, per compute op: Schedule::NumActions()),
// cpu_ns_per_op (this thread), and bytes_per_op: the heap the SimResult holds
// once Simulate() returns (glibc mallinfo2: in-use chunks plus directly mapped blocks, after the
// call less before it, the result alive), per compute op. Timings are not checked by a test;
// docs/benchmarks.md records them.
//
//   build/bench/timeline_bench
//   build/bench/timeline_bench --benchmark_filter='gpipe.*ideal'
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <chrono>
#include <ctime>
#include <string>
#include <utility>

#include "base/units.h"
#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"

namespace pipecast {
namespace {

Model SyntheticModel(int num_layers) {
  Model model;
  model.name = "synthetic";
  for (int i = 0; i < num_layers; ++i) {
    Layer layer;
    layer.name = "layer" + std::to_string(i);
    layer.parameters = 1'000'000;
    LayerProfile profile;
    profile.microbatch_size = 1;
    profile.forward_ns = 100 * kNsPerUs;
    profile.backward_ns = 200 * kNsPerUs;
    profile.backward_weight_ns = 100 * kNsPerUs;
    profile.activation_bytes = 1 * kMiB;
    profile.output_bytes = 1 * kMiB;
    layer.profiles.push_back(profile);
    model.layers.push_back(std::move(layer));
  }
  return model;
}

double ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// In-use bytes: small chunks (uordblks) and the large ones glibc maps directly (hblkhd).
size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

void BM_Timeline(benchmark::State& state, ScheduleKind kind, int ranks, int microbatches,
                 const std::string& cluster_name, bool timeline) {
  const Model model = SyntheticModel(ranks);
  const Result<Cluster> cluster = ClusterPreset(cluster_name);
  const Result<Schedule> schedule = MakeSchedule(kind, ranks, microbatches, 1);
  if (!cluster.ok() || !schedule.ok()) {
    state.SkipWithError(!cluster.ok() ? cluster.status().message().c_str()
                                      : schedule.status().message().c_str());
    return;
  }
  SimOptions options;
  options.record_timeline = timeline;
  const double ops = static_cast<double>(schedule->NumActions());
  double held_bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = ThreadCpuNs();
  for (auto _ : state) {
    const size_t before = HeapInUse();
    Result<SimResult> result = Simulate(model, *cluster, *schedule, options);
    const size_t after = HeapInUse();
    if (!result.ok()) {
      state.SkipWithError(result.status().message().c_str());
      return;
    }
    held_bytes = static_cast<double>(after) - static_cast<double>(before);
    benchmark::DoNotOptimize(result);
  }
  const double wall =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  const double cpu = ThreadCpuNs() - cpu_start;
  const double total = ops * static_cast<double>(state.iterations());
  state.counters["ops"] = ops;
  state.counters["ns_per_op"] = wall / total;
  state.counters["cpu_ns_per_op"] = cpu / total;
  state.counters["bytes_per_op"] = held_bytes / ops;
}

void RegisterAll() {
  const std::pair<ScheduleKind, const char*> kinds[] = {{ScheduleKind::kGPipe, "gpipe"},
                                                        {ScheduleKind::k1F1B, "1f1b"},
                                                        {ScheduleKind::kZBH1, "zb-h1"}};
  for (const auto& [kind, name] : kinds) {
    for (const char* cluster : {"ideal", "h100-sxm"}) {
      for (bool timeline : {false, true}) {
        const std::string label = std::string("BM_Timeline/") + name + "/p:64/m:1024/" + cluster +
                                  "/timeline:" + (timeline ? "on" : "off");
        benchmark::RegisterBenchmark(label.c_str(), BM_Timeline, kind, 64, 1024,
                                     std::string(cluster), timeline)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
}

}  // namespace
}  // namespace pipecast

int main(int argc, char** argv) {
  pipecast::RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
