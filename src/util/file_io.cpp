// Whole-file reads and writes (util/file_io.h).
#include "util/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"
#include "util/output_file.h"

namespace degen {

namespace fs = std::filesystem;

namespace {
std::string errno_str(int e) { return std::strerror(e); }
}  // namespace

void write_file_atomic(const fs::path& path, const std::string& text) { write_output_file(path, text); }

std::string read_file(const fs::path& path, uint64_t max_bytes) {
  const std::string p = path.string();
  // note: O_NONBLOCK so that opening a FIFO does not wait for a writer; it has no effect on the
  // reads of a regular file, and anything else is refused below before a byte is read.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) input_error("cannot read ", p, ": ", path_error_reason(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    input_error("cannot read ", p, ": stat: ", errno_str(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    input_error("cannot read ", p, ": expected a regular file, found ", kind_of(st.st_mode));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    input_error("cannot read ", p, ": file is ", size, " bytes, expected at most ", max_bytes,
                " bytes for this input");
  }
  // Exactly the size stat reported: a file that grows meanwhile cannot make the read unbounded.
  std::string out(static_cast<size_t>(size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      input_error("cannot read ", p, ": read error: ", errno_str(e));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  if (got != out.size())
    input_error("cannot read ", p, ": expected ", out.size(), " bytes (its size), read ", got,
                " (the file shrank while being read)");
  return out;
}

}  // namespace degen
