// The built-in CPU workload: a stack of transformer-style MLP blocks that run
// forward, input-gradient and weight-gradient passes on real float32 buffers,
// so that `profiler cpu` can measure per-layer costs and the validator can
// execute a plan on any machine, with no GPU.
//
// One layer (Block) computes y = x + W2·gelu(W1·x) on activations of
// [tokens × hidden], tokens = microbatch_size × tokens_per_sample, with
// W1: hidden → ffn and W2: ffn → hidden (no biases; gelu is the tanh form).
// Matrix products are single-threaded i-k-j loops (no BLAS), so one op uses
// one core and a stage per thread scales with the cores available.
//
// Memory: every activation and transient buffer is allocated through a
// counting allocator; LiveWorkloadBytes()/PeakWorkloadBytes() report what is
// allocated now and at most, process-wide. Weights and weight gradients are
// not counted (they are the model's parameters, fixed for a run).
//
// What each pass keeps (T = tokens, H = hidden, F = ffn, 4 bytes a float):
//   Forward        keeps x [T×H], a = W1·x [T×F], g = gelu(a) [T×F]:
//                  ActivationBytes = 4·T·(H + 2F).
//   BackwardInput  computes dx, frees a, keeps what the weight gradient
//                  needs: x, g, da [T×F] and a copy of dy [T×H]
//                  (WeightGradientBytes = 4·T·(2H + 2F)).
//   BackwardWeight accumulates dW1 += xᵀ·da and dW2 += gᵀ·dy, then frees all.
//
// Tensor parallelism (Megatron-LM's MLP split, Shoeybi et al. 2019 sec. 3):
// Shard(t, j) is worker j's part of a t-way split block: W1's columns and
// W2's rows j·F/t to (j+1)·F/t. Its Forward writes a partial sum,
// W2_j·gelu(W1_j·x) (plus the residual x on worker 0 only), and its
// BackwardInput a partial dx, da_j·W1_jᵀ (plus dy on worker 0 only): summing
// the t partials (one all-reduce after each) gives the unsplit block's y and
// dx, up to float rounding (the sum runs in another order). So a split
// block has 1 all-reduce in the forward and 1 in the backward (Megatron's
// transformer block has 2 and 2: attention and MLP). x and dy are whole on
// every worker; a, g and da are 1/t; the weight gradients are the shard's.
//
// Mixture of experts (BlockShape::experts E > 0): the layer is E experts,
// each an MLP of this shape without the residual, y = x + (1/k)·Σ_{e ∈
// route(i)} W2_e·gelu(W1_e·x_i) for token i. The router is a fixed hash
// (Roller et al. 2021, "Hash Layers For Large Sparse Models"): token i of a
// micro-batch goes to the (i mod C(E,k))-th k-subset of the experts in
// lexicographic order, so that with C(E,k) dividing tokens_per_sample every
// expert receives exactly T·k/E tokens and the routing is the same on every
// run. Expert parallelism (ExpertShard(ep, j)): member j of an ep group holds
// experts j·E/ep to (j+1)·E/ep; its forward dispatches each token once to
// every member holding one of its experts (DeepEP's count, one copy per
// (token, destination), sim/collectives.h), runs its experts on the rows it
// received, sums each token's local experts and combines the sums back, two
// all-to-alls over an ExpertExchange; the input gradient does the same with
// dy. With Megatron-LM's all-gather dispatcher (ExpertShard(ep, j,
// ExpertDispatcher::kAllGather); token_dispatcher.py,
// MoEAllGatherTokenDispatcher) the forward instead all-gathers, over the
// group, its routing map and probs ([T×E] each, floats: 1 and 1/k on a
// token's route) and its x, takes the rows of its experts out of the
// gathered [ep·T×H] by the gathered map, and reduce-scatters the
// [ep·T×H] sum of their outputs x prob back; the input gradient
// all-gathers dy and reduce-scatters dx: 3 all-gathers and 1
// reduce-scatter forward, 1 and 1 backward. Each expert gets the same
// rows, in the same order (member, then token), as with the all-to-alls.
// What a forward keeps is per (token, local expert) pair: x_e [P×H],
// a_e and g_e [P×F], P = T·k on every member when the routing is balanced
// (the tokens of ep members reach E/ep experts each), so it is the same at
// every ep: ActivationBytes = 4·T·k·(H + 2F).
// Expert tensor parallelism (ExpertShard(ep, j, dispatcher, etp, r);
// Megatron-LM's experts.py: fc1 column-parallel, fc2 row-parallel over the
// expert-tensor group): member (j, r) of an etp x ep group holds columns
// r·F/etp.. of its experts' W1 and those rows of W2. With the all-to-all
// dispatchers (MoEAlltoAllTokenDispatcher) the dispatch all-to-all runs over
// the ep members of etp rank r (`exchange`), then the received rows are
// all-gathered over the etp members of ep rank j (`tensor`), each expert
// runs its F/etp slice on the etp·P gathered rows, the partial sums are
// reduce-scattered back over etp and combined by all-to-all; the input
// gradient likewise (the dy all-gather is the reduce-scatter's adjoint, the
// dx reduce-scatter the gather's). The probs are not gathered (the hash
// router's are the constant 1/k). With the all-gather dispatcher the group
// is already the etp x ep members (tp_ep_group): `exchange` spans all of
// them and each member computes its slice of its ep rank's experts for the
// whole gathered batch; the reduce-scatter sums the slices. Either way a
// member keeps etp·P rows of x and dy and etp·P x F/etp of a and g:
// ActivationBytes = 4·T·k·(etp·H + 2F).
//
// Thread-safety: a Block's const methods may run concurrently (they read the
// weights only); BackwardWeight and the mutators need exclusive access. The
// byte counters are atomic.
#ifndef PIPECAST_PROFILER_CPU_WORKLOAD_H_
#define PIPECAST_PROFILER_CPU_WORKLOAD_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "sim/collectives.h"
#include "sim/model.h"

