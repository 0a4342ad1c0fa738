// Shared by the libFuzzer targets in fuzz/ (built with -DPIPECAST_FUZZ=ON,
// see scripts/fuzz.sh). Fuzz-only; not part of any library.
#ifndef PIPECAST_FUZZ_FUZZ_UTIL_H_
#define PIPECAST_FUZZ_FUZZ_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/status.h"

namespace pipecast::fuzz {

// Stops the run with a message: libFuzzer records the input as a crash.
[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what.c_str());
  std::abort();
}

// A parser must say what is wrong: an error with an empty message is a bug,
// and so is Internal (an exception that escaped the field checks).
inline void CheckCleanError(const Status& status) {
  if (status.ok()) return;
  if (status.message().empty()) Die("error without a message");
  if (status.code() == StatusCode::kInternal) Die("internal error: " + status.message());
}

}  // namespace pipecast::fuzz

#endif  // PIPECAST_FUZZ_FUZZ_UTIL_H_
