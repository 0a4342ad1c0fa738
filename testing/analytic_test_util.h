// Shared by the analytic profiler's tests (profiler/analytic_test.cc,
// profiler/analytic_recompute_test.cc): the hand-worked shapes, a GPU with round numbers, and
// the time models the closed forms check.
#ifndef PIPECAST_TESTING_ANALYTIC_TEST_UTIL_H_
#define PIPECAST_TESTING_ANALYTIC_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>

#include "formats/file_util.h"
#include "formats/formats.h"
#include "profiler/analytic.h"

namespace pipecast::test_util {

// The tiny world of the hand computations below: h 4, a 2, s 8, V 10,
// 2 blocks, f = 4h = 16, bf16, learned positions, untied head.
inline TransformerSpec TinySpec() {
  TransformerSpec spec;
  spec.name = "tiny";
  spec.layers = 2;
  spec.hidden = 4;
  spec.heads = 2;
  spec.sequence_length = 8;
  spec.vocab = 10;
  spec.microbatch_sizes = {1};
  return spec;
}

// GPT-3 6.7B (Brown et al. 2020, table 2.1): 32 layers, h 4096, 32 heads,
// s 2048, GPT-2 vocabulary, tied embeddings as in GPT-3.
inline TransformerSpec Gpt3_6_7B() {
  TransformerSpec spec;
  spec.name = "gpt3-6.7b";
  spec.layers = 32;
  spec.hidden = 4096;
  spec.heads = 32;
  spec.sequence_length = 2048;
  spec.vocab = 50257;
  spec.tied_embeddings = true;
  spec.microbatch_sizes = {1, 2, 4, 8};
  return spec;
}

// A GPU with round numbers, so that times are easy to compute by hand:
// 1e6 FLOP/s and 1e6 bytes/s at efficiency 1, i.e. 1 us per FLOP and per byte.
inline std::string UnitGpuFile() {
  const std::string path = ::testing::TempDir() + "/analytic_test_unit_gpu.json";
  const std::string text = R"({
    "format": "pipecast-cluster/1", "name": "unit-gpu", "gpus_per_node": 8,
    "gpu": {"name": "unit", "memory_bytes": 0, "peak_tflops": 1e-6,
            "memory_bandwidth_gbps": 1e-3},
    "intra_node": {"bandwidth_gbps": 0, "latency_us": 0},
    "inter_node": {"bandwidth_gbps": 0, "latency_us": 0}})";
  EXPECT_TRUE(WriteFileAtomic(path, text).ok());
  return path;
}

inline AnalyticOptions Eager(AnalyticOptions options = {}) {
  options.attention = Attention::kEager;
  return options;
}

// The flat time model (every FLOP at matmul_efficiency of peak), whose
// closed forms the hand counts below check.
inline AnalyticOptions Flat(AnalyticOptions options = {}) {
  options.time_model = TimeModel::kFlat;
  return options;
}

inline AnalyticOptions UnitOptions() {
  AnalyticOptions options = Flat();
  options.gpu_preset = UnitGpuFile();
  options.matmul_efficiency = 1.0;
  options.memory_efficiency = 1.0;
  return options;
}

inline Model Estimate(const TransformerSpec& spec, const AnalyticOptions& options = {}) {
  Result<Model> model = EstimateTransformer(spec, options);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? *model : Model{};
}

inline Status EstimateError(const TransformerSpec& spec, const AnalyticOptions& options = {}) {
  Result<Model> model = EstimateTransformer(spec, options);
  EXPECT_FALSE(model.ok());
  return model.status();
}

}  // namespace pipecast::test_util

#endif  // PIPECAST_TESTING_ANALYTIC_TEST_UTIL_H_
