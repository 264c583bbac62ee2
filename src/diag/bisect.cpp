// Toggle and layer bisection (see bisect.h).
#include "diag/bisect.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "util/file_io.h"
#include "util/error.h"
#include "util/json_input.h"
#include "util/json_output.h"

namespace degen {

using nlohmann::json;

BisectOracle::BisectOracle(CellEvaluator eval, std::optional<std::filesystem::path> replay, json identity)
    : eval_(std::move(eval)), replay_(std::move(replay)), identity_(std::move(identity)) {
  if (!replay_) return;
  if (replay_->has_parent_path()) std::filesystem::create_directories(replay_->parent_path());
  lock_ = std::make_unique<FileLock>(replay_->string() + ".lock", cat("bisect --replay ", replay_->string()));
  if (!std::filesystem::exists(*replay_)) return;
  std::string text = read_file(*replay_);
  size_t start = 0;
  int line_no = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    ++line_no;
    if (nl == std::string::npos) break;  // a partial last line: that evaluation did not finish
    std::string line = text.substr(start, nl - start);
    start = nl + 1;
    if (line.empty()) continue;
    json j = parse_json(line, cat(replay_->string(), ": line ", line_no), false);
    if (j.is_discarded() || !j.contains("config") || !j.contains("summary"))
      input_error(replay_->string(), ": line ", line_no, " is not a bisect evaluation (expected {\"config\", \"summary\"})");
    // An evaluation counts only for what it was measured against (model, record, cases, mode).
    if (!identity_.is_null()) {
      if (!j.contains("identity"))
        input_error("bisect --replay ", replay_->string(), ": expected evaluations that record what they were measured ",
                    "against (model, golden record, cases), found line ", line_no, " without it (written by an older ",
                    "degenbisect); its evidence cannot be checked against this run: give a new --replay file");
      const std::string diff = identity_difference(identity_, j["identity"]);
      if (!diff.empty())
        input_error("bisect --replay ", replay_->string(), " was made for another run (line ", line_no, "): ", diff,
                    "; replay with the flags that made it, or give a new --replay file");
    }
    if (!j["config"].is_string())
      input_error(replay_->string(), ": line ", line_no, ": field 'config' is ", json_excerpt(j["config"]),
                  ", expected the evaluated configuration as a string");
    check_result_fields(j["summary"], cat(replay_->string(), ": line ", line_no, ": summary"), false);
    memo_[j["config"].get<std::string>()] = cell_summary_from_json(j["summary"]);
  }
  // Rewrite without a partial tail so appends start on a fresh line.
  size_t keep = text.rfind('\n');
  keep = keep == std::string::npos ? 0 : keep + 1;
  if (keep != text.size()) std::filesystem::resize_file(*replay_, keep);
}

const CellSummary& BisectOracle::eval(const RunConfig& rc, const std::string& why) {
  std::string key = rc.str();
  auto it = memo_.find(key);
  bool fresh = it == memo_.end();
  if (fresh) {
    CellSummary s;
    try {
      s = eval_(rc);
    } catch (const UntestableError& e) {
      s.verdict = "untestable";
      s.reason = e.what();
    }
    it = memo_.emplace(key, std::move(s)).first;
    ++fresh_;
    if (replay_) {
      json line = {{"config", key}, {"why", why}, {"summary", cell_summary_to_json(it->second)}};
      if (!identity_.is_null()) line["identity"] = identity_;
      std::ofstream f(*replay_, std::ios::app);
      f << json_text(line) << "\n";
      f.flush();
      if (!f) input_error(replay_->string(), ": cannot append to the replay file");
    }
  }
  asked_.insert(key);
  log_.push_back({{"config", key}, {"why", why}, {"verdict", it->second.verdict}, {"replayed", !fresh}});
  return it->second;
}

template <typename T>
std::vector<T> ddmin(std::vector<T> items, const std::function<bool(const std::vector<T>&)>& fails) {
  size_t n = 2;
  while (items.size() >= 2) {
    size_t chunk = (items.size() + n - 1) / n;
    std::vector<std::vector<T>> parts;
    for (size_t i = 0; i < items.size(); i += chunk)
      parts.emplace_back(items.begin() + static_cast<long>(i), items.begin() + static_cast<long>(std::min(items.size(), i + chunk)));
    bool reduced = false;
    for (const auto& p : parts) {  // a subset alone fails
      if (fails(p)) { items = p; n = 2; reduced = true; break; }
    }
    if (!reduced && parts.size() > 2) {
      for (size_t i = 0; i < parts.size(); ++i) {  // a complement fails
        std::vector<T> comp;
        for (size_t j = 0; j < parts.size(); ++j)
          if (j != i) comp.insert(comp.end(), parts[j].begin(), parts[j].end());
        if (fails(comp)) { items = comp; n = std::max<size_t>(n - 1, 2); reduced = true; break; }
      }
    }
    if (!reduced) {
      if (n >= items.size()) break;
      n = std::min(items.size(), 2 * n);
    }
  }
  return items;
}

