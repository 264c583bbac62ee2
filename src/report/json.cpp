// The report document (schema in json.h): compare, sweep and bisect results reduced to what the
// writers show, plus the summary paragraphs.
#include "report/json.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "build_config.h"
#include "judge/result.h"
#include "judge/metrics.h"
#include "diag/sweep.h"
#include "model/tokenizer.h"
#include "report/common.h"
#include "report/compare_input.h"
#include "report/escape.h"
#include "util/error.h"

namespace degen::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* const kModes[2] = {"prefill", "decode"};

json num_or_null(std::optional<double> v) { return v ? metrics::json_number(*v) : json(nullptr); }
json int_or_null(std::optional<int64_t> v) { return v ? json(*v) : json(nullptr); }
json str_or_null(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key] : json(nullptr);
}
json array_or_empty(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_array() ? j[key] : json::array();
}
bool opt_bool(const json& j, const char* key) { return j.is_object() && j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); }

// Tokenizers by folder, loaded once; nullptr when the folder has none (or it does not load).
class Tokenizers {
 public:
  const Tokenizer* get(const fs::path& model_dir) {
    const std::string key = model_dir.string();
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second.get();
    std::unique_ptr<Tokenizer> t;
    const fs::path file = model_dir / "tokenizer.json";
    std::error_code ec;
    if (!key.empty() && fs::is_regular_file(file, ec)) {
      try {
        t = Tokenizer::load(file);
      } catch (const std::exception&) {
        t.reset();  // the report shows token ids instead
      }
    }
    return (cache_[key] = std::move(t)).get();
  }

 private:
  std::map<std::string, std::unique_ptr<Tokenizer>> cache_;
};

std::string decode_tokens(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string bytes;
  for (int32_t id : ids) {
    try {
      bytes += tok.token_bytes(id);
    } catch (const std::exception&) {
      bytes += "\xEF\xBF\xBD";  // an id the tokenizer does not define
    }
  }
  return bytes;
}

// ---- compare ----

// The worst of one TensorError field over the cases; nonfinite is reported on the side.
struct Worst {
  std::optional<double> v;
  void add(const std::optional<metrics::TensorError>& err) {
    if (!err) return;
    const double x = err->rel_l2;
    if (!v || std::isnan(x) || x > *v) v = x;
  }
};

// The earliest layer over the cases whose isolated error breaks its rule, and the cases where it does.
json first_break_doc(const std::vector<CaseResult>& cases) {
  std::optional<int> fb_layer;
  std::string fb_mode;
  json fb_cases = json::array();
  for (const CaseResult& c : cases) {
    if (!c.first_break) continue;
    const int l = c.first_break->second;
    if (l < 0) continue;
    if (!fb_layer || l < *fb_layer) {
      fb_layer = l;
      fb_mode = forced_mode_name(static_cast<ForcedMode>(c.first_break->first));
      fb_cases = json::array();
    }
    if (l == *fb_layer) fb_cases.push_back(c.id);
  }
  return fb_layer ? json{{"layer", *fb_layer}, {"mode", fb_mode}, {"cases", fb_cases}} : json(nullptr);
}

