// CLI11 checks shared by the tools' mains for number flags. CLI11's own
// NonNegativeNumber lets nan and 1e300 through (and --memory-gb nan then
// converted NaN to an integer, which is undefined behaviour) and describes
// its range as "0.000000 to 1797693134862315708145274237...". These name
// the unit and a range a person can read (issue 8, docs/errors.md).
#ifndef PIPECAST_BASE_FLAG_CHECKS_H_
#define PIPECAST_BASE_FLAG_CHECKS_H_

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/terminal_text.h"

namespace pipecast {

// A value as an error message shows it: quoted, shortened past 40
// characters (base/terminal_text.h Excerpt), so a pasted file or a 309-digit
// number does not flood the terminal (issue 28).
inline std::string ShownValue(std::string_view text) {
  const std::string shown = Excerpt(text);
  const size_t cut = shown.size() == text.size() ? shown.size() : shown.find("... (") + 3;
  return fmt::format("'{}'{}", shown.substr(0, cut), shown.substr(cut));
}

// An integer flag in [min, max], e.g. IntRange(1) for a count: "'0' is not
// an integer from 1 to 2147483647". CLI11's PositiveNumber and Range print
// their bounds as doubles (the largest is 309 digits long) and let a
// fraction through to a conversion error that does not say what is allowed.
inline CLI::Validator IntRange(int64_t min, int64_t max = INT32_MAX) {
  const std::string range = fmt::format("an integer from {} to {}", min, max);
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long value = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || end == nullptr || *end != '\0' || errno == ERANGE || value < min ||
            value > max) {
          return fmt::format("{} is not {}", ShownValue(text), range);
        }
        return "";
      },
      range);
}

// A finite number in [min, max], e.g. FiniteRange(1048576, "GiB"); with
// `exclusive_min`, in (min, max] ("above 0 up to 10": a tolerance of 0 makes
// no sense).
inline CLI::Validator FiniteRange(double max, const std::string& unit, double min = 0,
                                  bool exclusive_min = false) {
  const std::string range = exclusive_min ? fmt::format("above {} up to {}", min, max)
                                          : fmt::format("from {} to {}", min, max);
  return CLI::Validator(
      [max, min, exclusive_min, unit, range](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end == nullptr || *end != '\0' || !std::isfinite(value) ||
            value < min || (exclusive_min && value == min) || value > max) {
          return fmt::format("{} is not a number of {} {}", ShownValue(text), unit, range);
        }
        return "";
      },
      fmt::format("{} {}", unit, range));
}

// A memory size in `unit` (GiB, MiB) where 0 means unlimited: FiniteRange,
// and a positive value that is less than one byte (1e-300, 5e-10 GiB) is
// refused rather than rounded to 0, which would read as unlimited
// (issue 28).
inline CLI::Validator MemorySize(double max, const std::string& unit, double unit_bytes,
                                 const std::string& zero_means) {
  const CLI::Validator range = FiniteRange(max, unit);
  return CLI::Validator(
      [range, unit, unit_bytes, zero_means](std::string& text) -> std::string {
        std::string error = range(text);
        if (!error.empty()) return error;
        const double value = std::strtod(text.c_str(), nullptr);
        if (value > 0 && value * unit_bytes < 1) {
          return fmt::format(
              "{} {} is less than one byte: give 0 for {}, or a size of at least "
              "one byte ({:.3g} {})",
              ShownValue(text), unit, zero_means, 1 / unit_bytes, unit);
        }
        return "";
      },
      range.get_description());
}

// --memory-gb: up to 1 PiB, the limit of memory_bytes in cluster files.
inline constexpr double kMaxMemoryGiB = 1024.0 * 1024.0;
// --memory-headroom: a fraction of capacity; past 0.9 it is a typo for a
// percentage or a size, not an allocator margin.
inline constexpr double kMaxMemoryHeadroom = 0.9;
// --optimizer-step-us: up to 1e12 us, the limit of times in model files.
inline constexpr double kMaxStepUs = 1e12;

}  // namespace pipecast

#endif  // PIPECAST_BASE_FLAG_CHECKS_H_