namespace pipecast::cpu {

// Shape of one layer of the built-in CPU workload.
struct BlockShape {
  int hidden = 256;            // H: width of x and y
  int ffn = 1024;              // F: width of the MLP's inner activation
  int tokens_per_sample = 32;  // rows of x per sample
  // Mixture of experts: 0 = a dense MLP block; else E experts of width ffn,
  // each token routed to top_k of them (see above).
  int experts = 0;
  int top_k = 0;

  // OK when every field is in [1, kMaxWidth], hidden·ffn (× experts) <=
  // kMaxBlockWeights and one sample's activations stay under
  // kMaxSampleBytes; with experts, 1 <= top_k <= experts <= kMaxExperts and
  // C(experts, top_k) divides tokens_per_sample (balanced hash routing);
  // otherwise names the field.
  Status Validate() const;
  bool moe() const { return experts > 0; }
  // Rows a forward keeps per sample: tokens_per_sample, × top_k for MoE.
  std::int64_t RowsPerSample() const;
  bool operator==(const BlockShape&) const = default;
};

// Largest hidden, ffn or tokens_per_sample accepted (a sanity bound).
inline constexpr int kMaxWidth = 1 << 16;
// Largest activation of one sample accepted (1 GiB): keeps T·F in int64 and
// the machine out of swap.
inline constexpr std::int64_t kMaxSampleBytes = std::int64_t{1} << 30;
// Largest H·F accepted (2^27, 128 Mi): a Block keeps 6 float copies of that
// size (two layouts of W1 and W2, two gradients), 3 GiB at the limit.
inline constexpr std::int64_t kMaxBlockWeights = std::int64_t{1} << 27;
// Most experts an MoE block may have (the routing table has C(E, k) rows).
inline constexpr int kMaxExperts = 64;
// Largest C(experts, top_k) accepted: the hash router's table.
inline constexpr std::int64_t kMaxRoutes = 1 << 16;

// C(experts, top_k): the hash router's routes (kMaxRoutes + 1 past
// kMaxRoutes); 1 for a dense shape.
std::int64_t ExpertRoutes(const BlockShape& shape);

// The all-to-all an expert-parallel MoE block runs (MPI_Alltoallv's shape):
// this member sends send_counts[r] floats, consecutive in `send`, to member
// r and receives recv_counts[s] floats from member s, consecutive in `recv`
// in member order. Every member of the group calls it the same number of
// times. Implemented by the validator (threads, MPI, NCCL).
class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual Status AllToAll(std::span<const float> send, std::span<const std::size_t> send_counts,
                          std::span<float> recv, std::span<const std::size_t> recv_counts) = 0;
  // MPI_Allgather's shape: every member sends as many floats; `recv` (the
  // group's size x send.size()) gets every member's in member order.
  virtual Status AllGather(std::span<const float> send, std::span<float> recv) = 0;
  // MPI_Reduce_scatter_block's (MPI_SUM): `send` holds the group's size
  // blocks of recv.size() floats, block r for member r; `recv` gets the sum
  // over the members of their block for this member.
  virtual Status ReduceScatter(std::span<const float> send, std::span<float> recv) = 0;
};

