// NCCL for the cuda backend, opened at run time (dlopen "libnccl.so.2", then
// the library CMake found at build time) rather than linked: the validator
// binary must start, and run its cpu and mpi backends, on machines without
// NCCL or a GPU. Only nccl.h is needed to build. Without NCCL the cuda
// backend stages messages between distinct GPUs through host memory (one
// process) or refuses (several processes), and its report says which.
#ifndef PIPECAST_VALIDATE_CUDA_NCCL_API_H_
#define PIPECAST_VALIDATE_CUDA_NCCL_API_H_

#include <cuda_runtime.h>

#if PIPECAST_HAVE_NCCL_H
#include <nccl.h>
#else
// Built without nccl.h (CMake found none): the few types the backend names;
// LoadNccl then always says Unavailable.
typedef struct ncclComm* ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef enum { ncclSuccess = 0 } ncclResult_t;
typedef enum { ncclInt8 = 0, ncclFloat = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
#endif

#include <string>

#include "base/status.h"

namespace pipecast::validate::cuda {

// The NCCL 2.x entry points the backend uses, with nccl.h's signatures.
struct Nccl {
  ncclResult_t (*GetVersion)(int*) = nullptr;
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  ncclResult_t (*GroupStart)() = nullptr;
  ncclResult_t (*GroupEnd)() = nullptr;
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t) = nullptr;
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t) = nullptr;
  int version = 0;      // e.g. 22807
  std::string library;  // the path or name it was opened as

  std::string Text(ncclResult_t r) const;
};

// The loaded library, or Unavailable saying why not (not found, a missing
// symbol). Loads once; thread-safe.
Result<const Nccl*> LoadNccl();

}  // namespace pipecast::validate::cuda

#endif  // PIPECAST_VALIDATE_CUDA_NCCL_API_H_
