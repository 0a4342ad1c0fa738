#include "formats/file_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/internal/temp_files.h"

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

// Issue 28: a 250-byte file name is legal (NAME_MAX is 255) and every output
// flag must take it, though `<name>.tmp.XXXXXX` would be 261 bytes.
TEST_F(FileUtil, OutputFlagsTakeALegal250ByteFileName) {
  const std::string name = std::string(245, 'p') + ".json";  // 250 bytes
  ASSERT_EQ(name.size(), 250u);

  Status checked = CheckOutputs({{"--out", Path(name)}}, {});
  Status written = WriteFileAtomic(Path(name), "{}\n");

  ASSERT_TRUE(checked.ok()) << checked.message();
  ASSERT_TRUE(written.ok()) << written.message();
  EXPECT_EQ(*ReadFile(Path(name)), "{}\n");
  EXPECT_EQ(Listing(), std::vector<std::string>{name});  // the shortened temporary name is gone
}

// The same in the current folder (a bare name, no slash), where the
// temporary name is cut the same way.
TEST_F(FileUtil, ABare250ByteFileNameIsWrittenInTheCurrentFolder) {
  const std::string name = std::string(250, 'q');
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_);

  Status written = WriteFileAtomic(name, "x");

  std::filesystem::current_path(cwd);
  ASSERT_TRUE(written.ok()) << written.message();
  EXPECT_EQ(Listing(), std::vector<std::string>{name});
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

TEST_F(FileUtil, StreamedWriteJoinsSmallAndLargePiecesInOrder) {
  // Given pieces smaller than the buffer, one that fills it past the end,
  // and one larger than the buffer by itself.
  const std::string small = "line\n";
  const std::string fill(kStreamBufferBytes - 3, 'a');
  const std::string large(kStreamBufferBytes + 7, 'b');
  const std::string want = small + fill + small + large + small;

  Status st = WriteFileAtomicStreamed(Path("out.txt"), [&](const TextSink& sink) {
    sink(small);
    sink(fill);
    sink(small);
    sink(large);
    sink(small);
  });

  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(*ReadFile(Path("out.txt")), want);
  EXPECT_EQ(Listing(), std::vector<std::string>{"out.txt"});
}

TEST_F(FileUtil, StreamedWriteIntoAMissingFolderFailsBeforeProducing) {
  bool produced = false;

  Status st = WriteFileAtomicStreamed(Path("no-such-folder/out.json"),
                                      [&](const TextSink&) { produced = true; });

  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("folder"));
  EXPECT_FALSE(produced);
  EXPECT_TRUE(Listing().empty());
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

TEST_F(FileUtil, OutputOntoADeviceIsRefusedAndTheDeviceKept) {
  // Given /dev/null, when written atomically, then the write is refused:
  // renaming over it would replace the device node with a file.
  const Status st = WriteFileAtomic("/dev/null", "plan");
  EXPECT_THAT(st.message(), HasSubstr("'/dev/null': not a regular file"));
  EXPECT_THAT(CheckWritable("/dev/null").message(), HasSubstr("not a regular file"));
  struct stat info {};
  ASSERT_EQ(::stat("/dev/null", &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode));
}

TEST_F(FileUtil, AnEmptyOutputPathIsRefused) {
  EXPECT_THAT(WriteFileAtomic("", "x").message(), HasSubstr("the output path is empty"));
  EXPECT_THAT(CheckOutputs({{"--out", ""}}, {}).message(),
              HasSubstr("--out is empty: give a file path"));
}

TEST_F(FileUtil, OutputOntoAnInputIsRefusedNamingBothFlags) {
  // Given a model file, when --out names it (spelled another way), then the
  // check refuses and the model is unchanged.
  const std::string model = Path("model.json");
  ASSERT_TRUE(WriteFileAtomic(model, "model").ok());
  const std::string other_spelling = (dir_ / "." / "sub" / ".." / "model.json").string();
  const Status st = CheckOutputs({{"--out", other_spelling}}, {{"--model", model}});
  EXPECT_THAT(st.message(), AllOf(HasSubstr("--out"), HasSubstr("is the same file as --model"),
                                  HasSubstr("never writes over its inputs")));
  EXPECT_EQ(*ReadFile(model), "model");
}

TEST_F(FileUtil, TwoOutputsOnOneFileAreRefused) {
  const Status st = CheckOutputs({{"--out", Path("x.json")}, {"--trace", Path("x.json")}}, {});
  EXPECT_THAT(st.message(),
              HasSubstr("--trace '" + Path("x.json") + "' is the same file as --out"));
  EXPECT_TRUE(CheckOutputs({{"--out", Path("a.json")}, {"--trace", Path("b.json")}},
                           {{"--model", Path("m.json")}})
                  .ok());
  EXPECT_EQ(Listing(), std::vector<std::string>{});  // checks leave nothing behind
}

TEST_F(FileUtil, ASignalMidWriteRemovesTheTemporaryFile) {
  // Given a temporary file recorded as WriteFileAtomic records it, when
  // SIGTERM ends the process, then the handler removes the file and the
  // process still dies by SIGTERM.
  const std::string tmp = Path("plan.json.tmp.ABCDEF");
  ASSERT_TRUE(WriteFileAtomic(tmp, "half a plan").ok());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RemoveTempFilesOnSignal();
    if (internal::RegisterTempFile(tmp) < 0) _exit(2);
    raise(SIGTERM);
    _exit(3);  // not reached
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_FALSE(std::filesystem::exists(tmp));
}

TEST_F(FileUtil, ReleasedTemporaryFilesAreNotRemovedBySignals) {
  const std::string kept = Path("kept.json");
  ASSERT_TRUE(WriteFileAtomic(kept, "plan").ok());
  internal::ReleaseTempFile(internal::RegisterTempFile(kept));
  internal::UnlinkTempFiles();
  EXPECT_TRUE(std::filesystem::exists(kept));
}

TEST_F(FileUtil, ReadFileStopsAtItsLimit) {
  // Given /dev/zero (endless) and a limit of 1 MiB, when read, then the read
  // stops past the limit with an error naming the path, instead of taking
  // all memory; a file at the limit reads whole.
  EXPECT_THAT(ReadFile("/dev/zero", size_t{1} << 20).status().message(),
              HasSubstr("'/dev/zero' is larger than 1 MiB, the limit"));
  const std::string exact(size_t{1} << 20, 'x');
  ASSERT_TRUE(WriteFileAtomic(Path("a.json"), exact).ok());
  EXPECT_EQ(ReadFile(Path("a.json"), size_t{1} << 20)->size(), exact.size());
}

TEST_F(FileUtil, ReadFileOfAMissingFileIsNotFoundNamingThePath) {
  Result<std::string> text = ReadFile(Path("missing.json"));

  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(text.status().message(), HasSubstr(Path("missing.json")));
}

}  // namespace
}  // namespace pipecast