// Live and peak bytes of the buffers charged to it: those allocated while it
// was their thread's current account (ScopedMemoryAccount), e.g. one
// validator stage. Freed buffers are taken off the account they were charged
// to, whichever thread frees them. Thread-safe (atomics).
class MemoryAccount {
 public:
  MemoryAccount() = default;
  MemoryAccount(const MemoryAccount&) = delete;
  MemoryAccount& operator=(const MemoryAccount&) = delete;

  std::int64_t live_bytes() const { return live_.load(std::memory_order_relaxed); }
  std::int64_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  // Sets the peak to the current live bytes.
  void ResetPeak() { peak_.store(live_bytes(), std::memory_order_relaxed); }

 private:
  friend class Buffer;
  void Add(std::int64_t bytes);
  void Subtract(std::int64_t bytes) { live_.fetch_sub(bytes, std::memory_order_relaxed); }
  std::atomic<std::int64_t> live_{0};
  std::atomic<std::int64_t> peak_{0};
};

// Makes `account` the calling thread's current account until destroyed, then
// restores the previous one (scopes nest). REQUIRES: the account outlives
// every buffer charged to it.
class ScopedMemoryAccount {
 public:
  explicit ScopedMemoryAccount(MemoryAccount* account);
  ~ScopedMemoryAccount();
  ScopedMemoryAccount(const ScopedMemoryAccount&) = delete;
  ScopedMemoryAccount& operator=(const ScopedMemoryAccount&) = delete;

 private:
  MemoryAccount* previous_;
};

// A float array allocated through the counting allocator: its bytes are in
// LiveWorkloadBytes() from construction to destruction, and in the thread's
// current MemoryAccount if one is set. Movable, not copyable.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t floats);  // uninitialised contents
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::int64_t bytes() const { return static_cast<std::int64_t>(size_ * sizeof(float)); }
  std::span<float> span() { return {data_, size_}; }
  std::span<const float> span() const { return {data_, size_}; }
  void Reset();  // frees now

 private:
  float* data_ = nullptr;
  std::size_t size_ = 0;
  MemoryAccount* account_ = nullptr;  // charged at allocation; may be null
};

// What one forward keeps alive for its backward (the real buffers).
// Movable, not copyable; destroying it frees whatever it still holds.
class Saved {
 public:
  Saved() = default;
  Saved(Saved&&) noexcept = default;
  Saved& operator=(Saved&&) noexcept = default;
  Saved(const Saved&) = delete;
  Saved& operator=(const Saved&) = delete;

  // Bytes the buffers hold now (0 after BackwardWeight).
  std::int64_t Bytes() const;
  int microbatch_size() const { return microbatch_size_; }
  // True between Forward and BackwardInput.
  bool ready_for_input_gradient() const { return stage_ == Stage::kForwardDone; }
  // True between BackwardInput and BackwardWeight.
  bool ready_for_weight_gradient() const { return stage_ == Stage::kInputGradientDone; }

