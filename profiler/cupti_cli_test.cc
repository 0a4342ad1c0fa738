// `profiler cupti` and `profiler builtin` as a user runs them on a machine
// without a GPU (this one, and CI): clear errors and exit codes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace pipecast {
namespace {

using ::testing::HasSubstr;

struct ProfilerRun {
  int exit_code = -1;
  std::string output;
};

ProfilerRun Profiler(const std::string& args) {
  const std::string command = std::string("'") + PIPECAST_PROFILER_BIN + "' " + args + " 2>&1";
  ProfilerRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buffer;
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    run.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

bool HaveDriver() { return std::system("test -e /dev/nvidiactl") == 0; }

TEST(CuptiCliTest, HelpListsBothSubcommands) {
  ProfilerRun run = Profiler("--help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.output, HasSubstr("cupti"));
  EXPECT_THAT(run.output, HasSubstr("builtin"));
  run = Profiler("cupti --help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.output, HasSubstr("--warmup"));
  EXPECT_THAT(run.output, HasSubstr("--device-buffer-mib"));
}

TEST(CuptiCliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Profiler("cupti --out m.json").exit_code, 2);  // no command
  EXPECT_EQ(Profiler("cupti --warmup x -- true").exit_code, 2);
  EXPECT_EQ(Profiler("builtin --hidden many").exit_code, 2);
}

TEST(CuptiCliTest, BadValuesNameTheFlag) {
  ProfilerRun run = Profiler("cupti --iterations 0 -- true");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("--iterations 0"));
  run = Profiler("builtin --hidden 100 --heads 3");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("--hidden 100 is not divisible by --heads 3"));
  run = Profiler("builtin --microbatch-sizes 2,2");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("2 is given twice"));
}

TEST(CuptiCliTest, WithoutGpuOrCudaItSaysWhichAndExitsOne) {
  if (PIPECAST_HAVE_CUDA_BUILD && HaveDriver()) GTEST_SKIP() << "this machine has a GPU driver";
  for (const char* args : {"cupti --out m.json -- true", "builtin --hidden 64 --heads 2 --seq 8"}) {
    const ProfilerRun run = Profiler(args);
    EXPECT_EQ(run.exit_code, 1) << args;
    if (PIPECAST_HAVE_CUDA_BUILD) {
      EXPECT_THAT(run.output, ::testing::ContainsRegex("NVIDIA driver|CUDA device")) << args;
    } else {
      EXPECT_THAT(run.output, HasSubstr("this build has no CUDA (configure with PIPECAST_CUDA=ON"))
          << args;
    }
  }
}

}  // namespace
}  // namespace pipecast
