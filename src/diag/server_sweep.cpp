// sweep --server-cmd (server_sweep.h): start, wait for, score and stop one server per cell.
// The template is filled with shell-quoted values (fill_server_command); the server dies with us.
#include "diag/server_sweep.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "diag/evaluate.h"
#include "util/error.h"
#include "util/output_file.h"

namespace degen {

namespace {

// Where a placeholder stands in the template, as /bin/sh reads it.
enum class Quoting { none, single, dbl };

// `value` as literal text for sh at that place: one word outside quotes ('...', a ' as '\''),
// inside '...' a ' closes, escapes and reopens, inside "..." $ ` " \ get a backslash.
// A value of letters, digits and _ - . / : = , + @ % only is written as it is (no character of it
// means anything to sh), so that the usual command lines stay readable in logs and results.
std::string shell_literal(const std::string& value, Quoting q) {
  const bool plain = !value.empty() && value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                               "0123456789_-./:=,+@%") == std::string::npos;
  if (plain) return value;
  std::string out;
  if (q == Quoting::dbl) {
    for (char ch : value) {
      if (ch == '$' || ch == '`' || ch == '"' || ch == '\\') out += '\\';
      out += ch;
    }
    return out;
  }
  for (char ch : value) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q == Quoting::single ? out : "'" + out + "'";
}

}  // namespace

std::string fill_server_command(const std::string& raw, const std::vector<std::pair<std::string, std::string>>& params,
                                int port) {
  // One command line: a template written over several lines (with or without a trailing backslash)
  // is joined with spaces, so that sh does not run its later lines as other commands.
  std::string tmpl;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\\' && i + 1 < raw.size() && raw[i + 1] == '\n') {
      tmpl += ' ';
      ++i;
    } else {
      tmpl += raw[i] == '\n' || raw[i] == '\r' ? ' ' : raw[i];
    }
  }
  for (const auto& [k, v] : params)
    if (v.find('\0') != std::string::npos)
      input_error("--server-cmd: parameter '", k, "' has a NUL character in its value: a command line cannot hold it");
  std::string out;
  std::set<std::string> used;
  bool has_port = false;
  Quoting q = Quoting::none;  // the template's own quoting, followed so each value is quoted for its place
  for (size_t i = 0; i < tmpl.size(); ++i) {
    const char ch = tmpl[i];
    if (ch == '{' && i + 1 < tmpl.size() && tmpl[i + 1] == '{') { out += '{'; ++i; continue; }
    if (ch == '}' && i + 1 < tmpl.size() && tmpl[i + 1] == '}') { out += '}'; ++i; continue; }
    if (ch == '}') input_error("--server-cmd: a '}' without its '{' at character ", i + 1, " (write '}}' for a brace)");
    if (ch != '{') {
      out += ch;
      if (ch == '\\' && q != Quoting::single && i + 1 < tmpl.size() && tmpl[i + 1] != '{' && tmpl[i + 1] != '}') {
        out += tmpl[++i];  // an escaped character: no quote opens or closes here
      } else if (ch == '\'' && q != Quoting::dbl) {
        q = q == Quoting::single ? Quoting::none : Quoting::single;
      } else if (ch == '"' && q != Quoting::single) {
        q = q == Quoting::dbl ? Quoting::none : Quoting::dbl;
      }
      continue;
    }
    const size_t end = tmpl.find('}', i + 1);
    if (end == std::string::npos) input_error("--server-cmd: '{' at character ", i + 1, " is not closed (write '{{' for a brace)");
    const std::string key = tmpl.substr(i + 1, end - i - 1);
    if (key == "port") {
      out += std::to_string(port);
      has_port = true;
    } else {
      auto it = std::find_if(params.begin(), params.end(), [&](const auto& p) { return p.first == key; });
      if (it == params.end()) {
        std::string known = "port";
        for (const auto& p : params) known += ", " + p.first;
        input_error("--server-cmd: placeholder {", key, "} is neither {port} nor an axis or base parameter (have: ", known,
                    "); a brace the command itself needs, as in a JSON argument, is written '{{' and '}}'");
      }
      out += shell_literal(it->second, q);
      used.insert(key);
    }
    i = end;
  }
  if (q != Quoting::none)
    input_error("--server-cmd: a ", q == Quoting::single ? "'" : "\"", " quote is not closed: sh would refuse the command");
  if (!has_port)
    input_error("--server-cmd: the command has no {port}: the sweep picks a free port per server and needs to pass it "
                "(e.g. '--port {port}')");
  for (const auto& p : params)
    if (!used.count(p.first))
      input_error("--server-cmd: parameter '", p.first, "' is not used by the command (expected a {", p.first,
                  "} placeholder): its cells would all start the same server");
  return out;
}

CellParamsEvaluator server_sweep_evaluator(const GoldenRecord& rec, const Model& model, const Tokenizer* tok,
                                           const SweepMatrix& m, ServerSweepOptions o) {
  for (const auto& c : m.cells()) (void)fill_server_command(o.command, c.params, 1);  // every cell, before any work
  return [&rec, &model, tok, o](const SweepMatrix::Cell& c) {
    SignalGuard guard;
    const int port = free_local_port();
    const std::string command = fill_server_command(o.command, c.params, port);
    const std::filesystem::path log = o.out / "servers" / cat("cell-", c.index, ".log");
    std::filesystem::remove(log);
    ServerCompareOptions so = o.compare;
    so.url = cat("http://127.0.0.1:", port);
    CellSummary s;
    {
      ServerProcess server(command, log);
      server.wait_healthy(so.url, o.health_timeout_s);
      try {
        s = summarize_compare(compare_server(rec, model, tok, so, nullptr));
      } catch (const InputError& e) {
        // A malformed answer from this cell's server: the cell's error, the other cells still run.
        s.verdict = "error";
        s.reason = e.what();
      } catch (const UntestableError& e) {
        // The server died while it was being scored (a crash under this cell's flags): an error of
        // the cell, with how it died; a server that is alive but unreachable stays untestable.
        if (!server.exited()) throw;
        s.verdict = "error";
        s.reason = cat("the server ", server.exit_description(), " while it was scored (", std::string(e.what()).substr(0, 160),
                       "); its log ends: ", log_tail(log, 3));
      }
      server.stop();
    }
    if (s.detail.is_null()) s.detail = nlohmann::json::object();
    s.detail["server_command"] = command;
    s.detail["server_log"] = log.string();
    return s;
  };
}

}  // namespace degen