template std::vector<std::string> ddmin(std::vector<std::string>, const std::function<bool(const std::vector<std::string>&)>&);
template std::vector<int> ddmin(std::vector<int>, const std::function<bool(const std::vector<int>&)>&);

std::vector<int> bisect_layers(const std::vector<int>& candidates, const std::function<bool(const std::vector<int>&)>& fails) {
  std::vector<int> s = candidates;
  while (s.size() > 1) {
    size_t h = s.size() / 2;
    std::vector<int> a(s.begin(), s.begin() + static_cast<long>(h)), b(s.begin() + static_cast<long>(h), s.end());
    if (fails(a)) s = a;
    else if (fails(b)) s = b;
    else return ddmin<int>(s, fails);  // the culprit needs layers from both halves
  }
  return s;
}

RunConfig implicit_good(const RunConfig& bad) {
  // bad's engine and sampling toggles (the serving mechanisms among them: how the engine is served,
  // as batch), its layers' toggles and faults at their defaults (engine/toggles.h ToggleKind).
  RunConfig g = without_toggles(bad, [](const Toggle& t) { return t.kind == ToggleKind::layer || t.kind == ToggleKind::fault; });
  // The precision's value is kept, not its "given" flag: the implicit good of backend=cuda,precision=ref
  // (the fp32 reference on the GPU) is the bf16 GPU path.
  g.precision_set = false;
  return g;
}

BisectOutcome bisect(const RunConfig& good, bool good_given, const RunConfig& bad, const ModelConfig& cfg,
                     BisectOracle& oracle) {
  BisectOutcome out;
  out.good = good;
  out.bad = bad;
  out.good_given = good_given;
  out.differing = differing_toggles(good, bad);
  auto done = [&]() -> BisectOutcome& {
    out.evaluations = oracle.total_evaluations();
    out.fresh_evaluations = oracle.fresh_evaluations();
    return out;
  };
  out.bad_summary = oracle.eval(bad, "the bad configuration");
  if (out.bad_summary.verdict == "untestable") { out.status = "untestable"; return done(); }
  if (out.bad_summary.verdict != "bad") { out.status = "bad-is-good"; return done(); }
  if (out.differing.empty()) { out.status = "no-difference"; return done(); }
  const CellSummary& gs = oracle.eval(good, "the good configuration");
  if (gs.verdict == "bad") { out.status = "good-is-bad"; return done(); }

  // 1. Toggles: ddmin over the differing keys.
  auto toggles_fail = [&](const std::vector<std::string>& keys) {
    return oracle.is_bad(mix_configs(good, bad, keys, nullptr, cfg), "toggle subset");
  };
  out.culprit_toggles = out.differing.size() == 1
                            ? out.differing
                            : ddmin<std::string>(out.differing, std::function<bool(const std::vector<std::string>&)>(toggles_fail));

  // 2. Layers: the layers the culprit toggles can act on.
  std::set<int> cand;
  bool all_scopable = true;
  for (const auto& k : out.culprit_toggles) {
    std::vector<int> ls = toggle_layers(k, cfg);
    if (!toggle_scopable(k) || ls.empty()) all_scopable = false;
    cand.insert(ls.begin(), ls.end());
  }
  std::vector<int> candidates(cand.begin(), cand.end());
  out.minimal_bad = mix_configs(good, bad, out.culprit_toggles, nullptr, cfg);
  if (!candidates.empty()) {
    auto layers_fail = [&](const std::vector<int>& ls) {
      return oracle.is_bad(mix_configs(good, bad, out.culprit_toggles, &ls, cfg), "layer subset");
    };
    if (layers_fail(candidates)) {
      out.culprit_layers = bisect_layers(candidates, layers_fail);
      out.layer_specific = all_scopable;
      out.minimal_bad = mix_configs(good, bad, out.culprit_toggles, &out.culprit_layers, cfg);
    }
  }
  out.minimal_summary = oracle.eval(out.minimal_bad, "the minimal bad configuration");

  // 3. Confirmation by patching: bad with the culprit layers reset to the good toggles.
  if (out.layer_specific) {
    std::vector<int> others;
    for (int l = 0; l < cfg.num_layers; ++l)
      if (std::find(out.culprit_layers.begin(), out.culprit_layers.end(), l) == out.culprit_layers.end()) others.push_back(l);
    out.patched = mix_configs(good, bad, out.differing, &others, cfg);
    out.patch_fixes = !oracle.is_bad(out.patched, "confirmation by patching");
  }
  out.status = "found";
  return done();
}

}  // namespace degen
