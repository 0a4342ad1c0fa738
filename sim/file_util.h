// Files: whole-file reads, and atomic writes (a temporary file in the same
// folder, then rename), so a failure never leaves half an output file.
#ifndef PIPECAST_SIM_FILE_UTIL_H_
#define PIPECAST_SIM_FILE_UTIL_H_

#include <string>

#include "sim/status.h"

namespace pipecast {

// NotFound naming the path and the OS error when it cannot be read.
Result<std::string> ReadFile(const std::string& path);

// Writes `content` to `path` atomically. On failure (folder missing, no
// permission, disk full) returns InvalidArgument naming the path and the OS
// error, and leaves neither `path` changed nor a temporary file behind.
Status WriteFileAtomic(const std::string& path, const std::string& content);

}  // namespace pipecast

#endif  // PIPECAST_SIM_FILE_UTIL_H_
