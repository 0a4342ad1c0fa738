#include "validate/layer_work.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "base/text_table.h"

namespace pipecast::validate {
namespace {

std::span<const float> AsFloats(std::span<const std::byte> b) {
  return {reinterpret_cast<const float*>(b.data()), b.size() / sizeof(float)};
}

// An MoE block's all-to-alls over the op's expert-parallel group, timed into
// the op's collective time.
class GroupExchange final : public cpu::ExpertExchange {
 public:
  GroupExchange(const OpCall& call, const Clock* clock) : call_(call), clock_(clock) {}
  Status AllToAll(std::span<const float> send, std::span<const size_t> send_counts,
                  std::span<float> recv, std::span<const size_t> recv_counts) override {
    static const std::atomic<bool> kNever{false};
    const TimeNs start = clock_->NowNs();
    Status st =
        call_.expert_group->AllToAll(call_.expert_rank, send, send_counts, recv, recv_counts,
                                     call_.abort != nullptr ? *call_.abort : kNever);
    if (call_.collective_ns != nullptr) *call_.collective_ns += clock_->NowNs() - start;
    return st;
  }
  Status AllGather(std::span<const float> send, std::span<float> recv) override {
    return Timed([&](const std::atomic<bool>& abort) {
      return call_.expert_group->AllGather(call_.expert_rank, send, recv, abort);
    });
  }
  Status ReduceScatter(std::span<const float> send, std::span<float> recv) override {
    return Timed([&](const std::atomic<bool>& abort) {
      return call_.expert_group->ReduceScatter(call_.expert_rank, send, recv, abort);
    });
  }

 private:
  template <typename Run>
  Status Timed(Run run) {
    static const std::atomic<bool> kNever{false};
    const TimeNs start = clock_->NowNs();
    Status st = run(call_.abort != nullptr ? *call_.abort : kNever);
    if (call_.collective_ns != nullptr) *call_.collective_ns += clock_->NowNs() - start;
    return st;
  }
  const OpCall& call_;
  const Clock* clock_;
};

// One of the expert group's sub-groups (expert tensor parallelism: the ep
// workers of one etp rank, or the etp workers of one expert rank), its
// collectives run as all-to-alls of the whole group with nothing sent to the
// other members, so every backend's AllToAll serves. A sub-group of one
// copies (every member's sub-group has that size, so all skip alike).
class SubgroupExchange final : public cpu::ExpertExchange {
 public:
  // `members`: the sub-group's members of the whole group, ascending; `me`
  // this worker's index among them; `size` the whole group's.
  SubgroupExchange(cpu::ExpertExchange& whole, std::vector<int> members, int me, int size)
      : whole_(whole), members_(std::move(members)), me_(me), size_(size) {}
  Status AllToAll(std::span<const float> send, std::span<const size_t> send_counts,
                  std::span<float> recv, std::span<const size_t> recv_counts) override {
    if (members_.size() == 1) {
      std::copy(send.begin(), send.end(), recv.begin());
      return Status::Ok();
    }
    // Members ascend, so the sub-group's consecutive blocks are the group's.
    return whole_.AllToAll(send, Spread(send_counts), recv, Spread(recv_counts));
  }
  Status AllGather(std::span<const float> send, std::span<float> recv) override {
    if (members_.size() == 1) return AllToAll(send, {}, recv, {});
    std::vector<float> copies;
    copies.reserve(send.size() * members_.size());
    for (size_t i = 0; i < members_.size(); ++i)
      copies.insert(copies.end(), send.begin(), send.end());
    const std::vector<size_t> counts(members_.size(), send.size());
    return whole_.AllToAll(copies, Spread(counts), recv, Spread(counts));
  }
  Status ReduceScatter(std::span<const float> send, std::span<float> recv) override {
    if (members_.size() == 1) return AllToAll(send, {}, recv, {});
    std::vector<float> blocks(recv.size() * members_.size());
    const std::vector<size_t> counts(members_.size(), recv.size());
    PIPECAST_RETURN_IF_ERROR(whole_.AllToAll(send, Spread(counts), blocks, Spread(counts)));
    for (size_t i = 0; i < recv.size(); ++i) {  // summed in member order
      float sum = 0;
      for (size_t m = 0; m < members_.size(); ++m) sum += blocks[m * recv.size() + i];
      recv[i] = sum;
    }
    return Status::Ok();
  }

