// `degenbisect sweep`: compare every cell of a toggle matrix against a golden record with the model
// loaded once (src/diag/sweep.h); results.jsonl in --out, a table and main effects at the end.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/command.h"
#include "cli/server_flags.h"
#include "cli/session.h"
#include "record/cases.h"
#include "diag/evaluate.h"
#include "diag/server_sweep.h"
#include "backends/make_backend.h"
#include "util/file_io.h"
#include "util/error.h"
#include "util/output_file.h"

namespace degen::cli {
namespace {

namespace fs = std::filesystem;

struct SweepArgs {
  std::string golden, model, matrix, base, out, shard = "1/1", cases_file;
  std::vector<std::string> axes, cases;
  bool resume = false, isolate = false, no_decode = false, allow_mismatch = false;
  // Server sweeps
  std::string server_cmd;
  ServerFlags srv;
};

int run_sweep_cmd(const SweepArgs& a) {
  if (a.golden.empty() || a.model.empty() || a.out.empty())
    input_error("sweep: --golden DIR, --model DIR and --out DIR are required");
  check_output_folder(a.out, "sweep --out");
  if (a.matrix.empty() == a.axes.empty()) input_error("sweep: give either --matrix FILE or one or more --axis key=v1,v2");
  const bool server = !a.server_cmd.empty();
  if (server && a.isolate) input_error("sweep: --isolate does not apply to --server-cmd (each server is its own process)");
  if (server && a.no_decode) input_error("sweep: --no-decode is a mode of our engine; with --server-cmd use --no-generate");
  SweepMatrix m = a.matrix.empty() ? sweep_matrix_from_axes(a.base, a.axes, server) : load_sweep_matrix(a.matrix, server);
  if (!a.matrix.empty() && !a.base.empty()) m.base = a.base + (m.base.empty() ? "" : "," + m.base);
  SweepOptions so;
  so.out = a.out;
  so.resume = a.resume;
  so.shard = parse_shard(a.shard);
  so.isolate = a.isolate;
  so.progress = !global_options().quiet;

  Session s = open_session({a.golden, a.model, a.cases, a.allow_mismatch, a.no_decode});  // the model once, for every cell
  if (!a.cases_file.empty())
    for (const auto& c : load_suite(a.cases_file).cases) s.base.cases.push_back(c.id);
  if (!server)
    for (auto& cell : m.cells()) validate_run_config(cell.config, s.model->config);
  // What every result is measured against (a --resume for another model, record or case set is refused).
  so.identity = evaluation_identity(s.rec, *s.model, s.base.cases, s.base.decode_mode);
  if (server) {
    so.identity["server_cmd"] = a.server_cmd;
    so.identity["engine_class"] = a.srv.engine_class;
  }

  std::vector<SweepRow> rows;
  if (server) {
    ServerSweepOptions o;
    o.command = a.server_cmd;
    o.health_timeout_s = a.srv.health_timeout;
    o.out = a.out;
    o.compare = a.srv.options();
    o.compare.cases = s.base.cases;
    o.compare.allow_model_mismatch = a.allow_mismatch;
    auto eval = server_sweep_evaluator(s.rec, *s.model, s.tok.get(), m, o);
    std::fprintf(stderr, "sweep %s: %zu server cells (shard %s), golden %s, results in %s, server logs in %s\n",
                 m.name.c_str(), m.cells().size(), a.shard.c_str(), a.golden.c_str(),
                 (fs::path(a.out) / "results.jsonl").c_str(), (fs::path(a.out) / "servers").c_str());
    rows = run_sweep(m, so, eval);
  } else {
    std::fprintf(stderr, "sweep %s: %zu cells (shard %s), model %s, golden %s, results in %s\n", m.name.c_str(),
                 m.cells().size(), a.shard.c_str(), a.model.c_str(), a.golden.c_str(), (fs::path(a.out) / "results.jsonl").c_str());
    rows = run_sweep(m, so, compare_evaluator(s.rec, *s.model, s.tok.get(), s.base, make_backend));
  }
  std::string table = sweep_table(m, rows), effects = sweep_main_effects(m, rows);
  // Every cell bad: no axis explains it, and the main effects all read "no effect". Say where the
  // cause is, and the command that goes after it.
  size_t n_bad = 0;
  for (const auto& r : rows) n_bad += r.summary.verdict == "bad";
  if (rows.size() >= 2 && n_bad == rows.size()) {
    if (server) {
      effects += cat("every cell is bad: the cause lies in what every cell shares, not in an axis: the rest of the server's\n"
                     "command line, the engine build or the model. Its dump names the layer and step inside the engine\n"
                     "(docs/dump-format.md): compare --golden ", a.golden, " --model ", a.model, " --dump DIR\n");
    } else if (!m.base.empty()) {
      effects += cat("every cell is bad: the cause lies in what every cell shares, not in an axis: the base (", m.base,
                     "), the engine build or the model. Against a clean base:\n  degenbisect bisect --golden ", a.golden,
                     " --model ", a.model, " --bad '", m.base, "' --good default\n");
    } else {
      effects += cat("every cell is bad: the cause lies in what every cell shares, not in an axis: the engine build or the\n"
                     "model (the default configuration is bad too?):\n  degenbisect compare --golden ", a.golden, " --model ",
                     a.model, "\n");
    }
  }
  std::printf("%s\n%s", table.c_str(), effects.c_str());
  write_file_atomic(fs::path(a.out) / "table.txt", table + "\n" + effects);
  // The worst bad cell (largest mean KLD), for scripts that bisect it next (make demo does).
  const SweepRow* worst = nullptr;
  for (const auto& r : rows)
    if (r.summary.verdict == "bad" && (!worst || r.summary.kld_mean.value_or(0) > worst->summary.kld_mean.value_or(0)))
      worst = &r;
  write_file_atomic(fs::path(a.out) / "worst_cell.txt", worst ? worst->cell + "\n" : std::string());
  int bad = 0, error = 0, untestable = 0;
  for (const auto& r : rows) {
    bad += r.summary.verdict == "bad";
    error += r.summary.verdict == "error";
    untestable += r.summary.verdict == "untestable";
  }
  std::printf("\n%zu cells: %d bad, %d error, %d untestable; results: %s\n", rows.size(), bad, error, untestable,
              (fs::path(a.out) / "results.jsonl").c_str());
  if (bad || error) return static_cast<int>(ExitCode::bad);
  if (untestable == static_cast<int>(rows.size()) && !rows.empty()) return static_cast<int>(ExitCode::untestable);
  return 0;
}

CommandRegistrar reg("sweep", "Compare every cell of a toggle matrix against a golden record, model loaded once", 50,
                     [](CLI::App* sub) -> std::function<int()> {
  auto a = std::make_shared<SweepArgs>();
  sub->add_option("--golden", a->golden, "Golden record folder");
  sub->add_option("--model", a->model, "Model folder (loaded once)");
  sub->add_option("--matrix", a->matrix, "Matrix file (JSON: base, axes, cells; see cases/matrix-default.json)");
  sub->add_option("--axis", a->axes, "An axis key=v1,v2,... (repeatable; instead of --matrix)");
  sub->add_option("--base", a->base, "Toggles applied to every cell first (key=value,...)");
  sub->add_option("--out", a->out,
                  "Output folder: results.jsonl (one line per finished cell), sweep.json, table.txt, worst_cell.txt");
  sub->add_flag("--resume", a->resume,
                "Continue a sweep in --out: finished cells are not run again (refused when --out was made with\n"
                "another --model, --golden, --case/--cases or --no-decode)");
  sub->add_option("--shard", a->shard, "Run share i of n (cells whose index % n == i - 1), e.g. 2/4");
  sub->add_flag("--isolate", a->isolate, "Run each cell in a child process: a crash costs one cell (verdict error)");
  sub->add_option("--case", a->cases, "Only this case id of the record (repeatable)");
  sub->add_option("--cases", a->cases_file, "Only the case ids of this suite file");
  sub->add_flag("--no-decode", a->no_decode,
                "Skip the decode-mode teacher-forced passes (faster; misses bugs of the decode path alone, such as\n"
                "fault=conv-window-stuck and kv-off-by-one)");
  sub->add_flag("--allow-model-mismatch", a->allow_mismatch, "Accept a record made for another checkpoint");
  sub->add_option("--server-cmd", a->server_cmd,
                  "Sweep a server's flags instead of our toggles: the command that starts one server, with {port}\n"
                  "and a {KEY} placeholder per axis or base parameter; each cell starts it, waits for GET /health,\n"
                  "scores it as compare --server does, and stops it (docs/server.md)");
  a->srv.add(sub, "--server-cmd");
  sub->add_option("--engine-class", a->srv.engine_class, "With --server-cmd: the floor class of every cell (fp32, bf16 or q8_0)")
      ->check(CLI::IsMember({"fp32", "bf16", "q8_0"}));
  sub->footer(cat("A matrix may have at most ", kMaxSweepCells, " cells (refused before any work, with its count). One sweep per --out\n"
              "at a time: a second one on the same folder is refused, naming the first one's PID (--out/sweep.lock).\n"
              "Exit: 0 no cell bad, 1 some cell bad or crashed, 125 every cell untestable, 128 input error.\n"
              "Example:\n  degenbisect sweep --golden golden/tiny-qwen35/smoke --model models/tiny-qwen35 \\\n"
              "      --matrix cases/matrix-default.json --out out/sweep\n"
              "  degenbisect sweep --golden G --model M --axis attn=naive,flash --axis ssm_dtype=fp32,fp16 \\\n"
              "      --base precision=bf16 --out out/s2\n"
              "  degenbisect sweep --golden golden/tiny-trained/smoke --model models/tiny-trained --out out/llama-flags \\\n"
              "      --server-cmd 'build/llama.cpp/build/bin/llama-server -m GGUF --port {port} -fa {fa} -ctk {ctk}' \\\n"
              "      --axis fa=on,off --axis ctk=f16,q8_0"));
  return [a] { return run_sweep_cmd(*a); };
});

}  // namespace
}  // namespace degen::cli
