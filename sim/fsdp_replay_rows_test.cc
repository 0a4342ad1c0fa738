// The per-tensor replay of torchtitan's FSDP2 step (sim/fsdp_trace.h through
// sim/caching_allocator.h) against the two bf16 rows of
// docs/calibration-memory.md ("A per-tensor replay of torchtitan's FSDP2
// step"): Llama 3.1 8B (examples/hf/llama-3.1-8b.json's shape), FSDP over 8 and 128
// H100 96 GB, local batch 2, sequence 8192, op-level selective activation
// checkpointing, eager, published max_reserved 82.4 and 67.0 GiB
// (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md @ 73a0e69,
// Tables 1 and 3; runs at torchtitan 9dec370). Held out: the trace was
// written from the code and run on these rows once; nothing in it was
// changed after. The allocator's capacity is the GPU's memory less the CUDA
// context, NCCL and cuBLAS terms (sim/runtime_memory.h); the reported figure
// is the replay's reserved peak plus the cuBLAS workspaces, which PyTorch
// allocates through the same allocator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "formats/formats.h"
#include "sim/fsdp_trace.h"
#include "sim/memory.h"
#include "sim/runtime_memory.h"

namespace pipecast {
namespace {

std::string SourcePath(const std::string& relative) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/" + relative;
}

struct Row {
  const char* id;
  int d;
  double published_gib;
  double allocated_from_code_gib;  // docs/calibration-memory.md, "What was wrong"
};

class FsdpReplayRow : public testing::TestWithParam<Row> {};

TEST_P(FsdpReplayRow, WithinFivePercentOfThePublishedMaxReserved) {
  const Row& row = GetParam();
  // examples/hf/llama-3.1-8b.json: num_hidden_layers, hidden_size,
  // intermediate_size, num_attention_heads, num_key_value_heads, vocab_size.
  const LlamaShape shape{
      .layers = 32, .hidden = 4096, .ffn = 14336, .heads = 32, .kv_heads = 8, .vocab = 128'256};
  Result<std::vector<TraceEvent>> trace = BuildTorchtitanFsdpTrace(
      shape, FsdpTraceOptions{.batch = 2, .seq = 8192, .data_parallel = row.d, .steps = 2});
  ASSERT_TRUE(trace.ok()) << trace.status().message();

  Result<Cluster> cluster = LoadCluster(SourcePath("tests/calibration/grand-teton-h100-500w.json"));
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  TrainingConfig config;
  config.layout.data_parallel = row.d;
  config.memory = *MemoryConfigFor("bf16", "adam", "fp32", "", false);
  config.memory.zero = 3;
  const DeviceMemory device = DeviceMemoryFor(*cluster, config, 0, 0);
  Bytes cublas = 0;
  for (const DeviceMemoryTerm& t : device.terms) {
    if (t.name == "cuBLAS workspaces") cublas = t.bytes;
  }
  Result<ReplayResult> replay =
      ReplayTrace(*trace, cluster->gpu.memory_bytes - device.RuntimeBytes());
  ASSERT_TRUE(replay.ok()) << replay.status().message();

  const double reserved = ToGiB(replay->run.peak_reserved + cublas);
  const double error = reserved / row.published_gib - 1;
  std::printf(
      "%s per-tensor replay: allocated peak %.2f GiB, reserved peak %.2f + cuBLAS %.2f = "
      "%.2f GiB, published %.2f, error %+.1f%%; step 1 reserved %.2f; pools at the end:",
      row.id, ToGiB(replay->run.peak_allocated), ToGiB(replay->run.peak_reserved), ToGiB(cublas),
      reserved, row.published_gib, error * 100, ToGiB(replay->first_step.peak_reserved));
  for (const auto& [stream, bytes] : replay->reserved_by_stream_end) {
    std::printf(" stream %d %.2f", stream, ToGiB(bytes));
  }
  std::printf("\n");
  EXPECT_LE(std::abs(error), 0.05) << row.id;
  // The part apart: the allocated peak is what torchtitan's code allocates
  // at the loss's backward, as the doc's term-by-term table counts it.
  EXPECT_NEAR(ToGiB(replay->run.peak_allocated), row.allocated_from_code_gib, 0.1) << row.id;
  EXPECT_EQ(replay->run.retries, 0) << row.id << ": the replay should not need to release cache";
}

INSTANTIATE_TEST_SUITE_P(Torchtitan, FsdpReplayRow,
                         testing::Values(Row{"g8", 8, 82.4, 68.6}, Row{"g128", 128, 67.0, 58.1}),
                         [](const testing::TestParamInfo<Row>& info) {
                           return std::string(info.param.id);
                         });

}  // namespace
}  // namespace pipecast
