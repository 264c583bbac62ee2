// compare: teacher-forced, isolated and free-running runs of one configuration against a golden
// record, the verdict, and its text form (see compare.h; JSON: compare_json.cpp; JUnit:
// report::junit_for_compare).
#include "diag/compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <set>
#include <span>

#include "record/cases.h"
#include "engine/generate.h"
#include "engine/spec_decode.h"
#include "model/chat_template.h"
#include "model/digests.h"
#include "model/tokenizer.h"
#include "util/error.h"

namespace degen {

namespace {

using json = nlohmann::json;
using metrics::Verdict;

constexpr int kModes = 2;

std::string sci(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  return cat(std::scientific, std::setprecision(2), v);
}

std::string fmt_pad(const std::string& s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); }

}  // namespace

void set_logprob_offset(LogitsResult& lr, const std::vector<float>& logits, int64_t rows, int64_t V, const TopKBlock& golden) {
  double sum = 0;
  int64_t n = 0;
  bool vocab = true;
  const int K = golden.K;
  for (int64_t i = 0; i < rows; ++i) {
    const std::vector<double> lp = metrics::log_softmax(std::span<const float>(logits.data() + i * V, static_cast<size_t>(V)));
    const std::optional<double> shift = vocab_shift(golden, i);
    if (!shift) vocab = false;
    for (int k = 0; k < K; ++k) {
      const double e = lp[static_cast<size_t>(golden.ids[static_cast<size_t>(i * K + k)])];
      const double g = static_cast<double>(golden.logprobs[static_cast<size_t>(i * K + k)]) + shift.value_or(0.0);
      if (!std::isfinite(e) || !std::isfinite(g)) continue;
      sum += e - g;
      ++n;
    }
  }
  if (n > 0) lr.logprob_offset = sum / static_cast<double>(n);
  lr.logprob_offset_vocab = vocab;
}

std::string logprob_offset_note(const CompareResult& r, int64_t V, const std::vector<uint8_t>& mask, const std::string& who) {
  double sum = 0, worst = 0;
  int n = 0;
  bool vocab = true;
  for (const CaseResult& c : r.cases) {
    const std::optional<LogitsResult>& l = c.logits[0] ? c.logits[0] : c.logits[1];  // a decode-mode dump: [1]
    if (!l || !l->logprob_offset) continue;
    const double v = *l->logprob_offset;
    sum += v;
    worst = std::abs(v) > std::abs(worst) ? v : worst;
    vocab = vocab && l->logprob_offset_vocab;
    ++n;
  }
  if (n == 0) return cat("log-probs: the ", who, " listed none of the record's top-K ids: no log-prob offset");
  const int64_t real = mask.empty() ? V : V - static_cast<int64_t>(std::count(mask.begin(), mask.end(), uint8_t(1)));
  std::string o = cat("log-probs: the ", who, "'s minus the record's, mean ", sci(sum / n), " nats (case means up to ", sci(worst),
                      "), ");
  if (vocab) return o + cat("both over all ", V, " rows of the LM head (the record's topk_logprobs - lse_pad)");
  o += cat("the record's over the tokenizer's ", real, " ids as stored");
  if (real < V)
    o += cat("\nnote: the record has no lse_pad (made before it): its log-probs are normalised over the tokenizer's ", real,
             " ids, the ", who, "'s over all ", V, " rows, so the offset above includes -lse_pad, a constant the engine is not\n",
             "      to blame for (KLD and top-1 renormalise over the real ids; only a partial top-K carries it); rerun ",
             "`degenbisect golden` to record lse_pad");
  return o;
}

EngineClass parse_engine_class(const std::string& name) {
  EngineClass c;
  c.name = name;
  if (name == "fp32") c.record_class = FloorClass::fp32;
  else if (name == "bf16") c.record_class = FloorClass::bf16;
  else if (name == "q8_0") {
    c.record_class = FloorClass::bf16;
    c.measured = parse_run_config("precision=q8_0");
  } else {
    input_error("engine class '", name, "': expected fp32 (f32 weights and caches, exact attention), bf16 (16-bit ",
                "weights or caches) or q8_0 (Q8_0 weights, floor measured with precision=q8_0)");
  }
  return c;
}

double measured_kld_floor(const GoldenCase& g, const Model& model, const RunConfig& rc, const BackendFactory& factory,
                          const std::vector<uint8_t>* mask) {
  DEGEN_ASSERT(factory, "measured_kld_floor needs a backend factory");
  const ModelConfig& cfg = model.config;
  std::unique_ptr<Backend> be = factory(rc, cfg);
  Engine eng(cfg, model.weights, *be, engine_options(rc));
  return teacher_forced_kld(eng, *be, g, cfg.vocab_size, mask);
}

double teacher_forced_kld(Engine& eng, Backend& be, const GoldenCase& g, int64_t vocab_size, const std::vector<uint8_t>* mask) {
  const std::vector<int32_t> seq = g.sequence();
  const int64_t T = static_cast<int64_t>(seq.size());
  SeqState st = eng.new_state();
  ForwardOptions fo;
  fo.logits = LogitsRows::all;
  fo.vocab_mask = mask;
  const ForwardOutput out = eng.forward({SeqInput{&st, seq}}, fo);
  const std::vector<float> logits = be.to_host_f32(out.logits);
  std::vector<int32_t> next(static_cast<size_t>(T), -1);
  for (int64_t i = 0; i + 1 < T; ++i) next[static_cast<size_t>(i)] = seq[static_cast<size_t>(i + 1)];
  return mean_kld(logit_positions(logits, T, vocab_size, g.topk, next, mask));
}

LogitsResult logits_result(const std::vector<metrics::LogitPosition>& pos, const std::optional<double>& floor,
                           const metrics::FloorRule& rule, double fallback) {
  LogitsResult r;
  r.summary = metrics::summarize_logits(pos);
  for (const auto& p : pos) {
    r.kld.push_back(p.kld);
    r.top1_agree.push_back(p.top1_agree ? 1 : 0);
    if (p.test_nonfinite > 0) ++r.nonfinite;
  }
  r.mean_kld = pos.empty() ? 0 : r.summary.kld_mean.value;
  r.floor = floor;
  r.limit = floor ? rule.k * *floor + rule.eps : fallback;
  r.pass = r.nonfinite == 0 && r.mean_kld <= r.limit;  // NaN fails
  return r;
}

void generation_figures(GenerationResult& gen, const metrics::DegenRules& rules, const metrics::ContentOptions& content,
                        bool nonfinite, bool golden_nonfinite) {
  gen.degen = metrics::degeneration(gen.tokens, rules, nonfinite, content);
  gen.golden_degen = metrics::degeneration(gen.golden_tokens, rules, golden_nonfinite, content);
  const size_t n = std::min(gen.tokens.size(), gen.golden_tokens.size());
  for (size_t i = 0; i < n && !gen.first_divergence; ++i)
    if (gen.tokens[i] != gen.golden_tokens[i]) gen.first_divergence = static_cast<int64_t>(i);
  if (!gen.first_divergence && gen.tokens.size() != gen.golden_tokens.size()) gen.first_divergence = static_cast<int64_t>(n);
}

void degeneration_reasons(GenerationResult& gen, std::vector<std::string>& bad, std::vector<std::string>& warn) {
  gen.verdict = metrics::degeneration_verdict(gen.degen.degenerate, gen.golden_degen.degenerate);
  if (gen.verdict == Verdict::bad && gen.model_changed)
    bad.push_back(cat("degeneration of a changed checkpoint: ", gen.degen.reason, " (the golden run is not degenerate, ",
                      "but the weights differ from the record's model: the model, not necessarily the engine)"));
  else if (gen.verdict == Verdict::bad)
    bad.push_back(cat("engine-induced degeneration: ", gen.degen.reason, " (the golden run is not degenerate)"));
  else if (gen.verdict == Verdict::model_intrinsic)
    warn.push_back(cat("model-intrinsic degeneration: ", gen.degen.reason, " (the golden run degenerates too: ",
                       gen.golden_degen.rule.value_or("?"), ")"));
}

std::vector<int32_t> whitespace_ids(const Tokenizer& tok) {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < tok.vocab_end(); ++id) {
    if (!tok.is_defined(id) || tok.is_added(id)) continue;
    std::string b = tok.token_bytes(id);
    if (!b.empty() && std::all_of(b.begin(), b.end(), [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }))
      out.push_back(id);
  }
  return out;
}

namespace {

constexpr int kGenTopK = 20;  // log-probs kept per generated position for the consistency check

struct GenJob {
  size_t slot;                 // index into the results
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_new_tokens;
  bool ignore_stop;
  uint32_t case_index;
  std::vector<int32_t> continuation;  // the record's continuation (the teacher-forced sequence's tail)
};

}  // namespace

