// model.json and cluster files (formats/formats.h, docs/formats.md). The one file
// of the sim library that parses JSON: nlohmann::json exceptions are caught
// here, and every failure becomes a Status naming the file, the JSON path and
// what to do. The cluster presets live in cluster.cc.
#include "formats/formats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/units.h"
#include "formats/file_util.h"

namespace pipecast {
namespace {

// Objects keep their keys in file order, so `source` details round-trip as
// written.
using json = nlohmann::ordered_json;

// Limits past which a number is a unit mistake, not a measurement. They also
// keep every conversion to integer ns or bytes far from int64 overflow.
constexpr double kMaxTimeUs = 1e12;                   // 11.6 days for one op
constexpr int64_t kMaxBytes = int64_t{1} << 50;       // 1 PiB
constexpr int64_t kMaxParameters = int64_t{1} << 50;  // ~1.1e15 in a layer
constexpr int64_t kMaxMicrobatchSize = 1 << 20;       // samples in a micro-batch
constexpr int64_t kMaxSequenceLength = 1 << 30;       // tokens in a sample
constexpr int64_t kMaxGlobalBatch = 1 << 30;          // samples in an iteration
constexpr int64_t kMaxGpusPerNode = 1 << 16;          // GPUs behind one fast link
constexpr double kMaxFlops = 1e24;                    // FLOPs for one sample
constexpr double kMaxBandwidthGbps = 1e6;             // 1 PB/s
constexpr double kMaxTflops = 1e6;                    // 1 EFLOP/s per GPU
constexpr Bytes kMinGpuMemoryBytes = kMiB;            // less is GB written as bytes
constexpr size_t kMaxShownChars = 40;                 // of a bad value in a message

constexpr std::string_view kSourceMethods[] = {"cupti", "cpu", "analytic", "manual"};

// Allowed range of an integer field. `about` says what the field holds (for
// "missing; add <about>"), `limit` shows `max` to a person.
struct IntRule {
  int64_t min;
  int64_t max;
  const char* limit;
  const char* about;
};
// Allowed range of a number field: [min, max], or (min, max] if exclusive.
struct NumberRule {
  double min;
  bool min_exclusive;
  double max;
  const char* limit;
  const char* about;
};

constexpr IntRule kParameterCount = {0, kMaxParameters, "2^50", "a parameter count"};
constexpr IntRule kMicrobatchSize = {1, kMaxMicrobatchSize, "2^20",
                                     "a micro-batch size in samples"};
constexpr IntRule kSizeBytes = {0, kMaxBytes, "2^50 bytes (1 PiB)", "a size in bytes"};
constexpr IntRule kMemoryBytes = {0, kMaxBytes, "2^50 bytes (1 PiB)",
                                  "a size in bytes, 0 = unlimited"};
constexpr IntRule kSequenceLength = {1, kMaxSequenceLength, "2^30",
                                     "a number of tokens per sample"};
constexpr IntRule kGlobalBatch = {1, kMaxGlobalBatch, "2^30", "a number of samples per iteration"};
constexpr IntRule kGpusPerNode = {1, kMaxGpusPerNode, "2^16", "a number of GPUs"};
constexpr NumberRule kTimeUs = {0, false, kMaxTimeUs, "1e12 us (11.6 days)",
                                "a time in microseconds"};
constexpr NumberRule kLayerFlops = {0, false, kMaxFlops, "1e24", "forward FLOPs of one sample"};
constexpr NumberRule kSampleFlops = {0, true, kMaxFlops, "1e24", "forward FLOPs of one sample"};
constexpr NumberRule kBandwidth = {0, false, kMaxBandwidthGbps, "1e6 GB/s",
                                   "gigabytes (10^9 bytes) per second per direction, 0 = infinite"};
constexpr NumberRule kHbmBandwidth = {0, false, kMaxBandwidthGbps, "1e6 GB/s",
                                      "gigabytes (10^9 bytes) per second, 0 = unknown"};
constexpr NumberRule kTflops = {0, false, kMaxTflops, "1e6 TFLOP/s",
                                "dense bf16 TFLOP/s, 0 = unknown"};

std::string Join(const std::vector<std::string_view>& items) {
  std::string text;
  for (std::string_view item : items) {
    if (!text.empty()) text += ", ";
    text += item;
  }
  return text;
}

std::string Member(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}
std::string Element(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

// A value as a message shows it: `string "12"`, `-2`, `an object`.
std::string Shown(const json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxShownChars) {
    text = text.substr(0, kMaxShownChars) + "...";
  }
  return v.is_string() ? "string " + text : text;
}

// nlohmann's what() without its "[json.exception.parse_error.101] " prefix.
std::string WithoutExceptionId(const char* what) {
  std::string text = what;
  if (!text.empty() && text[0] == '[') {
    size_t end = text.find("] ");
    if (end != std::string::npos) text = text.substr(end + 2);
  }
  return text;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Parser callback state that finds the first key repeated within one object
// (nlohmann would silently keep the last) and remembers its JSON path.
class DuplicateKeyFinder {
 public:
  bool OnEvent(json::parse_event_t event, const json& parsed) {
    using E = json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        CountArrayElement();
        frames_.push_back({event == E::array_start, 0, "", {}});
        break;
      case E::object_end:
      case E::array_end:
        if (!frames_.empty()) frames_.pop_back();
        break;
      case E::key:
        if (!frames_.empty() && parsed.is_string()) {
          Frame& top = frames_.back();
          top.key = parsed.get_ref<const std::string&>();
          if (!top.keys.insert(top.key).second && !duplicate_) {
            duplicate_ = Path();
          }
        }
        break;
      case E::value:
        CountArrayElement();
        break;
    }
    return true;
  }
  // The path of the first repeated key, if any.
  const std::optional<std::string>& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    bool is_array;
    size_t elements;  // arrays: elements seen so far
    std::string key;  // objects: the key being read
    std::set<std::string> keys;
  };
  void CountArrayElement() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().elements;
  }
  std::string Path() const {
    std::string path;
    for (const Frame& frame : frames_) {
      path = frame.is_array ? Element(path, frame.elements - 1) : Member(path, frame.key);
    }
    return path;
  }

