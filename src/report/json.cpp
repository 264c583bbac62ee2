// The report document (schema in json.h): compare, sweep and bisect results reduced to what the
// writers show, plus the summary paragraphs.
#include "report/json.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "build_config.h"
#include "diag/metrics.h"
#include "diag/sweep.h"
#include "model/tokenizer.h"
#include "report/common.h"
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

std::string decode_tokens(const Tokenizer& tok, const json& ids) {
  std::string bytes;
  for (const json& id : ids) {
    if (!id.is_number_integer()) continue;
    try {
      bytes += tok.token_bytes(id.get<int32_t>());
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
  void add(const json& err) {
    if (!err.is_object()) return;
    const auto x = opt_num(err, "rel_l2");
    if (!x) return;
    if (!v || std::isnan(*x) || *x > *v) v = x;
  }
};

json compare_layers(const json& cases, json& first_break) {
  json out = json::array();
  size_t L = 0;
  for (const json& c : cases) L = std::max(L, array_or_empty(c, "layers").size());
  std::optional<int> fb_layer;
  std::string fb_mode;
  json fb_cases = json::array();
  for (const json& c : cases) {
    if (!c.contains("first_floor_break") || !c["first_floor_break"].is_object()) continue;
    const int l = c["first_floor_break"].value("layer", -1);
    if (l < 0) continue;
    if (!fb_layer || l < *fb_layer) {
      fb_layer = l;
      fb_mode = c["first_floor_break"].value("mode", std::string());
      fb_cases = json::array();
    }
    if (l == *fb_layer) fb_cases.push_back(c.value("id", std::string()));
  }
  first_break = fb_layer ? json{{"layer", *fb_layer}, {"mode", fb_mode}, {"cases", fb_cases}} : json(nullptr);

  for (size_t l = 0; l < L; ++l) {
    Worst drift[2], iso[2];
    std::optional<double> floor[2], limit[2], ratio;
    bool pass = true, nonfinite = false;
    std::string kind = "?";
    int layer = static_cast<int>(l);
    json first_in = json::array();
    for (const json& c : cases) {
      const json& rows = c["layers"];
      if (!rows.is_array() || l >= rows.size()) continue;
      const json& row = rows[l];
      layer = row.value("layer", layer);
      kind = opt_str(row, "kind", kind);
      for (int m = 0; m < 2; ++m) {
        const std::string mn = kModes[m];
        const json& d = row.contains("drift_" + mn) ? row["drift_" + mn] : json();
        const json& i = row.contains("iso_" + mn) ? row["iso_" + mn] : json();
        drift[m].add(d);
        iso[m].add(i);
        for (const json* e : {&d, &i})
          if (e->is_object() && (e->value("nonfinite", 0) > 0 || e->value("ref_nonfinite_mismatch", 0) > 0)) nonfinite = true;
        if (auto f = opt_num(row, ("floor_" + mn).c_str())) floor[m] = floor[m] ? std::min(*floor[m], *f) : *f;
        if (auto f = opt_num(row, ("limit_" + mn).c_str())) limit[m] = limit[m] ? std::min(*limit[m], *f) : *f;
        if (auto f = opt_num(row, ("floor_ratio_" + mn).c_str())) ratio = ratio ? std::max(*ratio, *f) : *f;
        if (row.contains("pass_" + mn) && row["pass_" + mn].is_boolean() && !row["pass_" + mn].get<bool>()) pass = false;
      }
      if (c.contains("first_floor_break") && c["first_floor_break"].is_object() &&
          c["first_floor_break"].value("layer", -1) == layer)
        first_in.push_back(c.value("id", std::string()));
    }
    out.push_back({{"layer", layer},
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
                   {"first_break_cases", first_in}});
  }
  return out;
}

// compare --server's decode-path figures (DecodePathResult::to_json): the per-step KLD (null where a
// step was not scored), its limit and the first step over it; null when the result has none.
json decode_path_doc(const json& dp) {
  if (!dp.is_object()) return nullptr;
  json kld = json::array();
  for (const json& v : array_or_empty(dp, "kld")) kld.push_back(num_or_null(as_num(v)));
  return {{"steps", int_or_null(opt_int(dp, "steps"))},
          {"stated", int_or_null(opt_int(dp, "stated"))},
          {"scored", int_or_null(opt_int(dp, "scored"))},
          {"kld", kld},
          {"limit", num_or_null(opt_num(dp, "limit"))},
          {"peak_floor", num_or_null(opt_num(dp, "peak_floor"))},
          {"mean_kld", num_or_null(opt_num(dp, "mean_kld"))},
          {"max_kld", num_or_null(opt_num(dp, "max_kld"))},
          {"first_bad_step", int_or_null(opt_int(dp, "first_bad_step"))},
          {"prefill_kld", num_or_null(opt_num(dp, "prefill_kld"))},
          {"self_kld", num_or_null(opt_num(dp, "self_kld"))},
          {"resolved", num_or_null(opt_num(dp, "resolved"))},
          {"floor_source", str_or_null(dp, "floor_source")},
          {"note", str_or_null(dp, "note")},
          {"pass", dp.contains("pass") && dp["pass"].is_boolean() ? dp["pass"] : json(nullptr)}};
}

// compare --server's serving probes (ProbeResult::to_json), one object each.
json probes_doc(const json& probes) {
  json out = json::array();
  for (const json& p : probes) {
    if (!p.is_object()) continue;
    out.push_back({{"probe", str_or_null(p, "probe")},
                   {"verdict", str_or_null(p, "verdict")},
                   {"reason", str_or_null(p, "reason")},
                   {"cached_tokens", int_or_null(opt_int(p, "cached_tokens"))},
                   {"slots", int_or_null(opt_int(p, "slots"))},
                   {"first_difference", int_or_null(opt_int(p, "first_difference"))},
                   {"max_kld", num_or_null(opt_num(p, "max_kld"))},
                   {"limit", num_or_null(opt_num(p, "limit"))}});
  }
  return out;
}

json compare_case(const json& c, const Tokenizer* tok, const std::string& tok_source, const ReportOptions& opt) {
  json o;
  o["id"] = opt_str(c, "id", "?");
  o["verdict"] = opt_str(c, "verdict", "?");
  o["reasons"] = array_or_empty(c, "reasons");
  o["prompt_tokens"] = int_or_null(opt_int(c, "prompt_tokens"));
  o["positions"] = int_or_null(opt_int(c, "positions"));
  o["seconds"] = num_or_null(opt_num(c, "seconds"));
  const json& lp = c.contains("logits_prefill") ? c["logits_prefill"] : json();
  const json& ld = c.contains("logits_decode") ? c["logits_decode"] : json();
  o["kld_mean_prefill"] = num_or_null(opt_num(lp, "mean_kld"));
  o["kld_mean_decode"] = num_or_null(opt_num(ld, "mean_kld"));
  o["kld_limit"] = num_or_null(opt_num(lp, "limit"));
  o["same_top_p"] = lp.is_object() && lp.contains("summary") ? num_or_null(opt_num(lp["summary"].value("same_top_p", json()), "value"))
                                                               : json(nullptr);
  o["mtp_kld_mean"] = c.contains("mtp") ? num_or_null(opt_num(c["mtp"], "mean_kld")) : json(nullptr);
  o["first_break"] = c.contains("first_floor_break") && c["first_floor_break"].is_object() ? c["first_floor_break"] : json(nullptr);
  json kld = json::array();
  const json& src = lp.is_object() ? lp : ld;
  for (const json& v : array_or_empty(src, "kld")) kld.push_back(num_or_null(as_num(v)));
  o["kld"] = kld;

  const json& g = c.contains("generation") && c["generation"].is_object() ? c["generation"] : json::object();
  const json& d = g.contains("degeneration") ? g["degeneration"] : json::object();
  const json& gd = g.contains("golden_degeneration") ? g["golden_degeneration"] : json::object();
  json gen = {{"tokens", array_or_empty(g, "tokens")},
              {"golden_tokens", array_or_empty(g, "golden_tokens")},
              {"stop_reason", str_or_null(g, "stop_reason")},
              {"first_divergence", int_or_null(opt_int(g, "first_divergence"))},
              {"golden_margin", num_or_null(opt_num(g, "golden_margin"))},
              {"loop_onset", int_or_null(opt_int(d, "loop_onset"))},
              {"tail_period", int_or_null(opt_int(d, "tail_period"))},
              {"tail_repeats", int_or_null(opt_int(d, "tail_repeats"))},
              {"seq_rep_4", num_or_null(opt_num(d, "seq_rep_4"))},
              {"max_run", int_or_null(opt_int(d, "max_run"))},
              {"degenerate", opt_bool(d, "degenerate")},
              {"rule", str_or_null(d, "rule")},
              {"reason", str_or_null(d, "reason")},
              {"golden_degenerate", opt_bool(gd, "degenerate")},
              {"golden_rule", str_or_null(gd, "rule")},
              {"golden_loop_onset", int_or_null(opt_int(gd, "loop_onset"))},
              {"golden_tail_period", int_or_null(opt_int(gd, "tail_period"))},
              {"cause", str_or_null(g, "cause")},
              {"verdict", str_or_null(g, "verdict")},
              {"agreement", str_or_null(g, "agreement")},
              {"server_speculation", str_or_null(g, "server_speculation")},
              {"decode_path", decode_path_doc(g.contains("decode_path") ? g["decode_path"] : json())},
              {"probes", probes_doc(array_or_empty(g, "probes"))}};
  // The text: from the result itself when it carries it, else decoded with the model's tokenizer.
  json text = nullptr;
  std::string golden, tested, source;
  bool have = false;
  if (g.contains("text") && g["text"].is_string() && g.contains("golden_text") && g["golden_text"].is_string()) {
    tested = g["text"].get<std::string>();
    golden = g["golden_text"].get<std::string>();
    source = "compare result";
    have = true;
  } else if (tok) {
    tested = decode_tokens(*tok, gen["tokens"]);
    golden = decode_tokens(*tok, gen["golden_tokens"]);
    source = tok_source;
    have = true;
  }
  if (have) {
    tested = utf8_truncate(sanitize_utf8(tested), opt.max_text_bytes);
    golden = utf8_truncate(sanitize_utf8(golden), opt.max_text_bytes);
    text = {{"golden", golden}, {"tested", tested}, {"common_prefix_bytes", utf8_common_prefix(golden, tested)}, {"source", source}};
    // Where each text's loop starts, in bytes of the shown text (the tokens before the loop onset,
    // decoded the same way); null without a loop, a tokenizer, or when the loop starts past the cut.
    auto loop_bytes = [&](const json& ids, std::optional<int64_t> onset, const std::string& shown) -> json {
      if (!onset || !tok || !ids.is_array() || *onset < 0 || static_cast<size_t>(*onset) > ids.size()) return nullptr;
      const json head(ids.begin(), ids.begin() + *onset);
      const size_t at = sanitize_utf8(decode_tokens(*tok, head)).size();
      return at < shown.size() ? json(at) : json(nullptr);
    };
    text["tested_loop_bytes"] = loop_bytes(gen["tokens"], opt_int(d, "loop_onset"), tested);
    text["tested_first_bad_bytes"] =
        gen["decode_path"].is_object() ? loop_bytes(gen["tokens"], opt_int(gen["decode_path"], "first_bad_step"), tested) : json(nullptr);
    text["golden_loop_bytes"] = loop_bytes(gen["golden_tokens"], opt_int(gd, "loop_onset"), golden);
  }
  gen["text"] = text;
  o["generation"] = gen;
  return o;
}

json compare_section(const json& c, Tokenizers& toks, const ReportOptions& opt) {
  json o;
  for (const char* k : {"config", "backend", "suite", "golden", "model", "model_fingerprint", "record_fingerprint", "noise_floors",
                        "noise_floors_reason"})
    o[k] = str_or_null(c, k);
  o["model_mismatch"] = opt_bool(c, "model_mismatch");
  o["weights_differ"] = opt_bool(c, "weights_differ");
  o["verdict"] = opt_str(c, "verdict", "?");
  o["exit_code"] = int_or_null(opt_int(c, "exit_code"));
  o["fail_on_model_degeneration"] = c.contains("fail_on_model_degeneration") && c["fail_on_model_degeneration"].is_boolean()
                                        ? c["fail_on_model_degeneration"]
                                        : json(o["verdict"] == "model-intrinsic" && o["exit_code"] == 1);
  o["seconds"] = num_or_null(opt_num(c, "seconds"));
  o["reason"] = o["verdict"] == "untestable" ? str_or_null(c, "reason") : json(nullptr);
  const json cases = array_or_empty(c, "cases");
  json first_break;
  o["layers"] = compare_layers(cases, first_break);
  o["first_break"] = first_break;
  const fs::path model_dir = opt.model_dir ? *opt.model_dir : fs::path(opt_str(c, "model"));
  const Tokenizer* tok = toks.get(model_dir);
  json cs = json::array();
  for (const json& k : cases) cs.push_back(compare_case(k, tok, (model_dir / "tokenizer.json").string(), opt));
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
    compares.push_back(compare_section(c.doc, toks, opt));
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
