// Sweep mechanics with a stand-in evaluator (the real one is compare): cell order, shards, resume
// after SIGKILL, partial last lines, --isolate crash containment, the closing tables.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include "diag/server_sweep.h"
#include "diag/sweep.h"
#include "helpers.h"
#include "util/file_io.h"
#include "util/error.h"

using namespace degen;

namespace {
SweepMatrix matrix() {
  SweepMatrix m;
  m.name = "t";
  m.base = "precision=bf16";
  m.axes = {{"attn", {"naive", "flash"}}, {"ssm_dtype", {"fp32", "bf16", "fp16"}}, {"sampling", {"temp=0", "temp=0.6,top_p=0.95"}}};
  return m;
}
// Deterministic stand-in: fp16 state is "bad".
CellSummary fake_eval(const RunConfig& rc) {
  CellSummary s;
  bool bad = rc.str().find("ssm_dtype=fp16") != std::string::npos;
  s.verdict = bad ? "bad" : "good";
  s.worst_layer = bad ? 4 : -1;
  s.kld_mean = bad ? 0.5 : 1e-4;
  s.seq_rep_4 = bad ? 0.8 : 0.0;
  if (bad) s.loop_onset = 12;
  return s;
}
std::map<std::string, int> cell_counts(const std::filesystem::path& jsonl) {
  std::map<std::string, int> n;
  for (const auto& j : read_sweep_results(jsonl)) n[j["cell"].get<std::string>()]++;
  return n;
}
// A child process running the 12-cell sweep into `o.out`, each cell taking `ms` milliseconds (a
// sweep to kill or to collide with); returns its PID.
pid_t fork_slow_sweep(const SweepOptions& o, int ms) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto slow = [ms](const RunConfig& rc) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return fake_eval(rc);
    };
    try { run_sweep(matrix(), o, slow); } catch (...) {}
    _exit(0);
  }
  return pid;
}

}  // namespace

TEST_CASE("sweep: cells are the cartesian product, last axis fastest, duplicates merged") {
  auto cells = matrix().cells();
  REQUIRE(cells.size() == 12);
  CHECK(cells[0].name == "precision=bf16,ssm_dtype=fp32");
  CHECK(cells[1].name == "precision=bf16,ssm_dtype=fp32,temp=0.6,top_p=0.95");
  CHECK(cells[2].name == "precision=bf16,ssm_dtype=bf16");
  CHECK(cells[11].name == "precision=bf16,attn=flash,ssm_dtype=fp16,temp=0.6,top_p=0.95");
  CHECK(cells[11].values == std::vector<std::string>{"flash", "fp16", "temp=0.6,top_p=0.95"});
  SweepMatrix d;
  d.axes = {{"attn", {"naive", "naive"}}};
  CHECK(d.cells().size() == 1);
  SweepMatrix bad;
  bad.axes = {{"attn", {"naive", "fastest"}}};
  CHECK_THROWS_WITH_AS(bad.cells(), doctest::Contains("axis 'attn' value 'fastest'"), InputError);
  CHECK_THROWS_AS(parse_shard("0/3"), InputError);
  CHECK_THROWS_AS(parse_shard("4/3"), InputError);
  CHECK_THROWS_AS(parse_shard("x"), InputError);
  CHECK(parse_shard("2/3").i == 2);
}

TEST_CASE("sweep: the union of shards equals the unsharded sweep") {
  test::TempDir dir("sweep-shard");
  SweepOptions o;
  o.progress = false;
  o.out = dir / "all";
  auto all = run_sweep(matrix(), o, fake_eval);
  std::map<std::string, std::string> whole, merged;
  for (const auto& r : all) whole[r.cell] = r.summary.verdict;
  size_t total = 0;
  for (int i = 1; i <= 3; ++i) {
    SweepOptions s = o;
    s.shard = {i, 3};
    s.out = dir / ("shard" + std::to_string(i));
    auto rows = run_sweep(matrix(), s, fake_eval);
    total += rows.size();
    for (const auto& r : rows) merged[r.cell] = r.summary.verdict;
  }
  CHECK(total == all.size());   // no cell in two shards
  CHECK(merged == whole);       // and none missing
}

