// Files: whole-file reads, and atomic writes (a temporary file in the same
// folder, then rename), so a failure never leaves half an output file.
#ifndef PIPECAST_FORMATS_FILE_UTIL_H_
#define PIPECAST_FORMATS_FILE_UTIL_H_

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace pipecast {

// The most ReadFile reads: far above any model, cluster, plan or schedule
// file (a plan of 2^23 stage-micro-batch pairs is about 200 MB), and a stop
// for /dev/zero or a file given by mistake.
inline constexpr size_t kMaxInputFileBytes = size_t{512} << 20;

// NotFound naming the path and the OS error when it cannot be read;
// InvalidArgument when it holds more than `max_bytes`.
Result<std::string> ReadFile(const std::string& path, size_t max_bytes = kMaxInputFileBytes);

// Writes `content` to `path` atomically. On failure (folder missing, no
// permission, disk full; an empty path; a path naming a folder, a device, a
// FIFO or a socket, which the rename would replace) returns InvalidArgument
// naming the path and the OS error, and leaves neither `path` changed nor a
// temporary file behind -- also when SIGINT, SIGTERM or SIGHUP ends the
// process mid-write, once RemoveTempFilesOnSignal() was called.
Status WriteFileAtomic(const std::string& path, const std::string& content);

// Takes a file's text piece by piece (WriteFileAtomicStreamed).
using TextSink = std::function<void(std::string_view)>;

// WriteFileAtomic() of the text `produce` hands its sink in pieces, for an
// output too large to hold whole (a trace of a million ops is gigabytes):
// the pieces are buffered (kStreamBufferBytes) and written as they come.
// Same errors and guarantees as WriteFileAtomic; after a failed write the
// rest of the pieces are dropped.
Status WriteFileAtomicStreamed(const std::string& path,
                               const std::function<void(const TextSink&)>& produce);

// WriteFileAtomicStreamed()'s buffer: large enough that a write call per
// buffer costs nothing next to producing it, small next to any output.
inline constexpr size_t kStreamBufferBytes = size_t{1} << 20;

// Whether WriteFileAtomic(path, ...) can succeed, checked before a long
// computation whose result would otherwise be lost: the folder exists and
// takes a new file (one is created and removed again) and `path` is not a
// folder. Same errors as WriteFileAtomic; leaves nothing behind. A disk that
// fills up in between is only found by the write itself.
Status CheckWritable(const std::string& path);

// A path a tool reads or writes, with the flag that gave it ("--out").
struct NamedPath {
  std::string flag;
  std::string path;
};

// Checks a tool's outputs before it works: each path is non-empty,
// CheckWritable, not the same file as any input (so `--out` onto `--model`
// cannot replace the model) and not the same file as another output (`--out`
// and `--trace` on one file would keep only the last). InvalidArgument names
// the flags. Same-file means the same file when both exist, else the same
// normalised absolute path.
Status CheckOutputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove the
// temporary files of writes in progress and then end the process by the same
// signal. For a tool's main, once; replaces earlier handlers of those signals.
void RemoveTempFilesOnSignal();

}  // namespace pipecast

#endif  // PIPECAST_FORMATS_FILE_UTIL_H_