 private:
  std::vector<size_t> Spread(std::span<const size_t> counts) const {
    std::vector<size_t> all(static_cast<size_t>(size_), 0);
    for (size_t m = 0; m < members_.size(); ++m) all[static_cast<size_t>(members_[m])] = counts[m];
    return all;
  }
  cpu::ExpertExchange& whole_;
  std::vector<int> members_;
  int me_;
  int size_;
};

// A block's exchanges in the expert group: the whole group, or at etp > 1
// with the all-to-alls its ep and etp sub-groups.
class ExpertExchanges {
 public:
  ExpertExchanges(const cpu::Block& b, cpu::ExpertExchange& whole) : whole_(whole) {
    const int etp = b.expert_tensor_parallel();
    if (etp == 1 || b.all_gather_dispatch()) return;
    const int ep = b.expert_parallel(), j = b.expert_rank(), r = b.expert_tensor_rank();
    std::vector<int> ep_members, etp_members;
    for (int i = 0; i < ep; ++i) ep_members.push_back(i * etp + r);
    for (int i = 0; i < etp; ++i) etp_members.push_back(j * etp + i);
    ep_.emplace(whole, std::move(ep_members), j, ep * etp);
    etp_.emplace(whole, std::move(etp_members), r, ep * etp);
  }
  cpu::ExpertExchange& ep() { return ep_ ? static_cast<cpu::ExpertExchange&>(*ep_) : whole_; }
  cpu::ExpertExchange* etp() { return etp_ ? &*etp_ : nullptr; }