TEST_CASE("sweep: refuses to overwrite, resumes without repeating, ignores a partial last line") {
  test::TempDir dir("sweep-resume");
  SweepOptions o;
  o.progress = false;
  o.out = dir.path();
  int calls = 0;
  auto counting = [&](const RunConfig& rc) { ++calls; return fake_eval(rc); };
  run_sweep(matrix(), o, counting);
  CHECK(calls == 12);
  CHECK_THROWS_WITH_AS(run_sweep(matrix(), o, counting), doctest::Contains("--resume"), InputError);
  o.resume = true;
  calls = 0;
  auto rows = run_sweep(matrix(), o, counting);
  CHECK(calls == 0);
  CHECK(rows.size() == 12);
  // Simulate a kill mid-write: drop the last two lines and leave half a line.
  std::string text = read_file(dir / "results.jsonl");
  size_t cut = text.rfind('\n', text.size() - 2);
  cut = text.rfind('\n', cut - 1);
  std::ofstream(dir / "results.jsonl", std::ios::trunc) << text.substr(0, cut + 1) << "{\"cell\": \"precision=bf16,att";
  CHECK(read_sweep_results(dir / "results.jsonl").size() == 10);
  calls = 0;
  run_sweep(matrix(), o, counting);
  CHECK(calls == 2);
  auto counts = cell_counts(dir / "results.jsonl");
  CHECK(counts.size() == 12);
  for (const auto& [cell, n] : counts) CHECK_MESSAGE(n == 1, cell);
}

TEST_CASE("sweep: a sweep killed with SIGKILL mid-run and resumed loses no finished cell and repeats none") {
  test::TempDir dir("sweep-kill");
  SweepOptions o;
  o.progress = false;
  o.out = dir.path();
  const pid_t pid = fork_slow_sweep(o, 60);
  // Wait until at least 4 cells are finished, then kill.
  for (int i = 0; i < 400; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (std::filesystem::exists(dir / "results.jsonl") && read_sweep_results(dir / "results.jsonl").size() >= 4) break;
  }
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFSIGNALED(st));
  auto before = cell_counts(dir / "results.jsonl");
  CHECK(before.size() >= 4);
  CHECK(before.size() < 12);
  o.resume = true;
  int calls = 0;
  run_sweep(matrix(), o, [&](const RunConfig& rc) { ++calls; return fake_eval(rc); });
  CHECK(calls == int(12 - before.size()));
  auto after = cell_counts(dir / "results.jsonl");
  CHECK(after.size() == 12);
  for (const auto& [cell, n] : after) CHECK_MESSAGE(n == 1, cell);
}

TEST_CASE("sweep: --isolate turns a crashing cell into an error row and goes on") {
  test::TempDir dir("sweep-iso");
  SweepOptions o;
  o.progress = false;
  o.out = dir.path();
  o.isolate = true;
  SweepMatrix m;
  m.axes = {{"attn", {"naive", "flash", "splitkv"}}};
  auto rows = run_sweep(m, o, [](const RunConfig& rc) {
    if (rc.attn.base == AttnAlgo::flash) raise(SIGSEGV);
    if (rc.attn.base == AttnAlgo::splitkv) throw UntestableError("no split-KV here");
    return fake_eval(rc);
  });
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].summary.verdict == "good");
  CHECK(rows[1].summary.verdict == "error");
  CHECK(rows[1].summary.reason.find("signal 11") != std::string::npos);
  CHECK(rows[2].summary.verdict == "error");
  CHECK(rows[2].summary.reason.find("no split-KV here") != std::string::npos);
}

TEST_CASE("sweep: closing table and main effects") {
  test::TempDir dir("sweep-table");
  SweepOptions o;
  o.progress = false;
  o.out = dir.path();
  auto rows = run_sweep(matrix(), o, fake_eval);
  std::string t = sweep_table(matrix(), rows);
  CHECK(t.find("precision=bf16,attn=flash,ssm_dtype=fp16") != std::string::npos);
  CHECK(t.find("bad") != std::string::npos);
  std::string me = sweep_main_effects(matrix(), rows);
  CHECK(me.find("ssm_dtype      fp16") != std::string::npos);
  CHECK(me.find("bad 4/4 with, 0/8 without") != std::string::npos);   // every fp16 cell is bad
  CHECK(me.find("bad 2/6 with, 2/6 without") != std::string::npos);   // attn is irrelevant
  CHECK(me.find("-> attn: no effect (2/6 bad with each value)") != std::string::npos);
  CHECK(me.find("-> ssm_dtype: effect (bad:") != std::string::npos);
}

