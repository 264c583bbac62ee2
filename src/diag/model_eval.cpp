// eval: task accuracy, long free-running degeneration, MTP acceptance, the fault table (model_eval.h).
#include "diag/model_eval.h"

#include <algorithm>
#include <optional>
#include <cctype>
#include <chrono>
#include <cmath>
#include <set>

#include "record/cases.h"
#include "judge/result.h"
#include "subjects/engine.h"
#include "engine/faults.h"
#include "engine/toggles.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/spec_decode.h"
#include "model/chat_template.h"
#include "util/file_io.h"
#include "model/tokenizer.h"
#include "util/error.h"
#include "util/json_input.h"
#include "util/sha256.h"

namespace degen {

namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

std::string short_json(const json& j) { return json_excerpt(j, 60); }

bool valid_id(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

bool is_number(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// The last run of digits in s ("" when none).
std::string last_number(const std::string& s) {
  size_t end = s.size();
  while (end > 0 && !std::isdigit(static_cast<unsigned char>(s[end - 1]))) --end;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(s[begin - 1]))) --begin;
  return s.substr(begin, end - begin);
}

}  // namespace

// ---- held-out set ----

HeldoutSet parse_heldout(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = parse_json(text, origin);
  } catch (const json::exception& e) {
    input_error(origin, ": not valid JSON (", e.what(), "); expected a held-out question set {\"format\": \"",
                kHeldoutFormat, "\", \"questions\": [...]}");
  }
  if (!j.is_object()) input_error(origin, ": top level is ", j.type_name(), "; expected a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "format" && it.key() != "description" && it.key() != "questions")
      input_error(origin, ": unknown key '", it.key(), "'; expected format, description, questions");
  if (!j.contains("format") || j["format"] != kHeldoutFormat)
    input_error(origin, ": format is ", j.contains("format") ? short_json(j["format"]) : std::string("missing"),
                "; expected \"", kHeldoutFormat, "\"");
  HeldoutSet set;
  set.origin = origin;
  set.sha256 = sha256_hex(text);
  if (j.contains("description")) {
    if (!j["description"].is_string()) input_error(origin, ": description is not a string");
    set.description = j["description"].get<std::string>();
  }
  if (!j.contains("questions") || !j["questions"].is_array() || j["questions"].empty())
    input_error(origin, ": 'questions' is ", j.contains("questions") ? short_json(j["questions"]) : std::string("missing"),
                "; expected a non-empty array of questions");
  std::set<std::string> seen;
  size_t index = 0;
  for (const json& q : j["questions"]) {
    const std::string where = cat(origin, ": question ", index);
    if (!q.is_object()) input_error(where, " is ", short_json(q), "; expected an object");
    HeldoutQuestion h;
    for (auto it = q.begin(); it != q.end(); ++it) {
      const std::string& k = it.key();
      const json& v = it.value();
      auto need_string = [&] {
        if (!v.is_string() || v.get<std::string>().empty())
          input_error(where, ": field '", k, "' is ", short_json(v), "; expected a non-empty string");
        if (Tokenizer::find_invalid_utf8(v.get<std::string>()) != std::string::npos)
          input_error(where, ": field '", k, "' is not valid UTF-8");
        return v.get<std::string>();
      };
      if (k == "id") h.id = need_string();
      else if (k == "kind") h.kind = need_string();
      else if (k == "prompt") h.prompt = need_string();
      else if (k == "system") h.system = need_string();
      else if (k == "thinking") {
        if (!v.is_boolean()) input_error(where, ": field 'thinking' is ", short_json(v), "; expected true or false");
        h.thinking = v.get<bool>();
      } else if (k == "expect") {
        if (!v.is_array() || v.empty()) input_error(where, ": field 'expect' is ", short_json(v), "; expected a non-empty array of strings");
        for (const json& e : v) {
          if (!e.is_string() || e.get<std::string>().empty())
            input_error(where, ": 'expect' holds ", short_json(e), "; expected non-empty strings");
          h.expect.push_back(e.get<std::string>());
        }
      } else {
        input_error(where, ": unknown field '", k, "'; expected id, kind, prompt, system, thinking, expect");
      }
    }
    for (const char* f : {"id", "prompt", "expect"})
      if (!q.contains(f)) input_error(where, ": field '", f, "' is missing");
    if (!valid_id(h.id)) input_error(where, ": id '", h.id, "' is not [A-Za-z0-9._-]{1,64}");
    if (!seen.insert(h.id).second) input_error(where, ": id '", h.id, "' appears twice");
    if (h.kind.empty()) h.kind = "default";
    set.questions.push_back(std::move(h));
    ++index;
  }
  return set;
}

