// Finding, reading and merging the inputs of a report (see inputs.h).
#include "report/inputs.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "diag/sweep.h"
#include "report/compare_input.h"
#include "util/file_io.h"
#include "report/escape.h"
#include "util/error.h"
#include "util/json_input.h"

namespace degen::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json parse_json_file(const fs::path& p) {
  // note: JSON syntax is ASCII, so replacing invalid UTF-8 only touches string contents.
  json j = parse_json(sanitize_utf8(read_file(p, kMaxInputFileBytes)), "report: " + p.string(), false);
  if (j.is_discarded()) input_error("report: ", p.string(), ": not valid JSON");
  return j;
}

std::string tool_of(const json& j) { return j.is_object() && j.contains("tool") && j["tool"].is_string() ? j["tool"].get<std::string>() : ""; }

// A compare result states its verdict (compare --json writes it in every outcome, untestable
// included); one without is not a result, whatever its "tool" says: refused rather than rendered
// as "within tolerances".
void check_compare_result(const fs::path& p, const json& j) {
  static const char* kVerdicts[] = {"good", "bad", "model-intrinsic", "untestable"};
  const json* v = j.contains("verdict") ? &j["verdict"] : nullptr;
  const bool known = v && v->is_string() &&
                     std::any_of(std::begin(kVerdicts), std::end(kVerdicts), [&](const char* k) { return *v == k; });
  if (!known)
    input_error("report: ", p.string(), ": not a compare result: expected \"verdict\": good, bad, model-intrinsic or ",
                "untestable, found ", v ? v->dump() : std::string("no \"verdict\" field"),
                " (a truncated or hand-made file?)");
  if (*v != "untestable" && !(j.contains("cases") && j["cases"].is_array()))
    input_error("report: ", p.string(), ": not a compare result: expected a \"cases\" array beside \"verdict\": ",
                v->get<std::string>(), ", found ", j.contains("cases") ? j["cases"].type_name() : "none");
}

bool is_sweep_folder(const fs::path& dir) {
  return fs::is_regular_file(dir / "results.jsonl") || fs::is_regular_file(dir / "sweep.json");
}

// The identity of a sweep: what every shard's sweep.json shares.
std::string sweep_key(const json& meta) {
  json k = meta;
  k.erase("shard");
  return k.dump(-1, ' ', false, json::error_handler_t::replace);
}

void add_file(const fs::path& p, ReportInputs& in, std::vector<SweepInput>& sweeps, bool from_folder) {
  const std::string name = p.filename().string();
  if (name == "results.jsonl" || name == "sweep.json") {
    sweeps.push_back(read_sweep_folder(p.parent_path()));
    return;
  }
  if (from_folder && p.extension() != ".json") return;
  json j;
  if (from_folder) {
    j = parse_json(sanitize_utf8(read_file(p, kMaxInputFileBytes)), "report: " + p.string(), false);
    if (j.is_discarded()) return;  // some other file that happens to end in .json
  } else {
    j = parse_json_file(p);
  }
  const std::string tool = tool_of(j);
  if (tool == "degenbisect compare") {
    check_compare_result(p, j);
    try {
      (void)read_compare_input(j);  // every key with its type, before anything is rendered
    } catch (const InputError& e) {
      input_error("report: ", p.string(), ": ", e.what());
    }
    in.compares.push_back({p.string(), std::move(j)});
  }
  else if (tool == "degenbisect bisect") in.bisects.push_back({p.string(), std::move(j)});
  else if (!from_folder)
    input_error("report: ", p.string(), ": not a compare or bisect result (expected \"tool\": \"degenbisect compare\" or ",
                "\"degenbisect bisect\", found ", tool.empty() ? "no \"tool\" field" : "\"" + tool + "\"",
                "); a sweep is given by its --out folder");
}

}  // namespace

