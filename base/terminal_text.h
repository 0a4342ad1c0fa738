// Terminal-safe text: names read from files (models, layers, schedules,
// clusters) may hold control characters, and a terminal obeys them — ESC
// starts an escape sequence that can recolour, move the cursor or retitle the
// window; a newline forges a line of the report. Every text output passes such
// names through TerminalSafe before printing them; the tools pass their error
// messages through TerminalSafeLines. JSON and HTML outputs escape by their
// own rules and keep the names as they are. Pure functions; thread-safe.
#ifndef PIPECAST_BASE_TERMINAL_TEXT_H_
#define PIPECAST_BASE_TERMINAL_TEXT_H_

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace pipecast {

// `s` with every control character written out as C does: "\n", "\r", "\t"
// and "\xNN" for the other C0 codes (0x00-0x1f) and DEL (0x7f); the C1 codes
// U+0080-U+009F (UTF-8 C2 80-C2 9F; U+009B is a one-character ESC [) as
// "\u0080"-"\u009f". Everything else, invalid UTF-8 included, is kept.
inline std::string TerminalSafe(std::string_view s, bool keep_newlines = false) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n' && keep_newlines) {
      out += '\n';
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(s[i + 1]));
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// `s` whole up to 40 characters, else its first 32, "..." and how long it
// was ("0B9999999999999999999999999999999... (10000199 characters)"): a value
// or token read from input, echoed in an error without flooding the terminal
// (issue 28: a 10 MB CSV token was echoed whole).
inline std::string Excerpt(std::string_view s) {
  constexpr size_t kWhole = 40;
  constexpr size_t kHead = 32;
  if (s.size() <= kWhole) return std::string(s);
  return fmt::format("{}... ({} characters)", s.substr(0, kHead), s.size());
}

// The same, keeping line breaks: for multi-line messages (an error with a
// board of ranks) whose names were not escaped where they were formatted.
inline std::string TerminalSafeLines(std::string_view s) { return TerminalSafe(s, true); }

}  // namespace pipecast

#endif  // PIPECAST_BASE_TERMINAL_TEXT_H_
