#include "validate/internal/work_select.h"

#include <fmt/format.h>

#include "validate/layer_work.h"

namespace pipecast::validate {

Result<std::unique_ptr<OpWork>> MakeWork(const Model& model, const PlanFile& plan,
                                         const Clock* clock) {
  if (model.source.method == "cpu" &&
      plan.config.recompute == Recompute::kOff) {  // recompute: busy-work
    Result<std::unique_ptr<LayerWork>> layers = LayerWork::Make(model, plan, clock);
    if (!layers.ok()) return layers.status().WithPrefix("real layers for a 'profiler cpu' model");
    return std::unique_ptr<OpWork>(std::move(*layers));
  }
  if (plan.config.layout.tensor_parallel > 1) {
    return Status::InvalidArgument(fmt::format(
        "the plan has tensor_parallel {}, which the validator runs only with the real layers of "
        "a 'profiler cpu' model (busy-work has no partial sums to all-reduce): validate a model "
        "measured by profiler cpu --tensor-parallel 1,{}, or a plan made with --tensor-parallel 1",
        plan.config.layout.tensor_parallel, plan.config.layout.tensor_parallel));
  }
  if (plan.config.layout.expert_parallel * plan.config.layout.expert_tensor_parallel > 1) {
    return Status::InvalidArgument(fmt::format(
        "the plan has expert_parallel {}{}, which the validator runs only with the real layers of "
        "a 'profiler cpu' MoE model (busy-work has no tokens to route): validate a model "
        "measured by profiler cpu --experts E --top-k K, or a plan made with --expert-parallel 1",
        plan.config.layout.expert_parallel,
        plan.config.layout.expert_tensor_parallel > 1
            ? fmt::format(" and expert_tensor_parallel {}",
                          plan.config.layout.expert_tensor_parallel)
            : ""));
  }
  return std::unique_ptr<OpWork>(std::make_unique<BusyWork>());
}

}  // namespace pipecast::validate
