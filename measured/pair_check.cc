#include "measured/pair_check.h"

#include <fmt/format.h>

#include "sim/stage_costs.h"

namespace pipecast::measured {

std::optional<PairCheck> CheckPair(const RankStep& step) {
  if (!step.forward_backward_interleave) return std::nullopt;
  const auto phase = [](Phase p) { return static_cast<int>(p); };
  PairCheck c;
  c.forward_compute_ns = step.compute_by_phase[phase(Phase::kForward)];
  c.forward_comm_ns = step.comm_by_phase[phase(Phase::kForward)];
  c.backward_compute_ns = step.compute_by_phase[phase(Phase::kBackward)];
  c.weight_compute_ns = step.compute_by_phase[phase(Phase::kWeightGrad)];
  c.backward_comm_ns =
      step.comm_by_phase[phase(Phase::kBackward)] + step.comm_by_phase[phase(Phase::kWeightGrad)];
  StageCost f, b;
  f.forward_ns = c.forward_compute_ns + c.forward_comm_ns;
  f.tp_forward_ns = c.forward_comm_ns;
  b.backward_ns = c.backward_compute_ns + c.weight_compute_ns + c.backward_comm_ns;
  b.backward_weight_ns = c.weight_compute_ns;
  b.tp_backward_ns = c.backward_comm_ns;
  const PairHalvesNs halves = OverlappedPairNs(f, b, OpKind::kBackward, PairOverlap{});
  c.predicted_ns = halves.forward + halves.backward;
  c.serial_ns = f.forward_ns + b.backward_ns;
  c.measured_ns = step.span_ns();
  c.error = c.measured_ns > 0 ? static_cast<double>(c.predicted_ns - c.measured_ns) /
                                    static_cast<double>(c.measured_ns)
                              : 0;
  return c;
}

std::string PairCheckText(const PairCheck& c) {
  const auto ms = [](TimeNs ns) { return static_cast<double>(ns) / 1e6; };
  return fmt::format(
      "overlapped F&B pair (forward and backward work overlap on the GPU): F = {:.3f} compute + "
      "{:.3f} communication, B = {:.3f} input gradient + {:.3f} weight gradient + {:.3f} "
      "communication (ms)\n"
      "pair model (docs/simulator.md, Overlapped F&B): {:.3f} ms against the measured window "
      "{:.3f} ms ({:+.1f}%); F + B in turn {:.3f} ms ({:+.1f}%)\n",
      ms(c.forward_compute_ns), ms(c.forward_comm_ns), ms(c.backward_compute_ns),
      ms(c.weight_compute_ns), ms(c.backward_comm_ns), ms(c.predicted_ns), ms(c.measured_ns),
      100 * c.error, ms(c.serial_ns),
      c.measured_ns > 0 ? 100.0 * static_cast<double>(c.serial_ns - c.measured_ns) /
                              static_cast<double>(c.measured_ns)
                        : 0.0);
}

}  // namespace pipecast::measured
