// Our engine under a configuration as a Subject (subjects/engine.h), and compare_golden.
#include "subjects/engine.h"

#include "judge/compare.h"
#include "subjects/engine/run.h"
#include "util/error.h"

namespace degen {

using engine_subject::EngineRun;

EngineSubject::EngineSubject(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const CompareOptions& opt,
                             const BackendFactory& factory)
    : rec_(rec), model_(model), tok_(tok), opt_(opt), factory_(factory) {}

EngineSubject::~EngineSubject() = default;

void EngineSubject::describe(CompareResult& r) const {
  r.config = opt_.config.str();
  r.decode_skipped = !opt_.decode_mode;
}

SubjectFloors EngineSubject::floors() const {
  const FloorClass fclass = floor_class_for(opt_.config);
  return {floor_class_name(fclass), fclass, false};
}

// The tested path opened, then every selected case generated free-running (tested, and where needed
// the reference under the case's sampling): first, so that batch=all can batch it.
void EngineSubject::open(const std::vector<size_t>& selected, CompareResult& r) {
  run_ = std::make_unique<EngineRun>(rec_, model_, tok_, opt_, factory_);
  r.backend = run_->be->name();
  gens_.assign(selected.size(), GenerationResult{});
  gen_nonfinite_.assign(selected.size(), false);
  engine_subject::run_generations(*run_, selected, gens_, gen_nonfinite_);
  for (GenerationResult& g : gens_) g.model_changed = r.weights_differ;
}

void EngineSubject::begin_case(CaseWork& w) {
  const EngineRun& run = *run_;
  g_ = run.rec.load_case(w.index);
  CaseResult& cr = w.cr;
  cr.id = g_.id;
  seq_ = g_.sequence();
  const int64_t T = static_cast<int64_t>(seq_.size());
  cr.prompt_tokens = static_cast<int64_t>(g_.prompt.size());
  cr.positions = T;
  cr.stored_positions = g_.P;
  for (int32_t id : seq_)
    if (id >= run.V) input_error("golden record: case '", g_.id, "': token id ", id, " >= the model's vocab_size ", run.V);
  next_.assign(seq_.begin() + 1, seq_.end());
  next_.push_back(-1);
  cr.layers.resize(static_cast<size_t>(run.L));
  for (int l = 0; l < run.L; ++l) {
    cr.layers[l].layer = l;
    cr.layers[l].kind = run.cfg.layer_types.empty() ? '?' : (run.cfg.layer_types[l] == LayerKind::full ? 'A' : 'G');
  }
  cr.gen = std::move(gens_[w.slot]);
  nonfinite_ = gen_nonfinite_[w.slot];
  w.seconds_before = cr.gen.seconds;
}

void EngineSubject::teacher_forced(CaseWork& w) { engine_subject::forced_and_isolated(*run_, g_, seq_, next_, w.cr); }

void EngineSubject::checks(CaseWork& w) {
  EngineRun& run = *run_;
  engine_subject::mtp_forced_check(run, g_, seq_, w.cr);
  engine_subject::serving_checks(run, g_, seq_, w.cr);
  if (run.observation_check) {  // once per run: a prefill observed and not (observation.h)
    run.observation_check = false;
    w.cr.observation = check_observation(*run.eng, seq_, run.maskp, g_.id);
  }
}

void EngineSubject::generation(CaseWork& w) {
  engine_subject::generation_consistency(*run_, g_, seq_, next_, w.cr, w.cr.gen);
  engine_subject::free_running_figures(*run_, g_, w.cr, nonfinite_, w.cr.gen);
}

void EngineSubject::reasons(CaseWork& w) {
  CaseResult& cr = w.cr;
  engine_subject::first_break(cr);
  engine_subject::forced_reasons(cr, cr.gen, w.bad, w.warn);
  if (cr.observation && !cr.observation->equal()) w.bad.push_back(cr.observation->reason());
  engine_subject::free_running_reasons(*run_, cr.gen, w.bad, w.warn);
}

void EngineSubject::finish(CompareResult&, std::FILE* progress) {
  if (progress && !run_->be->graph_summary().empty()) std::fprintf(progress, "compare: %s\n", run_->be->graph_summary().c_str());
}

CompareResult compare_golden(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const CompareOptions& opt,
                             const BackendFactory& factory, std::FILE* progress) {
  EngineSubject subject(rec, model, tok, opt, factory);
  return compare(rec, model, tok, opt, subject, progress);
}

}  // namespace degen
