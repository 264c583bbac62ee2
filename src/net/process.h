// Process control for the servers the tool starts itself (compare --server-cmd, sweep --server-cmd):
// each runs in a process group of its own, dies with the tool (Ctrl-C, SIGTERM, even SIGKILL), is
// polled until healthy, and is stopped with everything it started.
#pragma once
#include <sys/types.h>

#include <csignal>
#include <filesystem>
#include <string>

namespace degen {

// A free TCP port on 127.0.0.1 (bound to port 0 and released: another process may take it first, in
// which case the server fails to start and says so).
int free_local_port();

// While one lives, SIGINT, SIGTERM and SIGHUP kill the process group of the server running now (the
// last ServerProcess started and not stopped), then end this process by the same signal, as it
// would have ended without the guard: an interrupted run leaves no server behind.
class SignalGuard {
 public:
  SignalGuard();
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {}, old_hup_ {};
};

// One started server. The destructor stops it.
class ServerProcess {
 public:
  // sh -c 'exec COMMAND' in a new process group, stdout and stderr appended to `log`. The group's
  // leader is a watcher that runs it and ends as it ends; when this process dies (a SIGKILL
  // included: PR_SET_PDEATHSIG) the watcher kills the group, the server's own children included.
  ServerProcess(const std::string& command, const std::filesystem::path& log);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Polls GET base_url/health until 200; UntestableError when the process exits first (its status
  // and the log's last lines) or `timeout_s` passes.
  void wait_healthy(const std::string& base_url, double timeout_s);
  // SIGTERM to the group, up to `grace_s` to exit, then SIGKILL. Idempotent.
  void stop(double grace_s = 10);
  pid_t pid() const { return pid_; }
  // Whether the process has exited by itself, and how ("exited with status 1", "was killed by signal 11 ...").
  bool exited();
  std::string exit_description() const;

 private:
  pid_t pid_ = -1;
  std::filesystem::path log_;
  bool reaped_ = false;
  int status_ = 0;
  bool poll_exit();  // true when the process has exited (status_ set)
};

// The last `n` lines of a file (for error messages), "" when it cannot be read.
std::string log_tail(const std::filesystem::path& path, int n);
// The first line of a server's log that states an exception ("TypeError: ...", "RuntimeError: ...",
// "terminate called ..."), warnings left out, its first 300 bytes; "" when none (or the log is not a
// regular file). A
// server whose engine died behind a live HTTP front end answers "500: see stack trace above": this
// line is the cause.
std::string first_exception_line(const std::filesystem::path& path);

}  // namespace degen
