// libFuzzer target: HuggingFace config.json text -> ParseHfConfig. Properties:
// never a crash, hang or leak; an error always has a message and is never
// Internal; an architecture that parses either validates or fails with a
// message, and then gives parameter counts with active <= total.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "profiler/hf_config.h"
#include "profiler/layer_shapes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pipecast;
  if (size > 64 * 1024) return -1;  // keep one input fast; structure matters, not size
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<HfConfig> config = ParseHfConfig(text, "fuzz.json");
  if (!config.ok()) {
    fuzz::CheckCleanError(config.status());
    return 0;
  }
  if (config->model_type.empty()) fuzz::Die("a parsed config without a model_type");
  TransformerSpec spec = config->architecture;
  spec.name = "fuzz";
  spec.sequence_length = 16;
  spec.microbatch_sizes = {1};
  const Status valid = spec.Validate();
  if (!valid.ok()) {
    fuzz::CheckCleanError(valid);
    return 0;
  }
  const ParameterCount count = CountParameters(spec);
  if (count.total <= 0 || count.active <= 0 || count.active > count.total) {
    fuzz::Die("parameter counts out of order: total " + std::to_string(count.total) + ", active " +
              std::to_string(count.active));
  }
  return 0;
}
