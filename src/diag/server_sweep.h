// sweep --server-cmd: a sweep whose cells are server command lines (docs/server.md, "Sweeps over
// server flags"). Per cell: the command template is filled with the cell's parameters and a free
// port, started in its own process group (its output in OUT/servers/cell-N.log), waited for until
// GET /health answers 200 (bounded), scored by compare_server, and stopped (SIGTERM, then SIGKILL).
// A server that exits or stays unhealthy is the cell's "untestable" verdict with the log's last lines.
#pragma once
#include <filesystem>
#include <string>
#include <sys/types.h>
#include <vector>

#include "diag/server_compare.h"
#include "diag/sweep.h"

namespace degen {

// "{port}" and "{KEY}" for each parameter of the cell; "{{" and "}}" are braces; line breaks (with or
// without a backslash before them) become spaces: one command line, which /bin/sh runs. Each value
// is quoted for its place in the template (outside quotes, inside '...', inside "..."), so that sh
// hands it over as literal text: $(...), `...`, ;, * and quotes in a value run nothing (a value of
// letters, digits and _-./:=,+@% only is written as it is).
// InputError: a placeholder that is neither port nor a parameter, a parameter the template does not
// use (a sweep over nothing), no {port}, a quote the template leaves open, a NUL in a value.
std::string fill_server_command(const std::string& tmpl, const std::vector<std::pair<std::string, std::string>>& params,
                                int port);

// A free TCP port on 127.0.0.1 (bound to port 0 and released: another process may take it first, in
// which case the server fails to start and the cell says so).
int free_local_port();

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

struct ServerSweepOptions {
  std::string command;               // the template
  double health_timeout_s = 120;
  std::filesystem::path out;         // the sweep's --out (logs under servers/)
  ServerCompareOptions compare;      // url is set per cell
};

// Throws InputError now when a cell's command cannot be filled.
CellParamsEvaluator server_sweep_evaluator(const GoldenRecord& rec, const Model& model, const Tokenizer* tok,
                                           const SweepMatrix& m, ServerSweepOptions o);

}  // namespace degen
