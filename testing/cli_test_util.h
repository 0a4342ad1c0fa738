// Running the built tools the way a user does, for tests/*_cli_test.cc: a
// command line through the shell, its exit code, stdout and stderr, in a
// fresh temporary folder per test. Test-only.
#ifndef PIPECAST_TESTING_CLI_TEST_UTIL_H_
#define PIPECAST_TESTING_CLI_TEST_UTIL_H_

#include <string>

namespace pipecast::cli_test {

struct ToolRun {
  int exit_code = -1;  // -1 when the tool did not exit normally
  std::string out;     // stdout
  std::string err;     // stderr
};

// A fresh folder under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string File(const std::string& name) const;

 private:
  std::string path_;
};

// Runs `binary args` through /bin/sh, capturing stdout and stderr into files
// of `dir`. `args` is shell text: quote paths with Quote().
ToolRun RunTool(const TempDir& dir, const std::string& binary, const std::string& args);

// 'text' for the shell.
std::string Quote(const std::string& text);

// The repository's examples/<name>.
std::string Example(const std::string& name);

std::string ReadText(const std::string& path);
void WriteText(const std::string& path, const std::string& text);
bool Exists(const std::string& path);

}  // namespace pipecast::cli_test

#endif  // PIPECAST_TESTING_CLI_TEST_UTIL_H_