 private:
  cpu::ExpertExchange& whole_;
  std::optional<SubgroupExchange> ep_, etp_;
};

// Expert parallelism's members: each holds its 1/ep of every MoE layer's
// experts (cpu::Block::ExpertShard) and a whole copy of every dense layer, as
// data-parallel replicas do.
// With etp > 1, worker m = j·etp + r of the group holds expert rank j's
// experts' slice r (cpu::Block::ExpertShard).
Result<std::vector<std::vector<cpu::Block>>> ExpertShards(const std::vector<cpu::Block>& blocks,
                                                          int ep, int etp,
                                                          ExpertDispatcher dispatcher) {
  std::vector<std::vector<cpu::Block>> shards(static_cast<size_t>(ep * etp));
  for (int m = 0; m < ep * etp; ++m) {
    for (size_t l = 0; l < blocks.size(); ++l) {
      if (!blocks[l].shape().moe()) {
        shards[m].push_back(blocks[l]);
        continue;
      }
      Result<cpu::Block> shard = blocks[l].ExpertShard(ep, m / etp, dispatcher, etp, m % etp);
      if (!shard.ok()) return shard.status().WithPrefix(fmt::format("layers[{}]", l));
      shards[m].push_back(std::move(*shard));
    }
  }
  return shards;
}

}  // namespace

Result<std::unique_ptr<LayerWork>> LayerWork::Make(const Model& model, const PlanFile& plan,
                                                   const Clock* clock) {
  PIPECAST_ASSIGN_OR_RETURN(cpu::WorkloadSpec spec, cpu::WorkloadFromSource(model.source));
  PIPECAST_RETURN_IF_ERROR(spec.Validate());
  if (spec.LayerCount() != static_cast<int>(model.layers.size())) {
    return Status::InvalidArgument(
        fmt::format("the model has {} but its source.workload describes {}: not a model written by "
                    "profiler cpu",
                    Count(model.layers.size(), "layer", "layers"), spec.LayerCount()));
  }
  if (plan.config.recompute != Recompute::kOff) {
    return Status::InvalidArgument("plans with recomputation run as busy-work, not real layers");
  }
  const int t = std::max(plan.config.layout.tensor_parallel, 1);
  if (t > 1 && plan.config.layout.sequence_parallel) {
    return Status::InvalidArgument(
        "the plan uses sequence parallelism, which the CPU workload's split blocks do not run "
        "(they all-reduce whole activations): validate a plan made without --sequence-parallel");
  }
  const int ep = std::max(plan.config.layout.expert_parallel, 1);
  const int etp = std::max(plan.config.layout.expert_tensor_parallel, 1);
  if (ep * etp > 1 && t > 1) {
    return Status::InvalidArgument(fmt::format(
        "the plan has expert_parallel {} with tensor_parallel {} and expert_tensor_parallel {}: "
        "the validator runs expert parallelism over data-parallel replicas; validate a plan made "
        "with --tensor-parallel 1",
        ep, t, etp));
  }
  if (etp > 1 && plan.config.layout.expert_dispatcher == ExpertDispatcher::kDeepEp) {
    return Status::InvalidArgument(fmt::format(
        "the plan has expert_tensor_parallel {} with the deepep dispatcher, whose wider "
        "all-to-all the validator does not run; validate a plan made with --ep-dispatcher "
        "alltoall or allgather",
        etp));
  }
  std::vector<cpu::Block> blocks = spec.Build();
  for (size_t l = 0; l < blocks.size(); ++l) {
    if (t > 1) {
      if (!HasTensorParallelCosts(model.layers[l], t, false) ||
          CostAt(model.layers[l], plan.config.microbatch_size, t).tp_scaled) {
        return Status::InvalidArgument(fmt::format(
            "layers[{}] has no profiles at tensor_parallel {}: the plan's split blocks run for "
            "real, so measure them (profiler cpu --tensor-parallel 1,{})",
            l, t, t));
      }
    }
    const Bytes want = CostAt(model.layers[l], plan.config.microbatch_size, t).output_bytes;
    if (want != blocks[l].OutputBytes(plan.config.microbatch_size)) {
      return Status::InvalidArgument(fmt::format(
          "layers[{}].output_bytes is {} at micro-batch size {} but the workload's layer "
          "outputs {}: the model was not measured on this workload",
          l, want, plan.config.microbatch_size,
          blocks[l].OutputBytes(plan.config.microbatch_size)));
    }
  }
  std::vector<std::vector<cpu::Block>> shards(static_cast<size_t>(t));
  if (ep * etp > 1) {
    PIPECAST_ASSIGN_OR_RETURN(shards,
                              ExpertShards(blocks, ep, etp, plan.config.layout.expert_dispatcher));
  } else if (t == 1) {
    shards[0] = std::move(blocks);
  }
  for (int j = 0; t > 1 && j < t; ++j) {
    for (size_t l = 0; l < blocks.size(); ++l) {
      Result<cpu::Block> shard = blocks[l].Shard(t, j);
      if (!shard.ok()) return shard.status().WithPrefix(fmt::format("layers[{}]", l));
      shards[static_cast<size_t>(j)].push_back(std::move(*shard));
    }
  }
  // The schedule's paths without its action lists; a partition per virtual stage (a
  // bidirectional plan may list its model stages only: stage p+k repeats stage k).
  Schedule paths = plan.schedule;
  paths.actions.clear();
  std::vector<StageLayers> partition = plan.partition;
  if (paths.bidirectional && static_cast<int>(partition.size()) == paths.NumModelStages()) {
    for (int st = paths.NumModelStages(); st < paths.num_stages; ++st) {
      partition.push_back(partition[paths.ModelStage(st)]);
    }
  }
  // A bidirectional schedule's second copy of every block: in one process the ranks of
  // virtual stages k and p+k must not accumulate into the same weight gradients.
  std::vector<std::vector<cpu::Block>> second;
  if (paths.bidirectional) second = shards;
  return std::unique_ptr<LayerWork>(
      new LayerWork(std::move(shards), std::move(second), std::move(partition), std::move(paths),
                    plan.config.microbatch_size, ep * etp > 1, clock));
}

LayerWork::LayerWork(std::vector<std::vector<cpu::Block>> shards,
                     std::vector<std::vector<cpu::Block>> second_copies,
                     std::vector<StageLayers> partition, Schedule paths, int mbs,
                     bool expert_parallel, const Clock* clock)
    : shards_(std::move(shards)),
      second_copies_(std::move(second_copies)),
      partition_(std::move(partition)),
      paths_(std::move(paths)),
      microbatch_size_(mbs),
      expert_parallel_(expert_parallel),
      clock_(clock),
      cells_(shards_.size() * partition_.size()) {
  const cpu::Block& first = shards_.front().front();
  // One input for every tensor rank (each holds x whole); with expert
  // parallelism one per expert rank, each a replica with its own data.
  inputs_.resize(expert_parallel_ ? shards_.size() : 1);
  for (size_t j = 0; j < inputs_.size(); ++j) {
    std::vector<float>& in = inputs_[j];
    in.resize(static_cast<size_t>(first.Tokens(mbs)) * first.shape().hidden);
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = std::sin(0.01f * static_cast<float>(i) + 0.37f * static_cast<float>(j));
    }
  }
  const cpu::Block& last = shards_.front().back();
  const size_t n = static_cast<size_t>(last.Tokens(mbs)) * last.shape().hidden;
  loss_grad_.assign(n, 1.0f / static_cast<float>(n));  // d(mean)/dy
}