  std::vector<Frame> frames_;
  std::optional<std::string> duplicate_;
};

// Reads typed, range-checked fields out of parsed JSON. Every error message
// starts with the file (`origin`) and the JSON path. Overloads taking a plain
// pointer read a required field; those taking std::optional, an optional one.
class Reader {
 public:
  explicit Reader(const std::string& origin) : origin_(origin) {}

  Status Error(const std::string& path, const std::string& what) const {
    std::string msg = path.empty() ? what : path + ": " + what;
    return Status::InvalidArgument(origin_.empty() ? msg : origin_ + ": " + msg);
  }

  // Parses `text` into `out`, rejecting malformed JSON and repeated keys.
  Status Parse(const std::string& text, json* out) const {
    DuplicateKeyFinder finder;
    try {
      *out = json::parse(text, [&finder](int, json::parse_event_t event, json& parsed) {
        return finder.OnEvent(event, parsed);
      });
    } catch (const json::parse_error& e) {
      return Error(
          "", fmt::format("not valid JSON at byte {}: {}", e.byte, WithoutExceptionId(e.what())));
    } catch (const json::exception& e) {  // e.g. out_of_range: 1e400
      return Error("", "not valid JSON: " + WithoutExceptionId(e.what()));
    }
    if (finder.duplicate()) {
      return Error(*finder.duplicate(), "key appears twice in the same object; keep one");
    }
    return Status::Ok();
  }

  Status CheckObject(const json& v, const std::string& path) const {
    if (v.is_object()) return Status::Ok();
    return Error(path, "must be a JSON object {...}, got " + Shown(v));
  }

  // Rejects keys outside `known`, suggesting the nearest known one.
  Status CheckKeys(const json& obj, const std::string& path,
                   std::initializer_list<std::string_view> known) const {
    for (const auto& item : obj.items()) {
      const std::string& key = item.key();
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      std::string msg = "unknown key";
      std::string_view nearest;
      size_t best = 3;  // suggest keys within 2 edits, or missing a unit
      for (std::string_view k : known) {
        size_t d = k.rfind(key + "_", 0) == 0 ? 1 : EditDistance(key, k);
        if (d < best) {
          best = d;
          nearest = k;
        }
      }
      if (!nearest.empty()) msg += fmt::format(" (did you mean '{}'?)", nearest);
      msg += "; known keys here: " + Join(known);
      return Error(Member(path, key), msg);
    }
    return Status::Ok();
  }

