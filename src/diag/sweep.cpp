// Sweep over a toggle matrix (see sweep.h).
#include "diag/sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "record/golden_record.h"
#include "model/digests.h"
#include "model/model.h"
#include "util/file_io.h"
#include "util/error.h"
#include "util/file_lock.h"
#include "util/json_input.h"
#include "util/json_number.h"
#include "util/json_output.h"
#include "util/sha256.h"

namespace degen {

using nlohmann::json;

namespace {

// "k=v,k2=v2" whose every key is a parameter name (a letter or '_', then letters, digits, '_'): a group
// value of a server sweep, setting several parameters at once.
bool group_fragment(const std::string& value) {
  size_t start = 0;
  while (start <= value.size()) {
    const size_t end = std::min(value.find(',', start), value.size());
    const std::string part = value.substr(start, end - start);
    const size_t eq = part.find('=');
    if (eq == std::string::npos || eq == 0 || !(std::isalpha(static_cast<unsigned char>(part[0])) || part[0] == '_')) return false;
    for (size_t i = 0; i < eq; ++i)
      if (!std::isalnum(static_cast<unsigned char>(part[i])) && part[i] != '_') return false;
    start = end + 1;
  }
  return true;
}

std::string fragment(const std::string& axis, const std::string& value) {
  return value.find('=') == std::string::npos ? axis + "=" + value : value;
}

std::optional<double> opt_num(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (j[key].is_number()) return j[key].get<double>();
  if (j[key].is_string()) {
    std::string s = j[key];
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    if (s == "nan") return NAN;
  }
  return std::nullopt;
}

json num_json(std::optional<double> v) {
  if (!v) return nullptr;
  if (std::isnan(*v)) return "nan";
  if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
  return *v;
}

bool is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

std::string fmt_seconds(double s) {
  char b[32];
  if (s < 60) std::snprintf(b, sizeof b, "%.0fs", s);
  else if (s < 3600) std::snprintf(b, sizeof b, "%.0fm%02.0fs", std::floor(s / 60), std::fmod(s, 60));
  else std::snprintf(b, sizeof b, "%.0fh%02.0fm", std::floor(s / 3600), std::fmod(s / 60, 60));
  return b;
}

// Appends one line and makes it durable before returning (a SIGKILL after this loses nothing).
void append_line(const std::filesystem::path& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) input_error(path.string(), ": cannot open for appending: ", std::strerror(errno));
  std::string data = line + "\n";
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      input_error(path.string(), ": write failed: ", std::strerror(errno));
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
}

// Drops a partial last line (no newline) left by a kill mid-write, so the next append starts clean.
void truncate_partial_tail(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return;
  std::string text = read_file(path);
  size_t keep = text.rfind('\n');
  keep = keep == std::string::npos ? 0 : keep + 1;
  if (keep != text.size()) std::filesystem::resize_file(path, keep);
}

// Runs eval in a forked child; a crash (signal) or an exception becomes an "error" summary.
CellSummary eval_isolated(const std::function<CellSummary()>& eval) {
  int fds[2];
  if (::pipe(fds) != 0) input_error("sweep --isolate: pipe failed: ", std::strerror(errno));
  std::fflush(nullptr);
  [[maybe_unused]] const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) input_error("sweep --isolate: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    // The cell dies with the sweep (a SIGKILL of the sweep would leave it computing, orphaned); the
    // parent may have died before prctl ran, then getppid() is no longer it.
#ifdef __linux__
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
#endif
    // The child reports a crash by dying of it: drop any inherited crash handlers.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, SIG_DFL);
    ::close(fds[0]);
    std::string out;
    try {
      out = json_text(cell_summary_to_json(eval()));
    } catch (const std::exception& e) {
      CellSummary s;
      s.verdict = "error";
      s.reason = e.what();
      out = json_text(cell_summary_to_json(s));
    }
    const char* p = out.data();
    size_t left = out.size();
    while (left > 0) {
      ssize_t w = ::write(fds[1], p, left);
      if (w <= 0) break;
      p += w;
      left -= static_cast<size_t>(w);
    }
    ::close(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string got;
  char buf[65536];
  ssize_t r;
  while ((r = ::read(fds[0], buf, sizeof buf)) > 0 || (r < 0 && errno == EINTR))
    if (r > 0) got.append(buf, static_cast<size_t>(r));
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  CellSummary s;
  if (WIFSIGNALED(status)) {
    s.verdict = "error";
    s.reason = cat("cell process killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
    return s;
  }
  json j = json::parse(got, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    s.verdict = "error";
    s.reason = cat("cell process exited with status ", WEXITSTATUS(status), " without a result");
    return s;
  }
  return cell_summary_from_json(j);
}

// A params-only fragment "k=v,k2=v2" as key/value pairs (a value without '=' was made "axis=value"
// by fragment()). Later keys replace earlier ones, keeping the first position.
// One parameter: a later value of a key replaces the earlier one, keeping the first position.
void set_param(std::vector<std::pair<std::string, std::string>>& params, const std::string& k, const std::string& v) {
  auto it = std::find_if(params.begin(), params.end(), [&](const auto& p) { return p.first == k; });
  if (it != params.end()) it->second = v;
  else params.emplace_back(k, v);
}

void apply_params(std::vector<std::pair<std::string, std::string>>& params, const std::string& frag) {
  std::string cur;
  auto flush = [&]() {
    if (cur.empty()) return;
    auto eq = cur.find('=');
    if (eq == std::string::npos || eq == 0) input_error("'", cur, "': expected key=value");
    set_param(params, cur.substr(0, eq), cur.substr(eq + 1));
    cur.clear();
  };
  for (char ch : frag) {
    if (ch == ',') flush();
    else cur += ch;
  }
  flush();
}

std::string params_name(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string n;
  for (const auto& [k, v] : params) n += (n.empty() ? "" : ",") + k + "=" + v;
  return n.empty() ? "default" : n;
}

}  // namespace

size_t SweepMatrix::count() const {
  // The product of the axis sizes with overflow checks, before anything is enumerated.
  size_t total = 1;
  bool overflow = false;
  // An axis given twice would be merged: the later one's values replace the earlier one's in every
  // cell, and the main effects would list values that never ran.
  std::map<std::string, size_t> first;  // axis name -> its first position
  for (size_t a = 0; a < axes.size(); ++a) {
    const auto [it, fresh] = first.emplace(axes[a].name, a);
    if (!fresh)
      input_error("sweep matrix '", name, "': axis '", axes[a].name, "' is given twice (axes ", it->second + 1, " and ", a + 1,
                  "); expected each axis once: put all its values in one axis");
  }
  for (const auto& a : axes) {
    if (a.values.empty()) input_error("sweep matrix '", name, "': axis '", a.name, "' has no values");
    if (!overflow && __builtin_mul_overflow(total, a.values.size(), &total)) overflow = true;
  }
  if (axes.empty()) total = cells_extra.empty() ? 1 : 0;
  if (!overflow && __builtin_add_overflow(total, cells_extra.size(), &total)) overflow = true;
  if (overflow || total > kMaxSweepCells) {
    std::string shape;
    for (const auto& a : axes) shape += (shape.empty() ? "" : " x ") + std::to_string(a.values.size());
    if (shape.empty()) shape = "no axes";
    input_error("sweep matrix '", name, "': expected at most ", kMaxSweepCells, " cells, found ",
                overflow ? std::string("more than 2^64") : std::to_string(total), " (", axes.size(), " axes: ", shape,
                cells_extra.empty() ? std::string() : cat(", plus ", cells_extra.size(), " extra cells"),
                "); split the matrix into smaller sweeps (fewer axes or values)");
  }
  return total;
}

std::vector<SweepMatrix::Cell> SweepMatrix::cells() const {
  // A fragment on top of a cell: toggles parsed into its RunConfig, or (params_only) free key=value
  // parameters of a server's command line.
  auto apply = [&](Cell& c, const std::string& frag) {
    if (params_only) apply_params(c.params, frag);
    else c.config = apply_run_config(c.config, frag);
  };
  Cell base_cell;
  try {
    apply(base_cell, base);
  } catch (const InputError& e) {
    input_error("sweep matrix '", name, "': base: ", e.what());
  }
  const size_t total = count() - cells_extra.size();  // the axis combinations
  std::vector<Cell> out;
  std::set<std::string> seen;
  auto add = [&](Cell c) {
    c.name = params_only ? params_name(c.params) : c.config.str();
    c.index = out.size();
    if (seen.insert(c.name).second) out.push_back(std::move(c));  // else two combinations that mean the same cell
  };
  for (size_t idx = 0; idx < total; ++idx) {
    Cell c = base_cell;
    size_t rem = idx;
    std::vector<size_t> pick(axes.size());
    for (size_t a = axes.size(); a-- > 0;) {
      pick[a] = rem % axes[a].values.size();
      rem /= axes[a].values.size();
    }
    for (size_t a = 0; a < axes.size(); ++a) {
      const std::string& v = axes[a].values[pick[a]];
      try {
        if (params_only && !group_fragment(v)) {
          // A server parameter's value is literal text (a JSON flag value holds ',' and '='), unless it
          // is a group of key=value pairs whose keys are parameter names ("ctk=f16,ctv=f16").
          set_param(c.params, axes[a].name, v);
        } else {
          apply(c, fragment(axes[a].name, v));
        }
      } catch (const InputError& e) {
        input_error("sweep matrix '", name, "': axis '", axes[a].name, "' value '", v, "': ", e.what());
      }
      c.values.push_back(v);
    }
    add(std::move(c));
  }
  for (const auto& f : cells_extra) {
    Cell c = base_cell;
    try {
      apply(c, f);
    } catch (const InputError& e) {
      input_error("sweep matrix '", name, "': cell '", f, "': ", e.what());
    }
    add(std::move(c));
  }
  return out;
}

SweepMatrix load_sweep_matrix(const std::filesystem::path& path, bool params_only) {
  // A key twice in one object (two "fa" axes in the object form) would be kept once, silently.
  std::vector<std::set<std::string>> keys;  // per open object
  const json::parser_callback_t unique_keys = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) keys.emplace_back();
    else if (ev == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (ev == json::parse_event_t::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
      input_error(path.string(), ": key '", parsed.get<std::string>().substr(0, 60), "' appears twice in one object; expected ",
                  "each key once (an axis given twice: put all its values in one axis)");
    return true;
  };
  json j = parse_json(read_file(path, kMaxInputFileBytes), path.string(), false, unique_keys);
  if (j.is_discarded() || !j.is_object()) input_error(path.string(), ": not a JSON object");
  SweepMatrix m;
  m.params_only = params_only;
  auto str_field = [&](const char* key, std::string& out) {
    if (!j.contains(key)) return;
    if (!j[key].is_string()) input_error(path.string(), ": field '", key, "': expected a string, found ", json_excerpt(j[key]));
    out = j[key].get<std::string>();
  };
  m.name = path.stem().string();
  str_field("name", m.name);
  str_field("base", m.base);
  auto values_of = [&](const std::string& axis, const json& v) {
    if (!v.is_array() || v.empty()) input_error(path.string(), ": axis '", axis, "': expected a non-empty list of strings");
    std::vector<std::string> out;
    for (const auto& e : v) {
      if (e.is_string()) out.push_back(e.get<std::string>());
      else if (e.is_number_integer()) out.push_back(std::to_string(e.get<int64_t>()));
      else input_error(path.string(), ": axis '", axis, "': value ", json_excerpt(e), " is not a string");
    }
    return out;
  };
  if (j.contains("axes")) {
    const json& ax = j["axes"];
    if (ax.is_object()) {
      for (auto& [k, v] : ax.items()) m.axes.push_back({k, values_of(k, v)});
    } else if (ax.is_array()) {
      for (const auto& a : ax) {
        if (!a.is_object() || !a.contains("name") || !a["name"].is_string() || !a.contains("values"))
          input_error(path.string(), ": each entry of 'axes' needs \"name\" and \"values\", found ", json_excerpt(a));
        std::string n = a["name"];
        m.axes.push_back({n, values_of(n, a["values"])});
      }
    } else {
      input_error(path.string(), ": field 'axes': expected a list or an object");
    }
  }
  if (j.contains("cells")) m.cells_extra = values_of("cells", j["cells"]);
  for (auto& [k, v] : j.items())
    if (k != "name" && k != "base" && k != "axes" && k != "cells" && k != "description")
      input_error(path.string(), ": unknown field '", k, "' (expected name, description, base, axes, cells)");
  (void)m.cells();  // validate every cell now, before any work
  return m;
}

SweepMatrix sweep_matrix_from_axes(const std::string& base, const std::vector<std::string>& axis_args,
                                   bool params_only) {
  SweepMatrix m;
  m.params_only = params_only;
  m.base = base;
  for (const auto& a : axis_args) {
    auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == a.size())
      input_error("--axis '", a, "': expected key=v1,v2,...");
    SweepAxis ax{a.substr(0, eq), {}};
    std::string rest = a.substr(eq + 1), cur;
    for (char ch : rest + ",") {
      if (ch == ',') {
        if (cur.empty()) input_error("--axis '", a, "': empty value");
        ax.values.push_back(cur);
        cur.clear();
      } else cur += ch;
    }
    m.axes.push_back(ax);
  }
  (void)m.cells();
  return m;
}

Shard parse_shard(const std::string& text) {
  Shard s;
  int i = 0, n = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%d/%d%c", &i, &n, &tail) != 2 || n < 1 || i < 1 || i > n)
    input_error("--shard '", text, "': expected i/n with 1 <= i <= n, e.g. 2/4");
  s.i = i;
  s.n = n;
  return s;
}

json cell_summary_to_json(const CellSummary& s) {
  json j;
  j["verdict"] = s.verdict;
  j["reason"] = s.reason;
  j["worst_layer"] = s.worst_layer >= 0 ? json(s.worst_layer) : json(nullptr);
  j["kld_mean"] = num_json(s.kld_mean);
  j["seq_rep_4"] = num_json(s.seq_rep_4);
  j["loop_onset"] = s.loop_onset ? json(*s.loop_onset) : json(nullptr);
  if (!s.detail.is_null()) j["detail"] = s.detail;
  return j;
}

void check_result_fields(const json& j, const std::string& where, bool row) {
  if (!j.is_object())
    input_error(where, ": expected a JSON object (a ", row ? "sweep result" : "cell summary", "), found ", json_excerpt(j));
  auto bad = [&](const char* key, const char* expected) {
    input_error(where, ": field '", key, "' is ", j.contains(key) ? json_excerpt(j[key]) : std::string("missing"), ", expected ", expected,
                " (edited or written by something else than degenbisect?)");
  };
  auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  static const std::set<std::string> verdicts = {"good", "bad", "untestable", "model-intrinsic", "error"};
  if (!j.contains("verdict") || !j["verdict"].is_string() || !verdicts.count(j["verdict"].get<std::string>()))
    bad("verdict", "one of good, bad, untestable, model-intrinsic, error");
  if (has("reason") && !j["reason"].is_string()) bad("reason", "a string");
  if (has("worst_layer") && !j["worst_layer"].is_number_integer()) bad("worst_layer", "a layer number or null");
  for (const char* k : {"kld_mean", "seq_rep_4"})
    if (has(k) && !is_json_number(j[k]))
      bad(k, "a number, \"inf\", \"-inf\", \"nan\" or null");
  if (has("loop_onset") && !j["loop_onset"].is_number_integer()) bad("loop_onset", "a position or null");
  if (has("detail") && !j["detail"].is_object()) bad("detail", "an object");
  if (!row) return;
  if (!j.contains("cell") || !j["cell"].is_string()) bad("cell", "the cell's configuration as a string");
  if (has("index") && !j["index"].is_number_unsigned()) bad("index", "a cell number (0, 1, ...)");
  if (has("seconds") && !j["seconds"].is_number()) bad("seconds", "a number");
  if (has("values")) {
    if (!j["values"].is_array()) bad("values", "an array of axis values");
    for (const json& v : j["values"])
      if (!v.is_string()) bad("values", "an array of axis values (strings)");
  }
}

CellSummary cell_summary_from_json(const json& j) {
  CellSummary s;
  s.verdict = j.value("verdict", "error");
  // note: null is a valid "no reason" (check_result_fields), which value() would throw on
  s.reason = j.contains("reason") && j["reason"].is_string() ? j["reason"].get<std::string>() : "";
  s.worst_layer = j.contains("worst_layer") && j["worst_layer"].is_number_integer() ? j["worst_layer"].get<int>() : -1;
  s.kld_mean = opt_num(j, "kld_mean");
  s.seq_rep_4 = opt_num(j, "seq_rep_4");
  if (j.contains("loop_onset") && j["loop_onset"].is_number_integer()) s.loop_onset = j["loop_onset"].get<int64_t>();
  if (j.contains("detail")) s.detail = j["detail"];
  return s;
}

std::vector<json> read_sweep_results(const std::filesystem::path& jsonl) {
  std::vector<json> out;
  if (!std::filesystem::exists(jsonl)) return out;
  std::string text = read_file(jsonl);
  size_t start = 0;
  int line_no = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    ++line_no;
    if (nl == std::string::npos) break;  // partial last line: the cell did not finish
    std::string line = text.substr(start, nl - start);
    start = nl + 1;
    if (line.empty()) continue;
    json j = parse_json(line, cat(jsonl.string(), ": line ", line_no), false);
    if (j.is_discarded() || !j.is_object() || !j.contains("cell"))
      input_error(jsonl.string(), ": line ", line_no, " is not a sweep result (expected a JSON object with \"cell\")");
    check_result_fields(j, cat(jsonl.string(), ": line ", line_no), true);
    out.push_back(std::move(j));
  }
  return out;
}

