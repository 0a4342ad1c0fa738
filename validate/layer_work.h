// LayerWork: ops that run the real layers of the built-in CPU workload
// (profiler/cpu/workload.h) for a model measured by `profiler cpu`, so the
// validator compares the forecast with the very computation it was profiled
// on. The layers are rebuilt from model.json's `source.workload`.
//
// F runs Block::Forward through the stage's layers on the received
// activation (the first stage of a micro-batch's path, Schedule::IsFirstStage:
// a fixed input; a stage whose predecessor is on the
// same rank, as in V placements, takes the output that stage handed over
// without a message, and gradients likewise), B runs Backward, I BackwardInput and
// W BackwardWeight, on real float32 buffers. What a forward keeps (the
// workload's Saved buffers) is charged to the stage's MemoryPool at its real
// size (Saved::Bytes), re-charged after I (the weight gradient keeps a
// different set) and uncharged when B or W frees it. Buffers between two
// layers of one stage (2 x tokens x hidden floats) are not charged. A
// bidirectional schedule (dualpipe) runs a second copy of every block for its
// virtual stages p..2p-1, so that its two copies accumulate their own weight
// gradients, as two ranks' copies do (second_copy()).
//
// Tensor parallelism (plan.tensor_parallel = t > 1): tensor rank j runs
// shard j of every block (cpu::Block::Shard, Megatron's split) and, after
// each block's forward and after each block's input gradient, all-reduces
// its partial output over the rank's TensorGroup (OpCall::tensor_group):
// 1 all-reduce in a block's forward and 1 in its backward, each of the
// whole [tokens × hidden] tensor, as `profiler cpu --tensor-parallel` states
// in the model. Their time is added to OpCall::collective_ns.
//
// Expert parallelism (plan.expert_parallel = ep > 1, t = 1): expert rank j
// is a data-parallel replica with its own input (a fixed pattern per rank)
// holding its 1/ep of every MoE layer's experts (cpu::Block::ExpertShard)
// and whole dense layers; each MoE block's forward and input gradient
// dispatch and combine tokens by all-to-all over the rank's group
// (OpCall::expert_group), or, for a plan with Megatron-LM's all-gather
// dispatcher (ep_dispatcher allgather), by all-gathers and a reduce-scatter
// (cpu::Block::ExpertShard), timed into OpCall::collective_ns.
//
// Thread-safety: Run may be called concurrently for different workers (each
// virtual stage's saved buffers at one tensor rank, and that tensor rank's
// blocks, belong to one worker).
#ifndef PIPECAST_VALIDATE_LAYER_WORK_H_
#define PIPECAST_VALIDATE_LAYER_WORK_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "base/status.h"
#include "formats/plan.h"
#include "profiler/cpu/workload.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "validate/work.h"

namespace pipecast::validate {

class LayerWork final : public OpWork {
 public:
  // InvalidArgument when the model's source does not describe the workload,
  // its layer count or a layer's output_bytes differ from the workload's at
  // the plan's micro-batch size (the model was not measured on it), the
  // plan recomputes activations (not supported with real layers), or, with
  // tensor parallelism, the model has no profiles measured at the plan's t,
  // t does not divide a layer's ffn, or the plan uses sequence parallelism.
  // `clock` times the all-reduces; it must outlive the LayerWork.
  static Result<std::unique_ptr<LayerWork>> Make(const Model& model, const PlanFile& plan,
                                                 const Clock* clock);

  Status Run(const OpCall& call) override;
  bool ManagesActivations() const override { return true; }
  std::string Description() const override;
  // The layers as tensor (expert) rank `tensor_rank` holds them (the whole
  // blocks at t = 1 and ep = 1), with their accumulated weight gradients.
  const std::vector<cpu::Block>& blocks(int tensor_rank = 0) const {
    return shards_[static_cast<size_t>(tensor_rank)];
  }
  // A bidirectional schedule's second copy of the layers (those its virtual
  // stages p..2p-1 run, direction b's micro-batches); empty otherwise.
  const std::vector<cpu::Block>& second_copy(int tensor_rank = 0) const {
    return second_copies_[static_cast<size_t>(tensor_rank)];
  }

 private:
  struct Cell {
    std::vector<cpu::Saved> saved;  // per layer of the stage, in order
    Allocation charge;              // their bytes, charged to the pool
  };
  LayerWork(std::vector<std::vector<cpu::Block>> shards,
            std::vector<std::vector<cpu::Block>> second_copies, std::vector<StageLayers> partition,
            Schedule paths, int mbs, bool expert_parallel, const Clock* clock);
  // The call's member of its rank's group: its expert rank with expert
  // parallelism, else its tensor rank.
  int Member(const OpCall& call) const;
  Status Forward(const OpCall& call);
  Status Backward(const OpCall& call, bool input, bool weight);
  Status Recharge(const OpCall& call, Cell& cell);
  // Sums a partial output over the call's tensor group (nothing at t = 1).
  Status AllReduce(const OpCall& call, std::vector<float>& data);
  std::map<int, Cell>& Cells(const OpCall& call);
  // The blocks the call's virtual stage runs: its tensor rank's, of its copy.
  std::vector<cpu::Block>& Blocks(const OpCall& call);
  Status TakeHandoff(const OpCall& call, bool gradient, std::vector<float>* out);
  void Handoff(const OpCall& call, int to_stage, bool gradient, const std::vector<float>& data);

  std::vector<std::vector<cpu::Block>> shards_;         // per tensor rank: the layers
  std::vector<std::vector<cpu::Block>> second_copies_;  // bidirectional: the same, again
  std::vector<StageLayers> partition_;                  // per virtual stage
  // The plan's schedule without its actions: which stages start and end a
  // micro-batch's path (Schedule::IsFirstStage, IsLastStage).
  Schedule paths_;
  int microbatch_size_;
  bool expert_parallel_;  // shards_ are expert ranks, not tensor ranks
  const Clock* clock_;
  // Per tensor rank and virtual stage (index j · stages + stage): micro-batch -> cell.
  std::vector<std::map<int, Cell>> cells_;
  // Outputs handed to a stage on the same rank, which gets no message:
  // (tensor rank, receiving stage, micro-batch, gradient) -> floats. Shared
  // by the workers (guarded by handoff_mu_).
  std::map<std::tuple<int, int, int, bool>, std::vector<float>> handoff_;
  std::mutex handoff_mu_;
  std::vector<std::vector<float>> inputs_;  // stage 0's input, fixed; per expert rank
  std::vector<float> loss_grad_;            // the last stage's output gradient, fixed
};

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_LAYER_WORK_H_
