// Aggregation: per-layer numbers over iterations, from the samples of one or
// more profiled processes (attribution.h), and the model.json they make.
//
// The first `warmup` iterations (pipecast:step ranges, or occurrences of
// each layer's pass when the program marks no steps) are skipped, the next
// `iterations` are used, and each (layer, pass) is summarised by its median
// and spread (min, quartiles, max). Several processes (data-parallel ranks)
// pool their samples. Layers are in the order of their first forward range.
//
// Units: ns and bytes. Pure functions; thread-safe.
#ifndef PIPECAST_PROFILER_AGGREGATE_H_
#define PIPECAST_PROFILER_AGGREGATE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "profiler/attribution.h"
#include "sim/model.h"

namespace pipecast {

// Median and spread of one quantity over its samples.
struct Spread {
  int samples = 0;
  double min = 0, q1 = 0, median = 0, q3 = 0, max = 0;
  // (q3 - q1) / median, 0 when the median is 0.
  double RelativeIqr() const;
};
// Quartiles by linear interpolation between order statistics (type 7, as
// numpy.percentile). REQUIRES: values non-empty.
Spread Summarize(std::vector<double> values);

struct AggregateOptions {
  int warmup = 2;       // iterations skipped first: allocator growth, autotuning, lazy loading
  int iterations = 10;  // iterations aggregated after them; fewer in the trace is an error
  // OK, or InvalidArgument naming --warmup or --iterations.
  [[nodiscard]] Status Validate() const;
};

struct LayerAggregate {
  std::string name;
  std::optional<int64_t> parameters;         // from the range names; unknown otherwise
  std::optional<int64_t> output_bytes;       // likewise
  std::optional<int64_t> checkpoint_bytes;   // ":ckpt=", declared by the program
  std::optional<int64_t> weight_grad_bytes;  // ":wgrad="
  Spread forward_ns;
  Spread backward_ns;                    // input + weight gradient
  std::optional<Spread> weight_grad_ns;  // when weight_grad ranges exist
  Spread activation_bytes;               // kept_bytes of the forward samples
  int64_t workspace_bytes = 0;  // median transient peak above what the pass keeps, max over passes
};

struct Aggregation {
  std::vector<LayerAggregate> layers;
  std::optional<Spread> step_busy_ns;  // pipecast:step ranges used, when marked
  int iterations_seen = 0;             // in the first process, warm-up included
  std::vector<std::string> warnings;   // for the user: layers without backward, unknown sizes
};

// Fails with FailedPrecondition when a process has fewer than warmup +
// iterations iterations, or no layer range at all (naming the convention).
[[nodiscard]] Result<Aggregation> Aggregate(const std::vector<Attribution>& processes,
                                            const AggregateOptions& options);

// Adds one profile per layer at `microbatch_size` (medians) to `model`:
// layers are created in order when the model has none, else matched by name
// (a layer missing from the aggregation is InvalidArgument). Unknown
// parameters and output sizes are written as 0 (the warnings say so).
[[nodiscard]] Status AddProfiles(const Aggregation& aggregation, int microbatch_size, Model* model);

// The JSON object for model.json's source: per layer, per pass, {median_us,
// min_us, max_us, iqr_rel, samples}, plus the largest relative IQR.
nlohmann::ordered_json SpreadJson(const Aggregation& aggregation);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_AGGREGATE_H_
