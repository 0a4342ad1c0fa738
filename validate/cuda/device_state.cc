#include "validate/cuda/device_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace pipecast::validate::cuda {
namespace {

template <typename F>
bool Load(const char* name, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, CUDA_VERSION, cudaEnableDefault, &q) !=
          cudaSuccess ||
      q != cudaDriverEntryPointSuccess || p == nullptr) {
    return false;
  }
  *fn = reinterpret_cast<F>(p);
  return true;
}

// Green contexts need a partition of at least this many SMs (Hopper's
// minimum; the driver rounds to its own granularity).
constexpr unsigned kMinSmsPerPartition = 8;

// Restores the thread's current context when it leaves scope.
class ContextGuard {
 public:
  ContextGuard() { GetDriver()->CtxGetCurrent(&saved_); }
  ~ContextGuard() { GetDriver()->CtxSetCurrent(saved_); }

 private:
  CUcontext saved_ = nullptr;
};

}  // namespace

const Driver* GetDriver() {
  static const Driver* const kDriver = [] {
    auto* d = new Driver;
    const bool ok = Load("cuInit", &d->Init) && Load("cuDeviceGet", &d->DeviceGet) &&
                    Load("cuCtxGetCurrent", &d->CtxGetCurrent) &&
                    Load("cuCtxSetCurrent", &d->CtxSetCurrent) &&
                    Load("cuGetErrorString", &d->GetErrorString) &&
                    Load("cuDeviceGetDevResource", &d->DeviceGetDevResource) &&
                    Load("cuDevSmResourceSplitByCount", &d->DevSmResourceSplitByCount) &&
                    Load("cuDevResourceGenerateDesc", &d->DevResourceGenerateDesc) &&
                    Load("cuGreenCtxCreate", &d->GreenCtxCreate) &&
                    Load("cuCtxFromGreenCtx", &d->CtxFromGreenCtx) &&
                    Load("cuGreenCtxStreamCreate", &d->GreenCtxStreamCreate);
    return ok ? d : nullptr;
  }();
  return kDriver;
}

std::string CudaText(cudaError_t e) {
  return fmt::format("{} ({})", cudaGetErrorString(e), static_cast<int>(e));
}

std::string CuText(CUresult r) {
  const char* s = nullptr;
  if (GetDriver() != nullptr) GetDriver()->GetErrorString(r, &s);
  return fmt::format("{} ({})", s ? s : "unknown", static_cast<int>(r));
}

Status MakeCurrent(const StageDevice& d) {
  if (CUresult r = GetDriver()->CtxSetCurrent(d.ctx); r != CUDA_SUCCESS) {
    return Status::Internal(fmt::format("cuCtxSetCurrent (GPU {}): {}", d.gpu, CuText(r)));
  }
  return Status::Ok();
}

namespace {

// Ranks that share GPU `g` each get a green context of an equal share of its SMs (in
// multiples of kMinSmsPerPartition) with two streams of its own.
Status GreenContexts(int g, CUdevice dev, const cudaDeviceProp& prop, const std::vector<int>& mine,
                     std::vector<StageDevice>* out, std::vector<std::string>* notes) {
  CUdevResource sm{};
  if (CUresult r = GetDriver()->DeviceGetDevResource(dev, &sm, CU_DEV_RESOURCE_TYPE_SM);
      r != CUDA_SUCCESS) {
    return Status::Unavailable("green contexts unavailable (cuDeviceGetDevResource): " + CuText(r));
  }
  unsigned per = sm.sm.smCount / static_cast<unsigned>(mine.size());
  per = std::max(kMinSmsPerPartition, per / kMinSmsPerPartition * kMinSmsPerPartition);
  std::vector<CUdevResource> groups(mine.size());
  unsigned n = static_cast<unsigned>(mine.size());
  CUdevResource rest{};
  if (CUresult r = GetDriver()->DevSmResourceSplitByCount(groups.data(), &n, &sm, &rest, 0, per);
      r != CUDA_SUCCESS || n < mine.size()) {
    return Status::Unavailable(
        fmt::format("cannot split GPU {}'s {} SMs into {} partitions of {}: {}", g, sm.sm.smCount,
                    mine.size(), per, CuText(r)));
  }
  std::string ranks_text;
  for (size_t i = 0; i < mine.size(); ++i) {
    StageDevice& d = (*out)[mine[i]];
    d.gpu = g;
    d.gpu_name = prop.name;
    d.green = true;
    CUdevResourceDesc desc;
    GetDriver()->DevResourceGenerateDesc(&desc, &groups[i], 1);
    CUgreenCtx green;
    if (CUresult r = GetDriver()->GreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
        r != CUDA_SUCCESS) {
      return Status::Unavailable("cuGreenCtxCreate: " + CuText(r));
    }
    GetDriver()->CtxFromGreenCtx(&d.ctx, green);
    CUstream s;
    if (CUresult r = GetDriver()->GreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, 0);
        r != CUDA_SUCCESS) {
      return Status::Unavailable("cuGreenCtxStreamCreate: " + CuText(r));
    }
    d.stream = reinterpret_cast<cudaStream_t>(s);
    CUstream c;
    if (CUresult r = GetDriver()->GreenCtxStreamCreate(&c, green, CU_STREAM_NON_BLOCKING, 0);
        r != CUDA_SUCCESS) {
      return Status::Unavailable("cuGreenCtxStreamCreate: " + CuText(r));
    }
    d.copy_stream = reinterpret_cast<cudaStream_t>(c);
    d.sms = static_cast<int>(groups[i].sm.smCount);
    d.total_sms = static_cast<int>(sm.sm.smCount);
    ranks_text += fmt::format("{}{}", i ? ", " : "", mine[i]);
  }
  notes->push_back(
      fmt::format("ranks {} share GPU {} ({}), each on its own green context of {} of its {} SMs",
                  ranks_text, g, prop.name, groups[0].sm.smCount, sm.sm.smCount));
  return Status::Ok();
}

}  // namespace

