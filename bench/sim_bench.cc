// Benchmarks of the simulator: how many compute ops per second Simulate()
// replays, for the built-in schedules at a small and a large pipeline, with
// and without recording the timeline (traces need it; planner searches turn
// it off).
//
// The model is synthetic: 2 identical layers per stage, one profile at
// micro-batch size 1. The cluster is the h100-sxm preset, so pipelines past
// 8 GPUs cross nodes. items_per_second in the output is compute ops per second:
// Schedule::NumActions(), the F, B, I and W actions of all ranks (for
// PipeDream, of all 4 simulated iterations), per Simulate() call; transfers
// and other events are not counted.
//
//   build/bench/sim_bench --benchmark_min_time=0.2   (or scripts/bench.sh)
//   build/bench/sim_bench --benchmark_filter='/p:64/.*timeline:off'
//
// Instructions per op (steadier than time on a shared machine), e.g.:
//   valgrind --tool=callgrind --toggle-collect='pipecast::Simulate*'
//     build/bench/sim_bench --benchmark_filter='1f1b/p:64/.*off' --benchmark_min_time=0.01
// (one command line), then divide the collected Ir by ops x calls (callgrind_annotate
// --inclusive=yes).
#include <benchmark/benchmark.h>

#include <string>
#include <utility>

#include "base/units.h"
#include "formats/formats.h"
#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/schedule_traits.h"
#include "sim/simulator.h"

