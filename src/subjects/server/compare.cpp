// compare --server (subjects/server/compare.h): the server as a subject of judge/compare.h's compare().
// Per case: the teacher-forced top-K (forced.cpp), then the free-running generation with its decode path
// and the serving probes (generation.cpp); the requests and answers are the engine API's
// (subjects/server/engine_api.h), which the judging asks by capability.
#include "subjects/server/compare.h"

#include <algorithm>
#include <cmath>
#include <iomanip>

#include "judge/compare.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "subjects/server/engine_api.h"
#include "util/error.h"
#include "subjects/server/run.h"

namespace degen {

namespace server_subject {

namespace {

// The reason of a check whose KLD passes on a listing that resolves too little of the record's mass
// to judge (CompareRules::min_resolved): untestable, not good.
std::string not_judgeable(const char* what, double resolved, double kld, double limit, const ServerRun& run) {
  const std::string why = static_cast<size_t>(run.topk) < metrics::kMinListedIds
                              ? cat("the server's top-", run.topk, " is fewer ids than the ", metrics::kMinListedIds,
                                    " a KLD needs to be judged (a chi-square of so few cells says little about a floor)")
                              : cat("the server's top-", run.topk, " lists only ", cat(std::setprecision(3), 100 * resolved),
                                    "% of the record's stored mass (at least ", 100 * run.o.rules.min_resolved, "% is needed to judge)");
  return cat("not judgeable: ", what, " KLD ", kld, " is within the limit ", limit, ", but ", why, ": ask for more ids (--topk, up to ",
             run.V_real, ")");
}

// --served-model against GET /v1/models: a name the server does not serve is an input error (vLLM
// would refuse each request with 404 "The model ... does not exist"); a server without the list is
// noted (the return value, for the limits line).
std::string check_served_model(const ServerRun& run) {
  const std::string url = run.base + "/v1/models";
  json r;
  try {
    r = net::get_json(url, run.o.http);
  } catch (const net::HttpStatusError& e) {
    if (e.status() == 404 || e.status() == 405) return cat("; the server has no /v1/models: --served-model '", run.o.served_model, "' not checked");
    throw;
  }
  const std::vector<std::string> names = server_answer::served_models(r, url);
  if (std::find(names.begin(), names.end(), run.o.served_model) != names.end()) return "";
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "'" : ", '") + n.substr(0, 80) + "'";
  input_error("the server at ", run.base, " does not serve '", run.o.served_model, "' (--served-model): GET /v1/models lists ",
              names.empty() ? std::string("no model") : list);
}

// The --api entry, with the options that apply to it: InputError for an unknown API (naming the
// table's) or an option of another API.
const server::EngineApi& checked_api(const ServerCompareOptions& o) {
  const server::EngineApi& api = server::find_api(o.api);
  const server::ApiCapabilities& caps = api.caps();
  if (o.prompt_logprobs && !caps.prompt_logprobs_option)
    input_error("compare --server: --prompt-logprobs is a parameter of the OpenAI-compatible API (vLLM); with --api ", o.api, " ",
                caps.forced_shape);
  if (o.sglang_original_logprobs && !caps.states_scaled_logprobs)
    input_error("compare --server: --sglang-logprobs applies to --api sglang only");
  return api;
}

// What the API's requests need, from the run (its base URL, top-K and vocabulary) and the options.
server::ApiContext api_context(const ServerRun& run) {
  server::ApiContext c;
  c.base = run.base;
  c.topk = run.topk;
  c.V = run.V;
  c.served_model = run.o.served_model;
  c.prompt_logprobs = run.o.prompt_logprobs;
  c.original_logprobs = run.o.sglang_original_logprobs;
  c.decode_path = run.o.decode_path;
  c.http = run.o.http;
  c.measure_pieces(run.tok);
  return c;
}

// The teacher-forced top-K at every position of each case's sequence, as the API fetches them.
std::vector<std::vector<TopList>> fetch_forced(const ServerRun& run, const std::vector<GoldenCase>& cases) {
  std::vector<std::vector<int32_t>> seqs;
  for (const GoldenCase& c : cases) seqs.push_back(c.sequence());
  return run.api->forced(run.ctx, seqs);
}

// A running server as the subject of a comparison (judge/subject.h): per case, its teacher-forced
// listings at every golden position, then its free-running generation with the decode path and the
// serving probes. The teacher-forced answers are fetched in groups of the API's forced_batch cases
// (SGLang takes several sequences per request); the vocabulary is checked by text once, before the
// first case's requests.
class ServerSubject : public Subject {
 public:
  explicit ServerSubject(const ServerRun& run) : run_(run) {}

