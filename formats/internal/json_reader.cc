#include "formats/internal/json_reader.h"

#include <fmt/format.h>

#include <cmath>
#include <exception>
#include <set>

#include "base/json_depth.h"
#include "base/nearest.h"

namespace pipecast::internal {
namespace {

constexpr size_t kMaxShownChars = 40;  // of a bad value in a message

// A SAX handler that finds the first key repeated within one object
// (nlohmann would silently keep the last) and remembers its JSON path. A
// pass of its own before the DOM is built: nlohmann's parser with a callback
// rescans the parent container at every object's end, quadratic in an
// array's length (a 40 000-layer model.json took 1.3 s of the planner's
// 6.6 s in it); SAX and a plain parse are each linear.
class DuplicateKeyFinder final : public nlohmann::json_sax<Json> {
 public:
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Start(false); }
  bool start_array(std::size_t) override { return Start(true); }
  bool end_object() override { return End(); }
  bool end_array() override { return End(); }
  bool key(string_t& key) override {
    if (!frames_.empty()) {
      Frame& top = frames_.back();
      top.key = key;
      if (!top.keys.insert(top.key).second && !duplicate_) duplicate_ = Path();
    }
    return true;
  }
  // Syntax errors are the DOM parse's to report, with their byte.
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
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
  bool Value() {
    CountArrayElement();
    return true;
  }
  bool Start(bool is_array) {
    CountArrayElement();
    frames_.push_back({is_array, 0, "", {}});
    return true;
  }
  bool End() {
    if (!frames_.empty()) frames_.pop_back();
    return true;
  }
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

}  // namespace

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

std::string Shown(const Json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > kMaxShownChars) {
    text = text.substr(0, kMaxShownChars) + "...";
  }
  return v.is_string() ? "string " + text : text;
}

std::string WithoutExceptionId(const char* what) {
  std::string text = what;
  if (!text.empty() && text[0] == '[') {
    size_t end = text.find("] ");
    if (end != std::string::npos) text = text.substr(end + 2);
  }
  return text;
}

std::string Dump(const Json& j) {
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

Status JsonReader::Error(const std::string& path, const std::string& what) const {
  std::string msg = path.empty() ? what : path + ": " + what;
  if (origin_.empty() && !wording_.origin_always) return Status::InvalidArgument(msg);
  return Status::InvalidArgument(origin_ + ": " + msg);
}

Status JsonReader::Parse(const std::string& text, Json* out) const {
  if (auto deep = JsonTooDeep(text)) return Error("", *deep);
  DuplicateKeyFinder finder;
  try {
    *out = Json::parse(text);
  } catch (const Json::parse_error& e) {
    return Error(
        "", fmt::format("not valid JSON at byte {}: {}", e.byte, WithoutExceptionId(e.what())));
  } catch (const Json::exception& e) {  // e.g. out_of_range: 1e400
    return Error("", "not valid JSON: " + WithoutExceptionId(e.what()));
  }
  Json::sax_parse(text, &finder);
  if (finder.duplicate()) {
    return Error(*finder.duplicate(), "key appears twice in the same object; keep one");
  }
  return Status::Ok();
}

Status JsonReader::CheckObject(const Json& v, const std::string& path) const {
  if (v.is_object()) return Status::Ok();
  return Error(path, fmt::format("{}, got {}", wording_.object, Shown(v)));
}

Status JsonReader::CheckKeys(const Json& obj, const std::string& path,
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
    if (wording_.suggest_keys && !nearest.empty()) {
      msg += fmt::format(" (did you mean '{}'?)", nearest);
    }
    msg += "; known keys here: " + Join(known);
    return Error(Member(path, key), msg);
  }
  return Status::Ok();
}

Status JsonReader::Find(const Json& obj, const std::string& path, const char* key,
                        const char* about, bool required, const Json** out) const {
  auto it = obj.find(key);
  *out = it == obj.end() ? nullptr : &*it;
  if (*out != nullptr || !required) return Status::Ok();
  if (about == nullptr || *about == '\0') return Error(Member(path, key), "missing");
  return Error(Member(path, key), fmt::format("missing; add {} (see docs/formats.md)", about));
}

Status JsonReader::Array(const Json& obj, const std::string& path, const char* key,
                         const Json** out) const {
  PIPECAST_RETURN_IF_ERROR(Find(obj, path, key, out));
  if (!(*out)->is_array()) {
    return Error(Member(path, key), "expected a list [...], got " + Shown(**out));
  }
  return Status::Ok();
}

Status JsonReader::String(const Json& obj, const std::string& path, const char* key,
                          std::optional<std::string>* out) const {
  std::string value;
  PIPECAST_RETURN_IF_ERROR(ReadString(obj, path, key, "", false, &value));
  if (obj.contains(key)) *out = value;
  return Status::Ok();
}