// Layer l, worst over the cases that have it.
json layer_doc(const std::vector<CaseResult>& cases, size_t l) {
  Worst drift[2], iso[2];
  std::optional<double> floor[2], limit[2], ratio;
  bool pass = true, nonfinite = false;
  std::string kind = "?";
  int layer = static_cast<int>(l);
  json first_in = json::array();
  for (const CaseResult& c : cases) {
    if (l >= c.layers.size()) continue;
    const LayerRow& row = c.layers[l];
    layer = row.layer;
    kind = std::string(1, row.kind);
    for (int m = 0; m < 2; ++m) {
      drift[m].add(row.drift[m]);
      iso[m].add(row.iso[m]);
      for (const auto* e : {&row.drift[m], &row.iso[m]})
        if (*e && ((*e)->nonfinite > 0 || (*e)->ref_nonfinite_mismatch > 0)) nonfinite = true;
      if (auto f = row.floor[m]) floor[m] = floor[m] ? std::min(*floor[m], *f) : *f;
      if (auto f = row.limit[m]) limit[m] = limit[m] ? std::min(*limit[m], *f) : *f;
      if (auto f = row.floor_ratio[m]) ratio = ratio ? std::max(*ratio, *f) : *f;
      if (!row.pass[m]) pass = false;
    }
    if (c.first_break && c.first_break->second == layer) first_in.push_back(c.id);
  }
  return {{"layer", layer},
          {"kind", kind},
          {"drift_prefill", num_or_null(drift[0].v)},
          {"drift_decode", num_or_null(drift[1].v)},
          {"iso_prefill", num_or_null(iso[0].v)},
          {"iso_decode", num_or_null(iso[1].v)},
          {"floor_prefill", num_or_null(floor[0])},
          {"floor_decode", num_or_null(floor[1])},
          {"limit_prefill", num_or_null(limit[0])},
          {"limit_decode", num_or_null(limit[1])},
          {"floor_ratio", num_or_null(ratio)},
          {"pass", pass},
          {"nonfinite", nonfinite},
          {"first_break_cases", first_in}};
}

json compare_layers(const std::vector<CaseResult>& cases) {
  size_t L = 0;
  for (const CaseResult& c : cases) L = std::max(L, c.layers.size());
  json out = json::array();
  for (size_t l = 0; l < L; ++l) out.push_back(layer_doc(cases, l));
  return out;
}

json str_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

// compare --server's decode-path figures: the per-step KLD (null where a step was not scored), its
// limit and the first step over it; null when the result has none.
json decode_path_doc(const std::optional<DecodePathResult>& dp) {
  if (!dp) return nullptr;
  json kld = json::array();
  for (double v : dp->kld) kld.push_back(std::isnan(v) ? json(nullptr) : metrics::json_number(v));
  return {{"steps", dp->steps},
          {"stated", dp->stated},
          {"scored", dp->scored},
          {"kld", kld},
          {"limit", metrics::json_number(dp->limit)},
          {"peak_floor", metrics::json_number(dp->peak_floor)},
          {"mean_kld", metrics::json_number(dp->mean_kld)},
          {"max_kld", metrics::json_number(dp->max_kld)},
          {"first_bad_step", int_or_null(dp->first_bad)},
          {"prefill_kld", num_or_null(dp->prefill_kld)},
          {"self_kld", num_or_null(dp->self_kld)},
          {"resolved", num_or_null(dp->resolved)},
          {"floor_source", dp->floor_source},
          {"note", str_or_null(dp->note)},
          {"pass", dp->pass}};
}

// compare --server's serving probes, one object each.
json probes_doc(const std::vector<ProbeResult>& probes) {
  json out = json::array();
  for (const ProbeResult& p : probes)
    out.push_back({{"probe", p.name},
                   {"verdict", p.verdict},
                   {"reason", p.reason},
                   {"cached_tokens", int_or_null(p.cached)},
                   {"slots", int_or_null(p.slots)},
                   {"first_difference", int_or_null(p.first_difference)},
                   {"max_kld", num_or_null(p.max_kld)},
                   {"limit", num_or_null(p.limit)}});
  return out;
}

