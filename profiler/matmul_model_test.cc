// Hand-worked cases of the matmul-aware time model (profiler/matmul_model.h)
// and of the analytic profiler's per-GPU costs under tensor parallelism.
#include "profiler/matmul_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/formats.h"
#include "profiler/analytic.h"

namespace pipecast {
namespace {

// h100-sxm: 989 TFLOP/s over 132 SMs at the table's 0.763; 3350 GB/s at 0.7.
GemmRates H100() {
  const GpuSpec gpu = ClusterPreset("h100-sxm")->gpu;
  return GemmRates{.peak_flops_per_s = 989e12,
                   .hbm_bytes_per_s = 3350e9 * 0.7,
                   .element_bytes = 2,
                   .preset = GemmPresetFor(gpu)};
}
constexpr double kH100PerSm = 989e12 / 132 * 0.763;  // FLOP/s of one SM's mainloop
constexpr double kTile = 2.0 * 128 * 256;            // FLOPs of one tile per k-column

TEST(MatmulModel, PresetTableMatchesTheDocumentedRows) {
  EXPECT_EQ(H100().preset.sms, 132);
  EXPECT_DOUBLE_EQ(H100().preset.mainloop_efficiency, 0.763);
  const GemmPreset a100 = GemmPresetFor(ClusterPreset("a100-80gb")->gpu);
  EXPECT_EQ(a100.sms, 108);
  EXPECT_DOUBLE_EQ(a100.mainloop_efficiency, 0.86);
  EXPECT_EQ(GemmPresetFor(ClusterPreset("h200")->gpu).sms, 132);
  GpuSpec other;
  other.name = "some GPU";
  EXPECT_EQ(GemmPresetFor(other).gpu, "generic");
  EXPECT_NE(GemmPresetFor(other).source.find("some GPU"), std::string::npos);
}

TEST(MatmulModel, SquareProductHandWorkedOnH100) {
  // 4096^3: 32 x 16 = 512 tiles of 128 x 256 over 132 SMs = ceil(3.88) = 4
  // waves, each tile 2*128*256*(4096 + 128) FLOPs of mainloop work.
  const GemmTime t = TimeGemm(H100(), Gemm{4096, 4096, 4096, 1});
  EXPECT_EQ(t.tiles, 512);
  EXPECT_EQ(t.waves, 4);
  EXPECT_NEAR(t.compute_seconds, 4 * kTile * (4096 + 128) / kH100PerSm, 1e-12);
  EXPECT_NEAR(t.compute_seconds * 1e6, 193.69, 0.01);
  // Memory: 3 x 4096^2 bf16 elements over 2345 GB/s = 42.9 us < compute.
  EXPECT_NEAR(t.memory_seconds, 2.0 * 3 * 4096 * 4096 / 2345e9, 1e-12);
  EXPECT_DOUBLE_EQ(t.seconds, t.compute_seconds);
}

// FP8 on h100-sxm: the table's SMs, kFp8Mainloop = 0.796 of the 1979 TFLOP/s
// FP8 peak and kFp8TileOverheadK = 525 k-columns, both fitted to the dense
// rows of deepseek-ai/DeepGEMM#74 (H800 SXM: 132 SMs, the H100 SXM's FP8 peak).
GemmRates H100Fp8() {
  const GpuSpec gpu = ClusterPreset("h100-sxm")->gpu;
  return GemmRates{.peak_flops_per_s = gpu.peak_fp8_tflops * 1e12,
                   .hbm_bytes_per_s = 3350e9 * 0.7,
                   .element_bytes = 1,
                   .preset = Fp8GemmPresetFor(gpu)};
}
constexpr double kFp8PerSm = 1979e12 / 132 * 0.796;  // FLOP/s of one SM's FP8 mainloop

TEST(MatmulModel, Fp8ProductReproducesItsComponentBenchmark) {
  const GemmRates fp8 = H100Fp8();
  EXPECT_DOUBLE_EQ(fp8.preset.mainloop_efficiency, kFp8Mainloop);
  EXPECT_DOUBLE_EQ(fp8.preset.tile_overhead_k, 525);
  // The fixed part takes about twice bf16's time: 525 / 1575.3 vs 128 / 754.6
  // (TFLOP/s of mainloop per GPU).
  const double fixed_bf16 = kTileOverheadK / kH100PerSm;
  const double fixed_fp8 = kFp8TileOverheadK / kFp8PerSm;
  EXPECT_NEAR(fixed_fp8 / fixed_bf16, 1.965, 0.001);
  // 4096 x 7168 x 16384 at 1470 TFLOP/s: 32 x 28 = 896 tiles, 7 waves of
  // 2*128*256*(16384 + 525) FLOPs per tile: 9.621e11 FLOPs in 650.0 us = 1480
  // (+0.7%).
  const Gemm g{4096, 7168, 16384, 1};
  const GemmTime t = TimeGemm(fp8, g);
  EXPECT_EQ(t.waves, 7);
  EXPECT_NEAR(t.seconds, 7 * kTile * (16384 + 525) / kFp8PerSm, 1e-12);
  EXPECT_NEAR(g.Flops() / t.seconds / 1e12, 1480.1, 0.1);
  // The bf16 product of the same shape: the FP8 one runs 2.04x as fast,
  // within pytorch/FBGEMM#2546's 1.88-2.09x for cuBLAS-class FP8 on H100.
  const double ratio = TimeGemm(H100(), g).seconds / t.seconds;
  EXPECT_GT(ratio, 1.88);
  EXPECT_LT(ratio, 2.09);
}

// The rest of DeepGEMM#74's table, hand-worked (TFLOP/s = 2mnk / seconds):
// - 4096 x 32768 x 512: 32 x 128 = 4096 tiles, 32 waves of k + 525 = 1037
//   columns: 754.2 against 748 (+0.8%).
// - 4096 x 24576 x 1536: 3072 tiles, 24 waves of 2061 columns: 1138.4 against
//   1166 (-2.4%).
// - 4096 x 7168 x 2048: 896 tiles, 7 waves of 2573 columns: 1215.9 against
//   1204 (+1.0%). Before the joint fit (0.778, 261): 989, 1276, 1324: +32%,
//   +9%, +10%.
// Held out, the grouped (MoE) rows, one product of all groups' rows as the
// profiler times routed experts: 4 x 8192 x 4096 x 7168 (4096 tiles, 32
// waves) 1423.3 against 1381 (+3.1%); 4 x 8192 x 7168 x 2048 (7168 tiles, 55
// waves) 1238.0 against 1262 (-1.9%).
TEST(MatmulModel, Fp8ProductsAcrossTheDeepGemmTable) {
  const GemmRates fp8 = H100Fp8();
  struct Row {
    Gemm g;
    double waves, published, model;
  };
  const Row rows[] = {{{4096, 32768, 512, 1}, 32, 748, 754.2},
                      {{4096, 24576, 1536, 1}, 24, 1166, 1138.4},
                      {{4096, 7168, 2048, 1}, 7, 1204, 1215.9},
                      {{4 * 8192, 4096, 7168, 1}, 32, 1381, 1423.3},
                      {{4 * 8192, 7168, 2048, 1}, 55, 1262, 1238.0}};
  for (const Row& r : rows) {
    const GemmTime t = TimeGemm(fp8, r.g);
    EXPECT_EQ(t.waves, r.waves) << r.g.n << " x " << r.g.k;
    EXPECT_NEAR(t.seconds, r.waves * kTile * (r.g.k + 525) / kFp8PerSm, 1e-12);
    const double tflops = r.g.Flops() / t.seconds / 1e12;
    EXPECT_NEAR(tflops, r.model, 0.1) << r.g.n << " x " << r.g.k;
    EXPECT_LT(std::abs(tflops / r.published - 1), 0.035) << r.g.n << " x " << r.g.k;
  }
}

TEST(MatmulModel, PartWaveCostsAWholeWave) {
  // 2048 x 2048: 16 x 8 = 128 tiles, one wave on 132 SMs; 2048 x 2304: 16 x 9
  // = 144 tiles, two waves: 12.5% more FLOPs take twice as long.
  const GemmTime one = TimeGemm(H100(), Gemm{2048, 2048, 2048, 1});
  const GemmTime two = TimeGemm(H100(), Gemm{2048, 2304, 2048, 1});
  EXPECT_EQ(one.waves, 1);
  EXPECT_EQ(two.waves, 2);
  EXPECT_NEAR(one.seconds, kTile * (2048 + 128) / kH100PerSm, 1e-12);
  EXPECT_DOUBLE_EQ(two.seconds, 2 * one.seconds);
}

TEST(MatmulModel, TransposedTilingWhenItNeedsFewerWaves) {
  // 17024 x 128: as 128 x 256 tiles 133 x 1 = 133 (two waves on 132 SMs), as
  // 256 x 128 tiles 67 x 1 = 67 (one wave): the second is taken.
  const GemmTime t = TimeGemm(H100(), Gemm{128 * 133, 128, 1024, 1});
  EXPECT_EQ(t.tiles, 67);
  EXPECT_EQ(t.waves, 1);
  // 16896 x 256: 132 x 1 = 132 tiles one way, 66 x 2 = 132 the other: one wave.
  EXPECT_EQ(TimeGemm(H100(), Gemm{128 * 132, 256, 1024, 1}).waves, 1);
}

TEST(MatmulModel, MemoryBoundWhenBandwidthIsShort) {
  // A GPU of 132 SMs at 1e12 FLOP/s each and 1 GB/s: 256^3 is 2 x 1 tiles,
  // one wave of 2*128*256*(256 + 128) / 1e12 = 25.2 us; its 3 x 256^2 bf16
  // elements take 393.2 us at 1 GB/s.
  GemmRates rates = H100();
  rates.peak_flops_per_s = 132e12;
  rates.preset.mainloop_efficiency = 1;
  rates.hbm_bytes_per_s = 1e9;
  const GemmTime t = TimeGemm(rates, Gemm{256, 256, 256, 1});
  EXPECT_NEAR(t.compute_seconds, kTile * 384 / 1e12, 1e-15);
  EXPECT_NEAR(t.memory_seconds, 2.0 * 3 * 65536 / 1e9, 1e-15);
  EXPECT_DOUBLE_EQ(t.seconds, t.memory_seconds);
}

TEST(MatmulModel, FourTimesTheTokensFillTheSmsBetter) {
  // A t = 8 QKV product of a 1.3B model (h 2048): n = 3*2048/8 = 768, k =
  // 2048. At b = 1 (m = 2048) 16 x 3 = 48 tiles fill 48 of 132 SMs; at b = 4
  // (m = 8192) 192 tiles take 2 waves: 4x the work in 2x the time.
  const GemmTime b1 = TimeGemm(H100(), Gemm{2048, 768, 2048, 1});
  const GemmTime b4 = TimeGemm(H100(), Gemm{8192, 768, 2048, 1});
  EXPECT_EQ(b1.waves, 1);
  EXPECT_EQ(b4.waves, 2);
  EXPECT_DOUBLE_EQ(b4.seconds / b1.seconds, 2.0);
}

// A GPT-3 2.7B-like shape: 4 x 32 heads, h 2560, s 2048, V 51200.
TransformerSpec Spec(std::vector<int> sizes = {1}) {
  TransformerSpec spec;
  spec.name = "tp-test";
  spec.layers = 2;
  spec.hidden = 2560;
  spec.heads = 32;
  spec.sequence_length = 2048;
  spec.vocab = 51200;
  spec.microbatch_sizes = std::move(sizes);
  return spec;
}

Model At(const TransformerSpec& spec, int t, bool sp, Attention attention = Attention::kEager,
         std::vector<TensorParallelCost>* costs = nullptr) {
  AnalyticOptions options;
  options.attention = attention;
  Result<Model> model = EstimateTransformerAt(spec, options, {t, sp}, costs);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? *model : Model{};
}

TEST(MatmulModel, LargerMicrobatchRunsFasterPerSampleOnALayer) {
  // The model's consequence: per-sample time falls with b (here at t = 8,
  // where the products are small), so the planner can prefer b > 1.
  const Model model = At(Spec({1, 4}), 8, false, Attention::kFlash2);
  const LayerProfile& b1 = model.layers[1].profiles[0];
  const LayerProfile& b4 = model.layers[1].profiles[1];
  EXPECT_LT(static_cast<double>(b4.forward_ns) / 4, 0.9 * static_cast<double>(b1.forward_ns));
}

TEST(MatmulModel, PerGpuActivationsAreKorthikantiExactly) {
  // Eager, 16-bit, f = 4h: sbh(10 + 24/t + 5as/(ht)) without sequence
  // parallelism and sbh(34/t + 5as/(ht)) with it (Korthikanti et al. 2022,
  // Table 2), for b = 1 and 2.
  const double s = 2048, h = 2560, a = 32;
  for (int t : {1, 2, 4, 8}) {
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;
      const Model model = At(Spec({1, 2}), t, sp);
      for (const LayerProfile& p : model.layers[1].profiles) {
        const double b = p.microbatch_size;
        const double per_sbh =
            sp ? 34.0 / t + 5 * a * s / (h * t) : 10 + 24.0 / t + 5 * a * s / (h * t);
        EXPECT_EQ(p.activation_bytes, std::llround(s * b * h * per_sbh))
            << "t=" << t << " sp=" << sp << " b=" << b;
        EXPECT_EQ(*p.attention_core_bytes, std::llround(5 * a * s * s * b / t));
        EXPECT_EQ(*p.checkpoint_bytes, std::llround(2 * s * b * h / (sp ? t : 1)));
      }
    }
  }
}

TEST(MatmulModel, PerGpuFlashActivationsDropTheCoreAndKeepLogsumexp) {
  // Flash: the 5as/(ht) term becomes 4as/t bytes of fp32 logsumexp per
  // sample (its heads split over t) + a 16-byte RNG state per call.
  const double s = 2048, h = 2560, a = 32;
  const Model model = At(Spec(), 4, false, Attention::kFlash2);
  const LayerProfile& p = model.layers[1].profiles[0];
  EXPECT_EQ(p.activation_bytes, std::llround(s * h * (10 + 24.0 / 4) + 4 * a * s / 4 + 16));
  const Model sp = At(Spec(), 4, true, Attention::kFlash2);
  EXPECT_EQ(sp.layers[1].profiles[0].activation_bytes,
            std::llround(s * h * 34.0 / 4 + 4 * a * s / 4 + 16));
}

TEST(MatmulModel, PerGpuParametersSplitWeightsAndReplicateNorms) {
  const int64_t h = 2560, v = 51200, s = 2048;
  for (int t : {1, 2, 4, 8}) {
    std::vector<TensorParallelCost> costs;
    const Model model = At(Spec(), t, false, Attention::kEager, &costs);
    // Block: 12h^2 + 7h split (QKV and fc1 weights and biases, projection
    // and fc2 weights) over t; the projection and fc2 biases and the two
    // layernorms (2h + 4h) replicated.
    EXPECT_EQ(model.layers[1].parameters, (12 * h * h + 7 * h) / t + 6 * h) << t;
    // Vocabulary-parallel token table, replicated positions; head: the
    // final layernorm replicated, the projection split.
    EXPECT_EQ(model.layers[0].parameters, v / t * h + s * h) << t;
    EXPECT_EQ(model.layers[3].parameters, 2 * h + v / t * h) << t;
    ASSERT_EQ(costs.size(), 4u);
    EXPECT_EQ(costs[1].parameters, model.layers[1].parameters);
    EXPECT_EQ(costs[1].forward_collectives, 2);
    EXPECT_EQ(costs[1].backward_collectives, 2);
    EXPECT_DOUBLE_EQ(costs[1].comm_bytes_per_sample, 2.0 * s * h);
  }
}

TEST(MatmulModel, PerGpuBlockTimeIsTheSmallerProductsAndTheMemoryKernels) {
  // Given b = 1 at t = 4 with eager attention (s 2048, h 2560, a 32, f 4h,
  // bf16), each kernel at least 7 us: the forward is the four products at
  // n/4 or k/4, the core's b*a/4 batched products, its softmax (read and
  // write a/4 heads of s x s) and dropout (read, write, 1-byte mask), and the
  // block's memory-bound kernels: two layernorms (read and write s x h), two
  // residual adds with dropout (read 2, write 1, mask) and GeLU (read and
  // write s x f/4), at 3350 GB/s x 0.7.
  const Model model = At(Spec(), 4, false);
  const GemmRates r = H100();
  const double s = 2048, h = 2560, a = 32, e = 2, bw = 3350e9 * 0.7;
  auto k = [](double seconds) { return std::max(seconds, 7e-6); };
  auto gemm = [&](Gemm g) { return k(TimeGemm(r, g).seconds); };
  double forward = gemm({s, 3 * h / 4, h}) + gemm({s, h, h / 4}) + gemm({s, 4 * h / 4, h}) +
                   gemm({s, h, 4 * h / 4}) + gemm({s, s, h / a, a / 4}) +
                   gemm({s, h / a, s, a / 4});
  const double scores = a / 4 * s * s, full = s * h * e;
  for (double bytes : {2 * scores * e, scores * (2 * e + 1), 2 * full, 3 * full + s * h, 2 * full,
                       2 * 4 * h / 4 * s * e, 3 * full + s * h}) {
    forward += k(bytes / bw);
  }
  const LayerProfile& p = model.layers[1].profiles[0];
  EXPECT_NEAR(static_cast<double>(p.forward_ns), forward * 1e9, 2);
  // The weight gradient: the four weight-gradient products and the bias
  // gradients (read each product's output gradient: h, f/4, h, 3h/4).
  double weight = gemm({h, 3 * h / 4, s}) + gemm({h / 4, h, s}) + gemm({h, h, s}) + gemm({h, h, s});
  for (double width : {h, 4 * h / 4, h, 3 * h / 4}) weight += k(s * width * e / bw);
  EXPECT_NEAR(static_cast<double>(*p.backward_weight_ns), weight * 1e9, 2);
}

TEST(MatmulModel, TensorParallelDegreesMustDivideTheHeadsAndTheWidth) {
  AnalyticOptions options;
  TransformerSpec spec = Spec();
  Result<Model> bad = EstimateTransformerAt(spec, options, {3, false});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--tensor-parallel 3 does not divide --heads 32"),
            std::string::npos)
      << bad.status().message();
  Result<Model> sp1 = EstimateTransformerAt(spec, options, {1, true});
  ASSERT_FALSE(sp1.ok());
  EXPECT_NE(sp1.status().message().find("sequence parallelism needs --tensor-parallel above 1"),
            std::string::npos);
  Result<std::string> twice = EstimateTransformerJson(spec, options, {2, 2});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("--tensor-parallel lists 2 twice"), std::string::npos);
}

