// The simulator's --memory-replay torchtitan-fsdp2 (sim/memory_replay.h):
// what it takes from the model and the configuration, what it refuses, and
// that what it reports is the per-tensor trace's replay (sim/fsdp_trace.h)
// on the GPU's memory less the runtime terms. The published rows it is held
// against are in profiler/memory_calibration_test.cc and
// tests/simulator_cli_test.cc.
#include "sim/memory_replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "formats/formats.h"
#include "sim/memory.h"
#include "sim/runtime_memory.h"
#include "sim/step_trace.h"

namespace pipecast {
namespace {

using ::testing::HasSubstr;

std::string SourcePath(const std::string& relative) {
  const char* root = std::getenv("PIPECAST_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/" + relative;
}

// A model whose source.architecture is Llama 3.1 8B's as `profiler analytic
// --hf-config examples/hf/llama-3.1-8b.json` writes it (the replay reads the
// shape only, not the layers).
Model Llama8b() {
  Model m;
  m.name = "llama-3.1-8b";
  m.source.method = "analytic";
  m.sequence_length = 8192;
  ModelArchitecture a;
  a.layers = 32;
  a.hidden = 4096;
  a.sequence_length = 8192;
  a.heads = 32;
  a.kv_heads = 8;
  a.ffn_hidden = 14336;
  a.vocab = 128'256;
  a.head_dim = 128;
  a.block_norms = 2;
  a.norm = "rmsnorm";
  a.gated_mlp = true;
  a.tied_embeddings = false;
  a.learned_positions = false;
  a.qk_norm = false;
  a.qkv_bias = false;
  a.output_bias = false;
  a.mlp_bias = false;
  a.parallel_block = false;
  m.source.architecture = a;
  return m;
}

// The torchtitan rows' configuration: one stage, one micro-batch of 2, FSDP
// over d, op-level recompute, bf16 with fp32 gradients and AdamW.
TrainingConfig Fsdp(int d) {
  TrainingConfig c;
  c.layout.pipeline_stages = 1;
  c.layout.chunks = 1;
  c.layout.data_parallel = d;
  c.microbatches = 1;
  c.microbatch_size = 2;
  c.recompute = Recompute::kOp;
  c.memory = *MemoryConfigFor("bf16", "adam", "fp32");
  c.memory.zero = 3;
  return c;
}

Cluster H100() {
  Result<Cluster> cluster = LoadCluster(SourcePath("tests/calibration/grand-teton-h100-500w.json"));
  EXPECT_TRUE(cluster.ok()) << cluster.status().message();
  return cluster.ok() ? *cluster : Cluster{};
}

TEST(MemoryReplay, NamesParseBack) {
  for (MemoryReplay r : {MemoryReplay::kOff, MemoryReplay::kTorchtitanFsdp2}) {
    EXPECT_EQ(ParseMemoryReplay(MemoryReplayName(r)), r);
  }
  EXPECT_FALSE(ParseMemoryReplay("torchtitan").has_value());
}

TEST(MemoryReplay, TheShapeIsTheArchitectures) {
  Result<LlamaShape> shape = TorchtitanLlamaShape(Llama8b());
  ASSERT_TRUE(shape.ok()) << shape.status().message();
  EXPECT_EQ(shape->layers, 32);
  EXPECT_EQ(shape->hidden, 4096);
  EXPECT_EQ(shape->ffn, 14336);
  EXPECT_EQ(shape->heads, 32);
  EXPECT_EQ(shape->kv_heads, 8);
  EXPECT_EQ(shape->vocab, 128'256);
}

// What it reports is the trace's replay with the allocator's capacity the
// GPU's memory less the CUDA context, cuBLAS and NCCL terms, and the
// device-memory table's reserved figure is that peak plus cuBLAS.
TEST(MemoryReplay, ReportsTheTracesReplayOnTheGpusMemoryLessTheRuntime) {
  const Cluster cluster = H100();
  const TrainingConfig config = Fsdp(8);
  Result<ReplayedMemory> replayed = ReplayTorchtitanFsdp2(Llama8b(), cluster, config);
  ASSERT_TRUE(replayed.ok()) << replayed.status().message();

  const LlamaShape shape{
      .layers = 32, .hidden = 4096, .ffn = 14336, .heads = 32, .kv_heads = 8, .vocab = 128'256};
  Result<std::vector<TraceEvent>> trace = BuildTorchtitanFsdpTrace(
      shape, FsdpTraceOptions{.batch = 2, .seq = 8192, .data_parallel = 8, .steps = 2});
  ASSERT_TRUE(trace.ok());
  const DeviceMemory runtime = DeviceMemoryFor(cluster, config, 0, 0);
  const Bytes capacity = cluster.gpu.memory_bytes - runtime.RuntimeBytes();
  Result<ReplayResult> direct = ReplayTrace(*trace, capacity);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(replayed->capacity, capacity);
  EXPECT_EQ(replayed->allocated_peak, direct->run.peak_allocated);
  EXPECT_EQ(replayed->reserved_peak, direct->run.peak_reserved);
  EXPECT_EQ(replayed->batch, 2);
  EXPECT_EQ(replayed->seq, 8192);
  EXPECT_GT(replayed->requests, 0);

  const DeviceMemory device = DeviceMemoryFromReplay(cluster, config, replayed->allocated_peak,
                                                     replayed->reserved_peak, "replay", 0);
  Bytes cublas = 0;
  for (const DeviceMemoryTerm& t : runtime.terms) {
    if (t.name == "cuBLAS workspaces") cublas = t.bytes;
  }
  EXPECT_EQ(cublas, 2 * 32 * kMiB);  // Hopper: two streams x 32 MiB
  EXPECT_EQ(device.ReservedBytes(), replayed->reserved_peak + cublas);
  EXPECT_EQ(device.RuntimeBytes(), runtime.RuntimeBytes());
  EXPECT_EQ(device.terms[0].name, "allocated (replayed peak)");
  EXPECT_EQ(device.terms[1].bytes, replayed->reserved_peak - replayed->allocated_peak);
  EXPECT_THAT(ReplayedMemoryNote(*replayed, cublas),
              HasSubstr("--memory-replay torchtitan-fsdp2: torchtitan's FSDP2 Llama step (32 "
                        "layers, hidden 4096, ffn 14336, 32/8 heads, vocab 128256; local batch 2, "
                        "sequence 8192)"));
}

struct Refusal {
  const char* name;
  std::function<void(Model&, TrainingConfig&)> change;
  const char* says;
};

const Refusal kRefusals[] = {
    {"TwoStages", [](Model&, TrainingConfig& c) { c.layout.pipeline_stages = 2; },
     "--stages is 2: the trace is one stage holding every layer; give --stages 1"},
    {"Accumulation", [](Model&, TrainingConfig& c) { c.microbatches = 4; },
     "--microbatches is 4: the trace is one micro-batch per step"},
    {"TensorParallel", [](Model&, TrainingConfig& c) { c.layout.tensor_parallel = 2; },
     "--tensor-parallel is 2"},
    {"ZeroTwo", [](Model&, TrainingConfig& c) { c.memory.zero = 2; },
     "--zero is 2: FSDP2 shards parameters, gradients and optimizer state; give --zero 3"},
    {"HybridSharding", [](Model&, TrainingConfig& c) { c.memory.sharding.shard_group = 4; },
     "--shard-group is 4 of 8 replicas (hybrid sharding)"},
    {"NoReshard",
     [](Model&, TrainingConfig& c) { c.memory.sharding.reshard_after_forward = false; },
     "--reshard-after-forward is off"},
    {"FullRecompute", [](Model&, TrainingConfig& c) { c.recompute = Recompute::kFull; },
     "--recompute is full: the trace is torchtitan's op-level selective checkpointing; give "
     "--recompute op"},
    {"Fp8",
     [](Model&, TrainingConfig& c) {
       c.memory = *MemoryConfigFor("fp8", "adam", "fp32", "current");
       c.memory.zero = 3;
     },
     "--precision is fp8"},
    {"BfGradients",
     [](Model&, TrainingConfig& c) {
       c.memory = *MemoryConfigFor("bf16", "adam", "bf16");
       c.memory.zero = 3;
     },
     "give --precision bf16 --optimizer adam --grad-dtype fp32"},
    {"NoArchitecture", [](Model& m, TrainingConfig&) { m.source.architecture.reset(); },
     "the model has no source.architecture: make it with `profiler analytic`"},
    // A file written with the first four keys only.
    {"OlderArchitecture",
     [](Model& m, TrainingConfig&) {
       ModelArchitecture a;
       a.hidden = 4096;
       a.sequence_length = 8192;
       a.heads = 32;
       a.kv_heads = 8;
       m.source.architecture = a;
     },
     "source.architecture.layers is missing"},
    {"NoVocab", [](Model& m, TrainingConfig&) { m.source.architecture->vocab = 0; },
     "source.architecture.vocab is missing"},
    {"GeluMlp", [](Model& m, TrainingConfig&) { m.source.architecture->gated_mlp = false; },
     "source.architecture.gated_mlp is false: the trace writes a Llama block (SwiGLU"},
    {"LayerNorm", [](Model& m, TrainingConfig&) { m.source.architecture->norm = "layernorm"; },
     "source.architecture.norm is \"layernorm\""},
    {"Experts", [](Model& m, TrainingConfig&) { m.source.architecture->moe = true; },
     "source.architecture.moe is given (routed experts)"},
    {"Biases", [](Model& m, TrainingConfig&) { m.source.architecture->qkv_bias = true; },
     "source.architecture.qkv_bias is true"},
    {"CompiledLoss",
     [](Model& m, TrainingConfig&) { m.source.details["loss"] = "\"compiled: ...\""; },
     "the model's source.loss is compiled"},
};

class MemoryReplayRefusal : public testing::TestWithParam<Refusal> {};

TEST_P(MemoryReplayRefusal, NamesTheSettingAndWhatToDo) {
  Model model = Llama8b();
  TrainingConfig config = Fsdp(8);
  GetParam().change(model, config);
  Result<ReplayedMemory> replayed = ReplayTorchtitanFsdp2(model, H100(), config);
  ASSERT_FALSE(replayed.ok());
  EXPECT_EQ(replayed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(replayed.status().message(), HasSubstr(GetParam().says));
  EXPECT_THAT(replayed.status().message(), HasSubstr("--memory-replay"));
}

INSTANTIATE_TEST_SUITE_P(MemoryReplay, MemoryReplayRefusal, testing::ValuesIn(kRefusals),
                         [](const testing::TestParamInfo<Refusal>& info) {
                           return std::string(info.param.name);
                         });

TEST(MemoryReplay, AGpuWithoutAMemorySizeIsRefused) {
  Cluster ideal = H100();
  ideal.name = "ideal";
  ideal.gpu.memory_bytes = 0;
  Result<ReplayedMemory> replayed = ReplayTorchtitanFsdp2(Llama8b(), ideal, Fsdp(8));
  ASSERT_FALSE(replayed.ok());
  EXPECT_THAT(replayed.status().message(),
              HasSubstr("cluster 'ideal' has unlimited memory: choose a GPU with --cluster"));
}

// A GPU too small for the step: the replay runs out of memory even after the
// allocator releases its cache, and says so.
TEST(MemoryReplay, AStepThatDoesNotFitIsAFailedPrecondition) {
  Cluster small = H100();
  small.gpu.memory_bytes = 40 * kGiB;
  Result<ReplayedMemory> replayed = ReplayTorchtitanFsdp2(Llama8b(), small, Fsdp(8));
  ASSERT_FALSE(replayed.ok());
  EXPECT_EQ(replayed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(replayed.status().message(), HasSubstr("the step does not fit the GPU"));
}

}  // namespace
}  // namespace pipecast
