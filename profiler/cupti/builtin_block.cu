// The built-in transformer block (builtin_block.h). Row-major tensors:
// tokens T = microbatch * seq rows; heads laid out [batch, head, seq, dim]
// for the attention products.
//
// Kept from Forward until BackwardWeight (ActivationBytes):
//   ln1 out [T,h], ln1 mean/rstd [T] fp32 x2, q/k/v heads 3 x [T,h],
//   softmax P [b,a,s,s], attention context [T,h], x1 [T,h],
//   ln2 mean/rstd [T] fp32 x2, ln2 out [T,h], fc1 out [T,f], gelu out [T,f]
// all bf16 unless marked fp32.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "profiler/cupti/builtin_block.h"

namespace pipecast {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;  // per block of the row kernels: one row per CUDA block
constexpr float kLnEpsilon = 1e-5f;

Status CudaError(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Unavailable(
      fmt::format("{}: CUDA error {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e)));
}
Status CublasError(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::Unavailable(fmt::format("{}: cuBLAS status {}", what, static_cast<int>(s)));
}

// Block-wide sum of one float per thread (kThreads threads).
__device__ float BlockSum(float v, float* shared) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += shared[w];
  return total;
}

__global__ void LayerNormForward(const bf16* x, const bf16* gamma, const bf16* beta, bf16* out,
                                 float* mean, float* rstd, int h) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x;
  const bf16* xr = x + row * h;
  float s = 0, ss = 0;
  for (int i = threadIdx.x; i < h; i += kThreads) {
    const float v = __bfloat162float(xr[i]);
    s += v;
    ss += v * v;
  }
  const float m = BlockSum(s, shared) / h;
  const float var = fmaxf(BlockSum(ss, shared) / h - m * m, 0.f);
  const float r = rsqrtf(var + kLnEpsilon);
  for (int i = threadIdx.x; i < h; i += kThreads) {
    const float v = (__bfloat162float(xr[i]) - m) * r;
    out[row * h + i] = __float2bfloat16(v * __bfloat162float(gamma[i]) + __bfloat162float(beta[i]));
  }
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dx = residual + LayerNorm'(dout): g = dout * gamma,
// dx_i = rstd * (g_i - mean(g) - xhat_i * mean(g * xhat)).
__global__ void LayerNormBackwardInput(const bf16* dout, const bf16* x, const float* mean,
                                       const float* rstd, const bf16* gamma, const bf16* residual,
                                       bf16* dx, int h) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x;
  const float m = mean[row], r = rstd[row];
  float sg = 0, sgx = 0;
  for (int i = threadIdx.x; i < h; i += kThreads) {
    const float g = __bfloat162float(dout[row * h + i]) * __bfloat162float(gamma[i]);
    const float xhat = (__bfloat162float(x[row * h + i]) - m) * r;
    sg += g;
    sgx += g * xhat;
  }
  const float mg = BlockSum(sg, shared) / h;
  const float mgx = BlockSum(sgx, shared) / h;
  for (int i = threadIdx.x; i < h; i += kThreads) {
    const float g = __bfloat162float(dout[row * h + i]) * __bfloat162float(gamma[i]);
    const float xhat = (__bfloat162float(x[row * h + i]) - m) * r;
    const float d = r * (g - mg - xhat * mgx) + __bfloat162float(residual[row * h + i]);
    dx[row * h + i] = __float2bfloat16(d);
  }
}

// dgamma += sum_rows dout * xhat, dbeta += sum_rows dout: one thread per column.
__global__ void LayerNormBackwardParams(const bf16* dout, const bf16* x, const float* mean,
                                        const float* rstd, bf16* dgamma, bf16* dbeta, int64_t rows,
                                        int h) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= h) return;
  float dg = 0, db = 0;
  for (int64_t row = 0; row < rows; ++row) {
    const float d = __bfloat162float(dout[row * h + col]);
    dg += d * (__bfloat162float(x[row * h + col]) - mean[row]) * rstd[row];
    db += d;
  }
  dgamma[col] = __float2bfloat16(__bfloat162float(dgamma[col]) + dg);
  dbeta[col] = __float2bfloat16(__bfloat162float(dbeta[col]) + db);
}

