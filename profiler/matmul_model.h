// The matmul-aware time model of the analytic profiler: how long one matrix
// product (m, n, k) takes on a GPU, from the GPU's datasheet and a small
// per-GPU table (docs/calibration.md). FlashAttention's speed is in
// profiler/attention_rates.h.
//
// A product C[m x n] = A[m x k] * B[k x n] runs as output tiles of
// kTileRows x kTileCols, one thread block per SM at a time (cuBLAS/CUTLASS
// bf16 kernels on Ampere and Hopper). Its time is a roofline:
//   compute = waves * 2 * kTileRows * kTileCols * (k + kTileOverheadK)
//             / (peak / SMs * mainloop_efficiency)
//   waves   = ceil(tiles / SMs), tiles = batch * ceil(m / 128) * ceil(n / 256)
//             (the orientation with fewer waves, as cuBLAS's heuristics pick)
//   memory  = element_bytes * batch * (m*k + k*n + m*n) / (HBM bandwidth * memory_efficiency)
//   time    = max(compute, memory)
// so small products run below peak three ways: a partly filled last wave
// (wave quantisation), a tile's fixed prologue and epilogue (kTileOverheadK,
// which matters when k is small), and HBM bandwidth when m or n is small.
//
// Units: seconds, FLOPs, bytes. Stateless; safe from several threads.
#ifndef PIPECAST_PROFILER_MATMUL_MODEL_H_
#define PIPECAST_PROFILER_MATMUL_MODEL_H_

#include <cstdint>
#include <string>

#include "sim/cluster.h"

