#include "profiler/activity_decode.h"

#include <cupti.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace pipecast {
namespace {

// Copies a packed field out (never bind references to packed members).
template <typename T>
T Field(const T& field) {
  T v;
  std::memcpy(&v, &field, sizeof(T));
  return v;
}

std::string Str(const char* s) { return s == nullptr ? std::string() : std::string(s); }

void AddGpu(GpuEvent e, ActivityTrace* out) {
  if (e.start_ns == 0 && e.end_ns == 0) {
    ++out->zero_timestamp_records;
    return;
  }
  out->gpu.push_back(std::move(e));
}

// The fields every GPU-side record (kernel, memcpy, memset) shares.
template <typename Record>
GpuEvent GpuHeader(GpuEvent::Kind kind, const Record& r) {
  GpuEvent e;
  e.kind = kind;
  e.start_ns = Field(r.start);
  e.end_ns = Field(r.end);
  e.device_id = Field(r.deviceId);
  e.stream_id = Field(r.streamId);
  e.correlation_id = Field(r.correlationId);
  return e;
}

// A memcpy or memset: the header and its byte count.
template <typename Record>
GpuEvent WithBytes(GpuEvent::Kind kind, const Record& r) {
  GpuEvent e = GpuHeader(kind, r);
  e.bytes = Field(r.bytes);
  return e;
}

// A runtime, driver or internal launch API call.
void AddApi(const CUpti_Activity* record, ActivityTrace* out) {
  const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
  ApiEvent e;
  e.driver = record->kind != CUPTI_ACTIVITY_KIND_RUNTIME;
  e.cbid = Field(a->cbid);
  e.start_ns = Field(a->start);
  e.end_ns = Field(a->end);
  e.thread_id = Field(a->threadId);
  e.correlation_id = Field(a->correlationId);
  out->api.push_back(e);
}

// An NVTX range's start or end, or an instant marker.
void AddMarker(const CUpti_Activity* record, ActivityTrace* out) {
  const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(record);
  const auto flags = static_cast<uint32_t>(Field(m->flags));
  MarkerEvent e;
  if (flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
    e.phase = MarkerEvent::Phase::kStart;
  } else if (flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
    e.phase = MarkerEvent::Phase::kEnd;
  } else {
    e.phase = MarkerEvent::Phase::kInstant;
  }
  e.timestamp_ns = Field(m->timestamp);
  e.id = Field(m->id);
  if (Field(m->objectKind) == CUPTI_ACTIVITY_OBJECT_THREAD) {
    const CUpti_ActivityObjectKindId object = Field(m->objectId);
    e.thread_id = object.pt.threadId;
  }
  e.name = Str(Field(m->name));
  e.domain = Str(Field(m->domain));
  out->markers.push_back(std::move(e));
}

// A device allocation or release (other memory operations are only counted).
void AddMemory(const CUpti_Activity* record, ActivityTrace* out) {
  const auto* m = reinterpret_cast<const CUpti_ActivityMemory4*>(record);
  const auto op = Field(m->memoryOperationType);
  if (op != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION &&
      op != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) {
    ++out->other_records;
    return;
  }
  MemoryEvent e;
  e.allocation = op == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  e.timestamp_ns = Field(m->timestamp);
  e.device_id = Field(m->deviceId);
  e.correlation_id = Field(m->correlationId);
  e.address = Field(m->address);
  e.bytes = Field(m->bytes);
  e.is_async = Field(m->isAsync) != 0;
  out->memory.push_back(e);
}

// The device's name, compute capability, clock, memory and SMs.
void AddDevice(const CUpti_Activity* record, ActivityTrace* out) {
  const auto* d = reinterpret_cast<const CUpti_ActivityDevice5*>(record);
  DeviceInfo info;
  info.id = Field(d->id);
  info.name = Str(Field(d->name));
  info.compute_major = Field(d->computeCapabilityMajor);
  info.compute_minor = Field(d->computeCapabilityMinor);
  info.core_clock_khz = Field(d->coreClockRate);
  info.memory_bytes = Field(d->globalMemorySize);
  info.multiprocessors = Field(d->numMultiprocessors);
  out->devices.push_back(std::move(info));
}

// CUPTI's own overhead: counted and summed; its data freed.
void AddOverhead(const CUpti_Activity* record, ActivityTrace* out) {
  const auto* o = reinterpret_cast<const CUpti_ActivityOverhead3*>(record);
  const uint64_t start = Field(o->start);
  const uint64_t end = Field(o->end);
  ++out->overhead_records;
  if (end > start) out->overhead_ns += end - start;
  std::free(Field(o->overheadData));
}

}  // namespace

