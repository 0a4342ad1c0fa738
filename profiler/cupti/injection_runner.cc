#include "profiler/cupti/injection_runner.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "formats/file_util.h"
#include "profiler/activity_file.h"

namespace pipecast {
namespace {

// Build-time locations (CMake), overridable from the environment.
std::string Locate(const char* env, const char* built) {
  const char* value = std::getenv(env);
  return value != nullptr && *value != '\0' ? std::string(value) : std::string(built);
}

std::string DescribeWait(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "an unknown wait status";
}

}  // namespace

Status CheckCudaDevice() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return Status::Unavailable(
        "no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded): CUPTI profiling needs "
        "an NVIDIA GPU; 'profiler analytic' estimates without one");
  }
  using InitFn = int (*)(unsigned int);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count_fn = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
  Status status;
  int count = 0;
  if (init == nullptr || count_fn == nullptr) {
    status = Status::Unavailable("libcuda.so.1 lacks cuInit/cuDeviceGetCount: a broken driver");
  } else if (const int rc = init(0); rc != 0) {
    status = Status::Unavailable(
        fmt::format("the NVIDIA driver failed to initialise (cuInit error {}): no usable GPU", rc));
  } else if (count_fn(&count) != 0 || count == 0) {
    status = Status::Unavailable("the NVIDIA driver reports no CUDA device");
  }
  dlclose(lib);
  return status;
}

Result<std::vector<ActivityTrace>> RunInjected(const InjectionRun& run) {
  if (run.argv.empty()) return Status::InvalidArgument("no program to run");
  const std::string inject = Locate("PIPECAST_INJECT_LIBRARY", PIPECAST_INJECT_LIBRARY_PATH);
  const std::string cupti = Locate("PIPECAST_CUPTI_LIBRARY", PIPECAST_CUPTI_LIBRARY_PATH);
  for (const std::string& lib : {inject, cupti}) {
    if (access(lib.c_str(), R_OK) != 0) {
      return Status::NotFound(fmt::format(
          "{}: {} (set PIPECAST_INJECT_LIBRARY / PIPECAST_CUPTI_LIBRARY to where it is installed)",
          lib, std::strerror(errno)));
    }
  }
  std::string dir = run.records_dir;
  const bool temporary = dir.empty();
  if (temporary) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/pipecast-cupti-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      return Status::FailedPrecondition(
          fmt::format("cannot create a temporary folder {}: {}", pattern, std::strerror(errno)));
    }
    dir = pattern;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return Status::InvalidArgument(fmt::format("--keep-records {}: {}", dir, ec.message()));
    }
    dir = std::filesystem::absolute(dir).string();
  }
  const auto cleanup = [&] {
    if (temporary) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };

  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    cleanup();
    return Status::FailedPrecondition(fmt::format("fork failed: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    setenv("CUDA_INJECTION64_PATH", inject.c_str(), 1);
    setenv("NVTX_INJECTION64_PATH", cupti.c_str(), 1);
    setenv("PIPECAST_CUPTI_OUT", dir.c_str(), 1);
    if (run.device_buffer_mib > 0) {
      const std::string bytes = std::to_string(static_cast<uint64_t>(run.device_buffer_mib) << 20);
      setenv("PIPECAST_CUPTI_DEVICE_BUFFER_BYTES", bytes.c_str(), 1);
    }
    dup2(STDERR_FILENO, STDOUT_FILENO);
    std::vector<char*> args;
    for (const std::string& a : run.argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    const std::string msg =
        fmt::format("profiler: cannot run '{}': {}\n", run.argv[0], std::strerror(errno));
    (void)!write(STDERR_FILENO, msg.data(), msg.size());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      cleanup();
      return Status::Internal(fmt::format("waitpid failed: {}", std::strerror(errno)));
    }
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    cleanup();
    return Status::FailedPrecondition(
        fmt::format("the profiled command '{}' ended with {}; a failed run is not profiled",
                    run.argv[0], DescribeWait(status)));
  }

  std::vector<ActivityTrace> traces;
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("pipecast-activity-", 0) == 0 && name.size() > 6 &&
          name.substr(name.size() - 6) == ".jsonl") {
        files.push_back(dir + "/" + name);
      }
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    Result<std::string> text = ReadFile(f);
    if (!text.ok()) {
      cleanup();
      return text.status();
    }
    Result<ActivityTrace> trace = ParseActivityTrace(*text, f);
    if (!trace.ok()) {
      cleanup();
      return trace.status();
    }
    traces.push_back(std::move(*trace));
  }
  cleanup();
  if (traces.empty()) {
    return Status::FailedPrecondition(fmt::format(
        "'{}' exited normally but no process wrote CUPTI records: it never initialised CUDA, or "
        "the driver did not load the injection library {}",
        run.argv[0], inject));
  }
  return traces;
}

}  // namespace pipecast
