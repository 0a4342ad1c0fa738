// The CPU workload's shared kernels (profiler/cpu/workload.h): the
// precondition check, the single-threaded matrix products, gelu and the
// buffer-size helper, used by the dense and shared passes
// (profiler/cpu/workload.cc) and the mixture-of-experts passes
// (profiler/cpu/workload_moe.cc). Inline, so each file compiles them at its
// own -O3 (CMakeLists.txt) exactly as one file did. Internal: only profiler/
// includes it. Thread-safe (no state); sizes in floats.
#ifndef PIPECAST_PROFILER_CPU_INTERNAL_WORKLOAD_KERNELS_H_
#define PIPECAST_PROFILER_CPU_INTERNAL_WORKLOAD_KERNELS_H_

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

namespace pipecast::cpu::internal {

// A broken REQUIRES is a bug in the caller, not bad input: stop at once
// rather than read or write out of bounds.
inline void Require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "pipecast::cpu::Block: precondition failed: %s\n", what);
  std::abort();
}

// c[m×n] += a[m×k] · b[k×n], row-major. i-k-j order: the inner loop runs
// over contiguous rows of b and c, which the compiler vectorises.
inline void MatMulAdd(const float* __restrict a, const float* __restrict b, float* __restrict c,
                      int m, int k, int n) {
  for (int i = 0; i < m; ++i) {
    const float* __restrict a_row = a + static_cast<std::ptrdiff_t>(i) * k;
    float* __restrict c_row = c + static_cast<std::ptrdiff_t>(i) * n;
    for (int p = 0; p < k; ++p) {
      const float s = a_row[p];
      const float* __restrict b_row = b + static_cast<std::ptrdiff_t>(p) * n;
      for (int j = 0; j < n; ++j) c_row[j] += s * b_row[j];
    }
  }
}

// w[k×n] += aᵀ · b with a [m×k] and b [m×n], row-major: the weight-gradient
// product. Row p of w stays in cache while the m rows of b stream past.
inline void TransposedMatMulAdd(const float* __restrict a, const float* __restrict b,
                                float* __restrict w, int m, int k, int n) {
  for (int p = 0; p < k; ++p) {
    float* __restrict w_row = w + static_cast<std::ptrdiff_t>(p) * n;
    for (int i = 0; i < m; ++i) {
      const float s = a[static_cast<std::ptrdiff_t>(i) * k + p];
      const float* __restrict b_row = b + static_cast<std::ptrdiff_t>(i) * n;
      for (int j = 0; j < n; ++j) w_row[j] += s * b_row[j];
    }
  }
}

// gelu, tanh form (Hendrycks & Gimpel): 0.5·a·(1 + tanh(c·(a + 0.044715·a³))).
inline constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluCubic = 0.044715f;

inline float Gelu(float a) {
  const float t = std::tanh(kGeluC * (a + kGeluCubic * a * a * a));
  return 0.5f * a * (1.0f + t);
}

inline float GeluDerivative(float a) {
  const float t = std::tanh(kGeluC * (a + kGeluCubic * a * a * a));
  return 0.5f * (1.0f + t) +
         0.5f * a * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluCubic * a * a);
}

// The floats of a [tokens × width] buffer.
inline std::size_t Floats(int tokens, int width) {
  return static_cast<std::size_t>(tokens) * static_cast<std::size_t>(width);
}

}  // namespace pipecast::cpu::internal

#endif  // PIPECAST_PROFILER_CPU_INTERNAL_WORKLOAD_KERNELS_H_
