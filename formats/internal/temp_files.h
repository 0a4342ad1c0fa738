// The temporary files WriteFileAtomic has open, so that a signal ending the
// process mid-write can remove them (RemoveTempFilesOnSignal in
// formats/file_util.h). A fixed table of kMaxTempFiles paths, each claimed
// and released atomically; safe from several threads, and read from a
// signal handler without locks or allocation.
#ifndef PIPECAST_FORMATS_INTERNAL_TEMP_FILES_H_
#define PIPECAST_FORMATS_INTERNAL_TEMP_FILES_H_

#include <string>

namespace pipecast::internal {

// More concurrent atomic writes than this are still written; only their
// clean-up on a signal is not guaranteed.
inline constexpr int kMaxTempFiles = 16;

// Records `path`; returns the slot to release, or -1 when the table is full
// or the path too long to record.
int RegisterTempFile(const std::string& path);
// Forgets the slot's path (after the rename or the unlink). -1 is ignored.
void ReleaseTempFile(int slot);
// Unlinks every recorded path. Async-signal-safe.
void UnlinkTempFiles();

}  // namespace pipecast::internal

#endif  // PIPECAST_FORMATS_INTERNAL_TEMP_FILES_H_