  // The member, or nullptr (after an error when `required`) if it is absent.
  Status Find(const json& obj, const std::string& path, const char* key, const char* about,
              bool required, const json** out) const {
    auto it = obj.find(key);
    *out = it == obj.end() ? nullptr : &*it;
    if (*out == nullptr && required) {
      return Error(Member(path, key), fmt::format("missing; add {} (see docs/formats.md)", about));
    }
    return Status::Ok();
  }

  // A required string must not be empty.
  Status String(const json& obj, const std::string& path, const char* key, const char* about,
                std::string* out) const {
    return ReadString(obj, path, key, about, true, out);
  }
  Status String(const json& obj, const std::string& path, const char* key,
                std::optional<std::string>* out) const {
    std::string value;
    PIPECAST_RETURN_IF_ERROR(ReadString(obj, path, key, "", false, &value));
    if (obj.contains(key)) *out = value;
    return Status::Ok();
  }

  template <typename T>
  Status Integer(const json& obj, const std::string& path, const char* key, const IntRule& rule,
                 T* out) const {
    std::optional<T> value;
    PIPECAST_RETURN_IF_ERROR(ReadInteger(obj, path, key, rule, true, &value));
    *out = *value;
    return Status::Ok();
  }
  template <typename T>
  Status Integer(const json& obj, const std::string& path, const char* key, const IntRule& rule,
                 std::optional<T>* out) const {
    return ReadInteger(obj, path, key, rule, false, out);
  }

  Status Number(const json& obj, const std::string& path, const char* key, const NumberRule& rule,
                double* out) const {
    std::optional<double> value;
    PIPECAST_RETURN_IF_ERROR(ReadNumber(obj, path, key, rule, true, &value));
    *out = *value;
    return Status::Ok();
  }
  Status Number(const json& obj, const std::string& path, const char* key, const NumberRule& rule,
                std::optional<double>* out) const {
    return ReadNumber(obj, path, key, rule, false, out);
  }

  // A `*_us` field, converted to whole nanoseconds.
  Status Time(const json& obj, const std::string& path, const char* key, TimeNs* out) const {
    double us = 0;
    PIPECAST_RETURN_IF_ERROR(Number(obj, path, key, kTimeUs, &us));
    *out = UsToNs(us);
    return Status::Ok();
  }
  Status Time(const json& obj, const std::string& path, const char* key,
              std::optional<TimeNs>* out) const {
    std::optional<double> us;
    PIPECAST_RETURN_IF_ERROR(Number(obj, path, key, kTimeUs, &us));
    if (us) *out = UsToNs(*us);
    return Status::Ok();
  }

  // The "format" key: present and equal to `expected` ("pipecast-model/1").
  Status Format(const json& root, const std::string& expected) const {
    std::string format;
    PIPECAST_RETURN_IF_ERROR(
        ReadString(root, "", "format", fmt::format("\"format\": \"{}\" as the first key", expected),
                   true, &format));
    if (format == expected) return Status::Ok();
    const std::string kind = expected.substr(0, expected.find('/') + 1);
    if (format.rfind("pipecast-", 0) == 0 && format.rfind(kind, 0) != 0) {
      return Error("format", fmt::format("\"{}\" is another kind of pipecast "
                                         "file; expected a \"{}\" file here",
                                         format, expected));
    }
    return Error("format", fmt::format("\"{}\" is not supported; this build "
                                       "reads \"{}\"",
                                       format, expected));
  }

 private:
  Status ReadString(const json& obj, const std::string& path, const char* key,
                    const std::string& about, bool required, std::string* out) const {
    const json* v = nullptr;
    PIPECAST_RETURN_IF_ERROR(Find(obj, path, key, about.c_str(), required, &v));
    if (v == nullptr) return Status::Ok();
    if (!v->is_string()) {
      return Error(Member(path, key), "must be a string, got " + Shown(*v));
    }
    *out = v->get<std::string>();
    if (required && out->empty()) {
      return Error(Member(path, key), "must not be empty");
    }
    return Status::Ok();
  }