void DecodeActivityRecord(const CUpti_Activity* record, ActivityTrace* out) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      GpuEvent e = GpuHeader(GpuEvent::Kind::kKernel, *k);
      e.name = Str(Field(k->name));
      AddGpu(std::move(e), out);
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      AddGpu(WithBytes(GpuEvent::Kind::kMemcpy,
                       *reinterpret_cast<const CUpti_ActivityMemcpy6*>(record)),
             out);
      return;
    case CUPTI_ACTIVITY_KIND_MEMCPY2:
      AddGpu(WithBytes(GpuEvent::Kind::kMemcpy,
                       *reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(record)),
             out);
      return;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      AddGpu(WithBytes(GpuEvent::Kind::kMemset,
                       *reinterpret_cast<const CUpti_ActivityMemset4*>(record)),
             out);
      return;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API:
      AddApi(record, out);
      return;
    case CUPTI_ACTIVITY_KIND_MARKER:
      AddMarker(record, out);
      return;
    case CUPTI_ACTIVITY_KIND_MEMORY2:
      AddMemory(record, out);
      return;
    case CUPTI_ACTIVITY_KIND_DEVICE:
      AddDevice(record, out);
      return;
    case CUPTI_ACTIVITY_KIND_OVERHEAD:
      AddOverhead(record, out);
      return;
    default:
      ++out->other_records;
      return;
  }
}

void DecodeActivityBuffer(uint8_t* buffer, size_t valid_size, ActivityTrace* out) {
  if (buffer == nullptr || valid_size == 0) return;
  CUpti_Activity* record = nullptr;
  for (;;) {
    const CUptiResult status = cuptiActivityGetNextRecord(buffer, valid_size, &record);
    if (status == CUPTI_SUCCESS) {
      DecodeActivityRecord(record, out);
    } else {
      if (status != CUPTI_ERROR_MAX_LIMIT_REACHED) ++out->invalid_records;
      return;
    }
  }
}

uint8_t* ActivityCollector::RequestBuffer(size_t* size) {
  *size = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (outstanding_.size() >= kMaxOutstandingBuffers) return nullptr;
  }
  auto* buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  if (buffer == nullptr) return nullptr;
  std::memset(buffer, 0, kBufferBytes);
  std::lock_guard<std::mutex> lock(mu_);
  outstanding_.insert(buffer);
  *size = kBufferBytes;
  return buffer;
}

void ActivityCollector::CompleteBuffer(uint8_t* buffer, size_t valid_size) {
  if (buffer == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (outstanding_.erase(buffer) == 0) {
      trace_.errors.push_back(
          "CUPTI completed a buffer the collector did not hand out (or completed it twice); "
          "it was ignored");
      return;
    }
  }
  // Decode outside the lock: buffers from several threads decode in parallel.
  ActivityTrace decoded;
  DecodeActivityBuffer(buffer, valid_size > kBufferBytes ? kBufferBytes : valid_size, &decoded);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(mu_);
  trace_.Append(std::move(decoded));
}

void ActivityCollector::AddDropped(uint64_t records) {
  std::lock_guard<std::mutex> lock(mu_);
  trace_.dropped_records += records;
}

void ActivityCollector::AddError(std::string message) {
  std::lock_guard<std::mutex> lock(mu_);
  trace_.errors.push_back(std::move(message));
}

void ActivityCollector::AddDevice(DeviceInfo device) {
  std::lock_guard<std::mutex> lock(mu_);
  for (DeviceInfo& d : trace_.devices) {
    if (d.id != device.id) continue;
    // Several sources describe one device (CUPTI's DEVICE record, the
    // driver's attributes, the context-created measurement): the first
    // value of each field wins, missing ones are filled in.
    if (d.name.empty()) d.name = device.name;
    if (d.compute_major == 0 && d.compute_minor == 0) {
      d.compute_major = device.compute_major;
      d.compute_minor = device.compute_minor;
    }
    if (d.core_clock_khz == 0) d.core_clock_khz = device.core_clock_khz;
    if (d.memory_bytes == 0) d.memory_bytes = device.memory_bytes;
    if (d.multiprocessors == 0) d.multiprocessors = device.multiprocessors;
    if (d.usable_memory_bytes == 0) d.usable_memory_bytes = device.usable_memory_bytes;
    if (d.context_memory_bytes == 0) d.context_memory_bytes = device.context_memory_bytes;
    return;
  }
  trace_.devices.push_back(std::move(device));
}

ActivityTrace ActivityCollector::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  ActivityTrace out = std::move(trace_);
  trace_ = ActivityTrace();
  return out;
}

size_t ActivityCollector::OutstandingBuffers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return outstanding_.size();
}

}  // namespace pipecast