json evaluation_identity(const GoldenRecord& rec, const Model& model, std::vector<std::string> cases, bool decode_mode) {
  std::sort(cases.begin(), cases.end());
  cases.erase(std::unique(cases.begin(), cases.end()), cases.end());
  return {{"model", model.fingerprint},
          {"weights", weights_sample_digest(*model.checkpoint)},
          {"golden", cat("sha256:", rec.identity())},
          {"cases", cases.empty() ? json("all") : json(cases)},
          {"decode", decode_mode}};
}

std::string identity_difference(const json& expected, const json& found) {
  if (expected == found) return "";
  // note: `found` comes from a file: shown as bounded excerpts (json_excerpt), at most 6 fields.
  if (!found.is_object()) return cat("identity: expected ", json_excerpt(expected, 200), ", found ", json_excerpt(found, 200));
  static const std::map<std::string, std::string> words = {
      {"model", "model fingerprint (--model)"}, {"weights", "model weights (--model)"},
      {"golden", "golden record (--golden)"},
      {"cases", "cases (--case/--cases)"},     {"decode", "decode passes (--no-decode)"},
      {"server_cmd", "server command (--server-cmd)"}};
  // This run's fields first (the ones that say what differs), then any the file adds.
  std::vector<std::string> keys;
  for (auto& [k, v] : expected.items()) keys.push_back(k);
  for (auto& [k, v] : found.items())
    if (!expected.contains(k)) keys.push_back(k);
  std::string out;
  int shown = 0;
  for (const auto& k : keys) {
    const json e = expected.contains(k) ? expected[k] : json(nullptr), f = found.contains(k) ? found[k] : json(nullptr);
    if (e == f) continue;
    if (++shown > 6) {
      out += "; and other fields";
      break;
    }
    auto w = words.find(k);
    out += cat(out.empty() ? "" : "; ", w == words.end() ? json_excerpt(json(k), 60) : w->second, ": expected ",
               json_excerpt(e, 120), " (this run), found ", json_excerpt(f, 120));
  }
  return out;
}