// Token layout [b, s, n, a, d] <-> head layout [n, b, a, s, d] (n = 3 for
// q/k/v, 1 for the context). to_heads selects the direction.
__global__ void PermuteHeads(const bf16* in, bf16* out, int b, int s, int n, int a, int d,
                             bool to_heads) {
  const int64_t total = int64_t{b} * s * n * a * d;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    // i indexes the token layout.
    int64_t r = i;
    const int di = r % d;
    r /= d;
    const int ai = r % a;
    r /= a;
    const int ni = r % n;
    r /= n;
    const int si = r % s;
    const int bi = static_cast<int>(r / s);
    const int64_t j = ((((int64_t{ni} * b + bi) * a + ai) * s + si) * d) + di;
    if (to_heads) {
      out[j] = in[i];
    } else {
      out[i] = in[j];
    }
  }
}

// In place: rows of `s` scores; causal mask (column > row within the
// sequence), scale, softmax.
__global__ void CausalSoftmax(bf16* scores, int s, float scale) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x;
  const int query = static_cast<int>(row % s);
  bf16* p = scores + row * s;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= query; j += kThreads)
    mx = fmaxf(mx, __bfloat162float(p[j]) * scale);
  // Block max via shared memory.
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < kThreads / 32; ++w) mx = fmaxf(mx, shared[w]);
  float sum = 0;
  for (int j = threadIdx.x; j <= query; j += kThreads)
    sum += __expf(__bfloat162float(p[j]) * scale - mx);
  sum = BlockSum(sum, shared);
  for (int j = threadIdx.x; j < s; j += kThreads) {
    const float v = j <= query ? __expf(__bfloat162float(p[j]) * scale - mx) / sum : 0.f;
    p[j] = __float2bfloat16(v);
  }
}

// In place: dP -> dS = scale * P * (dP - sum(P * dP)) per row.
__global__ void SoftmaxBackward(const bf16* prob, bf16* grad, int s, float scale) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x;
  float dot = 0;
  for (int j = threadIdx.x; j < s; j += kThreads) {
    dot += __bfloat162float(prob[row * s + j]) * __bfloat162float(grad[row * s + j]);
  }
  dot = BlockSum(dot, shared);
  for (int j = threadIdx.x; j < s; j += kThreads) {
    const float pj = __bfloat162float(prob[row * s + j]);
    grad[row * s + j] = __float2bfloat16(scale * pj * (__bfloat162float(grad[row * s + j]) - dot));
  }
}

__device__ float GeluTanh(float x) {
  return 0.5f * x * (1.f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

__global__ void GeluForward(const bf16* in, bf16* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __float2bfloat16(GeluTanh(__bfloat162float(in[i])));
  }
}

// In place: grad *= gelu'(in).
__global__ void GeluBackward(const bf16* in, bf16* grad, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = __bfloat162float(in[i]);
    const float u = 0.7978845608f * (x + 0.044715f * x * x * x);
    const float t = tanhf(u);
    const float du = 0.7978845608f * (1.f + 3.f * 0.044715f * x * x);
    const float d = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * du;
    grad[i] = __float2bfloat16(__bfloat162float(grad[i]) * d);
  }
}

__global__ void Add(const bf16* a, const bf16* b, bf16* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
  }
}

__global__ void FillPattern(bf16* out, int64_t n, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t z = (static_cast<uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    z ^= z >> 29;
    const float u = static_cast<float>(z >> 40) / static_cast<float>(1ull << 24);  // [0, 1)
    out[i] = __float2bfloat16((2.f * u - 1.f) * scale);
  }
}

int GridFor(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

}  // namespace