namespace pipecast {

// Output tile of one thread block: 128 x 256, the largest bf16 tile cuBLAS
// and CUTLASS use on A100 and H100 (NVIDIA, "Matrix Multiplication Background
// User's Guide", sec. 2.3 and 3.2).
inline constexpr double kTileRows = 128;
inline constexpr double kTileCols = 256;
// A tile's fixed cost (filling the software pipeline, writing the output
// tile) as extra k-columns of mainloop work: fitted to the H100 square bf16
// sweep of docs/calibration.md (1024^3 reaches 176 TFLOP/s, not 790).
inline constexpr double kTileOverheadK = 128;

// The per-GPU table (docs/calibration.md, "GEMM table").
struct GemmPreset {
  std::string gpu;             // GpuSpec::name it applies to; "generic" when none matched
  int sms = 0;                 // streaming multiprocessors
  double mainloop_efficiency;  // share of per-SM peak in a tile's mainloop
  std::string source;          // where the numbers come from
  // A tile's fixed cost in k-columns at this preset's mainloop rate:
  // kTileOverheadK for bf16, kFp8TileOverheadK for FP8 (Fp8GemmPresetFor).
  double tile_overhead_k = kTileOverheadK;
};

// The table row for `gpu` (matched by GpuSpec::name: A100-SXM4-80GB,
// H100 80GB HBM3, H200), or the "generic" row (the H100's figures with the
// GPU's own peak and bandwidth, 132 SMs) for any other GPU; the row says so.
GemmPreset GemmPresetFor(const GpuSpec& gpu);

// The FP8 products' two constants, fitted together (least squares in the
// log of the rate) to the four dense shapes of one published FP8 GEMM table
// on H800 SXM (132 SMs, 1979 TFLOP/s FP8 dense, as H100 SXM), DeepGEMM's
// 1x128 / 128x128 block-scaled kernel (deepseek-ai/DeepGEMM#74, merged, the
// "Opti" column): 4096 x 24576 x 1536 at 1166, 4096 x 32768 x 512 at 748,
// 4096 x 7168 x 16384 at 1470 and 4096 x 7168 x 2048 at 1204 TFLOP/s; the
// model reads them back at -2.4%, +0.8%, +0.7%, +1.0%. Held out, the same
// table's grouped (MoE) rows: 4 x 8192 x 4096 x 7168 at 1381 (model +3.1%)
// and 4 x 8192 x 7168 x 2048 at 1262 (-1.9%). Until session 8 the mainloop
// (0.778) was fitted to the k = 16384 point alone with the fixed part set to
// bf16's time (261 k-columns), which read the small-k shapes 9-32% fast.
//
// kFp8Mainloop: the share of the FP8 per-SM peak a tile's mainloop reaches.
// Taken for the per-tensor recipes too: cuBLAS's per-tensor FP8 kernels run
// 1.88-2.09x their bf16 rate at large shapes (pytorch/FBGEMM#2546, H100),
// where the model gives 1.98-1.99x (docs/calibration-fp8.md "FP8").
inline constexpr double kFp8Mainloop = 0.796;
// kFp8TileOverheadK: an FP8 tile's fixed part (pipeline fill, scales, the
// bf16 output tile) in k-columns at the FP8 mainloop rate: 525, about twice
// the time bf16's kTileOverheadK takes (128 k-columns at the bf16 rate are
// 267 at this FP8 rate on H100).
inline constexpr double kFp8TileOverheadK = 525;

// kGroupedGemmGroupSeconds: the fixed cost of one group (one local expert)
// in one grouped GEMM call, on top of the one product of all its rows the
// model times (TimeGemm of sum(m) x n x k). Fitted by least squares on the
// two TE 2.7 points of NVIDIA/TransformerEngine#2045 (merged, TE 2.8; H100
// SXM, bf16, CUDA 12.9, `general_grouped_gemm`'s multi-stream cuBLAS, TE's
// default): 8 x 4096 x 768 x 2048 at 627.9 TFLOP/s (164.2 us against the
// model's 149.6: 1.8 us per group) and 16 x 2048 x 768 x 2048 at 553.9
// (186.1 us: 2.3 us per group); 2.19 us reads them back at -1.7% and +0.8%
// (profiler/matmul_calibration_test.cc). Checked on a third, independent
// point, tgale96/grouped_gemm#37 (128 groups of 512 rows, forward and
// backward): 441 TFLOP/s, between its two kernels' ~390 and ~480. A
// component benchmark, held for every GPU and for FP8 (no FP8 or non-H100
// figure was found; docs/research/kernel-benchmarks.md section 3.1). The
// profile writes it as the MoE layer's `group_gemm_us`; the simulator
// charges it for the local experts (docs/simulator.md "Expert parallelism").
inline constexpr double kGroupedGemmGroupSeconds = 2.19e-6;

// The GEMM table for FP8 products on `gpu`: GemmPresetFor's SMs and tile,
// kFp8Mainloop, kFp8TileOverheadK, and their source. REQUIRES:
// gpu.peak_fp8_tflops > 0.
GemmPreset Fp8GemmPresetFor(const GpuSpec& gpu);

// One product, or `batch` independent products of the same shape in one
// kernel (batched GEMM: the attention scores of every head).
struct Gemm {
  double m = 0, n = 0, k = 0;
  double batch = 1;
  double Flops() const { return 2 * m * n * k * batch; }
};

struct GemmTime {
  double seconds = 0;
  double compute_seconds = 0;
  double memory_seconds = 0;
  double waves = 0;
  double tiles = 0;
};

// Rates of one GPU for the model: its peak, its bandwidth, the preset.
struct GemmRates {
  double peak_flops_per_s = 0;  // dense peak of the products' type (bf16, or FP8)
  double hbm_bytes_per_s = 0;   // HBM bandwidth reached (datasheet x memory_efficiency)
  double element_bytes = 2;     // bytes per matrix element
  GemmPreset preset;
};

// The roofline time of `gemm` (header comment). REQUIRES: m, n, k, batch >= 1
// or the product is empty (then 0).
GemmTime TimeGemm(const GemmRates& rates, const Gemm& gemm);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_MATMUL_MODEL_H_
