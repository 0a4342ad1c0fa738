// The matmul-aware time model (profiler/matmul_model.h); the table's sources
// and its calibration are in docs/calibration.md.
#include "profiler/matmul_model.h"

#include <algorithm>
#include <cmath>

namespace pipecast {
namespace {

// FlashAttention's backward over its forward in FLOPs: the forward runs two
// products (Q*K^T, P*V); the backward recomputes Q*K^T and forms dV, dP, dQ
// and dK: five (Dao 2023, FlashAttention-2, sec. 3.1.2 and 4.1).
constexpr double kFlashBackwardOverForward = 2.5;
// Causal attention: FlashAttention skips the blocks above the diagonal,
// about half of the s x s work for long sequences.
constexpr double kCausalShare = 0.5;

const GemmPreset kPresets[] = {
    {.gpu = "NVIDIA A100-SXM4-80GB",
     .sms = 108,
     // Fitted to the zero-bubble paper's 1F1B throughput on A100 (Qi et al.
     // 2024, Table 4; docs/calibration.md): 0.82 of per-SM peak balances the
     // 1.5B rows (7-9% slow) against the 28.3B rows (6-7% fast). The best
     // bf16 GEMM found by brute force on A100 SXM, 271.2 TFLOP/s at 1024 x
     // 10240 x 5120 (stas00/ml-engineering MAMF table), would need 0.90:
     // training's shapes do not all reach the best shape's rate.
     .mainloop_efficiency = 0.82,
     // FlashAttention-2 reaches 50-73% of A100 peak in the forward (Dao 2023,
     // abstract); the backward runs lower (assumed 0.55).
     .flash_forward_efficiency = 0.65,
     .flash_backward_efficiency = 0.55,
     .source = "A100 SXM: 108 SMs; mainloop 0.82 fitted to the zero-bubble paper's 1F1B "
               "throughput (Qi et al. 2024, Table 4; the MAMF best shape, 271.2 TFLOP/s, "
               "would need 0.90); "
               "FlashAttention-2 forward 0.65 (50-73% of peak, Dao 2023), backward 0.55 "
               "(assumed)"},
    {.gpu = "NVIDIA H100 80GB HBM3",
     .sms = 132,
     // 794.5 TFLOP/s at 2048 x 2048 x 13312 (MAMF table): one wave of 128
     // tiles at k + 128 with 0.836 of per-SM peak.
     .mainloop_efficiency = 0.836,
     // FlashAttention-3 reaches up to 75% of H100 peak in the forward (Shah
     // et al. 2024); 0.55 and 0.45 are assumed for common head sizes.
     .flash_forward_efficiency = 0.55,
     .flash_backward_efficiency = 0.45,
     .source = "H100 SXM: 132 SMs; mainloop 0.836 fits the MAMF 794.5 TFLOP/s best shape; "
               "FlashAttention forward 0.55, backward 0.45 (assumed, below FlashAttention-3's "
               "up to 75%)"},
    {.gpu = "NVIDIA H200",
     .sms = 132,
     // Same SMs, clocks and peak as H100 SXM; no sweep of the H200 SXM was
     // found, so the H100's figures are used (GH200's best 828.6 TFLOP/s is
     // in docs/calibration.md with its error).
     .mainloop_efficiency = 0.836,
     .flash_forward_efficiency = 0.55,
     .flash_backward_efficiency = 0.45,
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
                   "': the H100 SXM's table (132 SMs, mainloop 0.836, FlashAttention 0.55 / "
                   "0.45) with this GPU's peak and bandwidth";
  return generic;
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
  t.compute_seconds = t.waves * 2 * kTileRows * kTileCols * (g.k + kTileOverheadK) / per_sm_flops;
  t.memory_seconds =
      rates.element_bytes * g.batch * (g.m * g.k + g.k * g.n + g.m * g.n) / rates.hbm_bytes_per_s;
  t.seconds = std::max(t.compute_seconds, t.memory_seconds);
  return t;
}

double FlashSeconds(const GemmRates& rates, double forward_flops, bool backward, bool causal) {
  const double flops =
      forward_flops * (backward ? kFlashBackwardOverForward : 1) * (causal ? kCausalShare : 1);
  const double efficiency =
      backward ? rates.preset.flash_backward_efficiency : rates.preset.flash_forward_efficiency;
  return flops / (rates.peak_flops_per_s * efficiency);
}

}  // namespace pipecast