Status LayerWork::Run(const OpCall& call) {
  if (call.abort != nullptr && call.abort->load()) return Status::FailedPrecondition("aborted");
  if (call.action.stage < 0 || call.action.stage >= static_cast<int>(partition_.size())) {
    return Status::Internal("stage out of range");
  }
  const int member = Member(call);
  if (member < 0 || member >= static_cast<int>(shards_.size()) ||
      (shards_.size() > 1 &&
       (expert_parallel_ ? call.expert_group : call.tensor_group) == nullptr)) {
    return Status::Internal(fmt::format("{} rank {} of {} has no group",
                                        expert_parallel_ ? "expert" : "tensor", member,
                                        shards_.size()));
  }
  switch (call.action.kind) {
    case OpKind::kForward:
      return Forward(call);
    case OpKind::kBackward:
      return Backward(call, true, true);
    case OpKind::kBackwardInput:
      return Backward(call, true, false);
    case OpKind::kBackwardWeight:
      return Backward(call, false, true);
  }
  return Status::Internal("unknown op kind");
}

Status LayerWork::Forward(const OpCall& call) {
  const StageLayers& part = partition_[call.action.stage];
  const bool first = paths_.IsFirstStage(call.action.stage);
  std::vector<float> x =
      first ? inputs_[expert_parallel_ ? Member(call) : 0] : std::vector<float>{};
  if (!first && !call.input.empty()) {
    std::span<const float> in = AsFloats(call.input);
    x.assign(in.begin(), in.end());
  } else if (!first) {
    PIPECAST_RETURN_IF_ERROR(TakeHandoff(call, false, &x));  // the previous stage is on this rank
  }
  Cell& cell = Cells(call)[call.action.microbatch];
  const std::vector<cpu::Block>& blocks = Blocks(call);
  std::vector<float> y;
  for (int l = part.first_layer; l <= part.last_layer; ++l) {
    const cpu::Block& b = blocks[l];
    const size_t n = static_cast<size_t>(b.Tokens(microbatch_size_)) * b.shape().hidden;
    if (x.size() != n) {
      return Status::Internal(
          fmt::format("layer {} got {} input floats, expected {}", l, x.size(), n));
    }
    y.resize(n);
    if (b.expert_group_size() > 1) {
      GroupExchange whole(call, clock_);
      ExpertExchanges ex(b, whole);
      cpu::Saved saved;
      PIPECAST_RETURN_IF_ERROR(b.Forward(x, y, microbatch_size_, ex.ep(), &saved, ex.etp()));
      cell.saved.push_back(std::move(saved));
    } else {
      cell.saved.push_back(b.Forward(x, y, microbatch_size_));
    }
    PIPECAST_RETURN_IF_ERROR(AllReduce(call, y));  // the partial sums of W2's rows
    x.swap(y);
  }
  if (!call.output.empty()) {
    if (call.output.size() != x.size() * sizeof(float)) {
      return Status::Internal("output size differs from the stage's last layer");
    }
    std::memcpy(call.output.data(), x.data(), call.output.size());
  } else if (!paths_.IsLastStage(call.action.stage)) {
    Handoff(call, call.action.stage + 1, false, x);
  }
  return Recharge(call, cell);
}

