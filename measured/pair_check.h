// The overlapped F&B pair model (sim/stage_costs.h OverlappedPairNs,
// docs/simulator.md "Overlapped F&B") held against a measured pair: a step
// whose forward and backward work overlap on the GPU (DualPipe's chunk pair,
// DeepSeek's profile-data train.json). The forward half's cost is its compute
// plus its communication, the backward's its input- and weight-gradient
// compute plus its communication, each half's communication being what the
// model hides behind the other half's compute; the prediction is the pair's
// two halves, the measurement the step's GPU window. docs/calibration.md
// shows the figures for DeepSeek's trace.
//
// Pure function; thread-safe.
#ifndef PIPECAST_MEASURED_PAIR_CHECK_H_
#define PIPECAST_MEASURED_PAIR_CHECK_H_

#include <optional>
#include <string>

#include "base/units.h"
#include "measured/measured_run.h"

namespace pipecast::measured {

struct PairCheck {
  TimeNs forward_compute_ns = 0;   // union of the forward phase's compute
  TimeNs forward_comm_ns = 0;      // union of its communication
  TimeNs backward_compute_ns = 0;  // input gradient (or the whole backward)
  TimeNs weight_compute_ns = 0;    // weight gradient
  TimeNs backward_comm_ns = 0;     // the backward's and weight gradient's communication
  TimeNs predicted_ns = 0;         // the pair model
  TimeNs serial_ns = 0;            // F + B one after the other
  TimeNs measured_ns = 0;          // the step's GPU window
  double error = 0;                // (predicted - measured) / measured
};

// The check for a step whose forward and backward overlap
// (RankStep::forward_backward_interleave), else nullopt.
std::optional<PairCheck> CheckPair(const RankStep& step);

// Two lines for people: the inputs and the prediction against the measurement.
std::string PairCheckText(const PairCheck& check);

}  // namespace pipecast::measured

#endif  // PIPECAST_MEASURED_PAIR_CHECK_H_
