// libFuzzer target: Megatron-LM log text -> ParseMegatronLog (measured/megatron_log.h).
// Properties: never a crash or hang; an error always has a message and is never Internal; a
// parsed log has an iteration line and only finite, non-negative times.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "measured/megatron_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pipecast;
  if (size > 64 * 1024) return -1;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<measured::MegatronLog> log = measured::ParseMegatronLog(text, "fuzz.log");
  if (!log.ok()) {
    fuzz::CheckCleanError(log.status());
    return 0;
  }
  if (log->iterations.empty()) fuzz::Die("a parsed log without an iteration line");
  for (const measured::MegatronIteration& it : log->iterations) {
    if (!std::isfinite(it.elapsed_ms) || it.elapsed_ms < 0) fuzz::Die("a bad elapsed time");
  }
  (void)log->MaxAllocatedBytes();
  return 0;
}
