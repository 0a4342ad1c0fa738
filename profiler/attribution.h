// Attribution: which layer each kernel, copy and allocation of one profiled
// process belongs to (docs/cupti.md §5, the offline marker + API join).
//
// Layers are NVTX ranges named by the convention in docs/profiler.md:
//   pipecast:<layer>:forward | backward | weight_grad [:params=N] [:out=BYTES]
//     [:ckpt=BYTES] [:wgrad=BYTES]
//   pipecast:step            one training iteration (optional)
// Sizes may also come from an instantaneous marker (nvtx.mark) with a layer
// name, e.g. pipecast:<layer>:forward:out=BYTES from a forward hook, which
// knows the output only after the range opened.
// A GPU record's correlation id finds the runtime/driver API record that
// launched it; that record's thread and start time find the innermost
// pipecast layer range open on that thread at that moment. Ranges of other
// names (library or op-level NVTX) are transparent.
//
// Samples: a layer range is one sample of (layer, pass) unless an enclosing
// layer range has another layer name (then it is a sub-layer, folded into
// the enclosing layer's time) or the same layer and pass (recursion, folded
// too). A weight_grad range nested in its layer's backward range is a sample
// of its own; backward samples always include the weight_grad work of the
// same occurrence, nested or not, so backward = input gradient + weight
// gradient as model.json requires.
//
// Time of a sample: the union of the intervals of its GPU work (its own and
// its sub-ranges'), per device, summed over devices: overlapping streams are
// not counted twice. Memory of a sample: replaying allocations and releases
// per device in host-time order, `kept_bytes` are the bytes allocated inside
// the range (by correlation) still allocated when it ends, `peak_bytes` the
// highest live total inside the range above the total at its start.
//
// Units: ns and bytes. Pure functions over value types; thread-safe.
#ifndef PIPECAST_PROFILER_ATTRIBUTION_H_
#define PIPECAST_PROFILER_ATTRIBUTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "profiler/activity.h"

namespace pipecast {

enum class Pass { kForward, kBackward, kWeightGrad };
const char* PassName(Pass pass);  // "forward", "backward", "weight_grad"

inline constexpr char kRangePrefix[] = "pipecast:";
inline constexpr char kStepRangeName[] = "pipecast:step";

// A parsed layer range name.
struct LayerRangeName {
  std::string layer;
  Pass pass = Pass::kForward;
  std::optional<int64_t> parameters;         // ":params=N"
  std::optional<int64_t> output_bytes;       // ":out=N"
  std::optional<int64_t> checkpoint_bytes;   // ":ckpt=N", what full recomputation keeps
  std::optional<int64_t> weight_grad_bytes;  // ":wgrad=N", what W keeps after I
};

// The layer range a name describes; nullopt for names outside the
// convention (no "pipecast:" prefix, or "pipecast:step"). A name with the
// prefix but a bad pass or attribute is InvalidArgument quoting the name:
// a typo must not silently drop a layer.
[[nodiscard]] Result<std::optional<LayerRangeName>> ParseLayerRangeName(std::string_view name);

// One occurrence of one layer's pass.
struct LayerSample {
  std::string layer;
  Pass pass = Pass::kForward;
  int occurrence = 0;  // k-th sample of this (layer, pass) in the process, from 0
  // Iteration: index of the pipecast:step range containing the sample's
  // start; with no step ranges in the trace, the occurrence. -1: outside
  // every step range.
  int step = -1;
  uint64_t start_ns = 0;  // CPU time of the range
  uint64_t end_ns = 0;
  uint64_t busy_ns = 0;  // union of GPU intervals, summed over devices
  uint64_t sum_ns = 0;   // plain sum of GPU record durations
  int gpu_records = 0;
  int64_t kept_bytes = 0;
  int64_t peak_bytes = 0;
  std::optional<int64_t> parameters;  // from the range name
  std::optional<int64_t> output_bytes;
  std::optional<int64_t> checkpoint_bytes;
  std::optional<int64_t> weight_grad_bytes;
};

// One pipecast:step range.
struct StepSample {
  int index = 0;
  uint64_t wall_ns = 0;  // CPU length of the range
  uint64_t busy_ns = 0;  // union of all GPU work launched inside it, any thread
};

struct AttributionStats {
  uint64_t gpu_records = 0;           // kept (non-zero timestamps)
  uint64_t attributed = 0;            // joined to a layer range
  uint64_t outside_layers = 0;        // API record found, no layer range open
  uint64_t unmatched = 0;             // no API record with that correlation id
  uint64_t unattributed_busy_ns = 0;  // busy time of outside_layers + unmatched
  uint64_t memory_records = 0;
  uint64_t memory_attributed = 0;
  uint64_t unclosed_ranges = 0;       // START without END
  uint64_t unmatched_range_ends = 0;  // END without START
  uint64_t samples_outside_steps = 0;
  int steps = 0;  // pipecast:step ranges (0: none used)
};

struct Attribution {
  std::vector<LayerSample> samples;  // by start time
  std::vector<StepSample> steps;
  AttributionStats stats;
};

// Joins one process's trace. Fails with InvalidArgument when a pipecast
// range name is malformed.
[[nodiscard]] Result<Attribution> Attribute(const ActivityTrace& trace);

// A trace loses too much to be trusted past this share: records CUPTI
// dropped, GPU records without timestamps, or GPU records whose launching
// API record is missing. Above it, attribution would be silently wrong, so
// the profile is refused (docs/cupti.md §3).
inline constexpr double kMaxLostRecordFraction = 0.01;

// OK, or FailedPrecondition naming the counts, the share and what to do
// (larger CUPTI buffers, fewer iterations). `unmatched` comes from
// Attribute(); pass 0 to check the trace alone.
[[nodiscard]] Status CheckRecordLoss(const ActivityTrace& trace, uint64_t unmatched,
                                     double max_fraction = kMaxLostRecordFraction);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_ATTRIBUTION_H_
