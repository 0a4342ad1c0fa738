// The ranks of a trace pipecast wrote (simulator --trace, validator --trace):
// its op events, one iteration, as measured_run.h describes. Private to
// measured/.
#ifndef PIPECAST_MEASURED_INTERNAL_PIPECAST_RANKS_H_
#define PIPECAST_MEASURED_INTERNAL_PIPECAST_RANKS_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "measured/measured_run.h"
#include "measured/trace_file.h"

namespace pipecast::measured::internal {

// Appends one MeasuredRank per rank of the processes labelled `label` ("" =
// "measured" when the trace has such processes, else every rank process):
// its ops, busy time the sum of their durations (as the validator counts),
// the window first op start to last op end. InvalidArgument naming the file
// when no process has the label, they hold no op, or a rank is missing.
Status PipecastRanks(const TraceFile& trace, const std::string& label,
                     std::vector<MeasuredRank>* out);

}  // namespace pipecast::measured::internal

#endif  // PIPECAST_MEASURED_INTERNAL_PIPECAST_RANKS_H_
