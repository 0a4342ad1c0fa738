// The matmul-aware time model (profiler/matmul_model.h); the table's sources
// and its calibration are in docs/calibration.md.
#include "profiler/matmul_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace pipecast {
namespace {

const GemmPreset kPresets[] = {
    {.gpu = "NVIDIA A100-SXM4-80GB",
     .sms = 108,
     // kA100Mainloop: fitted to llm-foundry's five A100 compute rows, run as
     // they were made (docs/calibration.md, "Compute alone"): mean error
     // +0.1%. The best bf16 GEMM found by brute force on A100 SXM, 271.2
     // TFLOP/s at 1024 x 10240 x 5120 (stas00/ml-engineering MAMF table),
     // would need 0.90: training's shapes do not all reach the best shape's.
     .mainloop_efficiency = 0.86,
     .source = "A100 SXM: 108 SMs; mainloop 0.86 fitted to llm-foundry's A100 compute rows "
               "(docs/calibration.md; the MAMF best shape, 271.2 TFLOP/s, would need 0.90)"},
    {.gpu = "NVIDIA H100 80GB HBM3",
     .sms = 132,
     // kH100Mainloop: a training shape, m = 2048 tokens by n = k = 8192 (a
     // 70B model's projection), 720.3 TFLOP/s with cuBLAS 11.11.3, the one
     // PyTorch 2.0 + CUDA 11.8 ships (pytorch/pytorch#100850): four waves
     // of 128 x 256 tiles at k + 128. The best shape of a sweep (794.5
     // TFLOP/s, MAMF table, cuBLAS 12) would need 0.836.
     .mainloop_efficiency = 0.763,
     .source = "H100 SXM: 132 SMs; mainloop 0.763 from a training shape, 2048 x 8192 x 8192 at "
               "720.3 TFLOP/s with cuBLAS 11.11 (pytorch/pytorch#100850; the MAMF best shape, "
               "794.5 TFLOP/s with cuBLAS 12, would need 0.836)"},
    {.gpu = "NVIDIA H200",
     .sms = 132,
     // Same SMs, clocks and peak as H100 SXM; no sweep of the H200 SXM was
     // found, so the H100's figure is used.
     .mainloop_efficiency = 0.763,
     .source = "H200: the H100 SXM's table (same 132 SMs and 989 TFLOP/s peak; no measured "
               "H200 SXM sweep found)"},
};

double Waves(double tiles, int sms) { return std::ceil(tiles / sms); }

}  // namespace

GemmPreset GemmPresetFor(const GpuSpec& gpu) {
  for (const GemmPreset& p : kPresets) {
    if (p.gpu == gpu.name) return p;
  }
  GemmPreset generic = kPresets[1];
  generic.gpu = "generic";
  generic.source = "no table for GPU '" + gpu.name +
                   "': the H100 SXM's table (132 SMs, mainloop 0.763) with this GPU's peak and "
                   "bandwidth";
  return generic;
}

GemmPreset Fp8GemmPresetFor(const GpuSpec& gpu) {
  GemmPreset p = GemmPresetFor(gpu);
  p.tile_overhead_k = kFp8TileOverheadK;
  p.mainloop_efficiency = kFp8Mainloop;
  p.source = fmt::format(
      "FP8 products: {} SMs, tile 128 x 256, mainloop {} of the {:g} TFLOP/s FP8 peak and a "
      "tile's fixed part of {:g} k-columns, fitted to the four dense shapes of one FP8 GEMM table "
      "on H800 SXM (deepseek-ai/DeepGEMM#74: 4096 x 7168 x 16384 at 1470 TFLOP/s, k 512-2048 "
      "at 748-1204); the same for every recipe (docs/calibration.md 'FP8')",
      p.sms, kFp8Mainloop, gpu.peak_fp8_tflops, p.tile_overhead_k);
  return p;
}

GemmTime TimeGemm(const GemmRates& rates, const Gemm& g) {
  GemmTime t;
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0) return t;
  const int sms = rates.preset.sms;
  const double tiles_a = g.batch * std::ceil(g.m / kTileRows) * std::ceil(g.n / kTileCols);
  const double tiles_b = g.batch * std::ceil(g.m / kTileCols) * std::ceil(g.n / kTileRows);
  const double waves_a = Waves(tiles_a, sms);
  const double waves_b = Waves(tiles_b, sms);
  t.waves = std::min(waves_a, waves_b);
  t.tiles = waves_a <= waves_b ? tiles_a : tiles_b;
  const double per_sm_flops = rates.peak_flops_per_s / sms * rates.preset.mainloop_efficiency;
  t.compute_seconds =
      t.waves * 2 * kTileRows * kTileCols * (g.k + rates.preset.tile_overhead_k) / per_sm_flops;
  t.memory_seconds =
      rates.element_bytes * g.batch * (g.m * g.k + g.k * g.n + g.m * g.n) / rates.hbm_bytes_per_s;
  t.seconds = std::max(t.compute_seconds, t.memory_seconds);
  return t;
}

}  // namespace pipecast
