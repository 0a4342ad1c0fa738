// A guard for deeply nested JSON, run on the text before any JSON library
// builds a value: nlohmann::json serialises and destroys values recursively,
// so a file of 100k nested brackets (200 KB) would overflow the stack.
// pipecast's own files nest at most a few levels; kMaxJsonDepth leaves room.
// Pure function; thread-safe.
#ifndef PIPECAST_BASE_JSON_DEPTH_H_
#define PIPECAST_BASE_JSON_DEPTH_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace pipecast {

// Deeper than any pipecast file (model.json nests 4 levels, plan.json 5), far
// below where recursion could exhaust a thread's stack.
inline constexpr int kMaxJsonDepth = 64;

// "nested deeper than 64 levels at byte 65 ..." when `text` opens more than
// `max_depth` arrays or objects at once (brackets inside strings do not
// count), else nullopt. Malformed JSON passes: the parser names its error.
inline std::optional<std::string> JsonTooDeep(std::string_view text,
                                              int max_depth = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // skip the escaped character
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return "nested deeper than " + std::to_string(max_depth) + " levels at byte " +
               std::to_string(i + 1) +
               ": pipecast's files nest a few levels; is this the right file?";
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

}  // namespace pipecast

#endif  // PIPECAST_BASE_JSON_DEPTH_H_
