// libFuzzer target: plan.json text -> ParsePlan, then (when the plan is small)
// replay it with the simulator on a uniform model with the plan's layers, as
// `simulator --plan` does. Properties: never a crash, hang or leak; clean
// errors from both; a parsed plan writes back (PlanToJson) to text that parses.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/plan.h"
#include "fuzz/fuzz_util.h"
#include "sim/model.h"
#include "sim/simulator.h"

namespace {

// `layers` layers of 100 us forward, 200 us backward (80 us of it weight
// gradient), 1 MiB of activations and output, 1000 parameters.
pipecast::Model UniformModel(int layers) {
  pipecast::Model m;
  m.name = "fuzz";
  for (int i = 0; i < layers; ++i) {
    pipecast::Layer l;
    l.name = "layer" + std::to_string(i);
    l.parameters = 1000;
    pipecast::LayerProfile p;
    p.microbatch_size = 1;
    p.forward_ns = 100'000;
    p.backward_ns = 200'000;
    p.backward_weight_ns = 80'000;
    p.activation_bytes = 1 << 20;
    p.output_bytes = 1 << 20;
    l.profiles.push_back(p);
    m.layers.push_back(l);
  }
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pipecast;
  if (size > 64 * 1024) return -1;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<PlanFile> plan = ParsePlan(text, "fuzz.plan.json");
  if (!plan.ok()) {
    fuzz::CheckCleanError(plan.status());
    return 0;
  }
  const std::string again = PlanToJson(*plan);
  Result<PlanFile> reparsed = ParsePlan(again, "roundtrip.plan.json");
  if (!reparsed.ok()) fuzz::Die("PlanToJson output does not parse: " + reparsed.status().message());
  // Replay, bounded so that one input stays fast.
  if (plan->schedule.NumActions() > 4000 || plan->partition.empty()) return 0;
  const int layers = plan->partition.back().last_layer + 1;
  if (layers > 256) return 0;
  SimOptions options = PlanSimOptions(*plan);
  options.record_timeline = false;
  Result<SimResult> result = Simulate(UniformModel(layers), plan->cluster, plan->schedule, options);
  if (!result.ok()) fuzz::CheckCleanError(result.status());
  return 0;
}