Result<std::vector<StageDevice>> MakeStageDevices(const std::vector<RankPlacement>& placement,
                                                  const std::vector<int>& local_ranks,
                                                  std::vector<std::string>* notes) {
  if (CUresult r = GetDriver()->Init(0); r != CUDA_SUCCESS) {
    return Status::Unavailable("cuInit: " + CuText(r));
  }
  std::vector<StageDevice> out(placement.size());
  std::map<int, std::vector<int>> ranks_of_gpu;
  for (int r : local_ranks) ranks_of_gpu[placement[r].gpu].push_back(r);
  for (const auto& [g, mine] : ranks_of_gpu) {
    if (cudaError_t e = cudaSetDevice(g); e != cudaSuccess) {
      return Status::Unavailable(fmt::format("cudaSetDevice({}): {}", g, CudaText(e)));
    }
    cudaFree(nullptr);  // creates the primary context
    CUdevice dev;
    GetDriver()->DeviceGet(&dev, g);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, g);
    auto make_streams = [&](StageDevice& d) -> Status {
      PIPECAST_RETURN_IF_ERROR(MakeCurrent(d));
      for (cudaStream_t* s : {&d.stream, &d.copy_stream}) {
        if (cudaError_t e = cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); e != cudaSuccess) {
          return Status::Unavailable("cudaStreamCreate: " + CudaText(e));
        }
      }
      return Status::Ok();
    };
    if (mine.size() == 1) {
      StageDevice& d = out[mine[0]];
      d.gpu = g;
      d.gpu_name = prop.name;
      GetDriver()->CtxGetCurrent(&d.ctx);
      d.sms = d.total_sms = prop.multiProcessorCount;
      PIPECAST_RETURN_IF_ERROR(make_streams(d));
      notes->push_back(
          fmt::format("rank {} on GPU {} ({}, all {} SMs)", mine[0], g, prop.name, d.sms));
      continue;
    }
    PIPECAST_RETURN_IF_ERROR(GreenContexts(g, dev, prop, mine, &out, notes));
  }
  return out;
}

std::byte* DeviceAllocator::Allocate(Bytes bytes) {
  ContextGuard guard;
  if (!MakeCurrent(*device_).ok()) return nullptr;
  void* p = nullptr;
  if (cudaMalloc(&p, static_cast<size_t>(bytes)) != cudaSuccess) {
    cudaGetLastError();  // clears the sticky-free allocation error
    return nullptr;
  }
  if (cudaMemset(p, 0, static_cast<size_t>(bytes)) != cudaSuccess) {
    cudaFree(p);
    return nullptr;
  }
  return static_cast<std::byte*>(p);
}

void DeviceAllocator::Free(std::byte* data, Bytes) {
  ContextGuard guard;
  if (MakeCurrent(*device_).ok()) cudaFree(data);
}

std::string DeviceAllocator::Name() const {
  return fmt::format("the device allocator (cudaMalloc on GPU {})", device_->gpu);
}

}  // namespace pipecast::validate::cuda