std::vector<SweepRow> run_sweep(const SweepMatrix& m, const SweepOptions& opt, const CellEvaluator& eval) {
  return run_sweep(m, opt, CellParamsEvaluator([&eval](const SweepMatrix::Cell& c) { return eval(c.config); }));
}

std::vector<SweepRow> run_sweep(const SweepMatrix& m, const SweepOptions& opt, const CellParamsEvaluator& eval) {
  namespace fs = std::filesystem;
  std::vector<SweepMatrix::Cell> all = m.cells();
  std::vector<const SweepMatrix::Cell*> mine;
  for (const auto& c : all)
    if (static_cast<int>(c.index % static_cast<size_t>(opt.shard.n)) == opt.shard.i - 1) mine.push_back(&c);

  fs::create_directories(opt.out);
  // One sweep per folder at a time: two would both run every cell and append each twice.
  FileLock lock(opt.out / "sweep.lock", cat("sweep --out ", opt.out.string()));
  fs::path jsonl = opt.out / "results.jsonl";
  if (fs::exists(jsonl) && !opt.resume)
    input_error(jsonl.string(), " already exists: pass --resume to continue that sweep, or choose another --out");
  truncate_partial_tail(jsonl);
  std::map<std::string, json> done;
  int line_no = 0;
  for (auto& j : read_sweep_results(jsonl)) {
    ++line_no;
    // A result counts only for what it was measured against: the same model, record, cases and mode.
    if (!opt.identity.is_null()) {
      if (!j.contains("identity"))
        input_error("sweep --resume: ", jsonl.string(), ": expected results that record what they were measured against "
                    "(model, golden record, cases), found result ", line_no, " without it (written by an older degenbisect); "
                    "its verdicts cannot be checked against this run: choose a new --out");
      const std::string diff = identity_difference(opt.identity, j["identity"]);
      if (!diff.empty())
        input_error("sweep --resume: ", jsonl.string(), " was made for another run (result ", line_no, "): ", diff,
                    "; resume with the flags that made it, or choose a new --out");
    }
    done[j["cell"].get<std::string>()] = j;
  }
  json meta = {{"name", m.name}, {"base", m.base}, {"shard", cat(opt.shard.i, "/", opt.shard.n)}, {"cells", all.size()}};
  json axes = json::array();
  for (const auto& a : m.axes) axes.push_back({{"name", a.name}, {"values", a.values}});
  meta["axes"] = axes;
  meta["cells_extra"] = m.cells_extra;
  if (m.params_only) meta["server"] = true;
  if (!opt.identity.is_null()) meta["identity"] = opt.identity;
  write_file_atomic(opt.out / "sweep.json", json_text(meta, 2) + "\n");

  std::vector<SweepRow> rows;
  size_t todo = 0;
  for (const auto* c : mine) todo += done.count(c->name) ? 0 : 1;
  bool show = opt.progress && is_terminal();
  auto t0 = std::chrono::steady_clock::now();
  size_t finished = 0;
  for (const auto* c : mine) {
    SweepRow row;
    row.index = c->index;
    row.cell = c->name;
    row.values = c->values;
    auto it = done.find(c->name);
    if (it != done.end()) {
      row.summary = cell_summary_from_json(it->second);
      row.seconds = it->second.value("seconds", 0.0);
      rows.push_back(std::move(row));
      continue;
    }
    if (show) {
      double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::string eta = finished ? fmt_seconds(el / double(finished) * double(todo - finished)) : "?";
      std::fprintf(stderr, "\r\033[K[%zu/%zu] %s  (ETA %s)", finished + 1, todo, c->name.c_str(), eta.c_str());
      std::fflush(stderr);
    }
    auto c0 = std::chrono::steady_clock::now();
    if (opt.isolate) {
      row.summary = eval_isolated([&]() { return eval(*c); });
    } else {
      try {
        row.summary = eval(*c);
      } catch (const UntestableError& e) {
        row.summary.verdict = "untestable";
        row.summary.reason = e.what();
      }
    }
    row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    json line = cell_summary_to_json(row.summary);
    line["cell"] = row.cell;
    line["index"] = row.index;
    line["values"] = row.values;
    line["seconds"] = row.seconds;
    if (!opt.identity.is_null()) line["identity"] = opt.identity;
    append_line(jsonl, json_text(line));
    ++finished;
    rows.push_back(std::move(row));
  }
  if (show) std::fprintf(stderr, "\r\033[K");
  return rows;
}

