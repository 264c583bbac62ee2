// The one output rule (output_file.h): regular files replaced atomically, character devices and
// FIFOs written in place, the rest refused; symbolic links followed; path errors named.
#include "util/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <streambuf>
#include <vector>

#include "util/error.h"

namespace degen {
namespace fs = std::filesystem;

namespace {

// Symbolic links followed from the given name before it counts as a loop: Linux's own limit for one
// path lookup (MAXSYMLINKS = 40 in the kernel's fs/namei.c), so we give up where open() would.
constexpr int kMaxSymlinkHops = 40;


// Where an output named `asked` goes: its last component's symbolic links followed.
struct Target {
  fs::path asked;
  fs::path path;  // == asked unless asked is a symbolic link
  bool exists = false;
  struct stat st {};

  // "out.json", or "out.json (a symbolic link to /data/out.json)" when they differ.
  std::string name() const {
    return path == asked ? asked.string() : cat(asked.string(), " (a symbolic link to ", path.string(), ")");
  }
  fs::path folder() const { return path.has_parent_path() ? path.parent_path() : fs::path("."); }
  bool in_place() const { return exists && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)); }
};

Target resolve(const fs::path& asked) {
  if (asked.empty()) input_error("cannot write an output: the file name is empty");
  Target t;
  t.asked = asked;
  t.path = asked;
  for (int hops = 0;; ++hops) {
    if (::lstat(t.path.c_str(), &t.st) != 0) {
      const int e = errno;
      if (e == ENOENT) return t;  // a new name (a missing folder above it is reported by the writer)
      input_error("cannot write ", t.name(), ": ", path_error_reason(e));
    }
    if (!S_ISLNK(t.st.st_mode)) {
      t.exists = true;
      return t;
    }
    if (hops == kMaxSymlinkHops)
      input_error("cannot write ", asked.string(), ": ", path_error_reason(ELOOP), "; expected a file name");
    std::vector<char> buf(PATH_MAX);
    const ssize_t n = ::readlink(t.path.c_str(), buf.data(), buf.size());
    if (n < 0) input_error("cannot write ", t.name(), ": reading the symbolic link: ", path_error_reason(errno));
    if (static_cast<size_t>(n) == buf.size()) input_error("cannot write ", t.name(), ": ", path_error_reason(ENAMETOOLONG));
    const fs::path link(std::string(buf.data(), static_cast<size_t>(n)));
    t.path = link.is_absolute() || !t.path.has_parent_path() ? link : t.path.parent_path() / link;
  }
}

// Refuses what is neither replaced nor written in place.
void check_kind(const Target& t) {
  if (!t.exists || S_ISREG(t.st.st_mode) || t.in_place()) return;
  if (S_ISDIR(t.st.st_mode)) input_error("cannot write ", t.name(), ": it is a folder; expected a file name");
  input_error("cannot write ", t.name(), ": it is ", kind_of(t.st.st_mode),
              "; expected a regular file, a new name, a character device (such as /dev/null) or a named pipe");
}

// SIGPIPE ignored while writing into a FIFO or a device, so that a reader that went away is a write
// error (EPIPE, exit 128 with a message), not a silent death of the process.
class IgnoreSigpipe {
 public:
  IgnoreSigpipe() {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    ok_ = ::sigaction(SIGPIPE, &ign, &old_) == 0;
  }
  ~IgnoreSigpipe() {
    if (ok_) ::sigaction(SIGPIPE, &old_, nullptr);
  }

 private:
  struct sigaction old_ {};
  bool ok_ = false;
};

// Writes n bytes to fd; false with errno set on a write error.
bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void write_in_place(const Target& t, const std::function<void(const OutputSink&)>& produce) {
  IgnoreSigpipe guard;
  // No O_CREAT, no O_TRUNC: the node is written, never replaced.
  const int fd = ::open(t.path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) input_error("cannot write ", t.name(), ": ", path_error_reason(errno));
  const OutputSink sink = [&](const void* data, size_t n) {
    if (!write_all(fd, data, n)) input_error("cannot write ", t.name(), ": write: ", path_error_reason(errno));
  };
  try {
    produce(sink);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) input_error("cannot write ", t.name(), ": close: ", path_error_reason(errno));
}

