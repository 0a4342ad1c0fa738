// pipecast_inject_smoke LIBRARY: loads an injection library the way the CUDA
// driver does (dlopen, then InitializeInjection) and exits normally, so the
// library's exit handler runs. For inject_test.cc on machines without a GPU.
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: pipecast_inject_smoke LIBRARY\n");
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "pipecast_inject_smoke: %s\n", dlerror());
    return 1;
  }
  using InitFn = int (*)();
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "InitializeInjection"));
  if (init == nullptr) {
    std::fprintf(stderr, "pipecast_inject_smoke: no InitializeInjection\n");
    return 1;
  }
  const int first = init();
  const int second = init();  // idempotent
  std::printf("%d %d\n", first, second);
  return first == 1 && second == 1 ? 0 : 1;
}
