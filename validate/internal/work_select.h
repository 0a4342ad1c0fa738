// Which OpWork a model gets (validator.cc): the profiler's CPU layers for a
// model measured by `profiler cpu` when this build has them, else busy-work
// of the profiled durations. Private to validate/.
#ifndef PIPECAST_VALIDATE_INTERNAL_WORK_SELECT_H_
#define PIPECAST_VALIDATE_INTERNAL_WORK_SELECT_H_

#include <memory>

#include "base/clock.h"
#include "base/status.h"
#include "formats/plan.h"
#include "sim/model.h"
#include "validate/work.h"

namespace pipecast::validate {

Result<std::unique_ptr<OpWork>> MakeWork(const Model& model, const PlanFile& plan,
                                         const Clock* clock);

}  // namespace pipecast::validate

#endif  // PIPECAST_VALIDATE_INTERNAL_WORK_SELECT_H_