struct TransformerBlock::State {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  // Weights (row-major [out, in]) and their gradients, bf16.
  bf16 *wqkv = nullptr, *wo = nullptr, *w1 = nullptr, *w2 = nullptr;
  bf16 *g1 = nullptr, *b1 = nullptr, *g2 = nullptr, *b2 = nullptr;
  bf16 *dwqkv = nullptr, *dwo = nullptr, *dw1 = nullptr, *dw2 = nullptr;
  bf16 *dg1 = nullptr, *db1 = nullptr, *dg2 = nullptr, *db2 = nullptr;
  // Per-pass state.
  int microbatch = 0;
  const bf16* x = nullptr;
  const bf16* dy = nullptr;
  std::vector<void*> kept;  // freed by BackwardWeight
  // Saved by Forward.
  bf16 *ln1 = nullptr, *qkvh = nullptr, *prob = nullptr, *ctx = nullptr, *x1 = nullptr;
  bf16 *ln2 = nullptr, *fc1 = nullptr, *act = nullptr;
  float *mean1 = nullptr, *rstd1 = nullptr, *mean2 = nullptr, *rstd2 = nullptr;
  // Saved by BackwardInput for BackwardWeight.
  bf16 *dfc1 = nullptr, *dln2 = nullptr, *dx1 = nullptr, *dqkv = nullptr, *dln1 = nullptr;
  enum class Phase { kIdle, kForward, kInput } phase = Phase::kIdle;
};