// ---- the comparison ----
//
// compare_golden runs its steps in this order: check that the record is this model's and select the
// cases (check_record, select_cases); open the tested path (CompareRun); generate free-running, tested
// and where needed reference (run_generations: first, so that batch=all can batch it); then per case
// the teacher-forced and isolated runs of each mode (forced_and_isolated), the consistency check of
// the generation's logits (generation_consistency) and the verdict (case_verdict).

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

namespace {

// The last reason of a bad case when the checkpoint is not the record's model: its errors may be
// the changed weights', not the engine's.
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

}  // namespace

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

namespace {

// What every step of one comparison shares: the record, the model, the tested engine, the
// tokenizer's masks and stop ids, the floor class, and the reference engine (made on first use).
struct CompareRun {
  const GoldenRecord& rec;
  const Model& model;
  const ModelConfig& cfg;
  const CompareOptions& opt;
  const BackendFactory& factory;
  int L;
  int64_t H, V;
  FloorClass fclass;
  int fc;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Engine> eng;
  MtpOptions mtp;
  ServingOptions so;                     // the serving mechanisms (engine/serving.h)
  std::unique_ptr<PrefixCache> cache;    // prefix_cache: shared by the run's generations
  bool observation_check = true;  // the next case runs the observed-equals-unobserved check
  std::vector<uint8_t> mask;
  const std::vector<uint8_t>* maskp = nullptr;
  std::vector<int32_t> stops, ws_ids;
  std::optional<int32_t> think_end;
  std::unique_ptr<Backend> ref_be;
  std::unique_ptr<Engine> ref_eng;

  CompareRun(const GoldenRecord& rec_, const Model& model_, const Tokenizer* tok, const CompareOptions& opt_,
             const BackendFactory& factory_)
      : rec(rec_), model(model_), cfg(model_.config), opt(opt_), factory(factory_), L(cfg.num_layers),
        H(cfg.hidden_size), V(cfg.vocab_size), fclass(floor_class_for(opt_.config)), fc(static_cast<int>(fclass)) {
    validate_run_config(opt.config, cfg);
    be = factory(opt.config, cfg);
    eng = std::make_unique<Engine>(cfg, model.weights, *be, engine_options(opt.config));
    mtp = mtp_options(opt.config, cfg);
    check_mtp_supported(*eng, mtp);  // UntestableError: drafts asked of a checkpoint without MTP weights
    so = serving_options(opt.config, cfg);
    if (so.prefix_block > 0) cache = std::make_unique<PrefixCache>(so.prefix_block);
    if (tok) {
      mask = tok->padding_mask(V);
      stops = stop_token_ids(model.dir / "generation_config.json", *tok);
      ws_ids = whitespace_ids(*tok);
    } else {
      for (int64_t e : cfg.eos_token_ids) stops.push_back(static_cast<int32_t>(e));
    }
    maskp = mask.empty() ? nullptr : &mask;
    think_end = tok ? tok->token_id("</think>") : std::nullopt;
  }

  // The reference, for golden continuations under a sampling the record does not hold.
  Engine& reference() {
    if (!ref_eng) {
      RunConfig rc;
      rc.precision = rec.manifest().settings.fp64() ? Precision::fp64 : Precision::ref;
      ref_be = factory(rc, cfg);
      ref_eng = std::make_unique<Engine>(cfg, model.weights, *ref_be, engine_options(rc));
    }
    return *ref_eng;
  }

