// Exclusive lock files (see file_lock.h).
#include "util/file_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace degen {

namespace {

// The PID the holder wrote into the lock file ("" when it has not written it yet).
std::string holder_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "";
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

FileLock::FileLock(const std::filesystem::path& lock_file, const std::string& what) : path_(lock_file) {
  for (;;) {
    fd_ = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) input_error(what, ": cannot open the lock file ", lock_file.string(), ": ", std::strerror(errno));
    int rc;
    while ((rc = ::flock(fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {}
    if (rc != 0) {
      const int err = errno;
      const std::string pid = err == EWOULDBLOCK ? holder_pid(fd_) : "";
      ::close(fd_);
      fd_ = -1;
      if (err != EWOULDBLOCK) input_error(what, ": cannot lock ", lock_file.string(), ": ", std::strerror(err));
      input_error(what, ": expected no other process using it, found ", lock_file.string(), " locked by process ",
                  pid.empty() ? std::string("(PID not yet written)") : pid,
                  "; wait for that process to finish (or stop it), or choose another output");
    }
    // The holder before us removes the file when it is done (~FileLock): a lock taken on a file that
    // is no longer at `lock_file` protects nothing, so take the one that is there now.
    struct stat held {}, now {};
    if (::fstat(fd_, &held) == 0 && ::stat(lock_file.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino)
      break;
    ::close(fd_);
    fd_ = -1;
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    // The lock itself is held; only the PID shown to a refused process is missing.
  }
}

FileLock::~FileLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still held: a process that opened it meanwhile sees it gone and retries
  ::close(fd_);             // releases the flock
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

}  // namespace degen
