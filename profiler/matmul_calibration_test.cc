// Calibration of the matmul-aware time model (profiler/matmul_model.h)
// against published measurements; the table, with sources, is in
// docs/calibration.md and each row here holds one line of it.
//
// GEMM rows: bf16 products measured on A100 SXM and H100 SXM (stas00's MAMF
// table and a square sweep, docs/research/compute-sources.md section 4),
// within 15%.
// Pipeline rows: the zero-bubble paper (Qi et al. 2024, Tables 3 and 4),
// 1F1B throughput in samples per GPU per second on A100 SXM 80G, pure
// pipeline, within 10%: each model estimated as Megatron-LM ran it in 2023
// (eager attention, bf16), the paper's partition (first and last stage one
// layer fewer), replayed by the simulator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "profiler/analytic.h"
#include "profiler/matmul_model.h"
#include "sim/cluster.h"
#include "sim/schedule.h"
#include "sim/simulator.h"

namespace pipecast {
namespace {

GemmRates RatesFor(const char* preset) {
  const GpuSpec gpu = ClusterPreset(preset)->gpu;
  return GemmRates{.peak_flops_per_s = gpu.peak_tflops * 1e12,
                   .hbm_bytes_per_s = gpu.memory_bandwidth_gbps * 1e9 * kDefaultMemoryEfficiency,
                   .element_bytes = 2,
                   .preset = GemmPresetFor(gpu)};
}

struct GemmRow {
  const char* source;
  const char* preset;
  double m, n, k;
  double published_tflops;
};

constexpr GemmRow kGemmRows[] = {
    {"MAMF A100 SXM best shape", "a100-80gb", 1024, 10240, 5120, 271.2},
    {"MAMF H100 SXM best shape", "h100-sxm", 2048, 2048, 13312, 794.5},
    {"H100 square 1024", "h100-sxm", 1024, 1024, 1024, 176.62},
    {"H100 square 2048", "h100-sxm", 2048, 2048, 2048, 676.59},
    {"H100 square 4096", "h100-sxm", 4096, 4096, 4096, 788.72},
    {"H100 square 8192", "h100-sxm", 8192, 8192, 8192, 797.51},
    {"MAMF GH200 best shape (h200 preset)", "h200", 1024, 15360, 4096, 828.6},
};
constexpr double kGemmTolerance = 0.15;

TEST(MatmulCalibration, GemmThroughputWithinFifteenPercentOfMeasurements) {
  for (const GemmRow& row : kGemmRows) {
    const Gemm g{row.m, row.n, row.k, 1};
    const double tflops = g.Flops() / TimeGemm(RatesFor(row.preset), g).seconds / 1e12;
    std::printf("%s published %.4g predicted %.4g error %+.1f%%\n", row.source,
                row.published_tflops, tflops, (tflops / row.published_tflops - 1) * 100);
    EXPECT_NEAR(tflops, row.published_tflops, kGemmTolerance * row.published_tflops)
        << row.source << ": predicted " << tflops << " TFLOP/s";
  }
}

struct PipelineRow {
  const char* name;
  int layers, heads, hidden, pipeline, microbatch_size, microbatches;
  double published_1f1b;  // samples per GPU per second
};

// Table 3 (configuration) and Table 4 (1F1B throughput) of the paper.
constexpr PipelineRow kPipelineRows[] = {
    {"1.5B", 22, 24, 2304, 8, 6, 24, 11.8},    {"1.5B", 22, 24, 2304, 8, 6, 32, 12.5},
    {"1.5B", 22, 24, 2304, 8, 6, 64, 13.6},    {"6.2B", 30, 32, 4096, 8, 3, 24, 3.50},
    {"6.2B", 30, 32, 4096, 8, 3, 32, 3.70},    {"6.2B", 30, 32, 4096, 8, 3, 64, 4.03},
    {"14.6B", 46, 40, 5120, 16, 1, 48, 1.40},  {"14.6B", 46, 40, 5120, 16, 1, 64, 1.49},
    {"14.6B", 46, 40, 5120, 16, 1, 128, 1.64}, {"28.3B", 62, 48, 6144, 32, 1, 96, 0.76},
    {"28.3B", 62, 48, 6144, 32, 1, 128, 0.80}, {"28.3B", 62, 48, 6144, 32, 1, 256, 0.88},
};
constexpr double kPipelineTolerance = 0.10;

// The paper's partition: (layers + 2) / p transformer layers per stage, one
// fewer on the first and the last (which hold the embedding and the head).
std::vector<StageLayers> PaperPartition(const PipelineRow& row) {
  const int k = (row.layers + 2) / row.pipeline;
  std::vector<StageLayers> out;
  int first = 0;
  for (int s = 0; s < row.pipeline; ++s) {
    const int blocks = (s == 0 || s == row.pipeline - 1) ? k - 1 : k;
    const int last = first + blocks - 1 + (s == 0 ? 1 : 0) + (s == row.pipeline - 1 ? 1 : 0);
    out.push_back(StageLayers{first, last});
    first = last + 1;
  }
  return out;
}

double SamplesPerGpuPerSecond(const PipelineRow& row) {
  const TransformerSpec spec{.name = row.name,
                             .layers = row.layers,
                             .hidden = row.hidden,
                             .heads = row.heads,
                             .sequence_length = 1024,
                             .vocab = 50304,  // GPT-2's 50257 padded by Megatron-LM to 128
                             .microbatch_sizes = {row.microbatch_size}};
  AnalyticOptions options;
  options.gpu_preset = "a100-80gb";
  options.attention = Attention::kEager;  // Megatron-LM as the paper ran it (2023)
  Result<Model> model = EstimateTransformer(spec, options);
  EXPECT_TRUE(model.ok()) << model.status().message();
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, row.pipeline, row.microbatches, 1);
  EXPECT_TRUE(schedule.ok()) << schedule.status().message();
  SimOptions sim;
  sim.microbatch_size = row.microbatch_size;
  sim.partition = PaperPartition(row);
  sim.record_timeline = false;
  Result<SimResult> result = Simulate(*model, *ClusterPreset("a100-80gb"), *schedule, sim);
  EXPECT_TRUE(result.ok()) << result.status().message();
  const double samples = static_cast<double>(row.microbatches) * row.microbatch_size;
  return samples / (static_cast<double>(result->iteration_ns) * 1e-9) / row.pipeline;
}

TEST(MatmulCalibration, ZeroBubbleOneFOneBThroughputWithinTenPercentOfTable4) {
  for (const PipelineRow& row : kPipelineRows) {
    const double predicted = SamplesPerGpuPerSecond(row);
    std::printf("%s m=%d published %.3g predicted %.3g error %+.1f%%\n", row.name, row.microbatches,
                row.published_1f1b, predicted, (predicted / row.published_1f1b - 1) * 100);
    EXPECT_NEAR(predicted, row.published_1f1b, kPipelineTolerance * row.published_1f1b)
        << row.name << " m=" << row.microbatches << ": predicted " << predicted
        << " samples/s per GPU (error " << (predicted / row.published_1f1b - 1) * 100 << "%)";
  }
}

}  // namespace
}  // namespace pipecast