// A temporary file in the target's folder, fsync, rename over the target. A failure (or an
// exception from `produce`) removes the temporary file and leaves the target as it was.
void write_replacing(const Target& t, const std::function<void(const OutputSink&)>& produce) {
  static std::atomic<unsigned> counter{0};
  const fs::path dir = t.folder();
  const fs::path tmp = dir / cat(".", t.path.filename().string(), ".tmp-", ::getpid(), "-", counter++);
  const mode_t mode = t.exists ? (t.st.st_mode & 07777) : 0644;  // a replaced file keeps its permissions
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int e = errno;
    struct stat ds {};
    if (e == ENOENT && ::stat(dir.c_str(), &ds) != 0)
      input_error("cannot write ", t.name(), ": the folder ", dir.string(), " does not exist");
    input_error("cannot write ", t.name(), ": creating a temporary file in ", dir.string(), ": ", path_error_reason(e));
  }
  bool fd_open = true;
  auto fail = [&](const char* what, int e) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fd_open = false;
    input_error("cannot write ", t.name(), ": ", what, ": ", path_error_reason(e));
  };
  const OutputSink sink = [&](const void* data, size_t n) {
    if (!write_all(fd, data, n)) fail("write", errno);
  };
  try {
    produce(sink);
  } catch (...) {
    if (fd_open) {  // else fail() closed and removed the temporary file
      ::close(fd);
      ::unlink(tmp.c_str());
    }
    throw;
  }
  if (::fchmod(fd, mode) != 0) fail("chmod", errno);
  if (::fsync(fd) != 0) fail("fsync", errno);
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    input_error("cannot write ", t.name(), ": close: ", path_error_reason(e));
  }
  if (::rename(tmp.c_str(), t.path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    input_error("cannot write ", t.name(), ": rename from ", tmp.string(), ": ", path_error_reason(e));
  }
  // Make the rename itself durable; a failure here is not worth failing the write for.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// Rethrows an InputError from `fn` with `flag` in front, so a pre-run check names the option.
template <typename F>
void with_flag(const std::string& flag, F&& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    input_error(flag, ": ", e.what());
  }
}

// The nearest existing folder at or above `p` (lexically), for a folder that will be created.
fs::path nearest_existing(fs::path p) {
  while (true) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 || errno != ENOENT) return p;
    if (!p.has_parent_path() || p.parent_path() == p) return fs::path(".");
    p = p.parent_path();
  }
}

}  // namespace

void write_output_file(const fs::path& path, const std::function<void(const OutputSink&)>& produce) {
  const Target t = resolve(path);
  check_kind(t);
  if (t.in_place()) write_in_place(t, produce);
  else write_replacing(t, produce);
}

void write_output_file(const fs::path& path, const std::string& text) {
  write_output_file(path, [&](const OutputSink& sink) { sink(text.data(), text.size()); });
}

namespace {

// The first OS error of a write to stdout (0: none yet).
std::atomic<int> stdout_errno{0};

// The cookie stream's write: all of it to fd 1, or -1 with the error kept.
ssize_t write_fd1(void*, const char* data, size_t n) {
  if (write_all(STDOUT_FILENO, data, n)) return static_cast<ssize_t>(n);
  int expected = 0;
  stdout_errno.compare_exchange_strong(expected, errno ? errno : EIO);
  return -1;
}

// std::cout (CLI11's --help and --version) into C's `stdout`, whatever stream that is now.
class StdoutBuf : public std::streambuf {
 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    return std::fputc(c, stdout) == EOF ? traits_type::eof() : c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    return static_cast<std::streamsize>(std::fwrite(s, 1, static_cast<size_t>(n), stdout));
  }
  int sync() override { return std::fflush(stdout) == 0 ? 0 : -1; }
};

// "stdout (/dev/full)", "stdout (pipe:[1234])": what fd 1 is, for messages; "stdout" when /proc cannot say.
std::string stdout_name() {
  std::vector<char> buf(PATH_MAX);
  const ssize_t n = ::readlink("/proc/self/fd/1", buf.data(), buf.size());
  if (n <= 0 || static_cast<size_t>(n) == buf.size()) return "stdout";
  return cat("stdout (", std::string(buf.data(), static_cast<size_t>(n)), ")");
}

}  // namespace

void install_stdout_check() {
  cookie_io_functions_t io{};
  io.write = write_fd1;
  std::FILE* f = ::fopencookie(nullptr, "w", io);
  if (f == nullptr) return;  // out of memory at start-up: stdout stays glibc's own (still checked by ferror)
  std::setvbuf(f, nullptr, ::isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF, BUFSIZ);
  std::fflush(stdout);
  stdout = f;  // glibc: stdin, stdout and stderr are ordinary variables
  // Never destroyed: std::cout is flushed once more after main() returns, by its own static clean-up.
  static StdoutBuf* const cout_buf = new StdoutBuf;
  std::cout.rdbuf(cout_buf);
}

