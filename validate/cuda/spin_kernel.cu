// The cuda backend's kernels: busy-work that spins on the GPU's nanosecond
// global timer until `ns` have passed (so an op occupies its SMs for its
// profiled duration), and the check that a received message holds the
// bytes its sender wrote.
#include <cuda_runtime.h>

namespace {

__global__ void SpinKernel(unsigned long long ns) {
  unsigned long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// Adds to *mismatches the number of bytes of p[0, n) that differ from `value`.
__global__ void CountMismatches(const unsigned char* p, size_t n, unsigned char value,
                                unsigned long long* mismatches) {
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    bad += p[i] != value;
  }
  if (bad != 0) atomicAdd(mismatches, bad);
}

}  // namespace

// Declared in cuda_backend.cc.
cudaError_t PipecastLaunchSpin(cudaStream_t stream, unsigned long long ns, int blocks) {
  SpinKernel<<<blocks, 32, 0, stream>>>(ns);
  return cudaGetLastError();
}

cudaError_t PipecastLaunchCheck(cudaStream_t stream, const void* data, size_t bytes,
                                unsigned char value, unsigned long long* mismatches, int blocks) {
  CountMismatches<<<blocks, 256, 0, stream>>>(static_cast<const unsigned char*>(data), bytes, value,
                                              mismatches);
  return cudaGetLastError();
}