// sweep.json has the fields and types `sweep` writes (name, base, shard: strings; cells: a count;
// axes: [{name, values: [strings]}]; cells_extra: [strings]); the report's tables rely on them.
static void check_sweep_meta(const fs::path& p, const json& m) {
  if (!m.is_object()) input_error("report: ", p.string(), ": expected a JSON object (sweep.json), found ", json_excerpt(m));
  auto bad = [&](const std::string& field, const json& v, const char* expected) {
    input_error("report: ", p.string(), ": field '", field, "' is ", json_excerpt(v), ", expected ", expected);
  };
  auto strings = [](const json& v) {
    if (!v.is_array()) return false;
    for (const json& x : v)
      if (!x.is_string()) return false;
    return true;
  };
  for (const char* k : {"name", "base", "shard"})
    if (m.contains(k) && !m[k].is_string()) bad(k, m[k], "a string");
  if (m.contains("cells") && !m["cells"].is_null() && !m["cells"].is_number_unsigned()) bad("cells", m["cells"], "a cell count");
  // note: the count sizes what the report allocates (one "missing" entry per cell without a
  // result): bounded by the cap `sweep` enforces on every matrix (kMaxSweepCells), and below it
  // must equal the matrix's own count (read_sweep_folder).
  if (m.contains("cells") && m["cells"].is_number_unsigned() && m["cells"].get<uint64_t>() > kMaxSweepCells)
    bad("cells", m["cells"], cat("a cell count of at most ", kMaxSweepCells, " (the most cells sweep runs)").c_str());
  if (m.contains("cells_extra") && !strings(m["cells_extra"])) bad("cells_extra", m["cells_extra"], "an array of configurations (strings)");
  if (m.contains("axes")) {
    if (!m["axes"].is_array()) bad("axes", m["axes"], "an array of {\"name\", \"values\"}");
    for (const json& a : m["axes"])
      if (!a.is_object() || !a.contains("name") || !a["name"].is_string() || !a.contains("values") || !strings(a["values"]))
        bad("axes", a, "{\"name\": string, \"values\": [strings]} for every axis");
  }
}

