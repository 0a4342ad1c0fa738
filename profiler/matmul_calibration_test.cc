// Calibration of the matmul-aware time model (profiler/matmul_model.h)
// against published measurements; the table, with sources, is in
// docs/calibration.md and each row here holds one line of it.
//
// GEMM rows: the training shape the H100 mainloop comes from (within 1%),
// and bf16 products measured on A100 SXM and H100 SXM with later cuBLAS
// (stas00's MAMF table and a square sweep, docs/research/compute-sources.md
// section 4), held out, within 15%.
// Pipeline rows (held out since the llm-foundry fit, docs/calibration.md):
// the zero-bubble paper (Qi et al. 2024, Tables 3 and 4), 1F1B throughput in
// samples per GPU per second on A100 SXM 80G, pure pipeline, within 15%:
// each model estimated as Megatron-LM ran it in 2023 (eager attention,
// bf16), the paper's partition (first and last stage one layer fewer),
// replayed by the simulator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "formats/formats.h"
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
};
constexpr double kGemmTolerance = 0.15;

// The H100's mainloop efficiency comes from this product: 2048 tokens by a
// 70B model's 8192 x 8192 projection, 720.3 TFLOP/s with cuBLAS 11.11.3
// (pytorch/pytorch#100850), the library of the fitted llm-foundry runs.
TEST(MatmulCalibration, H100TrainingShapeGivesTheMainloop) {
  const Gemm g{2048, 8192, 8192, 1};
  const double tflops = g.Flops() / TimeGemm(RatesFor("h100-sxm"), g).seconds / 1e12;
  std::printf("pytorch#100850 H100 2048x8192x8192 published 720.3 predicted %.4g\n", tflops);
  EXPECT_NEAR(tflops, 720.3, 0.01 * 720.3);
}

// GH200's best shape (MAMF table, 828.6 TFLOP/s) on the h200 preset:
// recorded, not held. The GH200 is another package (its own power and
// clocks), measured with cuBLAS 12 at the best shape of a sweep; no H200
// SXM measurement was found (docs/calibration.md).
TEST(MatmulCalibration, GraceHopperBestShapeIsRecorded) {
  const Gemm g{1024, 15360, 4096, 1};
  const double tflops = g.Flops() / TimeGemm(RatesFor("h200"), g).seconds / 1e12;
  std::printf("MAMF GH200 best shape (h200 preset) published 828.6 predicted %.4g error %+.1f%%\n",
              tflops, (tflops / 828.6 - 1) * 100);
  EXPECT_GT(tflops, 0.5 * 828.6);
}

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
// Held out since the llm-foundry fit: 15%, as for the other held-out rows
// (docs/calibration.md says how far the kernel model moved them).
constexpr double kPipelineTolerance = 0.15;

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
  sim.config.microbatch_size = row.microbatch_size;
  sim.partition = PaperPartition(row);
  sim.record_timeline = false;
  Result<SimResult> result = Simulate(*model, *ClusterPreset("a100-80gb"), *schedule, sim);
  EXPECT_TRUE(result.ok()) << result.status().message();
  const double samples = static_cast<double>(row.microbatches) * row.microbatch_size;
  return samples / (static_cast<double>(result->iteration_ns) * 1e-9) / row.pipeline;
}

