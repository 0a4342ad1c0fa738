// The CPU workload (profiler/cpu/workload.h): shapes, the counted buffers,
// the dense block's passes, its weight gradients and shards, and the
// workload spec. The mixture-of-experts passes and ExpertShard are in
// workload_moe.cc; the kernels both use in internal/workload_kernels.h.
#include "profiler/cpu/workload.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <new>
#include <string>
#include <utility>

#include "profiler/cpu/internal/workload_kernels.h"

namespace pipecast::cpu {

using internal::Floats;
using internal::Gelu;
using internal::GeluDerivative;
using internal::MatMulAdd;
using internal::Require;
using internal::TransposedMatMulAdd;

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