json generation_doc(const GenerationResult& g) {
  const metrics::Degeneration& d = g.degen;
  const metrics::Degeneration& gd = g.golden_degen;
  return {{"tokens", g.tokens},
          {"golden_tokens", g.golden_tokens},
          {"stop_reason", g.stop_reason},
          {"first_divergence", int_or_null(g.first_divergence)},
          {"golden_margin", num_or_null(g.golden_margin)},
          {"loop_onset", int_or_null(d.loop_onset)},
          {"tail_period", int_or_null(d.tail_period)},
          {"tail_repeats", int_or_null(d.tail_repeats)},
          {"seq_rep_4", metrics::json_number(d.seq_rep[3])},
          {"max_run", d.max_run},
          {"degenerate", d.degenerate},
          {"rule", d.rule ? json(*d.rule) : json(nullptr)},
          {"reason", d.reason},
          {"golden_degenerate", gd.degenerate},
          {"golden_rule", gd.rule ? json(*gd.rule) : json(nullptr)},
          {"golden_loop_onset", int_or_null(gd.loop_onset)},
          {"golden_tail_period", int_or_null(gd.tail_period)},
          {"cause", g.model_changed && g.verdict == metrics::Verdict::bad ? "changed-model" : metrics::degeneration_cause(g.verdict)},
          {"verdict", metrics::verdict_name(g.verdict)},
          {"agreement", str_or_null(g.agreement)},
          {"server_speculation", str_or_null(g.spec_stated)},
          {"decode_path", decode_path_doc(g.decode_path)},
          {"probes", probes_doc(g.probes)}};
}

// The generated texts: from the result itself when it carries them, else decoded with the model's
// tokenizer; null with neither.
json text_doc(const GenerationResult& g, const std::optional<CaseText>& given, const Tokenizer* tok, const std::string& tok_source,
              const ReportOptions& opt) {
  std::string golden, tested, source;
  if (given) {
    tested = given->tested;
    golden = given->golden;
    source = "compare result";
  } else if (tok) {
    tested = decode_tokens(*tok, g.tokens);
    golden = decode_tokens(*tok, g.golden_tokens);
    source = tok_source;
  } else {
    return nullptr;
  }
  tested = utf8_truncate(sanitize_utf8(tested), opt.max_text_bytes);
  golden = utf8_truncate(sanitize_utf8(golden), opt.max_text_bytes);
  json text = {{"golden", golden}, {"tested", tested}, {"common_prefix_bytes", utf8_common_prefix(golden, tested)}, {"source", source}};
  // Where each text's loop starts, in bytes of the shown text (the tokens before the loop onset,
  // decoded the same way); null without a loop, a tokenizer, or when the loop starts past the cut.
  auto loop_bytes = [&](const std::vector<int32_t>& ids, std::optional<int64_t> onset, const std::string& shown) -> json {
    if (!onset || !tok || *onset < 0 || static_cast<size_t>(*onset) > ids.size()) return nullptr;
    const std::vector<int32_t> head(ids.begin(), ids.begin() + *onset);
    const size_t at = sanitize_utf8(decode_tokens(*tok, head)).size();
    return at < shown.size() ? json(at) : json(nullptr);
  };
  text["tested_loop_bytes"] = loop_bytes(g.tokens, g.degen.loop_onset, tested);
  text["tested_first_bad_bytes"] = g.decode_path ? loop_bytes(g.tokens, g.decode_path->first_bad, tested) : json(nullptr);
  text["golden_loop_bytes"] = loop_bytes(g.golden_tokens, g.golden_degen.loop_onset, golden);
  return text;
}

json compare_case(const CaseResult& c, const std::optional<CaseText>& given, const Tokenizer* tok, const std::string& tok_source,
                  const ReportOptions& opt) {
  json o;
  o["id"] = c.id;
  o["verdict"] = metrics::verdict_name(c.verdict);
  o["reasons"] = c.reasons;
  o["prompt_tokens"] = c.prompt_tokens;
  o["positions"] = c.positions;
  o["seconds"] = metrics::json_number(c.seconds);
  const std::optional<LogitsResult>& lp = c.logits[0];
  const std::optional<LogitsResult>& ld = c.logits[1];
  o["kld_mean_prefill"] = lp ? metrics::json_number(lp->mean_kld) : json(nullptr);
  o["kld_mean_decode"] = ld ? metrics::json_number(ld->mean_kld) : json(nullptr);
  o["kld_limit"] = lp ? metrics::json_number(lp->limit) : json(nullptr);
  o["same_top_p"] = lp && lp->summary.n > 0 ? metrics::json_number(lp->summary.same_top_p.value) : json(nullptr);
  o["mtp_kld_mean"] = c.mtp ? metrics::json_number(c.mtp->mean_kld) : json(nullptr);
  o["first_break"] = c.first_break ? json{{"layer", c.first_break->second},
                                          {"mode", forced_mode_name(static_cast<ForcedMode>(c.first_break->first))}}
                                   : json(nullptr);
  json kld = json::array();
  if (const std::optional<LogitsResult>& src = lp ? lp : ld)
    for (double v : src->kld) kld.push_back(metrics::json_number(v));
  o["kld"] = kld;
  json gen = generation_doc(c.gen);
  gen["text"] = text_doc(c.gen, given, tok, tok_source, opt);
  o["generation"] = gen;
  return o;
}