TEST(MatmulCalibration, ZeroBubbleOneFOneBThroughputWithinFifteenPercentOfTable4) {
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

namespace pipecast {
namespace {

// Narayanan et al. 2021 (SC'21), Table 1, the t = 8 rows, by the closed form
// that stood in before the simulator ran tensor parallelism: per micro-batch
// and stage, l/p blocks of forward + recomputed forward + backward at t = 8
// from the matmul model (b = 1: the paper does not state its micro-batch
// size), plus 6 ring all-reduces per block (2 forward, 2 recomputed, 2
// backward) of 2*s*b*h bytes at 2(t-1)/t x bytes / 200 GB/s (the bus
// bandwidth nccl-tests all_reduce_perf measures on 8 A100-SXM4-80GB over
// NVLink, NVIDIA/nccl-tests#149; the link's datasheet is 300 GB/s each way);
// the iteration is (m + p - 1) of those (1F1B, m = B/(d*b));
// TFLOP/s per GPU = 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) / (time * GPUs)
// (their Eq. 3, recomputation counted). The data-parallel gradient
// all-reduce and the optimizer step are left out (the paper's figures
// include them).
struct NarayananRow {
  const char* name;
  int heads, hidden, layers, t, p, gpus, batch;
  double published_tflops;
};

constexpr NarayananRow kNarayananRows[] = {
    {"145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148},
    {"310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {"1008B", 160, 25600, 128, 8, 64, 3072, 3072, 163},
};
constexpr double kNarayananTolerance = 0.15;
constexpr double kA100AllReduceBusBandwidth = 200e9;  // bytes/s, NVIDIA/nccl-tests#149

// The row's model as Megatron-LM ran it in 2021 (s 2048, V 51200, eager attention), with
// `layers` blocks, on the a100-80gb preset.
TransformerSpec NarayananSpec(const NarayananRow& row, int layers) {
  return TransformerSpec{.name = row.name,
                         .layers = layers,
                         .hidden = row.hidden,
                         .heads = row.heads,
                         .sequence_length = 2048,
                         .vocab = 51200,
                         .microbatch_sizes = {1}};
}

AnalyticOptions NarayananOptions() {
  AnalyticOptions options;
  options.gpu_preset = "a100-80gb";
  options.attention = Attention::kEager;  // Megatron-LM in 2021
  return options;
}

// Their Eq. 3: model FLOPs of one iteration, recomputation counted.
double NarayananIterationFlops(const NarayananRow& row) {
  const double s = 2048, v = 51200, h = row.hidden, l = row.layers;
  return 96 * row.batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h));
}

double ClosedFormTflops(const NarayananRow& row) {
  const double s = 2048, h = row.hidden, l = row.layers, b = 1;
  Result<Model> model =
      EstimateTransformerAt(NarayananSpec(row, 1), NarayananOptions(), {row.t, false});
  EXPECT_TRUE(model.ok()) << model.status().message();
  const LayerProfile& block = model->layers[1].profiles[0];
  const double compute_s = (2.0 * block.forward_ns + block.backward_ns) * 1e-9;
  const double bytes = 2 * s * b * h;
  const double allreduce_s = 2.0 * (row.t - 1) / row.t * bytes / kA100AllReduceBusBandwidth;
  const double per_microbatch_s = l / row.p * (compute_s + 6 * allreduce_s);
  const double d = static_cast<double>(row.gpus) / (row.t * row.p);
  const double m = row.batch / (d * b);
  const double iteration_s = (m + row.p - 1) * per_microbatch_s;
  return NarayananIterationFlops(row) / iteration_s / row.gpus / 1e12;
}

// The same rows replayed by the simulator with its tensor parallelism: the
// estimate's t = 8 profiles (EstimateTransformerJson with degrees {1, 8}, as
// `profiler analytic --tensor-parallel 1,8` writes them), full recomputation,
// 1F1B over p stages of l/p blocks (the embedding on the first, the head on
// the last, as Megatron-LM placed them in 2021), d replicas with the
// overlapped gradient all-reduce and the estimated optimizer step. The
// a100-80gb preset but with the NVLink ring at 200 GB/s, the bus bandwidth
// nccl-tests measures (the preset's 300 GB/s is the datasheet's per-way
// figure); the DGX A100's 25 GB/s per GPU between nodes.
double SimulatedTflops(const NarayananRow& row) {
  Result<std::string> json =
      EstimateTransformerJson(NarayananSpec(row, row.layers), NarayananOptions(), {1, row.t});
  EXPECT_TRUE(json.ok()) << json.status().message();
  Result<Model> model = ParseModel(*json, row.name);
  EXPECT_TRUE(model.ok()) << model.status().message();
  const int d = row.gpus / (row.t * row.p);
  const int m = row.batch / d;  // b = 1
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, row.p, m, 1);
  EXPECT_TRUE(schedule.ok()) << schedule.status().message();
  SimOptions sim;
  sim.config.microbatch_size = 1;
  sim.config.layout.tensor_parallel = row.t;
  sim.config.layout.data_parallel = d;
  sim.config.recompute = Recompute::kFull;
  sim.record_timeline = false;
  const int blocks = row.layers / row.p;
  for (int st = 0; st < row.p; ++st) {
    sim.partition.push_back(StageLayers{st == 0 ? 0 : 1 + st * blocks,
                                        st == row.p - 1 ? row.layers + 1 : (st + 1) * blocks});
  }
  Cluster cluster = *ClusterPreset("a100-80gb");
  cluster.intra_node.bandwidth_gbps = kA100AllReduceBusBandwidth / 1e9;
  cluster.intra_node.efficiency = 1;  // the figure above is already the bus bandwidth
  Result<SimResult> result = Simulate(*model, cluster, *schedule, sim);
  EXPECT_TRUE(result.ok()) << result.status().message();
  if (!result.ok()) return 0;
  return NarayananIterationFlops(row) / (static_cast<double>(result->iteration_ns) * 1e-9) /
         row.gpus / 1e12;
}

// The closed form that stood in before the simulator had tensor
// parallelism, kept as a cross-check of the simulation: it leaves out the
// embedding, the head, the data-parallel all-reduce and the optimizer step
// and charges every tensor-parallel all-reduce in full, and comes within 15%
// of the simulated TFLOP/s (its error against the paper is printed:
// docs/calibration.md).
TEST(MatmulCalibration, NarayananClosedFormCrossChecksTheSimulation) {
  for (const NarayananRow& row : kNarayananRows) {
    const double closed = ClosedFormTflops(row);
    const double simulated = SimulatedTflops(row);
    std::printf("%s t=%d p=%d published %.4g predicted %.4g error %+.1f%% (closed form)\n",
                row.name, row.t, row.p, row.published_tflops, closed,
                (closed / row.published_tflops - 1) * 100);
    EXPECT_NEAR(closed, simulated, kNarayananTolerance * simulated) << row.name;
  }
}

TEST(MatmulCalibration, NarayananTensorParallelRowsBySimulation) {
  for (const NarayananRow& row : kNarayananRows) {
    const double predicted = SimulatedTflops(row);
    std::printf("%s t=%d p=%d published %.4g predicted %.4g error %+.1f%% (simulated)\n", row.name,
                row.t, row.p, row.published_tflops, predicted,
                (predicted / row.published_tflops - 1) * 100);
    EXPECT_NEAR(predicted, row.published_tflops, kNarayananTolerance * row.published_tflops)
        << row.name;
  }
}

}  // namespace
}  // namespace pipecast

