// The JSON form of a compare result, written (to_json) and read back (compare_result_from_json);
// see judge/compare_json.h.
#include "judge/compare_json.h"

#include <cmath>
#include <limits>

#include "util/error.h"
#include "util/json_input.h"

namespace degen {

using json = nlohmann::json;
using metrics::Verdict;

namespace {

constexpr int kModes = 2;

json opt_json(const std::optional<double>& v) { return v ? metrics::json_number(*v) : json(nullptr); }
template <class T>
json opt_value_json(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace

// ==== writing ====

json metrics::TensorError::to_json() const {
  json j;
  j["n"] = n;
  j["n_compared"] = n_compared;
  j["nonfinite"] = nonfinite;
  j["ref_nonfinite"] = ref_nonfinite;
  j["ref_nonfinite_mismatch"] = ref_nonfinite_mismatch;
  j["nmse"] = json_number(nmse);
  j["nmse_var"] = json_number(nmse_var);
  j["rel_l2"] = json_number(rel_l2);
  j["cos_dist"] = json_number(cos_dist);
  j["cosine"] = json_number(cosine);
  j["max_abs"] = json_number(max_abs);
  j["argmax_abs"] = argmax_abs < 0 ? json(nullptr) : json(argmax_abs);
  j["min_tol"] = {{"atol", json_number(min_atol)}, {"rtol", json_number(min_rtol)}};
  return j;
}

json metrics::Percentiles::to_json() const {
  return {{"max", json_number(max)},     {"p99_9", json_number(p99_9)}, {"p99", json_number(p99)},
          {"p95", json_number(p95)},     {"p90", json_number(p90)},     {"median", json_number(median)},
          {"p10", json_number(p10)},     {"p5", json_number(p5)},       {"p1", json_number(p1)},
          {"p0_1", json_number(p0_1)},   {"min", json_number(min)}};
}

json metrics::MeanErr::to_json() const { return {{"value", json_number(value)}, {"uncertainty", json_number(uncertainty)}}; }

json metrics::LogitSummary::to_json() const {
  json j;
  j["n"] = n;
  if (n == 0) return j;
  j[topk_bound ? "kld_topk" : "kld"] = {{"mean", kld_mean.to_json()}, {"percentiles", kld.to_json()}};
  j["n_dp"] = n_dp;
  if (n_dp > 0) j["dp"] = {{"mean", dp_mean.to_json()}, {"percentiles", dp.to_json()}, {"rms", dp_rms.to_json()}};
  else j["dp"] = nullptr;
  j["same_top_p"] = same_top_p.to_json();
  return j;
}

json metrics::Degeneration::to_json() const {
  json j;
  j["T"] = T;
  for (int n = 1; n <= 4; ++n) j[cat("seq_rep_", n)] = json_number(seq_rep[static_cast<size_t>(n - 1)]);
  j["rep_w"] = json_number(rep_w);
  j["rep_r"] = json_number(rep_r);
  j["lrs"] = json_number(lrs);
  j["max_run"] = max_run;
  j["tail_period"] = opt_value_json(tail_period);
  j["tail_repeats"] = opt_value_json(tail_repeats);
  j["loop_onset"] = opt_value_json(loop_onset);
  j["empty_content"] = opt_value_json(empty_content);
  j["nonfinite_logits"] = nonfinite_logits;
  j["degenerate"] = degenerate;
  j["rule"] = opt_value_json(rule);
  j["rules_fired"] = rules_fired;
  j["reason"] = reason;
  return j;
}

json metrics::MtpEquiv::to_json() const {
  return {{"mtp_equiv", mtp_equiv}, {"first_difference", opt_value_json(first_difference)}};
}

json ObservationCheck::to_json() const {
  return {{"case", case_id}, {"positions", positions}, {"values", values}, {"differing", differing},
          {"max_abs", metrics::json_number(max_abs)}, {"steps_observed", steps}, {"equal", equal()}};
}

namespace {

json logits_json(const LogitsResult& l) {
  json kld = json::array();
  for (double v : l.kld) kld.push_back(metrics::json_number(v));
  json j = {{"summary", l.summary.to_json()},
            {"mean_kld", metrics::json_number(l.mean_kld)},
            {"limit", metrics::json_number(l.limit)},
            {"floor", opt_json(l.floor)},
            {"pass", l.pass},
            {"nonfinite_positions", l.nonfinite},
            {"kld", kld},
            {"top1_agree", l.top1_agree}};
  if (l.resolved) j["resolved"] = metrics::json_number(*l.resolved);
  if (l.logprob_offset) {
    j["logprob_offset"] = metrics::json_number(*l.logprob_offset);
    j["logprob_offset_normalisation"] = l.logprob_offset_vocab ? "vocab" : "record (no lse_pad)";
  }
  return j;
}
json opt_logits_json(const std::optional<LogitsResult>& l) { return l ? logits_json(*l) : json(nullptr); }

json layer_json(const LayerRow& l) {
  json row = {{"layer", l.layer}, {"kind", std::string(1, l.kind)}};
  for (int m = 0; m < kModes; ++m) {
    const std::string mn = forced_mode_name(static_cast<ForcedMode>(m));
    row["drift_" + mn] = l.drift[m] ? l.drift[m]->to_json() : json(nullptr);
    row["iso_" + mn] = l.iso[m] ? l.iso[m]->to_json() : json(nullptr);
    row["floor_" + mn] = opt_json(l.floor[m]);
    row["limit_" + mn] = opt_json(l.limit[m]);
    row["floor_ratio_" + mn] = opt_json(l.floor_ratio[m]);
    row["drift_norm_" + mn] = opt_json(l.drift_norm[m]);
    row["pass_" + mn] = l.pass[m];
  }
  return row;
}

json generation_json(const GenerationResult& gen) {
  json probes = json::array();
  for (const auto& p : gen.probes) probes.push_back(p.to_json());
  return {{"tokens", gen.tokens},
          {"stop_reason", gen.stop_reason},
          {"degeneration", gen.degen.to_json()},
          {"golden_tokens", gen.golden_tokens},
          {"golden_degeneration", gen.golden_degen.to_json()},
          {"golden_rerun", gen.golden_rerun},
          {"first_divergence", opt_value_json(gen.first_divergence)},
          {"golden_margin", opt_json(gen.golden_margin)},
          {"cause", gen.model_changed && gen.verdict == Verdict::bad ? "changed-model" : metrics::degeneration_cause(gen.verdict)},
          {"verdict", metrics::verdict_name(gen.verdict)},
          {"spec", gen.spec ? gen.spec->to_json() : json(nullptr)},
          {"logits", opt_logits_json(gen.logits)},
          {"mtp_equiv", gen.mtp_equiv ? gen.mtp_equiv->to_json() : json(nullptr)},
          {"margin_engine", opt_json(gen.margin_engine)},
          {"flip_margin", opt_json(gen.flip_margin)},
          {"agreement", gen.agreement.empty() ? json(nullptr) : json(gen.agreement)},
          {"decode_path", gen.decode_path ? gen.decode_path->to_json() : json(nullptr)},
          {"server_speculation", gen.spec_stated.empty() ? json(nullptr) : json(gen.spec_stated)},
          {"probes", probes},
          {"seconds", gen.seconds}};
}

}  // namespace

json MtpForcedResult::to_json() const {
  return {{"rounds", rounds}, {"rollbacks", rollbacks}, {"logits", opt_logits_json(logits)},
          {"state_rel_l2", metrics::json_number(state_err)}, {"state_limit", kMtpStateLimit},
          {"state_layer", opt_value_json(state_layer)}, {"state_position", opt_value_json(state_position)},
          {"state_part", state_part}, {"pass", pass}};
}

json ServingCheck::to_json() const {
  return {{"mechanism", mechanism}, {"what", what}, {"logits", opt_logits_json(logits)},
          {"state_rel_l2", metrics::json_number(state_err)}, {"state_limit", state_limit},
          {"state_layer", opt_value_json(state_layer)}, {"state_position", opt_value_json(state_position)},
          {"state_part", state_part}, {"state_decides", state_decides}, {"pass", pass},
          {"note", note.empty() ? json(nullptr) : json(note)}};
}

json ProbeResult::to_json() const {
  return {{"probe", name},
          {"verdict", verdict},
          {"reason", reason},
          {"cached_tokens", opt_value_json(cached)},
          {"slots", opt_value_json(slots)},
          {"first_difference", opt_value_json(first_difference)},
          {"max_kld", opt_json(max_kld)},
          {"limit", opt_json(limit)}};
}

json DecodePathResult::to_json() const {
  json k = json::array();
  for (double v : kld) k.push_back(std::isnan(v) ? json(nullptr) : metrics::json_number(v));
  json f = json::array();
  for (double v : floor) f.push_back(metrics::json_number(v));
  return {{"steps", steps},
          {"stated", stated},
          {"scored", scored},
          {"kld", k},
          {"floor", f},
          {"peak_floor", metrics::json_number(peak_floor)},
          {"limit", metrics::json_number(limit)},
          {"mean_kld", metrics::json_number(mean_kld)},
          {"max_kld", metrics::json_number(max_kld)},
          {"first_bad_step", opt_value_json(first_bad)},
          {"prefill_kld", opt_json(prefill_kld)},
          {"self_kld", opt_json(self_kld)},
          {"resolved", opt_json(resolved)},
          {"floor_source", floor_source},
          {"note", note.empty() ? json(nullptr) : json(note)},
          {"pass", pass}};
}

json CaseResult::to_json() const {
  json layers_j = json::array();
  for (const LayerRow& l : layers) layers_j.push_back(layer_json(l));
  json j = {{"id", id},
            {"verdict", metrics::verdict_name(verdict)},
            {"reasons", reasons},
            {"prompt_tokens", prompt_tokens},
            {"positions", positions},
            {"stored_positions", stored_positions},
            {"layers", layers_j},
            {"seconds", seconds}};
  for (int m = 0; m < kModes; ++m) {
    const std::string mn = forced_mode_name(static_cast<ForcedMode>(m));
    j["embed_" + mn] = embed[m] ? embed[m]->to_json() : json(nullptr);
    j["logits_" + mn] = opt_logits_json(logits[m]);
  }
  j["first_floor_break"] = first_break ? json{{"mode", forced_mode_name(static_cast<ForcedMode>(first_break->first))},
                                              {"layer", first_break->second}}
                                       : json(nullptr);
  j["mtp"] = opt_logits_json(mtp);
  j["mtp_forced"] = mtp_forced ? mtp_forced->to_json() : json(nullptr);
  j["serving"] = json::array();
  for (const ServingCheck& c : serving) j["serving"].push_back(c.to_json());
  if (observation) j["observation"] = observation->to_json();
  j["generation"] = generation_json(gen);
  return j;
}

json CompareResult::to_json() const {
  json c = json::array();
  for (const auto& k : cases) c.push_back(k.to_json());
  json j = {{"tool", "degenbisect compare"},
            {"golden", golden_dir},
            {"model", model_dir},
            {"config", config},
            {"backend", backend},
            {"suite", suite},
            {"record_fingerprint", record_fingerprint},
            {"model_fingerprint", model_fingerprint},
            {"model_mismatch", model_mismatch},
            {"weights_differ", weights_differ},
            {"changed_tensors", changed_tensors},
            {"manifest_checksum", manifest_checked ? "verified" : "absent"},
            {"tokenizer_mismatch", tokenizer_mismatch},
            {"record_tokenizer", record_tokenizer.empty() ? json(nullptr) : json(record_tokenizer)},
            {"model_tokenizer", model_tokenizer.empty() ? json(nullptr) : json(model_tokenizer)},
            {"decode_skipped", decode_skipped},
            {"floor_class", floor_class},
            {"noise_floors", floors ? "measured" : "absent"},
            {"noise_floors_reason", floors ? json(nullptr) : json(floors_reason)},
            {"fallback_limits", floors ? json(nullptr) : json{{"iso_rel_l2", kFallbackRelL2}, {"mean_kld", kFallbackKld}}},
            {"cases", c},
            {"verdict", metrics::verdict_name(verdict)},
            {"exit_code", exit_code},
            {"fail_on_model_degeneration", fail_on_model_degeneration},
            {"seconds", seconds}};
  if (!source.empty()) j["source"] = source;
  if (!limits_note.empty()) j["limits"] = limits_note;
  return j;
}

// ==== reading ====

const std::vector<std::string> kCompatKeys = {
    "changed_tensors", "manifest_checksum", "tokenizer_mismatch", "record_tokenizer", "model_tokenizer", "decode_skipped",
    "floor_class", "fail_on_model_degeneration", "cases[*].mtp_forced", "cases[*].serving", "cases[*].generation.spec",
    "cases[*].generation.logits", "cases[*].generation.mtp_equiv", "cases[*].generation.margin_engine",
    "cases[*].generation.flip_margin", "cases[*].generation.agreement", "cases[*].generation.decode_path",
    "cases[*].generation.server_speculation", "cases[*].generation.probes", "cases[*].generation.decode_path.resolved"};

namespace {

[[noreturn]] void wrong(const std::string& path, const json& v, const char* expected) {
  input_error(path, ": expected ", expected, ", found ", json_excerpt(v));
}

double num_at(const json& v, const std::string& path) {
  if (!is_json_number(v)) wrong(path, v, "a number (or \"inf\", \"-inf\", \"nan\")");
  return number_from_json(v);
}

int64_t int_at(const json& v, const std::string& path, int64_t lo = std::numeric_limits<int64_t>::min(),
               int64_t hi = std::numeric_limits<int64_t>::max()) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) wrong(path, v, cat("an integer <= ", hi).c_str());
  if (!v.is_number_integer()) wrong(path, v, "an integer");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) wrong(path, v, cat("an integer in [", lo, ", ", hi, "]").c_str());
  return x;
}

// One JSON object being read, with its path for messages.
class Obj {
 public:
  Obj(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j.is_object() && path_.empty()) input_error("expected an object, found ", json_excerpt(j));
    if (!j.is_object()) wrong(path_, j, "an object");
  }
  std::string path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const { return j_.contains(key); }
  const json& at(const std::string& key) const {
    auto it = j_.find(key);
    if (it == j_.end()) input_error(path(key), ": missing");
    return *it;
  }
  bool is_null(const std::string& key) const { return at(key).is_null(); }
  Obj obj(const std::string& key) const { return Obj(at(key), path(key)); }