HeldoutSet load_heldout(const std::filesystem::path& path) {
  if (!std::filesystem::is_regular_file(path))
    input_error(path.string(), ": no held-out question set there; expected a file in the format \"", kHeldoutFormat,
                "\" (tools/tiny_corpus.py --heldout writes one; --heldout FILE names another)");
  return parse_heldout(read_file(path), path.string());
}

bool answer_matches(const std::string& answer, const std::vector<std::string>& expect) {
  for (const std::string& e : expect) {
    bool found = false;
    for (size_t at = answer.find(e); at != std::string::npos && !found; at = answer.find(e, at + 1)) {
      const bool left = at == 0 || !is_word_char(answer[at - 1]) || !is_word_char(e.front());
      const size_t end = at + e.size();
      const bool right = end == answer.size() || !is_word_char(answer[end]) || !is_word_char(e.back());
      found = left && right;
    }
    if (!found) return false;
    if (is_number(e) && last_number(answer) != e) return false;
  }
  return true;
}

std::string answer_of(const std::string& generated, bool prompt_opened_think) {
  ThinkingSplit s = split_thinking(generated, prompt_opened_think);
  std::string a = prompt_opened_think && !s.closed ? std::string() : s.answer;
  for (const char* stop : {"<|im_end|>", "<|endoftext|>"}) {
    size_t at = a.find(stop);
    if (at != std::string::npos) a.resize(at);
  }
  size_t b = 0, e = a.size();
  while (b < e && std::isspace(static_cast<unsigned char>(a[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(a[e - 1]))) --e;
  return a.substr(b, e - b);
}

std::vector<HeldoutQuestion> select_questions(const HeldoutSet& set, size_t limit) {
  if (limit == 0 || limit >= set.questions.size()) return set.questions;
  std::map<std::string, size_t> total, taken;
  for (const auto& q : set.questions) ++total[q.kind];
  std::vector<HeldoutQuestion> out;
  for (const auto& q : set.questions) {
    const size_t quota = (total[q.kind] * limit + set.questions.size() - 1) / set.questions.size();
    if (taken[q.kind] < quota && out.size() < limit) {
      ++taken[q.kind];
      out.push_back(q);
    }
  }
  return out;
}

// ---- JSON ----

json AccuracyResult::to_json(bool with_rows) const {
  json kinds = json::object();
  for (const auto& [k, v] : by_kind) kinds[k] = {{"correct", v.first}, {"n", v.second}};
  json j = {{"n", n}, {"correct", correct}, {"accuracy", accuracy()}, {"by_kind", kinds}};
  if (with_rows) {
    json rows = json::array();
    for (const auto& r : this->rows)
      rows.push_back({{"id", r.id}, {"kind", r.kind}, {"correct", r.correct}, {"answer", r.answer},
                      {"tokens", r.tokens}, {"stop_reason", r.stop_reason}});
    j["questions"] = rows;
  }
  return j;
}

json MtpFigure::to_json() const {
  return {{"drafts", drafts}, {"spec", spec.to_json()}, {"outputs_differing_from_mtp0", differ}};
}

json LongCaseResult::to_json() const {
  return {{"id", id}, {"sampling", sampling}, {"ok", ok}, {"degeneration", degen.to_json()},
          {"golden_degeneration", golden_degen.to_json()}};
}

json LongResult::to_json() const {
  json rows_j = json::array();
  for (const auto& r : rows) rows_j.push_back(r.to_json());
  return {{"golden", golden}, {"max_seq_rep_4", max_seq_rep_4}, {"n", n}, {"ok", ok}, {"ok_fraction", ok_fraction()},
          {"degenerate", degenerate}, {"golden_degenerate", golden_degenerate}, {"greedy", greedy},
          {"greedy_degenerate", greedy_degenerate}, {"greedy_golden_degenerate", greedy_golden_degenerate},
          {"cases", rows_j}};
}

json EvalFigures::to_json(bool with_rows) const {
  json m = json::array();
  for (const auto& f : mtp) m.push_back(f.to_json());
  return {{"config", config},
          {"accuracy", accuracy.to_json(with_rows)},
          {"mtp", m},
          {"long", long_cases ? long_cases->to_json() : json(nullptr)},
          {"seconds", seconds}};
}

json FaultRow::to_json() const {
  return {{"fault", fault},
          {"scope", scope},
          {"config", config},
          {"applicable", applicable},
          {"reason", reason},
          {"cases", cases},
          {"degenerate", degenerate},
          {"golden_degenerate", golden_degenerate},
          {"empty_content", empty},
          {"looping", looping},
          {"mean_seq_rep_4", mean_seq_rep_4},
          {"first_loop_onset", first_loop_onset ? json(*first_loop_onset) : json(nullptr)},
          {"rules", rules},
          {"questions", questions},
          {"correct", correct},
          {"verdict", verdict},
          {"exit_code", exit_code},
          {"first_layer", first_layer ? json(*first_layer) : json(nullptr)},
          {"example", example}};
}

// ---- running ----

namespace {

struct Runner {
  const Model& model;
  const Tokenizer& tok;
  std::vector<uint8_t> mask;
  std::vector<int32_t> stops, ws_ids;
  std::optional<int32_t> think_end;
  ChatFamily family;

  Runner(const Model& m, const Tokenizer& t) : model(m), tok(t), family(chat_family_for_model_type(m.config.model_type)) {
    mask = tok.padding_mask(m.config.vocab_size);
    stops = stop_token_ids(m.dir / "generation_config.json", tok);
    ws_ids = whitespace_ids(tok);
    think_end = tok.token_id("</think>");
  }

  struct Encoded {
    std::vector<int32_t> ids;
    bool opened_think = false;
  };
  Encoded encode(const HeldoutQuestion& q) const {
    Encoded e;
    e.ids = tok.encode(render_single_turn(family, q.system, q.prompt, q.thinking));
    e.opened_think = family == ChatFamily::qwen35 && q.thinking;
    if (e.ids.empty()) input_error("question '", q.id, "': the prompt encodes to no tokens");
    if (model.config.max_position_embeddings > 0 && static_cast<int64_t>(e.ids.size()) >= model.config.max_position_embeddings)
      input_error("question '", q.id, "': ", e.ids.size(), " prompt tokens reach the model's maximum context ",
                  model.config.max_position_embeddings);
    return e;
  }

  // Greedy answers to `qs` with `drafts` MTP drafts per step.
  AccuracyResult answer_all(Engine& eng, const RunConfig& rc, const std::vector<HeldoutQuestion>& qs, int drafts,
                            int max_new_tokens, std::vector<metrics::VerifyStep>* steps, std::FILE* progress,
                            const std::string& label) const {
    AccuracyResult acc;
    GenerateOptions go;
    go.max_new_tokens = max_new_tokens;
    go.stop_ids = stops;
    go.vocab_mask = &mask;
    RunConfig r = rc;
    r.mtp = drafts;
    go.mtp = mtp_options(r, model.config);
    check_mtp_supported(eng, go.mtp);
    // The serving mechanisms (engine/serving.h): one prefix cache for the pass, as one server's.
    go.serving = serving_options(r, model.config);
    std::optional<PrefixCache> cache;
    if (go.serving.prefix_block > 0) cache.emplace(go.serving.prefix_block);
    go.prefix_cache = cache ? &*cache : nullptr;
    const auto t0 = clock_type::now();
    for (size_t i = 0; i < qs.size(); ++i) {
      const HeldoutQuestion& q = qs[i];
      Encoded e = encode(q);
      go.first_case = static_cast<uint32_t>(i);
      GenerateResult g = generate(eng, {e.ids}, go).at(0);
      QuestionResult row;
      row.id = q.id;
      row.kind = q.kind;
      row.ids = g.tokens;
      row.tokens = static_cast<int64_t>(g.tokens.size());
      row.stop_reason = stop_reason_name(g.reason);
      row.answer = answer_of(tok.decode(g.tokens), e.opened_think);
      row.correct = answer_matches(row.answer, q.expect);
      if (steps) steps->insert(steps->end(), g.verify_steps.begin(), g.verify_steps.end());
      ++acc.n;
      acc.correct += row.correct;
      auto& k = acc.by_kind[q.kind];
      k.first += row.correct;
      ++k.second;
      acc.rows.push_back(std::move(row));
      if (progress && ((i + 1) % 25 == 0 || i + 1 == qs.size()))
        std::fprintf(progress, "eval: %s: %zu/%zu questions, %lld right (%.0f s)\n", label.c_str(), i + 1, qs.size(),
                     static_cast<long long>(acc.correct), since(t0));
    }
    return acc;
  }

  metrics::Degeneration degen(const std::vector<int32_t>& x, const GoldenCase& gc, bool nonfinite) const {
    metrics::ContentOptions content;
    if (gc.opened_think) content.think_end = think_end;
    content.stop_ids = gc.ignore_stop ? std::vector<int32_t>{} : stops;
    content.ignore_ids = ws_ids;
    return metrics::degeneration(x, {}, nonfinite, content);
  }
};

std::vector<size_t> selected_cases(const GoldenRecord& rec, const std::vector<std::string>& ids) {
  std::vector<size_t> out;
  for (size_t i = 0; i < rec.cases().size(); ++i)
    if (ids.empty() || std::find(ids.begin(), ids.end(), rec.cases()[i].id) != ids.end()) out.push_back(i);
  for (const std::string& id : ids)
    if (std::none_of(rec.cases().begin(), rec.cases().end(), [&](const GoldenCase& c) { return c.id == id; }))
      input_error("--case '", id, "': the record ", rec.dir().string(), " has no such case");
  return out;
}

void check_record_model(const GoldenRecord& rec, const Model& model) {
  if (rec.model_fingerprint() != model.fingerprint)
    input_error("the golden record ", rec.dir().string(), " was made for model fingerprint ",
                rec.model_fingerprint().substr(0, 16), "..., this model is ", model.fingerprint.substr(0, 16),
                "...; eval compares a model with its own record");
}

}  // namespace

EvalFigures evaluate_model(const Model& model, const Tokenizer& tok, const std::vector<HeldoutQuestion>& questions,
                           const GoldenRecord* rec, const EvalOptions& opt, const BackendFactory& factory,
                           std::FILE* progress) {
  const auto t0 = clock_type::now();
  if (opt.config.sampling.temperature != 0 || !sampling_str(opt.config.sampling).empty())
    input_error("eval: --config sets sampling (", sampling_str(opt.config.sampling),
                "); the questions are answered greedily and the long cases keep their own sampling");
  if (opt.config.mtp != 0)
    input_error("eval: --config sets mtp=", opt.config.mtp, "; eval measures MTP itself at 1..--mtp-max drafts");
  validate_run_config(opt.config, model.config);
  if (rec) check_record_model(*rec, model);
  Runner run(model, tok);
  std::unique_ptr<Backend> be = factory(opt.config, model.config);
  Engine eng(model.config, model.weights, *be, engine_options(opt.config));
  EvalFigures f;
  f.config = opt.config.str();

  // 1. accuracy, greedy, no MTP
  f.accuracy = run.answer_all(eng, opt.config, questions, 0, opt.max_new_tokens, nullptr, progress, f.config);

  // 2. MTP at 1..k drafts (greedy; the same questions)
  const bool has_mtp = eng.has_mtp();
  for (int k = 1; has_mtp && k <= opt.mtp_max; ++k) {
    std::vector<metrics::VerifyStep> steps;
    AccuracyResult a = run.answer_all(eng, opt.config, questions, k, opt.max_new_tokens, &steps, progress,
                                      cat(f.config, ", mtp=", k));
    MtpFigure m;
    m.drafts = k;
    m.spec = metrics::spec_decode(steps);
    for (size_t i = 0; i < a.rows.size(); ++i) m.differ += a.rows[i].ids != f.accuracy.rows[i].ids;
    f.mtp.push_back(m);
  }

  // 3. long cases of the record, each with its own sampling
  if (rec) {
    LongResult lr;
    lr.golden = rec->dir().string();
    lr.max_seq_rep_4 = opt.max_seq_rep_4;
    const auto t1 = clock_type::now();
    std::optional<PrefixCache> cache;
    if (opt.config.prefix_cache > 0) cache.emplace(opt.config.prefix_cache);
    for (size_t idx : selected_cases(*rec, opt.cases)) {
      const GoldenCase& meta = rec->cases()[idx];
      GoldenCase gc = rec->load_case(idx, false);
      gc.opened_think = meta.opened_think;
      gc.ignore_stop = meta.ignore_stop;
      const SamplingParams sp = meta.sampling_params;
      GenerateOptions go;
      go.max_new_tokens = meta.max_new_tokens;
      if (!meta.ignore_stop) go.stop_ids = run.stops;
      go.sampling = sp;
      go.vocab_mask = &run.mask;
      go.first_case = static_cast<uint32_t>(meta.index);
      go.serving = serving_options(opt.config, model.config);
      go.prefix_cache = cache ? &*cache : nullptr;
      bool nonfinite = false;
      Trace watch;
      watch.logits_only = true;
      watch.observer = [&](const TraceEvent& ev, Tensor& t, Backend& b) {
        if (ev.step != Step::logits || ev.mtp || nonfinite) return;
        std::vector<float> v = b.to_host_f32(t);
        const int64_t V = model.config.vocab_size;
        for (size_t x = 0; x < v.size() && !nonfinite; ++x)
          if (!std::isfinite(v[x]) && !(v[x] < 0 && run.mask[x % static_cast<size_t>(V)])) nonfinite = true;
      };
      std::vector<int32_t> out;
      if (meta.max_new_tokens > 0) out = generate(eng, {gc.prompt}, go, &watch).at(0).tokens;
      LongCaseResult row;
      row.id = meta.id;
      row.sampling = meta.sampling;
      row.degen = run.degen(out, meta, nonfinite);
      row.golden_degen = run.degen(gc.continuation, meta, meta.nonfinite_logits);
      row.ok = !row.degen.loop_onset && row.degen.seq_rep[3] <= opt.max_seq_rep_4 && !row.degen.degenerate;
      if (meta.sampling.empty()) {
        ++lr.greedy;
        lr.greedy_degenerate += row.degen.degenerate;
        lr.greedy_golden_degenerate += row.golden_degen.degenerate;
      } else {
        ++lr.n;
        lr.ok += row.ok;
        lr.degenerate += row.degen.degenerate;
        lr.golden_degenerate += row.golden_degen.degenerate;
      }
      lr.rows.push_back(std::move(row));
      if (progress)
        std::fprintf(progress, "eval: %s: long case %s: seq_rep_4 %.3f, loop onset %s (%.0f s)\n", f.config.c_str(),
                     meta.id.c_str(), lr.rows.back().degen.seq_rep[3],
                     lr.rows.back().degen.loop_onset ? std::to_string(*lr.rows.back().degen.loop_onset).c_str() : "none",
                     since(t1));
    }
    f.long_cases = std::move(lr);
  }
  f.seconds = since(t0);
  return f;
}

// ---- fault table ----

namespace {

struct Scope {
  std::string label;  // "all GDN layers", "layer 5"
  LayerScope layers;  // the fault's scope (unscoped: every layer of its kind)
};

LayerScope linear_layers() {
  LayerScope s;
  s.all = false;
  s.linear = true;
  return s;
}

LayerScope full_layers() {
  LayerScope s;
  s.all = false;
  s.full = true;
  return s;
}

std::vector<Scope> scopes_for(const FaultInfo& fi, const ModelConfig& cfg) {
  std::vector<int> lin, full;
  for (int i = 0; i < cfg.num_layers; ++i) (cfg.layer_types[static_cast<size_t>(i)] == LayerKind::full ? full : lin).push_back(i);
  switch (fi.site) {
    case FaultSite::linear_layer: {
      if (lin.empty()) return {};
      // one layer: the first GDN layer after the first attention layer (GDN layers before and after it)
      int one = lin[lin.size() / 2];
      if (!full.empty())
        for (int l : lin)
          if (l > full.front()) {
            one = l;
            break;
          }
      return {{"all GDN layers", linear_layers()}, {cat("layer ", one), LayerScope::of_layers({one})}};
    }
    case FaultSite::full_layer:
      if (full.empty()) return {};
      return {{"all attention layers", full_layers()}, {cat("layer ", full.back()), LayerScope::of_layers({full.back()})}};
    case FaultSite::any_layer:
      return {{"all layers", {}}, {cat("layer ", cfg.num_layers / 2), LayerScope::of_layers({cfg.num_layers / 2})}};
    case FaultSite::moe_layer:
      return {};
    case FaultSite::model:
      return {{"model", {}}};
  }
  return {};
}

}  // namespace

std::vector<FaultRow> fault_table(const Model& model, const Tokenizer& tok, const HeldoutSet& set,
                                  const GoldenRecord& rec, const FaultTableOptions& opt, const BackendFactory& factory,
                                  std::FILE* progress) {
  check_record_model(rec, model);
  for (const std::string& f : opt.only)
    if (!find_fault(f)) input_error("--fault '", f, "' is not in the catalogue (degenbisect faults lists it)");
  const std::vector<size_t> cases = selected_cases(rec, opt.cases);
  const std::vector<HeldoutQuestion> qs = select_questions(set, opt.questions);
  Runner run(model, tok);
  std::vector<FaultRow> rows;
  const auto t0 = clock_type::now();
  for (const FaultInfo& fi : fault_catalogue()) {
    if (!opt.only.empty() && std::find(opt.only.begin(), opt.only.end(), fi.name) == opt.only.end()) continue;
    std::vector<Scope> scopes = scopes_for(fi, model.config);
    if (scopes.empty()) {
      FaultRow r;
      r.fault = fi.name;
      r.scope = "-";
      r.applicable = false;
      r.reason = cat("the model has no ", fault_site_name(fi.site));
      r.verdict = "n/a";
      rows.push_back(r);
      continue;
    }
    for (const Scope& sc : scopes) {
      FaultRow r;
      r.fault = fi.name;
      r.scope = sc.label;
      RunConfig rc = opt.base;
      try {
        if (fi.needs)  // the serving toggles its mechanism needs (mtp=2 among them)
          rc = with_toggles_of(rc, fault_needs(fi), [](const Toggle& t) { return t.kind != ToggleKind::fault; });
        else if (fi.needs_mtp)
          rc.mtp = 2;
        else if (fi.needs_tp)
          rc = rc.with_tp(2);
        rc.faults.push_back({fi.name, sc.layers});
        validate_run_config(rc, model.config);
      } catch (const Error& e) {
        r.applicable = false;
        r.reason = e.what();
        r.verdict = "n/a";
        rows.push_back(r);
        continue;
      }
      r.config = rc.str();
      // compare on the long cases: verdict, first layer, and the free-running generations
      CompareOptions co;
      co.config = rc;
      for (size_t i : cases) co.cases.push_back(rec.cases()[i].id);
      try {
        CompareResult cr = compare_golden(rec, model, &tok, co, factory, nullptr);
        r.verdict = metrics::verdict_name(cr.verdict);
        r.exit_code = cr.exit_code;
        std::set<std::string> fired;
        double rep = 0;
        for (const CaseResult& c : cr.cases) {
          if (c.first_break && (!r.first_layer || c.first_break->second < *r.first_layer)) r.first_layer = c.first_break->second;
          const GenerationResult& g = c.gen;
          ++r.cases;
          r.degenerate += g.degen.degenerate;
          r.golden_degenerate += g.golden_degen.degenerate;
          r.empty += g.degen.empty_content.value_or(false);
          r.looping += g.degen.loop_onset.has_value();
          rep += g.degen.seq_rep[3];
          if (g.degen.loop_onset && (!r.first_loop_onset || *g.degen.loop_onset < *r.first_loop_onset))
            r.first_loop_onset = g.degen.loop_onset;
          for (const auto& f : g.degen.rules_fired) fired.insert(f);
          if (r.example.empty() && (g.degen.degenerate || &c == &cr.cases.back())) {
            std::string text = tok.decode(std::vector<int32_t>(g.tokens.begin(), g.tokens.begin() + std::min<size_t>(g.tokens.size(), 48)));
            r.example = cat(c.id, ": ", text);
          }
        }
        r.mean_seq_rep_4 = r.cases ? rep / double(r.cases) : 0;
        for (const auto& f : fired) r.rules += (r.rules.empty() ? "" : ",") + f;
        // the questions under the fault
        std::unique_ptr<Backend> be = factory(rc, model.config);
        Engine eng(model.config, model.weights, *be, engine_options(rc));
        AccuracyResult a = run.answer_all(eng, rc, qs, rc.mtp, opt.max_new_tokens, nullptr, nullptr, r.config);
        r.questions = a.n;
        r.correct = a.correct;
      } catch (const UntestableError& e) {
        r.verdict = "untestable";
        r.exit_code = static_cast<int>(ExitCode::untestable);
        r.reason = e.what();
      }
      if (progress)
        std::fprintf(progress, "eval: fault table: %s (%s): %s, %lld/%lld degenerate, %lld/%lld right (%.0f s)\n",
                     fi.name, sc.label.c_str(), r.verdict.c_str(), static_cast<long long>(r.degenerate),
                     static_cast<long long>(r.cases), static_cast<long long>(r.correct),
                     static_cast<long long>(r.questions), since(t0));
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

// ---- text ----

namespace {

std::string pct(double v) { return cat(std::lround(v * 1000) / 10.0, " %"); }

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

std::string format_eval(const EvalFigures& f, const EvalFigures* ref) {
  std::string s;
  auto delta = [&](double a, double b) { return cat(" (", a - b >= 0 ? "+" : "", fixed(100 * (a - b), 1), " points)"); };
  s += cat("configuration: ", f.config, "\n");
  s += cat("task accuracy (greedy): ", f.accuracy.correct, "/", f.accuracy.n, " = ", fixed(100 * f.accuracy.accuracy(), 1), " %");
  if (ref) s += delta(f.accuracy.accuracy(), ref->accuracy.accuracy());
  s += "\n";
  for (const auto& [k, v] : f.accuracy.by_kind) s += cat("  ", k, ": ", v.first, "/", v.second, "\n");
  if (f.long_cases) {
    const LongResult& l = *f.long_cases;
    s += cat("long free-running cases, sampled (", l.golden, "): ", l.ok, "/", l.n, " = ", fixed(100 * l.ok_fraction(), 1),
             " % with no loop onset and seq_rep_4 <= ", l.max_seq_rep_4);
    if (ref && ref->long_cases) s += delta(l.ok_fraction(), ref->long_cases->ok_fraction());
    s += cat("; degenerate ", l.degenerate, " (golden: ", l.golden_degenerate, ")\n");
    if (l.greedy)
      s += cat("long greedy cases: ", l.greedy_degenerate, "/", l.greedy, " degenerate (golden: ", l.greedy_golden_degenerate,
               "; where both are, compare says model-intrinsic)\n");
    for (const auto& r : l.rows)
      s += cat("  ", r.id, r.sampling.empty() ? " (greedy)" : "", ": T ", r.degen.T, ", seq_rep_4 ",
               fixed(r.degen.seq_rep[3], 3), ", loop onset ", r.degen.loop_onset ? std::to_string(*r.degen.loop_onset) : "none",
               r.degen.degenerate ? cat(", DEGENERATE (", r.degen.reason, ")") : "",
               r.golden_degen.degenerate ? ", golden degenerate too" : "",
               r.ok || r.sampling.empty() ? "" : "  <- not ok", "\n");
  }
  for (const auto& m : f.mtp) {
    s += cat("MTP, ", m.drafts, " draft", m.drafts > 1 ? "s" : "", " per step (greedy): acceptance ",
             m.spec.accept_rate ? fixed(*m.spec.accept_rate, 3) : "-", ", tokens per verify step ",
             m.spec.accept_len ? fixed(*m.spec.accept_len, 2) : "-");
    if (ref) {
      for (const auto& rm : ref->mtp)
        if (rm.drafts == m.drafts && rm.spec.accept_rate && m.spec.accept_rate)
          s += delta(*m.spec.accept_rate, *rm.spec.accept_rate);
    }
    s += cat(m.differ ? cat("; ", m.differ, " outputs differ from mtp=0") : "", "\n");
  }
  s += cat("time: ", fixed(f.seconds, 1), " s\n");
  return s;
}

std::string format_fault_table(const std::vector<FaultRow>& rows, double ref_acc) {
  std::string s = cat("fault table (reference accuracy ", pct(ref_acc), " on the same questions)\n");
  s += "fault                    scope                 degenerate  loops  empty  seq_rep_4  golden-degen  accuracy   compare\n";
  for (const FaultRow& r : rows) {
    char line[400];
    if (!r.applicable) {
      std::snprintf(line, sizeof line, "%-24s %-21s not applicable: %s\n", r.fault.c_str(), r.scope.c_str(), r.reason.c_str());
    } else if (r.verdict == "untestable") {
      std::snprintf(line, sizeof line, "%-24s %-21s untestable: %s\n", r.fault.c_str(), r.scope.c_str(), r.reason.c_str());
    } else {
      const double acc = r.questions ? double(r.correct) / double(r.questions) : 0;
      std::snprintf(line, sizeof line, "%-24s %-21s %4lld/%-5lld  %5lld  %5lld  %9.3f  %12lld  %6.1f %%   %s%s\n",
                    r.fault.c_str(), r.scope.c_str(), static_cast<long long>(r.degenerate),
                    static_cast<long long>(r.cases), static_cast<long long>(r.looping), static_cast<long long>(r.empty),
                    r.mean_seq_rep_4, static_cast<long long>(r.golden_degenerate), 100 * acc, r.verdict.c_str(),
                    r.first_layer ? cat(" (layer ", *r.first_layer, ")").c_str() : "");
    }
    s += line;
  }
  return s;
}

}  // namespace degen