  void describe(CompareResult& r) const override {
    r.config = cat("server ", run_.base, " (api ", run_.o.api, ")");
    r.backend = "another engine (HTTP)";
    r.source = "server";
  }
  SubjectFloors floors() const override {
    const ServerCompareOptions& o = run_.o;
    return {o.measured_class ? o.class_name : floor_class_name(o.fclass), o.fclass, o.measured_class.has_value()};
  }
  std::string limits_note(const CompareResult& r) const override {
    const ServerCompareOptions& o = run_.o;
    return cat("limits: logits: the server's top-", run_.topk, run_.topk == run_.V ? " (every id)" : "", " against the record's top-K, ",
               o.measured_class ? cat("the ", r.floor_class, " class's KLD floor measured now (our engine at ", o.measured_class->str(), "; k = 3)")
               : r.floors       ? cat("the record's ", r.floor_class, " KLD floor (k = 3)")
                                : cat("the record's ", r.floor_class, " KLD floor is absent: fixed 1e-4 nats"),
               "; no layer data through HTTP (compare --dump gives it)");
  }
  void prepare(CompareResult& r) override {
    if (run_.api->caps().checks_served_model && !run_.o.served_model.empty()) r.limits_note += check_served_model(run_);
  }
  void open(const std::vector<size_t>& selected, CompareResult&) override {
    check_answer_bounds(run_, selected);
    selected_ = selected;
  }
  // The case's group loaded (its teacher-forced answers fetched at once for SGLang), the vocabulary
  // checked before the first.
  void begin_case(CaseWork& w) override {
    const size_t group = run_.api->caps().forced_batch;
    if (w.slot % group == 0) {
      cases_.clear();
      for (size_t n = w.slot; n < std::min(selected_.size(), w.slot + group); ++n)
        cases_.push_back(run_.rec.load_case(selected_[n], false));
      if (!checked_vocab_) {
        check_vocabulary(run_, cases_.front().prompt);
        checked_vocab_ = true;
      }
      fetched_ = fetch_forced(run_, cases_);
    }
    at_ = w.slot % group;
    const GoldenCase& g = cases_[at_];
    w.cr.id = g.id;
    w.cr.prompt_tokens = static_cast<int64_t>(g.prompt.size());
    w.cr.positions = static_cast<int64_t>(g.prompt.size() + g.continuation.size());
  }
  void teacher_forced(CaseWork& w) override {
    CaseResult& cr = w.cr;
    double coverage = 1;
    server_subject::teacher_forced(run_, cases_[at_], cr, coverage, w.bad, fetched_.empty() ? nullptr : &fetched_[at_]);
    const LogitsResult& lr = *cr.logits[0];
    if (lr.nonfinite > 0) w.bad.push_back(cat(lr.nonfinite, " positions with non-finite log-probs"));
    if (!lr.pass)
      w.bad.push_back(cat("teacher-forced mean KLD ", lr.mean_kld, " > ", lr.limit, lr.floor ? " (k x the record's floor)" : " (fixed limit)"));
    const double resolved = lr.resolved.value_or(1.0);
    if (lr.pass && resolved < run_.o.rules.min_resolved)
      w.unjudged.push_back(not_judgeable("teacher-forced", resolved, lr.mean_kld, lr.limit, run_));
    else if (coverage < 1)
      w.warn.push_back(cat("the server's top-", run_.topk, " missed some of the record's top-K ids at ",
                           cat(std::fixed, std::setprecision(1), 100 * (1 - coverage)), "% of positions (",
                           cat(std::setprecision(3), 100 * resolved), "% of the record's stored mass listed): the KLD there is the ",
                           "smallest the listing allows"));
  }
  void generation(CaseWork& w) override {
    if (run_.o.free_running) free_running(run_, cases_[at_], w.cr, w.bad, w.warn);
    const std::optional<DecodePathResult>& dp = w.cr.gen.decode_path;
    if (dp && dp->pass && dp->resolved && *dp->resolved < run_.o.rules.min_resolved)
      w.unjudged.push_back(not_judgeable("decode path", *dp->resolved, dp->max_kld, dp->limit, run_));
  }
  std::string progress(const CaseResult& cr) const override {
    return cat("compare: server case ", cr.id, ": ", metrics::verdict_name(cr.verdict), " (",
               cat(std::fixed, std::setprecision(2), cr.seconds), " s)");
  }
  void finish(CompareResult& r, std::FILE*) override {
    if (!run_.vocab_note.empty()) r.limits_note += "; " + run_.vocab_note;
    r.limits_note += "\n" + logprob_offset_note(r, run_.V, run_.mask, "server");
  }

