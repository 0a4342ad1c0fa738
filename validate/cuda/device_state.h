// The cuda backend's devices (validate/cuda/): the driver API looked up at
// run time, each stage's context and streams (a green context with a share of
// the SMs when stages share a GPU), and the device allocator that backs a
// stage's MemoryPool, so weights, optimizer state, activations, workspace and
// message buffers all live in device memory and the pool's high-water mark is
// the stage's peak device memory.
#ifndef PIPECAST_VALIDATE_CUDA_DEVICE_STATE_H_
#define PIPECAST_VALIDATE_CUDA_DEVICE_STATE_H_

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "validate/internal/p2p_routes.h"
#include "validate/memory_pool.h"

namespace pipecast::validate::cuda {

// The driver API, looked up through the runtime (cudaGetDriverEntryPoint-
// ByVersion) rather than linked: the validator must start on machines
// without an NVIDIA driver, where libcuda.so does not exist.
struct Driver {
  decltype(&::cuInit) Init = nullptr;
  decltype(&::cuDeviceGet) DeviceGet = nullptr;
  decltype(&::cuCtxGetCurrent) CtxGetCurrent = nullptr;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent = nullptr;
  decltype(&::cuGetErrorString) GetErrorString = nullptr;
  decltype(&::cuDeviceGetDevResource) DeviceGetDevResource = nullptr;
  decltype(&::cuDevSmResourceSplitByCount) DevSmResourceSplitByCount = nullptr;
  decltype(&::cuDevResourceGenerateDesc) DevResourceGenerateDesc = nullptr;
  decltype(&::cuGreenCtxCreate) GreenCtxCreate = nullptr;
  decltype(&::cuCtxFromGreenCtx) CtxFromGreenCtx = nullptr;
  decltype(&::cuGreenCtxStreamCreate) GreenCtxStreamCreate = nullptr;
};
// nullptr when the driver lacks an entry point (older than CUDA 12.4).
const Driver* GetDriver();

std::string CudaText(cudaError_t e);
std::string CuText(CUresult r);

// One rank's place on its GPU.
struct StageDevice {
  int gpu = 0;
  CUcontext ctx = nullptr;  // green context (as a CUcontext) or the primary one
  bool green = false;
  cudaStream_t stream = nullptr;       // compute
  cudaStream_t copy_stream = nullptr;  // device-to-device and host-staged copies it sends
  int sms = 0;                         // SMs the stage's kernels run on
  int total_sms = 0;                   // of the GPU
  std::string gpu_name;
};

// Makes the current thread run on `d`'s context. Internal on failure.
Status MakeCurrent(const StageDevice& d);

// Creates the devices of `local_ranks` (placement from PlaceRanks): one
// context and stream per rank; the ranks sharing a GPU each get a green
// context holding an equal share of its SMs (rounded down to a multiple of
// 8, Hopper's partition granularity). `notes` gets one line per GPU.
Result<std::vector<StageDevice>> MakeStageDevices(const std::vector<RankPlacement>& placement,
                                                  const std::vector<int>& local_ranks,
                                                  std::vector<std::string>* notes);

// cudaMalloc on a stage's context, every byte set once (cudaMemset) so the
// device really backs it. Thread-safe: it makes its context current for the
// call and restores the caller's.
class DeviceAllocator final : public BlockAllocator {
 public:
  explicit DeviceAllocator(const StageDevice* device) : device_(device) {}
  std::byte* Allocate(Bytes bytes) override;
  void Free(std::byte* data, Bytes bytes) override;
  std::string Name() const override;

 private:
  const StageDevice* device_;
};

}  // namespace pipecast::validate::cuda

#endif  // PIPECAST_VALIDATE_CUDA_DEVICE_STATE_H_
