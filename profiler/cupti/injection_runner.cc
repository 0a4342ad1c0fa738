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

// The libraries the child loads: pipecast's injection library and CUPTI.
struct InjectionLibraries {
  std::string inject, cupti;
};

// Both libraries where CMake found them (or the environment says), readable.
Result<InjectionLibraries> FindInjectionLibraries() {
  InjectionLibraries libs{Locate("PIPECAST_INJECT_LIBRARY", PIPECAST_INJECT_LIBRARY_PATH),
                          Locate("PIPECAST_CUPTI_LIBRARY", PIPECAST_CUPTI_LIBRARY_PATH)};
  for (const std::string& lib : {libs.inject, libs.cupti}) {
    if (access(lib.c_str(), R_OK) != 0) {
      return Status::NotFound(fmt::format(
          "{}: {} (set PIPECAST_INJECT_LIBRARY / PIPECAST_CUPTI_LIBRARY to where it is installed)",
          lib, std::strerror(errno)));
    }
  }
  return libs;
}

// Where the child writes its records: --keep-records, or a temporary folder
// the caller removes.
struct RecordsFolder {
  std::string path;  // absolute
  bool temporary = false;
};

Result<RecordsFolder> OpenRecordsFolder(const std::string& records_dir) {
  if (records_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/pipecast-cupti-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      return Status::FailedPrecondition(
          fmt::format("cannot create a temporary folder {}: {}", pattern, std::strerror(errno)));
    }
    return RecordsFolder{.path = pattern, .temporary = true};
  }
  std::error_code ec;
  std::filesystem::create_directories(records_dir, ec);
  if (ec) {
    return Status::InvalidArgument(fmt::format("--keep-records {}: {}", records_dir, ec.message()));
  }
  return RecordsFolder{.path = std::filesystem::absolute(records_dir).string()};
}

// In the forked child: sets the injection environment and runs the program
// (its stdout to stderr); never returns.
[[noreturn]] void ExecInjected(const InjectionRun& run, const InjectionLibraries& libs,
                               const std::string& dir) {
  setenv("CUDA_INJECTION64_PATH", libs.inject.c_str(), 1);
  setenv("NVTX_INJECTION64_PATH", libs.cupti.c_str(), 1);
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

// Runs the program under injection and waits for it: OK only when it exits 0.
Status RunChild(const InjectionRun& run, const InjectionLibraries& libs, const std::string& dir) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    return Status::FailedPrecondition(fmt::format("fork failed: {}", std::strerror(errno)));
  }
  if (pid == 0) ExecInjected(run, libs, dir);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return Status::Internal(fmt::format("waitpid failed: {}", std::strerror(errno)));
    }
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::FailedPrecondition(
        fmt::format("the profiled command '{}' ended with {}; a failed run is not profiled",
                    run.argv[0], DescribeWait(status)));
  }
  return Status::Ok();
}

// The records files the processes left in `dir` (pipecast-activity-*.jsonl),
// parsed in name order.
Result<std::vector<ActivityTrace>> ReadRecords(const std::string& dir) {
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
  std::vector<ActivityTrace> traces;
  for (const std::string& f : files) {
    PIPECAST_ASSIGN_OR_RETURN(const std::string text, ReadFile(f));
    PIPECAST_ASSIGN_OR_RETURN(ActivityTrace trace, ParseActivityTrace(text, f));
    traces.push_back(std::move(trace));
  }
  return traces;
}

Result<std::vector<ActivityTrace>> RunAndCollect(const InjectionRun& run,
                                                 const InjectionLibraries& libs,
                                                 const std::string& dir) {
  PIPECAST_RETURN_IF_ERROR(RunChild(run, libs, dir));
  return ReadRecords(dir);
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
  PIPECAST_ASSIGN_OR_RETURN(const InjectionLibraries libs, FindInjectionLibraries());
  PIPECAST_ASSIGN_OR_RETURN(const RecordsFolder folder, OpenRecordsFolder(run.records_dir));
  Result<std::vector<ActivityTrace>> traces = RunAndCollect(run, libs, folder.path);
  if (folder.temporary) {
    std::error_code ec;
    std::filesystem::remove_all(folder.path, ec);
  }
  if (traces.ok() && traces->empty()) {
    return Status::FailedPrecondition(fmt::format(
        "'{}' exited normally but no process wrote CUPTI records: it never initialised CUDA, or "
        "the driver did not load the injection library {}",
        run.argv[0], libs.inject));
  }
  return traces;
}

}  // namespace pipecast