  template <typename T>
  Status ReadInteger(const json& obj, const std::string& path, const char* key, const IntRule& rule,
                     bool required, std::optional<T>* out) const {
    const json* v = nullptr;
    PIPECAST_RETURN_IF_ERROR(Find(obj, path, key, rule.about, required, &v));
    if (v == nullptr) return Status::Ok();
    const int64_t max = std::min<int64_t>(rule.max, std::numeric_limits<T>::max());
    const std::string where = Member(path, key);
    const std::string expected =
        fmt::format("must be an integer >= {}, got {}", rule.min, Shown(*v));
    int64_t value = 0;
    if (v->is_number_unsigned()) {
      uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(max)) return OverLimit(where, *v, rule);
      value = static_cast<int64_t>(u);
    } else if (v->is_number_integer()) {
      value = v->get<int64_t>();
    } else if (v->is_number_float()) {
      // Accept whole numbers written as floats (5e7, 2.0): JSON writers differ.
      double d = v->get<double>();
      if (!std::isfinite(d) || d != std::floor(d)) return Error(where, expected);
      if (d > static_cast<double>(max)) return OverLimit(where, *v, rule);
      if (d < static_cast<double>(rule.min)) return Error(where, expected);
      value = static_cast<int64_t>(d);
    } else {
      return Error(where, expected);
    }
    if (value < rule.min) return Error(where, expected);
    if (value > max) return OverLimit(where, *v, rule);
    *out = static_cast<T>(value);
    return Status::Ok();
  }

  Status ReadNumber(const json& obj, const std::string& path, const char* key,
                    const NumberRule& rule, bool required, std::optional<double>* out) const {
    const json* v = nullptr;
    PIPECAST_RETURN_IF_ERROR(Find(obj, path, key, rule.about, required, &v));
    if (v == nullptr) return Status::Ok();
    const std::string where = Member(path, key);
    const std::string expected = fmt::format("must be a finite number {} {}, got {}",
                                             rule.min_exclusive ? ">" : ">=", rule.min, Shown(*v));
    if (!v->is_number()) return Error(where, expected);
    double d = v->get<double>();
    if (!std::isfinite(d) || d < rule.min || (rule.min_exclusive && d == rule.min)) {
      return Error(where, expected);
    }
    if (d > rule.max) return OverLimit(where, *v, rule);
    *out = d;
    return Status::Ok();
  }

  template <typename Rule>
  Status OverLimit(const std::string& where, const json& v, const Rule& rule) const {
    return Error(where, fmt::format("{} is over the limit of {}; expected {}: "
                                    "check the unit",
                                    Shown(v), rule.limit, rule.about));
  }

  std::string origin_;
};

// ---------------------------------------------------------------------------
// model.json

Status ReadSource(const Reader& r, const json& v, ModelSource* source) {
  const std::string path = "source";
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(v, path));
  const std::vector<std::string_view> methods(std::begin(kSourceMethods), std::end(kSourceMethods));
  const std::string about = "the method, one of " + Join(methods);
  PIPECAST_RETURN_IF_ERROR(r.String(v, path, "method", about.c_str(), &source->method));
  if (std::find(methods.begin(), methods.end(), source->method) == methods.end()) {
    return r.Error(Member(path, "method"), fmt::format("\"{}\" is not a method; use one of {}",
                                                       source->method, Join(methods)));
  }
  std::optional<std::string> device;
  PIPECAST_RETURN_IF_ERROR(r.String(v, path, "device", &device));
  source->device = device.value_or("");
  source->details.clear();
  for (const auto& item : v.items()) {
    if (item.key() == "method" || item.key() == "device") continue;
    source->details[item.key()] = item.value().dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return Status::Ok();
}

