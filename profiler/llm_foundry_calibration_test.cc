// The fitted rows of docs/calibration.md ("llm-foundry"): MosaicML's
// published MPT training throughput (mosaicml/llm-foundry
// scripts/train/benchmarking/README.md), each run pinned as it was made:
// `profiler analytic` with the row's architecture (biases, learned positions,
// tied head, Triton FlashAttention) on the row's GPU preset, then the
// simulator with p = 1, d = the GPU count, the row's micro-batch size and
// accumulation steps, its activation checkpointing, and ZeRO-3 for FSDP
// FULL_SHARD. The rows come from tests/calibration/llm_foundry_rows.json, the
// file scripts/calibration/llm_foundry.py reads too.
//
// Held: every row within 15% and the mean |error| within 10% per GPU (the
// issue's targets), and apart, the compute rows: on one node with FSDP
// collectives under 5% of the iteration even if none hid behind compute
// (five H100 and five A100 rows; docs/calibration.md "Compute alone").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "profiler/analytic.h"
#include "sim/cluster.h"
#include "sim/memory.h"
#include "sim/schedule.h"
#include "sim/simulator.h"

namespace pipecast {
namespace {

constexpr double kRowTolerance = 0.15;
constexpr double kMeanTolerance = 0.10;

struct FoundryRow {
  std::string id, preset;
  int gpus = 0, d = 0, mbs = 0, m = 0;
  bool recompute = false;
  bool shard_prefetch = true;  // FSDP's collectives overlapped with compute
  double published = 0;        // tokens/s per GPU
  TransformerSpec spec;
};

// gtest prints a parameter with this: the row's id, not its bytes.
void PrintTo(const FoundryRow& row, std::ostream* os) { *os << row.id; }

std::string RowsPath() {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/tests/calibration/llm_foundry_rows.json";
}

std::vector<FoundryRow> LoadRows() {
  std::ifstream in(RowsPath());
  std::vector<FoundryRow> rows;
  if (!in) return rows;  // FoundryRows.FileIsThere says why
  const nlohmann::json doc = nlohmann::json::parse(in);
  for (const nlohmann::json& r : doc.at("rows")) {
    const nlohmann::json& a = r.at("architecture");
    FoundryRow row;
    row.id = r.at("id");
    row.preset = r.at("preset");
    row.gpus = r.at("gpus");
    row.d = r.at("d");
    row.mbs = r.at("mbs");
    row.m = r.at("m");
    row.recompute = r.at("recompute") == "full";
    row.shard_prefetch = r.value("shard_prefetch", "on") == "on";
    row.published = r.at("measured").at("tokens_per_s_per_gpu");
    row.spec = TransformerSpec{.name = a.at("model"),
                               .layers = a.at("layers"),
                               .hidden = a.at("hidden"),
                               .heads = a.at("heads"),
                               .ffn_hidden = a.at("ffn"),
                               .sequence_length = a.at("seq"),
                               .vocab = a.at("vocab"),
                               .tied_embeddings = a.at("tied"),
                               .learned_positions = !a.at("rotary").get<bool>(),
                               .gated_mlp = a.at("gated_mlp"),
                               .kv_heads = a.at("kv_heads"),
                               .microbatch_sizes = {row.mbs}};
    rows.push_back(row);
  }
  return rows;
}

const std::vector<FoundryRow>& Rows() {
  static const std::vector<FoundryRow> rows = LoadRows();
  return rows;
}

struct Prediction {
  double tokens_per_gpu = 0;  // per second
  // The FSDP collectives' share if none hid behind compute: per micro-batch
  // an all-gather of the bf16 parameters for the forward and one for the
  // backward and a reduce-scatter of the gradients, each (d-1)/d of 2P bytes
  // through a GPU's NVLink (or its share of the node's NICs), over the
  // predicted iteration.
  double collectives_share = 0;
};

// As scripts/calibration/llm_foundry.py runs it.
Prediction Predict(const FoundryRow& row) {
  AnalyticOptions options;
  options.gpu_preset = row.preset;
  options.attention = Attention::kTriton;  // attn_impl: triton (docs/research/kernel-benchmarks.md)
  Result<Model> model = EstimateTransformer(row.spec, options);
  EXPECT_TRUE(model.ok()) << row.id << ": " << model.status().message();
  if (!model.ok()) return {};
  Result<Schedule> schedule = MakeSchedule(ScheduleKind::k1F1B, 1, row.m, 1);
  EXPECT_TRUE(schedule.ok()) << schedule.status().message();
  SimOptions sim;
  sim.config.microbatch_size = row.mbs;
  sim.config.layout.data_parallel = row.d;
  sim.config.recompute = row.recompute ? Recompute::kFull : Recompute::kOff;
  sim.config.memory = *MemoryConfigFor("bf16", "adam", "fp32");
  sim.config.memory.zero = 3;
  sim.config.memory.sharding.prefetch = row.shard_prefetch;
  sim.partition = {StageLayers{0, static_cast<int>(model->layers.size()) - 1}};
  sim.record_timeline = false;
  const Cluster cluster = *ClusterPreset(row.preset);
  Result<SimResult> result = Simulate(*model, cluster, *schedule, sim);
  EXPECT_TRUE(result.ok()) << row.id << ": " << result.status().message();
  if (!result.ok()) return {};
  const double seconds = static_cast<double>(result->iteration_ns) * 1e-9;
  const double tokens = static_cast<double>(row.m) * row.mbs * row.spec.sequence_length;
  const double link = row.gpus <= cluster.gpus_per_node ? cluster.intra_node.bandwidth_gbps
                                                        : cluster.NetworkGbpsPerGpu();
  const double bytes =
      3.0 * row.m * 2 * static_cast<double>(model->TotalParameters()) * (row.d - 1) / row.d;
  return {.tokens_per_gpu = tokens / seconds, .collectives_share = bytes / (link * 1e9) / seconds};
}

double Error(const FoundryRow& row) { return Predict(row).tokens_per_gpu / row.published - 1; }

// Rows the compute model answers for alone: one node, and the FSDP
// collectives under kComputeRowShare of the iteration even if none hid.
constexpr double kComputeRowShare = 0.05;
bool ComputeRow(const FoundryRow& row) {
  return row.gpus <= 8 && Predict(row).collectives_share < kComputeRowShare;
}

TEST(FoundryRows, FileIsThere) {
  ASSERT_EQ(Rows().size(), 24u) << RowsPath() << " should hold llm-foundry's 16 H100 and 8 A100 "
                                << "rows (PIPECAST_SOURCE_DIR is the repository root)";
}

class FoundryRow_ : public testing::TestWithParam<FoundryRow> {};

TEST_P(FoundryRow_, ComputeRowWithinFifteenPercent) {
  const FoundryRow& row = GetParam();
  const Prediction p = Predict(row);
  const double error = p.tokens_per_gpu / row.published - 1;
  std::printf("%s published %.0f predicted %.0f error %+.1f%% collectives if serial %.1f%%\n",
              row.id.c_str(), row.published, p.tokens_per_gpu, error * 100,
              p.collectives_share * 100);
  if (!ComputeRow(row)) {
    GTEST_SKIP() << "several nodes, or the FSDP collectives are " << p.collectives_share * 100
                 << "% of the iteration: FoundryRows.EveryRow... holds it";
  }
  EXPECT_LE(std::abs(error), kRowTolerance) << row.id;
}

std::string RowName(const testing::TestParamInfo<FoundryRow>& info) {
  std::string name = info.param.id;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(LlmFoundry, FoundryRow_, testing::ValuesIn(Rows()), RowName);

// The mean |error| of the compute rows, per GPU: five on each.
TEST(FoundryRows, ComputeRowsMeanErrorWithinTenPercentPerGpu) {
  std::map<std::string, std::vector<double>> errors;
  for (const FoundryRow& row : Rows()) {
    if (ComputeRow(row)) errors[row.preset].push_back(std::abs(Error(row)));
  }
  ASSERT_EQ(errors.size(), 2u);
  for (const auto& [preset, e] : errors) {
    double sum = 0;
    for (double x : e) sum += x;
    std::printf("%s: %zu compute rows, mean |error| %.1f%%\n", preset.c_str(), e.size(),
                sum / e.size() * 100);
    EXPECT_EQ(e.size(), 5u) << preset;
    EXPECT_LE(sum / e.size(), kMeanTolerance) << preset;
  }
}

// Every row, and the targets: mean |error| within 10% on the H100
// rows and on the A100 rows, each row within 15% (the collectives of issue
// 24 item 2 across nodes; FSDP's gathers and reduce-scatters in turn with
// the compute, as Composer's settings ran them).
TEST(FoundryRows, EveryRowWithinFifteenPercentAndMeansWithinTen) {
  std::map<std::string, std::vector<double>> errors;
  for (const FoundryRow& row : Rows()) {
    const double error = Error(row);
    EXPECT_LE(std::abs(error), kRowTolerance) << row.id;
    errors[row.preset].push_back(std::abs(error));
  }
  for (const auto& [preset, e] : errors) {
    double sum = 0;
    for (double x : e) sum += x;
    std::printf("%s: %zu rows, mean |error| %.1f%%\n", preset.c_str(), e.size(),
                sum / e.size() * 100);
    EXPECT_LE(sum / e.size(), kMeanTolerance) << preset;
  }
}

}  // namespace
}  // namespace pipecast