namespace pipecast {
namespace {

// Korthikanti et al. 2022, Table 4: one layer of their 22B model (h 6144, 64
// heads, s 2048, micro-batch 4, t = 8, no sequence parallelism, no
// recomputation) takes 7.7 ms forward and 11.9 ms backward on A100 80GB,
// TP all-reduces included: the matmul model's per-GPU times at t = 8 plus
// the forward's 2 ring all-reduces of 2*s*b*h bytes at the 200 GB/s bus
// bandwidth above; the backward's 2 run behind the weight-gradient products
// (Megatron-LM's asynchronous tensor-parallel all-reduce: each is shorter
// than the weight-gradient product it overlaps), within 15%.
TEST(MatmulCalibration, KorthikantiTwentyTwoBillionLayerAtTensorParallelEight) {
  const TransformerSpec spec{.name = "22B",
                             .layers = 1,
                             .hidden = 6144,
                             .heads = 64,
                             .sequence_length = 2048,
                             .vocab = 51200,
                             .microbatch_sizes = {4}};
  AnalyticOptions options;
  options.gpu_preset = "a100-80gb";
  options.attention = Attention::kEager;
  Result<Model> model = EstimateTransformerAt(spec, options, {8, false});
  ASSERT_TRUE(model.ok()) << model.status().message();
  const LayerProfile& p = model->layers[1].profiles[0];
  const double allreduce_ms =
      2.0 * 7 / 8 * (2.0 * 2048 * 4 * 6144) / kA100AllReduceBusBandwidth * 1e3;
  const double forward_ms = static_cast<double>(p.forward_ns) * 1e-6 + 2 * allreduce_ms;
  const double weight_ms = static_cast<double>(*p.backward_weight_ns) * 1e-6;
  EXPECT_GT(weight_ms / 4, allreduce_ms);  // each hides behind a weight-gradient product
  const double backward_ms = static_cast<double>(p.backward_ns) * 1e-6;
  std::printf(
      "22B layer t=8 b=4: forward published 7.7 predicted %.2f ms (%+.1f%%), backward "
      "published 11.9 predicted %.2f ms (%+.1f%%)\n",
      forward_ms, (forward_ms / 7.7 - 1) * 100, backward_ms, (backward_ms / 11.9 - 1) * 100);
  EXPECT_NEAR(forward_ms, 7.7, 0.15 * 7.7);
  EXPECT_NEAR(backward_ms, 11.9, 0.15 * 11.9);
}

// Narayanan et al. 2021, Fig. 7: per-GPU throughput of a 1B model (h 4096,
// 128 heads, 4 layers) rises "by up to 1.3x" with the micro-batch size on one
// GPU. Recorded, not held: the matmul model's own ratio from b = 1 to b = 8.
TEST(MatmulCalibration, NarayananFigureSevenMicrobatchGainIsRecorded) {
  const TransformerSpec spec{.name = "1B",
                             .layers = 4,
                             .hidden = 4096,
                             .heads = 128,
                             .sequence_length = 2048,
                             .vocab = 51200,
                             .microbatch_sizes = {1, 8}};
  AnalyticOptions options;
  options.gpu_preset = "a100-80gb";
  options.attention = Attention::kEager;
  Result<Model> model = EstimateTransformer(spec, options);
  ASSERT_TRUE(model.ok());
  double one = 0, eight = 0;
  for (const Layer& layer : model->layers) {
    one += static_cast<double>(layer.profiles[0].forward_ns + layer.profiles[0].backward_ns);
    eight += static_cast<double>(layer.profiles[1].forward_ns + layer.profiles[1].backward_ns);
  }
  const double gain = one * 8 / eight;
  std::printf("Fig. 7 1B model b=1 -> b=8: published up to 1.3x, predicted %.3fx\n", gain);
  EXPECT_GE(gain, 1.0);
}

}  // namespace
}  // namespace pipecast
