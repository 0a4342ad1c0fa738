// Runs a program under pipecast's CUDA injection library and collects the
// records files it leaves (one per process that initialised CUDA). Shared by
// `profiler cupti` (the user's command) and `profiler builtin` (pipecast's
// block runner), so both measure through the same path.
//
// Not thread-safe (forks; the child's environment is set after fork).
#ifndef PIPECAST_PROFILER_CUPTI_INJECTION_RUNNER_H_
#define PIPECAST_PROFILER_CUPTI_INJECTION_RUNNER_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "profiler/activity.h"

namespace pipecast {

// OK when libcuda.so.1 loads, cuInit succeeds and at least one device
// exists; Unavailable naming what is missing otherwise. Loads the driver
// with dlopen, so the profiler itself runs (and says so) on machines
// without one.
[[nodiscard]] Status CheckCudaDevice();

struct InjectionRun {
  std::vector<std::string> argv;  // program and arguments (PATH is searched)
  int device_buffer_mib = 0;      // 0: CUPTI's default
  std::string records_dir;        // empty: a temporary folder, removed afterwards
};

// Runs argv with CUDA_INJECTION64_PATH (libpipecast_inject.so, or
// $PIPECAST_INJECT_LIBRARY) and NVTX_INJECTION64_PATH (libcupti, or
// $PIPECAST_CUPTI_LIBRARY) set; the child's stdout goes to stderr so a
// model printed to stdout stays clean. Returns the parsed records files.
// FailedPrecondition when the program cannot start or exits non-zero
// (naming the status), NotFound when the injection library is missing.
[[nodiscard]] Result<std::vector<ActivityTrace>> RunInjected(const InjectionRun& run);

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_CUPTI_INJECTION_RUNNER_H_