TEST_CASE("sweep: matrix files") {
  test::TempDir dir("sweep-matrix");
  std::ofstream(dir / "m.json") << R"({"name": "x", "base": "precision=bf16",
    "axes": [{"name": "attn", "values": ["naive", "flash"]}, {"name": "mtp", "values": [0, 2]}],
    "cells": ["fault=rope-interleaved@3"]})";
  SweepMatrix m = load_sweep_matrix(dir / "m.json");
  auto cells = m.cells();
  CHECK(cells.size() == 5);
  CHECK(cells.back().name == "precision=bf16,fault=rope-interleaved@3");
  std::ofstream(dir / "bad.json") << R"({"axes": [{"name": "attn", "values": ["warp"]}]})";
  CHECK_THROWS_WITH_AS(load_sweep_matrix(dir / "bad.json"), doctest::Contains("value 'warp'"), InputError);
  std::ofstream(dir / "bad2.json") << R"({"axis": []})";
  CHECK_THROWS_WITH_AS(load_sweep_matrix(dir / "bad2.json"), doctest::Contains("unknown field 'axis'"), InputError);
  CHECK(load_sweep_matrix(test::source_dir() / "cases" / "matrix-default.json").cells().size() >= 24);
}

TEST_CASE("sweep: a server sweep's cells are free key=value parameters that fill its command line") {
  // Values that are no toggles of ours (-fa on|off, a cache type, a thread count) are taken as they are.
  SweepMatrix m = sweep_matrix_from_axes("threads=2", {"fa=on,off", "ctk=f16,q8_0"}, true);
  const auto cells = m.cells();
  REQUIRE(cells.size() == 4);
  CHECK(cells[0].name == "threads=2,fa=on,ctk=f16");
  CHECK(cells[3].name == "threads=2,fa=off,ctk=q8_0");
  CHECK(cells[1].values == std::vector<std::string>{"on", "q8_0"});
  CHECK(fill_server_command("srv --port {port} -t {threads} -fa {fa} -ctk {ctk} -x {{y}}", cells[1].params, 8123) ==
        "srv --port 8123 -t 2 -fa on -ctk q8_0 -x {y}");
  CHECK(fill_server_command("srv --port {port} \\\n  -t {threads}\n -fa {fa} -ctk {ctk}", cells[1].params, 1) ==
        "srv --port 1    -t 2  -fa on -ctk q8_0");
  // A group value sets several parameters; a later value of a key replaces the earlier one.
  SweepMatrix g = sweep_matrix_from_axes("fa=on", {"fa=off", "mode=a"}, true);
  g.axes[1].values = {"ctk=f16,ctv=f16"};
  const auto gc = g.cells();
  REQUIRE(gc.size() == 1);
  CHECK(gc[0].name == "fa=off,ctk=f16,ctv=f16");
  // Any other value is literal text, commas and '=' included: a JSON flag value (issue 42's vLLM
  // template), or a flag with '=' in it.
  SweepMatrix lit = sweep_matrix_from_axes("", {"mode=a"}, true);
  lit.axes[0].values = {"--speculative-config={\"method\":\"mtp\",\"num_speculative_tokens\":3}", "-o=x,y"};
  const auto lc = lit.cells();
  REQUIRE(lc.size() == 2);
  CHECK(lc[0].params == std::vector<std::pair<std::string, std::string>>{{"mode", "--speculative-config={\"method\":\"mtp\",\"num_speculative_tokens\":3}"}});
  CHECK(lc[1].params == std::vector<std::pair<std::string, std::string>>{{"mode", "-o=x,y"}});
  // The mistakes that would sweep nothing, or start a server nobody can reach, are named.
  CHECK_THROWS_WITH_AS(fill_server_command("srv -fa {fa} -ctk {ctk} -t {threads}", cells[0].params, 1),
                       doctest::Contains("no {port}"), InputError);
  CHECK_THROWS_WITH_AS(fill_server_command("srv --port {port} -fa {fa} -ctk {ctk}", cells[0].params, 1),
                       doctest::Contains("parameter 'threads' is not used"), InputError);
  CHECK_THROWS_WITH_AS(fill_server_command("srv --port {port} {threads} {fa} {ctk} {bogus}", cells[0].params, 1),
                       doctest::Contains("placeholder {bogus}"), InputError);
  CHECK_THROWS_WITH_AS(sweep_matrix_from_axes("", {"fa=on,"}, true), doctest::Contains("empty value"), InputError);
  // Not parsed as our toggles: "fa" would be an unknown toggle key there.
  CHECK_THROWS_AS(sweep_matrix_from_axes("", {"fa=on,off"}, false), InputError);
}

