// Stage costs: the one model of what a pipeline stage costs to compute and
// how much activation memory it holds, at one micro-batch size. The
// simulator, the reference engine, the planner's partition and prune passes
// and the validator's plan execution all read it, so prediction and
// measurement count time and memory by the same rule.
//
// A stage holds a contiguous run of layers. Its times are the sums of its
// layers' times at the micro-batch size (CostAt(): measured, interpolated or
// extrapolated, in integer ns). Its activations follow this rule:
//   - without recomputation, the forward (F) keeps the stage's activations
//     (the sum over its layers) from its start until the backward (B) or the
//     weight-gradient op (W) ends; the input-gradient op (I) frees nothing;
//   - with full recomputation (Chen et al. 2016; Megatron-LM
//     --recompute-granularity full), F keeps only the stage input (the output
//     of the layer before the stage; 0 bytes for the first stage, whose input
//     is token ids), and B (or I) first reruns the stage's forward, which
//     costs one more forward and rebuilds the full activations, held until
//     B (or W) ends.
// Every op holds the stage's workspace (the largest of its layers') while it
// runs; the stage sends its last layer's output to the next stage.
//
// Units: ns and bytes. Plain values; StageCostTable is immutable after
// construction and safe to share between threads.
#ifndef PIPECAST_SIM_STAGE_COSTS_H_
#define PIPECAST_SIM_STAGE_COSTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/units.h"
#include "sim/model.h"
#include "sim/partition.h"
#include "sim/schedule.h"

namespace pipecast {

struct StageCostOptions {
  int microbatch_size = 1;
  bool recompute = false;  // full activation recomputation (see above)
};

// Costs of one stage at one micro-batch size.
struct StageCost {
  TimeNs forward_ns = 0;
  TimeNs backward_ns = 0;          // whole backward, including recompute_ns
  TimeNs backward_weight_ns = 0;   // W part of backward_ns
  TimeNs recompute_ns = 0;         // the forward rerun inside backward_ns (0 without recompute)
  bool has_backward_split = true;  // every layer has backward_weight_us
  Bytes activation_bytes = 0;      // sum over the stage's layers
  Bytes held_bytes = 0;            // kept from F start until B (or W) ends
  Bytes recomputed_bytes = 0;      // rebuilt at B (or I) start, freed with held_bytes
  Bytes input_bytes = 0;           // the previous layer's output (0 for the first stage)
  Bytes output_bytes = 0;          // the last layer's output, sent to the next stage
  Bytes workspace_bytes = 0;       // largest over the stage's layers, held while an op runs
  int64_t parameters = 0;

  // How long an op of `kind` runs: F forward, B the whole backward, I the
  // backward less its W part, W the weight-gradient part.
  TimeNs DurationNs(OpKind kind) const;
  // Activation bytes an op of `kind` allocates at its start: F held, B and I
  // recomputed, W none.
  Bytes ActivationsAtStart(OpKind kind) const;
  // Activation bytes an op of `kind` frees at its end: B and W free what F
  // and the recomputation allocated; F and I free nothing.
  Bytes ActivationsFreedAtEnd(OpKind kind) const;
  // True for B and W: the ops that end the (stage, micro-batch)'s activations.
  static bool FreesActivations(OpKind kind) {
    return kind == OpKind::kBackward || kind == OpKind::kBackwardWeight;
  }
};

// Bytes of `parameters` parameters at `bytes_per_param`, rounded to nearest.
Bytes ParameterBytes(int64_t parameters, double bytes_per_param);

// Every layer of one model costed once at one micro-batch size, with prefix
// sums, so that the costs of any run of layers follow: O(layers) to build,
// O(1) for a stage's training time, O(stage's layers) for its full costs
// (the workspace is a maximum; everything else is O(1)).
class StageCostTable {
 public:
  // REQUIRES: every layer has profiles (sorted); options.microbatch_size >= 1.
  StageCostTable(const Model& model, const StageCostOptions& options);

  int NumLayers() const { return static_cast<int>(layers_.size()); }
  const LayerCost& Layer(int layer) const { return layers_[layer]; }
  const StageCostOptions& options() const { return options_; }

  // Costs of the stage holding `stage`, whose input is the output of layer
  // stage.first_layer - 1.
  // REQUIRES: 0 <= first_layer <= last_layer < NumLayers().
  StageCost Stage(StageLayers stage) const;
  // forward + backward (with recompute's extra forward) of the stage: the
  // time a partition balances. Equals Stage(stage).forward_ns + .backward_ns.
  TimeNs TrainingTimeNs(StageLayers stage) const;
  // Stage() of every stage of `partition`, in order.
  std::vector<StageCost> Stages(const std::vector<StageLayers>& partition) const;

  // What to tell the user about costs that were not measured at this size:
  // one note for interpolated layers, one for extrapolated ones, or none.
  std::vector<std::string> Notes() const;

 private:
  // Sums over layers [0, l) at index l.
  struct Prefix {
    TimeNs forward_ns = 0, backward_ns = 0, backward_weight_ns = 0;
    Bytes activation_bytes = 0;
    int64_t parameters = 0;
    int unsplit_layers = 0;  // layers without a measured weight-gradient part
  };

  StageCostOptions options_;
  std::vector<LayerCost> layers_;
  std::vector<Prefix> prefix_;  // NumLayers() + 1 entries
};

}  // namespace pipecast

#endif  // PIPECAST_SIM_STAGE_COSTS_H_
