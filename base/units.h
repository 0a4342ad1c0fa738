// Units. Inside pipecast time is an integer count of nanoseconds (TimeNs) and
// sizes are integer bytes. Files carry microseconds (`*_us`, possibly
// fractional) and bytes (`*_bytes`); these helpers convert at the edges.
#ifndef PIPECAST_BASE_UNITS_H_
#define PIPECAST_BASE_UNITS_H_

#include <cmath>
#include <cstdint>

namespace pipecast {

using TimeNs = int64_t;
using Bytes = int64_t;

inline constexpr Bytes kKiB = 1024;
inline constexpr Bytes kMiB = 1024 * kKiB;
inline constexpr Bytes kGiB = 1024 * kMiB;
inline constexpr TimeNs kNsPerUs = 1000;
inline constexpr TimeNs kNsPerS = 1000 * 1000 * 1000;

// Microseconds from a file to nanoseconds, rounded to the nearest ns.
inline TimeNs UsToNs(double us) { return static_cast<TimeNs>(std::llround(us * 1e3)); }
inline double NsToUs(TimeNs ns) { return static_cast<double>(ns) / 1e3; }
inline double NsToMs(TimeNs ns) { return static_cast<double>(ns) / 1e6; }
inline double ToGiB(Bytes b) { return static_cast<double>(b) / static_cast<double>(kGiB); }

// Time to move `bytes` at `gigabytes_per_s` (10^9 bytes/s), rounded up to
// whole ns. 0 bandwidth means "infinitely fast" (the `ideal` cluster).
inline TimeNs TransferNs(Bytes bytes, double gigabytes_per_s) {
  if (gigabytes_per_s <= 0 || bytes <= 0) return 0;
  return static_cast<TimeNs>(std::ceil(static_cast<double>(bytes) / gigabytes_per_s));
}

}  // namespace pipecast

#endif  // PIPECAST_BASE_UNITS_H_
