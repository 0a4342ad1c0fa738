// Reading and writing pipecast's JSON files: model.json (`pipecast-model/1`)
// and cluster files (`pipecast-cluster/1`). This is the one file of the formats
// library that parses model and cluster JSON: nlohmann::json exceptions stop here and become a
// Status whose message names the file, the JSON path
// (`layers[3].profiles[0].forward_us`) and what is wrong.
#ifndef PIPECAST_FORMATS_FORMATS_H_
#define PIPECAST_FORMATS_FORMATS_H_

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "sim/cluster.h"
#include "sim/model.h"

namespace pipecast {

inline constexpr char kModelFormat[] = "pipecast-model/1";
inline constexpr char kClusterFormat[] = "pipecast-cluster/1";

// Parses model.json text. `origin` names the file in error messages.
// Checks every field: types, required keys, non-negative finite numbers,
// at least one layer and one profile per layer, unique micro-batch sizes,
// backward_weight_us <= backward_us. Profiles come back sorted by size.
Result<Model> ParseModel(const std::string& text, const std::string& origin);
// Reads and parses a file. NotFound when it cannot be read.
Result<Model> LoadModel(const std::string& path);
// model.json text (pretty-printed, 2-space indent, trailing newline).
std::string ModelToJson(const Model& model);

Result<Cluster> ParseCluster(const std::string& text, const std::string& origin);
// `spec` is a preset name or a path to a cluster JSON file.
Result<Cluster> LoadCluster(const std::string& spec);
std::string ClusterToJson(const Cluster& cluster);
// The same object as a JSON value, for files that embed a cluster (plan.json).
nlohmann::ordered_json ClusterJson(const Cluster& cluster);

}  // namespace pipecast

#endif  // PIPECAST_FORMATS_FORMATS_H_
