#pragma once

#include <algorithm>
#include <cmath>

#include "sim/memory.h"
#include "sim/model.h"
#include "sim/partition.h"
#include "sim/stage_costs.h"
#include "sim/training_config.h"

namespace pipecast {

struct StageGathered {
  Bytes whole = 0;
  Bytes largest_layer = 0;
  Bytes experts = 0;  // the stage's local routed experts, part of `whole`
};

// t / (ep x etp) when edp > 1: a GPU's routed experts (experts / ep of a
// layer's experts, each split over etp) as a share of a dense layer's
// per-GPU parameters (split over t); 0 when edp = 1 (no other GPU holds the
// same experts, so nothing gathers or reduces them); 1 without expert or
// tensor parallelism. ZeRO-2 and 3's per-op collectives move a GPU's experts
// over the edp GPUs holding the same experts (ExpertDataParallelGroup); the
// reductions after the last op (TailCollectives) take that group as the
// d x cp one (an approximation when edp < d x cp). docs/simulator.md
// "Expert parallelism".
inline double ExpertReductionScale(const ParallelLayout& l) {
  if (l.ExpertShards() == 1 && l.tensor_parallel == 1) return 1;
  if (l.ExpertDataParallel() <= 1) return 0;
  return static_cast<double>(l.tensor_parallel) / l.ExpertShards();
}

// The parameters the data-parallel group moves, in units of a dense
// parameter split over t: the routed experts' `expert_parameters` (every
// expert at t = 1) x `expert_scale` (ExpertReductionScale), the rest as is.
inline int64_t ReducedParameters(int64_t parameters, int64_t expert_parameters,
                                 double expert_scale) {
  if (expert_parameters == 0) return parameters;
  return parameters - expert_parameters +
         std::llround(static_cast<double>(expert_parameters) * expert_scale);
}

// What ZeRO-3 gathers for one stage: its whole parameters and its largest
// layer, each layer at its own bytes (FP8 gathers keep the embedding and the
// head in bf16, KeptInBf16UnderFp8); the stage's sum moves only by those
// layers' difference. Routed experts count as ReducedParameters at
// `expert_scale`: a GPU gathers only its local experts (over the edp GPUs
// that shard them, torchtitan's efsdp mesh), and none at edp = 1 (FSDP
// leaves them out, NeMo AutoModel's ignored_params; they are held whole in
// the sharded state). One rule for the simulator (ApplyPerOpCollectives) and
// the planner's memory floor, which must never exceed the simulated peak.
inline StageGathered StageGatheredOf(const Model& model, const StageLayers& range,
                                     const StageCost& stage, const MemoryConfig& memory,
                                     double expert_scale) {
  StageGathered g;
  g.whole =
      ParameterBytes(ReducedParameters(stage.parameters, stage.expert_parameters, expert_scale),
                     memory.GatherBytesPerParam());
  g.experts = ParameterBytes(
      ReducedParameters(stage.expert_parameters, stage.expert_parameters, expert_scale),
      memory.GatherBytesPerParam());
  for (int l = range.first_layer; l <= range.last_layer; ++l) {
    const auto& layer = model.layers[l];
    const int64_t n = ReducedParameters(layer.parameters,
                                        layer.moe ? layer.moe->expert_parameters : 0, expert_scale);
    const Bytes b = ParameterBytes(n, memory.GatherBytesPerParam(layer.name));
    g.whole += b - ParameterBytes(n, memory.GatherBytesPerParam());
    g.largest_layer = std::max(g.largest_layer, b);
  }
  return g;
}

}  // namespace pipecast
