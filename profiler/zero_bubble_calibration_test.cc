// Calibration against published peak memory: the zero-bubble paper (Qi et
// al., "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024), Table 4, peak
// memory per GPU for 1F1B and ZB-2p on the four models of its Table 3
// (docs/simulator.md, "Calibration: zero-bubble Table 4"; the figures are in
// docs/research/memory-sources.md section 4).
//
// Given each model estimated by the analytic profiler as Megatron-LM ran it
// in 2023 (eager attention, bf16 activations, dropout on), 18 bytes per
// parameter (bf16 weights, fp32 main gradients, fp32 main weights and Adam:
// Megatron without the distributed optimizer), the paper's partition (the
// first and last stages one transformer layer fewer) and the smallest
// micro-batch count of the table,
// when the simulator replays 1F1B and ZB-H2 (pipecast's closest schedule to
// ZB-2p: both hold up to about 2p micro-batches of activations, ZB-H2 2p-1),
// then the largest per-GPU peak is within 10% of the published figure, read
// as 10^9 bytes ("GB").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "profiler/analytic.h"
#include "sim/cluster.h"
#include "sim/schedule.h"
#include "sim/simulator.h"

namespace pipecast {
namespace {

struct Row {
  const char* name;
  int layers, heads, hidden, pipeline, microbatch_size, microbatches;
  double published_1f1b_gb, published_zb2p_gb;
};

// Table 3 (configuration) and Table 4 (peak memory, GB) of the paper.
constexpr Row kRows[] = {
    {"1.5B", 22, 24, 2304, 8, 6, 24, 30, 59},
    {"6.2B", 30, 32, 4096, 8, 3, 24, 39, 70},
    {"14.6B", 46, 40, 5120, 16, 1, 48, 32, 51},
    {"28.3B", 62, 48, 6144, 32, 1, 96, 43, 74},
};
constexpr int kSequence = 1024;
// GPT-2's 50257 tokens padded by Megatron-LM to a multiple of 128.
constexpr int kVocab = 50304;
constexpr double kTolerance = 0.10;

Model PaperModel(const Row& row) {
  const TransformerSpec spec{.name = row.name,
                             .layers = row.layers,
                             .hidden = row.hidden,
                             .heads = row.heads,
                             .sequence_length = kSequence,
                             .vocab = kVocab,
                             .microbatch_sizes = {row.microbatch_size}};
  AnalyticOptions options;
  options.gpu_preset = "a100-80gb";
  options.attention = Attention::kEager;  // Megatron-LM as the paper ran it (2023)
  Result<Model> model = EstimateTransformer(spec, options);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return *model;
}

// The paper's partition: every stage holds k = (layers + 2) / p transformer
// layers but the first and the last, which hold k - 1; the embedding sits
// on the first stage and the head on the last (model layers: embedding,
// block.0 .. block.N-1, lm_head).
std::vector<StageLayers> PaperPartition(const Row& row) {
  const int k = (row.layers + 2) / row.pipeline;
  std::vector<StageLayers> out;
  int first = 0;
  for (int s = 0; s < row.pipeline; ++s) {
    int blocks = (s == 0 || s == row.pipeline - 1) ? k - 1 : k;
    int last = first + blocks - 1 + (s == 0 ? 1 : 0) + (s == row.pipeline - 1 ? 1 : 0);
    out.push_back(StageLayers{first, last});
    first = last + 1;
  }
  return out;
}

double PeakGb(const Row& row, ScheduleKind kind) {
  const Model model = PaperModel(row);
  Result<Schedule> schedule = MakeSchedule(kind, row.pipeline, row.microbatches, 1);
  EXPECT_TRUE(schedule.ok()) << schedule.status().message();
  SimOptions options;
  options.config.microbatch_size = row.microbatch_size;
  options.partition = PaperPartition(row);
  options.config.memory.weight_bytes_per_param = 2;      // bf16 weights
  options.config.memory.gradient_bytes_per_param = 4;    // fp32 main gradients
  options.config.memory.optimizer_bytes_per_param = 12;  // fp32 main weights, Adam m and v
  options.record_timeline = false;
  Result<SimResult> result = Simulate(model, *ClusterPreset("a100-80gb"), *schedule, options);
  EXPECT_TRUE(result.ok()) << result.status().message();
  Bytes peak = 0;
  for (const StageResult& r : result->per_rank) peak = std::max(peak, r.peak_memory_bytes);
  return static_cast<double>(peak) / 1e9;
}

TEST(ZeroBubbleCalibration, PartitionHasOneLayerFewerAtBothEnds) {
  const std::vector<StageLayers> p = PaperPartition(kRows[0]);  // 22 layers, p = 8, k = 3
  ASSERT_EQ(p.size(), 8u);
  EXPECT_EQ(p[0].first_layer, 0);
  EXPECT_EQ(p[0].last_layer, 2);  // embedding + 2 blocks
  EXPECT_EQ(p[1].last_layer - p[1].first_layer, 2);
  EXPECT_EQ(p[7].last_layer, 23);  // 2 blocks + lm_head
  EXPECT_EQ(p[7].last_layer - p[7].first_layer, 2);
}

TEST(ZeroBubbleCalibration, OneFOneBPeaksWithinTenPercentOfTable4) {
  for (const Row& row : kRows) {
    const double predicted = PeakGb(row, ScheduleKind::k1F1B);
    EXPECT_NEAR(predicted, row.published_1f1b_gb, kTolerance * row.published_1f1b_gb)
        << row.name << " 1F1B: predicted " << predicted << " GB";
  }
}

TEST(ZeroBubbleCalibration, ZeroBubbleH2PeaksWithinTenPercentOfTable4ZB2p) {
  for (const Row& row : kRows) {
    const double predicted = PeakGb(row, ScheduleKind::kZBH2);
    EXPECT_NEAR(predicted, row.published_zb2p_gb, kTolerance * row.published_zb2p_gb)
        << row.name << " ZB-H2 vs ZB-2p: predicted " << predicted << " GB";
  }
}

}  // namespace
}  // namespace pipecast