Status LayerWork::Backward(const OpCall& call, bool input, bool weight) {
  const StageLayers& part = partition_[call.action.stage];
  std::map<int, Cell>& cells = Cells(call);
  std::vector<cpu::Block>& blocks = Blocks(call);
  auto it = cells.find(call.action.microbatch);
  if (it == cells.end()) {
    return Status::Internal("backward before its forward");
  }
  Cell& cell = it->second;
  if (input) {
    const bool last = paths_.IsLastStage(call.action.stage);
    std::vector<float> dy = last ? loss_grad_ : std::vector<float>{};
    if (!last && !call.input.empty()) {
      std::span<const float> in = AsFloats(call.input);
      dy.assign(in.begin(), in.end());
    } else if (!last) {
      PIPECAST_RETURN_IF_ERROR(TakeHandoff(call, true, &dy));  // the next stage is on this rank
    }
    std::vector<float> dx;
    for (int l = part.last_layer; l >= part.first_layer; --l) {
      cpu::Block& b = blocks[l];
      cpu::Saved& saved = cell.saved[l - part.first_layer];
      if (dy.size() != static_cast<size_t>(b.Tokens(microbatch_size_)) * b.shape().hidden) {
        return Status::Internal(fmt::format("layer {} got a gradient of the wrong size", l));
      }
      dx.resize(dy.size());
      if (b.expert_group_size() > 1) {
        GroupExchange whole(call, clock_);
        ExpertExchanges ex(b, whole);
        PIPECAST_RETURN_IF_ERROR(b.BackwardInput(saved, dy, dx, ex.ep(), ex.etp()));
      } else {
        b.BackwardInput(saved, dy, dx);
      }
      PIPECAST_RETURN_IF_ERROR(AllReduce(call, dx));  // the partial sums of da·W1ᵀ
      if (weight) b.BackwardWeight(saved);
      dy.swap(dx);
    }
    if (!call.output.empty()) {
      if (call.output.size() != dy.size() * sizeof(float)) {
        return Status::Internal("gradient size differs from the stage's input");
      }
      std::memcpy(call.output.data(), dy.data(), call.output.size());
    } else if (!paths_.IsFirstStage(call.action.stage)) {
      Handoff(call, call.action.stage - 1, true, dy);
    }
  } else {
    for (int l = part.first_layer; l <= part.last_layer; ++l) {
      blocks[l].BackwardWeight(cell.saved[l - part.first_layer]);
    }
  }
  if (weight) {
    cells.erase(it);  // frees the buffers and the charge
    return Status::Ok();
  }
  return Recharge(call, cell);
}

Status LayerWork::TakeHandoff(const OpCall& call, bool gradient, std::vector<float>* out) {
  std::lock_guard<std::mutex> lock(handoff_mu_);
  auto it = handoff_.find({Member(call), call.action.stage, call.action.microbatch, gradient});
  if (it == handoff_.end()) {
    return Status::Internal(fmt::format("no {} handed over for micro-batch {}",
                                        gradient ? "gradient" : "activation",
                                        call.action.microbatch));
  }
  *out = std::move(it->second);
  handoff_.erase(it);
  return Status::Ok();
}