  GenerateOptions generate_options(const SamplingParams& sp, int max_new_tokens, bool ignore_stop, uint32_t first_case) const {
    GenerateOptions go;
    go.max_new_tokens = max_new_tokens;
    if (!ignore_stop) go.stop_ids = stops;
    go.sampling = sp;
    go.vocab_mask = maskp;
    go.first_case = first_case;
    return go;
  }
};

// The generation jobs of the selected cases, with each case's golden continuation: the record's,
// or the reference's own under a sampling the record does not hold (golden_rerun).
std::vector<GenJob> generation_jobs(CompareRun& run, const std::vector<size_t>& selected, std::vector<GenerationResult>& gens) {
  std::vector<GenJob> jobs;
  for (size_t s = 0; s < selected.size(); ++s) {
    const GoldenCase& gc = run.rec.cases()[selected[s]];
    GoldenCase full = run.rec.load_case(selected[s], false);
    RunConfig base;
    base.sampling = run.opt.config.sampling;
    SamplingParams sp = apply_run_config(base, gc.sampling).sampling;
    jobs.push_back({s, full.prompt, sp, gc.max_new_tokens, gc.ignore_stop, static_cast<uint32_t>(gc.index),
                    full.continuation});
    GenerationResult& g = gens[s];
    if (sampling_str(sp) == gc.sampling) {
      g.golden_tokens = full.continuation;
    } else {
      g.golden_rerun = true;
      GenerateOptions go = run.generate_options(sp, gc.max_new_tokens, gc.ignore_stop, static_cast<uint32_t>(gc.index));
      if (gc.max_new_tokens > 0) g.golden_tokens = generate(run.reference(), {full.prompt}, go).at(0).tokens;
    }
  }
  return jobs;
}

// One generate() call for jobs [i, j) on the tested engine. A single sequence also keeps the top-K
// of every logits row it evaluates, by position (the last evaluation wins: speculative decoding
// re-evaluates positions after a rollback), for the consistency check against the teacher-forced
// run over the same tokens.
void generate_group(CompareRun& run, const std::vector<GenJob>& jobs, size_t i, size_t j,
                    std::vector<GenerationResult>& gens, std::vector<bool>& gen_nonfinite) {
  using clock = std::chrono::steady_clock;
  const int64_t V = run.V;
  GenerateOptions go = run.generate_options(jobs[i].sampling, jobs[i].max_new_tokens, jobs[i].ignore_stop, jobs[i].case_index);
  go.mtp = run.mtp;
  go.serving = run.so;
  go.prefix_cache = run.cache.get();
  std::vector<std::vector<int32_t>> prompts;
  for (size_t k = i; k < j; ++k) prompts.push_back(jobs[k].prompt);
  bool nonfinite = false;
  const bool track = j == i + 1;
  std::map<int64_t, TopK> seen;
  Trace watch;
  watch.logits_only = true;  // so that graphs=on runs its decode steps as graphs
  watch.observer = [&](const TraceEvent& ev, Tensor& t, Backend& b) {
    if (ev.step != Step::logits || ev.mtp) return;
    std::vector<float> v = b.to_host_f32(t);
    for (size_t x = 0; x < v.size() && !nonfinite; ++x)
      if (!std::isfinite(v[x]) && !(v[x] < 0 && run.maskp && run.mask[x % V])) nonfinite = true;
    if (!track) return;
    const int64_t Tp = static_cast<int64_t>(jobs[i].prompt.size());
    for (const TraceSeq& ts : ev.seqs)
      for (int64_t r = 0; r < ts.rows && ts.seq == 0; ++r)  // (batch=N: the padding rows follow the sequence)
        if (ts.pos0 + r >= Tp - 1) seen[ts.pos0 + r] = topk_of_row(v.data() + (ts.row0 + r) * V, V, run.maskp, kGenTopK);
  };
  const auto g0 = clock::now();
  std::vector<GenerateResult> res;
  if (go.max_new_tokens > 0) res = generate(*run.eng, prompts, go, &watch);
  const double dt = std::chrono::duration<double>(clock::now() - g0).count();
  for (size_t k = i; k < j; ++k) {
    GenerationResult& g = gens[jobs[k].slot];
    if (!res.empty()) {
      g.tokens = res[k - i].tokens;
      g.stop_reason = stop_reason_name(res[k - i].reason);
      g.verify_steps = res[k - i].verify_steps;
      if (run.mtp.draft_tokens > 0 && jobs[k].sampling.temperature == 0 && !g.golden_rerun)
        g.mtp_equiv = metrics::mtp_equiv(g.tokens, g.golden_tokens);
      if (track) {
        // Valid rows: the tokens consumed before them are the record's (prefix before the first
        // difference, d) and were committed (not a rejected draft: up to the last consumed token).
        const std::vector<int32_t>& cont = jobs[k].continuation;
        int64_t d = 0;
        while (d < static_cast<int64_t>(std::min(g.tokens.size(), cont.size())) &&
               g.tokens[static_cast<size_t>(d)] == cont[static_cast<size_t>(d)])
          ++d;
        const int64_t Tp = static_cast<int64_t>(jobs[k].prompt.size());
        const int64_t last = std::min(Tp - 1 + d, Tp + static_cast<int64_t>(g.tokens.size()) - 2);
        for (auto& [pos, tk] : seen)
          if (pos <= last && !tk.ids.empty()) g.rows.emplace(pos, std::move(tk));
      }
    } else {
      g.stop_reason = "no budget";
    }
    g.seconds = dt / static_cast<double>(j - i);
    gen_nonfinite[jobs[k].slot] = nonfinite;
  }
}

// Step 3 (run first, so batch=all can batch it): free-running generation of every selected case,
// one job per call, or with batch=all, runs of consecutive cases with equal settings.
void run_generations(CompareRun& run, const std::vector<size_t>& selected, std::vector<GenerationResult>& gens,
                     std::vector<bool>& gen_nonfinite) {
  const std::vector<GenJob> jobs = generation_jobs(run, selected, gens);
  size_t i = 0;
  while (i < jobs.size()) {
    size_t j = i + 1;
    const size_t cap = run.opt.config.batch == BatchMode::padded ? static_cast<size_t>(run.opt.config.batch_rows) : jobs.size();
    if (run.opt.config.batch != BatchMode::one)
      while (j < jobs.size() && j - i < cap && sampling_str(jobs[j].sampling) == sampling_str(jobs[i].sampling) &&
             jobs[j].max_new_tokens == jobs[i].max_new_tokens && jobs[j].ignore_stop == jobs[i].ignore_stop &&
             jobs[j].case_index == jobs[j - 1].case_index + 1)
        ++j;
    generate_group(run, jobs, i, j, gens, gen_nonfinite);
    i = j;
  }
}

// The isolated errors of one mode: the golden inputs injected into every layer, each layer's output
// against the record's, judged by the floor rule (or the fixed limit without floors).
void isolated_errors(CompareRun& run, const GoldenCase& g, const std::vector<int32_t>& seq, ForcedMode mode,
                     const LayerInputs& inputs, const std::vector<bool>& stored, CaseResult& cr) {
  const int m = static_cast<int>(mode);
  const std::optional<CaseFloors>& floors = g.floors[run.fc];
  const CompareRules& rules = run.opt.rules;
  ForcedOptions io;
  io.mode = mode;
  io.run_positions = g.P;
  io.capture_positions = g.P;
  io.capture_layers = stored;
  io.inject = &inputs;
  io.logits = false;
  ForcedRun iso = forced_run(*run.eng, seq, io);
  auto errs = layer_errors(iso.l_out, g.l_out, &inputs);
  for (int l = 0; l < run.L; ++l) {
    LayerRow& row = cr.layers[l];
    row.iso[m] = errs[l];
    if (!errs[l]) continue;
    const double err = errs[l]->rel_l2;
    row.floor[m] = floors ? floors->iso[m][l] : std::nullopt;
    if (row.floor[m]) {
      row.limit[m] = rules.layer.k * *row.floor[m] + rules.layer.eps;
      row.floor_ratio[m] = metrics::floor_ratio(err, *row.floor[m]);
      row.pass[m] = metrics::floor_pass(err, *row.floor[m], rules.layer);
    } else {
      row.limit[m] = rules.fallback_rel_l2;
      row.pass[m] = err <= rules.fallback_rel_l2;  // NaN fails
    }
    if (!errs[l]->passes_nonfinite()) {
      row.pass[m] = false;
      row.floor_ratio[m] = std::nullopt;  // a ratio of the finite part alone would read as a small error
    }
  }
}

// Steps 1 and 2 of each mode: teacher-forced (drift of every layer, logits and MTP logits against
// the record) and isolated (isolated_errors).
void forced_and_isolated(CompareRun& run, const GoldenCase& g, const std::vector<int32_t>& seq,
                         const std::vector<int32_t>& next, CaseResult& cr) {
  const int64_t T = static_cast<int64_t>(seq.size());
  const int64_t V = run.V;
  const CompareRules& rules = run.opt.rules;
  std::vector<int32_t> mtp_next;
  for (int64_t i = 0; i + 1 < T; ++i) mtp_next.push_back(i + 2 < T ? seq[static_cast<size_t>(i + 2)] : -1);
  const LayerInputs inputs = make_layer_inputs(g.embed, g.l_out, g.P, run.H);
  std::vector<bool> stored = run.rec.stored_layers();
  for (int m = 0; m < kModes; ++m) {
    const ForcedMode mode = static_cast<ForcedMode>(m);
    if (mode == ForcedMode::decode && !run.opt.decode_mode) continue;
    ForcedOptions fo;
    fo.mode = mode;
    fo.capture_positions = g.P;
    fo.capture_layers = stored;
    fo.vocab_mask = run.maskp;
    fo.mtp = mode == ForcedMode::prefill && !g.mtp_topk.ids.empty() && run.eng->has_mtp();
    fo.mtp_prenorm_hidden = run.mtp.prenorm_hidden;
    ForcedRun tf = forced_run(*run.eng, seq, fo);
    if (!g.embed.empty() && tf.embed.size() == g.embed.size())
      cr.embed[m] = metrics::tensor_error(std::span<const float>(tf.embed), std::span<const float>(g.embed));
    auto drift = layer_errors(tf.l_out, g.l_out, nullptr);
    for (int l = 0; l < run.L; ++l) {
      cr.layers[l].drift[m] = drift[l];
      std::span<const float> a(tf.l_out_norm.data() + l * T, static_cast<size_t>(T));
      std::span<const float> b(g.l_out_norm.data() + l * T, static_cast<size_t>(T));
      cr.layers[l].drift_norm[m] = metrics::tensor_error(a, b).rel_l2;
    }
    const std::optional<CaseFloors>& floors = g.floors[run.fc];
    const std::optional<double> kfloor = floors ? floors->kld[m] : std::nullopt;
    cr.logits[m] = logits_result(logit_positions(tf.logits, T, V, g.topk, next, run.maskp), kfloor, rules.kld,
                                 rules.fallback_kld);
    if (!tf.mtp_logits.empty())
      cr.mtp = logits_result(logit_positions(tf.mtp_logits, T - 1, V, g.mtp_topk, mtp_next, run.maskp),
                             floors ? floors->mtp_kld : std::nullopt, rules.kld, rules.fallback_kld);
    if (g.P > 0) isolated_errors(run, g, seq, mode, inputs, stored, cr);
  }
}

// Step 3b. Consistency: the generation's own logits against a teacher-forced run over the same tokens
// taken in the generation's order (the prompt in one call, then the record's continuation one token
// per call): the same computation, so only a real inconsistency between generation and teacher
// forcing shows (state corrupted during generation, an MTP rollback bug). Judged like the
// teacher-forced KLD of the decode mode (prefill under --no-decode).
void generation_consistency(CompareRun& run, const GoldenCase& g, const std::vector<int32_t>& seq,
                            const std::vector<int32_t>& next, const CaseResult& cr, GenerationResult& gen) {
  if (gen.rows.empty()) return;
  const int64_t T = static_cast<int64_t>(seq.size());
  const int64_t V = run.V;
  ForcedOptions co;
  co.mode = ForcedMode::decode;
  co.prefill_positions = cr.prompt_tokens;
  co.vocab_mask = run.maskp;
  const ForcedRun ref = forced_run(*run.eng, seq, co);
  std::vector<metrics::LogitPosition> pos;
  std::span<const uint8_t> ex;
  if (run.maskp) ex = *run.maskp;
  for (const auto& [p, tk] : gen.rows) {
    if (p < ref.logits_pos0 || p >= T) continue;
    metrics::GoldenTopK gk{tk.ids, tk.logprobs, tk.lse};
    const float* row = ref.logits.data() + (p - ref.logits_pos0) * V;
    pos.push_back(metrics::compare_logits_topk(std::span<const float>(row, static_cast<size_t>(V)), gk,
                                               next[static_cast<size_t>(p)], ex, 10));
  }
  const int cm = static_cast<int>(run.opt.decode_mode ? ForcedMode::decode : ForcedMode::prefill);
  const std::optional<double> kfloor = g.floors[run.fc] ? g.floors[run.fc]->kld[cm] : std::nullopt;
  if (!pos.empty()) gen.logits = logits_result(pos, kfloor, run.opt.rules.kld, run.opt.rules.fallback_kld);
}

// The GDN states (every rank's) of two states of the tested engine: the worst rel_l2 and the first
// layer (then part) over `limit`.
struct StateDiff {
  double err = 0;
  std::optional<int> layer;
  std::string part;
};
StateDiff gdn_state_diff(Backend& be, const ModelConfig& cfg, const SeqState& a, const SeqState& b, double limit) {
  StateDiff d;
  std::vector<const SeqState*> xa{&a}, xb{&b};
  for (size_t r = 0; r < a.peers.size() && r < b.peers.size(); ++r) {
    xa.push_back(&a.peers[r]);
    xb.push_back(&b.peers[r]);
  }
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.layer_types[static_cast<size_t>(l)] != LayerKind::linear) continue;
    for (size_t r = 0; r < xa.size(); ++r)
      for (const char* part : {"S", "conv"}) {
        const bool isS = part[0] == 'S';
        const Tensor& ta = isS ? xa[r]->gdn[l].S : xa[r]->gdn[l].conv;
        const Tensor& tb = isS ? xb[r]->gdn[l].S : xb[r]->gdn[l].conv;
        if (ta.empty() || tb.empty()) continue;
        const std::vector<float> x = be.to_host_f32(ta), y = be.to_host_f32(tb);
        const metrics::TensorError e = metrics::tensor_error(std::span<const float>(x), std::span<const float>(y));
        const double err = e.passes_nonfinite() ? e.rel_l2 : std::numeric_limits<double>::infinity();
        d.err = std::max(d.err, err);
        if (!(err <= limit) && !d.layer) {
          d.layer = l;
          d.part = part;
        }
      }
  }
  return d;
}

