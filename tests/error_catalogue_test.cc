// The error catalogue (issue 8, docs/errors.md): one table of bad inputs
// across the tools, each run through the real binary as a user runs it, with
// the exact exit code and a fragment of the message it must print. Every row
// is its own test (Case/ErrorCatalogue.Run/<name>). A row says which files to
// write into a fresh folder and the command line; `{dir}` in the command is
// that folder and `{ex}` the repository's examples/ folder.
//
// Exit codes (docs/errors.md section 1): 1 bad input or failure, 2 usage, 4 no plan.
// (3, a check beyond tolerance, is not an error: planner_check_test and the
// validator's loop test cover it.)
//
// The validator's rows fail before any stage runs (flags, files, the
// plan's simulation, the trace's folder), so the gpt-7b baseline plan serves
// them without executing it.
//
// Writes that fail (a missing folder, a path that is a folder, a read-only
// folder) are rows too, and every such row also checks that the folder holds
// no output and no temporary file afterwards (formats/file_util.h:
// WriteFileAtomic writes `<path>.tmp.XXXXXX`, then renames it).
#include "tests/error_catalogue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "testing/cli_test_util.h"

namespace pipecast::cli_test {

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string Model(int layers, const std::string& profile, const std::string& parameters) {
  const std::string good = R"({"microbatch_size": 1, "forward_us": 100, "backward_us": 200, )"
                           R"("activation_bytes": 1024, "output_bytes": 512})";
  std::string text = R"({"format": "pipecast-model/1", "name": "m", "layers": [)";
  for (int i = 0; i < layers; ++i) {
    if (i > 0) text += ", ";
    text += R"({"name": "l)" + std::to_string(i) + R"(", "parameters": )" +
            (i == 0 ? parameters : std::string("1000")) + R"(, "profiles": [)" +
            (i == 0 && !profile.empty() ? profile : good) + "]}";
  }
  return text + "]}\n";
}

std::string Profile(const std::string& field, const std::string& value) {
  std::vector<std::pair<std::string, std::string>> fields = {{"microbatch_size", "1"},
                                                             {"forward_us", "100"},
                                                             {"backward_us", "200"},
                                                             {"activation_bytes", "1024"},
                                                             {"output_bytes", "512"}};
  std::string text = "{";
  for (const auto& [k, v] : fields) {
    const std::string shown = k == field ? value : v;
    if (shown.empty()) continue;
    if (text.size() > 1) text += ", ";
    text += "\"" + k + "\": " + shown;
  }
  return text + "}";
}

std::string ClusterWith(const std::string& from, const std::string& to) {
  std::string text = kCluster;
  text.replace(text.find(from), from.size(), to);
  return text;
}

std::string Baseline(const std::string& from, const std::string& to) {
  std::string text = ReadText(Example("baselines/gpt-7b-8gpu.plan.json"));
  const size_t at = text.find(from);
  if (at == std::string::npos) return "baseline plan lacks " + from;
  return text.replace(at, from.size(), to);
}

Case Row(std::string name, Tool tool, std::vector<File> files, std::string args, int exit_code,
         std::string error, After after, std::string make_dir, bool read_only) {
  return Case{std::move(name),
              tool,
              std::move(files),
              std::move(args),
              exit_code,
              std::move(error),
              after,
              std::move(make_dir),
              read_only,
              std::string(),
              false,
              std::string()};
}

namespace {

using ::testing::HasSubstr;

const char* Binary(Tool tool) {
  switch (tool) {
    case kSimulator:
      return PIPECAST_SIMULATOR_BIN;
    case kPlanner:
      return PIPECAST_PLANNER_BIN;
    case kProfiler:
      return PIPECAST_PROFILER_BIN;
    case kValidator:
      return PIPECAST_VALIDATOR_BIN;
  }
  return "";
}

// Every row of the catalogue (docs/errors.md), in one list.
std::vector<Case> Catalogue() {
  std::vector<Case> c = InputRows();
  for (Case& row : RunRows()) c.push_back(std::move(row));
  return c;
}

std::string Expand(std::string text, const TempDir& dir) {
  const std::string examples = Example("");
  for (const auto& [key, value] :
       {std::pair<std::string, std::string>{"{dir}", dir.path()}, {"{ex}/", examples}}) {
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at)) {
      text.replace(at, key.size(), value);
      at += value.size();
    }
  }
  return text;
}

// Every file under `dir`, relative, except the captured output and `inputs`.
std::vector<std::string> Outputs(const TempDir& dir, const std::vector<File>& inputs) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (entry.is_directory()) continue;
    const std::string rel = std::filesystem::relative(entry.path(), dir.path()).string();
    if (rel == ".stdout" || rel == ".stderr") continue;
    bool input = false;
    for (const File& f : inputs) input = input || f.name == rel;
    if (!input) found.push_back(rel);
  }
  return found;
}

class ErrorCatalogue : public ::testing::TestWithParam<Case> {};

TEST_P(ErrorCatalogue, Run) {
  const Case& c = GetParam();
  if (c.needs_no_gpu && std::filesystem::exists("/dev/nvidiactl")) {
    GTEST_SKIP() << "this machine has an NVIDIA device";
  }
  TempDir dir;
  for (const File& f : c.files) WriteText(dir.File(f.name), f.text);
  if (!c.make_dir.empty()) {
    const std::string made = dir.File(c.make_dir);
    ASSERT_EQ(::mkdir(made.c_str(), c.read_only ? 0555 : 0755), 0) << made;
    // root writes anywhere: the permission bits cannot make the write fail.
    if (c.read_only && ::access(made.c_str(), W_OK) == 0) {
      GTEST_SKIP() << "running as root: a read-only folder is still writable (the rows "
                      "*_onto_a_folder and *_under_a_file make writes fail for root too)";
    }
  }
  const ToolRun run = RunTool(dir, Binary(c.tool), Expand(c.args, dir));
  EXPECT_EQ(run.exit_code, c.exit_code) << "stderr:\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr(Expand(c.error, dir)));
  // No crash report, no stack: a clean one-line diagnosis.
  EXPECT_THAT(run.err, ::testing::Not(HasSubstr("terminate called")));
  EXPECT_THAT(run.err, ::testing::Not(HasSubstr("Sanitizer")));
  if (!c.output.empty()) {
    EXPECT_THAT(run.out, HasSubstr(c.output));
  }
  if (!c.absent.empty()) {
    EXPECT_THAT(run.err, ::testing::Not(HasSubstr(Expand(c.absent, dir))));
  }
  if (c.after == After::kNoOutputs || c.after == After::kInputsUnchanged) {
    EXPECT_THAT(Outputs(dir, c.files), ::testing::IsEmpty());
  }
  if (c.after == After::kInputsUnchanged) {
    for (const File& f : c.files) EXPECT_EQ(ReadText(dir.File(f.name)), f.text) << f.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Case, ErrorCatalogue, ::testing::ValuesIn(Catalogue()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// Every row has a unique name and says something.
TEST(ErrorCatalogueTable, RowsAreWellFormed) {
  std::vector<std::string> names;
  for (const Case& c : Catalogue()) {
    EXPECT_FALSE(c.error.empty()) << c.name;
    EXPECT_NE(c.exit_code, 0) << c.name;
    names.push_back(c.name);
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
}

}  // namespace
}  // namespace pipecast::cli_test
