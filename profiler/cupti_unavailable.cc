// `profiler cupti` and `profiler builtin` in a build without CUDA
// (PIPECAST_CUDA=OFF, or no toolkit found): they check their options, then
// say plainly what is missing.
#include "profiler/cupti_profile.h"

namespace pipecast {
namespace {

Status NoCuda() {
  return Status::Unavailable(
      "this build has no CUDA (configure with PIPECAST_CUDA=ON on a "
      "machine with the CUDA 13 toolkit); 'profiler analytic' estimates "
      "without a GPU and 'profiler cpu' measures on the CPU");
}

}  // namespace

Result<Model> ProfileCommand(const CuptiCommandOptions& options, std::string* /*report*/) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  return NoCuda();
}

Result<Model> ProfileBuiltin(const BuiltinOptions& options, std::string* /*report*/) {
  PIPECAST_RETURN_IF_ERROR(options.Validate());
  return NoCuda();
}

}  // namespace pipecast
