// From decoded traces to model.json: the part of `profiler cupti` and
// `profiler builtin` after the profiled program has exited. Attributes each
// process's trace (attribution.h), refuses traces that lost too many records,
// aggregates over iterations (aggregate.h), and writes the measurement's
// provenance into the model's `source` (method "cupti", device, clocks,
// warm-up, iterations, spread, record counts).
//
// Plain C++ (no CUDA): tested with synthetic traces. Thread-safe functions.
#ifndef PIPECAST_PROFILER_CUPTI_MODEL_H_
#define PIPECAST_PROFILER_CUPTI_MODEL_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "profiler/activity.h"
#include "profiler/aggregate.h"
#include "profiler/attribution.h"
#include "sim/model.h"

namespace pipecast {

// One profiled run at one micro-batch size.
struct CuptiMeasurement {
  int microbatch_size = 1;
  Aggregation aggregation;
  std::vector<DeviceInfo> devices;  // deduplicated by id
  AttributionStats stats;           // summed over processes
  uint64_t dropped_records = 0;
  uint64_t zero_timestamp_records = 0;
  uint64_t invalid_records = 0;
  uint64_t overhead_ns = 0;
  uint32_t cupti_version = 0;
  int processes = 0;                  // traces that held GPU work
  std::vector<std::string> warnings;  // from the traces; aggregation.warnings has the rest
};

// Attributes and aggregates the traces of one run (one per process; traces
// without GPU work, such as data-loader workers, are skipped). Fails with
// FailedPrecondition when no trace holds GPU work, when a trace loses more
// than `max_lost_fraction` of its records (CheckRecordLoss), or when
// aggregation fails; InvalidArgument for a malformed pipecast range name.
[[nodiscard]] Result<CuptiMeasurement> MeasureTraces(
    const std::vector<ActivityTrace>& traces, int microbatch_size, const AggregateOptions& options,
    double max_lost_fraction = kMaxLostRecordFraction);

// The model: one profile per measurement (distinct micro-batch sizes), and a
// source with method "cupti". `extra_source` adds keys (JSON text values),
// e.g. the command or the builtin architecture.
[[nodiscard]] Result<Model> BuildCuptiModel(const std::string& name,
                                            const std::vector<CuptiMeasurement>& measurements,
                                            const AggregateOptions& options,
                                            const std::map<std::string, std::string>& extra_source);

// What a tensor-parallel shard's profiles add to model.json (docs/formats.md):
// the collectives one GPU of the group would run per micro-batch, each moving
// `comm_bytes_per_sample` x the micro-batch size (the whole activation).
struct ShardCollectives {
  int64_t comm_bytes_per_sample = 0;
  int forward_collectives = 0;
  int backward_collectives = 0;
};

// Appends `at`'s profiles to `base`'s layers, marked tensor_parallel = t
// (sequence parallelism off) and carrying `collectives`: the measurement of
// one GPU's shard at t joins the t = 1 model. InvalidArgument when t < 2 or
// the two models' layers differ (count, names or parameters), naming the
// first difference.
[[nodiscard]] Status AddTensorParallelProfiles(Model* base, const Model& at, int t,
                                               const ShardCollectives& collectives);

// A few lines for stderr: records seen, attributed, lost, warnings.
std::string DescribeMeasurement(const CuptiMeasurement& m);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_CUPTI_MODEL_H_
