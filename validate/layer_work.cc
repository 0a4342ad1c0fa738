#include "validate/layer_work.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "base/text_table.h"

namespace pipecast::validate {
namespace {

std::span<const float> AsFloats(std::span<const std::byte> b) {
  return {reinterpret_cast<const float*>(b.data()), b.size() / sizeof(float)};
}

}  // namespace

Result<std::unique_ptr<LayerWork>> LayerWork::Make(const Model& model, const PlanFile& plan) {
  Result<cpu::WorkloadSpec> spec = cpu::WorkloadFromSource(model.source);
  if (!spec.ok()) return spec.status();
  PIPECAST_RETURN_IF_ERROR(spec->Validate());
  if (spec->LayerCount() != static_cast<int>(model.layers.size())) {
    return Status::InvalidArgument(
        fmt::format("the model has {} but its source.workload describes {}: not a model written by "
                    "profiler cpu",
                    Count(model.layers.size(), "layer", "layers"), spec->LayerCount()));
  }
  if (plan.recompute != Recompute::kOff) {
    return Status::InvalidArgument("plans with recomputation run as busy-work, not real layers");
  }
  std::vector<cpu::Block> blocks = spec->Build();
  for (size_t l = 0; l < blocks.size(); ++l) {
    const Bytes want = CostAt(model.layers[l], plan.microbatch_size).output_bytes;
    if (want != blocks[l].OutputBytes(plan.microbatch_size)) {
      return Status::InvalidArgument(fmt::format(
          "layers[{}].output_bytes is {} at micro-batch size {} but the workload's layer "
          "outputs {}: the model was not measured on this workload",
          l, want, plan.microbatch_size, blocks[l].OutputBytes(plan.microbatch_size)));
    }
  }
  return std::unique_ptr<LayerWork>(
      new LayerWork(std::move(blocks), plan.partition, plan.microbatch_size));
}

LayerWork::LayerWork(std::vector<cpu::Block> blocks, std::vector<StageLayers> partition, int mbs)
    : blocks_(std::move(blocks)),
      partition_(std::move(partition)),
      microbatch_size_(mbs),
      cells_(partition_.size()) {
  const cpu::Block& first = blocks_.front();
  input_.resize(static_cast<size_t>(first.Tokens(mbs)) * first.shape().hidden);
  for (size_t i = 0; i < input_.size(); ++i) input_[i] = std::sin(0.01f * static_cast<float>(i));
  const cpu::Block& last = blocks_.back();
  const size_t n = static_cast<size_t>(last.Tokens(mbs)) * last.shape().hidden;
  loss_grad_.assign(n, 1.0f / static_cast<float>(n));  // d(mean)/dy
}

Status LayerWork::Run(const OpCall& call) {
  if (call.abort != nullptr && call.abort->load()) return Status::FailedPrecondition("aborted");
  if (call.action.stage < 0 || call.action.stage >= static_cast<int>(partition_.size())) {
    return Status::Internal("stage out of range");
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
  std::vector<float> x = call.action.stage == 0 ? input_ : std::vector<float>{};
  if (call.action.stage > 0) {
    std::span<const float> in = AsFloats(call.input);
    x.assign(in.begin(), in.end());
  }
  Cell& cell = cells_[call.action.stage][call.action.microbatch];
  std::vector<float> y;
  for (int l = part.first_layer; l <= part.last_layer; ++l) {
    const cpu::Block& b = blocks_[l];
    const size_t n = static_cast<size_t>(b.Tokens(microbatch_size_)) * b.shape().hidden;
    if (x.size() != n) {
      return Status::Internal(
          fmt::format("layer {} got {} input floats, expected {}", l, x.size(), n));
    }
    y.resize(n);
    cell.saved.push_back(b.Forward(x, y, microbatch_size_));
    x.swap(y);
  }
  if (!call.output.empty()) {
    if (call.output.size() != x.size() * sizeof(float)) {
      return Status::Internal("output size differs from the stage's last layer");
    }
    std::memcpy(call.output.data(), x.data(), call.output.size());
  }
  return Recharge(call, cell);
}

Status LayerWork::Backward(const OpCall& call, bool input, bool weight) {
  const StageLayers& part = partition_[call.action.stage];
  auto it = cells_[call.action.stage].find(call.action.microbatch);
  if (it == cells_[call.action.stage].end()) {
    return Status::Internal("backward before its forward");
  }
  Cell& cell = it->second;
  if (input) {
    const bool last = call.action.stage + 1 == static_cast<int>(partition_.size());
    std::vector<float> dy = last ? loss_grad_ : std::vector<float>{};
    if (!last) {
      std::span<const float> in = AsFloats(call.input);
      dy.assign(in.begin(), in.end());
    }
    std::vector<float> dx;
    for (int l = part.last_layer; l >= part.first_layer; --l) {
      cpu::Block& b = blocks_[l];
      cpu::Saved& saved = cell.saved[l - part.first_layer];
      if (dy.size() != static_cast<size_t>(b.Tokens(microbatch_size_)) * b.shape().hidden) {
        return Status::Internal(fmt::format("layer {} got a gradient of the wrong size", l));
      }
      dx.resize(dy.size());
      if (weight) {
        b.Backward(saved, dy, dx);
      } else {
        b.BackwardInput(saved, dy, dx);
      }
      dy.swap(dx);
    }
    if (!call.output.empty()) {
      if (call.output.size() != dy.size() * sizeof(float)) {
        return Status::Internal("gradient size differs from the stage's input");
      }
      std::memcpy(call.output.data(), dy.data(), call.output.size());
    }
  } else {
    for (int l = part.first_layer; l <= part.last_layer; ++l) {
      blocks_[l].BackwardWeight(cell.saved[l - part.first_layer]);
    }
  }
  if (weight) {
    cells_[call.action.stage].erase(it);  // frees the buffers and the charge
    return Status::Ok();
  }
  return Recharge(call, cell);
}

Status LayerWork::Recharge(const OpCall& call, Cell& cell) {
  Bytes bytes = 0;
  for (const cpu::Saved& s : cell.saved) bytes += s.Bytes();
  cell.charge.Release();
  if (call.pool == nullptr) return Status::Ok();
  Result<Allocation> charge = call.pool->Charge(bytes, MemoryKind::kActivation,
                                                "the activations of " + ActionName(call.action));
  if (!charge.ok()) return charge.status();
  cell.charge = std::move(*charge);
  return Status::Ok();
}

std::string LayerWork::Description() const {
  const cpu::BlockShape& s = blocks_.front().shape();
  return fmt::format(
      "ops run the real layers of the profiler's CPU workload ({} MLP blocks, hidden {}, ffn {}, "
      "{} tokens per sample) on float32 buffers",
      blocks_.size(), s.hidden, s.ffn, s.tokens_per_sample);
}

}  // namespace pipecast::validate
