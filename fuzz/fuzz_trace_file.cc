// libFuzzer target: Chrome trace text -> ParseTraceText -> BuildMeasuredRun -> the measured
// timeline, the summary and the profiler's records (measured/). Properties: never a crash,
// hang or leak; an error always has a message and is never Internal; a run that builds has
// one iteration time per common step, each window inside the iteration, compute and exposed
// communication within the window.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "measured/measured_run.h"
#include "measured/pair_check.h"
#include "measured/summary.h"
#include "measured/trace_file.h"
#include "measured/trace_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pipecast;
  using namespace pipecast::measured;
  if (size > 64 * 1024) return -1;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<TraceFile> trace = ParseTraceText(text, "fuzz.json");
  if (!trace.ok()) {
    fuzz::CheckCleanError(trace.status());
    return 0;
  }
  fuzz::CheckCleanError(ActivityFromTrace(*trace).status());
  Result<MeasuredRun> run = BuildMeasuredRun({*trace});
  if (!run.ok()) {
    fuzz::CheckCleanError(run.status());
    return 0;
  }
  if (run->iteration_ns.size() != run->steps.size()) fuzz::Die("an iteration time per step");
  for (size_t i = 0; i < run->steps.size(); ++i) {
    const RankStep& s = run->Step(0, static_cast<int>(i));
    if (s.span_ns() < 0 || s.span_ns() > run->iteration_ns[i])
      fuzz::Die("window outside the iteration");
    if (s.compute_ns > s.span_ns() || s.exposed_comm_ns > s.comm_ns || s.exposed_comm_ns < 0) {
      fuzz::Die("busy time outside the window");
    }
    (void)CheckPair(s);
  }
  const SimResult m = MeasuredTimeline(*run, run->median);
  if (m.ranks != 1) fuzz::Die("one rank per trace");
  (void)MeasuredRunText(*run);
  return 0;
}