Status ReadProfile(const Reader& r, const json& v, const std::string& path, LayerProfile* p) {
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(v, path));
  PIPECAST_RETURN_IF_ERROR(
      r.CheckKeys(v, path,
                  {"microbatch_size", "forward_us", "backward_us", "backward_weight_us",
                   "activation_bytes", "output_bytes", "workspace_bytes"}));
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(v, path, "microbatch_size", kMicrobatchSize, &p->microbatch_size));
  PIPECAST_RETURN_IF_ERROR(r.Time(v, path, "forward_us", &p->forward_ns));
  PIPECAST_RETURN_IF_ERROR(r.Time(v, path, "backward_us", &p->backward_ns));
  PIPECAST_RETURN_IF_ERROR(r.Time(v, path, "backward_weight_us", &p->backward_weight_ns));
  if (p->backward_weight_ns && *p->backward_weight_ns > p->backward_ns) {
    return r.Error(Member(path, "backward_weight_us"),
                   fmt::format("{} is more than backward_us ({}); it is the "
                               "weight-gradient part of the whole backward, "
                               "so it must be <= backward_us",
                               Shown(v["backward_weight_us"]), Shown(v["backward_us"])));
  }
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(v, path, "activation_bytes", kSizeBytes, &p->activation_bytes));
  PIPECAST_RETURN_IF_ERROR(r.Integer(v, path, "output_bytes", kSizeBytes, &p->output_bytes));
  std::optional<Bytes> workspace;
  PIPECAST_RETURN_IF_ERROR(r.Integer(v, path, "workspace_bytes", kSizeBytes, &workspace));
  p->workspace_bytes = workspace.value_or(0);
  return Status::Ok();
}

Status ReadLayer(const Reader& r, const json& v, const std::string& path, Layer* layer) {
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(v, path));
  PIPECAST_RETURN_IF_ERROR(
      r.CheckKeys(v, path, {"name", "parameters", "forward_flops", "profiles"}));
  PIPECAST_RETURN_IF_ERROR(r.String(v, path, "name", "the layer's name", &layer->name));
  PIPECAST_RETURN_IF_ERROR(r.Integer(v, path, "parameters", kParameterCount, &layer->parameters));
  PIPECAST_RETURN_IF_ERROR(r.Number(v, path, "forward_flops", kLayerFlops, &layer->forward_flops));
  const json* profiles = nullptr;
  PIPECAST_RETURN_IF_ERROR(
      r.Find(v, path, "profiles", "a list of per-micro-batch-size profiles", true, &profiles));
  const std::string list = Member(path, "profiles");
  if (!profiles->is_array()) {
    return r.Error(list, "must be a list of profiles, got " + Shown(*profiles));
  }
  if (profiles->empty()) {
    return r.Error(list,
                   "is empty; add one profile per measured micro-batch "
                   "size");
  }
  layer->profiles.assign(profiles->size(), LayerProfile{});
  for (size_t i = 0; i < profiles->size(); ++i) {
    PIPECAST_RETURN_IF_ERROR(ReadProfile(r, (*profiles)[i], Element(list, i), &layer->profiles[i]));
    for (size_t j = 0; j < i; ++j) {
      if (layer->profiles[j].microbatch_size == layer->profiles[i].microbatch_size) {
        return r.Error(Member(Element(list, i), "microbatch_size"),
                       fmt::format("{} was already measured in {}; keep one profile per "
                                   "micro-batch size",
                                   layer->profiles[i].microbatch_size, Element(list, j)));
      }
    }
    // Interpolating between a split and an unsplit backward would lose the split.
    if (layer->profiles[i].backward_weight_ns.has_value() !=
        layer->profiles[0].backward_weight_ns.has_value()) {
      const bool has = layer->profiles[i].backward_weight_ns.has_value();
      return r.Error(
          Element(list, i),
          fmt::format("{} backward_weight_us but {} {}; give it in every profile "
                      "of a layer or in none",
                      has ? "has" : "has no", Element(list, 0), has ? "does not" : "does"));
    }
  }
  std::sort(layer->profiles.begin(), layer->profiles.end(),
            [](const LayerProfile& a, const LayerProfile& b) {
              return a.microbatch_size < b.microbatch_size;
            });
  return Status::Ok();
}

