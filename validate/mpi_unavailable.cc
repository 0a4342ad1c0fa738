// MakeMpiBackend for a build where CMake found no MPI (backend.h).
#include "validate/backend.h"

namespace pipecast::validate {

Result<std::unique_ptr<Backend>> MakeMpiBackend(int*, char***) {
  return Status::Unavailable(
      "this build has no MPI: install OpenMPI (libopenmpi-dev, scripts/setup.sh) and reconfigure");
}

}  // namespace pipecast::validate
