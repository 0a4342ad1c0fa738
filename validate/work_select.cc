#include "validate/internal/work_select.h"

namespace pipecast::validate {

Result<std::unique_ptr<OpWork>> MakeWork(const Model& /*model*/, const PlanFile& /*plan*/,
                                         const Clock* /*clock*/) {
  return std::unique_ptr<OpWork>(std::make_unique<BusyWork>());
}

}  // namespace pipecast::validate
