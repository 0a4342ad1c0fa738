// JsonReader: reads typed, range-checked fields out of parsed JSON for the files of the formats
// part (model.json and cluster files in formats.cc, plan.json in plan_read.cc). Private to
// formats/: no other part includes it.
//
// Every failure is an InvalidArgument Status whose message starts with the file (`origin`) and
// the JSON path of the field (`layers[3].forward_us`), then says what was expected and what was
// found. The reader never throws; Parse() catches nlohmann's exceptions.
//
// The two file families word their messages differently (model and cluster: "must be a string",
// with a suggestion for a misspelt key; plan: "expected a string"). The error catalogue pins both
// wordings, so each reader is built with one JsonWording; unify them only together with the
// catalogue (docs/errors.md, tests).
//
// Overloads taking a plain pointer read a required field; those taking std::optional, an optional
// one (left unset when the key is absent). Thread-compatible: a const reader holds only its origin.
#ifndef PIPECAST_FORMATS_INTERNAL_JSON_READER_H_
#define PIPECAST_FORMATS_INTERNAL_JSON_READER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/units.h"

namespace pipecast::internal {

// Objects keep their keys in file order, so `source` details round-trip as written.
using Json = nlohmann::ordered_json;

// Allowed range of an integer field. `about` says what the field holds (for "missing; add
// <about>"), `limit` shows `max` to a person. With `limit` null an over-limit message shows `max`
// itself, and with `about` empty a missing field is just "missing".
struct IntRule {
  int64_t min;
  int64_t max;
  const char* limit;
  const char* about;
};
// Allowed range of a number field: [min, max], or (min, max] if exclusive. `limit` and `about`
// as in IntRule.
struct NumberRule {
  double min;
  bool min_exclusive;
  double max;
  const char* limit;
  const char* about;
};

// How one file family words its messages.
struct JsonWording {
  const char* object;   // "must be a JSON object {...}"
  const char* string;   // "must be a string"
  const char* integer;  // "must be an integer"
  const char* number;   // "must be a finite number"
  bool suggest_keys;    // add "(did you mean 'x'?)" after an unknown key
  bool origin_always;   // start with "<origin>: " even when origin is empty
};
// model.json and cluster files.
inline constexpr JsonWording kModelWording = {"must be a JSON object {...}",
                                              "must be a string",
                                              "must be an integer",
                                              "must be a finite number",
                                              true,
                                              false};
// plan.json.
inline constexpr JsonWording kPlanWording = {"expected an object {...}",
                                             "expected a string",
                                             "expected an integer",
                                             "expected a finite number",
                                             false,
                                             true};

// JSON paths: Member("layers[3]", "forward_us") is "layers[3].forward_us"; Member("", "name") is
// "name"; Element("partition", 2) is "partition[2]".
std::string Member(const std::string& path, std::string_view key);
std::string Element(const std::string& path, size_t index);
// "a, b, c".
std::string Join(const std::vector<std::string_view>& items);
// A value as a message shows it: `string "12"`, `-2`, `an object`; long values cut at 40 chars.
std::string Shown(const Json& v);
// nlohmann's what() without its "[json.exception.parse_error.101] " prefix.
std::string WithoutExceptionId(const char* what);
// Pretty-printed with two-space indents and a final newline; invalid UTF-8 replaced.
std::string Dump(const Json& j);

class JsonReader {
 public:
  JsonReader(std::string origin, const JsonWording& wording)
      : origin_(std::move(origin)), wording_(wording) {}

  const std::string& origin() const { return origin_; }

  // "<origin>: <path>: <what>", leaving out an empty path (and, unless the wording says
  // otherwise, an empty origin).
  [[nodiscard]] Status Error(const std::string& path, const std::string& what) const;

  // Parses `text` into `out`, rejecting malformed JSON (naming the byte) and repeated keys
  // (naming the key's path).
  [[nodiscard]] Status Parse(const std::string& text, Json* out) const;

  [[nodiscard]] Status CheckObject(const Json& v, const std::string& path) const;
  // Rejects keys outside `known`, suggesting the nearest known one where the wording does.
  [[nodiscard]] Status CheckKeys(const Json& obj, const std::string& path,
                                 std::initializer_list<std::string_view> known) const;

  // Sets *out to the member, or to nullptr if it is absent: an error when `required`, saying to
  // add `about` (a bare "missing" when `about` is empty).
  [[nodiscard]] Status Find(const Json& obj, const std::string& path, const char* key,
                            const char* about, bool required, const Json** out) const;
  // A required member with nothing to say about it.
  [[nodiscard]] Status Find(const Json& obj, const std::string& path, const char* key,
                            const Json** out) const {
    return Find(obj, path, key, "", true, out);
  }
  // A required list.
  [[nodiscard]] Status Array(const Json& obj, const std::string& path, const char* key,
                             const Json** out) const;