std::string sweep_table(const SweepMatrix& m, const std::vector<SweepRow>& rows) {
  std::ostringstream os;
  size_t w = 4;
  for (const auto& r : rows) w = std::max(w, r.cell.size());
  w = std::min<size_t>(w, 90);
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-*s  %-15s %-6s %-10s %-9s %-6s\n", int(w), "cell", "verdict", "layer", "kld_mean",
                "seq_rep_4", "loop");
  os << buf;
  for (const auto& r : rows) {
    const CellSummary& s = r.summary;
    std::string kld = s.kld_mean ? cat(*s.kld_mean) : "-";
    if (s.kld_mean) { std::snprintf(buf, sizeof buf, "%.3g", *s.kld_mean); kld = buf; }
    std::string rep = "-";
    if (s.seq_rep_4) { std::snprintf(buf, sizeof buf, "%.3f", *s.seq_rep_4); rep = buf; }
    std::snprintf(buf, sizeof buf, "%-*s  %-15s %-6s %-10s %-9s %-6s\n", int(w), r.cell.c_str(), s.verdict.c_str(),
                  s.worst_layer >= 0 ? std::to_string(s.worst_layer).c_str() : "-", kld.c_str(), rep.c_str(),
                  s.loop_onset ? std::to_string(*s.loop_onset).c_str() : "-");
    os << buf;
  }
  (void)m;
  return os.str();
}

