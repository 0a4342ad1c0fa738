// WorkloadSpec <-> the JSON object model.json keeps in source.workload.
// The one file of pipecast_cpu_workload that touches JSON: nlohmann's
// exceptions stop here and become errors naming the JSON path.
#include <nlohmann/json.hpp>
#include <string>

#include "base/json_depth.h"
#include "profiler/cpu/workload.h"

namespace pipecast::cpu {
namespace {

using json = nlohmann::json;

constexpr char kKind[] = "mlp-block";
constexpr char kFormula[] =
    "y = x + W2*gelu(W1*x) on float32 [tokens x hidden], tokens = microbatch_size x "
    "tokens_per_sample; W1 hidden x ffn, W2 ffn x hidden, no biases, gelu tanh form";

constexpr char kMoeFormula[] =
    "layers with experts E and top_k k: y = x + (1/k) * sum over the k experts of token i of "
    "W2_e*gelu(W1_e*x_i), each expert an MLP of hidden x ffn; hash router: token i of a "
    "micro-batch goes to the (i mod C(E,k))-th k-subset of the experts in lexicographic order";

json ShapeJson(const BlockShape& shape) {
  json j = {
      {"hidden", shape.hidden}, {"ffn", shape.ffn}, {"tokens_per_sample", shape.tokens_per_sample}};
  if (shape.moe()) {
    j["experts"] = shape.experts;
    j["top_k"] = shape.top_k;
  }
  return j;
}

Status ReadInt(const json& object, const std::string& path, const char* key, int& out) {
  const auto it = object.find(key);
  if (it == object.end()) {
    return Status::InvalidArgument(path + "." + key + " is missing");
  }
  if (!it->is_number_integer()) {
    return Status::InvalidArgument(path + "." + key + " is " + it->dump() +
                                   ": expected an integer");
  }
  const std::int64_t value = it->get<std::int64_t>();
  if (value < 1 || value > kMaxWidth) {
    return Status::InvalidArgument(path + "." + key + " is " + std::to_string(value) +
                                   ": expected an integer in [1, " + std::to_string(kMaxWidth) +
                                   "]");
  }
  out = static_cast<int>(value);
  return Status::Ok();
}

Result<WorkloadSpec> ParseWorkload(const json& root, const std::string& path) {
  if (!root.is_object()) return Status::InvalidArgument(path + " is not a JSON object");
  const auto kind = root.find("kind");
  if (kind == root.end() || !kind->is_string() || kind->get<std::string>() != kKind) {
    return Status::InvalidArgument(path + ".kind is " +
                                   (kind == root.end() ? std::string("missing") : kind->dump()) +
                                   ": expected \"" + kKind + "\"");
  }
  WorkloadSpec spec;
  const auto seed = root.find("seed");
  if (seed != root.end()) {
    if (!seed->is_number_unsigned()) {
      return Status::InvalidArgument(path + ".seed is " + seed->dump() +
                                     ": expected a non-negative integer");
    }
    spec.seed = seed->get<std::uint64_t>();
  }
  const auto layers = root.find("layers");
  if (layers == root.end() || !layers->is_array() || layers->empty()) {
    return Status::InvalidArgument(path + ".layers must be a non-empty list of layer shapes");
  }
  std::vector<BlockShape> shapes;
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const std::string layer_path = path + ".layers[" + std::to_string(i) + "]";
    const json& layer = (*layers)[i];
    if (!layer.is_object()) return Status::InvalidArgument(layer_path + " is not an object");
    BlockShape shape;
    PIPECAST_RETURN_IF_ERROR(ReadInt(layer, layer_path, "hidden", shape.hidden));
    PIPECAST_RETURN_IF_ERROR(ReadInt(layer, layer_path, "ffn", shape.ffn));
    PIPECAST_RETURN_IF_ERROR(
        ReadInt(layer, layer_path, "tokens_per_sample", shape.tokens_per_sample));
    if (layer.contains("experts") || layer.contains("top_k")) {
      PIPECAST_RETURN_IF_ERROR(ReadInt(layer, layer_path, "experts", shape.experts));
      PIPECAST_RETURN_IF_ERROR(ReadInt(layer, layer_path, "top_k", shape.top_k));
    }
    PIPECAST_RETURN_IF_ERROR(shape.Validate().WithPrefix(layer_path));
    shapes.push_back(shape);
  }
  spec.shape = shapes.front();
  spec.layers = static_cast<int>(shapes.size());
  bool uniform = true;
  for (const BlockShape& shape : shapes) uniform = uniform && shape == shapes.front();
  if (!uniform) spec.per_layer = std::move(shapes);
  PIPECAST_RETURN_IF_ERROR(spec.Validate().WithPrefix(path));
  return spec;
}

}  // namespace

std::string WorkloadToSourceJson(const WorkloadSpec& spec) {
  json layers = json::array();
  bool moe = false;
  for (int i = 0; i < spec.LayerCount(); ++i) {
    layers.push_back(ShapeJson(spec.LayerShape(i)));
    moe = moe || spec.LayerShape(i).moe();
  }
  json root = {{"kind", kKind},
               {"formula", kFormula},
               {"dtype", "float32"},
               {"seed", spec.seed},
               {"layers", std::move(layers)}};
  if (moe) root["moe_formula"] = kMoeFormula;
  return root.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<WorkloadSpec> WorkloadFromJson(const std::string& text) {
  if (auto deep = JsonTooDeep(text)) {
    return Status::InvalidArgument(std::string("source.") + kWorkloadSourceKey + ": " + *deep);
  }
  const json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return Status::InvalidArgument(std::string("source.") + kWorkloadSourceKey +
                                   " is not valid JSON");
  }
  return ParseWorkload(root, std::string("source.") + kWorkloadSourceKey);
}

Result<WorkloadSpec> WorkloadFromSource(const ModelSource& source) {
  if (source.method != "cpu") {
    return Status::InvalidArgument("source.method is \"" + source.method +
                                   "\": only a model measured by 'profiler cpu' (method \"cpu\") "
                                   "describes a CPU workload");
  }
  const auto it = source.details.find(kWorkloadSourceKey);
  if (it == source.details.end()) {
    return Status::InvalidArgument(std::string("source.") + kWorkloadSourceKey +
                                   " is missing: re-profile with 'profiler cpu'");
  }
  return WorkloadFromJson(it->second);
}

}  // namespace pipecast::cpu