// compare --json's form for an untestable configuration: the run's names, no cases.
json untestable_section(const UntestableCompare& u, const std::optional<std::string>& reason) {
  auto s = [](const std::optional<std::string>& v) { return v ? json(*v) : json(nullptr); };
  json o;
  for (const char* k : {"backend", "model_fingerprint", "record_fingerprint", "noise_floors", "noise_floors_reason"}) o[k] = nullptr;
  o["config"] = s(u.config);
  o["suite"] = s(u.suite);
  o["golden"] = s(u.golden);
  o["model"] = s(u.model);
  o["model_mismatch"] = false;
  o["weights_differ"] = false;
  o["verdict"] = "untestable";
  o["exit_code"] = int_or_null(u.exit_code);
  o["fail_on_model_degeneration"] = u.fail_on_model_degeneration.value_or(false);
  o["seconds"] = num_or_null(u.seconds);
  o["reason"] = s(reason);
  o["layers"] = json::array();
  o["first_break"] = nullptr;
  o["cases"] = json::array();
  return o;
}

json compare_section(const InputDoc& doc, Tokenizers& toks, const ReportOptions& opt) {
  CompareInput in;
  try {
    in = read_compare_input(doc.doc);
  } catch (const InputError& e) {
    input_error("report: ", doc.source, ": ", e.what());
  }
  if (!in.result) return untestable_section(in.untestable, in.reason);
  const CompareResult& r = *in.result;
  json o;
  o["config"] = r.config;
  o["backend"] = r.backend;
  o["suite"] = r.suite;
  o["golden"] = r.golden_dir;
  o["model"] = r.model_dir;
  o["model_fingerprint"] = r.model_fingerprint;
  o["record_fingerprint"] = r.record_fingerprint;
  o["noise_floors"] = r.floors ? "measured" : "absent";
  o["noise_floors_reason"] = r.floors ? json(nullptr) : json(r.floors_reason);
  o["model_mismatch"] = r.model_mismatch;
  o["weights_differ"] = r.weights_differ;
  o["verdict"] = metrics::verdict_name(r.verdict);
  o["exit_code"] = r.exit_code;
  o["fail_on_model_degeneration"] = r.fail_on_model_degeneration;
  o["seconds"] = metrics::json_number(r.seconds);
  o["reason"] = r.verdict == metrics::Verdict::untestable && in.reason ? json(*in.reason) : json(nullptr);
  o["layers"] = compare_layers(r.cases);
  o["first_break"] = first_break_doc(r.cases);
  const fs::path model_dir = opt.model_dir ? *opt.model_dir : fs::path(r.model_dir);
  const Tokenizer* tok = toks.get(model_dir);
  json cs = json::array();
  for (size_t i = 0; i < r.cases.size(); ++i)
    cs.push_back(compare_case(r.cases[i], in.texts[i], tok, (model_dir / "tokenizer.json").string(), opt));
  o["cases"] = cs;
  return o;
}

// ---- sweep ----

