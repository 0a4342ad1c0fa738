#include "formats/file_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace pipecast {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Each test gets a fresh folder under the system temp folder.
class FileUtil : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "pipecast_file_util_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  // Names of everything in the test folder, sorted.
  std::vector<std::string> Listing() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::filesystem::path dir_;
};

TEST_F(FileUtil, WriteFileAtomicCreatesTheFile) {
  Status st = WriteFileAtomic(Path("out.json"), "{}\n");

  ASSERT_TRUE(st.ok()) << st.message();
  Result<std::string> text = ReadFile(Path("out.json"));
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text, "{}\n");
  EXPECT_EQ(Listing(), std::vector<std::string>{"out.json"});  // no temp file
}

TEST_F(FileUtil, WriteFileAtomicReplacesAnExistingFile) {
  ASSERT_TRUE(WriteFileAtomic(Path("out.txt"), "a much longer first version").ok());

  Status st = WriteFileAtomic(Path("out.txt"), "second");

  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(*ReadFile(Path("out.txt")), "second");
  EXPECT_EQ(Listing(), std::vector<std::string>{"out.txt"});
}

TEST_F(FileUtil, WritesAndReadsEmptyAndBinaryContent) {
  const std::string binary("a\0b\xff\n", 5);
  ASSERT_TRUE(WriteFileAtomic(Path("empty"), "").ok());
  ASSERT_TRUE(WriteFileAtomic(Path("binary"), binary).ok());

  EXPECT_EQ(*ReadFile(Path("empty")), "");
  EXPECT_EQ(*ReadFile(Path("binary")), binary);
}

TEST_F(FileUtil, WritingIntoAMissingFolderFailsNamingThePath) {
  const std::string path = Path("no-such-folder/out.json");

  Status st = WriteFileAtomic(path, "{}");

  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr(path), HasSubstr("folder")));
  EXPECT_TRUE(Listing().empty());  // nothing created, no temp file
}

TEST_F(FileUtil, FailedRenameLeavesNoTempFileBehind) {
  // Given a folder where the output should go: the temp file is written,
  // then the rename over a folder fails.
  std::filesystem::create_directory(Path("taken"));

  Status st = WriteFileAtomic(Path("taken"), "data");

  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr(Path("taken")));
  EXPECT_EQ(Listing(), std::vector<std::string>{"taken"});
  EXPECT_TRUE(std::filesystem::is_empty(Path("taken")));
}

TEST_F(FileUtil, CheckWritableAcceptsAFreshPathAndLeavesNothing) {
  Status st = CheckWritable(Path("out.json"));

  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(Listing().empty());  // the probe file was removed again
}

TEST_F(FileUtil, CheckWritableRefusesWhatWriteFileAtomicWouldRefuse) {
  std::filesystem::create_directory(Path("taken"));

  Status missing = CheckWritable(Path("missing/out.json"));
  Status folder = CheckWritable(Path("taken"));

  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.message(), WriteFileAtomic(Path("missing/out.json"), "x").message());
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.message(), "cannot write '" + Path("taken") + "': Is a directory");
  EXPECT_EQ(Listing(), std::vector<std::string>{"taken"});
  EXPECT_TRUE(std::filesystem::is_empty(Path("taken")));
}

TEST_F(FileUtil, ReadFileOfAMissingFileIsNotFoundNamingThePath) {
  Result<std::string> text = ReadFile(Path("missing.json"));

  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(text.status().message(), HasSubstr(Path("missing.json")));
}

}  // namespace
}  // namespace pipecast