// MTP teacher-forced draft/verify (MtpForcedResult): the golden sequence through mtp_decode with
// forced drafts, its verify rows and its GDN states after every rollback against a plain decode state
// over the same tokens.
void mtp_forced_check(CompareRun& run, const GoldenCase& g, const std::vector<int32_t>& seq, CaseResult& cr) {
  const int64_t Tp = cr.prompt_tokens, T = static_cast<int64_t>(seq.size());
  const int k = run.mtp.draft_tokens;
  if (k <= 0 || !run.eng->has_mtp() || Tp < 1 || T - Tp < 1) return;
  // Rounds accepting 0..k drafts need about (k+1)(k+2)/2 + k + 2 tokens after the prompt; a short
  // continuation (a stop token after two) is extended with the prompt's tokens, repeated: the states
  // are checked there too, the logits only where the record has them.
  std::vector<int32_t> ext(seq);
  const int64_t need = static_cast<int64_t>(k + 1) * (k + 2) / 2 + k + 2;
  for (int64_t i = 0; static_cast<int64_t>(ext.size()) - Tp < need; ++i) ext.push_back(seq[static_cast<size_t>(i % Tp)]);
  if (run.cfg.max_position_embeddings > 0 && static_cast<int64_t>(ext.size()) > run.cfg.max_position_embeddings)
    ext.resize(static_cast<size_t>(std::max<int64_t>(T, run.cfg.max_position_embeddings)));
  Engine& eng = *run.eng;
  Backend& be = eng.backend();
  const int L = run.L;
  MtpForcedResult res;
  std::vector<metrics::LogitPosition> pos;
  std::span<const uint8_t> ex;
  if (run.maskp) ex = *run.maskp;
  // The verify row at position p against plain decode's row there (the same computation: a rollback
  // that left anything behind shows as a difference), judged like the generation's consistency check.
  std::map<int64_t, TopK> plain_rows;  // p -> top-K of plain decode's logits after ext[0..p]
  const int K = std::max(g.topk.K, 2);
  auto judge_row = [&](const std::vector<float>& row, int64_t p) {  // row predicts ext[p + 1]
    const TopK& tk = plain_rows.at(p);
    metrics::GoldenTopK gk{tk.ids, tk.logprobs, tk.lse};
    pos.push_back(metrics::compare_logits_topk(std::span<const float>(row), gk,
                                               p + 1 < static_cast<int64_t>(ext.size()) ? ext[static_cast<size_t>(p + 1)] : -1,
                                               ex, std::min(K, 10)));
  };
  std::vector<int32_t> prompt(seq.begin(), seq.begin() + Tp);
  // The spec-decode state: the prompt in one call, keeping the MTP input rows.
  SeqState st = eng.new_state();
  TraceCapture prenorm(nullptr, Step::l_out, L - 1, false);
  ForwardOptions fo;
  fo.logits = LogitsRows::last;
  fo.vocab_mask = run.maskp;
  fo.keep_hidden = !run.mtp.prenorm_hidden;
  ForwardOutput out = eng.forward({SeqInput{&st, prompt}}, fo, run.mtp.prenorm_hidden ? &prenorm.trace : nullptr);
  const Tensor hidden = run.mtp.prenorm_hidden ? prenorm.got : out.hidden;
  // The plain decode state (the prompt in one call, then one token per call), advanced to the same
  // length after every round.
  SeqState plain = eng.new_state();
  ForwardOptions po;
  po.logits = LogitsRows::last;
  po.vocab_mask = run.maskp;
  auto plain_step = [&](std::vector<int32_t> ids) {
    ForwardOutput o = eng.forward({SeqInput{&plain, std::move(ids)}}, po);
    const std::vector<float> row = be.to_host_f32(o.logits);
    plain_rows[plain.pos - 1] = topk_of_row(row.data(), run.V, run.maskp, K);
  };
  plain_step(prompt);
  MtpForcing forcing;
  forcing.sequence = ext;
  forcing.on_round = [&](const SeqState& s, const VerifyPass& vp, int m, int64_t P) {
    ++res.rounds;
    if (m + 1 < static_cast<int>(vp.tokens.size())) ++res.rollbacks;
    while (plain.pos < s.pos) plain_step({ext[static_cast<size_t>(plain.pos)]});
    for (int j = 0; j <= m; ++j) judge_row(vp.logits[static_cast<size_t>(j)], P + j);
    const StateDiff d = gdn_state_diff(be, run.cfg, s, plain, kMtpStateLimit);
    res.state_err = std::max(res.state_err, d.err);
    if (d.layer && !res.state_layer) {
      res.state_layer = d.layer;
      res.state_position = s.pos;
      res.state_part = d.part;
    }
  };
  MtpDecodeArgs a;
  a.forcing = &forcing;
  a.vocab_mask = run.maskp;
  const int64_t n_new = static_cast<int64_t>(ext.size()) - Tp;
  a.max_new_tokens = static_cast<int>(n_new);
  a.mtp = run.mtp;
  std::vector<int32_t> generated{ext[static_cast<size_t>(Tp)]};
  if (n_new >= 2)
    mtp_decode(eng, st, prompt, hidden, generated, a, [&](int32_t t, int64_t) {
      generated.push_back(t);
      return static_cast<int64_t>(generated.size()) < n_new;
    });
  const std::optional<CaseFloors>& floors = g.floors[run.fc];
  const int dm = static_cast<int>(ForcedMode::decode);
  if (!pos.empty())
    res.logits = logits_result(pos, floors ? floors->kld[dm] : std::nullopt, run.opt.rules.kld, run.opt.rules.fallback_kld);
  res.pass = (!res.logits || res.logits->pass) && !res.state_layer;
  cr.mtp_forced = std::move(res);
}

}  // namespace

std::string isolated_break_reason(const LayerRow& row, int m) {
  const int l = row.layer;
  const metrics::TensorError& e = *row.iso[m];
  const std::string limit = row.limit[m] ? sci(*row.limit[m]) : "?";
  if (!e.passes_nonfinite())  // rel_l2 and the ratio cover the finite elements only: say what was found
    return cat("isolated output of layer ", l, " (", forced_mode_name(static_cast<ForcedMode>(m)), ") has ",
               e.nonfinite + e.ref_nonfinite_mismatch, " non-finite values of ", e.n,
               " where the record's are finite (expected finite values within rel_l2 ", limit, ")");
  return cat("isolated error breaks ", row.floor[m] ? "the floor rule" : "the fixed limit (no floors)", " first at layer ", l,
             " (", forced_mode_name(static_cast<ForcedMode>(m)), "): rel_l2 ", sci(e.rel_l2), " > ", limit,
             row.floor_ratio[m] ? cat(" (floor_ratio ", sci(*row.floor_ratio[m]), ")") : std::string());
}

