// The text `validator --measured` prints without a plan: per rank, what its
// trace holds (steps, where the ops came from) and, for the median step, the
// window, compute, communication by collective and how much of it showed,
// time per phase, busy and idle time per stream, kernel time per phase and
// stream, peak allocated memory, and the pair model where the step is an
// overlapped F&B pair (measured/pair_check.h).
#ifndef PIPECAST_MEASURED_SUMMARY_H_
#define PIPECAST_MEASURED_SUMMARY_H_

#include <string>

#include "measured/measured_run.h"

namespace pipecast::measured {

std::string MeasuredRunText(const MeasuredRun& run);

}  // namespace pipecast::measured

#endif  // PIPECAST_MEASURED_SUMMARY_H_
