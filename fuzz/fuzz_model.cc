// libFuzzer target: model.json text -> ParseModel. Properties: never a crash,
// hang or leak; an error always has a message and is never Internal; a model
// that parses writes back (ModelToJson) to text that parses to the same layers.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/formats.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pipecast;
  if (size > 64 * 1024) return -1;  // keep one input fast; structure matters, not size
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<Model> model = ParseModel(text, "fuzz.json");
  if (!model.ok()) {
    fuzz::CheckCleanError(model.status());
    return 0;
  }
  const std::string again = ModelToJson(*model);
  Result<Model> reparsed = ParseModel(again, "roundtrip.json");
  if (!reparsed.ok())
    fuzz::Die("ModelToJson output does not parse: " + reparsed.status().message());
  if (reparsed->layers.size() != model->layers.size()) fuzz::Die("round trip changed the layers");
  if (ModelToJson(*reparsed) != again) fuzz::Die("ModelToJson is not stable across a round trip");
  return 0;
}
