// Test-only helpers shared by the JSON-format tests (formats_test.cc,
// cluster_test.cc): a temporary folder and the table-driven error case.
#ifndef PIPECAST_TESTING_FORMATS_TEST_UTIL_H_
#define PIPECAST_TESTING_FORMATS_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

namespace pipecast::test_util {

// A fresh folder under the system temp folder, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "pipecast_formats_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct ErrorCase {
  const char* name;
  std::function<void(nlohmann::json&)> change;  // turns a minimal valid file into bad input
  const char* path;                             // must appear in the message
  const char* what;                             // and so must this
};

inline std::ostream& operator<<(std::ostream& os, const ErrorCase& c) { return os << c.name; }

}  // namespace pipecast::test_util

#endif  // PIPECAST_TESTING_FORMATS_TEST_UTIL_H_
