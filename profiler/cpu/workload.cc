#include "profiler/cpu/workload.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

namespace pipecast::cpu {
namespace {

constexpr std::int64_t kFloatBytes = sizeof(float);
// Buffers start on a cache line, so rows of the products vectorise cleanly.
constexpr std::align_val_t kBufferAlignment{64};

std::atomic<std::int64_t> g_live_bytes{0};
std::atomic<std::int64_t> g_peak_bytes{0};

void CountAllocation(std::int64_t bytes) {
  const std::int64_t live = g_live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (live > peak &&
         !g_peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

thread_local MemoryAccount* t_current_account = nullptr;

// A broken REQUIRES is a bug in the caller, not bad input: stop at once
// rather than read or write out of bounds.
void Require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "pipecast::cpu::Block: precondition failed: %s\n", what);
  std::abort();
}

// c[m×n] += a[m×k] · b[k×n], row-major. i-k-j order: the inner loop runs
// over contiguous rows of b and c, which the compiler vectorises.
void MatMulAdd(const float* __restrict a, const float* __restrict b, float* __restrict c, int m,
               int k, int n) {
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
void TransposedMatMulAdd(const float* __restrict a, const float* __restrict b, float* __restrict w,
                         int m, int k, int n) {
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
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

float Gelu(float a) {
  const float t = std::tanh(kGeluC * (a + kGeluCubic * a * a * a));
  return 0.5f * a * (1.0f + t);
}

float GeluDerivative(float a) {
  const float t = std::tanh(kGeluC * (a + kGeluCubic * a * a * a));
  return 0.5f * (1.0f + t) +
         0.5f * a * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluCubic * a * a);
}

// splitmix64 (Steele, Lea & Flood 2014): a fixed, portable generator, so the
// weights do not depend on the standard library's distributions.
std::uint64_t SplitMix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [-bound, bound].
float UniformWeight(std::uint64_t& state, float bound) {
  const double unit = static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
  return static_cast<float>((2.0 * unit - 1.0) * bound);
}

void Transpose(const std::vector<float>& src, int rows, int cols, std::vector<float>& dst) {
  dst.resize(src.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      dst[static_cast<std::size_t>(c) * rows + r] = src[static_cast<std::size_t>(r) * cols + c];
}

std::size_t Floats(int tokens, int width) {
  return static_cast<std::size_t>(tokens) * static_cast<std::size_t>(width);
}

// C(n, k), exact for the sizes BlockShape allows (n <= kMaxExperts); capped
// past kMaxRoutes so that it never overflows.
std::int64_t Binomial(int n, int k) {
  std::int64_t c = 1;
  for (int i = 1; i <= k; ++i) {
    c = c * (n - k + i) / i;
    if (c > kMaxRoutes) return kMaxRoutes + 1;
  }
  return c;
}

Status CheckWidth(const char* field, int value) {
  if (value < 1 || value > kMaxWidth) {
    return Status::InvalidArgument(std::string(field) + " is " + std::to_string(value) +
                                   ": use a value in [1, " + std::to_string(kMaxWidth) + "]");
  }
  return Status::Ok();
}

// An expert-parallel group of one: what is sent is what is received.
class SelfExchange final : public ExpertExchange {
 public:
  Status AllToAll(std::span<const float> send, std::span<const std::size_t> send_counts,
                  std::span<float> recv, std::span<const std::size_t> recv_counts) override {
    Require(send_counts.size() == 1 && recv_counts.size() == 1 && send.size() == recv.size(),
            "SelfExchange: one member, as many floats received as sent");
    std::copy(send.begin(), send.end(), recv.begin());
    return Status::Ok();
  }
  Status AllGather(std::span<const float> send, std::span<float> recv) override {
    Require(send.size() == recv.size(), "SelfExchange: one member gathers what it sends");
    std::copy(send.begin(), send.end(), recv.begin());
    return Status::Ok();
  }
  Status ReduceScatter(std::span<const float> send, std::span<float> recv) override {
    Require(send.size() == recv.size(), "SelfExchange: one member keeps its one block");
    std::copy(send.begin(), send.end(), recv.begin());
    return Status::Ok();
  }
};

}  // namespace

// ---- BlockShape ----

Status BlockShape::Validate() const {
  PIPECAST_RETURN_IF_ERROR(CheckWidth("hidden", hidden));
  PIPECAST_RETURN_IF_ERROR(CheckWidth("ffn", ffn));
  PIPECAST_RETURN_IF_ERROR(CheckWidth("tokens_per_sample", tokens_per_sample));
  if (experts < 0 || experts > kMaxExperts || (experts == 0 && top_k != 0) ||
      (experts > 0 && (top_k < 1 || top_k > experts))) {
    return Status::InvalidArgument(
        "experts " + std::to_string(experts) + " and top_k " + std::to_string(top_k) +
        ": give experts in [1, " + std::to_string(kMaxExperts) +
        "] and top_k in [1, experts] for an MoE block, or both 0 for a dense one");
  }
  if (experts > 0) {
    const std::int64_t routes = Binomial(experts, top_k);
    if (routes > kMaxRoutes || tokens_per_sample % routes != 0) {
      return Status::InvalidArgument(
          "tokens_per_sample " + std::to_string(tokens_per_sample) + " is not a multiple of C(" +
          std::to_string(experts) + ", " + std::to_string(top_k) + ") = " + std::to_string(routes) +
          ": the hash router sends token i to the (i mod C)-th set of top_k experts, so every "
          "expert gets the same tokens only when C divides tokens_per_sample (and C <= " +
          std::to_string(kMaxRoutes) + ")");
    }
  }
  const std::int64_t copies = std::max(experts, 1);
  if (std::int64_t{hidden} * ffn * copies > kMaxBlockWeights) {
    return Status::InvalidArgument("hidden x ffn (x experts) is " +
                                   std::to_string(std::int64_t{hidden} * ffn * copies) +
                                   ", over the " + std::to_string(kMaxBlockWeights) +
                                   " weights a block may have: use smaller widths");
  }
  const std::int64_t sample_bytes =
      kFloatBytes * RowsPerSample() * (2 * std::int64_t{hidden} + 2 * std::int64_t{ffn});
  if (sample_bytes > kMaxSampleBytes) {
    return Status::InvalidArgument(
        "one sample would keep " + std::to_string(sample_bytes) +
        " bytes of activations (tokens_per_sample x (2 hidden + 2 ffn) x 4), over the " +
        std::to_string(kMaxSampleBytes) + " allowed: use smaller widths");
  }
  return Status::Ok();
}

std::int64_t ExpertRoutes(const BlockShape& shape) {
  return shape.moe() ? Binomial(shape.experts, shape.top_k) : 1;
}

std::int64_t BlockShape::RowsPerSample() const {
  return std::int64_t{tokens_per_sample} * (experts > 0 ? top_k : 1);
}

// ---- MemoryAccount ----

void MemoryAccount::Add(std::int64_t bytes) {
  const std::int64_t live = live_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::int64_t peak = peak_.load(std::memory_order_relaxed);
  while (live > peak && !peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

ScopedMemoryAccount::ScopedMemoryAccount(MemoryAccount* account)
    : previous_(std::exchange(t_current_account, account)) {}

ScopedMemoryAccount::~ScopedMemoryAccount() { t_current_account = previous_; }

// ---- Buffer ----

Buffer::Buffer(std::size_t floats) : size_(floats) {
  if (floats == 0) return;
  data_ = static_cast<float*>(::operator new(floats * sizeof(float), kBufferAlignment));
  CountAllocation(bytes());
  account_ = t_current_account;
  if (account_ != nullptr) account_->Add(bytes());
}

Buffer::~Buffer() { Reset(); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      account_(std::exchange(other.account_, nullptr)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    account_ = std::exchange(other.account_, nullptr);
  }
  return *this;
}

void Buffer::Reset() {
  if (data_ == nullptr) return;
  g_live_bytes.fetch_sub(bytes(), std::memory_order_relaxed);
  if (account_ != nullptr) account_->Subtract(bytes());
  ::operator delete(data_, kBufferAlignment);
  data_ = nullptr;
  size_ = 0;
  account_ = nullptr;
}

std::int64_t Saved::Bytes() const { return x_.bytes() + a_.bytes() + g_.bytes() + dy_.bytes(); }

// ---- Block ----

Block::Block(BlockShape shape) : shape_(shape) {}

Block::Block(BlockShape shape, std::uint64_t seed) : shape_(shape) {
  Require(shape_.Validate().ok(), "Block shape out of range (call BlockShape::Validate first)");
  const int h = shape_.hidden;
  const int f = shape_.ffn;
  const int copies = std::max(shape_.experts, 1);  // expert-major: W1_e then W2_e
  std::uint64_t state = seed;
  w1_.resize(Floats(h, f) * copies);
  w2_.resize(Floats(f, h) * copies);
  const float bound1 = 1.0f / std::sqrt(static_cast<float>(h));  // fan-in of W1 is H
  const float bound2 = 1.0f / std::sqrt(static_cast<float>(f));  // fan-in of W2 is F
  if (copies == 1) {
    for (float& w : w1_) w = UniformWeight(state, bound1);
    for (float& w : w2_) w = UniformWeight(state, bound2);
  } else {
    for (int e = 0; e < copies; ++e) {
      for (std::size_t i = 0; i < Floats(h, f); ++i)
        w1_[e * Floats(h, f) + i] = UniformWeight(state, bound1);
      for (std::size_t i = 0; i < Floats(f, h); ++i)
        w2_[e * Floats(f, h) + i] = UniformWeight(state, bound2);
    }
  }
  TransposeExperts();
  grad_w1_.assign(w1_.size(), 0.0f);
  grad_w2_.assign(w2_.size(), 0.0f);
  if (shape_.moe()) {
    // Every k-subset of the experts, in lexicographic order.
    const int k = shape_.top_k;
    std::vector<int> pick(static_cast<std::size_t>(k));
    for (int i = 0; i < k; ++i) pick[i] = i;
    while (true) {
      routes_.insert(routes_.end(), pick.begin(), pick.end());
      int i = k - 1;
      while (i >= 0 && pick[i] == shape_.experts - k + i) --i;
      if (i < 0) break;
      ++pick[i];
      for (int j = i + 1; j < k; ++j) pick[j] = pick[j - 1] + 1;
    }
  }
}

void Block::TransposeExperts() {
  const int h = shape_.hidden;
  const int f = shape_.ffn;
  const std::size_t n = Floats(h, f);
  const std::size_t copies = w1_.size() / std::max<std::size_t>(n, 1);
  w1t_.resize(w1_.size());
  w2t_.resize(w2_.size());
  std::vector<float> one, one_t;
  for (std::size_t e = 0; e < copies; ++e) {
    one.assign(w1_.begin() + e * n, w1_.begin() + (e + 1) * n);
    Transpose(one, h, f, one_t);
    std::copy(one_t.begin(), one_t.end(), w1t_.begin() + e * n);
    one.assign(w2_.begin() + e * n, w2_.begin() + (e + 1) * n);
    Transpose(one, f, h, one_t);
    std::copy(one_t.begin(), one_t.end(), w2t_.begin() + e * n);
  }
}

std::int64_t Block::Parameters() const {
  return 2 * std::int64_t{shape_.hidden} * shape_.ffn * std::max(LocalExperts(), 1);
}

std::int64_t Block::ActivationBytes(int microbatch_size) const {
  // An etp shard keeps etp x the rows, each of F/etp (workload.h).
  return kFloatBytes * microbatch_size * shape_.RowsPerSample() * etp_ *
         (std::int64_t{shape_.hidden} + 2 * std::int64_t{shape_.ffn});
}

std::int64_t Block::OutputBytes(int microbatch_size) const {
  return kFloatBytes * Tokens(microbatch_size) * shape_.hidden;
}

std::int64_t Block::WeightGradientBytes(int microbatch_size) const {
  return kFloatBytes * microbatch_size * shape_.RowsPerSample() * etp_ *
         (2 * std::int64_t{shape_.hidden} + 2 * std::int64_t{shape_.ffn});
}

std::int64_t Block::TransientBytes(int microbatch_size) const {
  return kFloatBytes * Tokens(microbatch_size) * shape_.ffn;
}

std::int64_t Block::MultiplyAdds(int microbatch_size) const {
  return 2 * microbatch_size * shape_.RowsPerSample() * etp_ * shape_.hidden * shape_.ffn;
}

Saved Block::Forward(std::span<const float> x, std::span<float> y, int microbatch_size) const {
  Require(microbatch_size >= 1, "Forward: microbatch_size >= 1");
  if (shape_.moe()) {
    Require(expert_group_size() == 1, "Forward: an expert shard needs its group's exchange");
    SelfExchange self;
    Saved saved;
    Require(Forward(x, y, microbatch_size, self, &saved).ok(), "Forward: a group of one");
    return saved;
  }
  const int t = Tokens(microbatch_size);
  const int h = shape_.hidden;
  const int f = shape_.ffn;
  Require(x.size() == Floats(t, h), "Forward: x holds tokens x hidden floats");
  Require(y.size() == Floats(t, h), "Forward: y holds tokens x hidden floats");
  Saved saved;
  saved.microbatch_size_ = microbatch_size;
  // Copy x first: the copy is what the backward needs, and y may alias x.
  saved.x_ = Buffer(Floats(t, h));
  std::copy(x.begin(), x.end(), saved.x_.data());
  saved.a_ = Buffer(Floats(t, f));
  std::fill_n(saved.a_.data(), saved.a_.size(), 0.0f);
  MatMulAdd(saved.x_.data(), w1_.data(), saved.a_.data(), t, h, f);
  saved.g_ = Buffer(Floats(t, f));
  const float* a = saved.a_.data();
  float* g = saved.g_.data();
  for (std::size_t i = 0; i < saved.g_.size(); ++i) g[i] = Gelu(a[i]);
  if (residual_) {
    std::copy(saved.x_.data(), saved.x_.data() + saved.x_.size(), y.begin());
  } else {
    std::fill(y.begin(), y.end(), 0.0f);  // a shard's partial sum: the residual is worker 0's
  }
  MatMulAdd(g, w2_.data(), y.data(), t, f, h);
  saved.stage_ = Saved::Stage::kForwardDone;
  return saved;
}

void Block::BackwardInput(Saved& saved, std::span<const float> dy, std::span<float> dx) const {
  Require(saved.ready_for_input_gradient(), "BackwardInput: saved comes from Forward");
  if (shape_.moe()) {
    Require(expert_group_size() == 1, "BackwardInput: an expert shard needs its group's exchange");
    SelfExchange self;
    Require(BackwardInput(saved, dy, dx, self).ok(), "BackwardInput: a group of one");
    return;
  }
  const int t = Tokens(saved.microbatch_size_);
  const int h = shape_.hidden;
  const int f = shape_.ffn;
  Require(dy.size() == Floats(t, h), "BackwardInput: dy holds tokens x hidden floats");
  Require(dx.size() == Floats(t, h), "BackwardInput: dx holds tokens x hidden floats");
  // Keep dy for the weight gradient, and read it from the copy: dx may alias dy.
  saved.dy_ = Buffer(Floats(t, h));
  std::copy(dy.begin(), dy.end(), saved.dy_.data());
  const float* dy_kept = saved.dy_.data();
  // dg = dy·W2ᵀ, then da = dg ⊙ gelu'(a): da replaces a, which is not needed after.
  Buffer da(Floats(t, f));
  std::fill_n(da.data(), da.size(), 0.0f);
  MatMulAdd(dy_kept, w2t_.data(), da.data(), t, h, f);
  const float* a = saved.a_.data();
  float* d = da.data();
  for (std::size_t i = 0; i < da.size(); ++i) d[i] *= GeluDerivative(a[i]);
  saved.a_ = std::move(da);
  // dx = dy (residual, worker 0 of a split only) + da·W1ᵀ.
  if (residual_) {
    std::copy(dy_kept, dy_kept + saved.dy_.size(), dx.begin());
  } else {
    std::fill(dx.begin(), dx.end(), 0.0f);
  }
  MatMulAdd(saved.a_.data(), w1t_.data(), dx.data(), t, f, h);
  saved.stage_ = Saved::Stage::kInputGradientDone;
}

void Block::BackwardWeight(Saved& saved) {
  Require(saved.ready_for_weight_gradient(), "BackwardWeight: saved comes from BackwardInput");
  const int h = shape_.hidden;
  const int f = shape_.ffn;
  if (shape_.moe()) {
    // Each local expert's rows, expert by expert.
    const ExpertRows rows = RowsOf(Tokens(saved.microbatch_size_));
    for (int e = 0; e < LocalExperts(); ++e) {
      const std::size_t lo = rows.first[e], n = rows.first[e + 1] - lo;
      const int m = static_cast<int>(n);
      TransposedMatMulAdd(saved.x_.data() + lo * h, saved.a_.data() + lo * f,
                          grad_w1_.data() + e * Floats(h, f), m, h, f);
      TransposedMatMulAdd(saved.g_.data() + lo * f, saved.dy_.data() + lo * h,
                          grad_w2_.data() + e * Floats(f, h), m, f, h);
    }
  } else {
    const int t = Tokens(saved.microbatch_size_);
    TransposedMatMulAdd(saved.x_.data(), saved.a_.data(), grad_w1_.data(), t, h, f);   // xᵀ·da
    TransposedMatMulAdd(saved.g_.data(), saved.dy_.data(), grad_w2_.data(), t, f, h);  // gᵀ·dy
  }
  saved.x_.Reset();
  saved.a_.Reset();
  saved.g_.Reset();
  saved.dy_.Reset();
  saved.stage_ = Saved::Stage::kEmpty;
}

void Block::Backward(Saved& saved, std::span<const float> dy, std::span<float> dx) {
  BackwardInput(saved, dy, dx);
  BackwardWeight(saved);
}

Result<Block> Block::Shard(int parts, int index) const {
  if (parts < 1 || index < 0 || index >= parts) {
    return Status::InvalidArgument("shard " + std::to_string(index) + " of " +
                                   std::to_string(parts) +
                                   ": give parts >= 1 and an index in [0, parts)");
  }
  if (parts == 1) return *this;
  if (shape_.moe()) {
    return Status::InvalidArgument(
        "an MoE block does not split tensor-parallel (its experts split over an expert-parallel "
        "group instead): measure MoE workloads at tensor-parallel degree 1");
  }
  if (shape_.ffn % parts != 0) {
    return Status::InvalidArgument("ffn " + std::to_string(shape_.ffn) + " does not divide into " +
                                   std::to_string(parts) +
                                   " tensor-parallel shards: give a tensor-parallel degree "
                                   "that divides ffn");
  }
  const int h = shape_.hidden;
  const int f = shape_.ffn / parts;
  const int first = index * f;
  BlockShape shape = shape_;
  shape.ffn = f;
  Block s(shape);
  s.w1_.resize(Floats(h, f));
  s.w2_.resize(Floats(f, h));
  for (int r = 0; r < h; ++r) {  // W1 [H×F]: columns first .. first+f
    std::copy_n(w1_.begin() + static_cast<std::ptrdiff_t>(r) * shape_.ffn + first, f,
                s.w1_.begin() + static_cast<std::ptrdiff_t>(r) * f);
  }
  // W2 [F×H]: rows first .. first+f, contiguous.
  std::copy_n(w2_.begin() + static_cast<std::ptrdiff_t>(first) * h, Floats(f, h), s.w2_.begin());
  s.TransposeExperts();
  s.grad_w1_.assign(s.w1_.size(), 0.0f);
  s.grad_w2_.assign(s.w2_.size(), 0.0f);
  s.residual_ = index == 0;
  return s;
}

void Block::ZeroGradients() {
  std::fill(grad_w1_.begin(), grad_w1_.end(), 0.0f);
  std::fill(grad_w2_.begin(), grad_w2_.end(), 0.0f);
}

float Block::Weight(int which, int row, int col) const {
  Require(which == 1 || which == 2, "Weight: which is 1 or 2");
  const int cols = which == 1 ? shape_.ffn : shape_.hidden;
  const int rows = (which == 1 ? shape_.hidden : shape_.ffn) * std::max(LocalExperts(), 1);
  Require(row >= 0 && row < rows && col >= 0 && col < cols, "Weight: index in range");
  const std::vector<float>& w = which == 1 ? w1_ : w2_;
  return w[static_cast<std::size_t>(row) * cols + col];
}

void Block::SetWeight(int which, int row, int col, float value) {
  Require(which == 1 || which == 2, "SetWeight: which is 1 or 2");
  const int cols = which == 1 ? shape_.ffn : shape_.hidden;
  const int per_expert = which == 1 ? shape_.hidden : shape_.ffn;
  const int rows = per_expert * std::max(LocalExperts(), 1);
  Require(row >= 0 && row < rows && col >= 0 && col < cols, "SetWeight: index in range");
  std::vector<float>& w = which == 1 ? w1_ : w2_;
  std::vector<float>& wt = which == 1 ? w1t_ : w2t_;
  w[static_cast<std::size_t>(row) * cols + col] = value;
  // Expert e's rows e·per_expert.. are its matrix; its transpose sits at the same offset.
  const std::size_t e = static_cast<std::size_t>(row / per_expert);
  const int r = row % per_expert;
  wt[e * Floats(per_expert, cols) + static_cast<std::size_t>(col) * per_expert + r] = value;
}

// ---- mixture of experts ----

std::span<const int> Block::Route(int token) const {
  const std::size_t k = static_cast<std::size_t>(shape_.top_k);
  const std::size_t routes = routes_.size() / k;
  return {routes_.data() + (static_cast<std::size_t>(token) % routes) * k, k};
}

Block::ExpertRows Block::RowsOf(int tokens) const {
  ExpertRows rows;
  const int local = LocalExperts();
  rows.to.resize(static_cast<std::size_t>(ep_));
  for (int i = 0; i < tokens; ++i) {
    int last = -1;
    for (int e : Route(i)) {  // ascending, so each member's experts are consecutive
      const int r = e / local;
      if (r != last) rows.to[r].push_back(i);
      last = r;
    }
  }
  const std::vector<int>& mine = rows.to[ep_rank_];
  rows.first.push_back(0);
  for (int e = ep_rank_ * local; e < (ep_rank_ + 1) * local; ++e) {
    for (int part = 0; part < Parts(); ++part) {
      for (int src = 0; src < Sources(); ++src) {
        for (std::size_t idx = 0; idx < mine.size(); ++idx) {
          const std::span<const int> route = Route(mine[idx]);
          if (std::find(route.begin(), route.end(), e) != route.end()) {
            rows.pair.emplace_back(src, static_cast<int>(idx));
            rows.part.push_back(part);
          }
        }
      }
    }
    rows.first.push_back(rows.pair.size());
  }
  return rows;
}

namespace {

// Dispatch: row to[r][j] of `x` [tokens × h] goes to member r (members in
// order); `received` gets every member's rows for this one, ep × to[me].
Status Dispatch(const std::vector<std::vector<int>>& to, int me, std::span<const float> x, int h,
                ExpertExchange& exchange, Buffer* received) {
  const std::size_t row = static_cast<std::size_t>(h);
  std::vector<std::size_t> send_counts;
  std::size_t total = 0;
  for (const std::vector<int>& rows : to) {
    send_counts.push_back(rows.size() * row);
    total += rows.size() * row;
  }
  Buffer send(total);
  float* out = send.data();
  for (const std::vector<int>& rows : to) {
    for (int tok : rows) out = std::copy_n(x.data() + static_cast<std::size_t>(tok) * row, h, out);
  }
  const std::vector<std::size_t> recv_counts(to.size(), to[me].size() * row);
  *received = Buffer(to[me].size() * row * to.size());
  return exchange.AllToAll(send.span(), send_counts, received->span(), recv_counts);
}

// Combine: `sums` holds, per source member s, a row per token in to[me]
// (ep × to[me] rows); each goes back to its source, and every member's
// returned rows are added to `y` [tokens × h] at their tokens, member by
// member.
Status Combine(const std::vector<std::vector<int>>& to, int me, const Buffer& sums, int h,
               ExpertExchange& exchange, std::span<float> y) {
  const std::size_t row = static_cast<std::size_t>(h);
  const std::vector<std::size_t> send_counts(to.size(), to[me].size() * row);
  std::vector<std::size_t> recv_counts;
  std::size_t total = 0;
  for (const std::vector<int>& rows : to) {
    recv_counts.push_back(rows.size() * row);
    total += rows.size() * row;
  }
  Buffer back(total);
  PIPECAST_RETURN_IF_ERROR(exchange.AllToAll(sums.span(), send_counts, back.span(), recv_counts));
  const float* in = back.data();
  for (const std::vector<int>& rows : to) {
    for (int tok : rows) {
      float* dst = y.data() + static_cast<std::size_t>(tok) * row;
      for (int j = 0; j < h; ++j) dst[j] += in[j];
      in += row;
    }
  }
  return Status::Ok();
}

// Adds each pair row of `rows_out` [P × h], times its gate, into row
// pair_row[p] of `sums` (zeroed first), pair by pair.
void SumPairs(const std::vector<std::size_t>& pair_row, const std::vector<float>& gate,
              const Buffer& rows_out, int h, Buffer* sums) {
  const std::size_t row = static_cast<std::size_t>(h);
  std::fill_n(sums->data(), sums->size(), 0.0f);
  for (std::size_t p = 0; p < pair_row.size(); ++p) {
    float* dst = sums->data() + pair_row[p] * row;
    const float* from = rows_out.data() + p * row;
    for (int j = 0; j < h; ++j) dst[j] += gate[p] * from[j];
  }
}

// The all-gather dispatcher's combine: reduce-scatters `sums` [ep·T × h] and
// adds this member's [T × h] block to `y`.
Status ReduceScatterAdd(const Buffer& sums, ExpertExchange& exchange, std::span<float> y) {
  Buffer mine(y.size());
  PIPECAST_RETURN_IF_ERROR(exchange.ReduceScatter(sums.span(), mine.span()));
  for (std::size_t i = 0; i < y.size(); ++i) y[i] += mine.data()[i];
  return Status::Ok();
}

}  // namespace

Status Block::GatherParts(ExpertExchange* tensor, Buffer* rows) const {
  if (etp_ == 1) return Status::Ok();
  Require(tensor != nullptr, "an expert tensor shard needs its etp group's exchange");
  Buffer gathered(rows->size() * static_cast<std::size_t>(etp_));
  PIPECAST_RETURN_IF_ERROR(tensor->AllGather(rows->span(), gathered.span()));
  *rows = std::move(gathered);
  return Status::Ok();
}

Status Block::ScatterParts(ExpertExchange* tensor, Buffer* sums) const {
  if (etp_ == 1) return Status::Ok();
  Require(tensor != nullptr, "an expert tensor shard needs its etp group's exchange");
  Buffer mine(sums->size() / static_cast<std::size_t>(etp_));
  PIPECAST_RETURN_IF_ERROR(tensor->ReduceScatter(sums->span(), mine.span()));
  *sums = std::move(mine);
  return Status::Ok();
}

std::vector<std::size_t> Block::PairRows(const ExpertRows& rows, int tokens) const {
  const std::vector<int>& mine = rows.to[ep_rank_];
  std::vector<std::size_t> out;
  out.reserve(rows.pair.size());
  const std::size_t per_part = static_cast<std::size_t>(ep_) * mine.size();
  for (std::size_t p = 0; p < rows.pair.size(); ++p) {
    const auto& [src, idx] = rows.pair[p];
    // All-to-all: the received rows, per_member from each source (at etp > 1
    // etp such blocks, gathered in etp-rank order); all-gather: the gathered
    // micro-batches, `tokens` from each source.
    out.push_back(all_gather_ ? static_cast<std::size_t>(src) * tokens + mine[idx]
                              : rows.part[p] * per_part +
                                    static_cast<std::size_t>(src) * mine.size() + idx);
  }
  return out;
}

Status Block::GatherTokens(std::span<const float> x, int tokens, const ExpertRows& rows,
                           ExpertExchange& exchange, Buffer* gathered,
                           std::vector<std::size_t>* pair_row, std::vector<float>* gate) const {
  const std::size_t e_all = static_cast<std::size_t>(shape_.experts);
  const std::size_t t = static_cast<std::size_t>(tokens);
  const std::size_t g = static_cast<std::size_t>(Sources());
  // This member's routing map and probs, [T × E] each (1 and 1/k on a route).
  Buffer map(t * e_all), probs(t * e_all);
  std::fill_n(map.data(), map.size(), 0.0f);
  std::fill_n(probs.data(), probs.size(), 0.0f);
  const float k_gate = 1.0f / static_cast<float>(shape_.top_k);
  for (std::size_t i = 0; i < t; ++i) {
    for (int e : Route(static_cast<int>(i))) {
      map.data()[i * e_all + e] = 1.0f;
      probs.data()[i * e_all + e] = k_gate;
    }
  }
  Buffer global_map(g * t * e_all), global_probs(g * t * e_all);
  PIPECAST_RETURN_IF_ERROR(exchange.AllGather(map.span(), global_map.span()));
  PIPECAST_RETURN_IF_ERROR(exchange.AllGather(probs.span(), global_probs.span()));
  *gathered = Buffer(g * t * static_cast<std::size_t>(shape_.hidden));
  PIPECAST_RETURN_IF_ERROR(exchange.AllGather(x, gathered->span()));
  // The local experts' rows, read off the gathered map: expert by expert,
  // gathered token by gathered token (member, then token).
  pair_row->clear();
  gate->clear();
  const int local = LocalExperts();
  for (int j = 0; j < local; ++j) {
    const std::size_t e = static_cast<std::size_t>(ep_rank_ * local + j);
    for (std::size_t r = 0; r < g * t; ++r) {
      if (global_map.data()[r * e_all + e] == 0.0f) continue;
      pair_row->push_back(r);
      gate->push_back(global_probs.data()[r * e_all + e]);
    }
    Require(pair_row->size() == rows.first[j + 1],
            "GatherTokens: the gathered routing map disagrees with the hash router");
  }
  return Status::Ok();
}

Status Block::Forward(std::span<const float> x, std::span<float> y, int microbatch_size,
                      ExpertExchange& exchange, Saved* saved, ExpertExchange* tensor) const {
  Require(shape_.moe() && microbatch_size >= 1, "Forward: an MoE block, microbatch_size >= 1");
  const int t = Tokens(microbatch_size);
  const int h = shape_.hidden;
  const int f = shape_.ffn;
  Require(x.size() == Floats(t, h) && y.size() == Floats(t, h),
          "Forward: x and y hold tokens x hidden floats");
  *saved = Saved();
  const ExpertRows rows = RowsOf(t);
  const std::size_t pairs = rows.pair.size();
  // `received`: the rows this member's experts read (all-to-all: ep x to[me]
  // received; all-gather: the group's ep x T gathered); each pair's row of it
  // and its gate.
  Buffer received;
  std::vector<std::size_t> pair_row;
  std::vector<float> gate;
  if (all_gather_) {
    PIPECAST_RETURN_IF_ERROR(GatherTokens(x, t, rows, exchange, &received, &pair_row, &gate));
  } else {
    PIPECAST_RETURN_IF_ERROR(Dispatch(rows.to, ep_rank_, x, h, exchange, &received));
    PIPECAST_RETURN_IF_ERROR(GatherParts(tensor, &received));
    pair_row = PairRows(rows, t);
    gate.assign(pairs, 1.0f / static_cast<float>(shape_.top_k));
  }
  const std::size_t received_rows = received.size() / static_cast<std::size_t>(h);
  Saved s;
  s.microbatch_size_ = microbatch_size;
  s.x_ = Buffer(pairs * h);
  for (std::size_t p = 0; p < pairs; ++p) {
    std::copy_n(received.data() + pair_row[p] * h, h, s.x_.data() + p * h);
  }
  received.Reset();
  s.a_ = Buffer(pairs * f);
  std::fill_n(s.a_.data(), s.a_.size(), 0.0f);
  s.g_ = Buffer(pairs * f);
  Buffer out(pairs * h);
  std::fill_n(out.data(), out.size(), 0.0f);
  for (int e = 0; e < LocalExperts(); ++e) {
    const std::size_t lo = rows.first[e];
    const int m = static_cast<int>(rows.first[e + 1] - lo);
    MatMulAdd(s.x_.data() + lo * h, w1_.data() + e * Floats(h, f), s.a_.data() + lo * f, m, h, f);
    for (std::size_t i = lo * f; i < (lo + m) * f; ++i) s.g_.data()[i] = Gelu(s.a_.data()[i]);
    MatMulAdd(s.g_.data() + lo * f, w2_.data() + e * Floats(f, h), out.data() + lo * h, m, f, h);
  }
  Buffer sums(received_rows * h);
  SumPairs(pair_row, gate, out, h, &sums);
  out.Reset();
  if (y.data() != x.data()) std::copy(x.begin(), x.end(), y.begin());  // the residual
  if (!all_gather_) PIPECAST_RETURN_IF_ERROR(ScatterParts(tensor, &sums));
  PIPECAST_RETURN_IF_ERROR(all_gather_ ? ReduceScatterAdd(sums, exchange, y)
                                       : Combine(rows.to, ep_rank_, sums, h, exchange, y));
  s.stage_ = Saved::Stage::kForwardDone;
  *saved = std::move(s);
  return Status::Ok();
}

Status Block::BackwardInput(Saved& saved, std::span<const float> dy, std::span<float> dx,
                            ExpertExchange& exchange, ExpertExchange* tensor) const {
  Require(shape_.moe() && saved.ready_for_input_gradient(),
          "BackwardInput: an MoE block, saved comes from Forward");
  const int t = Tokens(saved.microbatch_size_);
  const int h = shape_.hidden;
  const int f = shape_.ffn;
  Require(dy.size() == Floats(t, h) && dx.size() == Floats(t, h),
          "BackwardInput: dy and dx hold tokens x hidden floats");
  const ExpertRows rows = RowsOf(t);
  const std::size_t pairs = rows.pair.size();
  const std::vector<std::size_t> pair_row = PairRows(rows, t);
  // dy's rows for this member's experts: all-to-all, as the forward's x;
  // all-gather, the group's whole dy.
  Buffer received;
  if (all_gather_) {
    received = Buffer(static_cast<std::size_t>(Sources()) * dy.size());
    PIPECAST_RETURN_IF_ERROR(exchange.AllGather(dy, received.span()));
  } else {
    PIPECAST_RETURN_IF_ERROR(Dispatch(rows.to, ep_rank_, dy, h, exchange, &received));
    PIPECAST_RETURN_IF_ERROR(GatherParts(tensor, &received));  // the reduce-scatter's adjoint
  }
  const std::size_t received_rows = received.size() / static_cast<std::size_t>(h);
  // Each pair's output gradient: its token's dy × the gate 1/k.
  const float gate = 1.0f / static_cast<float>(shape_.top_k);
  saved.dy_ = Buffer(pairs * h);
  for (std::size_t p = 0; p < pairs; ++p) {
    const float* from = received.data() + pair_row[p] * h;
    for (int j = 0; j < h; ++j) saved.dy_.data()[p * h + j] = gate * from[j];
  }
  received.Reset();
  Buffer da(pairs * f);
  std::fill_n(da.data(), da.size(), 0.0f);
  Buffer dxe(pairs * h);
  std::fill_n(dxe.data(), dxe.size(), 0.0f);
  for (int e = 0; e < LocalExperts(); ++e) {
    const std::size_t lo = rows.first[e];
    const int m = static_cast<int>(rows.first[e + 1] - lo);
    MatMulAdd(saved.dy_.data() + lo * h, w2t_.data() + e * Floats(h, f), da.data() + lo * f, m, h,
              f);
    for (std::size_t i = lo * f; i < (lo + m) * f; ++i) {
      da.data()[i] *= GeluDerivative(saved.a_.data()[i]);
    }
    MatMulAdd(da.data() + lo * f, w1t_.data() + e * Floats(f, h), dxe.data() + lo * h, m, f, h);
  }
  saved.a_ = std::move(da);
  Buffer sums(received_rows * h);
  SumPairs(pair_row, std::vector<float>(pairs, 1.0f), dxe, h, &sums);
  dxe.Reset();
  if (dx.data() != dy.data()) std::copy(dy.begin(), dy.end(), dx.begin());  // the residual
  if (!all_gather_) PIPECAST_RETURN_IF_ERROR(ScatterParts(tensor, &sums));  // the gather's adjoint
  PIPECAST_RETURN_IF_ERROR(all_gather_ ? ReduceScatterAdd(sums, exchange, dx)
                                       : Combine(rows.to, ep_rank_, sums, h, exchange, dx));
  saved.stage_ = Saved::Stage::kInputGradientDone;
  return Status::Ok();
}

Result<Block> Block::ExpertShard(int ep, int index, ExpertDispatcher dispatcher, int etp,
                                 int tensor_rank) const {
  if (!shape_.moe()) {
    return Status::InvalidArgument("expert shard of a dense block: only MoE blocks have experts");
  }
  if (ep < 1 || index < 0 || index >= ep || expert_group_size() != 1) {
    return Status::InvalidArgument("expert shard " + std::to_string(index) + " of " +
                                   std::to_string(ep) +
                                   ": give ep >= 1 and an index in [0, ep) of a whole block");
  }
  if (shape_.experts % ep != 0) {
    return Status::InvalidArgument(
        "expert parallelism " + std::to_string(ep) + " does not divide the " +
        std::to_string(shape_.experts) +
        " experts: each member holds experts / ep whole experts; use a divisor of " +
        std::to_string(shape_.experts));
  }
  if (etp < 1 || tensor_rank < 0 || tensor_rank >= etp || shape_.ffn % etp != 0) {
    return Status::InvalidArgument("expert tensor shard " + std::to_string(tensor_rank) + " of " +
                                   std::to_string(etp) + " of an expert of ffn " +
                                   std::to_string(shape_.ffn) +
                                   ": give etp >= 1 dividing ffn and a tensor rank in [0, etp)");
  }
  const std::size_t local = static_cast<std::size_t>(shape_.experts / ep);
  const std::size_t n = Floats(shape_.hidden, shape_.ffn);
  if (etp > 1) {
    // Each local expert's fc1 columns and fc2 rows r·F/etp .. (r+1)·F/etp.
    const int h = shape_.hidden;
    const int f = shape_.ffn / etp;
    BlockShape shape = shape_;
    shape.ffn = f;
    Block s(shape);
    s.routes_ = routes_;
    s.ep_ = ep;
    s.ep_rank_ = index;
    s.etp_ = etp;
    s.etp_rank_ = tensor_rank;
    s.all_gather_ = dispatcher == ExpertDispatcher::kAllGather;
    s.w1_.resize(local * Floats(h, f));
    s.w2_.resize(local * Floats(f, h));
    for (std::size_t e = 0; e < local; ++e) {
      const std::size_t whole = (local * index + e) * n;
      for (int r = 0; r < h; ++r) {  // W1 [H×F]: columns tensor_rank·f ..
        std::copy_n(w1_.begin() + static_cast<std::ptrdiff_t>(whole) +
                        static_cast<std::ptrdiff_t>(r) * shape_.ffn + tensor_rank * f,
                    f, s.w1_.begin() + static_cast<std::ptrdiff_t>(e * Floats(h, f)) + r * f);
      }
      // W2 [F×H]: rows tensor_rank·f .., contiguous.
      std::copy_n(w2_.begin() + static_cast<std::ptrdiff_t>(whole) +
                      static_cast<std::ptrdiff_t>(tensor_rank) * f * h,
                  Floats(f, h), s.w2_.begin() + static_cast<std::ptrdiff_t>(e * Floats(f, h)));
    }
    s.TransposeExperts();
    s.grad_w1_.assign(s.w1_.size(), 0.0f);
    s.grad_w2_.assign(s.w2_.size(), 0.0f);
    return s;
  }
  Block s(shape_);
  s.routes_ = routes_;
  s.ep_ = ep;
  s.ep_rank_ = index;
  s.all_gather_ = dispatcher == ExpertDispatcher::kAllGather;
  const auto from = static_cast<std::ptrdiff_t>(local * index * n);
  const auto count = static_cast<std::ptrdiff_t>(local * n);
  s.w1_.assign(w1_.begin() + from, w1_.begin() + from + count);
  s.w2_.assign(w2_.begin() + from, w2_.begin() + from + count);
  s.w1t_.assign(w1t_.begin() + from, w1t_.begin() + from + count);
  s.w2t_.assign(w2t_.begin() + from, w2t_.begin() + from + count);
  s.grad_w1_.assign(s.w1_.size(), 0.0f);
  s.grad_w2_.assign(s.w2_.size(), 0.0f);
  return s;
}

// ---- counters ----

std::int64_t LiveWorkloadBytes() { return g_live_bytes.load(std::memory_order_relaxed); }
std::int64_t PeakWorkloadBytes() { return g_peak_bytes.load(std::memory_order_relaxed); }
void ResetPeakWorkloadBytes() {
  g_peak_bytes.store(g_live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

// ---- WorkloadSpec ----

Status WorkloadSpec::Validate() const {
  if (!per_layer.empty()) {
    if (layers != static_cast<int>(per_layer.size())) {
      return Status::InvalidArgument("layers is " + std::to_string(layers) + " but per_layer has " +
                                     std::to_string(per_layer.size()) + " shapes: they must agree");
    }
    for (std::size_t i = 0; i < per_layer.size(); ++i) {
      PIPECAST_RETURN_IF_ERROR(per_layer[i].Validate().WithPrefix("layer " + std::to_string(i)));
      // Layer i's output is layer i+1's input: only the MLP width may differ.
      const BlockShape& first = per_layer.front();
      if (per_layer[i].hidden != first.hidden ||
          per_layer[i].tokens_per_sample != first.tokens_per_sample) {
        return Status::InvalidArgument(
            "layer " + std::to_string(i) + " has hidden " + std::to_string(per_layer[i].hidden) +
            " and tokens_per_sample " + std::to_string(per_layer[i].tokens_per_sample) +
            " but layer 0 has " + std::to_string(first.hidden) + " and " +
            std::to_string(first.tokens_per_sample) +
            ": layers are chained (one's output is the next one's input), so only ffn may differ");
      }
    }
    return Status::Ok();
  }
  if (layers < 1) {
    return Status::InvalidArgument("layers is " + std::to_string(layers) + ": use 1 or more");
  }
  return shape.Validate();
}

int WorkloadSpec::LayerCount() const {
  return per_layer.empty() ? layers : static_cast<int>(per_layer.size());
}

BlockShape WorkloadSpec::LayerShape(int layer) const {
  return per_layer.empty() ? shape : per_layer.at(static_cast<std::size_t>(layer));
}

std::vector<Block> WorkloadSpec::Build() const {
  std::vector<Block> blocks;
  blocks.reserve(static_cast<std::size_t>(LayerCount()));
  for (int i = 0; i < LayerCount(); ++i) blocks.emplace_back(LayerShape(i), LayerSeed(i));
  return blocks;
}

}  // namespace pipecast::cpu
