// Benchmarks of the planner: a whole `planner --model M --gpus N` search
// (every pass, the micro-batch sweep included) on the shipped examples, on
// every core. Targets (issue 3): 8 GPUs on the 70B example under 1 s, 1024
// GPUs (128 nodes of 8) under 10 s on the 2-core development machine.
//
// BM_PlannerLayers: the planner's scaling in layers (issue 17), a synthetic
// model of 1k, 4k and 10k identical layers (20 M parameters, 200/400 us
// forward/backward of which 200 us weight gradient, 64 MiB activations, 8 MiB
// checkpoint and output, 16 MiB workspace, 32 MiB weight-gradient bytes; one
// profile at micro-batch size 1; global batch 1024) on 8 and 1024 GPUs of
// h100-sxm. Target: 10k layers on 1024 GPUs under 10 s. Counters: simulated
// (configurations simulated) and enumerated.
//
// BM_PlannerMoe: DeepSeek-V3 (examples/deepseek-v3.json, 256 routed experts)
// on 2048 h100-sxm GPUs (issue 26; target under 2 s): `pinned`, the micro-batch
// size and the ZeRO level pinned (1 and 1, as DeepSeek-V3 trained: its
// report's micro-batch of one sequence and a sharded optimizer); `unpinned`,
// both searched too (134,004 configurations, under the planner's limit of
// 500,000; the search bounds each before partitioning, docs/benchmarks.md).
//
//   build/bench/planner_bench   (or scripts/bench.sh)
#include <benchmark/benchmark.h>

#include <string>
#include <utility>

#include "formats/formats.h"
#include "planner/planner.h"

namespace pipecast {
namespace {

void BM_Planner(benchmark::State& state, const std::string& model_file, int gpus,
                PlannerOptions options) {
  const Result<Model> model = LoadModel(std::string(PIPECAST_SOURCE_DIR) + "/" + model_file);
  const Result<Cluster> cluster = ClusterPreset("h100-sxm");
  if (!model.ok() || !cluster.ok()) {
    state.SkipWithError(!model.ok() ? model.status().message().c_str()
                                    : cluster.status().message().c_str());
    return;
  }
  options.gpus = gpus;
  int simulated = 0, enumerated = 0;
  for (auto _ : state) {
    Result<PlanReport> report = RunPlanner(*model, *cluster, options);
    if (!report.ok()) {
      state.SkipWithError(report.status().message().c_str());
      break;
    }
    simulated = report->simulated;
    enumerated = report->enumerated;
    benchmark::DoNotOptimize(report);
  }
  state.counters["simulated"] = simulated;
  state.counters["enumerated"] = enumerated;
}

Model SyntheticModel(int num_layers) {
  Model model;
  model.name = "synthetic-" + std::to_string(num_layers);
  model.global_batch = 1024;
  for (int i = 0; i < num_layers; ++i) {
    Layer layer;
    layer.name = "block." + std::to_string(i);
    layer.parameters = 20'000'000;
    LayerProfile p;
    p.microbatch_size = 1;
    p.forward_ns = 200 * kNsPerUs;
    p.backward_ns = 400 * kNsPerUs;
    p.backward_weight_ns = 200 * kNsPerUs;
    p.activation_bytes = 64 * kMiB;
    p.output_bytes = 8 * kMiB;
    p.workspace_bytes = 16 * kMiB;
    p.checkpoint_bytes = 8 * kMiB;
    p.attention_core_bytes = 0;
    p.attention_core_ns = 0;
    p.weight_grad_bytes = 32 * kMiB;
    layer.profiles.push_back(p);
    model.layers.push_back(std::move(layer));
  }
  return model;
}

void BM_PlannerLayers(benchmark::State& state, int layers, int gpus) {
  const Model model = SyntheticModel(layers);
  const Result<Cluster> cluster = ClusterPreset("h100-sxm");
  if (!cluster.ok()) {
    state.SkipWithError(cluster.status().message().c_str());
    return;
  }
  PlannerOptions options;
  options.gpus = gpus;
  int simulated = 0, enumerated = 0;
  for (auto _ : state) {
    Result<PlanReport> report = RunPlanner(model, *cluster, options);
    if (!report.ok()) {
      state.SkipWithError(report.status().message().c_str());
      break;
    }
    simulated = report->simulated;
    enumerated = report->enumerated;
    benchmark::DoNotOptimize(report);
  }
  state.counters["simulated"] = simulated;
  state.counters["enumerated"] = enumerated;
}

void RegisterAll() {
  const std::pair<int, int> layer_cases[] = {{1000, 8},    {4000, 8},    {10000, 8},
                                             {1000, 1024}, {4000, 1024}, {10000, 1024}};
  for (const auto& [layers, gpus] : layer_cases) {
    const std::string name =
        "BM_PlannerLayers/layers:" + std::to_string(layers) + "/gpus:" + std::to_string(gpus);
    benchmark::RegisterBenchmark(name.c_str(), BM_PlannerLayers, layers, gpus)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->Iterations(1);
  }
  const std::pair<const char*, int> cases[] = {{"examples/gpt-7b.json", 8},
                                               {"examples/llama-70b.json", 8},
                                               {"examples/llama-70b.json", 64},
                                               {"examples/llama-70b.json", 512},
                                               {"examples/llama-70b.json", 1024}};
  for (const auto& [file, gpus] : cases) {
    const std::string name = std::string("BM_Planner/") + file + "/gpus:" + std::to_string(gpus);
    benchmark::RegisterBenchmark(name.c_str(), BM_Planner, std::string(file), gpus,
                                 PlannerOptions{})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  PlannerOptions moe;
  moe.microbatch_sizes = {1};
  moe.zero_levels = {1};
  benchmark::RegisterBenchmark("BM_PlannerMoe/examples/deepseek-v3.json/gpus:2048/pinned",
                               BM_Planner, std::string("examples/deepseek-v3.json"), 2048, moe)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_PlannerMoe/examples/deepseek-v3.json/gpus:2048/unpinned",
                               BM_Planner, std::string("examples/deepseek-v3.json"), 2048,
                               PlannerOptions{})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
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
