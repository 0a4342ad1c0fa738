#include "formats/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace pipecast {

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::NotFound("cannot read '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) {
    return Status::NotFound("error reading '" + path + "': " + std::strerror(errno));
  }
  return buf.str();
}

Status WriteFileAtomic(const std::string& path, const std::string& content) {
  std::string tmpl = path + ".tmp.XXXXXX";
  int fd = mkstemp(tmpl.data());
  if (fd < 0) {
    return Status::InvalidArgument("cannot write '" + path + "': " + std::strerror(errno) +
                                   " (check that the folder exists and is writable)");
  }
  const char* data = content.data();
  size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmpl.c_str());
      return Status::InvalidArgument("cannot write '" + path + "': " + std::strerror(err));
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmpl.c_str());
    return Status::InvalidArgument("cannot write '" + path + "': " + std::strerror(err));
  }
  ::chmod(tmpl.c_str(), 0644);
  if (std::rename(tmpl.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmpl.c_str());
    return Status::InvalidArgument("cannot write '" + path + "': " + std::strerror(err));
  }
  return Status::Ok();
}

Status CheckWritable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("cannot write '" + path + "': " + std::strerror(EISDIR));
  }
  std::string tmpl = path + ".tmp.XXXXXX";
  int fd = mkstemp(tmpl.data());
  if (fd < 0) {
    return Status::InvalidArgument("cannot write '" + path + "': " + std::strerror(errno) +
                                   " (check that the folder exists and is writable)");
  }
  ::close(fd);
  ::unlink(tmpl.c_str());
  return Status::Ok();
}

}  // namespace pipecast
