// Another engine's dump as a Subject (subjects/dump.h), and compare_dump: per case, read the dump,
// score its logits and its layer outputs against the record, measure the known-good run's drift of
// the same class, name the first layer over it and, in that layer, the first step over the
// known-good run's error at that step.
#include "subjects/dump.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <span>

#include "engine/backend_factory.h"
#include "engine/engine.h"
#include "judge/compare.h"
#include "model/tokenizer.h"
#include "util/error.h"

namespace degen {

namespace dump_subject {

// The steps of one layer (or l_out of every layer) of a teacher-forced run on our engine.
struct StepCapture {
  std::map<std::pair<int, int>, std::vector<float>> t;  // (step, layer) -> [T, cols]
};

// first_batch: the tokens of the first forward (the whole sequence: prefill; the prompt: decode
// mode, then one forward per token, each step's rows appended in position order).
StepCapture traced_run(Engine& eng, const std::vector<int32_t>& seq, int layer, int64_t first_batch) {
  StepCapture c;
  std::map<std::pair<int, int>, std::vector<float>> call;
  Trace tr;
  tr.observer = [&](const TraceEvent& ev, Tensor& t, Backend& be) {
    if (ev.mtp) return;
    if (ev.layer == layer || ev.step == Step::l_out || ev.layer < 0)
      call[{static_cast<int>(ev.step), ev.layer}] = be.to_host_f32(t);
  };
  SeqState st = eng.new_state();
  ForwardOptions fo;
  fo.logits = LogitsRows::none;
  const int64_t T = static_cast<int64_t>(seq.size());
  for (int64_t p0 = 0; p0 < T;) {
    const int64_t n = p0 == 0 ? std::min(std::max<int64_t>(first_batch, 1), T) : 1;
    call.clear();
    eng.forward({SeqInput{&st, std::vector<int32_t>(seq.begin() + p0, seq.begin() + p0 + n)}}, fo, &tr);
    for (auto& [k, v] : call) {
      std::vector<float>& dst = c.t[k];
      dst.insert(dst.end(), v.begin(), v.end());
    }
    p0 += n;
  }
  return c;
}

const std::vector<float>* step_of(const StepCapture& c, Step s, int layer) {
  auto it = c.t.find({static_cast<int>(s), layer});
  return it == c.t.end() ? nullptr : &it->second;
}

std::span<const float> first_rows(const std::vector<float>& v, int64_t rows, int64_t cols) {
  return {v.data(), static_cast<size_t>(std::min<int64_t>(rows * cols, static_cast<int64_t>(v.size())))};
}

struct DumpRun {
  const GoldenRecord& rec;
  const Model& model;
  const ModelConfig& cfg;
  const DumpCompareOptions& o;
  std::unique_ptr<Backend> ref_be, floor_be;
  std::unique_ptr<Engine> ref, floor;
  std::vector<uint8_t> mask;
  const std::vector<uint8_t>* maskp = nullptr;
  std::string class_name() const { return o.measured_class ? o.class_name : floor_class_name(o.fclass); }

