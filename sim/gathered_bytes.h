#pragma once

#include <algorithm>

#include "sim/memory.h"
#include "sim/model.h"
#include "sim/partition.h"
#include "sim/stage_costs.h"

namespace pipecast {

// What ZeRO-3 gathers for one stage: its whole parameters and its largest
// layer, each layer at its own bytes (FP8 gathers keep the embedding and the
// head in bf16, KeptInBf16UnderFp8); the stage's sum moves only by those
// layers' difference. One rule for the simulator (ApplyPerOpCollectives) and
// the planner's memory floor, which must never exceed the simulated peak.
struct StageGathered {
  Bytes whole = 0;
  Bytes largest_layer = 0;
};

inline StageGathered StageGatheredOf(const Model& model, const StageLayers& range,
                                     int64_t stage_parameters, const MemoryConfig& memory) {
  StageGathered g;
  g.whole = ParameterBytes(stage_parameters, memory.GatherBytesPerParam());
  for (int l = range.first_layer; l <= range.last_layer; ++l) {
    const auto& layer = model.layers[l];
    const Bytes b = ParameterBytes(layer.parameters, memory.GatherBytesPerParam(layer.name));
    g.whole += b - ParameterBytes(layer.parameters, memory.GatherBytesPerParam());
    g.largest_layer = std::max(g.largest_layer, b);
  }
  return g;
}

}  // namespace pipecast
