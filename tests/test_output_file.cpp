// The one output rule (src/util/output_file.h): regular files replaced atomically, symbolic links
// followed, a loop or a socket or a folder refused with an InputError naming the path; a failed
// producer leaves the old content and no temporary file. The device and FIFO cases, which need
// root for private nodes, are in tests/cli/outputs.sh.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "helpers.h"
#include "util/error.h"
#include "util/output_file.h"

namespace fs = std::filesystem;
using degen::test::TempDir;

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
size_t entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}
std::string error_of(const fs::path& p, const std::string& text = "x") {
  try {
    degen::write_output_file(p, text);
  } catch (const degen::InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("output file: a regular file is replaced, a symbolic link followed and kept") {
  TempDir d("out");
  degen::write_output_file(d / "a.json", "one");
  degen::write_output_file(d / "a.json", "two");
  CHECK(slurp(d / "a.json") == "two");
  ::chmod((d / "a.json").c_str(), 0600);
  degen::write_output_file(d / "a.json", "three");
  struct stat st {};
  REQUIRE(::stat((d / "a.json").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);  // a replaced file keeps its permissions

  fs::create_directory(d / "sub");
  fs::create_symlink("sub/target.json", d / "link.json");  // dangling: the target is created
  degen::write_output_file(d / "link.json", "via link");
  CHECK(fs::is_symlink(d / "link.json"));
  CHECK(slurp(d / "sub" / "target.json") == "via link");
  degen::write_output_file(d / "link.json", "again");
  CHECK(fs::is_symlink(d / "link.json"));
  CHECK(slurp(d / "sub" / "target.json") == "again");
  CHECK(entries(d / "sub") == 1);  // no temporary left beside the target
}

TEST_CASE("output file: a failed producer leaves the old content and no temporary file") {
  TempDir d("out");
  degen::write_output_file(d / "a.json", "old");
  CHECK_THROWS(degen::write_output_file(d / "a.json", [](const degen::OutputSink& sink) {
    sink("new", 3);
    throw degen::InputError("producer failed");
  }));
  CHECK(slurp(d / "a.json") == "old");
  CHECK(entries(d.path()) == 1);
}

TEST_CASE("output file: loops, folders, sockets and missing folders are input errors naming the path") {
  TempDir d("out");
  fs::create_symlink("loop", d / "loop");
  const std::string loop = error_of(d / "loop");
  CHECK(loop.find((d / "loop").string()) != std::string::npos);
  CHECK(loop.find(std::strerror(ELOOP)) != std::string::npos);
  CHECK(fs::is_symlink(d / "loop"));

  CHECK(error_of(d.path()).find("it is a folder; expected a file name") != std::string::npos);
  CHECK(error_of(d / "no" / "such" / "a.json").find("does not exist") != std::string::npos);
  std::ofstream(d / "file") << "keep";
  CHECK(error_of(d / "file" / "a.json").find("a part of the path is a file") != std::string::npos);
  CHECK(slurp(d / "file") == "keep");

  const fs::path sock = d / "s";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  if (sock.string().size() < sizeof addr.sun_path && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    CHECK(error_of(sock).find("it is a socket") != std::string::npos);
    CHECK(fs::is_socket(sock));
  }
  ::close(fd);

  CHECK_THROWS_AS(degen::check_output_file((d / "loop").string(), "--json"), degen::InputError);
  CHECK_NOTHROW(degen::check_output_file((d / "new.json").string(), "--json"));
  CHECK_THROWS_AS(degen::check_output_folder((d / "file").string(), "--out"), degen::InputError);
  CHECK_NOTHROW(degen::check_output_folder((d / "new" / "folder").string(), "--out"));
}

TEST_CASE("output file: a filesystem_error is described by its path and reason") {
  const std::filesystem::filesystem_error e("status", fs::path("some/loop"), std::make_error_code(std::errc::too_many_symbolic_link_levels));
  const std::string s = degen::describe_filesystem_error(e);
  CHECK(s.find("cannot use some/loop: ") == 0);
  CHECK(s.find("a symbolic link loop") != std::string::npos);
}