namespace {

// The reasons of the teacher-forced and isolated steps (non-finite values, the first floor break,
// logits and MTP KLD over their limits, the consistency check) into `bad`; a serving mechanism that did
// nothing in the case into `warn`.
void forced_reasons(const CaseResult& cr, const GenerationResult& gen, std::vector<std::string>& bad, std::vector<std::string>& warn) {
  for (int m = 0; m < kModes; ++m) {
    const std::string mn = forced_mode_name(static_cast<ForcedMode>(m));
    if (cr.embed[m] && !cr.embed[m]->passes_nonfinite()) bad.push_back(cat("non-finite values in the embedding (", mn, ")"));
    for (const LayerRow& row : cr.layers)
      if (row.drift[m] && !row.drift[m]->passes_nonfinite()) {
        bad.push_back(cat("non-finite values in l_out-", row.layer, " (teacher-forced ", mn, ")"));
        break;
      }
  }
  if (cr.first_break) {
    bad.push_back(isolated_break_reason(cr.layers[cr.first_break->second], cr.first_break->first));
  }
  for (int m = 0; m < kModes; ++m) {
    if (!cr.logits[m] || cr.logits[m]->pass) continue;
    const LogitsResult& lr = *cr.logits[m];
    if (lr.nonfinite) bad.push_back(cat("non-finite logits at ", lr.nonfinite, " positions (", forced_mode_name(static_cast<ForcedMode>(m)), ")"));
    else bad.push_back(cat("mean KLD ", sci(lr.mean_kld), " > ", sci(lr.limit), " (teacher-forced ",
                           forced_mode_name(static_cast<ForcedMode>(m)), lr.floor ? "" : ", no floors: fixed limit", ")"));
  }
  if (gen.logits && !gen.logits->pass && gen.logits->nonfinite)
    bad.push_back(cat("free-running logits: the teacher-forced run over the same tokens has non-finite logits at ",
                      gen.logits->nonfinite, " of ", gen.logits->kld.size(), " positions (expected finite)"));
  else if (gen.logits && !gen.logits->pass)
    bad.push_back(cat("free-running logits differ from the teacher-forced ones over the same tokens (",
                      gen.logits->kld.size(), " positions): mean KLD ", sci(gen.logits->mean_kld), " > ",
                      sci(gen.logits->limit), " (state corrupted during generation?)"));
  if (cr.mtp && !cr.mtp->pass && cr.mtp->nonfinite)
    bad.push_back(cat("MTP drafts: non-finite logits at ", cr.mtp->nonfinite, " of ", cr.mtp->kld.size(), " positions (expected finite)"));
  else if (cr.mtp && !cr.mtp->pass)
    bad.push_back(cat("MTP drafts: mean KLD ", sci(cr.mtp->mean_kld), " > ", sci(cr.mtp->limit)));
  if (cr.mtp_forced && cr.mtp_forced->state_layer)
    bad.push_back(cat("MTP draft/verify teacher-forced: after a rollback the GDN state (", cr.mtp_forced->state_part,
                      ") of layer ", *cr.mtp_forced->state_layer, " at length ", *cr.mtp_forced->state_position,
                      " differs from plain decode's: rel_l2 up to ", sci(cr.mtp_forced->state_err), " > ", sci(kMtpStateLimit),
                      " (", cr.mtp_forced->rollbacks, " rollbacks in ", cr.mtp_forced->rounds, " rounds)"));
  for (const ServingCheck& c : cr.serving) {
    if (!c.note.empty()) warn.push_back(cat("serving (", c.mechanism, "): ", c.note));
    if (c.state_layer && (c.state_decides || !c.pass))
      bad.push_back(cat("serving (", c.mechanism, "): ", c.what, ": the GDN state (", c.state_part, ") of layer ",
                        *c.state_layer, " at length ", *c.state_position, " differs from plain processing's: rel_l2 ",
                        sci(c.state_err), " > ", sci(c.state_limit)));
    if (c.logits && !c.logits->pass)
      bad.push_back(cat("serving (", c.mechanism, "): ", c.what, ": the logits after it differ from plain processing's (",
                        c.logits->kld.size(), " positions): mean KLD ", sci(c.logits->mean_kld), " > ", sci(c.logits->limit)));
  }
  if (cr.mtp_forced && cr.mtp_forced->logits && !cr.mtp_forced->logits->pass)
    bad.push_back(cat("MTP draft/verify teacher-forced: the verify logits differ from plain decode's over the same tokens: ",
                      "mean KLD ", sci(cr.mtp_forced->logits->mean_kld), " > ", sci(cr.mtp_forced->logits->limit)));
}

// The free-running figures of a case (degeneration of both texts, first divergence and the golden's
// margin there, MTP equivalence and acceptance) and their reasons into `bad` and `warn`.
void free_running_figures(const CompareRun& run, const GoldenCase& g, const CaseResult& cr, bool nonfinite,
                          GenerationResult& gen, std::vector<std::string>& bad, std::vector<std::string>& warn) {
  const int64_t T = cr.positions;
  gen.stop_reason = gen.stop_reason.empty() ? "no budget" : gen.stop_reason;
  metrics::ContentOptions content;
  if (g.opened_think) content.think_end = run.think_end;
  content.stop_ids = g.ignore_stop ? std::vector<int32_t>{} : run.stops;
  content.ignore_ids = run.ws_ids;
  generation_figures(gen, run.opt.rules.degen, content, nonfinite, !gen.golden_rerun && g.nonfinite_logits);
  if (gen.first_divergence && !gen.golden_rerun && g.topk.K >= 2) {
    const int64_t row = cr.prompt_tokens + *gen.first_divergence - 1;
    if (row >= 0 && row < T)
      gen.golden_margin = double(g.topk.logprobs[row * g.topk.K]) - double(g.topk.logprobs[row * g.topk.K + 1]);
  }
  if (gen.mtp_equiv && !gen.mtp_equiv->mtp_equiv && run.fclass == FloorClass::fp32)
    bad.push_back(cat("mtp_equiv: greedy output with mtp=", run.opt.config.mtp, " differs from the golden (MTP off) at token ",
                      gen.mtp_equiv->first_difference.value_or(-1), " (exact on the CPU reference path)"));
  if (!gen.verify_steps.empty()) gen.spec = metrics::spec_decode(gen.verify_steps, gen.degen.loop_onset);
  if (gen.spec && gen.spec->accept_anomaly) warn.push_back(cat("MTP acceptance: ", *gen.spec->accept_anomaly));
  degeneration_reasons(gen, bad, warn);
}

// The verdict of one case: the first floor break, every reason, and the case's verdict.
void case_verdict(const CompareRun& run, const GoldenCase& g, bool nonfinite, GenerationResult& gen, CaseResult& cr) {
  std::vector<std::string> bad, warn;
  for (const LayerRow& row : cr.layers) {
    for (int m = 0; m < kModes && !cr.first_break; ++m)
      if (!row.pass[m]) cr.first_break = std::make_pair(m, row.layer);
    if (cr.first_break) break;
  }
  forced_reasons(cr, gen, bad, warn);
  if (cr.observation && !cr.observation->equal()) bad.push_back(cr.observation->reason());
  free_running_figures(run, g, cr, nonfinite, gen, bad, warn);
  cr.verdict = !bad.empty() ? Verdict::bad : gen.verdict == Verdict::model_intrinsic ? Verdict::model_intrinsic : Verdict::good;
  cr.reasons = bad;
  cr.reasons.insert(cr.reasons.end(), warn.begin(), warn.end());
}

// One case: its sequence, the forced and isolated runs, the consistency check and the verdict.
// ---- the serving-state check (compare.h ServingCheck) ----

// Plain processing of a sequence on the tested engine (the prompt in one call, then one token per
// call): the top-K of every logits row, and the state at the lengths asked for (a length inside the
// prompt: a prefill of that many tokens, as plain processing of a shorter prompt).
struct PlainRun {
  std::map<int64_t, TopK> rows;        // p -> top-K of the logits after ext[0..p]
  std::map<int64_t, SeqState> states;  // length -> state
};
PlainRun plain_run(CompareRun& run, const std::vector<int32_t>& ext, int64_t Tp, const std::set<int64_t>& at, int K) {
  Engine& eng = *run.eng;
  PlainRun pr;
  ForwardOptions po;
  po.logits = LogitsRows::last;
  po.vocab_mask = run.maskp;
  for (int64_t b : at)
    if (b > 0 && b < Tp) {
      SeqState s = eng.new_state();
      eng.forward({SeqInput{&s, std::vector<int32_t>(ext.begin(), ext.begin() + b)}}, po);
      pr.states.emplace(b, std::move(s));
    }
  SeqState st = eng.new_state();
  auto step = [&](std::vector<int32_t> ids) {
    ForwardOutput o = eng.forward({SeqInput{&st, std::move(ids)}}, po);
    const std::vector<float> row = eng.backend().to_host_f32(o.logits);
    pr.rows[st.pos - 1] = topk_of_row(row.data(), run.V, run.maskp, K);
    if (at.count(st.pos)) pr.states.emplace(st.pos, eng.snapshot(st));
  };
  step(std::vector<int32_t>(ext.begin(), ext.begin() + Tp));
  for (int64_t p = Tp; p < static_cast<int64_t>(ext.size()); ++p) step({ext[static_cast<size_t>(p)]});
  return pr;
}

// One mechanism's check under way: the state comparisons and the judged rows.
struct ServingProbe {
  CompareRun& run;
  const PlainRun& plain;
  const std::vector<int32_t>& ext;
  ServingCheck c;
  std::vector<metrics::LogitPosition> pos;
  bool state_decides = true;  // fp32 class (compare.h ServingCheck)
  ServingProbe(CompareRun& r, const PlainRun& pl, const std::vector<int32_t>& e, std::string mechanism, std::string what)
      : run(r), plain(pl), ext(e) {
    c.mechanism = std::move(mechanism);
    c.what = std::move(what);
    c.state_limit = r.opt.rules.serving_state[r.fc];
    c.state_decides = state_decides = r.fclass == FloorClass::fp32;
  }
  void state_at(const SeqState& s, int64_t len) {
    auto it = plain.states.find(len);
    if (it == plain.states.end()) return;
    const StateDiff d = gdn_state_diff(run.eng->backend(), run.cfg, s, it->second, c.state_limit);
    c.state_err = std::max(c.state_err, d.err);
    if (d.layer && !c.state_layer) {
      c.state_layer = d.layer;
      c.state_part = d.part;
      c.state_position = len;
    }
  }
  void row(const Tensor& logits, int64_t p) {  // the row after ext[0..p]
    auto it = plain.rows.find(p);
    if (it == plain.rows.end()) return;
    const std::vector<float> v = run.eng->backend().to_host_f32(logits);
    metrics::GoldenTopK gk{it->second.ids, it->second.logprobs, it->second.lse};
    std::span<const uint8_t> ex;
    if (run.maskp) ex = *run.maskp;
    const int32_t next = p + 1 < static_cast<int64_t>(ext.size()) ? ext[static_cast<size_t>(p + 1)] : -1;
    pos.push_back(metrics::compare_logits_topk(std::span<const float>(v), gk, next, ex, 10));
  }
  // Decodes ext[from..] one token per call from `s` (through `decode`), judging every row.
  template <typename F>
  void decode_rest(SeqState& s, int64_t from, F decode) {
    for (int64_t p = from; p < static_cast<int64_t>(ext.size()); ++p) row(decode(s, ext[static_cast<size_t>(p)]), p);
    state_at(s, static_cast<int64_t>(ext.size()));
  }
  ServingCheck finish(const std::optional<double>& kfloor) {
    if (!pos.empty()) c.logits = logits_result(pos, kfloor, run.opt.rules.kld, run.opt.rules.fallback_kld);
    c.pass = (!state_decides || !c.state_layer) && (!c.logits || c.logits->pass);
    return std::move(c);
  }
};

// The snapshot mechanism's cold pass: ext through the prefix cache (prompt prefill, then forced MTP
// rounds or plain decode steps), storing every block boundary's snapshot.
void snapshot_cold_pass(CompareRun& run, const std::vector<int32_t>& ext, int64_t Tp, const ServingOptions& so,
                        PrefixCache& cache) {
  Engine& eng = *run.eng;
  const std::vector<int32_t> prompt(ext.begin(), ext.begin() + Tp);
  SeqState st = eng.new_state();
  ForwardOptions fo;
  fo.logits = LogitsRows::last;
  fo.vocab_mask = run.maskp;
  const bool mtp = run.mtp.draft_tokens > 0 && eng.has_mtp();
  TraceCapture prenorm(nullptr, Step::l_out, run.L - 1, false);
  const bool capture = mtp && run.mtp.prenorm_hidden;
  fo.keep_hidden = mtp && !capture;
  HiddenSource hsrc = [&](const ForwardOutput& o) { return capture ? prenorm.got : o.hidden; };
  PrefillOut po = serve_prefill(eng, {SeqInput{&st, prompt}}, fo, capture ? &prenorm.trace : nullptr, so, &cache,
                                mtp ? &hsrc : nullptr);
  if (!mtp) {
    ForwardOptions d = fo;
    d.keep_hidden = false;
    for (int64_t p = Tp; p < static_cast<int64_t>(ext.size()); ++p) {
      eng.forward({SeqInput{&st, {ext[static_cast<size_t>(p)]}}}, d);
      store_decode_snapshots(eng, cache, st, ext, st.pos - 1, so);
    }
    return;
  }
  MtpForcing forcing;
  forcing.sequence = ext;
  MtpDecodeArgs a;
  a.forcing = &forcing;
  a.vocab_mask = run.maskp;
  const int64_t n_new = static_cast<int64_t>(ext.size()) - Tp;
  a.max_new_tokens = static_cast<int>(n_new);
  a.mtp = run.mtp;
  a.keep_before_rollback = !so.snapshot_drafts.empty();
  std::vector<Tensor> hist{po.hidden.at(0)};
  a.after_round = [&](const SeqState& s, const VerifyPass& vp, int m, int64_t P, const SeqState* before) {
    hist.insert(hist.end(), vp.hidden.begin(), vp.hidden.begin() + m + 1);
    const Tensor h = eng.backend().concat_rows(hist);
    hist.assign(1, h);
    store_decode_snapshots(eng, cache, s, ext, P, so, &vp, before, &h);
  };
  std::vector<int32_t> generated{ext[static_cast<size_t>(Tp)]};
  if (n_new >= 2)
    mtp_decode(eng, st, prompt, po.hidden.at(0), generated, a, [&](int32_t t, int64_t) {
      generated.push_back(t);
      return static_cast<int64_t>(generated.size()) < n_new;
    });
}

// The serving mechanisms the configuration turns on, each against plain processing (ServingCheck).
void serving_checks(CompareRun& run, const GoldenCase& g, const std::vector<int32_t>& seq, CaseResult& cr) {
  const ServingOptions& so = run.so;
  const bool chunk = so.prefill_chunk > 0, snap = so.prefix_block > 0, slot = so.batch_rows > 0;
  const int64_t Tp = cr.prompt_tokens, T = static_cast<int64_t>(seq.size());
  if (!(chunk || snap || slot) || Tp < 1) return;
  Engine& eng = *run.eng;
  // The tokens the checks run over: the prompt and as many decode steps as the mechanisms need (four
  // after the prompt; the snapshot, a block boundary past it, and every MTP rollback depth): the
  // rest of the continuation is the generation's and the other checks' to cover. A continuation too
  // short is extended with the prompt's tokens.
  int64_t need = Tp + 4;
  const int k = run.mtp.draft_tokens;
  if (snap && k > 0) need = std::max<int64_t>(need, Tp + static_cast<int64_t>(k + 1) * (k + 2) / 2 + k + 2);
  // A block boundary past the prompt is sought within the case's own tokens only: the block size is a
  // toggle (prefix_cache=N), and decoding up to a boundary one token per call is work the case does not
  // ask for (prefix_cache=4096 on a 24-token case decoded 4,096 steps; 65,536 would take hours).
  if (snap) need = std::max(need, std::min<int64_t>((Tp / so.prefix_block + 1) * so.prefix_block + 1, std::max(T, need)));
  if (run.cfg.max_position_embeddings > 0) need = std::min<int64_t>(need, run.cfg.max_position_embeddings);
  std::vector<int32_t> ext(seq.begin(), seq.begin() + std::min<int64_t>(T, need));
  for (int64_t i = 0; static_cast<int64_t>(ext.size()) < need; ++i) ext.push_back(seq[static_cast<size_t>(i % Tp)]);
  const int64_t E = static_cast<int64_t>(ext.size());
  // The chunked prefill's length: the prompt, or one token more when the prompt fills its last chunk
  // exactly (a partial last chunk is where the padding of a chunk lives: pad-updates-state).
  const int64_t Tc = chunk && Tp % so.prefill_chunk == 0 && E > Tp + 1 ? Tp + 1 : Tp;
  std::set<int64_t> at{Tp, Tc, E};
  // The snapshots compared: the last one inside the prompt (each inside it costs plain processing a
  // prefill of its own) and every one after it (where a verify pass can cross a boundary).
  auto compared = [&](int64_t b) { return b + so.prefix_block > Tp; };
  for (int64_t b = so.prefix_block; snap && b <= E; b += so.prefix_block)
    if (compared(b)) at.insert(b);
  const PlainRun plain = plain_run(run, ext, Tp, at, std::max(g.topk.K, 2));
  const std::optional<CaseFloors>& floors = g.floors[run.fc];
  const std::optional<double> kfloor = floors ? floors->kld[static_cast<int>(ForcedMode::decode)] : std::nullopt;
  const std::vector<int32_t> prompt(ext.begin(), ext.begin() + Tp);
  ForwardOptions fo;
  fo.logits = LogitsRows::last;
  fo.vocab_mask = run.maskp;
  auto one = [&](SeqState& s, int32_t t) { return eng.forward({SeqInput{&s, {t}}}, fo).logits; };
  if (chunk) {
    ServingProbe p(run, plain, ext, "chunk",
                   cat(Tc == Tp ? "the prompt (" : "the prompt and its next token (", Tc, " tokens) prefilled in chunks of ",
                       so.prefill_chunk));
    ServingOptions only = so;
    only.prefix_block = only.batch_rows = 0;
    SeqState st = eng.new_state();
    PrefillOut po = serve_prefill(eng, {SeqInput{&st, std::vector<int32_t>(ext.begin(), ext.begin() + Tc)}}, fo, nullptr,
                                  only, nullptr);
    p.state_at(st, Tc);
    p.row(po.logits, Tc - 1);
    p.decode_rest(st, Tc, one);
    cr.serving.push_back(p.finish(kfloor));
  }
  if (slot) {
    ServingProbe p(run, plain, ext, "slot", cat("decode steps padded to ", so.batch_rows, " rows"));
    ServingOptions only = so;
    only.prefix_block = only.prefill_chunk = 0;
    SeqState st = eng.new_state();
    eng.forward({SeqInput{&st, prompt}}, fo);
    std::vector<SeqState> pads;
    p.decode_rest(st, Tp, [&](SeqState& s, int32_t t) {
      return serve_decode_step(eng, {SeqInput{&s, {t}}}, fo, nullptr, only, pads).logits;
    });
    cr.serving.push_back(p.finish(kfloor));
  }
  if (snap) {
    ServingOptions only = so;
    only.prefill_chunk = only.batch_rows = 0;
    PrefixCache cache(so.prefix_block);
    snapshot_cold_pass(run, ext, Tp, only, cache);
    ServingProbe p(run, plain, ext, "snapshot", "");
    int64_t stored = 0;
    for (int64_t b = so.prefix_block; b < E; b += so.prefix_block) {
      auto [len, e] = cache.lookup(std::span(ext).first(static_cast<size_t>(b + 1)));
      if (len != b || !compared(b)) continue;
      ++stored;
      p.state_at(e->state, b);
    }
    auto [len, e] = cache.lookup(ext);
    if (so.prefix_block > E)
      p.c.note = cat("no block boundary of ", so.prefix_block, " tokens within the case's ", E,
                     " tokens checked: the snapshot mechanism stores nothing here (a smaller prefix_cache=N, or a longer case)");
    p.c.what = cat("prefix cache (blocks of ", so.prefix_block, "): ", stored, " snapshots of a cold pass compared",
                   k > 0 && eng.has_mtp() ? cat(" through forced MTP rounds (mtp=", k, ")") : std::string(),
                   ", then a warm pass from the ", len, "-token one");
    if (e) {
      SeqState st = eng.snapshot(e->state);
      p.decode_rest(st, len, one);
    }
    cr.serving.push_back(p.finish(kfloor));
  }
}

CaseResult compare_case(CompareRun& run, size_t index, GenerationResult& gen, bool nonfinite) {
  using clock = std::chrono::steady_clock;
  const auto c0 = clock::now();
  const GoldenCase g = run.rec.load_case(index);
  CaseResult cr;
  cr.id = g.id;
  const std::vector<int32_t> seq = g.sequence();
  const int64_t T = static_cast<int64_t>(seq.size());
  cr.prompt_tokens = static_cast<int64_t>(g.prompt.size());
  cr.positions = T;
  cr.stored_positions = g.P;
  for (int32_t id : seq)
    if (id >= run.V) input_error("golden record: case '", g.id, "': token id ", id, " >= the model's vocab_size ", run.V);
  std::vector<int32_t> next(seq.begin() + 1, seq.end());
  next.push_back(-1);
  cr.layers.resize(static_cast<size_t>(run.L));
  for (int l = 0; l < run.L; ++l) {
    cr.layers[l].layer = l;
    cr.layers[l].kind = run.cfg.layer_types.empty() ? '?' : (run.cfg.layer_types[l] == LayerKind::full ? 'A' : 'G');
  }
  forced_and_isolated(run, g, seq, next, cr);
  mtp_forced_check(run, g, seq, cr);
  serving_checks(run, g, seq, cr);
  if (run.observation_check) {  // once per run: a prefill observed and not (observation.h)
    run.observation_check = false;
    cr.observation = check_observation(*run.eng, seq, run.maskp, g.id);
  }
  generation_consistency(run, g, seq, next, cr, gen);
  case_verdict(run, g, nonfinite, gen, cr);
  cr.seconds = std::chrono::duration<double>(clock::now() - c0).count() + gen.seconds;
  cr.gen = std::move(gen);
  return cr;
}

}  // namespace