namespace {

// The line number of each result read_sweep_results returns (it keeps every complete non-empty
// line, in order, or throws).
std::vector<int> result_line_numbers(const fs::path& jsonl) {
  std::vector<int> out;
  if (!fs::exists(jsonl)) return out;
  const std::string text = read_file(jsonl);
  int line_no = 0;
  for (size_t start = 0, nl; start < text.size() && (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    ++line_no;
    if (nl > start) out.push_back(line_no);
  }
  return out;
}

// Every line of a shard folder against its own sweep.json (issue 40): the matrix's cell count, and
// for each result its index (a cell of the matrix, of this shard, once), its cell name and axis
// values (the matrix's at that index) and its identity (the shard's: the same model, record, cases
// and mode). InputError naming the shard, the line and the field.
void check_shard_lines(const fs::path& dir, const std::string& shard_text, const json& meta, const std::vector<json>& rows) {
  const fs::path jsonl = dir / "results.jsonl";
  const std::string shard = cat("shard ", shard_text, " (", dir.string(), ")");
  Shard sh;
  try {
    sh = parse_shard(shard_text);
  } catch (const InputError&) {
    input_error("report: ", (dir / "sweep.json").string(), ": field 'shard' is ", json_excerpt(json(shard_text)), ", expected i/n");
  }
  // The matrix's cells, when this build can enumerate them (a matrix written by another version
  // may not parse: then only the count bounds the indices).
  std::optional<std::vector<SweepMatrix::Cell>> cells;
  if (meta.contains("axes") || meta.contains("cells_extra")) {
    SweepMatrix m;
    m.params_only = meta.value("server", false) == true;
    m.base = meta.value("base", std::string());
    for (const json& a : meta.value("axes", json::array()))
      m.axes.push_back({a["name"].get<std::string>(), a["values"].get<std::vector<std::string>>()});
    m.cells_extra = meta.value("cells_extra", std::vector<std::string>{});
    try {
      cells = m.cells();
    } catch (const InputError&) {
      cells.reset();
    }
  }
  std::optional<uint64_t> count;
  if (meta.contains("cells") && meta["cells"].is_number_unsigned()) count = meta["cells"].get<uint64_t>();
  if (cells && count && *count != cells->size())
    input_error("report: ", shard, ": sweep.json: field 'cells' is ", *count, ", expected ", cells->size(),
                " (the number of cells of its own matrix: axes, base and cells_extra)");
  if (cells && !count) count = cells->size();
  const std::vector<int> lines = result_line_numbers(jsonl);
  std::map<uint64_t, int> line_of;  // index -> line
  for (size_t k = 0; k < rows.size(); ++k) {
    const json& r = rows[k];
    const int line = k < lines.size() ? lines[k] : -1;
    auto bad = [&](const char* field, const std::string& what) {
      input_error("report: ", shard, ": ", jsonl.string(), " line ", line, ": field '", field, "' ", what,
                  " (edited, or copied from another shard or sweep?)");
    };
    if (!r.contains("index") || !r["index"].is_number_unsigned()) bad("index", "is missing; expected the cell's number");
    const uint64_t idx = r["index"].get<uint64_t>();
    if (count && idx >= *count) bad("index", cat("is ", idx, ", expected a cell of the matrix (0 to ", *count - 1, ")"));
    if (idx % static_cast<uint64_t>(sh.n) != static_cast<uint64_t>(sh.i - 1))
      bad("index", cat("is ", idx, ", a cell of shard ", idx % static_cast<uint64_t>(sh.n) + 1, "/", sh.n, ", not of this shard"));
    if (auto [it, fresh] = line_of.emplace(idx, line); !fresh)
      bad("index", cat("is ", idx, ", whose result is on line ", it->second, " already; expected each cell once"));
    if (cells) {
      const SweepMatrix::Cell& c = (*cells)[static_cast<size_t>(idx)];
      if (r["cell"] != c.name) bad("cell", cat("is ", json_excerpt(r["cell"], 120), ", expected \"", c.name, "\" (cell ", idx, " of the matrix)"));
      if (r.contains("values") && r["values"] != json(c.values))
        bad("values", cat("is ", json_excerpt(r["values"], 120), ", expected ", json_excerpt(json(c.values), 120), " (cell ", idx, ")"));
    }
    const json want = meta.contains("identity") ? meta["identity"] : json(nullptr);
    const json got = r.contains("identity") ? r["identity"] : json(nullptr);
    if (want != got) {
      std::string what = cat("is ", json_excerpt(got, 120), ", expected the shard's (sweep.json) ", json_excerpt(want, 120));
      if (want.is_object() && got.is_object())
        for (auto& [k, v] : want.items())
          if (!got.contains(k) || got[k] != v) {
            what = cat("differs from the shard's (sweep.json) in '", k, "': ", got.contains(k) ? json_excerpt(got[k], 100) : "missing",
                       ", sweep.json has ", json_excerpt(v, 100));
            break;
          }
      bad("identity", what);
    }
  }
}

}  // namespace

SweepInput read_sweep_folder(const fs::path& dir) {
  SweepInput s;
  s.folders.push_back(dir.string());
  const fs::path meta = dir / "sweep.json";
  if (fs::is_regular_file(meta)) {
    s.meta = parse_json_file(meta);
    check_sweep_meta(meta, s.meta);
    s.shards.push_back(s.meta.value("shard", std::string("1/1")));
    try {
      s.rows = read_sweep_results(dir / "results.jsonl");  // a partial last line (a cell still running) is left out
    } catch (const InputError& e) {
      input_error("report: shard ", s.shards.back(), " (", dir.string(), "): ", e.what());
    }
    check_shard_lines(dir, s.shards.back(), s.meta, s.rows);
    s.meta.erase("shard");
  } else {
    s.meta = {{"name", dir.filename().string()}};
    s.shards.push_back("?");
    s.warnings.push_back(cat(dir.string(), " has no sweep.json: the matrix (axes, cell count) is unknown"));
    s.rows = read_sweep_results(dir / "results.jsonl");
  }
  return s;
}

std::vector<SweepInput> merge_sweeps(std::vector<SweepInput> parts) {
  std::vector<SweepInput> out;
  std::map<std::string, size_t> group;
  for (SweepInput& p : parts) {
    const std::string key = sweep_key(p.meta);
    auto it = group.find(key);
    if (it == group.end()) {
      group[key] = out.size();
      out.push_back(std::move(p));
      continue;
    }
    SweepInput& m = out[it->second];
    m.folders.insert(m.folders.end(), p.folders.begin(), p.folders.end());
    m.shards.insert(m.shards.end(), p.shards.begin(), p.shards.end());
    m.warnings.insert(m.warnings.end(), p.warnings.begin(), p.warnings.end());
    m.rows.insert(m.rows.end(), p.rows.begin(), p.rows.end());
  }
  for (SweepInput& m : out) {
    // One row per cell: the first folder's, in the order given; a conflicting duplicate is named.
    std::map<std::string, size_t> seen;
    std::vector<json> rows;
    for (json& r : m.rows) {
      const std::string cell = r.value("cell", std::string());
      auto it = seen.find(cell);
      if (it == seen.end()) {
        seen[cell] = rows.size();
        rows.push_back(std::move(r));
      } else if (rows[it->second].value("verdict", std::string()) != r.value("verdict", std::string())) {
        m.warnings.push_back(cat("cell ", cell, " has two results (", rows[it->second].value("verdict", std::string("?")), " and ",
                                 r.value("verdict", std::string("?")), "); the first folder's is shown"));
      }
    }
    std::stable_sort(rows.begin(), rows.end(), [](const json& a, const json& b) {
      const auto ia = a.contains("index") && a["index"].is_number() ? a["index"].get<int64_t>() : INT64_MAX;
      const auto ib = b.contains("index") && b["index"].is_number() ? b["index"].get<int64_t>() : INT64_MAX;
      return ia < ib;
    });
    m.rows = std::move(rows);
  }
  return out;
}

namespace {

// The first field in which two sweep.json differ, as "field: A in X, B in Y" (identity fields by name).
std::string meta_difference(const json& a, const std::string& where_a, const json& b, const std::string& where_b) {
  std::vector<std::pair<std::string, std::pair<json, json>>> fields;
  std::set<std::string> keys;
  for (auto& [k, v] : a.items()) keys.insert(k);
  for (auto& [k, v] : b.items()) keys.insert(k);
  for (const std::string& k : keys) {
    const json va = a.contains(k) ? a[k] : json(nullptr), vb = b.contains(k) ? b[k] : json(nullptr);
    if (va == vb) continue;
    if (k == "identity" && va.is_object() && vb.is_object()) {
      std::set<std::string> ik;
      for (auto& [x, v] : va.items()) ik.insert(x);
      for (auto& [x, v] : vb.items()) ik.insert(x);
      for (const std::string& x : ik) {
        const json ia = va.contains(x) ? va[x] : json(nullptr), ib = vb.contains(x) ? vb[x] : json(nullptr);
        if (ia != ib) fields.push_back({"identity." + x, {ia, ib}});
      }
      continue;
    }
    fields.push_back({k, {va, vb}});
  }
  if (fields.empty()) return "no field differs";
  const auto& [k, v] = fields.front();
  std::string out = cat(k, ": ", json_excerpt(v.first, 120), " in ", where_a, ", ", json_excerpt(v.second, 120), " in ", where_b);
  if (fields.size() > 1) out += cat(" (and ", fields.size() - 1, " more field", fields.size() > 2 ? "s" : "", ")");
  return out;
}

}  // namespace

void check_complete_sweep(const ReportInputs& in, int n) {
  const std::string flag = cat("report --expect-shards ", n);
  if (n < 1) input_error(flag, ": expected a shard count of at least 1");
  if (in.sweeps.empty()) input_error(flag, ": expected the shard folders of one sweep (sweep --out), found no sweep folder");
  const SweepInput& s = in.sweeps.front();
  if (in.sweeps.size() > 1) {
    const SweepInput& o = in.sweeps[1];
    input_error(flag, ": expected the shards of one sweep, found folders of ", in.sweeps.size(), " different sweeps: ",
                o.folders.front(), " is not of the sweep of ", s.folders.front(), " (",
                meta_difference(s.meta, s.folders.front(), o.meta, o.folders.front()),
                "); merge each sweep's own folders, or run the shards again with the same matrix, --model and --golden");
  }
  // Which folder holds which shard.
  std::map<int, std::string> folder_of;
  for (size_t k = 0; k < s.folders.size(); ++k) {
    const std::string& f = s.folders[k];
    const std::string& sh = s.shards[k];
    if (sh == "?")
      input_error(flag, ": ", f, " has no sweep.json: expected a shard folder written by sweep --shard i/", n,
                  " (a task that never started writes none)");
    int i = 0, m = 0;
    char tail = 0;
    if (std::sscanf(sh.c_str(), "%d/%d%c", &i, &m, &tail) != 2 || i < 1 || i > m)
      input_error(flag, ": ", f, ": sweep.json's shard is '", sh, "', expected i/", n);
    if (m != n)
      input_error(flag, ": ", f, " is shard ", sh, " of a sweep in ", m, " shards, expected shards of ", n,
                  " (an array of another size than the shard count?)");
    auto [it, fresh] = folder_of.emplace(i, f);
    if (!fresh && it->second != f)
      input_error(flag, ": shard ", i, "/", n, " is given twice: ", it->second, " and ", f, "; expected each shard once");
  }
  for (int i = 1; i <= n; ++i)
    if (!folder_of.count(i))
      input_error(flag, ": shard ", i, "/", n, " is missing: no folder given holds it (its task has not run, or its folder ",
                  "was not passed); expected shards 1/", n, " to ", n, "/", n);
  // Every cell of the matrix has its result, in the folder of its shard.
  if (!s.meta.contains("cells") || !s.meta["cells"].is_number_unsigned())
    input_error(flag, ": ", s.folders.front(), "/sweep.json has no cell count; expected one (written by sweep)");
  const auto cells = s.meta["cells"].get<uint64_t>();
  std::set<uint64_t> have;
  for (const json& r : s.rows)
    if (r.contains("index") && r["index"].is_number_unsigned()) have.insert(r["index"].get<uint64_t>());
  std::map<int, std::vector<uint64_t>> missing;  // by shard
  for (uint64_t c = 0; c < cells; ++c)
    if (!have.count(c)) missing[static_cast<int>(c % static_cast<uint64_t>(n)) + 1].push_back(c);
  if (!missing.empty()) {
    const auto& [i, idx] = *missing.begin();
    const uint64_t mine = cells / n + (static_cast<uint64_t>(i - 1) < cells % n ? 1 : 0);
    input_error(flag, ": shard ", i, "/", n, " (", folder_of[i], ") is incomplete: ", mine - idx.size(), " of its ", mine,
                " cells have a result, expected all (cell index ", idx.front(), idx.size() > 1 ? cat(" and ", idx.size() - 1, " more") : "",
                " missing: its task is still running or was stopped; requeue it)",
                missing.size() > 1 ? cat("; ", missing.size() - 1, " more shard", missing.size() > 2 ? "s are" : " is", " incomplete") : "");
  }
}

int sweep_exit_code(const SweepInput& s) {
  size_t bad = 0, untestable = 0;
  for (const json& r : s.rows) {
    const std::string v = r.value("verdict", std::string());
    bad += v == "bad" || v == "error";
    untestable += v == "untestable";
  }
  if (bad) return 1;
  if (!s.rows.empty() && untestable == s.rows.size()) return 125;
  return 0;
}

ReportInputs load_report_inputs(const std::vector<fs::path>& paths) {
  if (paths.empty()) input_error("report: give at least one input: a compare or bisect JSON file, or a sweep folder");
  ReportInputs in;
  std::vector<SweepInput> sweeps;
  for (const fs::path& p : paths) {
    if (!fs::exists(p)) input_error("report: ", p.string(), ": no such file or folder");
    if (fs::is_regular_file(p)) {
      add_file(p, in, sweeps, false);
      continue;
    }
    if (!fs::is_directory(p)) input_error("report: ", p.string(), ": not a file or a folder");
    if (is_sweep_folder(p)) {
      sweeps.push_back(read_sweep_folder(p));
      continue;
    }
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(p)) entries.push_back(e.path());
    std::sort(entries.begin(), entries.end());
    const size_t before = in.compares.size() + in.bisects.size() + sweeps.size();
    for (const fs::path& e : entries) {
      if (fs::is_directory(e) && is_sweep_folder(e)) sweeps.push_back(read_sweep_folder(e));
      else if (fs::is_regular_file(e)) add_file(e, in, sweeps, true);
    }
    if (in.compares.size() + in.bisects.size() + sweeps.size() == before)
      input_error("report: ", p.string(), ": no compare JSON, bisect JSON or sweep folder (results.jsonl) in this folder");
  }
  in.sweeps = merge_sweeps(std::move(sweeps));
  return in;
}

}  // namespace degen::report
