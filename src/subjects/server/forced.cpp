// compare --server, the teacher-forced part: every request fits one answer, the vocabulary checked by text, and
// the server's listing at every golden position scored against the record (subjects/server/run.h).
#include "subjects/server/run.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/backend_factory.h"
#include "judge/compare.h"
#include "model/tokenizer.h"
#include "subjects/server/engine_api.h"
#include "util/error.h"

namespace degen::server_subject {


// Before any request: every request the run will make must fit one answer (ApiContext::cap), so that a
// --topk too large for a case's generation is refused now, not after its teacher-forced part.
void check_answer_bounds(const ServerRun& run, const std::vector<size_t>& selected) {
  for (size_t i : selected) {
    const GoldenCase g = run.rec.load_case(i, false);
    const int64_t P = static_cast<int64_t>(g.prompt.size()), T = P + static_cast<int64_t>(g.continuation.size());
    (void)run.ctx.cap(T + 1, run.api->forced_listings(run.ctx, T), run.topk);
    if (run.o.free_running && g.max_new_tokens > 0) (void)run.ctx.generation_cap(P, g.max_new_tokens, run.o.decode_path ? run.topk : 0);
  }
}

// The record's first prompt detokenized by the server must be our tokenizer's text.
void check_vocabulary(const ServerRun& run, const std::vector<int32_t>& ids) {
  if (!run.tok || ids.empty()) return;
  const std::string url = run.base + "/detokenize";
  json r;
  try {
    r = net::post_json(url, run.api->detokenize_request(run.ctx, ids), run.o.http);
  } catch (const net::HttpStatusError& e) {
    // The OpenAI-compatible API has no detokenizer of its own; llama-server and vLLM add one.
    if (run.api->caps().detokenize_optional && (e.status() == 404 || e.status() == 405)) {
      run.vocab_note = "the server has no /detokenize: its vocabulary is checked by its ids only";
      return;
    }
    throw;
  }
  const std::string theirs = server_answer::detokenized(r, url);
  const std::string ours = run.tok->decode(ids);
  if (theirs != ours) {
    size_t i = 0;
    while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) ++i;
    input_error("the server at ", run.base, " serves another vocabulary: the record's first prompt (", ids.size(),
                " ids) detokenizes to '", theirs.substr(i, 40), "...' there and '", ours.substr(i, 40),
                "...' with the model's tokenizer (first difference at byte ", i, ")");
  }
}

// The server's list at one position as a metrics::Listing in the record's normalisation: ids at or
// beyond the vocabulary out (reported by the caller: the case is bad), padding ids out, an id listed
// twice once (the first), each log-prob moved by `lse_pad` (the record's, from the server's
// normalisation over all vocab_size rows to the real ids'; 0: none known), the real ids it leaves out
// counted.
metrics::Listing listing_of(const TopList& top, const ServerRun& run, double lse_pad) {
  metrics::Listing l;
  std::vector<uint8_t> seen(static_cast<size_t>(run.V), 0);
  for (const auto& [id, v] : top) {
    if (id < 0 || id >= run.V) continue;
    const size_t i = static_cast<size_t>(id);
    if (seen[i] || (!run.mask.empty() && run.mask[i])) continue;
    seen[i] = 1;
    l.ids.push_back(static_cast<int32_t>(id));
    l.logprobs.push_back(v + lse_pad);
  }
  l.unlisted = run.V_real - static_cast<int64_t>(l.ids.size());
  l.scale_slack = metrics::listing_scale_slack(run.V);
  return l;
}

// The first id at or beyond the vocabulary in a list, reported in `oov` (a case with one is bad: no
// correct server of this model lists such an id); listing_of leaves such ids out of the scoring.
void note_out_of_vocabulary(const TopList& top, const ServerRun& run, const std::string& where, std::string& oov) {
  for (const auto& e : top)
    if (e.first >= run.V && oov.empty())
      oov = cat("the server lists token id ", e.first, " at ", where, ", beyond the model's vocabulary of ", run.V,
                " ids (its logit rows): no correct server of this model can");
}