void LayerWork::Handoff(const OpCall& call, int to_stage, bool gradient,
                        const std::vector<float>& data) {
  std::lock_guard<std::mutex> lock(handoff_mu_);
  handoff_[{Member(call), to_stage, call.action.microbatch, gradient}] = data;
}

int LayerWork::Member(const OpCall& call) const {
  return expert_parallel_ ? call.expert_rank : call.tensor_rank;
}

std::vector<cpu::Block>& LayerWork::Blocks(const OpCall& call) {
  const size_t j = static_cast<size_t>(Member(call));
  const bool second = paths_.bidirectional && call.action.stage >= paths_.num_ranks;
  return second ? second_copies_[j] : shards_[j];
}

std::map<int, LayerWork::Cell>& LayerWork::Cells(const OpCall& call) {
  return cells_[static_cast<size_t>(Member(call)) * partition_.size() +
                static_cast<size_t>(call.action.stage)];
}

Status LayerWork::AllReduce(const OpCall& call, std::vector<float>& data) {
  if (shards_.size() <= 1 || expert_parallel_) return Status::Ok();  // no partial sums
  static const std::atomic<bool> kNever{false};
  const TimeNs start = clock_->NowNs();
  Status st = call.tensor_group->AllReduceSum(call.tensor_rank, data,
                                              call.abort != nullptr ? *call.abort : kNever);
  if (call.collective_ns != nullptr) *call.collective_ns += clock_->NowNs() - start;
  return st;
}

Status LayerWork::Recharge(const OpCall& call, Cell& cell) {
  Bytes bytes = 0;
  for (const cpu::Saved& s : cell.saved) bytes += s.Bytes();
  cell.charge.Release();
  if (call.pool == nullptr) return Status::Ok();
  PIPECAST_ASSIGN_OR_RETURN(Allocation charge,
                            call.pool->Charge(bytes, MemoryKind::kActivation,
                                              "the activations of " + ActionName(call.action)));
  cell.charge = std::move(charge);
  return Status::Ok();
}

std::string LayerWork::Description() const {
  const cpu::BlockShape& s = shards_.front().front().shape();
  const int t = static_cast<int>(shards_.size());
  if (s.moe()) {
    const cpu::Block& b = shards_.front().front();
    const bool gather = b.all_gather_dispatch();
    const int etp = b.expert_tensor_parallel();
    return fmt::format(
        "ops run the real layers of the profiler's CPU workload ({} MoE blocks of {} experts, "
        "top-{} by a hash router, hidden {}, expert ffn {}, {} tokens per sample) on float32 "
        "buffers{}",
        shards_.front().size(), s.experts, s.top_k, s.hidden, s.ffn * etp, s.tokens_per_sample,
        expert_parallel_
            ? fmt::format(", over {} expert-parallel workers ({} experts each{}, {})", t,
                          s.experts / b.expert_parallel(),
                          etp > 1 ? fmt::format(", split {} ways by expert tensor parallelism: "
                                                "fc1's columns and fc2's rows; the all-to-alls' "
                                                "received rows all-gathered and partial outputs "
                                                "reduce-scattered over the etp workers",
                                                etp)
                                  : "",
                          gather ? "Megatron-LM's all-gather dispatcher: all-gathers of the "
                                   "routing map, probs and tokens and a reduce-scatter of the "
                                   "outputs in a block's forward, an all-gather and a "
                                   "reduce-scatter in its backward"
                                 : "a dispatch and a combine all-to-all in a block's forward "
                                   "and in its backward")
            : "");
  }
  return fmt::format(
      "ops run the real layers of the profiler's CPU workload ({} MLP blocks, hidden {}, ffn {}, "
      "{} tokens per sample) on float32 buffers{}",
      shards_.front().size(), s.hidden, s.ffn * t, s.tokens_per_sample,
      t > 1 ? fmt::format(", each split over {} tensor-parallel workers (ffn {} each, 1 all-reduce "
                          "in a block's forward and 1 in its backward)",
                          t, s.ffn)
            : "");
}

}  // namespace pipecast::validate
