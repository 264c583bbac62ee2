// An exclusive advisory lock (flock) on a lock file, held for the lifetime of the object, so that
// two processes never write the same output (a sweep's --out, a golden record, a bisect replay
// file) at once. The holder's PID is written into the lock file, so a refused process can name it.
// The lock file is removed when the lock is released; the kernel drops the lock when the holder
// exits however it exits (SIGKILL included), and the lock file such a holder leaves is reused. The descriptor is close-on-exec, so a server started by a
// sweep does not inherit (and outlive us holding) the lock.
#pragma once
#include <filesystem>
#include <string>
#include <sys/types.h>

namespace degen {

class FileLock {
 public:
  // Takes the lock on `lock_file` (created if absent) without waiting. InputError (exit 128) when
  // another process holds it: "<what>: <lock_file> is held by process PID ...".
  FileLock(const std::filesystem::path& lock_file, const std::string& what);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  int fd_ = -1;
  std::filesystem::path path_;
};

// Whether a process with this PID exists (kill(pid, 0): EPERM counts as alive).
bool process_alive(pid_t pid);

}  // namespace degen
