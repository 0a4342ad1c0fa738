// Activity events: CUPTI activity records decoded into plain C++ values, with
// no CUPTI type in sight, so attribution and aggregation (attribution.h,
// aggregate.h) build and are tested on machines without CUDA.
//
// One ActivityTrace holds what one profiled process produced: GPU work
// (kernels, copies, sets), the runtime/driver API calls that launched it, NVTX
// range markers, allocation records, and the loss counters (records CUPTI
// dropped, GPU records without timestamps). The decoder that fills it from
// CUPTI buffers is activity_decode.h (CUDA builds only); the records file the
// injection library writes and `profiler cupti` reads is activity_file.h.
//
// Units: timestamps in ns on CUPTI's normalized CPU clock (CLOCK_REALTIME on
// Linux: docs/cupti.md §4); sizes in bytes. Thread ids are gettid() values
// (the injection library sets CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM).
// Plain value types; not synchronised.
#ifndef PIPECAST_PROFILER_ACTIVITY_H_
#define PIPECAST_PROFILER_ACTIVITY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pipecast {

// A kernel, memcpy or memset: work that ran on a GPU.
struct GpuEvent {
  enum class Kind { kKernel, kMemcpy, kMemset };
  Kind kind = Kind::kKernel;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t device_id = 0;
  uint32_t stream_id = 0;
  uint32_t correlation_id = 0;  // joins to the ApiEvent that launched it
  uint64_t bytes = 0;           // memcpy/memset only
  std::string name;             // kernel name (mangled), empty otherwise
};

// A runtime or driver API call on a CPU thread.
struct ApiEvent {
  bool driver = false;  // false: runtime API
  uint32_t cbid = 0;    // CUPTI callback id of the function
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t thread_id = 0;
  uint32_t correlation_id = 0;
};

// One end of an NVTX push/pop or start/end range. START carries the name;
// END has an empty name and the same id.
struct MarkerEvent {
  enum class Phase { kStart, kEnd, kInstant };
  Phase phase = Phase::kStart;
  uint64_t timestamp_ns = 0;
  uint32_t id = 0;
  uint32_t thread_id = 0;
  std::string name;
  std::string domain;  // empty for the default domain
};

// A device allocation or release (CUPTI MEMORY2): a point in host time.
struct MemoryEvent {
  bool allocation = true;  // false: release
  uint64_t timestamp_ns = 0;
  uint32_t device_id = 0;
  uint32_t correlation_id = 0;
  uint64_t address = 0;
  uint64_t bytes = 0;
  bool is_async = false;  // cudaMallocAsync / cudaFreeAsync
};

// A GPU as CUPTI's DEVICE record (or the driver) describes it.
struct DeviceInfo {
  uint32_t id = 0;
  std::string name;
  uint32_t compute_major = 0;
  uint32_t compute_minor = 0;
  uint64_t core_clock_khz = 0;  // 0 when unknown
  uint64_t memory_bytes = 0;
  uint32_t multiprocessors = 0;
  // cuMemGetInfo right after the CUDA context was created on this device
  // (the injection library's context-created callback): `total` is what
  // applications can use, total - free what the context itself took. 0 when
  // not measured (no context created, or records from an older pipecast).
  uint64_t usable_memory_bytes = 0;
  uint64_t context_memory_bytes = 0;
};

struct ActivityTrace {
  uint32_t process_id = 0;
  uint32_t cupti_version = 0;  // cuptiGetVersion() of the loaded libcupti
  std::vector<GpuEvent> gpu;
  std::vector<ApiEvent> api;
  std::vector<MarkerEvent> markers;
  std::vector<MemoryEvent> memory;
  std::vector<DeviceInfo> devices;

  // Loss counters. dropped_records: cuptiActivityGetNumDroppedRecords summed
  // over flushes (host buffers ran out). zero_timestamp_records: kernel,
  // memcpy and memset records with start == end == 0 (CUPTI's device
  // timestamp buffers ran out); they are counted here and not kept in `gpu`.
  // invalid_records: the buffer walk stopped early on an incomplete record.
  uint64_t dropped_records = 0;
  uint64_t zero_timestamp_records = 0;
  uint64_t invalid_records = 0;
  uint64_t overhead_records = 0;  // CUPTI/driver overhead intervals seen
  uint64_t overhead_ns = 0;       // and their total length
  uint64_t other_records = 0;     // kinds the profiler does not use

  // Problems the collector met (a CUPTI call that failed, a version
  // mismatch), for the report; empty when all went well.
  std::vector<std::string> errors;

  // Appends everything in `other` (events, counters, errors).
  void Append(ActivityTrace other);
};

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_ACTIVITY_H_