namespace pipecast {
namespace {

// The synthetic layer. Round numbers; backward costs twice the forward, as a
// transformer layer roughly does.
constexpr int kLayersPerStage = 2;
constexpr TimeNs kForwardNs = 100 * kNsPerUs;
constexpr TimeNs kBackwardNs = 200 * kNsPerUs;
constexpr Bytes kActivationBytes = 1 * kMiB;
constexpr Bytes kOutputBytes = 1 * kMiB;
constexpr int64_t kParametersPerLayer = 1'000'000;

constexpr char kClusterPreset[] = "h100-sxm";

// (pipeline ranks, micro-batches): a single node, a large pipeline, and the
// largest one issue 8 asks for (cost per op should not grow with size).
constexpr std::pair<int, int> kShapes[] = {{8, 64}, {64, 1024}, {128, 4096}};
// Chunks per GPU for interleaved and looped-bfs.
constexpr int kChunks = 2;

Model SyntheticModel(int num_layers) {
  Model model;
  model.name = "synthetic";
  model.source.method = "manual";
  for (int i = 0; i < num_layers; ++i) {
    Layer layer;
    layer.name = "layer" + std::to_string(i);
    layer.parameters = kParametersPerLayer;
    LayerProfile profile;
    profile.microbatch_size = 1;
    profile.forward_ns = kForwardNs;
    profile.backward_ns = kBackwardNs;
    profile.backward_weight_ns = kBackwardNs / 2;  // for the zero-bubble schedules
    profile.activation_bytes = kActivationBytes;
    profile.output_bytes = kOutputBytes;
    layer.profiles.push_back(profile);
    model.layers.push_back(std::move(layer));
  }
  return model;
}

// v for the chunked schedules: the V family always runs 2.
int ChunksFor(ScheduleKind kind) {
  const int fixed = TraitsOf(kind).fixed_chunks;
  return fixed > 0 ? fixed : (UsesChunks(kind) ? kChunks : 1);
}

// The V family's generators are sail-sg's greedy heuristics, superlinear in m (V-Half: 0.5 s of CPU
// at p = 64, m = 256, 2.1 s at m = 1024): the larger shapes would spend the run generating
// schedules, not simulating them, so those kinds run only up to this many micro-batches.
constexpr int kMaxVMicrobatches = 1024;
bool Registered(ScheduleKind kind, int microbatches) {
  return TraitsOf(kind).placement != Placement::kV || microbatches <= kMaxVMicrobatches;
}

void BM_Simulate(benchmark::State& state, ScheduleKind kind, int ranks, int microbatches,
                 bool record_timeline) {
  const int chunks = ChunksFor(kind);
  const Model model = SyntheticModel(ranks * chunks * kLayersPerStage);
  const Result<Cluster> cluster = ClusterPreset(kClusterPreset);
  if (!cluster.ok()) {
    state.SkipWithError(cluster.status().message().c_str());
    return;
  }
  const Result<Schedule> schedule = MakeSchedule(kind, ranks, microbatches, chunks);
  if (!schedule.ok()) {
    state.SkipWithError(schedule.status().message().c_str());
    return;
  }
  SimOptions options;
  options.record_timeline = record_timeline;

  for (auto _ : state) {
    Result<SimResult> result = Simulate(model, *cluster, *schedule, options);
    if (!result.ok()) {
      state.SkipWithError(result.status().message().c_str());
      break;
    }
    benchmark::DoNotOptimize(result);
  }
  state.SetItemsProcessed(state.iterations() * schedule->NumActions());
  state.counters["ops"] = static_cast<double>(schedule->NumActions());
}

// Building the schedule alone (MakeSchedule), which the planner does once per candidate: the V
// family's generators are sail-sg's greedy heuristics and dominate at large m.
void BM_Generate(benchmark::State& state, ScheduleKind kind, int ranks, int microbatches) {
  for (auto _ : state) {
    Result<Schedule> schedule = MakeSchedule(kind, ranks, microbatches, ChunksFor(kind));
    if (!schedule.ok()) {
      state.SkipWithError(schedule.status().message().c_str());
      break;
    }
    benchmark::DoNotOptimize(schedule);
  }
}

// The cost-driven kinds (zb-auto, zb-v-auto) built from the zero-bubble paper's profiled costs
// (Qi et al. ICLR'24 Table 6, 1.5B: F 18.522, B 18.086, W 9.337, communication 0.601 ms) under
// their default limits, at the shape issue 16 sets the target at (p = 32, m = 128: under 50 ms,
// against 274 ms for sail-sg's Python zb.py measured on this machine).
void BM_GenerateFromCosts(benchmark::State& state, ScheduleKind kind, int ranks, int microbatches) {
  const int chunks = ChunksFor(kind);
  ScheduleCosts costs;
  costs.forward_ns.assign(ranks * chunks, 18'522'000 / chunks);
  costs.input_grad_ns.assign(ranks * chunks, 18'086'000 / chunks);
  costs.weight_grad_ns.assign(ranks * chunks, 9'337'000 / chunks);
  costs.comm_ns = 601'000;
  for (auto _ : state) {
    Result<Schedule> schedule = MakeSchedule(kind, ranks, microbatches, chunks, costs);
    if (!schedule.ok()) {
      state.SkipWithError(schedule.status().message().c_str());
      break;
    }
    benchmark::DoNotOptimize(schedule);
  }
}

// Generation shapes: the small pipeline, a middle one, and the largest the V family runs here.
constexpr std::pair<int, int> kGenerateShapes[] = {{8, 64}, {64, 256}, {64, kMaxVMicrobatches}};

void RegisterAll() {
  for (ScheduleKind kind : {ScheduleKind::kZBAuto, ScheduleKind::kZBVAuto}) {
    for (const auto& [ranks, microbatches] : {std::pair{8, 24}, std::pair{32, 128}}) {
      const std::string name = std::string("BM_GenerateFromCosts/") + ScheduleKindName(kind) +
                               "/p:" + std::to_string(ranks) + "/m:" + std::to_string(microbatches);
      benchmark::RegisterBenchmark(name.c_str(), BM_GenerateFromCosts, kind, ranks, microbatches)
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (const auto& [ranks, microbatches] : kGenerateShapes) {
    for (ScheduleKind kind : BuiltinScheduleKinds()) {
      const std::string name = std::string("BM_Generate/") + ScheduleKindName(kind) +
                               "/p:" + std::to_string(ranks) + "/m:" + std::to_string(microbatches);
      benchmark::RegisterBenchmark(name.c_str(), BM_Generate, kind, ranks, microbatches)
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (const auto& [ranks, microbatches] : kShapes) {
    for (ScheduleKind kind : BuiltinScheduleKinds()) {
      if (!Registered(kind, microbatches)) continue;
      for (bool record_timeline : {false, true}) {
        const std::string name =
            std::string("BM_Simulate/") + ScheduleKindName(kind) + "/p:" + std::to_string(ranks) +
            "/m:" + std::to_string(microbatches) + "/timeline:" + (record_timeline ? "on" : "off");
        benchmark::RegisterBenchmark(name.c_str(), BM_Simulate, kind, ranks, microbatches,
                                     record_timeline)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace
}  // namespace pipecast

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  pipecast::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