json sweep_section(const SweepInput& s) {
  json o;
  o["name"] = opt_str(s.meta, "name", "sweep");
  o["base"] = opt_str(s.meta, "base");
  o["axes"] = array_or_empty(s.meta, "axes");
  o["cells_extra"] = array_or_empty(s.meta, "cells_extra");
  o["cells"] = int_or_null(opt_int(s.meta, "cells"));
  o["warnings"] = s.warnings;

  json rows = json::array();
  std::map<std::string, int> counts = {{"good", 0}, {"bad", 0}, {"untestable", 0}, {"model-intrinsic", 0}, {"error", 0}};
  std::set<std::string> have;
  for (const json& r : s.rows) {
    const CellSummary cs = cell_summary_from_json(r);
    json cases = json::array();
    if (cs.detail.is_object() && cs.detail.contains("cases"))
      for (const json& k : cs.detail["cases"])
        cases.push_back({{"id", opt_str(k, "id", "?")},
                         {"verdict", opt_str(k, "verdict", "?")},
                         {"reasons", array_or_empty(k, "reasons")},
                         {"first_break", int_or_null(opt_int(k, "first_break"))}});
    rows.push_back({{"index", int_or_null(opt_int(r, "index"))},
                    {"cell", opt_str(r, "cell")},
                    {"values", array_or_empty(r, "values")},
                    {"verdict", cs.verdict},
                    {"reason", cs.reason},
                    {"worst_layer", cs.worst_layer >= 0 ? json(cs.worst_layer) : json(nullptr)},
                    {"kld_mean", num_or_null(cs.kld_mean)},
                    {"seq_rep_4", num_or_null(cs.seq_rep_4)},
                    {"loop_onset", int_or_null(cs.loop_onset)},
                    {"seconds", num_or_null(opt_num(r, "seconds"))},
                    {"cases", cases}});
    ++counts[cs.verdict];
    have.insert(opt_str(r, "cell"));
  }
  o["rows"] = rows;
  o["results"] = rows.size();
  o["counts"] = counts;

  // Cells of the matrix without a result (a shard not given, or a sweep still running).
  json missing = json::array();
  if (s.meta.contains("axes") || s.meta.contains("cells_extra")) {
    try {
      SweepMatrix m;
      m.base = opt_str(s.meta, "base");
      for (const json& a : array_or_empty(s.meta, "axes"))
        m.axes.push_back({opt_str(a, "name"), a.value("values", std::vector<std::string>{})});
      m.cells_extra = s.meta.value("cells_extra", std::vector<std::string>{});
      for (const auto& c : m.cells())
        if (!have.count(c.name)) missing.push_back(c.name);
    } catch (const std::exception&) {
      // A matrix this build cannot parse (written by another version): the count below still tells.
    }
  }
  if (missing.empty() && o["cells"].is_number() && o["cells"].get<size_t>() > rows.size())
    for (size_t i = rows.size(); i < o["cells"].get<size_t>(); ++i) missing.push_back(cat("(cell #", i, ")"));
  o["missing"] = missing;

  // Main effects, as sweep_main_effects() prints them: for each axis value, the bad cells with it
  // and without it.
  json effects = json::array();
  const json& axes = o["axes"];
  for (size_t a = 0; a < axes.size(); ++a) {
    for (const json& v : array_or_empty(axes[a], "values")) {
      int with = 0, bad_with = 0, without = 0, bad_without = 0;
      for (const json& r : rows) {
        const bool bad = r["verdict"] == "bad";
        const json& vals = r["values"];
        if (a < vals.size() && vals[a] == v) {
          ++with;
          bad_with += bad;
        } else {
          ++without;
          bad_without += bad;
        }
      }
      effects.push_back({{"axis", opt_str(axes[a], "name")}, {"value", v}, {"with", with}, {"bad_with", bad_with},
                         {"without", without}, {"bad_without", bad_without}});
    }
  }
  o["main_effects"] = effects;
  return o;
}

// ---- bisect ----

std::string bisect_verdict(const json& b) {
  const std::string status = opt_str(b, "status");
  if (status == "untestable") return "untestable";
  if (status == "bad-is-good") {
    const json& s = b.contains("bad_summary") ? b["bad_summary"] : json::object();
    return opt_str(s, "verdict") == "model-intrinsic" ? "model-intrinsic" : "good";
  }
  return "bad";
}

