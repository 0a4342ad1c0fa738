// Decoding CUPTI activity buffers into plain events (activity.h), and the
// thread-safe buffer collector the injection library registers with
// cuptiActivityRegisterCallbacks. The only files outside profiler/cupti/ that
// see CUPTI types; built only when CMake finds the CUDA toolkit (they need its
// headers and libcupti, not a GPU: cuptiActivityGetNextRecord walks a buffer
// without a driver, docs/cupti.md §7).
//
// Records are read as the CUDA 13.0 structs (CUpti_ActivityKernel10,
// Memcpy6, MemcpyPtoP4, Memset4, Memory4, Marker2, API, Device5, Overhead3);
// only prefix fields are used, which newer versions keep (docs/cupti.md §1).
#ifndef PIPECAST_PROFILER_ACTIVITY_DECODE_H_
#define PIPECAST_PROFILER_ACTIVITY_DECODE_H_

#include <cupti_activity.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>

#include "profiler/activity.h"

namespace pipecast {

// Appends one record to `out`: GPU work with start == end == 0 is counted in
// zero_timestamp_records and dropped; kinds the profiler does not use are
// counted in other_records. OVERHEAD records' overheadData is free()d, as
// CUPTI requires of the client.
void DecodeActivityRecord(const CUpti_Activity* record, ActivityTrace* out);

// Walks a completed buffer with cuptiActivityGetNextRecord and decodes every
// record. A record CUPTI reports as invalid (incomplete) stops the walk and
// counts one invalid_records.
void DecodeActivityBuffer(uint8_t* buffer, size_t valid_size, ActivityTrace* out);

// Owns the activity buffers CUPTI asks for and the trace decoded from them.
// Thread-safe: CUPTI 13 uses per-thread buffers, so requests and completions
// arrive on many threads at once. Never calls CUPTI while holding its mutex
// (docs/cupti.md §2: FlushAll re-enters the completion callback).
class ActivityCollector {
 public:
  // CUPTI recommends 1-10 MiB; the NVIDIA samples use 8 MiB.
  static constexpr size_t kBufferBytes = size_t{8} << 20;
  // Past this many buffers handed out and not yet returned (8 GiB) requests
  // are refused: CUPTI then drops records, which the loss check reports.
  static constexpr size_t kMaxOutstandingBuffers = 1024;

  // A fresh zeroed, 8-byte aligned buffer of kBufferBytes, or nullptr (size
  // 0) past kMaxOutstandingBuffers or when memory runs out.
  uint8_t* RequestBuffer(size_t* size);
  // Decodes `valid_size` bytes of a buffer from RequestBuffer and frees it.
  // A pointer this collector did not hand out (or already took back) is not
  // touched and is recorded in errors.
  void CompleteBuffer(uint8_t* buffer, size_t valid_size);
  void AddDropped(uint64_t records);
  void AddError(std::string message);
  // A device seen again (by id) keeps its fields and gets the missing ones
  // from `device`: CUPTI's DEVICE record, the driver's attributes and the
  // context-created memory figures each describe part of one device.
  void AddDevice(DeviceInfo device);
  // Everything collected so far; the collector starts empty again.
  ActivityTrace Take();
  size_t OutstandingBuffers() const;

 private:
  mutable std::mutex mu_;
  std::unordered_set<uint8_t*> outstanding_;  // guarded by mu_
  ActivityTrace trace_;                       // guarded by mu_
};

}  // namespace pipecast

#endif  // PIPECAST_PROFILER_ACTIVITY_DECODE_H_