 private:
  const ServerRun& run_;
  std::vector<size_t> selected_;
  bool checked_vocab_ = false;
  std::vector<GoldenCase> cases_;                 // the group under way
  std::vector<std::vector<TopList>> fetched_;     // the group's teacher-forced answers (empty: fetched per case)
  size_t at_ = 0;                                 // the case under way within the group
};

}  // namespace

}  // namespace server_subject

using namespace server_subject;

CompareResult compare_server(const GoldenRecord& rec, const Model& model, const Tokenizer* tok,
                             const ServerCompareOptions& o, std::FILE* progress) {
  const server::EngineApi& api = checked_api(o);
  if (o.url.rfind("http://", 0) != 0 && o.url.rfind("https://", 0) != 0)
    input_error("compare --server: '", o.url, "' is not an http:// or https:// URL");
  const ModelConfig& cfg = model.config;
  if (o.topk < 0 || o.topk > cfg.vocab_size)
    input_error("compare --server: --topk ", o.topk, ": the model has ", cfg.vocab_size, " logit rows; expected 1 to ", cfg.vocab_size,
                " (0: every id up to ", kServerAllIds, " rows, else 40)");
  const int topk = o.topk > 0 ? o.topk : cfg.vocab_size <= kServerAllIds ? static_cast<int>(cfg.vocab_size) : 40;
  ServerRun run{rec, model, tok, o, cfg.vocab_size, topk, o.url, {}, {}, {}, std::nullopt, {}, {}, {}, {}, {}, {}, std::nullopt, {}, 0, nullptr, {}};
  while (!run.base.empty() && run.base.back() == '/') run.base.pop_back();
  if (tok) {
    run.mask = tok->padding_mask(cfg.vocab_size);
    run.stops = stop_token_ids(model.dir / "generation_config.json", *tok);
    run.ws_ids = whitespace_ids(*tok);
    run.think_end = tok->token_id("</think>");
  } else {
    for (int64_t e : cfg.eos_token_ids) run.stops.push_back(static_cast<int32_t>(e));
  }
  run.V_real = run.mask.empty() ? run.V : static_cast<int64_t>(std::count(run.mask.begin(), run.mask.end(), uint8_t{0}));
  run.api = &api;
  run.ctx = api_context(run);

  ServerSubject subject(run);
  return compare(rec, model, tok, o, subject, progress);
}

}  // namespace degen
