// Our engine under test: the run every part shares (EngineRun) and the free-running generations
// of the selected cases, run before the cases' other parts so that batch=all can batch them.
#include <chrono>
#include <cmath>

#include "record/cases.h"
#include "engine/backend_factory.h"
#include "engine/toggles.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "subjects/engine/run.h"

namespace degen::engine_subject {

EngineRun::EngineRun(const GoldenRecord& rec_, const Model& model_, const Tokenizer* tok, const CompareOptions& opt_,
                     const BackendFactory& factory_)
    : rec(rec_), model(model_), cfg(model_.config), opt(opt_), factory(factory_), L(cfg.num_layers),
      H(cfg.hidden_size), V(cfg.vocab_size), fclass(floor_class_for(opt_.config)), fc(static_cast<int>(fclass)) {
  be = factory(opt.config, cfg);  // the factory checks the configuration against the model, once
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

Engine& EngineRun::reference() {
  if (!ref_eng) {
    RunConfig rc;
    rc.precision = rec.manifest().settings.fp64() ? Precision::fp64 : Precision::ref;
    ref_be = factory(rc, cfg);
    ref_eng = std::make_unique<Engine>(cfg, model.weights, *ref_be, engine_options(rc));
  }
  return *ref_eng;
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


// The generation jobs of the selected cases, with each case's golden continuation: the record's,
// or the reference's own under a sampling the record does not hold (golden_rerun).
std::vector<GenJob> generation_jobs(EngineRun& run, const std::vector<size_t>& selected, std::vector<GenerationResult>& gens) {
  std::vector<GenJob> jobs;
  for (size_t s = 0; s < selected.size(); ++s) {
    const GoldenCase& gc = run.rec.cases()[selected[s]];
    GoldenCase full = run.rec.load_case(selected[s], false);
    const SamplingParams sp = with_sampling_of(run.opt.config.sampling, gc.sampling_params);
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
void generate_group(EngineRun& run, const std::vector<GenJob>& jobs, size_t i, size_t j,
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

}  // namespace

// Step 3 (run first, so batch=all can batch it): free-running generation of every selected case,
// one job per call, or with batch=all, runs of consecutive cases with equal settings.
void run_generations(EngineRun& run, const std::vector<size_t>& selected, std::vector<GenerationResult>& gens,
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

}  // namespace degen::engine_subject
