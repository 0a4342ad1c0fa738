#include "validate/internal/work_select.h"

#include "validate/layer_work.h"

namespace pipecast::validate {

Result<std::unique_ptr<OpWork>> MakeWork(const Model& model, const PlanFile& plan,
                                         const Clock* /*clock*/) {
  if (model.source.method == "cpu" && plan.recompute == Recompute::kOff) {  // recompute: busy-work
    Result<std::unique_ptr<LayerWork>> layers = LayerWork::Make(model, plan);
    if (!layers.ok()) return layers.status().WithPrefix("real layers for a 'profiler cpu' model");
    return std::unique_ptr<OpWork>(std::move(*layers));
  }
  return std::unique_ptr<OpWork>(std::make_unique<BusyWork>());
}

}  // namespace pipecast::validate
