// libFuzzer target: cluster file text -> ParseCluster (and a preset name ->
// LoadCluster's preset lookup). Properties: never a crash, hang or leak; clean
// errors; a parsed cluster writes back (ClusterToJson) to text that parses to
// the same JSON.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/formats.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pipecast;
  if (size > 64 * 1024) return -1;
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (size < 64) {
    Result<Cluster> preset = ClusterPreset(text);
    if (!preset.ok()) fuzz::CheckCleanError(preset.status());
  }
  Result<Cluster> cluster = ParseCluster(text, "fuzz-cluster.json");
  if (!cluster.ok()) {
    fuzz::CheckCleanError(cluster.status());
    return 0;
  }
  const std::string again = ClusterToJson(*cluster);
  Result<Cluster> reparsed = ParseCluster(again, "roundtrip.json");
  if (!reparsed.ok()) {
    fuzz::Die("ClusterToJson output does not parse: " + reparsed.status().message());
  }
  if (ClusterToJson(*reparsed) != again) fuzz::Die("ClusterToJson is not stable");
  return 0;
}