namespace {

template <typename T>
Status Alloc(T** p, int64_t elements, std::vector<void*>* owner, const char* what) {
  void* raw = nullptr;
  PIPECAST_RETURN_IF_ERROR(
      CudaError(cudaMalloc(&raw, static_cast<size_t>(elements) * sizeof(T)), what));
  *p = static_cast<T*>(raw);
  if (owner != nullptr) owner->push_back(raw);
  return Status::Ok();
}

// Row-major C[M,N] = op(A)[M,K] op(B)[K,N] (+ beta C), through column-major
// cuBLAS as C^T = op(B)^T op(A)^T. Batched when batch > 1 with the strides.
Status Gemm(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, const bf16* a, const bf16* b,
            bf16* c, float beta, int batch = 1, int64_t sa = 0, int64_t sb = 0, int64_t sc = 0) {
  const float alpha = 1.f;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ldb = tb ? k : n;
  const int lda = ta ? m : k;
  if (batch == 1) {
    return CublasError(
        cublasGemmEx(h, op_b, op_a, n, m, k, &alpha, b, CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda,
                     &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }
  return CublasError(
      cublasGemmStridedBatchedEx(h, op_b, op_a, n, m, k, &alpha, b, CUDA_R_16BF, ldb, sb, a,
                                 CUDA_R_16BF, lda, sa, &beta, c, CUDA_R_16BF, n, sc, batch,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

Status Launched(const char* what) { return CudaError(cudaGetLastError(), what); }

}  // namespace

TransformerBlock::TransformerBlock(BlockShape shape, std::unique_ptr<State> state)
    : shape_(shape), state_(std::move(state)) {}

TransformerBlock::~TransformerBlock() {
  if (!state_) return;
  for (void* p : state_->kept) cudaFree(p);
  for (void* p : {static_cast<void*>(state_->wqkv), static_cast<void*>(state_->wo),
                  static_cast<void*>(state_->w1), static_cast<void*>(state_->w2),
                  static_cast<void*>(state_->g1), static_cast<void*>(state_->b1),
                  static_cast<void*>(state_->g2), static_cast<void*>(state_->b2),
                  static_cast<void*>(state_->dwqkv), static_cast<void*>(state_->dwo),
                  static_cast<void*>(state_->dw1), static_cast<void*>(state_->dw2),
                  static_cast<void*>(state_->dg1), static_cast<void*>(state_->db1),
                  static_cast<void*>(state_->dg2), static_cast<void*>(state_->db2)}) {
    if (p != nullptr) cudaFree(p);
  }
  if (state_->cublas != nullptr) cublasDestroy(state_->cublas);
}

Result<std::unique_ptr<TransformerBlock>> TransformerBlock::Create(const BlockShape& shape,
                                                                   uint64_t seed,
                                                                   CUstream_st* stream) {
  PIPECAST_RETURN_IF_ERROR(shape.Validate());
  auto state = std::make_unique<State>();
  state->stream = stream;
  std::unique_ptr<TransformerBlock> block(new TransformerBlock(shape, std::move(state)));
  State& s = *block->state_;
  PIPECAST_RETURN_IF_ERROR(CublasError(cublasCreate(&s.cublas), "cublasCreate"));
  PIPECAST_RETURN_IF_ERROR(CublasError(cublasSetStream(s.cublas, s.stream), "cublasSetStream"));
  // One GPU's shard at t (builtin_block.h): hl = h/t attention width, fl = f/t MLP columns.
  const int64_t h = shape.hidden, hl = shape.AttentionWidth(), fl = shape.LocalFfn();
  struct Weight {
    bf16** w;
    bf16** grad;
    int64_t n;
    float scale;  // fill range; layer-norm scales start at 1
    float offset;
  } weights[] = {{&s.wqkv, &s.dwqkv, 3 * hl * h, 0.02f, 0},
                 {&s.wo, &s.dwo, h * hl, 0.02f, 0},
                 {&s.w1, &s.dw1, fl * h, 0.02f, 0},
                 {&s.w2, &s.dw2, h * fl, 0.02f, 0},
                 {&s.g1, &s.dg1, h, 0.f, 1},
                 {&s.b1, &s.db1, h, 0.f, 0},
                 {&s.g2, &s.dg2, h, 0.f, 1},
                 {&s.b2, &s.db2, h, 0.f, 0}};
  uint64_t k = 0;
  for (const Weight& w : weights) {
    PIPECAST_RETURN_IF_ERROR(Alloc(w.w, w.n, nullptr, "cudaMalloc (weights)"));
    PIPECAST_RETURN_IF_ERROR(Alloc(w.grad, w.n, nullptr, "cudaMalloc (weight gradients)"));
    if (w.offset != 0) {
      std::vector<bf16> ones(static_cast<size_t>(w.n), __float2bfloat16(w.offset));
      PIPECAST_RETURN_IF_ERROR(CudaError(
          cudaMemcpy(*w.w, ones.data(), w.n * sizeof(bf16), cudaMemcpyHostToDevice), "cudaMemcpy"));
    } else {
      PIPECAST_RETURN_IF_ERROR(FillDeviceBf16(*w.w, w.n * 2, w.scale, seed + 7919 * ++k, stream));
    }
    PIPECAST_RETURN_IF_ERROR(CudaError(cudaMemset(*w.grad, 0, w.n * sizeof(bf16)), "cudaMemset"));
  }
  PIPECAST_RETURN_IF_ERROR(CudaError(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
  return std::move(block);
}

int64_t TransformerBlock::HiddenBytes(int microbatch) const {
  return shape_.HiddenBytes(microbatch);
}

int64_t TransformerBlock::ActivationBytes(int microbatch) const {
  return shape_.ActivationBytes(microbatch);
}

int64_t TransformerBlock::WeightGradBytes(int microbatch) const {
  return shape_.WeightGradBytes(microbatch);
}

Status TransformerBlock::Forward(const void* x_in, void* y_out, int microbatch) {
  State& s = *state_;
  if (s.phase != State::Phase::kIdle) {
    return Status::FailedPrecondition("TransformerBlock::Forward: the previous pass is not done");
  }
  if (microbatch < 1) return Status::InvalidArgument("TransformerBlock::Forward: microbatch < 1");
  // a, hl, f: this GPU's heads, attention width and MLP columns (all of them at t = 1).
  const int b = microbatch, sq = shape_.seq, a = shape_.LocalHeads(), h = shape_.hidden,
            hl = shape_.AttentionWidth(), f = shape_.LocalFfn();
  const int d = shape_.hidden / shape_.heads;
  const int64_t t = int64_t{b} * sq;
  const bf16* x = static_cast<const bf16*>(x_in);
  bf16* y = static_cast<bf16*>(y_out);
  s.microbatch = b;
  s.x = x;
  std::vector<void*>& kept = s.kept;
  cudaStream_t st = s.stream;

  PIPECAST_RETURN_IF_ERROR(Alloc(&s.ln1, t * h, &kept, "cudaMalloc ln1"));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.mean1, t, &kept, "cudaMalloc ln1 mean"));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.rstd1, t, &kept, "cudaMalloc ln1 rstd"));
  LayerNormForward<<<t, kThreads, 0, st>>>(x, s.g1, s.b1, s.ln1, s.mean1, s.rstd1, h);
  PIPECAST_RETURN_IF_ERROR(Launched("LayerNormForward"));

  bf16* qkv = nullptr;  // temporary, token layout
  PIPECAST_RETURN_IF_ERROR(Alloc(&qkv, 3 * t * hl, nullptr, "cudaMalloc qkv"));
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, false, true, t, 3 * hl, h, s.ln1, s.wqkv, qkv, 0.f));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.qkvh, 3 * t * hl, &kept, "cudaMalloc q/k/v heads"));
  PermuteHeads<<<GridFor(3 * t * hl), kThreads, 0, st>>>(qkv, s.qkvh, b, sq, 3, a, d, true);
  PIPECAST_RETURN_IF_ERROR(Launched("PermuteHeads"));
  PIPECAST_RETURN_IF_ERROR(CudaError(cudaFree(qkv), "cudaFree qkv"));

  const bf16* q = s.qkvh;
  const bf16* k = s.qkvh + t * hl;
  const bf16* v = s.qkvh + 2 * t * hl;
  const int batch = b * a;
  const int64_t probs = int64_t{batch} * sq * sq;
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.prob, probs, &kept, "cudaMalloc attention probabilities"));
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, false, true, sq, sq, d, q, k, s.prob, 0.f, batch,
                                int64_t{sq} * d, int64_t{sq} * d, int64_t{sq} * sq));
  CausalSoftmax<<<batch * sq, kThreads, 0, st>>>(s.prob, sq,
                                                 1.f / std::sqrt(static_cast<float>(d)));
  PIPECAST_RETURN_IF_ERROR(Launched("CausalSoftmax"));
  bf16* ctxh = nullptr;  // temporary, head layout
  PIPECAST_RETURN_IF_ERROR(Alloc(&ctxh, t * hl, nullptr, "cudaMalloc context heads"));
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, false, false, sq, d, sq, s.prob, v, ctxh, 0.f, batch,
                                int64_t{sq} * sq, int64_t{sq} * d, int64_t{sq} * d));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.ctx, t * hl, &kept, "cudaMalloc context"));
  PermuteHeads<<<GridFor(t * hl), kThreads, 0, st>>>(ctxh, s.ctx, b, sq, 1, a, d, false);
  PIPECAST_RETURN_IF_ERROR(Launched("PermuteHeads"));
  PIPECAST_RETURN_IF_ERROR(CudaError(cudaFree(ctxh), "cudaFree context heads"));

  bf16* proj = nullptr;  // temporary
  PIPECAST_RETURN_IF_ERROR(Alloc(&proj, t * h, nullptr, "cudaMalloc projection"));
  // Row-parallel: at t > 1 a partial sum, which Megatron-LM all-reduces here.
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, false, true, t, h, hl, s.ctx, s.wo, proj, 0.f));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.x1, t * h, &kept, "cudaMalloc x1"));
  Add<<<GridFor(t * h), kThreads, 0, st>>>(x, proj, s.x1, t * h);
  PIPECAST_RETURN_IF_ERROR(Launched("Add"));

  PIPECAST_RETURN_IF_ERROR(Alloc(&s.ln2, t * h, &kept, "cudaMalloc ln2"));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.mean2, t, &kept, "cudaMalloc ln2 mean"));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.rstd2, t, &kept, "cudaMalloc ln2 rstd"));
  LayerNormForward<<<t, kThreads, 0, st>>>(s.x1, s.g2, s.b2, s.ln2, s.mean2, s.rstd2, h);
  PIPECAST_RETURN_IF_ERROR(Launched("LayerNormForward"));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.fc1, t * f, &kept, "cudaMalloc fc1"));
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, false, true, t, f, h, s.ln2, s.w1, s.fc1, 0.f));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.act, t * f, &kept, "cudaMalloc gelu"));
  GeluForward<<<GridFor(t * f), kThreads, 0, st>>>(s.fc1, s.act, t * f);
  PIPECAST_RETURN_IF_ERROR(Launched("GeluForward"));
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, false, true, t, h, f, s.act, s.w2, proj, 0.f));
  Add<<<GridFor(t * h), kThreads, 0, st>>>(s.x1, proj, y, t * h);
  PIPECAST_RETURN_IF_ERROR(Launched("Add"));
  PIPECAST_RETURN_IF_ERROR(CudaError(cudaFree(proj), "cudaFree projection"));
  s.phase = State::Phase::kForward;
  return Status::Ok();
}

