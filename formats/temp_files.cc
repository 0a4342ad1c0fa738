#include "formats/internal/temp_files.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "formats/file_util.h"

namespace pipecast {
namespace internal {
namespace {

// Longest path recorded: PATH_MAX on Linux.
constexpr size_t kMaxPathBytes = 4096;

struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 holds a path
  char path[kMaxPathBytes];
};

Slot g_slots[kMaxTempFiles];

}  // namespace

int RegisterTempFile(const std::string& path) {
  if (path.size() >= kMaxPathBytes) return -1;
  for (int i = 0; i < kMaxTempFiles; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].state.store(2);
      return i;
    }
  }
  return -1;
}

void ReleaseTempFile(int slot) {
  if (slot >= 0 && slot < kMaxTempFiles) g_slots[slot].state.store(0);
}

void UnlinkTempFiles() {
  for (Slot& slot : g_slots) {
    if (slot.state.load() == 2) ::unlink(slot.path);
  }
}

}  // namespace internal

namespace {

// The signals that end a tool from outside: Ctrl-C, kill, a closed terminal.
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void RemoveTempFilesAndDie(int sig) {
  internal::UnlinkTempFiles();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void RemoveTempFilesOnSignal() {
  for (int sig : kCleanupSignals) {
    struct sigaction action {};
    action.sa_handler = RemoveTempFilesAndDie;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    ::sigaction(sig, &action, nullptr);
  }
}

}  // namespace pipecast