TEST(MatmulModel, WriterAtOneIsTodaysModelJson) {
  AnalyticOptions options;
  Result<std::string> text = EstimateTransformerJson(Spec({1, 2}), options, {1});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, ModelToJson(*EstimateTransformer(Spec({1, 2}), options)));
}

TEST(MatmulModel, WriterEmitsPerTensorParallelProfiles) {
  // Given --tensor-parallel 1,2,4 and micro-batch sizes 1 and 2.
  AnalyticOptions options;
  options.attention = Attention::kEager;
  Result<std::string> text = EstimateTransformerJson(Spec({1, 2}), options, {1, 2, 4});
  ASSERT_TRUE(text.ok()) << text.status().message();
  const nlohmann::json doc = nlohmann::json::parse(*text);
  // Then each layer has 2 sizes x (t=1, and t=2, 4 each with sp false/true).
  const nlohmann::json& block = doc["layers"][1]["profiles"];
  ASSERT_EQ(block.size(), 2u * (1 + 2 * 2));
  EXPECT_FALSE(block[0].contains("tensor_parallel"));  // t = 1: today's keys
  const double s = 2048, h = 2560, a = 32;
  int seen = 0;
  for (const nlohmann::json& p : block) {
    if (!p.contains("tensor_parallel")) continue;
    ++seen;
    const int t = p["tensor_parallel"];
    const bool sp = p["sequence_parallel"];
    const double b = p["microbatch_size"];
    EXPECT_EQ(p["tp_comm_bytes"].get<double>(), 2 * b * s * h);
    EXPECT_EQ(p["tp_forward_collectives"], 2);
    EXPECT_EQ(p["tp_backward_collectives"], 2);
    const double per_sbh =
        sp ? 34.0 / t + 5 * a * s / (h * t) : 10 + 24.0 / t + 5 * a * s / (h * t);
    EXPECT_EQ(p["activation_bytes"].get<int64_t>(), std::llround(s * b * h * per_sbh));
  }
  EXPECT_EQ(seen, 8);
  const nlohmann::json& embedding = doc["layers"][0]["profiles"].back();
  EXPECT_EQ(embedding["tp_forward_collectives"], 1);
  EXPECT_EQ(embedding["tp_backward_collectives"], 0);
  const nlohmann::json& head = doc["layers"][3]["profiles"].back();
  EXPECT_EQ(head["tp_forward_collectives"], 0);
  EXPECT_EQ(head["tp_backward_collectives"], 1);
  // Per-GPU parameters in source.tensor_parallel.
  const nlohmann::json& tp = doc["source"]["tensor_parallel"];
  EXPECT_EQ(tp["degrees"], nlohmann::json({1, 2, 4}));
  const int64_t hh = 2560;
  EXPECT_EQ(tp["parameters_per_gpu"]["4"]["block"].get<int64_t>(),
            (12 * hh * hh + 7 * hh) / 4 + 6 * hh);
  // Degrees without 1 still write the t = 1 profiles, and say so.
  Result<std::string> two = EstimateTransformerJson(Spec(), options, {2});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(nlohmann::json::parse(*two)["source"]["tensor_parallel"]["degrees"],
            nlohmann::json({1, 2}));
  // t = 1's layer parameters are the whole layer's.
  EXPECT_EQ(doc["layers"][1]["parameters"].get<int64_t>(), 12 * hh * hh + 13 * hh);
}

}  // namespace
}  // namespace pipecast