Status TransformerBlock::BackwardInput(const void* dy_in, void* dx_out) {
  State& s = *state_;
  if (s.phase != State::Phase::kForward) {
    return Status::FailedPrecondition("TransformerBlock::BackwardInput: no forward pending");
  }
  const int b = s.microbatch, sq = shape_.seq, a = shape_.LocalHeads(), h = shape_.hidden,
            hl = shape_.AttentionWidth(), f = shape_.LocalFfn();
  const int d = shape_.hidden / shape_.heads;
  const int64_t t = int64_t{b} * sq;
  const bf16* dy = static_cast<const bf16*>(dy_in);
  bf16* dx = static_cast<bf16*>(dx_out);
  s.dy = dy;
  std::vector<void*>& kept = s.kept;
  cudaStream_t st = s.stream;

  // MLP: dact = dy W2; dfc1 = gelu'(fc1) dact; dln2 = dfc1 W1; dx1 = dy + LN2'(dln2).
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.dfc1, t * f, &kept, "cudaMalloc dfc1"));
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, false, false, t, f, h, dy, s.w2, s.dfc1, 0.f));
  GeluBackward<<<GridFor(t * f), kThreads, 0, st>>>(s.fc1, s.dfc1, t * f);
  PIPECAST_RETURN_IF_ERROR(Launched("GeluBackward"));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.dln2, t * h, &kept, "cudaMalloc dln2"));
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, false, false, t, h, f, s.dfc1, s.w1, s.dln2, 0.f));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.dx1, t * h, &kept, "cudaMalloc dx1"));
  LayerNormBackwardInput<<<t, kThreads, 0, st>>>(s.dln2, s.x1, s.mean2, s.rstd2, s.g2, dy, s.dx1,
                                                 h);
  PIPECAST_RETURN_IF_ERROR(Launched("LayerNormBackwardInput"));

  // Attention.
  bf16* tmp = nullptr;  // dctx in token, then head layout
  PIPECAST_RETURN_IF_ERROR(Alloc(&tmp, 2 * t * hl, nullptr, "cudaMalloc dctx"));
  bf16* dctx = tmp;
  bf16* dctxh = tmp + t * hl;
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, false, false, t, hl, h, s.dx1, s.wo, dctx, 0.f));
  PermuteHeads<<<GridFor(t * hl), kThreads, 0, st>>>(dctx, dctxh, b, sq, 1, a, d, true);
  PIPECAST_RETURN_IF_ERROR(Launched("PermuteHeads"));
  const int batch = b * a;
  const int64_t probs = int64_t{batch} * sq * sq;
  const int64_t shd = int64_t{sq} * d, sss = int64_t{sq} * sq;
  const bf16* q = s.qkvh;
  const bf16* k = s.qkvh + t * hl;
  const bf16* v = s.qkvh + 2 * t * hl;
  bf16* dqkvh = nullptr;
  PIPECAST_RETURN_IF_ERROR(Alloc(&dqkvh, 3 * t * hl, nullptr, "cudaMalloc dq/dk/dv heads"));
  bf16* dscores = nullptr;
  PIPECAST_RETURN_IF_ERROR(Alloc(&dscores, probs, nullptr, "cudaMalloc dscores"));
  // dP = dctx V^T; dV = P^T dctx.
  PIPECAST_RETURN_IF_ERROR(
      Gemm(s.cublas, false, true, sq, sq, d, dctxh, v, dscores, 0.f, batch, shd, shd, sss));
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, true, false, sq, d, sq, s.prob, dctxh, dqkvh + 2 * t * hl,
                                0.f, batch, sss, shd, shd));
  SoftmaxBackward<<<batch * sq, kThreads, 0, st>>>(s.prob, dscores, sq,
                                                   1.f / std::sqrt(static_cast<float>(d)));
  PIPECAST_RETURN_IF_ERROR(Launched("SoftmaxBackward"));
  // dQ = dS K; dK = dS^T Q.
  PIPECAST_RETURN_IF_ERROR(
      Gemm(s.cublas, false, false, sq, d, sq, dscores, k, dqkvh, 0.f, batch, sss, shd, shd));
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, true, false, sq, d, sq, dscores, q, dqkvh + t * hl, 0.f,
                                batch, sss, shd, shd));
  PIPECAST_RETURN_IF_ERROR(CudaError(cudaFree(dscores), "cudaFree dscores"));
  PIPECAST_RETURN_IF_ERROR(CudaError(cudaFree(tmp), "cudaFree dctx"));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.dqkv, 3 * t * hl, &kept, "cudaMalloc dqkv"));
  PermuteHeads<<<GridFor(3 * t * hl), kThreads, 0, st>>>(dqkvh, s.dqkv, b, sq, 3, a, d, false);
  PIPECAST_RETURN_IF_ERROR(Launched("PermuteHeads"));
  PIPECAST_RETURN_IF_ERROR(CudaError(cudaFree(dqkvh), "cudaFree dq/dk/dv heads"));
  PIPECAST_RETURN_IF_ERROR(Alloc(&s.dln1, t * h, &kept, "cudaMalloc dln1"));
  // Column-parallel input gradient: a partial sum at t > 1 (Megatron-LM all-reduces it).
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, false, false, t, h, 3 * hl, s.dqkv, s.wqkv, s.dln1, 0.f));
  LayerNormBackwardInput<<<t, kThreads, 0, st>>>(s.dln1, s.x, s.mean1, s.rstd1, s.g1, s.dx1, dx, h);
  PIPECAST_RETURN_IF_ERROR(Launched("LayerNormBackwardInput"));
  s.phase = State::Phase::kInput;
  return Status::Ok();
}

