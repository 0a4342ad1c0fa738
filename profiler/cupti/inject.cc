// libpipecast_inject.so: the CUDA injection library behind `profiler cupti`.
//
// The driver loads it during cuInit when CUDA_INJECTION64_PATH names it and
// calls InitializeInjection (docs/cupti.md §6). It registers thread-safe
// activity buffers, enables the kinds the profiler needs (kernels, copies,
// sets, allocations, NVTX markers, runtime and driver API records, device
// metadata, overhead), and at process exit synchronises, force-flushes and
// writes everything it decoded to
//   $PIPECAST_CUPTI_OUT/pipecast-activity-<pid>.jsonl
// (activity_file.h), atomically. Without that variable it writes nothing.
// Failures never abort the program: they are recorded in the file's
// `errors` for `profiler cupti` to report.
//
// Environment: PIPECAST_CUPTI_OUT (folder, required), and
// PIPECAST_CUPTI_DEVICE_BUFFER_BYTES (CUPTI's device timestamp buffer).
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "profiler/activity_decode.h"
#include "profiler/activity_file.h"

namespace {

using pipecast::ActivityCollector;

// Leaked on purpose: buffers complete until the very end of the process.
ActivityCollector* g_collector = nullptr;
std::mutex g_init_mu;
bool g_initialized = false;
std::string g_out_dir;

// The driver functions used here, from the libcuda already in the process
// (it loaded this library). Looked up rather than linked, so the library
// also loads, and reports, where no driver exists.
struct Driver {
  CUresult (*ctx_synchronize)() = nullptr;
  CUresult (*device_get_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_name)(char*, int, CUdevice) = nullptr;
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*device_total_mem)(size_t*, CUdevice) = nullptr;
  // For the memory a new context takes (optional: without them the
  // figures are simply not recorded).
  CUresult (*ctx_push_current)(CUcontext) = nullptr;
  CUresult (*ctx_pop_current)(CUcontext*) = nullptr;
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
  CUresult (*mem_get_info)(size_t*, size_t*) = nullptr;
  bool ok() const {
    return ctx_synchronize && device_get_count && device_get && device_get_name &&
           device_get_attribute && device_total_mem;
  }
};
Driver g_driver;

template <typename Fn>
void Bind(void* lib, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
}

void BindDriver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return;
  Bind(lib, "cuCtxSynchronize", &g_driver.ctx_synchronize);
  Bind(lib, "cuDeviceGetCount", &g_driver.device_get_count);
  Bind(lib, "cuDeviceGet", &g_driver.device_get);
  Bind(lib, "cuDeviceGetName", &g_driver.device_get_name);
  Bind(lib, "cuDeviceGetAttribute", &g_driver.device_get_attribute);
  Bind(lib, "cuDeviceTotalMem_v2", &g_driver.device_total_mem);
  Bind(lib, "cuCtxPushCurrent_v2", &g_driver.ctx_push_current);
  Bind(lib, "cuCtxPopCurrent_v2", &g_driver.ctx_pop_current);
  Bind(lib, "cuCtxGetDevice", &g_driver.ctx_get_device);
  Bind(lib, "cuMemGetInfo_v2", &g_driver.mem_get_info);
}

// The runtime reserve's first part, measured: right after a context is
// created nothing of the program is allocated yet, so cuMemGetInfo's
// total - free is what the context itself holds (the driver's reservation,
// module images loaded so far, the device heap). cuBLAS workspaces and NCCL
// buffers come later, as the program's own allocations (docs/profiler.md).
void RecordContextMemory(CUcontext ctx) {
  const Driver& d = g_driver;
  if (!d.ctx_push_current || !d.ctx_pop_current || !d.ctx_get_device || !d.mem_get_info) return;
  if (d.ctx_push_current(ctx) != CUDA_SUCCESS) return;
  size_t free_bytes = 0, total_bytes = 0;
  CUdevice dev = 0;
  const bool ok = d.mem_get_info(&free_bytes, &total_bytes) == CUDA_SUCCESS &&
                  d.ctx_get_device(&dev) == CUDA_SUCCESS;
  CUcontext popped = nullptr;
  d.ctx_pop_current(&popped);
  if (!ok || total_bytes < free_bytes) return;
  pipecast::DeviceInfo info;
  info.id = static_cast<uint32_t>(dev);  // CUdevice is the ordinal
  info.usable_memory_bytes = total_bytes;
  info.context_memory_bytes = total_bytes - free_bytes;
  g_collector->AddDevice(info);
}

void SynchronizeContext() {
  if (g_driver.ok()) g_driver.ctx_synchronize();
}

void Check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  g_collector->AddError(std::string(what) + " failed: " + (text != nullptr ? text : "unknown"));
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;  // as many as fit
  *buffer = g_collector->RequestBuffer(size);
}

void CUPTIAPI BufferCompleted(CUcontext /*ctx*/, uint32_t /*stream*/, uint8_t* buffer,
                              size_t /*size*/, size_t valid_size) {
  g_collector->CompleteBuffer(buffer, valid_size);
}

void FlushAndCountDropped() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS) {
    g_collector->AddDropped(dropped);
  }
}

void CUPTIAPI OnCallback(void* /*user*/, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                         const void* data) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API &&
      cbid == CUPTI_RUNTIME_TRACE_CBID_cudaDeviceReset_v3020) {
    const auto* cb = static_cast<const CUpti_CallbackData*>(data);
    if (cb->callbackSite == CUPTI_API_ENTER) {
      SynchronizeContext();
      FlushAndCountDropped();  // a reset loses what is not flushed
    }
  } else if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
    RecordContextMemory(static_cast<const CUpti_ResourceData*>(data)->context);
  } else if (domain == CUPTI_CB_DOMAIN_STATE && cbid == CUPTI_CBID_STATE_FATAL_ERROR) {
    const auto* state = static_cast<const CUpti_StateData*>(data);
    const char* message = state->notification.message;
    g_collector->AddError(std::string("CUPTI reported a fatal error and stopped profiling: ") +
                          (message != nullptr ? message : "no message"));
  }
}

