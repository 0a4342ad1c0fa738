// FlashAttention speeds (profiler/attention_rates.h). Every number in the
// tables is a published bar label, TFLOP/s at sequence lengths 512, 1k, 2k,
// 4k, 8k and 16k (batch 16k / s, hidden 2048, bf16/fp16); sources and the
// derivations below are in docs/research/kernel-benchmarks.md section 2.
#include "profiler/attention_rates.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

namespace pipecast {
namespace {

constexpr int kPoints = 6;
constexpr double kFirstLog2Seq = 9;  // 512 tokens; one point per doubling up to 16384
// The dense bf16 peaks (datasheets) of the GPUs the tables were measured on,
// A100 SXM4 and H100 SXM5 at their full power: a GPU of the same family at
// another peak (a power-limited part, e.g. an H100 capped at 500 W) runs
// the table scaled by its own peak over this one, as its products do.
constexpr double kA100PeakFlops = 312e12;
constexpr double kH100PeakFlops = 989e12;

enum class Family { kA100, kH100 };
enum class Pass { kForward, kBackward, kCombined };  // kCombined: forward + backward together

struct Row {
  Family family;
  FlashKernel kernel;
  Pass pass;
  bool causal;
  int head_dim;
  std::array<double, kPoints> tflops;
};

using K = FlashKernel;
constexpr Family kA = Family::kA100;
constexpr Family kH = Family::kH100;
constexpr Pass kF = Pass::kForward;
constexpr Pass kB = Pass::kBackward;
constexpr Pass kC = Pass::kCombined;

constexpr Row kRows[] = {
    // H100 SXM5, forward: Shah et al. 2024 (FlashAttention-3), Figure 5, as
    // in Dao-AILab/flash-attention assets/flash3_fp16_fwd.png.
    {kH, K::kFlash2, kF, false, 64, {282, 306, 318, 321, 322, 324}},
    {kH, K::kFlash2, kF, true, 64, {180, 229, 262, 284, 295, 299}},
    {kH, K::kFlash2, kF, false, 128, {309, 350, 362, 368, 370, 370}},
    {kH, K::kFlash2, kF, true, 128, {191, 260, 298, 319, 333, 335}},
    {kH, K::kFlash2, kF, false, 256, {275, 313, 321, 323, 324, 326}},
    {kH, K::kFlash2, kF, true, 256, {208, 251, 278, 293, 297, 298}},
    {kH, K::kFlash3, kF, false, 64, {333, 392, 460, 476, 496, 497}},
    {kH, K::kFlash3, kF, true, 64, {197, 265, 371, 420, 460, 473}},
    {kH, K::kFlash3, kF, false, 128, {467, 565, 625, 638, 646, 648}},
    {kH, K::kFlash3, kF, true, 128, {292, 423, 521, 579, 602, 616}},
    {kH, K::kFlash3, kF, false, 256, {482, 639, 707, 736, 746, 756}},
    {kH, K::kFlash3, kF, true, 256, {286, 427, 537, 612, 628, 642}},
    // H100 SXM5, backward without a causal mask: Shah et al. 2024, Figure 6.
    {kH, K::kFlash2, kB, false, 64, {198, 238, 264, 279, 287, 291}},
    {kH, K::kFlash2, kB, false, 128, {214, 260, 291, 310, 318, 322}},
    {kH, K::kFlash3, kB, false, 64, {272, 363, 422, 453, 472, 474}},
    {kH, K::kFlash3, kB, false, 128, {316, 424, 501, 542, 559, 561}},
    // H100 SXM5, forward + backward of FlashAttention (the first, CUDA):
    // Dao-AILab/flash-attention assets/flash2_h100_fwd_bwd_benchmark.png. No
    // H100 figure of the Triton kernel was found; on A100 it runs within
    // -9%..+18% of this one (the A100 rows below), so it stands in.
    {kH, K::kTriton, kC, false, 64, {157, 159, 161, 161, 166, 168}},
    {kH, K::kTriton, kC, true, 64, {104, 123, 136, 138, 149, 156}},
    {kH, K::kTriton, kC, false, 128, {127, 127, 128, 131, 137, 139}},
    {kH, K::kTriton, kC, true, 128, {98, 109, 108, 126, 135, 137}},
    // A100 SXM4 80GB, forward + backward: the same repository,
    // assets/flash2_a100_fwd_bwd_benchmark.png ("FlashAttention-2" and
    // "FlashAttention Triton"). The 512-token FlashAttention-2 label at head
    // dim 128 without a mask is hidden by the legend: 149 = 173 x 132 / 153,
    // the 512 / 1k ratio at head dim 64.
    {kA, K::kFlash2, kC, false, 64, {132, 153, 162, 171, 175, 176}},
    {kA, K::kFlash2, kC, true, 64, {88, 119, 140, 156, 165, 171}},
    {kA, K::kFlash2, kC, false, 128, {149, 173, 187, 196, 201, 203}},
    {kA, K::kFlash2, kC, true, 128, {99, 133, 155, 173, 182, 189}},
    {kA, K::kTriton, kC, false, 64, {90, 102, 98, 98, 100, 100}},
    {kA, K::kTriton, kC, true, 64, {59, 75, 79, 76, 79, 80}},
    {kA, K::kTriton, kC, false, 128, {78, 85, 90, 93, 95, 95}},
    {kA, K::kTriton, kC, true, 128, {50, 61, 68, 74, 78, 80}},
};

const Row* Find(Family family, FlashKernel kernel, Pass pass, bool causal, int head_dim) {
  for (const Row& r : kRows) {
    if (r.family == family && r.kernel == kernel && r.pass == pass && r.causal == causal &&
        r.head_dim == head_dim) {
      return &r;
    }
  }
  return nullptr;
}

// The row's value at `seq`: linear in log2(seq), clamped to 512..16384.
double AtSeq(const Row& row, double seq) {
  const double x = std::clamp(std::log2(seq) - kFirstLog2Seq, 0.0, kPoints - 1.0);
  const int i = std::min(static_cast<int>(x), kPoints - 2);
  const double t = x - i;
  return row.tflops[i] * (1 - t) + row.tflops[i + 1] * t;
}

// Forward and backward TFLOP/s at one published head dimension, or nullopt
// when the kernel has no row there. Tables that publish both passes give
// them; a missing causal backward is the non-causal one scaled as the
// forward scales with the mask; a missing backward at head dim 256 is the
// head dim 128 one scaled as the forward scales between them. Combined
// tables are split with kCombinedBackwardOverForward: with forward rate x
// and backward rate r*x, the combined 3.5 FLOP units run at
// 3.5 / (1/x + 2.5/(r*x)) = R, so x = R (1 + 2.5/r) / 3.5.
std::optional<std::array<double, 2>> AtHeadDim(Family family, FlashKernel kernel, bool causal,
                                               int head_dim, double seq) {
  if (const Row* c = Find(family, kernel, Pass::kCombined, causal, head_dim)) {
    const double r = kCombinedBackwardOverForward;
    const double forward =
        AtSeq(*c, seq) * (1 + kFlashBackwardOverForward / r) / (1 + kFlashBackwardOverForward);
    return std::array<double, 2>{forward, r * forward};
  }
  const Row* f = Find(family, kernel, Pass::kForward, causal, head_dim);
  if (f == nullptr) return std::nullopt;
  const double forward = AtSeq(*f, seq);
  if (const Row* b = Find(family, kernel, Pass::kBackward, causal, head_dim)) {
    return std::array<double, 2>{forward, AtSeq(*b, seq)};
  }
  if (causal) {
    const auto open = AtHeadDim(family, kernel, false, head_dim, seq);
    const Row* open_forward = Find(family, kernel, Pass::kForward, false, head_dim);
    if (!open || open_forward == nullptr) return std::nullopt;
    return std::array<double, 2>{forward, (*open)[1] * forward / AtSeq(*open_forward, seq)};
  }
  const Row* b128 = Find(family, kernel, Pass::kBackward, false, 128);
  const Row* f128 = Find(family, kernel, Pass::kForward, false, 128);
  if (b128 == nullptr || f128 == nullptr) return std::nullopt;
  return std::array<double, 2>{forward, AtSeq(*b128, seq) * forward / AtSeq(*f128, seq)};
}

const char* FamilyName(Family family) { return family == Family::kA100 ? "A100" : "H100"; }

}  // namespace

const char* FlashKernelName(FlashKernel kernel) {
  switch (kernel) {
    case FlashKernel::kFlash3:
      return "flash3";
    case FlashKernel::kTriton:
      return "triton";
    case FlashKernel::kSdpaFlash2:
      return "sdpa-flash2";
    default:
      return "flash2";
  }
}

std::array<double, 2> SdpaFlash2Factor(bool causal) {
  const auto table = AtHeadDim(Family::kH100, FlashKernel::kFlash2, causal, kSdpaReferenceHeadDim,
                               kSdpaReferenceSeq);
  const double forward = causal ? kSdpaCausalForwardTflops : kSdpaForwardTflops;
  const double backward = causal ? kSdpaCausalBackwardTflops : kSdpaBackwardTflops;
  return {forward / (*table)[0], backward / (*table)[1]};
}

Result<FlashRates> FlashRatesFor(const GpuSpec& gpu, FlashKernel kernel, double seq,
                                 double head_dim, bool causal) {
  if (kernel == FlashKernel::kSdpaFlash2) {
    PIPECAST_ASSIGN_OR_RETURN(FlashRates rates,
                              FlashRatesFor(gpu, FlashKernel::kFlash2, seq, head_dim, causal));
    const std::array<double, 2> factor = SdpaFlash2Factor(causal);
    rates.forward_flops_per_s *= factor[0];
    rates.backward_flops_per_s *= factor[1];
    rates.table += fmt::format(
        " x PyTorch SDPA's ({:.3f} forward, {:.3f} backward; "
        "pytorch/pytorch#128888, H100)",
        factor[0], factor[1]);
    return rates;
  }
  const bool a100 = gpu.name.find("A100") != std::string::npos;
  const bool hopper = gpu.name.find("H100") != std::string::npos ||
                      gpu.name.find("H200") != std::string::npos ||
                      gpu.name.find("H800") != std::string::npos;
  const Family family = a100 ? Family::kA100 : Family::kH100;
  if (kernel == FlashKernel::kFlash3 && a100) {
    return Status::InvalidArgument(fmt::format(
        "--attention flash3: FlashAttention-3 runs on Hopper GPUs (H100, H200) only, not on "
        "'{}'; use flash2 or triton",
        gpu.name));
  }
  // The published head dimensions around head_dim (the nearest one outside
  // the published range), and the weight of the upper one.
  int lower = 0, upper = 0;
  for (int d : {64, 128, 256}) {
    if (!AtHeadDim(family, kernel, causal, d, seq)) continue;
    if (lower == 0 || d <= head_dim) lower = d;
    if (upper == 0 || upper < head_dim) upper = d;
  }
  lower = std::min(lower, upper);
  const auto lo = AtHeadDim(family, kernel, causal, lower, seq);
  const auto hi = AtHeadDim(family, kernel, causal, upper, seq);
  if (!lo || !hi) {
    return Status::Internal(fmt::format("no {} table for {}", FlashKernelName(kernel), gpu.name));
  }
  const double t =
      upper > lower ? std::clamp((head_dim - lower) / double(upper - lower), 0.0, 1.0) : 0.0;
  // Every GPU runs its family's table at its own peak over the table GPU's
  // (one rule for the presets and for cluster files; docs/calibration.md
  // "Attention"): the A100 and H100 presets and the H200 (the H100's peak)
  // read their table unscaled. A GPU of unknown peak keeps the table's.
  const double table_peak = a100 ? kA100PeakFlops : kH100PeakFlops;
  const double peak = gpu.peak_tflops * 1e12;
  const double scale = peak > 0 ? peak / table_peak : 1.0;
  FlashRates rates;
  rates.forward_flops_per_s = ((*lo)[0] * (1 - t) + (*hi)[0] * t) * 1e12 * scale;
  rates.backward_flops_per_s = ((*lo)[1] * (1 - t) + (*hi)[1] * t) * 1e12 * scale;
  rates.scaled = !(a100 || hopper) || std::abs(scale - 1) > 1e-9;
  rates.table = fmt::format("{} {}", FamilyName(family), FlashKernelName(kernel));
  if (std::abs(scale - 1) > 1e-9) {
    rates.table += fmt::format(", scaled by this GPU's peak ({:g} / {:g} TFLOP/s)", gpu.peak_tflops,
                               table_peak / 1e12);
  } else if (rates.scaled) {
    rates.table += ", unscaled: this GPU's peak is unknown";
  }
  return rates;
}

}  // namespace pipecast