json bisect_section(const json& b) {
  json o;
  o["status"] = opt_str(b, "status", "?");
  o["verdict"] = bisect_verdict(b);
  o["paragraph"] = opt_str(b, "verdict");
  for (const char* k : {"bad", "good", "minimal_bad", "golden", "model"}) o[k] = str_or_null(b, k);
  o["model_fingerprint"] = str_or_null(b, "fingerprint");
  o["culprit_toggles"] = array_or_empty(b, "culprit_toggles");
  o["culprit_layers"] = array_or_empty(b, "culprit_layers");
  o["layer_specific"] = opt_bool(b, "layer_specific");
  o["patch"] = b.contains("patch") && b["patch"].is_object() ? b["patch"] : json(nullptr);
  o["named_ops"] = array_or_empty(b, "named_ops");
  o["evaluations"] = int_or_null(opt_int(b, "evaluations"));
  o["fresh_evaluations"] = int_or_null(opt_int(b, "fresh_evaluations"));
  json subop = json::array();
  for (const json& r : array_or_empty(b, "subop")) {
    json rows = json::array();
    for (const json& x : array_or_empty(r, "rows"))
      rows.push_back({{"step", opt_str(x, "step", "?")},
                      {"rel_l2", num_or_null(opt_num(x, "rel_l2"))},
                      {"floor", num_or_null(opt_num(x, "floor"))},
                      {"limit", num_or_null(opt_num(x, "limit"))},
                      {"pass", !x.contains("pass") || !x["pass"].is_boolean() || x["pass"].get<bool>()},
                      {"nonfinite", x.value("nonfinite", 0)}});
    subop.push_back({{"layer", int_or_null(opt_int(r, "layer"))},
                     {"kind", str_or_null(r, "kind")},
                     {"mode", str_or_null(r, "mode")},
                     {"case", str_or_null(r, "case")},
                     {"positions", int_or_null(opt_int(r, "positions"))},
                     {"first_break", str_or_null(r, "first_break")},
                     {"floor_config", str_or_null(r, "floor_config")},
                     {"rows", rows}});
  }
  o["subop"] = subop;
  return o;
}

// ---- summary ----

std::string count_words(const json& counts) {
  std::string s;
  for (const char* k : {"bad", "error", "model-intrinsic", "good", "untestable"}) {
    const int n = counts.value(k, 0);
    if (n == 0) continue;
    s += cat(s.empty() ? "" : ", ", n, " ", k);
  }
  return s.empty() ? "none" : s;
}

std::string sweep_paragraph(const json& s) {
  std::string p = cat("Sweep `", s["name"].get<std::string>(), "`: ", s["results"].get<size_t>());
  if (s["cells"].is_number()) p += cat(" of ", s["cells"].get<size_t>());
  p += cat(" cells: ", count_words(s["counts"]), ".");
  const int bad = s["counts"].value("bad", 0);
  if (bad > 0) {
    std::vector<std::string> all_bad, separates;
    for (const json& e : s["main_effects"]) {
      const std::string value = e["value"].get<std::string>();  // "flash", or a fragment "fault=x@2"
      const std::string tv = value.find('=') == std::string::npos ? cat(e["axis"].get<std::string>(), "=", value) : value;
      const int with = e["with"], bad_with = e["bad_with"], bad_without = e["bad_without"];
      if (with > 0 && bad_with == with && bad_without == 0) separates.push_back(tv);
      else if (with > 0 && bad_with == with) all_bad.push_back(tv);
    }
    if (!separates.empty())
      p += cat(" Every cell with `", separates.front(), "` is bad, and no cell without it is.");
    else if (!all_bad.empty()) {
      p += " Every cell with ";
      for (size_t i = 0; i < all_bad.size() && i < 3; ++i) p += cat(i ? (i + 1 == std::min<size_t>(all_bad.size(), 3) ? " or " : ", ") : "", "`", all_bad[i], "`");
      p += " is bad.";
    }
    std::vector<std::string> names;
    for (const json& r : s["rows"])
      if (r["verdict"] == "bad") names.push_back(r["cell"].get<std::string>());
    p += cat(" Bad: ");
    for (size_t i = 0; i < names.size() && i < 5; ++i) p += cat(i ? ", " : "", "`", names[i], "`");
    if (names.size() > 5) p += cat(" and ", names.size() - 5, " more");
    p += ".";
  }
  if (!s["missing"].empty()) p += cat(" ", s["missing"].size(), " cells have no result yet (a shard not given, or still running).");
  return p;
}

