// libFuzzer target: the simulator fed a fuzzed schedule. The input's first
// two bytes choose the options (cluster, micro-batch size, data parallelism,
// recomputation, a backward split or none, PipeDream-style iterations without
// a flush, timeline recording); the rest is schedule text, parsed as
// `simulator --schedule-in` does and simulated on a tiny uniform model with
// one or two layers per stage. Without the iterations bit, the second byte's
// top three bits (k = 1-7) make the model huge instead: 2^k layers per stage,
// each at the file limits (10^12 us per op, 2^50 bytes, 2^50 parameters), so
// that sums pass 2^63 while every field stays within its limit (issue 17).
// Properties: Simulate ends in a result or a clean error (a deadlock is
// FailedPrecondition naming the ops; a sum past 2^62 InvalidArgument), never
// a crash, hang or leak; a result's times and peaks are not negative, the
// iteration is no shorter than any rank's busy time; its reports (JSON, text,
// trace) render.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/formats.h"
#include "formats/result_json.h"
#include "formats/schedule_text.h"
#include "fuzz/fuzz_util.h"
#include "report/report.h"
#include "report/trace.h"
#include "sim/cluster.h"
#include "sim/model.h"
#include "sim/schedule.h"
#include "sim/simulator.h"

namespace {

// Bounds that keep one input well under a millisecond or two.
constexpr size_t kMaxTextBytes = 4096;
constexpr int64_t kMaxActions = 2000;
constexpr int kMaxStages = 64;

// The file limits for one field (formats/formats.cc).
constexpr int64_t kHugeNs = 1'000'000'000'000'000;  // 10^12 us
constexpr int64_t kHugeBytes = int64_t{1} << 50;

pipecast::Model TinyModel(int layers, bool split_backward, bool uneven, bool huge) {
  pipecast::Model m;
  m.name = "fuzz";
  for (int i = 0; i < layers; ++i) {
    pipecast::Layer l;
    l.name = "layer" + std::to_string(i);
    l.parameters = 1000 * (i + 1);
    pipecast::LayerProfile p;
    p.microbatch_size = 1;
    p.forward_ns = uneven ? 1000 * (1 + i % 3) : 1000;
    p.backward_ns = 2 * p.forward_ns;
    if (huge) {
      l.parameters = kHugeBytes;
      p.forward_ns = uneven ? kHugeNs / (1 + i % 3) : kHugeNs;
      p.backward_ns = kHugeNs;
    }
    if (split_backward) p.backward_weight_ns = std::min(p.forward_ns, p.backward_ns);
    p.activation_bytes = huge ? kHugeBytes : 4096;
    p.output_bytes = i % 2 ? 0 : (huge ? kHugeBytes : 1024);
    p.workspace_bytes = huge ? kHugeBytes : 512;
    l.profiles.push_back(p);
    m.layers.push_back(l);
  }
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pipecast;
  if (size < 2 || size > kMaxTextBytes) return -1;
  const uint8_t a = data[0];
  const uint8_t b = data[1];
  const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);

  Result<Schedule> parsed = ParseScheduleText(text, "fuzz.txt");
  if (!parsed.ok()) {
    fuzz::CheckCleanError(parsed.status());
    return 0;
  }
  Schedule schedule = std::move(parsed.value());
  if (schedule.NumActions() > kMaxActions || schedule.num_stages > kMaxStages) return 0;
  if (b & 0x10) {  // as plan.json can say for PipeDream: several iterations, no flush
    schedule.iterations = 1 + (b >> 5);
    schedule.flush = false;
  }

  const int huge = (b & 0x10) ? 0 : (b >> 5);
  const int layers_per_stage = huge > 0 ? 1 << huge : (a & 0x01) ? 2 : 1;
  const bool split_backward = (a & 0x02) || schedule.split_backward;
  const bool drop_split = (a & 0x04) && (b & 0x01);  // a split schedule on an unsplit model
  Model model = TinyModel(schedule.num_stages * layers_per_stage, split_backward && !drop_split,
                          (a & 0x08) != 0, huge > 0);

  Result<Cluster> cluster = ClusterPreset((a & 0x10) ? "h100-sxm" : "ideal");
  if (!cluster.ok()) fuzz::Die("preset missing: " + cluster.status().message());
  if (a & 0x20) cluster->gpu.memory_bytes = 64 * kMiB;  // small: stages run out of memory

  SimOptions options;
  options.config.microbatch_size = (a & 0x40) ? 3 : 1;  // 3 is interpolated from the size-1 profile
  options.config.layout.data_parallel = 1 + ((b >> 1) & 0x03);
  options.config.recompute = (a & 0x80) != 0
                                 ? ((a & 0x40) != 0 ? Recompute::kSelective : Recompute::kFull)
                                 : Recompute::kOff;
  options.record_timeline = (b & 0x08) != 0;
  options.critical_path = options.record_timeline;  // as the tools run it
  options.config.optimizer_step.time_ns = (b & 0x04) ? 5000 : 0;

  Result<SimResult> result = Simulate(model, *cluster, schedule, options);
  if (!result.ok()) {
    fuzz::CheckCleanError(result.status());
    return 0;
  }
  if (result->iteration_ns < 0 || result->pipeline_ns < 0) fuzz::Die("negative time");
  for (const StageResult& r : result->per_rank) {
    if (r.peak_memory_bytes < 0 || r.busy_ns < 0) fuzz::Die("negative peak or busy time");
    if (result->iterations_simulated == 1 && r.busy_ns > result->iteration_ns)
      fuzz::Die("a rank busier than the iteration is long");
  }
  if (ResultToJson(*result).empty() || ResultToText(*result, *cluster).empty()) {
    fuzz::Die("empty report");
  }
  if (options.record_timeline && TraceJson(*result).empty()) fuzz::Die("empty trace");
  return 0;
}
