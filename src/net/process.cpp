// Process control for the servers the tool starts (net/process.h): a process group per server, a
// watcher that takes the group down with us, health polling, and a stop that leaves nothing behind.
#include "net/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <regex>
#include <thread>
#include <vector>

#include "net/http.h"
#include "util/error.h"
#include "util/output_file.h"

namespace degen {

namespace {

using clock_type = std::chrono::steady_clock;

// The process group of the server running now, so that an interrupted sweep (Ctrl-C, a job
// scheduler's SIGTERM) does not leave it running: the handler kills the group, then dies of the
// signal as it would have.
volatile std::sig_atomic_t g_server_group = 0;

void on_fatal_signal(int sig) {
  const pid_t g = static_cast<pid_t>(g_server_group);
  if (g > 0) ::kill(-g, SIGKILL);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// In the watcher (below): the sweep died, so the whole process group goes, the watcher with it.
void on_sweep_death(int) { ::kill(0, SIGKILL); }

// The child of the sweep that leads the server's process group: it runs `sh -c script` in a child
// of its own, waits for it and ends as it ended (the same status, or the same signal), so the sweep
// sees the server's exit. It exists for a SIGKILL of the sweep, which no handler sees: the kernel
// then sends the watcher SIGUSR1 (PR_SET_PDEATHSIG), and it kills the group: the server and
// anything the server started (a wrapper's children, vLLM's workers), which a death signal on the
// server alone would leave. The sweep may have died before prctl ran: getppid() then says so.
// SIGTERM, SIGINT and SIGHUP to the group are the server's (stop()): the watcher ignores them and
// waits. Only async-signal-safe calls after the fork. note: the death signal follows the thread
// that forked; the sweep forks from its main thread.
[[noreturn]] void watch_server(const char* script, pid_t sweep) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_IGN);
#ifdef __linux__
  struct sigaction sa {};
  sa.sa_handler = on_sweep_death;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGUSR1, &sa, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGUSR1);
  if (::getppid() != sweep) ::kill(0, SIGKILL);
#endif
  const pid_t watcher = ::getpid();
  const pid_t server = ::fork();
  if (server < 0) ::_exit(127);
  if (server == 0) {
#ifdef __linux__
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // should the watcher alone be killed
    if (::getppid() != watcher) ::_exit(127);
#endif
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGUSR1}) ::signal(sig, SIG_DFL);
    ::execl("/bin/sh", "sh", "-c", script, static_cast<char*>(nullptr));
    const char msg[] = "degenbisect: cannot run /bin/sh\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(server, &status, 0) < 0)
    if (errno != EINTR) ::_exit(127);
  if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);  // die of the server's signal, without a core file of our own
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::kill(watcher, sig);
  ::_exit(128 + sig);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return cat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return cat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return "stopped";
}

}  // namespace

SignalGuard::SignalGuard() {
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
  ::sigaction(SIGHUP, &sa, &old_hup_);
}

SignalGuard::~SignalGuard() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGHUP, &old_hup_, nullptr);
}

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw UntestableError(cat("cannot open a socket to find a free port: ", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int e = errno;
    ::close(fd);
    throw UntestableError(cat("cannot bind a local port: ", std::strerror(e)));
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string log_tail(const std::filesystem::path& path, int n) {
  // A log written in place into a FIFO or a device (util/output_file.h) is not read back: a FIFO
  // would block, /dev/full never ends.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "";
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    lines.push_back(line);
    if (lines.size() > static_cast<size_t>(n)) lines.erase(lines.begin());
  }
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : " | ") + l.substr(0, 300);
  return out;
}

std::string first_exception_line(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "";
  std::ifstream f(path, std::ios::binary);
  static const std::regex exception(R"((\b[A-Z][A-Za-z]*(Error|Exception): )|terminate called)");
  std::string line;
  while (std::getline(f, line))
    // a warning that names an exception it might cause (vLLM: "... fd limit errors like `OSError`") is not one
    if (line.find("WARNING") == std::string::npos && line.find("Warning") == std::string::npos &&
        std::regex_search(line, exception))
      return line.substr(0, 300);
  return "";
}

ServerProcess::ServerProcess(const std::string& command, const std::filesystem::path& log) : log_(log) {
  if (log.has_parent_path()) std::filesystem::create_directories(log.parent_path());
  const int fd = open_output_stream(log);  // a FIFO or /dev/null is written in place, never replaced
  const std::string script = "exec " + command;
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    throw UntestableError(cat("cannot start the server: fork failed: ", std::strerror(errno)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    watch_server(script.c_str(), parent);
  }
  ::setpgid(pid, pid);  // also in the parent: no race with a kill before the child ran setpgid
  ::close(fd);
  pid_ = pid;
  g_server_group = pid;
}

ServerProcess::~ServerProcess() {
  try {
    stop();
  } catch (...) {
  }
}

bool ServerProcess::poll_exit() {
  if (reaped_) return true;
  if (pid_ <= 0) return true;
  const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return reaped_;
}

bool ServerProcess::exited() { return pid_ > 0 && poll_exit(); }

std::string ServerProcess::exit_description() const { return describe_status(status_); }

void ServerProcess::wait_healthy(const std::string& base_url, double timeout_s) {
  net::check_timeout(timeout_s, "--health-timeout");
  const auto deadline = clock_type::now() + std::chrono::duration<double>(timeout_s);
  net::HttpOptions h;
  h.attempts = 1;
  h.timeout_s = 5;
  h.connect_timeout_s = 2;
  std::string last = "no answer yet";
  while (true) {
    if (poll_exit())
      throw UntestableError(cat("the server ", describe_status(status_), " before it was healthy; its log (", log_.string(),
                                ") ends: ", log_tail(log_, 3)));
    try {
      const net::HttpResponse r = net::request("GET", base_url + "/health", "", h);
      if (r.status == 200) return;
      last = cat("HTTP ", r.status);
    } catch (const Error& e) {
      last = e.what();  // still loading (503) or not listening yet
    }
    if (clock_type::now() >= deadline) {
      stop();
      throw UntestableError(cat("the server at ", base_url, " was not healthy after ", timeout_s,
                                " s (--health-timeout); last: ", last.substr(0, 200), "; its log (", log_.string(),
                                ") ends: ", log_tail(log_, 3)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

void ServerProcess::stop(double grace_s) {
  if (pid_ <= 0) return;
  if (!poll_exit()) {
    ::kill(-pid_, SIGTERM);
    const auto deadline = clock_type::now() + std::chrono::duration<double>(grace_s);
    while (!poll_exit() && clock_type::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!poll_exit()) {
      ::kill(-pid_, SIGKILL);
      while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {}
      reaped_ = true;
    }
  }
  ::kill(-pid_, SIGKILL);  // anything the server left in its group
  if (g_server_group == pid_) g_server_group = 0;
  pid_ = -1;
}


}  // namespace degen
