#include "validate/cuda/nccl_api.h"

#include <dlfcn.h>
#include <fmt/format.h>

namespace pipecast::validate::cuda {
namespace {

template <typename F>
bool Sym(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

Result<const Nccl*> Open() {
  if (!PIPECAST_HAVE_NCCL_H) {
    return Status::Unavailable(
        "this build found no nccl.h, so it has no NCCL transport (install NCCL into the CUDA "
        "toolkit and reconfigure)");
  }
  std::string tried;
  void* lib = nullptr;
  std::string used;
  for (const char* name : {"libnccl.so.2", "libnccl.so", PIPECAST_NCCL_BUILD_PATH}) {
    if (name[0] == '\0') continue;
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      used = name;
      break;
    }
    const char* err = dlerror();
    tried += fmt::format("\n  {}: {}", name, err ? err : "not found");
  }
  if (lib == nullptr) return Status::Unavailable("NCCL could not be loaded:" + tried);
  auto* n = new Nccl;
  n->library = used;
  const bool ok =
      Sym(lib, "ncclGetVersion", &n->GetVersion) && Sym(lib, "ncclGetUniqueId", &n->GetUniqueId) &&
      Sym(lib, "ncclCommInitRank", &n->CommInitRank) &&
      Sym(lib, "ncclCommDestroy", &n->CommDestroy) && Sym(lib, "ncclCommAbort", &n->CommAbort) &&
      Sym(lib, "ncclCommGetAsyncError", &n->CommGetAsyncError) &&
      Sym(lib, "ncclGetErrorString", &n->GetErrorString) &&
      Sym(lib, "ncclGroupStart", &n->GroupStart) && Sym(lib, "ncclGroupEnd", &n->GroupEnd) &&
      Sym(lib, "ncclSend", &n->Send) && Sym(lib, "ncclRecv", &n->Recv) &&
      Sym(lib, "ncclAllReduce", &n->AllReduce) && Sym(lib, "ncclAllGather", &n->AllGather) &&
      Sym(lib, "ncclReduceScatter", &n->ReduceScatter);
  if (!ok) {
    delete n;
    return Status::Unavailable(fmt::format("{} lacks an NCCL 2.x symbol ({})", used, dlerror()));
  }
  n->GetVersion(&n->version);
  return static_cast<const Nccl*>(n);  // kept for the process's life, like the library
}

}  // namespace

std::string Nccl::Text(ncclResult_t r) const {
  return fmt::format("{} ({})", GetErrorString ? GetErrorString(r) : "?", static_cast<int>(r));
}

Result<const Nccl*> LoadNccl() {
  static const Result<const Nccl*> kLoaded = Open();
  return kLoaded;
}

}  // namespace pipecast::validate::cuda
