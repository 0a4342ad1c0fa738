#include "sim/stage_costs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace pipecast {

TimeNs StageCost::DurationNs(OpKind kind) const {
  switch (kind) {
    case OpKind::kForward:
      return forward_ns;
    case OpKind::kBackward:
      return backward_ns;
    case OpKind::kBackwardInput:
      return backward_ns - backward_weight_ns;
    case OpKind::kBackwardWeight:
      return backward_weight_ns;
  }
  return 0;
}

Bytes StageCost::ActivationsAtStart(OpKind kind) const {
  switch (kind) {
    case OpKind::kForward:
      return held_bytes;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      return recomputed_bytes;
    case OpKind::kBackwardWeight:
      return 0;
  }
  return 0;
}

Bytes StageCost::ActivationsFreedAtEnd(OpKind kind) const {
  return FreesActivations(kind) ? held_bytes + recomputed_bytes : 0;
}

Bytes ParameterBytes(int64_t parameters, double bytes_per_param) {
  return std::llround(static_cast<double>(parameters) * bytes_per_param);
}

StageCostTable::StageCostTable(const Model& model, const StageCostOptions& options)
    : options_(options) {
  const size_t n = model.layers.size();
  layers_.reserve(n);
  prefix_.resize(n + 1);
  for (size_t l = 0; l < n; ++l) {
    const LayerCost& c = layers_.emplace_back(CostAt(model.layers[l], options.microbatch_size));
    const Prefix& before = prefix_[l];
    prefix_[l + 1] = Prefix{before.forward_ns + c.forward_ns,
                            before.backward_ns + c.backward_ns,
                            before.backward_weight_ns + c.backward_weight_ns,
                            before.activation_bytes + c.activation_bytes,
                            before.parameters + model.layers[l].parameters,
                            before.unsplit_layers + (c.has_backward_split ? 0 : 1)};
  }
}

TimeNs StageCostTable::TrainingTimeNs(StageLayers stage) const {
  const Prefix& lo = prefix_[stage.first_layer];
  const Prefix& hi = prefix_[stage.last_layer + 1];
  const TimeNs forward = hi.forward_ns - lo.forward_ns;
  const TimeNs rerun = options_.recompute ? forward : 0;
  return forward + (hi.backward_ns - lo.backward_ns) + rerun;
}

StageCost StageCostTable::Stage(StageLayers stage) const {
  const Prefix& lo = prefix_[stage.first_layer];
  const Prefix& hi = prefix_[stage.last_layer + 1];
  StageCost c;
  c.forward_ns = hi.forward_ns - lo.forward_ns;
  c.backward_ns = hi.backward_ns - lo.backward_ns;
  c.backward_weight_ns = hi.backward_weight_ns - lo.backward_weight_ns;
  c.has_backward_split = hi.unsplit_layers == lo.unsplit_layers;
  c.activation_bytes = hi.activation_bytes - lo.activation_bytes;
  c.parameters = hi.parameters - lo.parameters;
  for (int l = stage.first_layer; l <= stage.last_layer; ++l) {
    c.workspace_bytes = std::max(c.workspace_bytes, layers_[l].workspace_bytes);
  }
  c.output_bytes = layers_[stage.last_layer].output_bytes;
  c.input_bytes = stage.first_layer > 0 ? layers_[stage.first_layer - 1].output_bytes : 0;
  c.held_bytes = c.activation_bytes;
  if (options_.recompute) {
    c.held_bytes = c.input_bytes;
    c.recomputed_bytes = c.activation_bytes;
    c.recompute_ns = c.forward_ns;
    c.backward_ns += c.recompute_ns;  // rerun the forward before the backward
  }
  return c;
}

std::vector<StageCost> StageCostTable::Stages(const std::vector<StageLayers>& partition) const {
  std::vector<StageCost> costs;
  costs.reserve(partition.size());
  for (const StageLayers& stage : partition) costs.push_back(Stage(stage));
  return costs;
}

std::vector<std::string> StageCostTable::Notes() const {
  int interpolated = 0, extrapolated = 0;
  for (const LayerCost& c : layers_) {
    interpolated += c.origin == CostOrigin::kInterpolated;
    extrapolated += c.origin == CostOrigin::kExtrapolated;
  }
  const int n = NumLayers();
  const int size = options_.microbatch_size;
  std::vector<std::string> notes;
  if (interpolated > 0) {
    notes.push_back(fmt::format(
        "micro-batch size {} was not measured for {} of {} layers: their costs are interpolated "
        "linearly between the nearest measured sizes",
        size, interpolated, n));
  }
  if (extrapolated > 0) {
    notes.push_back(fmt::format(
        "micro-batch size {} is outside the measured sizes for {} of {} layers: their costs are "
        "extrapolated in proportion to the nearest measured size",
        size, extrapolated, n));
  }
  return notes;
}

}  // namespace pipecast
