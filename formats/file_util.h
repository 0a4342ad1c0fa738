// Files: whole-file reads, and atomic writes (a temporary file in the same
// folder, then rename), so a failure never leaves half an output file.
#ifndef PIPECAST_FORMATS_FILE_UTIL_H_
#define PIPECAST_FORMATS_FILE_UTIL_H_

#include <string>

#include "base/status.h"

namespace pipecast {

// NotFound naming the path and the OS error when it cannot be read.
Result<std::string> ReadFile(const std::string& path);

// Writes `content` to `path` atomically. On failure (folder missing, no
// permission, disk full) returns InvalidArgument naming the path and the OS
// error, and leaves neither `path` changed nor a temporary file behind.
Status WriteFileAtomic(const std::string& path, const std::string& content);

// Whether WriteFileAtomic(path, ...) can succeed, checked before a long
// computation whose result would otherwise be lost: the folder exists and
// takes a new file (one is created and removed again) and `path` is not a
// folder. Same errors as WriteFileAtomic; leaves nothing behind. A disk that
// fills up in between is only found by the write itself.
Status CheckWritable(const std::string& path);

}  // namespace pipecast

#endif  // PIPECAST_FORMATS_FILE_UTIL_H_