CompareResult compare_golden(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const CompareOptions& opt,
                             const BackendFactory& factory, std::FILE* progress) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  CompareResult r;
  r.golden_dir = rec.dir().string();
  r.model_dir = model.dir.string();
  r.config = opt.config.str();
  r.suite = rec.suite();
  r.record_fingerprint = rec.model_fingerprint();
  r.model_fingerprint = model.fingerprint;
  const FloorClass fclass = floor_class_for(opt.config);
  r.decode_skipped = !opt.decode_mode;
  r.floor_class = floor_class_name(fclass);
  r.floors = rec.floors_present(fclass);
  r.floors_reason = rec.floors_reason(fclass);
  check_record(rec, model, tok, opt.allow_model_mismatch, r);
  const std::vector<size_t> selected = select_cases(rec, opt.cases);

  CompareRun run(rec, model, tok, opt, factory);
  r.backend = run.be->name();
  std::vector<GenerationResult> gens(selected.size());
  std::vector<bool> gen_nonfinite(selected.size(), false);
  run_generations(run, selected, gens, gen_nonfinite);

  for (size_t s = 0; s < selected.size(); ++s) {
    gens[s].model_changed = r.weights_differ;
    CaseResult cr = compare_case(run, selected[s], gens[s], gen_nonfinite[s]);
    if (cr.verdict == Verdict::bad && r.weights_differ)  // not the engine's fault, as far as compare can tell
      cr.reasons.push_back(model_changed_reason(r));
    r.verdict = metrics::worst(r.verdict, cr.verdict);
    if (progress)
      std::fprintf(progress, "compare: case %s: %s (%.2f s)\n", cr.id.c_str(), metrics::verdict_name(cr.verdict), cr.seconds);
    r.cases.push_back(std::move(cr));
  }
  if (progress && !run.be->graph_summary().empty()) std::fprintf(progress, "compare: %s\n", run.be->graph_summary().c_str());
  r.fail_on_model_degeneration = opt.fail_on_model_degeneration;
  r.exit_code = static_cast<int>(metrics::exit_code(r.verdict, opt.fail_on_model_degeneration));
  r.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return r;
}

