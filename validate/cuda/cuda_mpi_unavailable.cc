// The cuda backend under mpirun in a build without MPI.
#include <cstdlib>
#include <string>

#include "validate/cuda/cuda_backend_internal.h"

namespace pipecast::validate::cuda {

bool StartedByMpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    const char* s = std::getenv(v);
    if (s != nullptr && std::atoi(s) > 1) return true;
  }
  return false;
}

Result<std::unique_ptr<Backend>> MakeCudaMpiBackend(int) {
  return Status::Unavailable(
      "this build has no MPI, so the cuda backend runs as one process only: run it without "
      "mpirun (its stages are then threads, one GPU each or sharing GPUs)");
}

}  // namespace pipecast::validate::cuda