Status JsonReader::Bool(const Json& obj, const std::string& path, const char* key,
                        bool* out) const {
  const Json* v = nullptr;
  PIPECAST_RETURN_IF_ERROR(Find(obj, path, key, &v));
  if (!v->is_boolean()) {
    return Error(Member(path, key), "expected true or false, got " + Shown(*v));
  }
  *out = v->get<bool>();
  return Status::Ok();
}

Status JsonReader::IntegerValue(const Json& v, const std::string& where, const IntRule& rule,
                                int64_t* out) const {
  const int64_t max = rule.max;
  const std::string expected =
      fmt::format("{} >= {}, got {}", wording_.integer, rule.min, Shown(v));
  int64_t value = 0;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(max)) return OverLimit(where, v, rule.limit, rule.about, max);
    value = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    value = v.get<int64_t>();
  } else if (v.is_number_float()) {
    // Accept whole numbers written as floats (5e7, 2.0): JSON writers differ.
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) return Error(where, expected);
    if (d > static_cast<double>(max)) return OverLimit(where, v, rule.limit, rule.about, max);
    if (d < static_cast<double>(rule.min)) return Error(where, expected);
    value = static_cast<int64_t>(d);
  } else {
    return Error(where, expected);
  }
  if (value < rule.min) return Error(where, expected);
  if (value > max) return OverLimit(where, v, rule.limit, rule.about, max);
  *out = value;
  return Status::Ok();
}

Status JsonReader::Number(const Json& obj, const std::string& path, const char* key,
                          const NumberRule& rule, double* out) const {
  std::optional<double> value;
  PIPECAST_RETURN_IF_ERROR(ReadNumber(obj, path, key, rule, true, &value));
  *out = *value;
  return Status::Ok();
}

Status JsonReader::Time(const Json& obj, const std::string& path, const char* key,
                        const NumberRule& rule, TimeNs* out) const {
  double us = 0;
  PIPECAST_RETURN_IF_ERROR(Number(obj, path, key, rule, &us));
  *out = UsToNs(us);
  return Status::Ok();
}

Status JsonReader::Time(const Json& obj, const std::string& path, const char* key,
                        const NumberRule& rule, std::optional<TimeNs>* out) const {
  std::optional<double> us;
  PIPECAST_RETURN_IF_ERROR(Number(obj, path, key, rule, &us));
  if (us) *out = UsToNs(*us);
  return Status::Ok();
}

Status JsonReader::Format(const Json& root, const std::string& expected) const {
  std::string format;
  PIPECAST_RETURN_IF_ERROR(ReadString(root, "", "format",
                                      fmt::format("\"format\": \"{}\" as the first key", expected),
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

Status JsonReader::ReadString(const Json& obj, const std::string& path, const char* key,
                              const std::string& about, bool required, std::string* out) const {
  const Json* v = nullptr;
  PIPECAST_RETURN_IF_ERROR(Find(obj, path, key, about.c_str(), required, &v));
  if (v == nullptr) return Status::Ok();
  if (!v->is_string()) {
    return Error(Member(path, key), fmt::format("{}, got {}", wording_.string, Shown(*v)));
  }
  *out = v->get<std::string>();
  if (required && out->empty()) {
    return Error(Member(path, key), "must not be empty");
  }
  return Status::Ok();
}

Status JsonReader::ReadNumber(const Json& obj, const std::string& path, const char* key,
                              const NumberRule& rule, bool required,
                              std::optional<double>* out) const {
  const Json* v = nullptr;
  PIPECAST_RETURN_IF_ERROR(Find(obj, path, key, rule.about, required, &v));
  if (v == nullptr) return Status::Ok();
  const std::string where = Member(path, key);
  const std::string expected = fmt::format("{} {} {}, got {}", wording_.number,
                                           rule.min_exclusive ? ">" : ">=", rule.min, Shown(*v));
  if (!v->is_number()) return Error(where, expected);
  double d = v->get<double>();
  if (!std::isfinite(d) || d < rule.min || (rule.min_exclusive && d == rule.min)) {
    return Error(where, expected);
  }
  if (d > rule.max) return OverLimit(where, *v, rule.limit, rule.about, rule.max);
  *out = d;
  return Status::Ok();
}

template <typename Max>
Status JsonReader::OverLimit(const std::string& where, const Json& v, const char* limit,
                             const char* about, Max max) const {
  if (limit == nullptr)
    return Error(where, fmt::format("{} is over the limit of {}", Shown(v), max));
  return Error(where, fmt::format("{} is over the limit of {}; expected {}: check the unit",
                                  Shown(v), limit, about));
}

}  // namespace pipecast::internal