 private:
  friend class Block;
  enum class Stage { kEmpty, kForwardDone, kInputGradientDone };
  Stage stage_ = Stage::kEmpty;
  int microbatch_size_ = 0;
  // Dense: T rows; MoE: one row per (token, local expert) pair, expert by
  // expert (the rows each expert ran).
  Buffer x_;   // layer input [T×H]
  Buffer a_;   // W1·x [T×F]; after BackwardInput holds da instead
  Buffer g_;   // gelu(a) [T×F]
  Buffer dy_;  // copy of the output gradient [T×H] (MoE: × 1/k), from BackwardInput on
};

// One layer: weights, their gradient accumulators, and the passes.
class Block {
 public:
  // Weights uniform in ±1/sqrt(fan_in) from a fixed generator seeded by
  // `seed`: the same (shape, seed) gives the same weights bit for bit.
  // REQUIRES: shape.Validate().ok().
  Block(BlockShape shape, std::uint64_t seed);

  const BlockShape& shape() const { return shape_; }
  std::int64_t Parameters() const;  // 2·H·F, × the experts it holds for MoE
  int Tokens(int microbatch_size) const { return microbatch_size * shape_.tokens_per_sample; }
  // Bytes Forward keeps in Saved: 4·T·(H + 2F); MoE 4·T·k·(H + 2F).
  std::int64_t ActivationBytes(int microbatch_size) const;
  // 4·T·H: the output sent to the next stage, and the gradient sent back.
  std::int64_t OutputBytes(int microbatch_size) const;
  // Bytes Saved holds between BackwardInput and BackwardWeight: 4·T·(2H + 2F)
  // (MoE: T·k rows).
  std::int64_t WeightGradientBytes(int microbatch_size) const;
  // Largest transient bytes a pass allocates beyond Saved (BackwardInput's da
  // while a is still alive): 4·T·F.
  std::int64_t TransientBytes(int microbatch_size) const;
  // Multiply-adds of one pass at this micro-batch size (2·T·H·F each for
  // forward, input gradient and weight gradient; MoE 2·T·k·H·F).
  std::int64_t MultiplyAdds(int microbatch_size) const;

  // x and y hold Tokens(microbatch_size)·hidden floats. Allocates the Saved
  // buffers. REQUIRES: microbatch_size >= 1; span sizes as stated (aborts
  // otherwise: a caller bug, not input).
  Saved Forward(std::span<const float> x, std::span<float> y, int microbatch_size) const;
  // Writes dx = dL/dx from dy = dL/dy; keeps in `saved` what BackwardWeight
  // needs. REQUIRES: saved.ready_for_input_gradient(); dy, dx sized like y.
  void BackwardInput(Saved& saved, std::span<const float> dy, std::span<float> dx) const;
  // Adds this micro-batch's weight gradients to the accumulators, then frees
  // saved's buffers. REQUIRES: saved.ready_for_weight_gradient().
  void BackwardWeight(Saved& saved);
  // BackwardInput then BackwardWeight.
  void Backward(Saved& saved, std::span<const float> dy, std::span<float> dx);

