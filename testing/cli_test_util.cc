#include "testing/cli_test_util.h"

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace pipecast::cli_test {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/pipecast_cli_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + tmpl);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::File(const std::string& name) const { return path_ + "/" + name; }

std::string Quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

ToolRun RunTool(const TempDir& dir, const std::string& binary, const std::string& args) {
  const std::string out_path = dir.File(".stdout");
  const std::string err_path = dir.File(".stderr");
  const std::string command =
      Quote(binary) + " " + args + " >" + Quote(out_path) + " 2>" + Quote(err_path);
  const int status = std::system(command.c_str());
  ToolRun run;
  run.exit_code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = ReadText(out_path);
  run.err = ReadText(err_path);
  return run;
}

std::string Example(const std::string& name) {
  const char* dir = std::getenv("PIPECAST_SOURCE_DIR");
  return std::string(dir && *dir ? dir : PIPECAST_SOURCE_DIR_DEFAULT) + "/examples/" + name;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

bool Exists(const std::string& path) { return std::filesystem::exists(path); }

}  // namespace pipecast::cli_test