std::string sweep_main_effects(const SweepMatrix& m, const std::vector<SweepRow>& rows) {
  std::ostringstream os;
  size_t total = rows.size(), bad = 0;
  for (const auto& r : rows) bad += r.summary.verdict == "bad";
  os << "main effects (bad cells with a value / cells with it, against those without it):\n";
  for (size_t a = 0; a < m.axes.size(); ++a) {
    std::vector<std::pair<size_t, size_t>> fractions;  // (bad, cells) per value
    for (const auto& v : m.axes[a].values) {
      size_t with = 0, bad_with = 0;
      for (const auto& r : rows)
        if (a < r.values.size() && r.values[a] == v) {
          ++with;
          bad_with += r.summary.verdict == "bad";
        }
      char buf[256];
      std::snprintf(buf, sizeof buf, "  %-14s %-40s bad %zu/%zu with, %zu/%zu without\n", m.axes[a].name.c_str(),
                    v.c_str(), bad_with, with, bad - bad_with, total - with);
      os << buf;
      fractions.push_back({bad_with, with});
    }
    // The axis's conclusion: no effect when every value has the same share of bad cells (the seed's
    // "switched the attention backend, still degenerate"), else the shares side by side.
    bool same = true;
    for (const auto& f : fractions)
      same = same && f.first * fractions.front().second == fractions.front().first * f.second;
    if (fractions.size() >= 2) {
      if (same) {
        os << "  -> " << m.axes[a].name << ": no effect (" << fractions.front().first << "/" << fractions.front().second
           << " bad with each value)\n";
      } else {
        os << "  -> " << m.axes[a].name << ": effect (bad:";
        for (size_t i = 0; i < fractions.size(); ++i)
          os << " " << m.axes[a].values[i] << " " << fractions[i].first << "/" << fractions[i].second;
        os << ")\n";
      }
    }
  }
  return os.str();
}

}  // namespace degen