std::string compare_paragraph(const json& c) {
  const std::string config = c["config"].is_string() ? c["config"].get<std::string>() : "?";
  const std::string v = c["verdict"];
  std::string p = cat("Compare `", config, "`");
  if (c["suite"].is_string()) p += cat(" (suite `", c["suite"].get<std::string>(), "`)");
  if (v == "untestable") return p + cat(": untestable: ", c["reason"].is_string() ? c["reason"].get<std::string>() : "?", ".");
  const json& cases = c["cases"];
  size_t nbad = 0;
  for (const json& k : cases) nbad += k["verdict"] == "bad";
  if (v == "bad") {
    p += cat(" is bad against the golden record: ", nbad, " of ", cases.size(), " cases.");
    for (const json& k : cases)
      if (k["verdict"] == "bad" && !k["reasons"].empty()) {
        p += cat(" `", k["id"].get<std::string>(), "`: ", k["reasons"][0].get<std::string>(), ".");
        break;
      }
    if (c["first_break"].is_object())
      p += cat(" Prime suspect: layer ", c["first_break"]["layer"].get<int>(), " (the first whose isolated error breaks its rule, ",
               c["first_break"]["mode"].get<std::string>(), " mode).");
    for (const json& k : cases) {
      const json& g = k["generation"];
      if (g["verdict"] == "bad" && g["loop_onset"].is_number()) {
        p += cat(" The free-running output of `", k["id"].get<std::string>(), "` loops from token ", g["loop_onset"].get<int64_t>(),
                 " where the golden run does not.");
        break;
      }
    }
  } else if (v == "model-intrinsic") {
    p += cat(" degenerates only where the golden run degenerates too (model-intrinsic, not an engine fault); ", cases.size(),
             " cases.");
  } else {
    p += cat(" is ", v, ": ", cases.size(), " cases within tolerances.");
  }
  return p;
}

}  // namespace

json build_report(const ReportInputs& in, const ReportOptions& opt) {
  json doc;
  doc["schema_version"] = kSchemaVersion;
  doc["tool"] = "degenbisect report";
  doc["tool_version"] = kVersion;
  Tokenizers toks;
  json bisects = json::array(), sweeps = json::array(), compares = json::array(), summary = json::array();
  std::string verdict = "none";
  for (const InputDoc& b : in.bisects) {
    bisects.push_back(bisect_section(b.doc));
    verdict = worst_verdict(verdict, bisects.back()["verdict"]);
    if (!bisects.back()["paragraph"].get<std::string>().empty()) summary.push_back(bisects.back()["paragraph"]);
  }
  for (const SweepInput& s : in.sweeps) {
    sweeps.push_back(sweep_section(s));
    for (const json& r : sweeps.back()["rows"]) verdict = worst_verdict(verdict, r["verdict"]);
    summary.push_back(sweep_paragraph(sweeps.back()));
  }
  for (const InputDoc& c : in.compares) {
    compares.push_back(compare_section(c, toks, opt));
    verdict = worst_verdict(verdict, compares.back()["verdict"]);
    summary.push_back(compare_paragraph(compares.back()));
  }
  doc["verdict"] = verdict;
  doc["summary"] = summary;
  doc["bisects"] = bisects;
  doc["sweeps"] = sweeps;
  doc["compares"] = compares;
  return doc;
}

std::string render_json(const json& doc) { return doc.dump(1, ' ', false, json::error_handler_t::replace) + "\n"; }

}  // namespace degen::report