std::string stdout_failure() {
  std::cout.flush();
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout);
  const int err = stdout_errno.load();
  if (!failed && err == 0) return "";
  return cat("cannot write ", stdout_name(), ": write: ",
             err ? path_error_reason(err) : std::string("the write failed (the OS gave no reason)"));
}

int open_output_stream(const fs::path& path) {
  const Target t = resolve(path);
  check_kind(t);
  const int flags = O_WRONLY | O_APPEND | O_CLOEXEC | (t.in_place() ? 0 : O_CREAT | O_TRUNC);
  const int fd = ::open(t.path.c_str(), flags, 0644);
  if (fd < 0) {
    const int e = errno;
    struct stat ds {};
    if (e == ENOENT && ::stat(t.folder().c_str(), &ds) != 0)
      input_error("cannot write ", t.name(), ": the folder ", t.folder().string(), " does not exist");
    input_error("cannot write ", t.name(), ": ", path_error_reason(e));
  }
  return fd;
}

void check_output_file(const std::string& path, const std::string& flag) {
  if (path.empty() || path == "-") return;
  with_flag(flag, [&] {
    const Target t = resolve(path);
    check_kind(t);
    if (t.in_place()) {
      // Opening a FIFO to probe it would end its reader's input: ask for permission only.
      if (::access(t.path.c_str(), W_OK) != 0) input_error("cannot write ", t.name(), ": ", path_error_reason(errno));
      return;
    }
    const fs::path dir = t.folder();
    struct stat ds {};
    if (::stat(dir.c_str(), &ds) != 0) {
      if (errno == ENOENT) input_error("cannot write ", t.name(), ": the folder ", dir.string(), " does not exist");
      input_error("cannot write ", t.name(), ": folder ", dir.string(), ": ", path_error_reason(errno));
    }
    if (!S_ISDIR(ds.st_mode))
      input_error("cannot write ", t.name(), ": ", dir.string(), " is ", kind_of(ds.st_mode), ", not a folder");
    // A probe file, not access(): root passes access() on a folder it still cannot write (/proc).
    const fs::path probe = dir / cat(".degenbisect-write-probe-", ::getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
      input_error("cannot write ", t.name(), ": cannot write into folder ", dir.string(), " (", path_error_reason(errno),
                  "); expected a writable folder (checked before the run)");
    ::close(fd);
    ::unlink(probe.c_str());
  });
}

void check_output_folder(const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  with_flag(flag, [&] {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        input_error("cannot write into ", path, ": it is ", kind_of(st.st_mode), "; expected a folder (or a new name)");
      return;  // an existing folder: what may be replaced in it is the command's own decision
    }
    if (errno != ENOENT) input_error("cannot write into ", path, ": ", path_error_reason(errno));
    struct stat lst {};
    if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
      return;  // a dangling symbolic link: creating its target is the command's business
    const fs::path up = nearest_existing(fs::path(path));
    struct stat us {};
    if (::stat(up.c_str(), &us) != 0) input_error("cannot create ", path, ": ", up.string(), ": ", path_error_reason(errno));
    if (!S_ISDIR(us.st_mode))
      input_error("cannot create the folder ", path, ": ", up.string(), " is ", kind_of(us.st_mode), ", not a folder");
    if (::access(up.c_str(), W_OK | X_OK) != 0)
      input_error("cannot create the folder ", path, ": cannot write into ", up.string(), " (", path_error_reason(errno), ")");
  });
}

std::string path_error_reason(int err) {
  const std::string s = std::strerror(err);
  switch (err) {
    case ELOOP: return s + ": a symbolic link loop, or a chain of more than 40 links";
    case ENOTDIR: return s + ": a part of the path is a file, not a folder";
    default: return s;
  }
}

std::string describe_filesystem_error(const fs::filesystem_error& e) {
  // libstdc++: "filesystem error: <operation>: <reason> [path1] [path2]"; keep the operation.
  std::string op = e.what();
  const std::string prefix = "filesystem error: ";
  if (op.rfind(prefix, 0) == 0) op = op.substr(prefix.size());
  const size_t colon = op.find(": ");
  op = colon == std::string::npos ? std::string() : op.substr(0, colon);
  std::string paths = e.path1().string();
  if (!e.path2().empty()) paths += (paths.empty() ? "" : " -> ") + e.path2().string();
  if (paths.empty()) paths = "a path";
  return cat("cannot use ", paths, ": ", path_error_reason(e.code().value()), op.empty() ? "" : cat(" (operation: ", op, ")"));
}

const char* kind_of(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a folder";
  if (S_ISFIFO(m)) return "a named pipe (FIFO)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "an unknown kind of file";
}

}  // namespace degen