  // An MoE block's forward and input gradient with its expert-parallel
  // group's all-to-alls through `exchange` (the passes above run them on a
  // group of one). Errors are the exchange's (an aborted wait); `saved` is
  // then left empty.
  // `tensor`: the expert-tensor group's exchange, required at etp > 1 with
  // an all-to-all dispatcher (above); ignored otherwise.
  Status Forward(std::span<const float> x, std::span<float> y, int microbatch_size,
                 ExpertExchange& exchange, Saved* saved, ExpertExchange* tensor = nullptr) const;
  Status BackwardInput(Saved& saved, std::span<const float> dy, std::span<float> dx,
                       ExpertExchange& exchange, ExpertExchange* tensor = nullptr) const;
  // Member `index` of an `ep`-way expert-parallel group: a Block holding
  // experts index·E/ep to (index+1)·E/ep (their weights, gradients zero),
  // exchanging tokens as `dispatcher` does (kAllGather: all-gathers and
  // reduce-scatters; the others: the all-to-alls of DeepEP's count).
  // With etp > 1, member `tensor_rank` of the expert's etp-way split (above).
  // InvalidArgument when the block is not MoE, ep < 1, index is not in
  // [0, ep), ep does not divide the experts, etp < 1, tensor_rank is not in
  // [0, etp) or etp does not divide ffn.
  Result<Block> ExpertShard(int ep, int index,
                            ExpertDispatcher dispatcher = ExpertDispatcher::kDeepEp, int etp = 1,
                            int tensor_rank = 0) const;
  bool all_gather_dispatch() const { return all_gather_; }
  int expert_parallel() const { return ep_; }
  int expert_rank() const { return ep_rank_; }
  int expert_tensor_parallel() const { return etp_; }
  int expert_tensor_rank() const { return etp_rank_; }
  // The members an expert shard exchanges with: ep x etp (1 for a whole block).
  int expert_group_size() const { return ep_ * etp_; }

  // Worker `index`'s shard of a `parts`-way tensor-parallel split (see
  // above): a Block of ffn F/parts holding its slice of the weights (its
  // gradients zero), with the residual on index 0 only. InvalidArgument when
  // parts < 1, index is not in [0, parts) or parts does not divide ffn.
  Result<Block> Shard(int parts, int index) const;
  // False for shards other than index 0: their outputs leave out the residual.
  bool adds_residual() const { return residual_; }

  // Weight-gradient accumulators, row-major: dW1 [H×F], dW2 [F×H].
  std::span<const float> GradientW1() const { return grad_w1_; }
  std::span<const float> GradientW2() const { return grad_w2_; }
  void ZeroGradients();
  // Element (row, col) of W1 [H×F] (which = 1) or W2 [F×H] (which = 2); the
  // setter keeps the transposed copies in step (for gradient checks).
  float Weight(int which, int row, int col) const;
  void SetWeight(int which, int row, int col, float value);

 private:
  explicit Block(BlockShape shape);  // empty weights, for Shard
  // The experts of token `i`'s route (hash router), k of them, ascending.
  std::span<const int> Route(int token) const;
  // Where an MoE pass's rows go for micro-batches of `tokens` tokens on every
  // member: to[r] the tokens (indices in a member's micro-batch) routed to
  // ep rank r, ascending; the rows of Saved, expert by expert (local expert e
  // has rows first[e] .. first[e+1]), each the pair (source member, index in
  // to[this member's ep rank]), and its etp part (the etp member whose
  // received rows it came from; 0 but for all-to-alls at etp > 1).
  struct ExpertRows {
    std::vector<std::vector<int>> to;
    std::vector<std::size_t> first;
    std::vector<std::pair<int, int>> pair;
    std::vector<int> part;
  };
  ExpertRows RowsOf(int tokens) const;
  // Each pair of `rows` (micro-batches of `tokens`): its row in what the
  // dispatch delivers (all-to-all: source · |to[me]| + index; all-gather:
  // source · tokens + the token).
  std::vector<std::size_t> PairRows(const ExpertRows& rows, int tokens) const;
  // The all-gather dispatcher's dispatch: all-gathers the routing map, the
  // probs and `x` [tokens × hidden] through `exchange`; `gathered` gets the
  // group's [ep·tokens × hidden] and, for each pair of `rows` (expert by
  // expert), its row there and its prob, read off the gathered map and probs.
  // Errors are the exchange's.
  Status GatherTokens(std::span<const float> x, int tokens, const ExpertRows& rows,
                      ExpertExchange& exchange, Buffer* gathered,
                      std::vector<std::size_t>* pair_row, std::vector<float>* gate) const;
  // At etp > 1 with the all-to-alls: all-gathers `rows` (the received rows)
  // over the etp group through `tensor`, and reduce-scatters `sums` (etp
  // blocks of partial sums) back; no-ops at etp = 1. Errors are the exchange's.
  Status GatherParts(ExpertExchange* tensor, Buffer* rows) const;
  Status ScatterParts(ExpertExchange* tensor, Buffer* sums) const;
  void TransposeExperts();  // w1t_ and w2t_ from w1_ and w2_, expert by expert
  int LocalExperts() const { return shape_.moe() ? shape_.experts / ep_ : 0; }
  // The members whose tokens reach this one's experts: ep, or ep x etp with
  // the all-gather dispatcher; and the etp copies of received rows (etp with
  // the all-to-alls, else 1).
  int Sources() const { return all_gather_ ? ep_ * etp_ : ep_; }
  int Parts() const { return all_gather_ ? 1 : etp_; }
  BlockShape shape_;
  // MoE: C(E,k) routes of k experts each, row-major; the group and member.
  std::vector<int> routes_;
  int ep_ = 1;
  int ep_rank_ = 0;
  int etp_ = 1;  // expert tensor parallelism: ffn is the F/etp slice
  int etp_rank_ = 0;
  bool all_gather_ = false;  // Megatron-LM's all-gather dispatcher (above)
  // Both layouts of each weight, so that every product is an i-k-j loop over
  // contiguous rows: w1_ [H×F], w1t_ [F×H], w2_ [F×H], w2t_ [H×F].
  std::vector<float> w1_, w1t_, w2_, w2t_;
  std::vector<float> grad_w1_, grad_w2_;
  bool residual_ = true;  // Forward adds x to y and BackwardInput dy to dx
};

