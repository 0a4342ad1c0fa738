// Partition: which contiguous run of layers each (virtual) stage holds.
#ifndef PIPECAST_SIM_PARTITION_H_
#define PIPECAST_SIM_PARTITION_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "base/units.h"

namespace pipecast {

struct StageLayers {
  int first_layer = 0;  // inclusive
  int last_layer = 0;   // inclusive
  int NumLayers() const { return last_layer - first_layer + 1; }
  bool operator==(const StageLayers&) const = default;
};

// Parses "0-3,4-7" (single layers may be written "5"). The ranges must be in
// order, contiguous, non-empty, cover layers 0..num_layers-1 exactly and
// number `num_stages`; errors name the range and what is wrong.
Result<std::vector<StageLayers>> ParsePartition(const std::string& text, int num_layers,
                                                int num_stages);
std::string PartitionToString(const std::vector<StageLayers>& partition);

// Splits layers into `num_stages` contiguous stages minimising the largest
// stage cost (sum of `layer_cost`), exactly (binary search on the
// bottleneck with a greedy check, O(n log total)).
// On ties later stages take the extra layers, since early stages hold more
// in-flight activations under 1F1B. Deterministic.
// InvalidArgument when num_stages < 1 or > number of layers.
Result<std::vector<StageLayers>> BalancedPartition(const std::vector<TimeNs>& layer_cost,
                                                   int num_stages);

}  // namespace pipecast

#endif  // PIPECAST_SIM_PARTITION_H_