  DumpRun(const GoldenRecord& r, const Model& m, const Tokenizer* tok, const DumpCompareOptions& opt,
          const BackendFactory& factory)
      : rec(r), model(m), cfg(m.config), o(opt) {
    RunConfig ref_rc, floor_rc;
    const bool golden_fp64 = rec.manifest().settings.fp64();
    ref_rc.precision = golden_fp64 ? Precision::fp64 : Precision::ref;
    // The known-good run of each class, as the record's floors were made (golden.cpp GoldenRun).
    floor_rc.precision = o.fclass == FloorClass::bf16 ? Precision::bf16 : golden_fp64 ? Precision::ref : Precision::fp64;
    if (o.measured_class) floor_rc = *o.measured_class;
    ref_be = factory(ref_rc, cfg);
    ref = std::make_unique<Engine>(cfg, model.weights, *ref_be, engine_options(ref_rc));
    floor_be = factory(floor_rc, cfg);
    floor = std::make_unique<Engine>(cfg, model.weights, *floor_be, engine_options(floor_rc));
    if (tok) mask = tok->padding_mask(cfg.vocab_size);
    maskp = mask.empty() ? nullptr : &mask;
  }
};

// Within layer `layer`: the first mapped step whose error against the reference breaks k·(the
// known-good run's error at that step) + eps. Returns the reason line.
std::string localise_step(const DumpRun& run, const DumpReader& f, const std::vector<int32_t>& seq, int layer) {
  const char kind = run.cfg.layer_types[static_cast<size_t>(layer)] == LayerKind::full ? 'A' : 'G';
  const int64_t first = f.mode() == 1 ? f.prompt_tokens() : static_cast<int64_t>(seq.size());
  const StepCapture ref = traced_run(*run.ref, seq, layer, first);
  const StepCapture good = traced_run(*run.floor, seq, layer, first);
  const metrics::FloorRule& rule = run.o.rules.layer;
  std::string within;
  int compared = 0;
  for (const DumpName& n : f.names()) {
    if (n.kind != kind && n.kind != '*') continue;
    const DumpRows d = f.mapped(n, layer);
    const std::vector<float>* r = step_of(ref, n.step, layer);
    const std::vector<float>* g = step_of(good, n.step, layer);
    if (d.v.empty() || !r || !g) continue;
    if (r->size() != d.v.size() || g->size() != r->size()) {
      within += cat("; ", step_name(n.step), ": the engine's '", n.engine, "-", layer, "' has ", d.v.size(),
                    " values, ours ", r->size(), " (not compared)");
      continue;
    }
    ++compared;
    const metrics::TensorError e = metrics::tensor_error(std::span<const float>(d.v), std::span<const float>(*r));
    const double floor = std::max(metrics::tensor_error(std::span<const float>(*g), std::span<const float>(*r)).rel_l2,
                                  run.o.rules.step_floor_min);
    if (!e.passes_nonfinite() || !metrics::floor_pass(e.rel_l2, floor, rule))
      return cat("first step over its floor in layer ", layer, ": ", step_name(n.step), " (the engine's '", n.engine, "-",
                 layer, "', ", n.note, "): rel_l2 ", e.rel_l2, " against the ", run.class_name(),
                 " known-good run's ", floor, " (limit ", rule.k * floor + rule.eps, ")", within);
  }
  return cat("no mapped step of layer ", layer, " is over its floor (", compared,
             " compared): the cause lies between the mapped steps", within);
}

}  // namespace dump_subject

using dump_subject::DumpRun;
using dump_subject::first_rows;
using dump_subject::localise_step;
using dump_subject::step_of;
using dump_subject::StepCapture;
using dump_subject::traced_run;

DumpSubject::DumpSubject(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const DumpCompareOptions& opt,
                         const BackendFactory& factory)
    : rec_(rec), model_(model), tok_(tok), opt_(opt), factory_(factory) {}

DumpSubject::~DumpSubject() = default;

void DumpSubject::describe(CompareResult& r) const {
  r.config = cat("dump ", opt_.dir);
  r.backend = "another engine (its dump)";
  r.source = "dump";
}

SubjectFloors DumpSubject::floors() const {
  return {opt_.measured_class ? opt_.class_name : floor_class_name(opt_.fclass), opt_.fclass, opt_.measured_class.has_value()};
}

std::string DumpSubject::limits_note(const CompareResult& r) const {
  return cat("limits: layers: drift against the drift of a known-good ", r.floor_class, " run measured now (k = 3); logits: ",
             opt_.measured_class ? cat("the ", r.floor_class, " known-good run's KLD (our engine at ", opt_.measured_class->str(), "; k = 3)")
             : r.floors          ? cat("the record's ", r.floor_class, " KLD floor (k = 3)")
                                 : cat("the record's ", r.floor_class, " KLD floor is absent: fixed 1e-4 nats"),
             "; a dump has no isolated errors and no free-running generation");
}

void DumpSubject::prepare(CompareResult&) {
  if (!std::filesystem::is_directory(opt_.dir)) input_error("--dump ", opt_.dir, ": not a folder");
}

void DumpSubject::open(const std::vector<size_t>&, CompareResult&) {
  run_ = std::make_unique<DumpRun>(rec_, model_, tok_, opt_, factory_);
}

// The case's dump opened and checked against the record and the model (DumpReader).
void DumpSubject::begin_case(CaseWork& w) {
  g_ = rec_.load_case(w.index, true);
  file_ = std::filesystem::path(opt_.dir) / (g_.id + ".safetensors");
  seq_ = g_.sequence();
  const int64_t T = static_cast<int64_t>(seq_.size());
  if (!std::filesystem::exists(file_))
    input_error("no dump for case '", g_.id, "': expected ", file_.string(), " (written by llama-dump or a hook script, ",
                "docs/dump-format.md)");
  reader_ = std::make_unique<DumpReader>(file_, g_.id, T, run_->cfg);
  CaseResult& cr = w.cr;
  cr.id = g_.id;
  cr.prompt_tokens = static_cast<int64_t>(g_.prompt.size());
  cr.positions = T;
  cr.stored_positions = g_.P;
}

// The dump's logits against the record's top-K, in the mode the dump was made in (0 prefill, 1 decode).
void DumpSubject::teacher_forced(CaseWork& w) {
  const DumpRun& run = *run_;
  const int64_t V = run.cfg.vocab_size, T = static_cast<int64_t>(seq_.size());
  const int m = reader_->mode();
  const std::vector<float> logits = reader_->logits();
  std::vector<int32_t> next(static_cast<size_t>(T), -1);
  for (int64_t i = 0; i + 1 < T; ++i) next[static_cast<size_t>(i)] = seq_[static_cast<size_t>(i + 1)];
  const std::optional<CaseFloors>& floors = g_.floors[static_cast<int>(opt_.fclass)];
  std::optional<double> kld_floor = floors ? floors->kld[m] : std::nullopt;
  if (opt_.measured_class) kld_floor = teacher_forced_kld(*run.floor, *run.floor_be, g_, V, run.maskp);
  pos_ = logit_positions(logits, T, V, g_.topk, next, run.maskp);
  w.cr.logits[m] = logits_result(pos_, kld_floor, opt_.rules.kld, opt_.rules.fallback_kld);
  set_logprob_offset(*w.cr.logits[m], logits, T, V, g_.topk);  // what the engine would report as log-probs
}

// The dump's embedding and layer outputs against the record's, each layer's drift judged against the
// known-good run's drift there.
void DumpSubject::layers(CaseWork& w) {
  const DumpRun& run = *run_;
  const ModelConfig& cfg = run.cfg;
  const int L = cfg.num_layers;
  const int64_t H = cfg.hidden_size;
  const DumpReader& f = *reader_;
  const int m = f.mode();
  CaseResult& cr = w.cr;
  const StepCapture good = traced_run(*run.floor, seq_, -2, m == 1 ? f.prompt_tokens() : static_cast<int64_t>(seq_.size()));
  const DumpRows emb = f.mapped(f.names().front(), -1);  // both tables start with the embedding
  if (!emb.v.empty() && !g_.embed.empty())
    cr.embed[m] = metrics::tensor_error(first_rows(emb.v, g_.P, H), std::span<const float>(g_.embed));
  const DumpName l_out{'*', "l_out", Step::l_out, HeadOrder::same, 0, false, ""};
  cr.layers.resize(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    LayerRow& row = cr.layers[static_cast<size_t>(l)];
    row.layer = l;
    row.kind = cfg.layer_types[static_cast<size_t>(l)] == LayerKind::full ? 'A' : 'G';
    const std::vector<float>& gl = g_.l_out[static_cast<size_t>(l)];
    const DumpRows d = f.mapped(l_out, l);
    const std::vector<float>* k = step_of(good, Step::l_out, l);
    if (gl.empty() || !k) continue;
    if (d.v.empty()) input_error(file_.string(), ": no 'l_out-", l, "' tensor (every layer's output is needed)");
    DEGEN_ASSERT(d.cols == H, "checked when opened");
    row.drift[m] = metrics::tensor_error(first_rows(d.v, g_.P, H), std::span<const float>(gl));
    const double floor = metrics::tensor_error(first_rows(*k, g_.P, H), std::span<const float>(gl)).rel_l2;
    const metrics::FloorRule& rule = opt_.rules.layer;
    row.floor[m] = floor;
    row.limit[m] = rule.k * floor + rule.eps;
    row.floor_ratio[m] = metrics::floor_ratio(row.drift[m]->rel_l2, floor);
    row.pass[m] = row.drift[m]->passes_nonfinite() && metrics::floor_pass(row.drift[m]->rel_l2, floor, rule);
    if (!row.pass[m] && !cr.first_break) cr.first_break = std::make_pair(m, l);
  }
}

// Every reason of a dump makes the case bad: non-finite or out-of-range logits, the first layer over
// its drift floor (and the first step over its floor in it), the mean KLD over its limit.
void DumpSubject::reasons(CaseWork& w) {
  const CaseResult& cr = w.cr;
  const int m = reader_->mode();
  const LogitsResult& lr = *cr.logits[m];
  if (lr.nonfinite > 0) w.bad.push_back(cat(lr.nonfinite, " positions with non-finite logits"));
  int64_t beyond = 0;
  double worst = 0;
  for (const metrics::LogitPosition& p : pos_)
    if (p.test_out_of_range) {
      ++beyond;
      worst = std::abs(p.test_max_logit) > std::abs(worst) ? p.test_max_logit : worst;
    }
  if (beyond > 0)
    w.bad.push_back(cat(beyond, " positions whose largest logit lies beyond ±", metrics::kMaxLogitMagnitude, " (up to ", worst,
                        "): no real model's logits, and float32 cannot resolve a softmax there ",
                        "(metrics.h kMaxLogitMagnitude): counted as the worst KLD"));
  if (cr.first_break) {
    const int l = cr.first_break->second;
    const LayerRow& row = cr.layers[static_cast<size_t>(l)];
    w.bad.push_back(cat(m == 1 ? "decode mode: " : "", "first layer over its drift floor: ", l, " (",
                        row.kind == 'A' ? "attention" : "Gated DeltaNet", "), rel_l2 ", row.drift[m]->rel_l2, " = ",
                        *row.floor_ratio[m], " x the ", run_->class_name(), " known-good run's drift"));
    w.bad.push_back(localise_step(*run_, *reader_, seq_, l));
  }
  if (!lr.pass)
    w.bad.push_back(cat("mean KLD ", lr.mean_kld, " over its limit ", lr.limit,
                        lr.floor ? " (k x the record's floor)" : " (fixed limit: no floors of this class)"));
}

std::string DumpSubject::progress(const CaseResult& cr) const {
  return cat("compare: dump case ", cr.id, ": ", metrics::verdict_name(cr.verdict));
}

void DumpSubject::finish(CompareResult& r, std::FILE*) {
  r.limits_note += "\n" + logprob_offset_note(r, model_.config.vocab_size, run_->mask, "dump");
}

CompareResult compare_dump(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const DumpCompareOptions& o,
                           const BackendFactory& factory, std::FILE* progress) {
  DumpSubject subject(rec, model, tok, o, factory);
  return compare(rec, model, tok, o, subject, progress);
}

}  // namespace degen
