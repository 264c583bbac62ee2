// sweep --server-cmd: a sweep whose cells are server command lines (docs/server.md, "Sweeps over
// server flags"). Per cell: the command template is filled with the cell's parameters and a free
// port, started in its own process group (its output in OUT/servers/cell-N.log), waited for until
// GET /health answers 200 (bounded), scored by compare_server, and stopped (SIGTERM, then SIGKILL).
// A server that exits or stays unhealthy is the cell's "untestable" verdict with the log's last lines.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "subjects/server/compare.h"
#include "diag/sweep.h"
#include "net/process.h"

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
