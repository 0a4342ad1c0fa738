// Test-only: builds small ActivityTraces by hand, one event per line.
#ifndef PIPECAST_PROFILER_ACTIVITY_TEST_UTIL_H_
#define PIPECAST_PROFILER_ACTIVITY_TEST_UTIL_H_

#include <string>

#include "profiler/activity.h"

namespace pipecast {

// A tiny trace builder: ranges, launches and allocations in a few lines.
class TraceBuilder {
 public:
  // An NVTX push/pop range on `thread`.
  TraceBuilder& Range(const std::string& name, uint32_t thread, uint64_t start, uint64_t end) {
    const uint32_t id = ++next_marker_;
    t_.markers.push_back({MarkerEvent::Phase::kStart, start, id, thread, name, ""});
    t_.markers.push_back({MarkerEvent::Phase::kEnd, end, id, thread, "", ""});
    return *this;
  }
  // A kernel on (device, stream) over [gpu_start, gpu_end], launched from
  // `thread` at CPU time `launch` (no API record when thread == 0).
  TraceBuilder& Kernel(uint32_t thread, uint64_t launch, uint64_t gpu_start, uint64_t gpu_end,
                       uint32_t device = 0, uint32_t stream = 7) {
    const uint32_t corr = ++next_corr_;
    if (thread != 0) t_.api.push_back({false, 211, launch, launch + 5, thread, corr});
    t_.gpu.push_back({GpuEvent::Kind::kKernel, gpu_start, gpu_end, device, stream, corr, 0, "k"});
    return *this;
  }
  TraceBuilder& Malloc(uint32_t thread, uint64_t at, uint64_t address, uint64_t bytes) {
    const uint32_t corr = ++next_corr_;
    t_.api.push_back({false, 20, at, at + 1, thread, corr});
    t_.memory.push_back({true, at, 0, corr, address, bytes, false});
    return *this;
  }
  TraceBuilder& Free(uint32_t thread, uint64_t at, uint64_t address, uint64_t bytes) {
    const uint32_t corr = ++next_corr_;
    t_.api.push_back({false, 22, at, at + 1, thread, corr});
    t_.memory.push_back({false, at, 0, corr, address, bytes, false});
    return *this;
  }
  ActivityTrace& trace() { return t_; }

 private:
  ActivityTrace t_;
  uint32_t next_marker_ = 0;
  uint32_t next_corr_ = 0;
};

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_ACTIVITY_TEST_UTIL_H_
