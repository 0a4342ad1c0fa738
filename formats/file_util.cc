#include "formats/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "base/terminal_text.h"
#include "formats/internal/temp_files.h"

namespace pipecast {

Result<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::NotFound("cannot read '" + TerminalSafe(path) + "': " + std::strerror(errno));
  }
  // In chunks, so that /dev/zero or a huge file stops at the limit instead
  // of taking all memory.
  constexpr size_t kChunk = size_t{1} << 20;
  std::string text;
  while (in) {
    const size_t have = text.size();
    text.resize(have + kChunk);
    in.read(text.data() + have, static_cast<std::streamsize>(kChunk));
    text.resize(have + static_cast<size_t>(in.gcount()));
    if (text.size() > max_bytes) {
      return Status::InvalidArgument(
          "'" + TerminalSafe(path) + "' is larger than " + std::to_string(max_bytes >> 20) +
          " MiB, the limit for pipecast's input files: is it the right file?");
    }
  }
  if (in.bad()) {
    return Status::NotFound("error reading '" + TerminalSafe(path) + "': " + std::strerror(errno));
  }
  return text;
}

namespace {

// InvalidArgument when `path` is empty or names something other than a
// regular file (a folder, a device such as /dev/null, a FIFO, a socket),
// which an atomic rename would replace.
Status CheckOutputTarget(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("the output path is empty: give a file path");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::Ok();  // a new file
  if (S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("cannot write '" + TerminalSafe(path) +
                                   "': " + std::strerror(EISDIR));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("cannot write '" + path +
                                   "': not a regular file (a device, FIFO or socket), which "
                                   "writing would replace; give a file path");
  }
  return Status::Ok();
}

// mkstemp's template suffix for the temporary file of an atomic write.
constexpr std::string_view kTempSuffix = ".tmp.XXXXXX";

// The mkstemp template of `path`'s temporary file: in the same folder (so the
// rename is atomic), named `<file name>.tmp.XXXXXX`, with the file name cut
// so the whole name fits the folder's NAME_MAX (255 bytes on Linux file
// systems): a legal 250-byte output name must not be refused because its
// temporary name is 11 bytes longer.
std::string TempTemplate(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir_prefix = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string dir = dir_prefix.empty() ? "." : dir_prefix;
  const std::string name = path.substr(dir_prefix.size());
  long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max <= 0) name_max = NAME_MAX;  // unknown (a missing folder): the Linux value
  const size_t room = static_cast<size_t>(name_max) > kTempSuffix.size()
                          ? static_cast<size_t>(name_max) - kTempSuffix.size()
                          : 1;
  return dir_prefix + name.substr(0, std::min(name.size(), room)) + std::string(kTempSuffix);
}

// The temporary file of an atomic write: created beside `path`, recorded for
// RemoveTempFilesOnSignal, removed unless Keep() was called.
class TempFile {
 public:
  explicit TempFile(const std::string& path) : path_(TempTemplate(path)) {
    fd_ = mkstemp(path_.data());
    if (fd_ >= 0) slot_ = internal::RegisterTempFile(path_);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!kept_ && fd_ != kClosed) ::unlink(path_.c_str());
    internal::ReleaseTempFile(slot_);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  // Closes the descriptor; false (errno set) when the close failed.
  bool Close() {
    const int fd = fd_;
    fd_ = kClosedOk;
    return ::close(fd) == 0;
  }
  void Keep() { kept_ = true; }

 private:
  static constexpr int kClosed = -1;    // mkstemp failed: nothing to remove
  static constexpr int kClosedOk = -2;  // closed by Close(): still to remove
  std::string path_;
  int fd_ = kClosed;
  int slot_ = -1;
  bool kept_ = false;
};

}  // namespace

Status WriteFileAtomic(const std::string& path, const std::string& content) {
  return WriteFileAtomicStreamed(path, [&](const TextSink& sink) { sink(content); });
}

Status WriteFileAtomicStreamed(const std::string& path,
                               const std::function<void(const TextSink&)>& produce) {
  if (Status st = CheckOutputTarget(path); !st.ok()) return st;
  TempFile tmp(path);
  const int fd = tmp.fd();
  if (fd < 0) {
    return Status::InvalidArgument("cannot write '" + TerminalSafe(path) +
                                   "': " + std::strerror(errno) +
                                   " (check that the folder exists and is writable)");
  }
  int error = 0;  // the first write's errno, then nothing more is written
  auto write_all = [&](const char* data, size_t left) {
    while (left > 0 && error == 0) {
      ssize_t n = ::write(fd, data, left);
      if (n < 0) {
        if (errno != EINTR) error = errno;
        continue;
      }
      data += n;
      left -= static_cast<size_t>(n);
    }
  };
  std::string buffer;
  buffer.reserve(kStreamBufferBytes);
  produce([&](std::string_view piece) {
    if (buffer.size() + piece.size() > kStreamBufferBytes) {
      write_all(buffer.data(), buffer.size());
      buffer.clear();
    }
    if (piece.size() >= kStreamBufferBytes) {
      write_all(piece.data(), piece.size());
    } else {
      buffer.append(piece);
    }
  });
  write_all(buffer.data(), buffer.size());
  if (error != 0) {
    return Status::InvalidArgument("cannot write '" + TerminalSafe(path) +
                                   "': " + std::strerror(error));
  }
  if (::fsync(fd) != 0 || !tmp.Close()) {
    return Status::InvalidArgument("cannot write '" + TerminalSafe(path) +
                                   "': " + std::strerror(errno));
  }
  ::chmod(tmp.path().c_str(), 0644);
  if (std::rename(tmp.path().c_str(), path.c_str()) != 0) {
    return Status::InvalidArgument("cannot write '" + TerminalSafe(path) +
                                   "': " + std::strerror(errno));
  }
  tmp.Keep();
  return Status::Ok();
}

Status CheckWritable(const std::string& path) {
  if (Status st = CheckOutputTarget(path); !st.ok()) return st;
  std::string tmpl = TempTemplate(path);
  int fd = mkstemp(tmpl.data());
  if (fd < 0) {
    return Status::InvalidArgument("cannot write '" + TerminalSafe(path) +
                                   "': " + std::strerror(errno) +
                                   " (check that the folder exists and is writable)");
  }
  ::close(fd);
  ::unlink(tmpl.c_str());
  return Status::Ok();
}

namespace {

// Whether two paths name one file: the same file when both exist, else the
// same absolute, normalised path.
bool SameFile(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec) && !ec) return true;
  const std::filesystem::path pa = std::filesystem::absolute(a, ec).lexically_normal();
  const std::filesystem::path pb = std::filesystem::absolute(b, ec).lexically_normal();
  return !ec && pa == pb;
}

}  // namespace

Status CheckOutputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (out.path.empty()) {
      return Status::InvalidArgument(out.flag + " is empty: give a file path");
    }
    for (const NamedPath& in : inputs) {
      if (!in.path.empty() && SameFile(out.path, in.path)) {
        return Status::InvalidArgument(out.flag + " '" + TerminalSafe(out.path) +
                                       "' is the same file as " + in.flag +
                                       ": pipecast never writes over its inputs; "
                                       "choose another path");
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (SameFile(out.path, outputs[j].path)) {
        return Status::InvalidArgument(out.flag + " '" + TerminalSafe(out.path) +
                                       "' is the same file as " + outputs[j].flag +
                                       ": give each output its own path");
      }
    }
    if (Status st = CheckWritable(out.path); !st.ok()) return st.WithPrefix(out.flag);
  }
  return Status::Ok();
}

}  // namespace pipecast