// Bytes currently allocated by workload buffers (activations and transient),
// process-wide, thread-safe.
std::int64_t LiveWorkloadBytes();
// Highest LiveWorkloadBytes() since the start or the last reset.
std::int64_t PeakWorkloadBytes();
// Sets the peak to the current live bytes.
void ResetPeakWorkloadBytes();

// A whole workload: `layers` blocks of `shape`, or the shapes listed in
// per_layer (when non-empty it wins and layers must equal its size). Layer i
// is built with seed + i.
struct WorkloadSpec {
  BlockShape shape;
  int layers = 4;
  std::vector<BlockShape> per_layer;  // optional unequal layers
  std::uint64_t seed = 1;

  // OK when layers >= 1, every shape is valid and all layers share hidden and
  // tokens_per_sample (they are chained; only ffn may differ); names the
  // layer otherwise.
  Status Validate() const;
  int LayerCount() const;
  BlockShape LayerShape(int layer) const;  // REQUIRES: 0 <= layer < LayerCount()
  std::uint64_t LayerSeed(int layer) const { return seed + static_cast<std::uint64_t>(layer); }
  // The blocks, in order. REQUIRES: Validate().ok().
  std::vector<Block> Build() const;
};

// The key of ModelSource::details that holds the workload description.
inline constexpr char kWorkloadSourceKey[] = "workload";

// JSON text (an object) describing `spec`, for ModelSource::details
// [kWorkloadSourceKey]: {"kind": "mlp-block", "formula": ..., "seed": s,
// "layers": [{"hidden": H, "ffn": F, "tokens_per_sample": T}, ...]}.
std::string WorkloadToSourceJson(const WorkloadSpec& spec);
// Rebuilds the spec of a model measured by `profiler cpu`. Fails with
// InvalidArgument when source.method is not "cpu", the workload key is
// missing, or its JSON is malformed (naming the JSON path).
Result<WorkloadSpec> WorkloadFromSource(const ModelSource& source);
// The same, from the JSON text WorkloadToSourceJson wrote.
Result<WorkloadSpec> WorkloadFromJson(const std::string& text);

}  // namespace pipecast::cpu

#endif  // PIPECAST_PROFILER_CPU_WORKLOAD_H_
