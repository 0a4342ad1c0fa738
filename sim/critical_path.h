// Critical path of a simulated iteration: the chain of ops and transfers,
// each starting the moment the previous one released it, that runs from the
// first op to the last pipeline op and so sets the pipeline's length. It
// tells a user which stage or link to make faster.
//
// Derived from the timeline alone (ops, transfers, the schedule's stage
// owners): an op was released by its data input (the transfer that brought
// it, or the producing op on the same rank) or by the previous op on its
// rank, whichever ended exactly at its start (data first on ties); a
// transfer by its producer, or, when it waited for the link, by the previous
// transfer on that link.
#ifndef PIPECAST_SIM_CRITICAL_PATH_H_
#define PIPECAST_SIM_CRITICAL_PATH_H_

#include <vector>

#include "base/units.h"
#include "sim/schedule.h"

namespace pipecast {

struct OpRecord;
struct TransferRecord;

struct CriticalStep {
  enum class Kind { kCompute, kCommunication, kWaiting };
  Kind kind = Kind::kCompute;
  int op = -1;        // index into SimResult::ops (compute)
  int transfer = -1;  // index into SimResult::transfers (communication)
  int rank = -1;      // compute: the rank; communication: the sender
  int dst_rank = -1;  // communication: the receiver
  TimeNs start_ns = 0;
  TimeNs end_ns = 0;  // when the next step of the path starts
};

struct CriticalPath {
  std::vector<CriticalStep> steps;  // in time order, contiguous from 0
  TimeNs length_ns = 0;
  TimeNs compute_ns = 0;
  // Of compute_ns: the tensor-parallel collectives inside its ops (filled by
  // Simulate(); 0 at t = 1).
  TimeNs tp_comm_ns = 0;
  TimeNs communication_ns = 0;
  TimeNs waiting_ns = 0;
  std::vector<TimeNs> compute_by_rank;  // per rank
  struct LinkTime {
    int src_rank = 0;
    int dst_rank = 0;
    TimeNs ns = 0;
  };
  std::vector<LinkTime> communication_by_link;  // sorted by (src, dst)
};

// The path ends at the op that ends last (of several, the one that started
// last, then the highest rank).
// REQUIRES: ops and transfers from one simulation of `schedule`, each rank's
// ops in the order they ran and each link's transfers in the order they were
// sent (SimResult's order); ops non-empty.
CriticalPath ComputeCriticalPath(const Schedule& schedule, const std::vector<OpRecord>& ops,
                                 const std::vector<TransferRecord>& transfers);

}  // namespace pipecast

#endif  // PIPECAST_SIM_CRITICAL_PATH_H_
