// The cuda backend's busy-work kernel: every block spins on the GPU's
// nanosecond global timer until `ns` have passed, so an op occupies its SMs
// for its profiled duration.
#include <cuda_runtime.h>

namespace {

__global__ void SpinKernel(unsigned long long ns) {
  unsigned long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

}  // namespace

// Declared in cuda_backend.cc.
cudaError_t PipecastLaunchSpin(cudaStream_t stream, unsigned long long ns, int blocks) {
  SpinKernel<<<blocks, 32, 0, stream>>>(ns);
  return cudaGetLastError();
}