// The server's log-probs are normalised over all its vocab_size rows (llama.cpp, vLLM and HF
// transformers do not mask padding ids); the record's over the real ids. At position i they differ by
// the record's lse_pad (docs/metrics.md "Two normalisations"). For the KLD the server's values are
// taken to the record's normalisation (log p_real = log p_server + lse_pad: exact for a server computing
// the reference's logits; it matters only when the server lists part of the vocabulary, as a
// complete listing is renormalised over the real ids anyway); logprob_offset compares the server's
// log-probs with the record's in the server's normalisation, where a constant offset would show.
void teacher_forced(const ServerRun& run, const GoldenCase& g, CaseResult& cr, double& coverage, std::vector<std::string>& bad,
                    const std::vector<TopList>* fetched) {
  const std::vector<int32_t> seq = g.sequence();
  const int64_t T = static_cast<int64_t>(seq.size());
  const std::vector<TopList>& tops = *fetched;
  run.prompt_end.reset();
  if (!g.prompt.empty() && g.prompt.size() <= tops.size()) run.prompt_end = tops[g.prompt.size() - 1];
  std::vector<metrics::LogitPosition> pos;
  int64_t covered = 0, n_off = 0;
  double sum_off = 0;
  bool vocab_norm = true;
  std::string oov;
  for (int64_t i = 0; i < T; ++i) {
    const std::optional<double> shift = vocab_shift(g.topk, i);  // record -> server normalisation
    if (!shift) vocab_norm = false;
    const TopList& top = tops[static_cast<size_t>(i)];
    note_out_of_vocabulary(top, run, cat("position ", i), oov);
    const metrics::Listing l = listing_of(top, run, shift ? -*shift : 0.0);
    const int K = g.topk.K;
    metrics::GoldenTopK gk{std::span<const int32_t>(g.topk.ids.data() + i * K, static_cast<size_t>(K)),
                           std::span<const float>(g.topk.logprobs.data() + i * K, static_cast<size_t>(K)), 0.0};
    for (size_t j = 0; j < gk.ids.size(); ++j) {
      const auto it = std::find(l.ids.begin(), l.ids.end(), gk.ids[j]);
      const double v = it == l.ids.end() ? -std::numeric_limits<double>::infinity() : l.logprobs[static_cast<size_t>(it - l.ids.begin())];
      if (!std::isfinite(v) || !std::isfinite(gk.logprobs[j])) continue;
      // (server + lse_pad) - record = server - (record - lse_pad): the offset in the server's normalisation
      sum_off += v - static_cast<double>(gk.logprobs[j]);
      ++n_off;
    }
    const int32_t next = i + 1 < T ? seq[static_cast<size_t>(i + 1)] : -1;
    pos.push_back(metrics::compare_listing(gk, l, next));
    covered += pos.back().resolved.value_or(1.0) >= 1.0 ? 1 : 0;
  }
  if (!oov.empty()) bad.push_back(oov);
  coverage = T ? static_cast<double>(covered) / static_cast<double>(T) : 1.0;
  const std::optional<CaseFloors>& floors = g.floors[static_cast<int>(run.o.fclass)];
  std::optional<double> floor = floors ? floors->kld[0] : std::nullopt;
  if (run.o.measured_class) {
    auto it = run.o.measured_floors->find(g.id);
    if (it == run.o.measured_floors->end())
      it = run.o.measured_floors
               ->emplace(g.id, measured_kld_floor(g, run.model, *run.o.measured_class, run.o.factory,
                                                  run.mask.empty() ? nullptr : &run.mask))
               .first;
    floor = it->second;
  }
  cr.logits[0] = logits_result(pos, floor, run.o.rules.kld, run.o.rules.fallback_kld);
  double resolved = 0;
  for (const metrics::LogitPosition& p : pos) resolved += p.resolved.value_or(1.0);
  if (!pos.empty()) cr.logits[0]->resolved = resolved / static_cast<double>(pos.size());
  if (n_off > 0) cr.logits[0]->logprob_offset = sum_off / static_cast<double>(n_off);
  cr.logits[0]->logprob_offset_vocab = vocab_norm;
}

}  // namespace degen::server_subject