TEST_CASE("sweep: a server command's values reach the command as literal text, wherever the template puts them") {
  // Issue 40: values were pasted into the line that /bin/sh -c runs, so an axis value 0$(touch X)
  // ran touch. Each value is now quoted for its place in the template (outside quotes, inside '...',
  // inside "..."); sh then hands each one over exactly as written. Checked by running sh on it.
  const std::string evil = "0$(touch PWNED)`touch PW2`;* 'q' \"d\" \\ $HOME\n~";
  const std::vector<std::pair<std::string, std::string>> params = {{"x", evil}};
  const std::string cmd = fill_server_command("printf '%s|' {port} {x} \"{x}\" 'a{x}b' \"c\\\"{x}\"", params, 7);
  test::TempDir dir("sweep-quote");
  const std::string out = (dir / "argv").string();
  FILE* p = ::popen(cat("cd '", dir.path().string(), "' && ", cmd, " > '", out, "'").c_str(), "r");
  REQUIRE(p != nullptr);
  CHECK(::pclose(p) == 0);
  std::ifstream f(out);
  const std::string got((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(got == cat("7|", evil, "|", evil, "|a", evil, "b|c\"", evil, "|"));
  CHECK_FALSE(std::filesystem::exists(dir / "PWNED"));
  CHECK_FALSE(std::filesystem::exists(dir / "PW2"));
  // Plain values stay as they are; an empty one is an empty word; an unclosed quote is named.
  CHECK(fill_server_command("srv --port {port} -ctk {x}", {{"x", "q8_0"}}, 1) == "srv --port 1 -ctk q8_0");
  CHECK(fill_server_command("srv --port {port} -a {x}", {{"x", ""}}, 1) == "srv --port 1 -a ''");
  CHECK_THROWS_WITH_AS(fill_server_command("srv --port {port} '-a {x}", {{"x", "1"}}, 1), doctest::Contains("quote is not closed"),
                       InputError);
}

TEST_CASE("sweep: an axis given twice is refused, from --axis and from a matrix file") {
  // Issue 40: merged silently, the main effects listed values that never ran.
  CHECK_THROWS_WITH_AS(sweep_matrix_from_axes("", {"fa=on,off", "fa=x"}, true), doctest::Contains("axis 'fa' is given twice"),
                       InputError);
  CHECK_THROWS_WITH_AS(sweep_matrix_from_axes("", {"attn=naive", "attn=flash"}, false),
                       doctest::Contains("axis 'attn' is given twice"), InputError);
  test::TempDir dir("sweep-dup-axis");
  std::ofstream(dir / "list.json") << R"({"axes": [{"name": "attn", "values": ["naive"]}, {"name": "attn", "values": ["flash"]}]})";
  CHECK_THROWS_WITH_AS(load_sweep_matrix(dir / "list.json"), doctest::Contains("axis 'attn' is given twice"), InputError);
  std::ofstream(dir / "object.json") << R"({"axes": {"fa": ["on"], "fa": ["off"]}})";
  CHECK_THROWS_WITH_AS(load_sweep_matrix(dir / "object.json", true), doctest::Contains("key 'fa' appears twice"), InputError);
}

TEST_CASE("sweep: a matrix over the cell cap is refused with its count before any cell is built") {
  // 40 two-valued axes are 2^40 cells: enumerating them used to spin silently.
  SweepMatrix m;
  m.name = "huge";
  for (int i = 0; i < 40; ++i) m.axes.push_back({"k" + std::to_string(i), {"a", "b"}});
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(m.cells(), doctest::Contains("expected at most 100000 cells, found 1099511627776 (40 axes"),
                       InputError);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  // A product beyond 64 bits is refused too (no wrap-around to a small count).
  for (int i = 40; i < 70; ++i) m.axes.push_back({"k" + std::to_string(i), {"a", "b"}});
  CHECK_THROWS_WITH_AS(m.count(), doctest::Contains("found more than 2^64"), InputError);
  // Extra cells count, and the cap itself is allowed.
  SweepMatrix edge;
  edge.params_only = true;
  edge.axes = {{"a", std::vector<std::string>(1000, "x")}, {"b", std::vector<std::string>(100, "y")}};
  CHECK(edge.count() == kMaxSweepCells);
  edge.cells_extra = {"c=1"};
  CHECK_THROWS_WITH_AS(edge.count(), doctest::Contains("found 100001 (2 axes: 1000 x 100, plus 1 extra cells)"), InputError);
  // --axis arguments are checked when the matrix is made (before the model is loaded).
  std::vector<std::string> args;
  for (int i = 0; i < 40; ++i) args.push_back("k" + std::to_string(i) + "=a,b");
  CHECK_THROWS_WITH_AS(sweep_matrix_from_axes("", args, true), doctest::Contains("1099511627776"), InputError);
}

TEST_CASE("sweep: a second sweep on the same --out is refused while the first runs, naming its PID") {
  test::TempDir dir("sweep-lock");
  SweepOptions o;
  o.progress = false;
  o.out = dir.path();
  const pid_t pid = fork_slow_sweep(o, 200);
  // Wait until the first sweep holds the lock (its PID is in the lock file).
  for (int i = 0; i < 400; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (std::filesystem::exists(dir / "sweep.lock") && read_file(dir / "sweep.lock") == std::to_string(pid) + "\n") break;
  }
  int calls = 0;
  auto counting = [&](const RunConfig& rc) { ++calls; return fake_eval(rc); };
  SweepOptions r = o;
  r.resume = true;
  CHECK_THROWS_WITH_AS(run_sweep(matrix(), r, counting), doctest::Contains(("locked by process " + std::to_string(pid)).c_str()),
                       InputError);
  CHECK(calls == 0);
  kill(pid, SIGKILL);  // the kernel releases a dead holder's lock
  waitpid(pid, nullptr, 0);
  run_sweep(matrix(), r, counting);
  auto counts = cell_counts(dir / "results.jsonl");
  CHECK(counts.size() == 12);
  for (const auto& [cell, n] : counts) CHECK_MESSAGE(n == 1, cell);  // no cell twice
}

TEST_CASE("sweep: --resume refuses results measured against another model, record or case set") {
  test::TempDir dir("sweep-identity");
  SweepOptions o;
  o.progress = false;
  o.out = dir.path();
  o.identity = {{"model", "m1"}, {"golden", "sha256:g1"}, {"cases", {"a"}}, {"decode", true}};
  int calls = 0;
  auto counting = [&](const RunConfig& rc) { ++calls; return fake_eval(rc); };
  run_sweep(matrix(), o, counting);
  for (const auto& j : read_sweep_results(dir / "results.jsonl")) CHECK(j["identity"] == o.identity);
  o.resume = true;
  SweepOptions other = o;
  other.identity["cases"] = {"b"};
  CHECK_THROWS_WITH_AS(run_sweep(matrix(), other, counting),
                       doctest::Contains("cases (--case/--cases): expected [\"b\"] (this run), found [\"a\"]"), InputError);
  other = o;
  other.identity["model"] = "m2";
  CHECK_THROWS_WITH_AS(run_sweep(matrix(), other, counting),
                       doctest::Contains("model fingerprint (--model): expected \"m2\" (this run), found \"m1\""), InputError);
  calls = 0;
  CHECK(run_sweep(matrix(), o, counting).size() == 12);  // the same run resumes
  CHECK(calls == 0);
  // Results written before identities: refused, with what to do.
  std::string stripped;
  for (auto& j : read_sweep_results(dir / "results.jsonl")) {
    j.erase("identity");
    stripped += j.dump() + "\n";
  }
  std::ofstream(dir / "results.jsonl", std::ios::trunc) << stripped;
  CHECK_THROWS_WITH_AS(run_sweep(matrix(), o, counting), doctest::Contains("older degenbisect"), InputError);
  CHECK_THROWS_WITH_AS(run_sweep(matrix(), o, counting), doctest::Contains("choose a new --out"), InputError);
  CHECK(calls == 0);
}
