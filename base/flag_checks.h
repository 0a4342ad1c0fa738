// CLI11 checks shared by the tools' mains for number flags. CLI11's own
// NonNegativeNumber lets nan and 1e300 through (and --memory-gb nan then
// converted NaN to an integer, which is undefined behaviour) and describes
// its range as "0.000000 to 1797693134862315708145274237...". These name
// the unit and a range a person can read (issue 8, docs/errors.md).
#ifndef PIPECAST_BASE_FLAG_CHECKS_H_
#define PIPECAST_BASE_FLAG_CHECKS_H_

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <string>

namespace pipecast {

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
          return fmt::format("'{}' is not a number of {} {}", text, unit, range);
        }
        return "";
      },
      fmt::format("{} {}", unit, range));
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