Status ReadModel(const Reader& r, const json& root, Model* model) {
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(root, ""));
  PIPECAST_RETURN_IF_ERROR(r.Format(root, kModelFormat));
  PIPECAST_RETURN_IF_ERROR(r.CheckKeys(root, "",
                                       {"format", "name", "source", "dtype", "sequence_length",
                                        "flops_per_sample", "global_batch", "layers"}));
  PIPECAST_RETURN_IF_ERROR(r.String(root, "", "name", "the model's name", &model->name));
  if (auto it = root.find("source"); it != root.end()) {
    PIPECAST_RETURN_IF_ERROR(ReadSource(r, *it, &model->source));
  }
  std::optional<std::string> dtype;
  PIPECAST_RETURN_IF_ERROR(r.String(root, "", "dtype", &dtype));
  model->dtype = dtype.value_or("");
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(root, "", "sequence_length", kSequenceLength, &model->sequence_length));
  PIPECAST_RETURN_IF_ERROR(
      r.Number(root, "", "flops_per_sample", kSampleFlops, &model->flops_per_sample));
  PIPECAST_RETURN_IF_ERROR(r.Integer(root, "", "global_batch", kGlobalBatch, &model->global_batch));
  const json* layers = nullptr;
  PIPECAST_RETURN_IF_ERROR(
      r.Find(root, "", "layers", "the list of layers, in order", true, &layers));
  if (!layers->is_array()) {
    return r.Error("layers", "must be a list of layers, got " + Shown(*layers));
  }
  if (layers->empty()) {
    return r.Error("layers", "is empty; add the model's layers, in order");
  }
  model->layers.assign(layers->size(), Layer{});
  for (size_t i = 0; i < layers->size(); ++i) {
    PIPECAST_RETURN_IF_ERROR(ReadLayer(r, (*layers)[i], Element("layers", i), &model->layers[i]));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// cluster files

Status ReadLink(const Reader& r, const json& root, const char* key, Link* link) {
  const json* v = nullptr;
  PIPECAST_RETURN_IF_ERROR(
      r.Find(root, "", key, "an object {bandwidth_gbps, latency_us}", true, &v));
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(*v, key));
  PIPECAST_RETURN_IF_ERROR(r.CheckKeys(*v, key, {"bandwidth_gbps", "latency_us"}));
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, key, "bandwidth_gbps", kBandwidth, &link->bandwidth_gbps));
  return r.Number(*v, key, "latency_us", kTimeUs, &link->latency_us);
}

Status ReadGpu(const Reader& r, const json& root, GpuSpec* gpu) {
  const json* v = nullptr;
  PIPECAST_RETURN_IF_ERROR(
      r.Find(root, "", "gpu", "an object {name, memory_bytes, peak_tflops}", true, &v));
  const std::string path = "gpu";
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(*v, path));
  PIPECAST_RETURN_IF_ERROR(
      r.CheckKeys(*v, path, {"name", "memory_bytes", "peak_tflops", "memory_bandwidth_gbps"}));
  PIPECAST_RETURN_IF_ERROR(r.String(*v, path, "name", "the GPU's name", &gpu->name));
  PIPECAST_RETURN_IF_ERROR(r.Integer(*v, path, "memory_bytes", kMemoryBytes, &gpu->memory_bytes));
  if (gpu->memory_bytes > 0 && gpu->memory_bytes < kMinGpuMemoryBytes) {
    return r.Error(Member(path, "memory_bytes"),
                   fmt::format("{} bytes is too little for a GPU; the unit is bytes (80 GiB is "
                               "85899345920), and 0 means unlimited",
                               gpu->memory_bytes));
  }
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, path, "peak_tflops", kTflops, &gpu->peak_tflops));
  std::optional<double> hbm;
  PIPECAST_RETURN_IF_ERROR(r.Number(*v, path, "memory_bandwidth_gbps", kHbmBandwidth, &hbm));
  gpu->memory_bandwidth_gbps = hbm.value_or(0);
  return Status::Ok();
}

Status ReadCluster(const Reader& r, const json& root, Cluster* cluster) {
  PIPECAST_RETURN_IF_ERROR(r.CheckObject(root, ""));
  PIPECAST_RETURN_IF_ERROR(r.Format(root, kClusterFormat));
  PIPECAST_RETURN_IF_ERROR(r.CheckKeys(
      root, "", {"format", "name", "gpus_per_node", "gpu", "intra_node", "inter_node"}));
  PIPECAST_RETURN_IF_ERROR(r.String(root, "", "name", "the cluster's name", &cluster->name));
  PIPECAST_RETURN_IF_ERROR(
      r.Integer(root, "", "gpus_per_node", kGpusPerNode, &cluster->gpus_per_node));
  PIPECAST_RETURN_IF_ERROR(ReadGpu(r, root, &cluster->gpu));
  PIPECAST_RETURN_IF_ERROR(ReadLink(r, root, "intra_node", &cluster->intra_node));
  return ReadLink(r, root, "inter_node", &cluster->inter_node);
}

