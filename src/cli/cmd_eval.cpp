// `degenbisect eval`: what a trained model does on one configuration of our engine (src/diag/model_eval.h):
// held-out task accuracy, long free-running degeneration, MTP acceptance at 1..k drafts; against the
// reference when the configuration is another; and with --faults the fault table.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/command.h"
#include "cli/session.h"
#include "diag/model_eval.h"
#include "engine/faults.h"
#include "backends/make_backend.h"
#include "util/file_io.h"
#include "util/error.h"
#include "util/json_output.h"
#include "util/output_file.h"

namespace degen::cli {
namespace {

namespace fs = std::filesystem;

struct EvalArgs {
  std::string model, golden, heldout, config, json;
  std::vector<std::string> cases, only_faults;
  size_t limit = 0, fault_questions = 40;
  int mtp_max = 3, max_new_tokens = 256;
  double tolerance_points = 2.0;
  bool faults = false, no_reference = false;
};

// The figures of the tested configuration that differ from the reference's by more than the
// tolerance. A figure over n items cannot resolve less than one item (100/n points: 6.25 for 16 long
// cases), so the tolerance is at least that; one item's flip is not a difference.
std::vector<std::string> differences_beyond(const EvalFigures& tested, const EvalFigures& reference,
                                            double tolerance_points) {
  std::vector<std::string> beyond;
  auto check = [&](const char* what, double t, double r, int64_t n) {
    const double allowed = std::max(tolerance_points, n > 0 ? 100.0 / static_cast<double>(n) : 0.0);
    if (std::fabs(100 * (t - r)) > allowed + 1e-9)
      beyond.push_back(cat(what, " differs by ", std::lround(1000 * (t - r)) / 10.0, " points (allowed ",
                           std::lround(100 * allowed) / 100.0, ")"));
  };
  check("task accuracy", tested.accuracy.accuracy(), reference.accuracy.accuracy(), tested.accuracy.n);
  if (tested.long_cases && reference.long_cases)
    check("long cases ok", tested.long_cases->ok_fraction(), reference.long_cases->ok_fraction(), tested.long_cases->n);
  for (const MtpFigure& m : tested.mtp)
    for (const MtpFigure& r : reference.mtp)
      if (m.drafts == r.drafts && m.drafts == 1 && m.spec.accept_rate && r.spec.accept_rate)
        check("MTP acceptance (1 draft)", *m.spec.accept_rate, *r.spec.accept_rate, m.spec.proposed);
  return beyond;
}

// --faults: the fault table on the held-out questions and the golden record's long cases, printed
// to `out` against the tested configuration's accuracy on the same questions; its rows as JSON.
nlohmann::json print_fault_table(const EvalArgs& a, const RunConfig& config, const LoadedModel& lm, const HeldoutSet& set,
                                 const GoldenRecord& rec, const EvalFigures& tested, std::FILE* progress, std::FILE* out) {
  FaultTableOptions fo;
  fo.base = config;
  fo.questions = a.fault_questions;
  fo.cases = a.cases;
  fo.only = a.only_faults;
  fo.max_new_tokens = a.max_new_tokens;
  const std::vector<FaultRow> rows = fault_table(*lm.model, *lm.tok, set, rec, fo, make_backend, progress);
  // the reference accuracy on the fault table's questions
  AccuracyResult same;
  const std::vector<HeldoutQuestion> fq = select_questions(set, a.fault_questions);
  for (const QuestionResult& r : tested.accuracy.rows)
    for (const HeldoutQuestion& q : fq)
      if (q.id == r.id) {
        ++same.n;
        same.correct += r.correct;
      }
  const std::string t = format_fault_table(rows, same.accuracy());
  std::fwrite(t.data(), 1, t.size(), out);
  nlohmann::json fr = nlohmann::json::array();
  for (const FaultRow& r : rows) fr.push_back(r.to_json());
  return fr;
}

int run_eval(const EvalArgs& a) {
  if (a.model.empty()) input_error("eval: --model DIR is required");
  check_output_file(a.json, "eval --json");  // before the run, not after its verdict
  if (a.mtp_max < 0 || a.mtp_max > 4) input_error("eval: --mtp-max must be in [0, 4], found ", a.mtp_max);
  if (a.max_new_tokens < 1) input_error("eval: --max-new-tokens must be >= 1, found ", a.max_new_tokens);
  if (!(a.tolerance_points >= 0)) input_error("eval: --tolerance must be >= 0 points");
  if (a.faults && a.golden.empty()) input_error("eval: --faults needs --golden (the long-decode record of the model)");
  const RunConfig config = parse_run_config(a.config);
  const fs::path heldout_path = a.heldout.empty() ? fs::path(a.model) / "heldout.json" : fs::path(a.heldout);
  if (a.heldout.empty() && !fs::exists(heldout_path))
    input_error("eval: the model folder ", a.model, " has no held-out question set (heldout.json); eval needs a "
                "model trained with one (models/tiny-trained) or --heldout FILE");
  const HeldoutSet set = load_heldout(heldout_path);
  std::unique_ptr<GoldenRecord> rec;
  if (!a.golden.empty()) rec = std::make_unique<GoldenRecord>(GoldenRecord::open(a.golden));
  LoadedModel lm = load_model_and_tokenizer(a.model);
  if (!lm.tok) input_error("eval: ", a.model, " has no tokenizer.json; the questions are text");
  std::FILE* progress = global_options().quiet ? nullptr : stderr;
  std::FILE* out = a.json == "-" ? stderr : stdout;

  EvalOptions o;
  o.config = config;
  o.limit = a.limit;
  o.mtp_max = a.mtp_max;
  o.max_new_tokens = a.max_new_tokens;
  o.cases = a.cases;
  const std::vector<HeldoutQuestion> qs = select_questions(set, a.limit);
  std::fprintf(out, "eval: %s, %zu of %zu held-out questions (%s)%s\n", a.model.c_str(), qs.size(), set.questions.size(),
               heldout_path.string().c_str(), rec ? cat(", long cases of ", a.golden).c_str() : "");

  nlohmann::json j = {{"tool", "degenbisect eval"}, {"model", a.model}, {"heldout", heldout_path.string()},
                      {"heldout_sha256", set.sha256}, {"golden", a.golden}};
  // --fault names are checked before any evaluation (a misspelt one cost the whole reference run first)
  for (const std::string& f : a.only_faults)
    if (!find_fault(f)) input_error("--fault '", f, "' is not in the catalogue (degenbisect faults lists it)");
  int code = 0;
  EvalFigures tested, reference;
  const bool is_reference = config == RunConfig{};
  try {
    tested = evaluate_model(*lm.model, *lm.tok, qs, rec.get(), o, make_backend, progress);
  } catch (const UntestableError& e) {
    std::fprintf(out, "verdict: untestable (exit 125): %s\n", e.what());
    j["verdict"] = "untestable";
    j["reason"] = e.what();
    if (!a.json.empty()) {
      const std::string text = json_text(j, 1) + "\n";
      if (a.json == "-") std::fwrite(text.data(), 1, text.size(), stdout);
      else write_file_atomic(a.json, text);
    }
    return static_cast<int>(ExitCode::untestable);
  }
  j["tested"] = tested.to_json(true);
  std::vector<std::string> beyond;
  if (!is_reference && !a.no_reference) {
    EvalOptions ro = o;
    ro.config = RunConfig{};
    reference = evaluate_model(*lm.model, *lm.tok, qs, rec.get(), ro, make_backend, progress);
    j["reference"] = reference.to_json(true);
    beyond = differences_beyond(tested, reference, a.tolerance_points);
  }
  std::string text = format_eval(tested, is_reference || a.no_reference ? nullptr : &reference);
  if (!is_reference && !a.no_reference)
    text += cat("reference (", reference.config, ") took ", std::lround(reference.seconds), " s\n");
  std::fwrite(text.data(), 1, text.size(), out);

  if (a.faults) j["faults"] = print_fault_table(a, config, lm, set, *rec, tested, progress, out);

  if (!beyond.empty()) {
    code = static_cast<int>(ExitCode::bad);
    std::string msg;
    for (const auto& b : beyond) msg += (msg.empty() ? "" : "; ") + b;
    std::fprintf(out, "verdict: bad (exit 1): %s from the reference (tolerance %g points)\n", msg.c_str(), a.tolerance_points);
    j["verdict"] = "bad";
    j["reason"] = msg;
  } else {
    std::fprintf(out, "verdict: good (exit 0)%s\n",
                 is_reference || a.no_reference ? "" : cat(": every figure within ", a.tolerance_points, " points (or one item) of the reference").c_str());
    j["verdict"] = "good";
  }
  j["exit_code"] = code;
  if (!a.json.empty()) {
    const std::string jt = json_text(j, 1) + "\n";
    if (a.json == "-") std::fwrite(jt.data(), 1, jt.size(), stdout);
    else write_file_atomic(a.json, jt);
  }
  return code;
}

CommandRegistrar reg("eval", "A trained model's figures on a configuration: held-out accuracy, long-decode loops, MTP acceptance, fault table", 75,
                     [](CLI::App* sub) -> std::function<int()> {
  auto a = std::make_shared<EvalArgs>();
  sub->add_option("--model", a->model, "Model folder with a held-out question set (heldout.json), e.g. models/tiny-trained");
  sub->add_option("--golden", a->golden, "Golden record of the model's long cases (free-running figures, fault table), "
                                         "e.g. golden/tiny-trained/long-decode");
  sub->add_option("--config", a->config, "Tested configuration, key=value,... (default: the CPU reference); no sampling, no mtp");
  sub->add_option("--heldout", a->heldout, "Held-out questions (default: MODEL/heldout.json)");
  sub->add_option("--limit", a->limit, "Only N questions, every kind kept in proportion (default: all)");
  sub->add_option("--case", a->cases, "Only this long case of the record (repeatable)");
  sub->add_option("--mtp-max", a->mtp_max, "MTP figures at 1..N drafts per step (default 3; 0: none)");
  sub->add_option("--max-new-tokens", a->max_new_tokens, "Token budget per question (default 256)");
  sub->add_option("--tolerance", a->tolerance_points, "Points the figures may differ from the reference's (default 2; "
                                                      "at least one item's share of a figure)");
  sub->add_flag("--no-reference", a->no_reference, "Do not run the reference for a configuration other than it");
  sub->add_flag("--faults", a->faults, "Also the fault table: every catalogue fault, at every layer of its kind and at one layer");
  sub->add_option("--fault", a->only_faults, "With --faults: only this fault (repeatable)");
  sub->add_option("--fault-questions", a->fault_questions, "With --faults: held-out questions per row (default 40)");
  sub->add_option("--json", a->json, "Write every figure as JSON to FILE ('-': stdout, the text goes to stderr)");
  sub->footer(
      "A question is right when its answer (the text after </think>) contains every expected string as whole words,\n"
      "and an expected number is also the answer's last number. A long case is ok with no loop onset and\n"
      "seq_rep_4 <= 0.1 (metrics.md §4), under the case's own sampling (the record's: the model card's settings).\n"
      "Exit: 0 good (every figure within --tolerance points of the reference's, or one item's share when that is\n"
      "more: 6.25 points for 16 long cases), 1 beyond it, 125 untestable\n"
      "configuration, 128 input error (no held-out set, a record of another model, bad flags).\n"
      "Examples:\n"
      "  degenbisect eval --model models/tiny-trained --golden golden/tiny-trained/long-decode\n"
      "  degenbisect eval --model models/tiny-trained --golden golden/tiny-trained/long-decode --config precision=bf16\n"
      "  degenbisect eval --model models/tiny-trained --golden golden/tiny-trained/long-decode --faults --json out/faults.json");
  return [a] { return run_eval(*a); };
});

}  // namespace
}  // namespace degen::cli
