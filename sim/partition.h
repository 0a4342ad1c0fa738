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

// The rules a partition can be made by (docs/simulator.md "Partition").
enum class PartitionRule {
  // pipecast's: balanced on time among the splits whose every stage fits the
  // GPU (MemoryAwarePartition, sim/memory_partition.h). The default.
  kBalanced,
  // Megatron-LM's: the decoder layers divided evenly over the pipeline's
  // stages and virtual stages, with optional first/last-stage counts
  // (EvenPartition).
  kEven,
  // The layers per stage as listed (simulator --partition 0-3,4-7, a plan's
  // partition): no rule made them. Simulate() needs the list with it.
  kGiven,
};
// "balanced", "even", "given".
const char* PartitionRuleName(PartitionRule rule);
// "balanced" or "even" (a flag's values); InvalidArgument naming `flag` and
// the accepted names.
Result<PartitionRule> ParsePartitionRule(const std::string& name, const std::string& flag);

// Megatron-LM's options for its even split (megatron/training/arguments.py),
// each 0 or false when not given.
struct EvenSplitOptions {
  // --decoder-first-pipeline-num-layers: decoder layers of the first
  // pipeline rank (over all its virtual stages).
  int first_stage_layers = 0;
  // --decoder-last-pipeline-num-layers: of the last pipeline rank.
  int last_stage_layers = 0;
  // --account-for-embedding-in-pipeline-split: the embedding counts as one
  // decoder layer in the split (the first stage builds one decoder less).
  bool account_for_embedding = false;
  // --account-for-loss-in-pipeline-split: the head and loss count as one.
  bool account_for_loss = false;

  bool Uneven() const { return first_stage_layers > 0 || last_stage_layers > 0; }
  bool operator==(const EvenSplitOptions&) const = default;
  // InvalidArgument for a negative count, or counts together with an
  // account-for option (Megatron-LM refuses the two together).
  [[nodiscard]] Status Validate() const;
};

// Which rule makes a run's partition when none is given, and its options.
struct PartitionSetting {
  PartitionRule rule = PartitionRule::kBalanced;
  EvenSplitOptions even;  // only with rule kEven
  bool operator==(const PartitionSetting&) const = default;
  // even.Validate(), and even's options only with rule kEven.
  [[nodiscard]] Status Validate() const;
};

// The layers of a model that are no decoder layers: an embedding first and
// a head last, named as pipecast's profilers name them ("embedding",
// "lm_head"; profiler/analytic.h). Megatron-LM keeps them on the first and
// the last stage.
struct ModelEnds {
  bool embedding = false;
  bool head = false;
};
ModelEnds EndsOf(const std::vector<std::string>& layer_names);

// InvalidArgument unless 1 <= stages <= num_layers: "5 stages but the model
// has only 4 layers: use at most 4 stages".
[[nodiscard]] Status CheckStageCount(int stages, int num_layers);

// Megatron-LM's even split of `num_layers` layers (decoder layers between
// `ends`) into stage_rank.size() virtual stages, virtual stage s on rank
// stage_rank[s] of `ranks`, each rank holding the same number of virtual
// stages (v). As get_num_layers_to_build and get_transformer_layer_offset
// (megatron/core/transformer/transformer_block.py, transformer_layer.py)
// count: each rank holds D/p decoder layers (D + 1 per account-for option),
// or with first/last-stage counts F and L the first rank F, the last L and
// each other rank (D - F - L) over the ranks left; a rank's layers are divided
// evenly over its virtual stages; the layers run in virtual-stage order. The
// embedding joins the first virtual stage, the head the last. Errors name
// the flag and the counts that do not divide, as Megatron-LM refuses them.
Result<std::vector<StageLayers>> EvenPartition(int num_layers, ModelEnds ends, int ranks,
                                               const std::vector<int>& stage_rank,
                                               const EvenSplitOptions& options);

}  // namespace pipecast

#endif  // PIPECAST_SIM_PARTITION_H_