  double num(const std::string& key) const { return num_at(at(key), path(key)); }
  std::optional<double> opt_num(const std::string& key) const {
    return is_null(key) ? std::nullopt : std::optional<double>(num(key));
  }
  int64_t i64(const std::string& key) const { return int_at(at(key), path(key)); }
  int i32(const std::string& key) const {
    return static_cast<int>(int_at(at(key), path(key), std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  }
  std::optional<int64_t> opt_i64(const std::string& key) const {
    return is_null(key) ? std::nullopt : std::optional<int64_t>(i64(key));
  }
  std::optional<int> opt_i32(const std::string& key) const { return is_null(key) ? std::nullopt : std::optional<int>(i32(key)); }
  bool flag(const std::string& key) const {
    if (!at(key).is_boolean()) wrong(path(key), at(key), "true or false");
    return at(key).get<bool>();
  }
  std::string str(const std::string& key) const {
    if (!at(key).is_string()) wrong(path(key), at(key), "a string");
    return at(key).get<std::string>();
  }
  // A string or null ("" for null).
  std::string str_or_empty(const std::string& key) const { return is_null(key) ? std::string() : str(key); }
  std::optional<std::string> opt_str(const std::string& key) const {
    return is_null(key) ? std::nullopt : std::optional<std::string>(str(key));
  }
  // An array, each element through f(element, its path).
  template <class F>
  void each(const std::string& key, F&& f) const {
    const json& a = at(key);
    if (!a.is_array()) wrong(path(key), a, "an array");
    for (size_t i = 0; i < a.size(); ++i) f(a[i], cat(path(key), "[", i, "]"));
  }
  std::vector<std::string> strings(const std::string& key) const {
    std::vector<std::string> out;
    each(key, [&](const json& v, const std::string& p) {
      if (!v.is_string()) wrong(p, v, "a string");
      out.push_back(v.get<std::string>());
    });
    return out;
  }
  std::vector<int32_t> tokens(const std::string& key) const {
    std::vector<int32_t> out;
    each(key, [&](const json& v, const std::string& p) {
      out.push_back(static_cast<int32_t>(int_at(v, p, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max())));
    });
    return out;
  }
  // One of `names`; returns its index.
  size_t choice(const std::string& key, std::initializer_list<const char*> names) const {
    const std::string s = str(key);
    size_t i = 0;
    for (const char* n : names) {
      if (s == n) return i;
      ++i;
    }
    std::string list;
    for (const char* n : names) list += cat(list.empty() ? "" : ", ", "\"", n, "\"");
    wrong(path(key), at(key), ("one of " + list).c_str());
  }

 private:
  const json& j_;
  std::string path_;
};

Verdict verdict_of(const Obj& o, const std::string& key) {
  static constexpr Verdict kOrder[] = {Verdict::good, Verdict::bad, Verdict::untestable, Verdict::model_intrinsic};
  return kOrder[o.choice(key, {"good", "bad", "untestable", "model-intrinsic"})];
}

// A nullable member: nullopt for null, else read(Obj).
template <class T, class F>
std::optional<T> nullable(const Obj& o, const std::string& key, F&& read) {
  if (o.is_null(key)) return std::nullopt;
  return read(o.obj(key));
}

metrics::TensorError tensor_error_from(const Obj& o) {
  metrics::TensorError e;
  e.n = o.i64("n");
  e.n_compared = o.i64("n_compared");
  e.nonfinite = o.i64("nonfinite");
  e.ref_nonfinite = o.i64("ref_nonfinite");
  e.ref_nonfinite_mismatch = o.i64("ref_nonfinite_mismatch");
  e.nmse = o.num("nmse");
  e.nmse_var = o.num("nmse_var");
  e.rel_l2 = o.num("rel_l2");
  e.cos_dist = o.num("cos_dist");
  e.cosine = o.num("cosine");
  e.max_abs = o.num("max_abs");
  e.argmax_abs = o.opt_i64("argmax_abs").value_or(-1);
  const Obj tol = o.obj("min_tol");
  e.min_atol = tol.num("atol");
  e.min_rtol = tol.num("rtol");
  return e;
}

metrics::MeanErr mean_err_from(const Obj& o) { return {o.num("value"), o.num("uncertainty")}; }

metrics::Percentiles percentiles_from(const Obj& o) {
  metrics::Percentiles p;
  p.max = o.num("max"), p.p99_9 = o.num("p99_9"), p.p99 = o.num("p99"), p.p95 = o.num("p95"), p.p90 = o.num("p90");
  p.median = o.num("median"), p.p10 = o.num("p10"), p.p5 = o.num("p5"), p.p1 = o.num("p1"), p.p0_1 = o.num("p0_1");
  p.min = o.num("min");
  return p;
}

metrics::LogitSummary summary_from(const Obj& o) {
  metrics::LogitSummary s;
  s.n = o.i64("n");
  if (s.n == 0) return s;
  s.topk_bound = o.has("kld_topk");
  const Obj k = o.obj(s.topk_bound ? "kld_topk" : "kld");
  s.kld_mean = mean_err_from(k.obj("mean"));
  s.kld = percentiles_from(k.obj("percentiles"));
  s.n_dp = o.i64("n_dp");
  if (s.n_dp > 0) {
    const Obj dp = o.obj("dp");
    s.dp_mean = mean_err_from(dp.obj("mean"));
    s.dp = percentiles_from(dp.obj("percentiles"));
    s.dp_rms = mean_err_from(dp.obj("rms"));
  } else if (!o.is_null("dp")) {
    wrong(o.path("dp"), o.at("dp"), "null (n_dp is 0)");
  }
  s.same_top_p = mean_err_from(o.obj("same_top_p"));
  return s;
}

metrics::Degeneration degeneration_from(const Obj& o) {
  metrics::Degeneration d;
  d.T = o.i64("T");
  for (int n = 1; n <= 4; ++n) d.seq_rep[static_cast<size_t>(n - 1)] = o.num(cat("seq_rep_", n));
  d.rep_w = o.num("rep_w");
  d.rep_r = o.num("rep_r");
  d.lrs = o.num("lrs");
  d.max_run = o.i64("max_run");
  d.tail_period = o.opt_i64("tail_period");
  d.tail_repeats = o.opt_i64("tail_repeats");
  d.loop_onset = o.opt_i64("loop_onset");
  if (!o.is_null("empty_content")) d.empty_content = o.flag("empty_content");
  d.nonfinite_logits = o.flag("nonfinite_logits");
  d.degenerate = o.flag("degenerate");
  d.rule = o.opt_str("rule");
  d.rules_fired = o.strings("rules_fired");
  d.reason = o.str("reason");
  return d;
}

SpecDecode spec_from(const Obj& o) {
  SpecDecode s;
  s.steps = o.i64("steps");
  s.proposed = o.i64("proposed");
  s.accepted = o.i64("accepted");
  s.accept_rate = o.opt_num("accept_rate");
  s.accept_len = o.opt_num("accept_len");
  s.accept_rate_before = o.opt_num("accept_rate_before");
  s.accept_rate_loop = o.opt_num("accept_rate_loop");
  s.accept_anomaly = o.opt_str("accept_anomaly");
  return s;
}

metrics::MtpEquiv mtp_equiv_from(const Obj& o) {
  metrics::MtpEquiv m;
  m.mtp_equiv = o.flag("mtp_equiv");
  m.first_difference = o.opt_i64("first_difference");
  return m;
}

LogitsResult logits_from(const Obj& o) {
  LogitsResult l;
  l.summary = summary_from(o.obj("summary"));
  l.mean_kld = o.num("mean_kld");
  l.limit = o.num("limit");
  l.floor = o.opt_num("floor");
  l.pass = o.flag("pass");
  l.nonfinite = o.i64("nonfinite_positions");
  o.each("kld", [&](const json& v, const std::string& p) { l.kld.push_back(num_at(v, p)); });
  o.each("top1_agree", [&](const json& v, const std::string& p) { l.top1_agree.push_back(static_cast<uint8_t>(int_at(v, p, 0, 255))); });
  if (o.has("resolved")) l.resolved = o.num("resolved");
  if (o.has("logprob_offset")) {
    l.logprob_offset = o.num("logprob_offset");
    l.logprob_offset_vocab = o.choice("logprob_offset_normalisation", {"vocab", "record (no lse_pad)"}) == 0;
  }
  return l;
}

ObservationCheck observation_from(const Obj& o) {
  ObservationCheck c;
  c.case_id = o.str("case");
  c.positions = o.i64("positions");
  c.values = o.i64("values");
  c.differing = o.i64("differing");
  c.max_abs = o.num("max_abs");
  c.steps = o.i64("steps_observed");
  if (o.flag("equal") != c.equal()) wrong(o.path("equal"), o.at("equal"), c.equal() ? "true (differing is 0)" : "false (differing is not 0)");
  return c;
}

MtpForcedResult mtp_forced_from(const Obj& o) {
  MtpForcedResult r;
  r.rounds = o.i32("rounds");
  r.rollbacks = o.i32("rollbacks");
  r.logits = nullable<LogitsResult>(o, "logits", logits_from);
  r.state_err = o.num("state_rel_l2");
  (void)o.num("state_limit");  // kMtpStateLimit, a constant of the tool
  r.state_layer = o.opt_i32("state_layer");
  r.state_position = o.opt_i64("state_position");
  r.state_part = o.str("state_part");
  r.pass = o.flag("pass");
  return r;
}

ServingCheck serving_from(const Obj& o) {
  ServingCheck c;
  c.mechanism = o.str("mechanism");
  c.what = o.str("what");
  c.logits = nullable<LogitsResult>(o, "logits", logits_from);
  c.state_err = o.num("state_rel_l2");
  c.state_limit = o.num("state_limit");
  c.state_layer = o.opt_i32("state_layer");
  c.state_position = o.opt_i64("state_position");
  c.state_part = o.str("state_part");
  c.state_decides = o.flag("state_decides");
  c.pass = o.flag("pass");
  c.note = o.str_or_empty("note");
  return c;
}

ProbeResult probe_from(const Obj& o) {
  ProbeResult p;
  p.name = o.str("probe");
  p.verdict = o.str("verdict");
  p.reason = o.str("reason");
  p.cached = o.opt_i64("cached_tokens");
  p.slots = o.opt_i64("slots");
  p.first_difference = o.opt_i64("first_difference");
  p.max_kld = o.opt_num("max_kld");
  p.limit = o.opt_num("limit");
  return p;
}

DecodePathResult decode_path_from(const Obj& o) {
  DecodePathResult d;
  d.steps = o.i64("steps");
  d.stated = o.i64("stated");
  d.scored = o.i64("scored");
  o.each("kld", [&](const json& v, const std::string& p) {
    d.kld.push_back(v.is_null() ? std::numeric_limits<double>::quiet_NaN() : num_at(v, p));
  });
  o.each("floor", [&](const json& v, const std::string& p) { d.floor.push_back(num_at(v, p)); });
  d.peak_floor = o.num("peak_floor");
  d.limit = o.num("limit");
  d.mean_kld = o.num("mean_kld");
  d.max_kld = o.num("max_kld");
  d.first_bad = o.opt_i64("first_bad_step");
  d.prefill_kld = o.opt_num("prefill_kld");
  d.self_kld = o.opt_num("self_kld");
  if (o.has("resolved")) d.resolved = o.opt_num("resolved");  // kCompatKeys
  d.floor_source = o.str("floor_source");
  d.note = o.str_or_empty("note");
  d.pass = o.flag("pass");
  return d;
}

// The keys later versions added to a generation (kCompatKeys): absent, their defaults.
void generation_server_figures(const Obj& o, GenerationResult& g) {
  auto opt = [&](const char* key) { return o.has(key) && !o.is_null(key); };
  if (opt("spec")) g.spec = spec_from(o.obj("spec"));
  if (opt("logits")) g.logits = logits_from(o.obj("logits"));
  if (opt("mtp_equiv")) g.mtp_equiv = mtp_equiv_from(o.obj("mtp_equiv"));
  if (opt("margin_engine")) g.margin_engine = o.num("margin_engine");
  if (opt("flip_margin")) g.flip_margin = o.num("flip_margin");
  if (opt("agreement")) g.agreement = o.str("agreement");
  if (opt("decode_path")) g.decode_path = decode_path_from(o.obj("decode_path"));
  if (opt("server_speculation")) g.spec_stated = o.str("server_speculation");
  if (o.has("probes")) o.each("probes", [&](const json& v, const std::string& p) { g.probes.push_back(probe_from(Obj(v, p))); });
}

GenerationResult generation_from(const Obj& o) {
  GenerationResult g;
  g.tokens = o.tokens("tokens");
  g.stop_reason = o.str("stop_reason");
  g.degen = degeneration_from(o.obj("degeneration"));
  g.golden_tokens = o.tokens("golden_tokens");
  g.golden_degen = degeneration_from(o.obj("golden_degeneration"));
  g.golden_rerun = o.flag("golden_rerun");
  g.first_divergence = o.opt_i64("first_divergence");
  g.golden_margin = o.opt_num("golden_margin");
  g.verdict = verdict_of(o, "verdict");
  // "cause" follows from the verdict, except a bad degeneration of a changed checkpoint.
  const std::string cause = o.str("cause");
  g.model_changed = cause == "changed-model";
  const std::string expected = g.model_changed && g.verdict == Verdict::bad ? "changed-model" : metrics::degeneration_cause(g.verdict);
  if (cause != expected)
    input_error(o.path("cause"), ": \"", cause, "\" does not go with verdict \"", metrics::verdict_name(g.verdict), "\" (expected \"",
                expected, "\"", g.verdict == Verdict::bad ? " or \"changed-model\"" : "", ")");
  generation_server_figures(o, g);
  g.seconds = o.num("seconds");
  return g;
}

LayerRow layer_from(const Obj& o) {
  LayerRow l;
  l.layer = o.i32("layer");
  const std::string kind = o.str("kind");
  if (kind.size() != 1) wrong(o.path("kind"), o.at("kind"), "one character (\"G\" or \"A\")");
  l.kind = kind[0];
  for (int m = 0; m < kModes; ++m) {
    const std::string mn = forced_mode_name(static_cast<ForcedMode>(m));
    l.drift[m] = nullable<metrics::TensorError>(o, "drift_" + mn, tensor_error_from);
    l.iso[m] = nullable<metrics::TensorError>(o, "iso_" + mn, tensor_error_from);
    l.floor[m] = o.opt_num("floor_" + mn);
    l.limit[m] = o.opt_num("limit_" + mn);
    l.floor_ratio[m] = o.opt_num("floor_ratio_" + mn);
    l.drift_norm[m] = o.opt_num("drift_norm_" + mn);
    l.pass[m] = o.flag("pass_" + mn);
  }
  return l;
}

// Teacher-forced parts of a case: embeddings, layers, logits, the first break, MTP.
void case_forced_from(const Obj& o, CaseResult& c) {
  o.each("layers", [&](const json& v, const std::string& p) { c.layers.push_back(layer_from(Obj(v, p))); });
  for (int m = 0; m < kModes; ++m) {
    const std::string mn = forced_mode_name(static_cast<ForcedMode>(m));
    c.embed[m] = nullable<metrics::TensorError>(o, "embed_" + mn, tensor_error_from);
    c.logits[m] = nullable<LogitsResult>(o, "logits_" + mn, logits_from);
  }
  if (!o.is_null("first_floor_break")) {
    const Obj fb = o.obj("first_floor_break");
    c.first_break = std::make_pair(static_cast<int>(fb.choice("mode", {"prefill", "decode"})), fb.i32("layer"));
  }
  c.mtp = nullable<LogitsResult>(o, "mtp", logits_from);
  if (o.has("mtp_forced")) c.mtp_forced = nullable<MtpForcedResult>(o, "mtp_forced", mtp_forced_from);
}

CaseResult case_from(const Obj& o) {
  CaseResult c;
  c.id = o.str("id");
  c.verdict = verdict_of(o, "verdict");
  c.reasons = o.strings("reasons");
  c.prompt_tokens = o.i64("prompt_tokens");
  c.positions = o.i64("positions");
  c.stored_positions = o.i64("stored_positions");
  case_forced_from(o, c);
  if (o.has("serving")) o.each("serving", [&](const json& v, const std::string& p) { c.serving.push_back(serving_from(Obj(v, p))); });
  if (o.has("observation")) c.observation = observation_from(o.obj("observation"));
  c.gen = generation_from(o.obj("generation"));
  c.seconds = o.num("seconds");
  return c;
}

// The record and model the result is about, and the floors it was judged with.
void identity_from(const Obj& o, CompareResult& r) {
  r.golden_dir = o.str("golden");
  r.model_dir = o.str("model");
  r.config = o.str("config");
  r.backend = o.str("backend");
  r.suite = o.str("suite");
  r.record_fingerprint = o.str("record_fingerprint");
  r.model_fingerprint = o.str("model_fingerprint");
  r.model_mismatch = o.flag("model_mismatch");
  r.weights_differ = o.flag("weights_differ");
  if (o.has("changed_tensors")) r.changed_tensors = o.strings("changed_tensors");
  if (o.has("manifest_checksum")) r.manifest_checked = o.choice("manifest_checksum", {"verified", "absent"}) == 0;
  if (o.has("tokenizer_mismatch")) r.tokenizer_mismatch = o.flag("tokenizer_mismatch");
  if (o.has("record_tokenizer")) r.record_tokenizer = o.str_or_empty("record_tokenizer");
  if (o.has("model_tokenizer")) r.model_tokenizer = o.str_or_empty("model_tokenizer");
  if (o.has("decode_skipped")) r.decode_skipped = o.flag("decode_skipped");
  if (o.has("floor_class")) r.floor_class = o.str("floor_class");
  r.floors = o.choice("noise_floors", {"measured", "absent"}) == 0;
  r.floors_reason = r.floors ? std::string() : o.str("noise_floors_reason");
  if (r.floors && !o.is_null("noise_floors_reason"))
    wrong(o.path("noise_floors_reason"), o.at("noise_floors_reason"), "null (noise_floors is \"measured\")");
  if (r.floors != o.is_null("fallback_limits"))
    wrong(o.path("fallback_limits"), o.at("fallback_limits"), r.floors ? "null (noise_floors is \"measured\")" : "an object");
  if (!r.floors) (void)o.obj("fallback_limits").num("iso_rel_l2");  // constants of the tool
}

}  // namespace

CompareResult compare_result_from_json(const json& j) {
  try {
    const Obj o(j, "");
    if (o.str("tool") != "degenbisect compare") wrong("tool", j["tool"], "\"degenbisect compare\"");
    CompareResult r;
    identity_from(o, r);
    o.each("cases", [&](const json& v, const std::string& p) { r.cases.push_back(case_from(Obj(v, p))); });
    r.verdict = verdict_of(o, "verdict");
    r.exit_code = o.i32("exit_code");
    // Results written before the key: model-intrinsic counted as a failure when it exited 1.
    r.fail_on_model_degeneration = o.has("fail_on_model_degeneration") ? o.flag("fail_on_model_degeneration")
                                                                       : r.verdict == Verdict::model_intrinsic && r.exit_code == 1;
    r.seconds = o.num("seconds");
    if (o.has("source")) r.source = o.str("source");
    if (o.has("limits")) r.limits_note = o.str("limits");
    return r;
  } catch (const InputError& e) {
    throw InputError(cat("compare result: ", e.what()));
  }
}

}  // namespace degen