// Runs `read` on the parsed text; no exception gets past this function.
template <typename T, typename ReadFn>
Result<T> ParseWith(const std::string& text, const std::string& origin, ReadFn read) {
  const Reader reader(origin);
  try {
    json root;
    PIPECAST_RETURN_IF_ERROR(reader.Parse(text, &root));
    T value;
    PIPECAST_RETURN_IF_ERROR(read(reader, root, &value));
    return value;
  } catch (const std::exception& e) {
    return Status::Internal(origin +
                            ": unexpected error while reading: " + WithoutExceptionId(e.what()));
  }
}

std::string Dump(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace

Result<Model> ParseModel(const std::string& text, const std::string& origin) {
  return ParseWith<Model>(text, origin, ReadModel);
}

Result<Model> LoadModel(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseModel(*text, path);
}

std::string ModelToJson(const Model& model) {
  json root;
  root["format"] = kModelFormat;
  root["name"] = model.name;
  json source;
  source["method"] = model.source.method;
  if (!model.source.device.empty()) source["device"] = model.source.device;
  for (const auto& [key, text] : model.source.details) {
    if (key == "method" || key == "device") continue;
    json value = json::parse(text, nullptr, false);
    source[key] = value.is_discarded() ? json(text) : value;
  }
  root["source"] = std::move(source);
  if (!model.dtype.empty()) root["dtype"] = model.dtype;
  if (model.sequence_length) root["sequence_length"] = *model.sequence_length;
  if (model.flops_per_sample) root["flops_per_sample"] = *model.flops_per_sample;
  if (model.global_batch) root["global_batch"] = *model.global_batch;
  json layers = json::array();
  for (const Layer& layer : model.layers) {
    json l;
    l["name"] = layer.name;
    l["parameters"] = layer.parameters;
    if (layer.forward_flops) l["forward_flops"] = *layer.forward_flops;
    json profiles = json::array();
    for (const LayerProfile& p : layer.profiles) {
      json j;
      j["microbatch_size"] = p.microbatch_size;
      j["forward_us"] = NsToUs(p.forward_ns);
      j["backward_us"] = NsToUs(p.backward_ns);
      if (p.backward_weight_ns) {
        j["backward_weight_us"] = NsToUs(*p.backward_weight_ns);
      }
      j["activation_bytes"] = p.activation_bytes;
      j["output_bytes"] = p.output_bytes;
      if (p.workspace_bytes != 0) j["workspace_bytes"] = p.workspace_bytes;
      profiles.push_back(std::move(j));
    }
    l["profiles"] = std::move(profiles);
    layers.push_back(std::move(l));
  }
  root["layers"] = std::move(layers);
  return Dump(root);
}

Result<Cluster> ParseCluster(const std::string& text, const std::string& origin) {
  return ParseWith<Cluster>(text, origin, ReadCluster);
}

Result<Cluster> LoadCluster(const std::string& spec) {
  Result<Cluster> preset = ClusterPreset(spec);
  if (preset.ok()) return preset;
  Result<std::string> text = ReadFile(spec);
  if (!text.ok()) {
    const std::vector<std::string> names = ClusterPresetNames();
    return Status::NotFound(
        fmt::format("cluster '{}' is neither a preset ({}) nor a readable "
                    "pipecast-cluster/1 file: {}",
                    spec, Join({names.begin(), names.end()}), text.status().message()));
  }
  return ParseCluster(*text, spec);
}

nlohmann::ordered_json ClusterJson(const Cluster& cluster) {
  json root;
  root["format"] = kClusterFormat;
  root["name"] = cluster.name;
  root["gpus_per_node"] = cluster.gpus_per_node;
  root["gpu"] = {{"name", cluster.gpu.name},
                 {"memory_bytes", cluster.gpu.memory_bytes},
                 {"peak_tflops", cluster.gpu.peak_tflops},
                 {"memory_bandwidth_gbps", cluster.gpu.memory_bandwidth_gbps}};
  root["intra_node"] = {{"bandwidth_gbps", cluster.intra_node.bandwidth_gbps},
                        {"latency_us", cluster.intra_node.latency_us}};
  root["inter_node"] = {{"bandwidth_gbps", cluster.inter_node.bandwidth_gbps},
                        {"latency_us", cluster.inter_node.latency_us}};
  return root;
}

std::string ClusterToJson(const Cluster& cluster) { return Dump(ClusterJson(cluster)); }

}  // namespace pipecast