Status TransformerBlock::BackwardWeight() {
  State& s = *state_;
  if (s.phase != State::Phase::kInput) {
    return Status::FailedPrecondition(
        "TransformerBlock::BackwardWeight: no input gradient pending");
  }
  const int h = shape_.hidden, hl = shape_.AttentionWidth(), f = shape_.LocalFfn();
  const int64_t t = int64_t{s.microbatch} * shape_.seq;
  cudaStream_t st = s.stream;
  // dW = dOut^T In for each product, accumulated (beta 1).
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, true, false, h, f, t, s.dy, s.act, s.dw2, 1.f));
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, true, false, f, h, t, s.dfc1, s.ln2, s.dw1, 1.f));
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, true, false, h, hl, t, s.dx1, s.ctx, s.dwo, 1.f));
  PIPECAST_RETURN_IF_ERROR(Gemm(s.cublas, true, false, 3 * hl, h, t, s.dqkv, s.ln1, s.dwqkv, 1.f));
  const int grid = (h + kThreads - 1) / kThreads;
  LayerNormBackwardParams<<<grid, kThreads, 0, st>>>(s.dln2, s.x1, s.mean2, s.rstd2, s.dg2, s.db2,
                                                     t, h);
  PIPECAST_RETURN_IF_ERROR(Launched("LayerNormBackwardParams"));
  LayerNormBackwardParams<<<grid, kThreads, 0, st>>>(s.dln1, s.x, s.mean1, s.rstd1, s.dg1, s.db1, t,
                                                     h);
  PIPECAST_RETURN_IF_ERROR(Launched("LayerNormBackwardParams"));
  for (void* p : s.kept) PIPECAST_RETURN_IF_ERROR(CudaError(cudaFree(p), "cudaFree activations"));
  s.kept.clear();
  s.phase = State::Phase::kIdle;
  return Status::Ok();
}

Status FillDeviceBf16(void* buffer, int64_t bytes, float scale, uint64_t seed,
                      CUstream_st* stream) {
  const int64_t n = bytes / 2;
  FillPattern<<<GridFor(n), kThreads, 0, stream>>>(static_cast<bf16*>(buffer), n, scale, seed);
  return Launched("FillPattern");
}

}  // namespace pipecast
