// MakeCudaBackend for a build without the CUDA toolkit (backend.h).
#include "validate/backend.h"

namespace pipecast::validate {

Result<std::unique_ptr<Backend>> MakeCudaBackend(int) {
  return Status::Unavailable(
      "this build has no CUDA: install the CUDA toolkit and reconfigure with -DPIPECAST_CUDA=ON "
      "(docs/validator.md)");
}

}  // namespace pipecast::validate
