// LayerWork: ops that run the real layers of the built-in CPU workload
// (profiler/cpu/workload.h) for a model measured by `profiler cpu`, so the
// validator compares the forecast with the very computation it was profiled
// on. The layers are rebuilt from model.json's `source.workload`.
//
// F runs Block::Forward through the stage's layers on the received
// activation (stage 0: a fixed input), B runs Backward, I BackwardInput and
// W BackwardWeight, on real float32 buffers. What a forward keeps (the
// workload's Saved buffers) is charged to the stage's MemoryPool at its real
// size (Saved::Bytes), re-charged after I (the weight gradient keeps a
// different set) and uncharged when B or W frees it. Buffers between two
// layers of one stage (2 x tokens x hidden floats) are not charged.
//
// Thread-safety: Run may be called concurrently for different ranks (each
// virtual stage, its blocks and saved buffers belong to one rank).
#ifndef PIPECAST_VALIDATE_LAYER_WORK_H_
#define PIPECAST_VALIDATE_LAYER_WORK_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/plan.h"
#include "profiler/cpu/workload.h"
#include "sim/model.h"
#include "validate/work.h"

namespace pipecast::validate {

class LayerWork final : public OpWork {
 public:
  // InvalidArgument when the model's source does not describe the workload,
  // its layer count or a layer's output_bytes differ from the workload's at
  // the plan's micro-batch size (the model was not measured on it), or the
  // plan recomputes activations (not supported with real layers).
  static Result<std::unique_ptr<LayerWork>> Make(const Model& model, const PlanFile& plan);

  Status Run(const OpCall& call) override;
  bool ManagesActivations() const override { return true; }
  std::string Description() const override;
  // The layers, with their accumulated weight gradients.
  const std::vector<cpu::Block>& blocks() const { return blocks_; }

 private:
  struct Cell {
    std::vector<cpu::Saved> saved;  // per layer of the stage, in order
    Allocation charge;              // their bytes, charged to the pool
  };
  LayerWork(std::vector<cpu::Block> blocks, std::vector<StageLayers> partition, int mbs);
  Status Forward(const OpCall& call);
  Status Backward(const OpCall& call, bool input, bool weight);
  Status Recharge(const OpCall& call, Cell& cell);

  std::vector<cpu::Block> blocks_;
  std::vector<StageLayers> partition_;
  int microbatch_size_;
  std::vector<std::map<int, Cell>> cells_;  // per virtual stage: micro-batch -> cell
  std::vector<float> input_;                // stage 0's input, fixed
  std::vector<float> loss_grad_;            // the last stage's output gradient, fixed
};

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_LAYER_WORK_H_
