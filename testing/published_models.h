// Test helpers shared by the held-out calibration tests (tests/*_calibration_test.cc,
// tests/automodel_moe_rows_test.cc): architectures typed from a published config.json where
// examples/hf has no file, and the analytic profile of a balanced-gate DeepEP MoE run.
#ifndef PIPECAST_TESTING_PUBLISHED_MODELS_H_
#define PIPECAST_TESTING_PUBLISHED_MODELS_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/formats.h"
#include "profiler/analytic.h"
#include "profiler/hf_config.h"
#include "sim/collectives.h"
#include "testing/cli_test_util.h"

namespace pipecast::test_util {

// The architecture of examples/hf/<file> (a failed read fails the calling test).
inline TransformerSpec HfExampleSpec(const std::string& file) {
  Result<HfConfig> config = LoadHfConfig(cli_test::Example("hf/" + file));
  EXPECT_TRUE(config.ok()) << file << ": " << config.status().message();
  return config.ok() ? config->architecture : TransformerSpec{};
}

// openai/gpt-oss-120b and -20b config.json, typed (examples/ has no gpt_oss reader): h 2880,
// 64 query heads of 64, 8 key/value heads, expert width 2880, top-4, vocabulary 201088,
// sliding-window (128) and full attention alternating from a sliding first block; 120B: 36
// blocks of 128 experts; 20B: 24 blocks of 32 (the 20B's config.json as stored in the search
// index, find_string id 31112482743: num_hidden_layers 24, num_local_experts 32). Attention
// sinks, biases and the clamped SwiGLU are not modelled.
inline TransformerSpec GptOssSpec(int layers, int experts) {
  TransformerSpec spec;
  spec.name = layers == 36 ? "gpt-oss-120b" : "gpt-oss-20b";
  spec.layers = layers;
  spec.hidden = 2880;
  spec.heads = 64;
  spec.head_dim = 64;
  spec.kv_heads = 8;
  spec.ffn_hidden = 2880;
  spec.vocab = 201088;
  spec.learned_positions = false;
  spec.gated_mlp = true;
  spec.norm = NormKind::kRmsNorm;
  spec.activation = "silu";
  spec.sliding_window = 128;
  for (int block = 1; block < layers; block += 2) spec.full_attention_layers.push_back(block);
  spec.moe.experts = experts;
  spec.moe.experts_per_token = 4;
  spec.moe.expert_ffn = 2880;
  return spec;
}

// `spec` profiled as `profiler analytic --gpu h100-sxm --seq 4096 --microbatch-sizes
// <microbatch_size> --attention <attention> --moe-imbalance 1.0 --moe-dispatcher deepep` writes
// it: a run with a balanced gate (NeMo AutoModel's fake_balanced_gate) and DeepEP.
inline Result<Model> BalancedDeepEpProfile(TransformerSpec spec, int microbatch_size,
                                           Attention attention) {
  spec.sequence_length = 4096;
  spec.microbatch_sizes = {microbatch_size};
  AnalyticOptions analytic;
  analytic.gpu_preset = "h100-sxm";
  analytic.attention = attention;
  analytic.moe_imbalance = 1.0;
  analytic.moe_dispatcher = ExpertDispatcher::kDeepEp;
  Result<std::string> json = EstimateTransformerJson(spec, analytic, {1});
  if (!json.ok()) return json.status();
  return ParseModel(*json, spec.name);
}

}  // namespace pipecast::test_util

#endif  // PIPECAST_TESTING_PUBLISHED_MODELS_H_
