// EstimateTransformerJson (profiler/analytic.h): the estimate's model.json with
// a profile per tensor-parallel degree, each from EstimateTransformerAt, and
// the per-GPU parameters and the split's rule in source.tensor_parallel.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "formats/file_util.h"
#include "formats/formats.h"
#include "profiler/analytic.h"

namespace pipecast {
namespace {

// Bytes of model.json per layer profile, at least: 443 measured for a t = 1
// profile and 555 with the tensor-parallel keys (100 layers, this writer's
// layout), so an estimate from it never exceeds the file.
constexpr int64_t kMinJsonBytesPerProfile = 400;

}  // namespace

Result<std::string> EstimateTransformerJson(const TransformerSpec& spec,
                                            const AnalyticOptions& options,
                                            const std::vector<int>& degrees) {
  std::set<int> seen;
  for (int t : degrees) {
    if (t < 1) {
      return Status::InvalidArgument(fmt::format(
          "--tensor-parallel lists {}; degrees are GPUs per tensor-parallel group, 1 or more", t));
    }
    if (!seen.insert(t).second) {
      return Status::InvalidArgument(
          fmt::format("--tensor-parallel lists {} twice; give each degree once", t));
    }
  }
  PIPECAST_ASSIGN_OR_RETURN(Model base, EstimateTransformer(spec, options));
  // Refused before the document is built: a file no pipecast tool would read
  // (over kMaxInputFileBytes) took several times its size in memory to write,
  // and ran out of it (10^5 layers at four t: std::bad_alloc after 65 s).
  const int64_t per_size = 1 + 2 * static_cast<int64_t>(seen.size() - seen.count(1));
  int64_t profiles = 0;
  for (const Layer& layer : base.layers) {
    profiles += static_cast<int64_t>(layer.profiles.size()) * per_size;
  }
  if (profiles * kMinJsonBytesPerProfile > static_cast<int64_t>(kMaxInputFileBytes)) {
    return Status::InvalidArgument(fmt::format(
        "the model would have {} layer profiles ({} layers x {} micro-batch sizes x {} per "
        "size for the tensor-parallel degrees), at least {} MiB of model.json, over the {} MiB "
        "that pipecast's tools read: give fewer --layers, --microbatch-sizes or "
        "--tensor-parallel degrees",
        profiles, base.layers.size(), spec.microbatch_sizes.size(), per_size,
        profiles * kMinJsonBytesPerProfile >> 20, kMaxInputFileBytes >> 20));
  }
  if (seen.size() <= 1 && (seen.empty() || *seen.begin() == 1)) return ModelToJson(base);
  using ordered = nlohmann::ordered_json;  // keeps ModelToJson's key order
  ordered doc = ordered::parse(ModelToJson(base));
  ordered parameters = ordered::object();
  for (int t : seen) {
    if (t == 1) continue;
    for (bool sp : {false, true}) {
      std::vector<TensorParallelCost> costs;
      PIPECAST_ASSIGN_OR_RETURN(Model at, EstimateTransformerAt(spec, options, {t, sp}, &costs));
      const ordered per_t = ordered::parse(ModelToJson(at));
      for (size_t i = 0; i < at.layers.size(); ++i) {
        const TensorParallelCost& c = costs[i];
        for (ordered profile : per_t["layers"][i]["profiles"]) {
          const double b = profile["microbatch_size"].get<double>();
          profile["tensor_parallel"] = t;
          profile["sequence_parallel"] = sp;
          profile["tp_comm_bytes"] = std::llround(b * c.comm_bytes_per_sample);
          profile["tp_forward_collectives"] = c.forward_collectives;
          profile["tp_backward_collectives"] = c.backward_collectives;
          doc["layers"][i]["profiles"].push_back(std::move(profile));
        }
      }
      if (!sp) {
        // The same with and without sequence parallelism.
        parameters[std::to_string(t)] = {{"embedding", costs.front().parameters},
                                         {"block", costs[1].parameters},
                                         {"lm_head", costs.back().parameters}};
      }
    }
  }
  std::set<int> written = seen;
  written.insert(1);  // t = 1 is always written
  doc["source"]["tensor_parallel"] = {
      {"degrees", ordered(std::vector<int>(written.begin(), written.end()))},
      {"parameters_per_gpu", parameters},
      {"rule",
       "Megatron-LM: QKV and fc1 column-parallel (weights and biases / t), attention projection "
       "and fc2 row-parallel (weights / t, biases replicated), layernorms replicated, token "
       "embedding and lm_head vocabulary-parallel (ceil(V/t) rows), position table replicated; "
       "layer 'parameters' is the t = 1 count; profile times and bytes are per GPU, TP "
       "communication excluded (tp_comm_bytes x tp_*_collectives all-reduce equivalents)"}};
  return doc.dump(2, ' ', false, ordered::error_handler_t::replace) + "\n";
}

}  // namespace pipecast