  // A required string must not be empty.
  [[nodiscard]] Status String(const Json& obj, const std::string& path, const char* key,
                              const char* about, std::string* out) const {
    return ReadString(obj, path, key, about, true, out);
  }
  [[nodiscard]] Status String(const Json& obj, const std::string& path, const char* key,
                              std::string* out) const {
    return ReadString(obj, path, key, "", true, out);
  }
  [[nodiscard]] Status String(const Json& obj, const std::string& path, const char* key,
                              std::optional<std::string>* out) const;

  [[nodiscard]] Status Bool(const Json& obj, const std::string& path, const char* key,
                            bool* out) const;

  // An integer in the rule's range; whole numbers written as floats (5e7, 2.0) are accepted.
  [[nodiscard]] Status IntegerValue(const Json& v, const std::string& where, const IntRule& rule,
                                    int64_t* out) const;
  template <typename T>
  [[nodiscard]] Status Integer(const Json& obj, const std::string& path, const char* key,
                               const IntRule& rule, T* out) const {
    std::optional<T> value;
    PIPECAST_RETURN_IF_ERROR(ReadInteger(obj, path, key, rule, true, &value));
    *out = *value;
    return Status::Ok();
  }
  template <typename T>
  [[nodiscard]] Status Integer(const Json& obj, const std::string& path, const char* key,
                               const IntRule& rule, std::optional<T>* out) const {
    return ReadInteger(obj, path, key, rule, false, out);
  }
  // A required integer in [min, max].
  template <typename T>
  [[nodiscard]] Status Int(const Json& obj, const std::string& path, const char* key, int64_t min,
                           int64_t max, T* out) const {
    return Integer(obj, path, key, IntRule{min, max, nullptr, ""}, out);
  }

  [[nodiscard]] Status Number(const Json& obj, const std::string& path, const char* key,
                              const NumberRule& rule, double* out) const;
  [[nodiscard]] Status Number(const Json& obj, const std::string& path, const char* key,
                              const NumberRule& rule, std::optional<double>* out) const {
    return ReadNumber(obj, path, key, rule, false, out);
  }
  // A required finite number in [0, max].
  [[nodiscard]] Status Number(const Json& obj, const std::string& path, const char* key, double max,
                              double* out) const {
    return Number(obj, path, key, NumberRule{0, false, max, nullptr, ""}, out);
  }

  // A `*_us` field under `rule`, converted to whole nanoseconds.
  [[nodiscard]] Status Time(const Json& obj, const std::string& path, const char* key,
                            const NumberRule& rule, TimeNs* out) const;
  [[nodiscard]] Status Time(const Json& obj, const std::string& path, const char* key,
                            const NumberRule& rule, std::optional<TimeNs>* out) const;

  // The "format" key: present and equal to `expected` ("pipecast-model/1").
  [[nodiscard]] Status Format(const Json& root, const std::string& expected) const;

 private:
  Status ReadString(const Json& obj, const std::string& path, const char* key,
                    const std::string& about, bool required, std::string* out) const;
  template <typename T>
  Status ReadInteger(const Json& obj, const std::string& path, const char* key, const IntRule& rule,
                     bool required, std::optional<T>* out) const {
    const Json* v = nullptr;
    PIPECAST_RETURN_IF_ERROR(Find(obj, path, key, rule.about, required, &v));
    if (v == nullptr) return Status::Ok();
    IntRule clamped = rule;
    clamped.max = std::min<int64_t>(rule.max, std::numeric_limits<T>::max());
    int64_t value = 0;
    PIPECAST_RETURN_IF_ERROR(IntegerValue(*v, Member(path, key), clamped, &value));
    *out = static_cast<T>(value);
    return Status::Ok();
  }
  Status ReadNumber(const Json& obj, const std::string& path, const char* key,
                    const NumberRule& rule, bool required, std::optional<double>* out) const;
  // "<value> is over the limit of <limit>; expected <about>: check the unit", or, without a
  // limit text, "<value> is over the limit of <max>".
  template <typename Max>
  Status OverLimit(const std::string& where, const Json& v, const char* limit, const char* about,
                   Max max) const;

  std::string origin_;
  JsonWording wording_;
};

}  // namespace pipecast::internal

#endif  // PIPECAST_FORMATS_INTERNAL_JSON_READER_H_
