// compare() (judge/compare.h): the record check, the case selection, the header, the case loop over
// a Subject's parts and the one verdict rule.
#include "judge/compare.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <map>

#include "model/digests.h"
#include "model/tokenizer.h"
#include "util/error.h"

namespace degen {

using metrics::Verdict;

// Step 0: is this record for this model? A record of another model is refused unless asked for; a
// record whose weight sample differs is compared and flagged.
void check_record(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, bool allow_model_mismatch,
                  CompareResult& r) {
  const ModelConfig& cfg = model.config;
  r.manifest_checked = rec.manifest_checked();
  // NaN or Inf in the weights: the model is broken whatever engine runs it; no verdict on the engine.
  if (model.checkpoint) {
    if (!model.nonfinite) model.nonfinite = find_nonfinite(*model.checkpoint);
    if (!model.nonfinite->empty()) {
      throw InputError(cat(nonfinite_message(*model.nonfinite, model.checkpoint->tensors().size(), "the model"), "\n",
                           model.dir.string(), " is broken (not the engine): nothing to compare; fix or re-download it"));
    }
  }
  // The tokenizer: its stop ids, padding mask and chat template shaped the record's continuations.
  r.record_tokenizer = rec.tokenizer_fingerprint();
  r.model_tokenizer = tok ? tok->fingerprint() : "";
  if (!r.record_tokenizer.empty() && r.record_tokenizer != r.model_tokenizer) {
    if (!allow_model_mismatch)
      input_error("golden record ", rec.dir().string(), " was made with tokenizer ", r.record_tokenizer, ", but ",
                  model.dir.string(), tok ? cat(" has tokenizer ", r.model_tokenizer) : std::string(" has no tokenizer.json"),
                  ": its stop ids, padding and chat template may differ from the record's; refusing to compare (use "
                  "--allow-model-mismatch to compare anyway)");
    r.tokenizer_mismatch = true;
  }
  if (rec.model_fingerprint() != model.fingerprint) {
    const std::string made_for = rec.manifest().model.name.value_or("?");
    if (!allow_model_mismatch)
      input_error("golden record ", rec.dir().string(), " was made for another model ('", made_for, "', fingerprint ",
                  rec.model_fingerprint().substr(0, 16), "...), not ", model.dir.string(), " (fingerprint ",
                  model.fingerprint.substr(0, 16), "...); refusing to compare (use --allow-model-mismatch for a "
                  "deliberate variant such as a quantised copy)");
    r.model_mismatch = true;
  } else if (!rec.tensor_digests().empty()) {
    // Every tensor, all its bytes: name the ones that differ from the recorded model's.
    if (!model.tensor_digests) model.tensor_digests = tensor_digests(*model.checkpoint);
    const std::map<std::string, std::string>& now = *model.tensor_digests;
    for (const auto& [name, d] : rec.tensor_digests()) {
      auto it = now.find(name);
      if (it == now.end() || it->second != d) r.changed_tensors.push_back(name);
    }
    for (const auto& [name, d] : now)
      if (!rec.tensor_digests().count(name)) r.changed_tensors.push_back(name);
    r.weights_differ = !r.changed_tensors.empty();
  } else if (!rec.weights_sample().empty() && rec.weights_sample() != weights_sample_digest(*model.checkpoint)) {
    r.weights_differ = true;
  }
  if (rec.num_layers() != cfg.num_layers || rec.hidden() != cfg.hidden_size || rec.vocab() != cfg.vocab_size)
    input_error("golden record ", rec.dir().string(), " has ", rec.num_layers(), " layers, hidden ", rec.hidden(), ", vocabulary ",
                rec.vocab(), "; the model has ", cfg.num_layers, ", ", cfg.hidden_size, ", ", cfg.vocab_size,
                ": they cannot be compared");
}

std::string model_changed_reason(const CompareResult& r) {
  std::string names;
  for (size_t i = 0; i < r.changed_tensors.size() && i < 3; ++i) names += (i ? ", " : "") + r.changed_tensors[i];
  if (r.changed_tensors.size() > 3) names += cat(", ... (", r.changed_tensors.size() - 3, " more)");
  return cat("the model changed: ",
             r.changed_tensors.empty() ? std::string("its weight values differ from the record's model")
                                       : cat(r.changed_tensors.size(), r.changed_tensors.size() == 1 ? " tensor differs" : " tensors differ",
                                             " from the record's model (", names, ")"),
             ", so the errors above may be the checkpoint's, not the engine's (`degenbisect bisect` without a toggle "
             "tells the model from the engine build)");
}

// The record's indices of the cases asked for (all when none).
std::vector<size_t> select_cases(const GoldenRecord& rec, const std::vector<std::string>& ids) {
  std::vector<size_t> selected;
  for (const std::string& id : ids) {
    auto it = std::find_if(rec.cases().begin(), rec.cases().end(), [&](const GoldenCase& c) { return c.id == id; });
    if (it == rec.cases().end()) input_error("compare: case '", id, "' is not in the record (suite '", rec.suite(), "')");
    selected.push_back(static_cast<size_t>(it - rec.cases().begin()));
  }
  if (ids.empty())
    for (size_t i = 0; i < rec.cases().size(); ++i) selected.push_back(i);
  return selected;
}

void judge_case(CaseWork& w) {
  CaseResult& cr = w.cr;
  cr.verdict = !w.bad.empty()                                  ? Verdict::bad
               : !w.unjudged.empty()                           ? Verdict::untestable
               : cr.gen.verdict == Verdict::model_intrinsic ? Verdict::model_intrinsic
                                                               : Verdict::good;
  cr.reasons = w.bad;
  cr.reasons.insert(cr.reasons.end(), w.unjudged.begin(), w.unjudged.end());
  cr.reasons.insert(cr.reasons.end(), w.warn.begin(), w.warn.end());
}

std::string Subject::progress(const CaseResult& cr) const {
  return cat("compare: case ", cr.id, ": ", metrics::verdict_name(cr.verdict), " (", cat(std::fixed, std::setprecision(2), cr.seconds),
             " s)");
}

namespace {

// The header every comparison shares: what was compared with what, and the floors it is judged by.
void fill_header(const GoldenRecord& rec, const Model& model, const Subject& subject, CompareResult& r) {
  r.golden_dir = rec.dir().string();
  r.model_dir = model.dir.string();
  r.suite = rec.suite();
  r.record_fingerprint = rec.model_fingerprint();
  r.model_fingerprint = model.fingerprint;
  subject.describe(r);
  const SubjectFloors f = subject.floors();
  r.floor_class = f.name;
  r.floors = f.measured || rec.floors_present(f.record_class);
  r.floors_reason = f.measured ? "" : rec.floors_reason(f.record_class);
}

// One case through the subject's parts, judged.
CaseResult run_case(Subject& subject, const CompareResult& r, size_t slot, size_t index) {
  using clock = std::chrono::steady_clock;
  const auto c0 = clock::now();
  CaseWork w;
  w.slot = slot;
  w.index = index;
  subject.begin_case(w);
  subject.teacher_forced(w);
  subject.layers(w);
  subject.checks(w);
  subject.generation(w);
  subject.reasons(w);
  judge_case(w);
  if (w.cr.verdict == Verdict::bad && r.weights_differ && subject.notes_model_change())
    w.cr.reasons.push_back(model_changed_reason(r));  // not the engine's fault, as far as compare can tell
  w.cr.seconds = std::chrono::duration<double>(clock::now() - c0).count() + w.seconds_before;
  return std::move(w.cr);
}

}  // namespace

CompareResult compare(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const CommonCompareOptions& opt,
                      Subject& subject, std::FILE* progress) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  CompareResult r;
  fill_header(rec, model, subject, r);
  check_record(rec, model, tok, opt.allow_model_mismatch, r);
  r.fail_on_model_degeneration = opt.fail_on_model_degeneration && subject.generates();
  r.limits_note = subject.limits_note(r);
  subject.prepare(r);
  const std::vector<size_t> selected = select_cases(rec, opt.cases);
  subject.open(selected, r);
  for (size_t s = 0; s < selected.size(); ++s) {
    r.cases.push_back(run_case(subject, r, s, selected[s]));
    r.verdict = metrics::worst(r.verdict, r.cases.back().verdict);
    if (progress) std::fprintf(progress, "%s\n", subject.progress(r.cases.back()).c_str());
  }
  subject.finish(r, progress);
  r.exit_code = static_cast<int>(metrics::exit_code(r.verdict, r.fail_on_model_degeneration));
  r.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return r;
}

}  // namespace degen