void RecordDevices() {
  if (!g_driver.ok()) {
    g_collector->AddError("the CUDA driver (libcuda.so.1) is not loaded in this process");
    return;
  }
  int count = 0;
  if (g_driver.device_get_count(&count) != CUDA_SUCCESS) return;
  for (int i = 0; i < count; ++i) {
    CUdevice dev;
    if (g_driver.device_get(&dev, i) != CUDA_SUCCESS) continue;
    pipecast::DeviceInfo info;
    info.id = static_cast<uint32_t>(i);
    char name[256] = {0};
    if (g_driver.device_get_name(name, sizeof(name) - 1, dev) == CUDA_SUCCESS) info.name = name;
    int v = 0;
    if (g_driver.device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev) == CUDA_SUCCESS) {
      info.core_clock_khz = static_cast<uint64_t>(v);
    }
    if (g_driver.device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) ==
        CUDA_SUCCESS) {
      info.compute_major = static_cast<uint32_t>(v);
    }
    if (g_driver.device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) ==
        CUDA_SUCCESS) {
      info.compute_minor = static_cast<uint32_t>(v);
    }
    if (g_driver.device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) ==
        CUDA_SUCCESS) {
      info.multiprocessors = static_cast<uint32_t>(v);
    }
    size_t bytes = 0;
    if (g_driver.device_total_mem(&bytes, dev) == CUDA_SUCCESS) info.memory_bytes = bytes;
    g_collector->AddDevice(info);
  }
}

void WriteRecords() {
  pipecast::ActivityTrace trace = g_collector->Take();
  trace.process_id = static_cast<uint32_t>(getpid());
  uint32_t version = 0;
  if (cuptiGetVersion(&version) == CUPTI_SUCCESS) trace.cupti_version = version;
  const std::string text = pipecast::ActivityTraceToText(trace);
  const std::string path = g_out_dir + "/pipecast-activity-" + std::to_string(getpid()) + ".jsonl";
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    std::fprintf(stderr, "pipecast inject: cannot write %s\n", tmp.c_str());
    return;
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "pipecast inject: writing %s failed\n", path.c_str());
    std::remove(tmp.c_str());
  }
}

void AtExit() {
  SynchronizeContext();  // best effort: GPU records complete before the flush
  FlushAndCountDropped();
  RecordDevices();
  WriteRecords();
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_initialized) return 1;
  g_initialized = true;
  const char* out = std::getenv("PIPECAST_CUPTI_OUT");
  if (out == nullptr || *out == '\0') return 1;  // not started by `profiler cupti`
  g_out_dir = out;
  g_collector = new ActivityCollector();
  BindDriver();

  uint32_t version = 0;
  if (cuptiGetVersion(&version) == CUPTI_SUCCESS && version / 10000 != CUPTI_API_VERSION / 10000) {
    g_collector->AddError("libcupti API version " + std::to_string(version) +
                          " differs in major version from the headers pipecast was built with (" +
                          std::to_string(CUPTI_API_VERSION) + ")");
  }
  Check(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM), "cuptiSetThreadIdType");
  if (const char* bytes = std::getenv("PIPECAST_CUPTI_DEVICE_BUFFER_BYTES")) {
    size_t value = std::strtoull(bytes, nullptr, 10);
    size_t size = sizeof(value);
    if (value > 0) {
      Check(cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &size, &value),
            "setting CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE");
    }
  }
  Check(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted),
        "cuptiActivityRegisterCallbacks");
  CUpti_SubscriberHandle subscriber;
  const CUptiResult sub = cuptiSubscribe(&subscriber, OnCallback, nullptr);
  if (sub == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    g_collector->AddError(
        "another CUPTI client (Nsight Systems, torch.profiler, a debugger) is "
        "attached: run without it");
  } else {
    Check(sub, "cuptiSubscribe");
    if (sub == CUPTI_SUCCESS) {
      Check(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                                CUPTI_RUNTIME_TRACE_CBID_cudaDeviceReset_v3020),
            "enabling the cudaDeviceReset callback");
      Check(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_STATE, CUPTI_CBID_STATE_FATAL_ERROR),
            "enabling the fatal-error callback");
      Check(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                CUPTI_CBID_RESOURCE_CONTEXT_CREATED),
            "enabling the context-created callback");
    }
  }
  const struct {
    CUpti_ActivityKind kind;
    const char* name;
  } kinds[] = {
      {CUPTI_ACTIVITY_KIND_DEVICE, "DEVICE"},
      {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"},
      {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"},
      {CUPTI_ACTIVITY_KIND_MEMCPY2, "MEMCPY2"},
      {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET"},
      {CUPTI_ACTIVITY_KIND_MEMORY2, "MEMORY2"},
      {CUPTI_ACTIVITY_KIND_MARKER, "MARKER"},
      {CUPTI_ACTIVITY_KIND_RUNTIME, "RUNTIME"},
      {CUPTI_ACTIVITY_KIND_DRIVER, "DRIVER"},
      {CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API, "INTERNAL_LAUNCH_API"},
      {CUPTI_ACTIVITY_KIND_OVERHEAD, "OVERHEAD"},
  };
  for (const auto& k : kinds) {
    Check(cuptiActivityEnable(k.kind), (std::string("enabling activity kind ") + k.name).c_str());
  }
  std::atexit(AtExit);
  return 1;
}
