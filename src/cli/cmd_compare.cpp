// `degenbisect compare`: run one configuration against a golden record (src/judge/result.h) and
// answer good / bad / untestable with the exit code of metrics.md §6; a compact per-layer table and
// the verdict on stdout, JSON (--json FILE or - for stdout) and JUnit (--junit FILE) on request.
#include <cstdio>
#include <filesystem>
#include <memory>

#include <unistd.h>

#include "cli/command.h"
#include "cli/server_flags.h"
#include "cli/session.h"
#include "report/compare_text.h"
#include "judge/result.h"
#include "subjects/dump_reader.h"
#include "subjects/server/compare.h"
#include "diag/server_sweep.h"
#include "backends/make_backend.h"
#include "util/file_io.h"
#include "report/junit.h"
#include "util/error.h"
#include "util/json_output.h"
#include "util/output_file.h"

namespace degen::cli {
namespace {

struct CompareArgs {
  std::string golden, model, config, json, junit, dump, server, server_cmd, server_log;
  ServerFlags srv;
  std::vector<std::string> cases;
  bool allow_mismatch = false, fail_on_model = false, no_decode = false, per_case = false;
};

void write_out(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  write_file_atomic(path, text);
}

int run_compare(const CompareArgs& a) {
  if (a.golden.empty() || a.model.empty()) input_error("compare: --golden DIR and --model DIR are required");
  if (!a.json.empty() && a.json == a.junit) input_error("compare: --json and --junit name the same file");
  // --json / --junit FILE must be writable before the run: a verdict printed and then an exit 128
  // for a failed write would contradict each other.
  check_output_file(a.json, "compare --json");
  check_output_file(a.junit, "compare --junit");
  check_output_file(a.server_log, "compare --server-log");
  const RunConfig config = parse_run_config(a.config);
  const Session s = open_session({a.golden, a.model, a.cases, a.allow_mismatch, a.no_decode});
  const GoldenRecord& rec = s.rec;
  // The options every subject shares (judge/result.h CommonCompareOptions), built once: --case and --allow-model-mismatch
  // (the session's), --fail-on-model-degeneration.
  CommonCompareOptions common = s.base;
  common.fail_on_model_degeneration = a.fail_on_model;
  CompareOptions o = s.base;
  static_cast<CommonCompareOptions&>(o) = common;
  o.config = config;
  // With --json -, stdout carries the JSON only; the table goes to stderr.
  std::FILE* text_out = a.json == "-" ? stderr : stdout;
  std::FILE* progress = global_options().quiet ? nullptr : stderr;

  CompareResult r;
  // --server-cmd: the server this run started, and its log (where a crash behind it is explained)
  std::unique_ptr<ServerProcess> started;
  std::filesystem::path started_log;
  try {
    const EngineClass ec = parse_engine_class(a.srv.engine_class);
    const FloorClass engine_class = ec.record_class;
    if (!a.server_cmd.empty() && !a.server.empty())
      input_error("compare: --server URL scores a running server, --server-cmd starts one: give one of them");
    if (!a.dump.empty() && (!a.server.empty() || !a.server_cmd.empty()))
      input_error("compare: --dump and --server: one other engine at a time");
    // --server-cmd: start the server on a free port, wait until it is healthy, score it, stop it
    // (`git bisect run` over an engine's history: README).
    std::string url = a.server;
    if (!a.server_cmd.empty()) {
      const int port = free_local_port();
      const std::string cmd = fill_server_command(a.server_cmd, {}, port);
      const std::filesystem::path log =
          a.server_log.empty() ? std::filesystem::temp_directory_path() / cat("degenbisect-server-", ::getpid(), ".log")
                               : std::filesystem::path(a.server_log);
      if (progress) std::fprintf(progress, "compare: starting the server: %s (log: %s)\n", cmd.c_str(), log.c_str());
      started_log = log;
      started = std::make_unique<ServerProcess>(cmd, log);
      url = cat("http://127.0.0.1:", port);
      started->wait_healthy(url, a.srv.health_timeout);
    }
    if ((!a.dump.empty() || !a.server.empty() || !a.server_cmd.empty()) && !a.config.empty())
      input_error("compare: --dump and --server judge another engine; --config (our engine's toggles) does not apply");
    if (!url.empty()) {
      ServerCompareOptions so = a.srv.options();
      static_cast<CommonCompareOptions&>(so) = common;
      so.url = url;
      r = compare_server(rec, *s.model, s.tok.get(), so, progress);
    } else if (!a.dump.empty()) {
      DumpCompareOptions d;
      static_cast<CommonCompareOptions&>(d) = common;
      d.dir = a.dump;
      d.fclass = engine_class;
      d.measured_class = ec.measured;
      d.class_name = ec.name;
      r = compare_dump(rec, *s.model, s.tok.get(), d, make_backend, progress);
    } else {
      r = compare_golden(rec, *s.model, s.tok.get(), o, make_backend, progress);
    }
  } catch (const UntestableError& untestable) {
    // A server this run started that failed a request (an engine dead behind its HTTP front end
    // answers 500 "see the stack trace"): the first exception its log states is the cause.
    std::string why = untestable.what();
    if (started) {
      const std::string cause = first_exception_line(started_log);
      if (!cause.empty()) why += cat("; the server's log (", started_log.string(), ") states first: ", cause);
    }
    const UntestableError e(why);
    std::vector<std::string> ids;
    for (const GoldenCase& c : rec.cases()) ids.push_back(c.id);
    if (!a.json.empty()) {
      nlohmann::json j = {{"tool", "degenbisect compare"}, {"golden", a.golden}, {"model", a.model},
                          {"config", o.config.str()}, {"suite", rec.suite()}, {"verdict", "untestable"},
                          {"reason", e.what()}, {"exit_code", static_cast<int>(ExitCode::untestable)}};
      write_out(a.json, json_text(j, 1) + "\n");
    }
    if (!a.junit.empty()) write_out(a.junit, report::junit_untestable_compare(rec.suite(), ids, e.what()));
    std::fprintf(text_out, "verdict: untestable (exit 125): %s\n", e.what());
    return static_cast<int>(ExitCode::untestable);
  }
  const std::string text = format_compare(r, a.per_case);
  const nlohmann::json j = r.to_json();
  // The files first, then the verdict: a write that fails anyway (disk full) exits 128 with no
  // verdict printed that would contradict it. (--json -: the text goes to stderr, the order is moot.)
  if (!a.json.empty() && a.json != "-") write_out(a.json, json_text(j, 1) + "\n");
  // The report's JUnit writer (src/report/junit.h), the same XML `report --format junit` writes.
  if (!a.junit.empty()) write_out(a.junit, report::junit_for_compare(j));
  std::fwrite(text.data(), 1, text.size(), text_out);
  std::fflush(text_out);
  if (a.json == "-") write_out(a.json, json_text(j, 1) + "\n");
  return r.exit_code;
}

CommandRegistrar reg("compare", "Measure a configuration against a golden record: per-layer and per-token errors, verdict", 40,
                     [](CLI::App* sub) -> std::function<int()> {
  auto a = std::make_shared<CompareArgs>();
  sub->add_option("--golden", a->golden, "Golden record folder (from `degenbisect golden`)");
  sub->add_option("--model", a->model, "Model folder to run (the record's model unless --allow-model-mismatch)");
  sub->add_option("--config", a->config, "Tested configuration, key=value,... (DESIGN.md §5; default: the CPU reference)");
  sub->add_option("--json", a->json, "Write the full result as JSON to FILE ('-': stdout, the table goes to stderr)");
  sub->add_option("--junit", a->junit, "Write JUnit XML (one testcase per case) to FILE");
  sub->add_option("--case", a->cases, "Only this case id (repeatable)");
  sub->add_flag("--allow-model-mismatch", a->allow_mismatch,
                "Compare even though the record was made for another checkpoint (e.g. a quantised copy)");
  sub->add_flag("--fail-on-model-degeneration", a->fail_on_model,
                "Exit 1 also when the output degenerates only where the golden run degenerates too");
  sub->add_flag("--per-case", a->per_case, "Print the per-layer table of every case (default: worst over the cases)");
  sub->add_flag("--no-decode", a->no_decode,
                "Skip the decode-mode (one token per call) teacher-forced passes: faster, but bugs of the decode path\n"
                "alone (fault=conv-window-stuck, kv-off-by-one) then go unmeasured and the verdict can be good");
  sub->add_option("--dump", a->dump,
                  "Judge another engine's dump instead of running ours: a folder of CASE.safetensors written by\n"
                  "tools/llama_dump (llama.cpp) over this record's tokens (docs/dump-format.md); names the first\n"
                  "layer over its drift floor and, in it, the first step");
  sub->add_option("--server", a->server,
                  "Judge a running inference server instead of our engine: its base URL (e.g. http://127.0.0.1:8080);\n"
                  "teacher-forced top-K log-probs at every golden position and free-running generation (docs/server.md)");
  sub->add_option("--server-cmd", a->server_cmd,
                  "Start the server to judge instead of naming a running one: its command line with {port}; it is\n"
                  "waited for until GET /health answers 200 (--health-timeout), scored as with --server, and stopped");
  sub->add_option("--server-log", a->server_log, "With --server-cmd: where the server's output goes (default: a temp file)");
  a->srv.add(sub, "--server");
  sub->add_option("--engine-class", a->srv.engine_class,
                  "With --dump or --server: the floor class the other engine's run belongs to: fp32 (f32 weights, f32\n"
                  "caches, exact attention), bf16 (16-bit weights or caches) or q8_0 (Q8_0 weights: the floor is\n"
                  "measured now, our engine at precision=q8_0)")
      ->check(CLI::IsMember({"fp32", "bf16", "q8_0"}));
  sub->footer(
      "Per case: teacher-forced drift and KLD (prefill and decode mode), isolated layer errors with golden inputs\n"
      "injected and the first layer over its noise floor (k = 3), free-running generation with the degeneration\n"
      "metrics and model-or-engine. The floors are the record's fp32 class for the CPU at precision=ref/fp64\n"
      "without storage or attention toggles, its bf16 class otherwise. Without floors of that class the limits\n"
      "are fixed (isolated rel_l2 <= 1e-4, mean KLD <= 1e-4 nats), which suit fp32-class paths only.\n"
      "Exit: 0 good (or model-intrinsic degeneration), 1 bad, 125 untestable, 128 input error.\n"
      "With --dump DIR: the other engine's teacher-forced run (logits and every layer's output) against the record;\n"
      "its drift is judged against a known-good run of --engine-class measured on the CPU reference; no generation.\n"
      "With --server URL: a running server's top-K log-probs at every golden position (one request each) and its\n"
      "free-running output; exit 125 when it cannot be reached, times out or refuses, 128 when it answers garbage.\n"
      "Examples:\n"
      "  degenbisect compare --golden golden/tiny-qwen35/smoke --model models/tiny-qwen35 --config gdn=recurrent\n"
      "  degenbisect compare --golden G --model M --config precision=fp64 --json out.json --junit junit.xml\n"
      "  degenbisect compare --golden golden/tiny-trained/smoke --model models/tiny-trained --dump out/llama-dump\n"
      "  degenbisect compare --golden golden/tiny-trained/smoke --model models/tiny-trained --server http://127.0.0.1:8080");
  return [a] { return run_compare(*a); };
});

}  // namespace
}  // namespace degen::cli
