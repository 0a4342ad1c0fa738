// FlashAttention kernels' speed for the analytic profiler's time model: the
// forward and backward TFLOP/s of one kernel on one GPU, read from published
// benchmark figures (docs/research/kernel-benchmarks.md section 2,
// docs/calibration.md "Attention") and interpolated in the sequence length and
// head dimension.
//
// FLOPs follow the benchmarks' convention (Dao-AILab/flash-attention,
// benchmarks/benchmark_flash_attention.py): the forward is 4*s^2*h per sample
// (Q*K^T and P*V), halved with a causal mask; the backward is 2.5x the
// forward's (it recomputes the scores and forms dV, dP, dQ and dK).
//
// Stateless functions over constant tables; safe from several threads.
#ifndef PIPECAST_PROFILER_ATTENTION_RATES_H_
#define PIPECAST_PROFILER_ATTENTION_RATES_H_

#include <array>
#include <string>

#include "base/status.h"
#include "sim/cluster.h"

namespace pipecast {

// Which fused attention kernel a training run uses (--attention).
enum class FlashKernel {
  kFlash2,  // FlashAttention-2 (Dao 2023), CUDA; what PyTorch SDPA's flash backend runs
  kFlash3,  // FlashAttention-3 (Shah et al. 2024), Hopper only (wgmma, TMA)
  kTriton,  // FlashAttention's Triton kernel (flash_attn_triton.py), as llm-foundry ran it
  // PyTorch SDPA's flash backend: the FlashAttention-2 PyTorch vendors
  // (aten/src/ATen/native/transformers/cuda/flash_attn), as torchtitan's
  // eager runs of late 2024 ran it: kFlash2's table times the measured
  // ratios below.
  kSdpaFlash2,
};

// "flash2", "flash3", "triton" or "sdpa-flash2".
const char* FlashKernelName(FlashKernel kernel);

// FlashAttention's backward over its forward in FLOPs: the forward runs two
// products (Q*K^T, P*V); the backward recomputes Q*K^T and forms dV, dP, dQ
// and dK: five (Dao 2023, FlashAttention-2, sec. 3.1.2 and 4.1).
inline constexpr double kFlashBackwardOverForward = 2.5;
// Causal attention: the kernels skip the blocks above the diagonal, about
// half of the s x s work (the benchmarks count FLOPs so, too).
inline constexpr double kCausalShare = 0.5;

// Backward over forward speed for tables that publish only the combined
// forward + backward speed: FlashAttention-2 on H100 at head dim 128, s 2k,
// without a causal mask runs its backward at 291 TFLOP/s and its forward at
// 362 (Shah et al. 2024, Figures 5 and 6), 0.80.
inline constexpr double kCombinedBackwardOverForward = 0.8;

// PyTorch SDPA's flash backend on H100 SXM (bf16, head dim 128, s 4096,
// batch 1 x 16 heads), TFLOP/s in the convention above: pytorch/pytorch#128888
// (2024). Set against kFlash2's H100 table at the same s and head dim
// (causal 319 / 269, no mask 368 / 310) they give the factors kSdpaFlash2
// applies at every s, head dim and GPU (SdpaFlash2Factor): causal 0.64 /
// 0.66, no mask 0.82 / 0.79. Caveat: that benchmark's grid is small (512
// thread blocks against torchtitan's 4096 at s 8192, batch 2, 32 heads), so
// the causal factors may be pessimistic; pytorch/benchmark#2296's 287-298
// TFLOP/s forward without a mask (about 0.80) agrees with the no-mask one.
// The factors were measured on H100 only; other GPUs are assumed the same.
inline constexpr double kSdpaReferenceSeq = 4096;
inline constexpr int kSdpaReferenceHeadDim = 128;
inline constexpr double kSdpaCausalForwardTflops = 205.6;
inline constexpr double kSdpaCausalBackwardTflops = 178.5;
inline constexpr double kSdpaForwardTflops = 300.7;   // no mask
inline constexpr double kSdpaBackwardTflops = 245.6;  // no mask

// kSdpaFlash2's forward and backward speed over kFlash2's: the figures above
// over kFlash2's H100 table at kSdpaReferenceSeq and kSdpaReferenceHeadDim.
// Index 0 forward, 1 backward.
std::array<double, 2> SdpaFlash2Factor(bool causal);

struct FlashRates {
  double forward_flops_per_s = 0;   // FLOPs as above, per second
  double backward_flops_per_s = 0;  // the backward's 2.5x FLOPs, per second
  std::string table;                // which table: "H100 FlashAttention-2 (published)", ...
  bool scaled = false;              // true: not the table's own GPU at its peak
};

// The speed of `kernel` on `gpu` at sequence length `seq` (tokens) and head
// dimension `head_dim`, causal or not. The A100 (A100-SXM4-80GB) and H100
// (H100 80GB HBM3) have tables; the H200 uses the H100's (same SMs and
// clocks); any other GPU the H100's. Each GPU runs its table scaled by its
// own bf16 peak over the table GPU's (312 / 989 TFLOP/s), so a power-limited
// part runs slower, and the presets read their tables unscaled (`scaled`
// says when a GPU is not the table's own at its peak). Linear in
// log2(seq) between 512 and 16384 tokens and in the head dimension between
// the published ones (64, 128, and 256 where published); clamped outside.
// Fails with InvalidArgument naming --attention when the kernel does not run
// on the GPU (FlashAttention-3 before Hopper).
// REQUIRES: seq >= 1, head_dim >= 1.
[[nodiscard]] Result<FlashRates> FlashRatesFor(const GpuSpec& gpu, FlashKernel kernel, double seq,
                                               double head_dim, bool causal);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_ATTENTION_RATES_H_