// ---- text ----

namespace {

std::string err_cell(const std::optional<metrics::TensorError>& e, const std::optional<double>& digest) {
  if (e) return e->passes_nonfinite() ? sci(e->rel_l2) : "NONFINITE";
  if (digest) return "~" + sci(*digest);  // digest only: relative error of the output norms
  return "-";
}

// Worst of a column over cases: non-finite first, then the largest rel_l2.
std::optional<metrics::TensorError> worst_err(const std::optional<metrics::TensorError>& a,
                                              const std::optional<metrics::TensorError>& b) {
  if (!a) return b;
  if (!b) return a;
  if (!a->passes_nonfinite()) return a;
  if (!b->passes_nonfinite()) return b;
  return b->rel_l2 > a->rel_l2 || std::isnan(b->rel_l2) ? b : a;
}

std::optional<double> max_opt(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}

std::string layer_table(const std::vector<const CaseResult*>& cases, const std::string& indent) {
  if (cases.empty() || cases.front()->layers.empty()) return "";
  const size_t L = cases.front()->layers.size();
  std::string o = indent + "layer    drift:prefill  drift:decode   iso:prefill    iso:decode     limit      floor_ratio\n";
  std::optional<metrics::TensorError> emb[2];
  for (const CaseResult* c : cases)
    for (int m = 0; m < kModes; ++m) emb[m] = worst_err(emb[m], c->embed[m]);
  if (emb[0] || emb[1])
    o += cat(indent, fmt_pad("embed", 7), "  ", fmt_pad(err_cell(emb[0], std::nullopt), 13), "  ",
             fmt_pad(err_cell(emb[1], std::nullopt), 13), "\n");
  for (size_t l = 0; l < L; ++l) {
    std::optional<metrics::TensorError> drift[2], iso[2];
    std::optional<double> dnorm[2], limit, ratio;
    bool fails = false;
    std::vector<std::string> first_in;
    for (const CaseResult* c : cases) {
      const LayerRow& row = c->layers[l];
      for (int m = 0; m < kModes; ++m) {
        drift[m] = worst_err(drift[m], row.drift[m]);
        iso[m] = worst_err(iso[m], row.iso[m]);
        dnorm[m] = max_opt(dnorm[m], row.drift_norm[m]);
        ratio = max_opt(ratio, row.floor_ratio[m]);
        if (row.limit[m]) limit = limit ? std::min(*limit, *row.limit[m]) : *row.limit[m];
        fails = fails || !row.pass[m];
      }
      if (c->first_break && c->first_break->second == static_cast<int>(l)) first_in.push_back(c->id);
    }
    const LayerRow& r0 = cases.front()->layers[l];
    std::string mark;
    if (!first_in.empty()) {
      mark = "  <- FIRST BREAK";
      if (cases.size() > 1) {
        mark += " (" + first_in.front();
        if (first_in.size() > 1) mark += cat(" +", first_in.size() - 1);
        mark += ")";
      }
    } else if (fails) {
      mark = "  over";
    }
    o += cat(indent, fmt_pad(cat(r0.layer, " ", r0.kind), 7), "  ", fmt_pad(err_cell(drift[0], dnorm[0]), 13), "  ",
             fmt_pad(err_cell(drift[1], drift[1] ? std::nullopt : dnorm[1]), 13), "  ", fmt_pad(err_cell(iso[0], std::nullopt), 13),
             "  ", fmt_pad(err_cell(iso[1], std::nullopt), 13), "  ", fmt_pad(limit ? sci(*limit) : "-", 9), "  ",
             fmt_pad(ratio ? sci(*ratio) : "-", 9), mark, "\n");
  }
  return o;
}

std::string pct(double v) { return cat(std::fixed, std::setprecision(1), 100 * v, "%"); }

}  // namespace

