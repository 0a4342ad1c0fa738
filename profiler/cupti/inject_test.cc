// The injection library without a GPU: loaded, initialised and unloaded at
// exit like the driver would, it must neither abort nor stay silent.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "profiler/activity_file.h"

namespace pipecast {
namespace {

std::string Slurp(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

TEST(InjectTest, WithoutDriverWritesItsErrorsAndExitsCleanly) {
  const std::string dir = testing::TempDir() + "/pipecast-inject-test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string cmd = "PIPECAST_CUPTI_OUT='" + dir + "' '" + PIPECAST_INJECT_SMOKE_BIN + "' '" +
                          PIPECAST_INJECT_LIBRARY_PATH + "' > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path().string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_THAT(files[0], testing::MatchesRegex(".*/pipecast-activity-[0-9]+\\.jsonl"));
  Result<ActivityTrace> trace = ParseActivityTrace(Slurp(files[0]), files[0]);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_GT(trace->process_id, 0u);
  EXPECT_TRUE(trace->gpu.empty());
  if (std::system("test -e /dev/nvidiactl") != 0) {
    // No driver: the failed CUPTI calls are reported, not fatal.
    EXPECT_THAT(trace->errors, testing::Contains(testing::HasSubstr("failed")));
  }
  std::filesystem::remove_all(dir);
}

TEST(InjectTest, WithoutOutputFolderItStaysOut) {
  const std::string cmd = std::string("env -u PIPECAST_CUPTI_OUT '") + PIPECAST_INJECT_SMOKE_BIN +
                          "' '" + PIPECAST_INJECT_LIBRARY_PATH + "' > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace pipecast