std::string format_compare(const CompareResult& r, bool per_case) {
  std::string o;
  o += cat("compare: ", r.golden_dir, " (suite '", r.suite, "') vs ", r.model_dir, ", config ", r.config, " on ", r.backend, "\n");
  if (r.model_mismatch)
    o += cat("warning: the record was made for another checkpoint (fingerprint ", r.record_fingerprint.substr(0, 16),
             "... vs ", r.model_fingerprint.substr(0, 16), "...), compared on request (--allow-model-mismatch)\n");
  if (r.weights_differ && !r.changed_tensors.empty()) {
    std::string names;
    for (size_t i = 0; i < r.changed_tensors.size() && i < 5; ++i) names += (i ? ", " : "") + r.changed_tensors[i];
    if (r.changed_tensors.size() > 5) names += cat(", ... (", r.changed_tensors.size() - 5, " more)");
    o += cat("warning: ", r.changed_tensors.size(), " of the model's tensors differ from the ones the record was made with: ",
             names, "\n         (the model differs, not necessarily the engine: a converted, re-sharded or edited copy?)\n");
  } else if (r.weights_differ) {
    o += "warning: same architecture and fingerprint as the record's model, but other weight values (another seed, a "
         "fine-tune or a modified copy?)\n";
  }
  if (r.tokenizer_mismatch)
    o += cat("warning: the record was made with tokenizer ", r.record_tokenizer, ", the model folder has ",
             r.model_tokenizer.empty() ? std::string("none") : r.model_tokenizer,
             " (compared on request, --allow-model-mismatch): stop ids and padding may differ from the record's\n");
  if (!r.manifest_checked)
    o += "note: the record's manifest.json has no checksum of its own (made before manifest_sha256): an edit of its noise\n"
         "      floors or settings cannot be detected; regenerate the record with `degenbisect golden` to protect it\n";
  if (r.decode_skipped)
    o += "note: decode mode skipped (--no-decode): bugs of the one-token-per-call path alone (a stuck conv window, a\n"
         "      KV cache off by one) are not measured, and the verdict can be good with them\n";
  if (!r.limits_note.empty())
    o += r.limits_note + "\n";
  else if (r.floors)
    o += cat("limits: ", r.floor_class, " noise floors of the record, k = 3 (floor class of this configuration)\n");
  else
    o += cat("note: the record has no ", r.floor_class, " noise floors (", r.floors_reason, ");\n      isolated errors are judged against rel_l2 <= ",
             sci(kFallbackRelL2), " and mean KLD against ", sci(kFallbackKld), " nats: fixed limits for fp32-class paths only\n");
  std::vector<const CaseResult*> all;
  for (const CaseResult& c : r.cases) all.push_back(&c);
  if (!per_case) {
    const std::string table = layer_table(all, "  ");
    if (!table.empty())
      o += cat("\nper layer, worst over ", r.cases.size(), " cases (rel_l2; ~ = from the output-norm digest only):\n", table);
  }
  o += cat("\n  ", fmt_pad("case", 20), "  ", fmt_pad("KLD:prefill", 11), "  ", fmt_pad("KLD:decode", 11), "  ",
           fmt_pad("top1", 7), "  ", fmt_pad("mtp KLD", 9), "  ", fmt_pad("KLD:gen", 9), "  ", fmt_pad("gen", 4), "  ", fmt_pad("diverge", 8), "  ",
           fmt_pad("degenerate", 18), "  verdict\n");
  for (const CaseResult& c : r.cases) {
    if (per_case) {
      o += cat("\ncase ", c.id, ": ", c.prompt_tokens, " prompt + ", c.positions - c.prompt_tokens,
               " golden tokens; layer data at ", c.stored_positions, " of ", c.positions, " positions\n");
      o += layer_table({&c}, "  ");
    }
    auto kld = [&](int m) { return c.logits[m] ? sci(c.logits[m]->mean_kld) + (c.logits[m]->pass ? "" : "!") : "-"; };
    std::string top1 = c.logits[0] ? pct(c.logits[0]->summary.same_top_p.value)
                       : c.logits[1] ? pct(c.logits[1]->summary.same_top_p.value)  // a decode-mode dump
                                     : "-";
    const GenerationResult& g = c.gen;
    std::string degen = g.degen.degenerate ? g.degen.rule.value_or("yes") : "no";
    if (g.golden_degen.degenerate) degen += cat(" (golden ", g.golden_degen.rule.value_or("yes"), ")");
    o += cat("  ", fmt_pad(c.id, 20), "  ", fmt_pad(kld(0), 11), "  ", fmt_pad(kld(1), 11), "  ", fmt_pad(top1, 7), "  ",
             fmt_pad(c.mtp ? sci(c.mtp->mean_kld) + (c.mtp->pass ? "" : "!") : "-", 9), "  ",
             fmt_pad(g.logits         ? sci(g.logits->mean_kld) + (g.logits->pass ? "" : "!")
                     : g.decode_path && g.decode_path->scored > 0 ? sci(g.decode_path->max_kld) + (g.decode_path->pass ? "" : "!")
                                                                 : "-",
                     9),
             "  ",
             fmt_pad(std::to_string(g.tokens.size()), 4), "  ",
             fmt_pad(g.first_divergence ? std::to_string(*g.first_divergence) : "none", 8), "  ", fmt_pad(degen, 18), "  ",
             metrics::verdict_name(c.verdict), "\n");
    if (g.spec)
      o += cat("      mtp: accept_rate ", g.spec->accept_rate ? pct(*g.spec->accept_rate) : "-",
               ", accept_len ", g.spec->accept_len ? cat(std::fixed, std::setprecision(2), *g.spec->accept_len) : "-",
               g.mtp_equiv ? (g.mtp_equiv->mtp_equiv ? ", mtp_equiv yes" : cat(", mtp_equiv NO (token ",
                                                                              g.mtp_equiv->first_difference.value_or(-1), ")"))
                           : "",
               "\n");
    if (g.decode_path && g.decode_path->scored > 0)
      o += cat("      decode path: ", g.decode_path->scored, " of ", g.decode_path->steps, " steps scored, KLD mean ",
               sci(g.decode_path->mean_kld), " max ", sci(g.decode_path->max_kld), ", limit ", sci(g.decode_path->limit),
               g.spec_stated.empty() ? "" : "; " + g.spec_stated, "\n");
    else if (!g.spec_stated.empty())
      o += cat("      ", g.spec_stated, "\n");
    for (const ProbeResult& p : g.probes)  // a bad probe is one of the case's reasons below, said once
      if (p.verdict != "bad") o += cat("      probe ", p.name, ": ", p.verdict, p.reason.empty() ? "" : " (" + p.reason + ")", "\n");
    for (const std::string& why : c.reasons) o += cat("      - ", why, "\n");
  }
  size_t counts[4] = {0, 0, 0, 0};
  for (const CaseResult& c : r.cases) ++counts[static_cast<int>(c.verdict)];
  o += cat("\nverdict: ", metrics::verdict_name(r.verdict), " (exit ", r.exit_code, "): ", r.cases.size(), " cases, ",
           counts[static_cast<int>(Verdict::good)], " good, ", counts[static_cast<int>(Verdict::bad)], " bad, ",
           counts[static_cast<int>(Verdict::model_intrinsic)], " model-intrinsic; ", cat(std::fixed, std::setprecision(2), r.seconds),
           " s\n");
  return o;
}

}  // namespace degen
