// selftest: inject each catalogue fault, bisect, check the named layer and op (see selftest.h).
#include "diag/selftest.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

#include "diag/bisect.h"
#include "diag/evaluate.h"
#include "engine/faults.h"
#include "diag/subop.h"
#include "util/error.h"

namespace degen {

using nlohmann::json;

Suite selftest_suite() {
  return parse_suite(R"({
    "suite": "selftest",
    "description": "built-in suite of degenbisect selftest: one chat turn and one raw text, short generations",
    "defaults": {"max_new_tokens": 6},
    "cases": [
      {"id": "chat", "prompt": "What is 2+2? Answer briefly.", "thinking": false},
      {"id": "raw", "raw": "The quick brown fox jumps over the lazy dog. The quick brown fox"}
    ]})",
                     "built-in selftest suite");
}

namespace {

// Up to n layers spread over `ls` (first, last, then the middle ones).
std::vector<int> pick_layers(const std::vector<int>& ls, int n) {
  if (static_cast<int>(ls.size()) <= n) return ls;
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(ls[static_cast<size_t>((ls.size() - 1) * i / std::max(1, n - 1))]);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> kind_layers(const ModelConfig& cfg, LayerKind k) {
  std::vector<int> out;
  for (int l = 0; l < cfg.num_layers; ++l)
    if (cfg.layer_types[static_cast<size_t>(l)] == k) out.push_back(l);
  return out;
}

// A model-level fault's row: the toggle named, and for MTP faults the op of the minimal bad run's MTP
// checks (the rolled-back state, the head).
void judge_model_row(SelftestRow& row, const FaultInfo& fi, const BisectOutcome& o) {
  const FaultInfo* f = &fi;
  bool ok = o.culprit_toggles == std::vector<std::string>{std::string("fault:") + f->name};
  // MTP faults: the op comes from the minimal bad run's MTP checks (the rolled-back state, the head).
  if (f->needs_mtp)
    if (auto op = mtp_culprit_op(o.minimal_summary)) {
      row.found_op = op->op;
      if (op->layer >= 0) row.found_layers = {op->layer};
    }
  const bool ok_op = !f->needs_mtp || row.found_op == f->op;
  row.status = ok && ok_op ? "pass" : "fail";
  if (!ok) row.note = "wrong toggle named";
  else if (!ok_op) row.note = row.found_op.empty() ? "no MTP op named" : "wrong op";
}

void judge_serving_row(SelftestRow& row, const FaultInfo& fi, int layer, const BisectOutcome& o) {
  const FaultInfo* f = &fi;
  // A serving fault: the layer and op from the minimal bad run's serving-state check (or the MTP
  // check's rolled-back state), and the mechanism it names.
  const auto sop = serving_culprit(o.minimal_summary, f->mechanism);
  if (sop) row.found_op = cat(sop->op, " (", sop->mechanism, ")");
  const bool ok_layer = o.culprit_layers == std::vector<int>{layer} && sop && sop->layer == layer;
  const bool ok_op = sop && sop->op == f->op;
  row.status = ok_layer && ok_op ? "pass" : "fail";
  if (!sop) row.note = cat("no ", f->mechanism, " check named a layer");
  else if (!ok_layer) row.note = cat("wrong layer (bisect ", o.culprit_layers.size() == 1 ? o.culprit_layers[0] : -1,
                                     ", ", sop->mechanism, " check ", sop->layer, ")");
  else if (!ok_op) row.note = "wrong op";
}

// The work list: (fault, layer), layer -1 for model-level faults, -2 for a fault no layer of this
// model can host.
std::vector<std::pair<const FaultInfo*, int>> work_list(const ModelConfig& cfg, const SelftestOptions& opt) {
  std::vector<std::pair<const FaultInfo*, int>> work;
  for (const FaultInfo& f : fault_catalogue()) {
    if (!opt.faults.empty() && std::find(opt.faults.begin(), opt.faults.end(), f.name) == opt.faults.end()) continue;
    std::vector<int> layers;
    switch (f.site) {
      case FaultSite::full_layer: layers = pick_layers(kind_layers(cfg, LayerKind::full), opt.layers_per_kind); break;
      case FaultSite::linear_layer: layers = pick_layers(kind_layers(cfg, LayerKind::linear), opt.layers_per_kind); break;
      case FaultSite::any_layer: {
        layers = pick_layers(kind_layers(cfg, LayerKind::linear), opt.layers_per_kind);
        auto full = pick_layers(kind_layers(cfg, LayerKind::full), opt.layers_per_kind);
        layers.insert(layers.end(), full.begin(), full.end());
        std::sort(layers.begin(), layers.end());
        break;
      }
      case FaultSite::moe_layer: {
        std::vector<int> moe;
        for (int l = 0; l < cfg.num_layers; ++l)
          if (cfg.is_moe_layer(l)) moe.push_back(l);
        layers = pick_layers(moe, opt.layers_per_kind);
        if (layers.empty()) work.push_back({&f, -2});  // not applicable: reported as skipped
        break;
      }
      case FaultSite::model: work.push_back({&f, -1}); break;
    }
    for (int l : layers) work.push_back({&f, l});
  }
  return work;
}

// The run that injects fault f at `layer` (-1: model-level) on top of `base`, with what its mechanism
// needs: its serving toggles (mtp=2 among them), else MTP drafts for a drafting fault, and tensor-
// parallel ranks for a fault of the all-reduces.
RunConfig injected(const RunConfig& base, const FaultInfo& f, int layer) {
  RunConfig rc = base;
  if (f.needs) rc = with_toggles_of(rc, fault_needs(f), [](const Toggle&) { return true; });
  else if (f.needs_mtp) rc.mtp = 2;
  if (f.needs_tp && base.tp == 1) rc = rc.with_tp(2);
  rc.faults.push_back({f.name, layer >= 0 ? LayerScope::of_layers({layer}) : LayerScope{}});
  return rc;
}

// What the progress line shows of that run: the toggles added to the base ("tp=2,fault=NAME@3").
std::string injected_label(const FaultInfo& f, int layer, const RunConfig& base) {
  std::string label = layer >= 0 ? cat("fault=", f.name, "@", layer) : cat("fault=", f.name);
  if (f.needs) label = cat(f.needs, ",", label);
  else if (f.needs_mtp) label = "mtp=2," + label;
  if (f.needs_tp && base.tp == 1) label = "tp=2," + label;
  return label;
}

}  // namespace

std::vector<SelftestRow> run_selftest(const GoldenRecord& rec, const Model& model, const Tokenizer* tok,
                                      const SelftestOptions& opt, const BackendFactory& factory, std::FILE* progress) {
  const ModelConfig& cfg = model.config;
  CompareOptions base;
  base.cases = opt.cases;
  // One evaluation per distinct configuration for the whole run: every fault's bisection asks for
  // its good configuration (the base: the same for every fault of a kind), which was evaluated
  // afresh for each fault, a third of the run. An untestable configuration is not kept: its
  // evaluation throws again, and each bisection records it as before.
  auto memo = std::make_shared<std::map<std::string, CellSummary>>();
  CellEvaluator ev = [memo, fresh = compare_evaluator(rec, model, tok, base, factory)](const RunConfig& rc) {
    const std::string key = rc.str();
    auto it = memo->find(key);
    if (it == memo->end()) it = memo->emplace(key, fresh(rc)).first;
    return it->second;
  };
  const RunConfig& base_rc = opt.base;
  SubopCache subop_cache;  // the reference and floor runs of each (layer, mode), made once
  const std::vector<std::pair<const FaultInfo*, int>> work = work_list(cfg, opt);

  std::vector<SelftestRow> rows;
  size_t k = 0;
  for (const auto& [f, layer] : work) {
    ++k;
    SelftestRow row;
    row.fault = f->name;
    row.site = fault_site_name(f->site);
    row.layer = layer < 0 ? -1 : layer;
    row.expected_op = f->op;
    auto t0 = std::chrono::steady_clock::now();
    if (layer == -2) {
      row.status = "skip";
      row.note = "no layer of this model can host it (dense model)";
      rows.push_back(row);
      continue;
    }
    if (progress) std::fprintf(progress, "[%zu/%zu] %s\n", k, work.size(), injected_label(*f, layer, base_rc).c_str());
    try {
      RunConfig bad = injected(base_rc, *f, layer);
      validate_run_config(bad, cfg);
      std::string why = bad.untestable_reason(true);
      BisectOracle oracle(ev, std::nullopt);
      BisectOutcome o = bisect(implicit_good(bad), false, bad, cfg, oracle);
      row.evaluations = o.evaluations;
      row.found_toggles = o.culprit_toggles;
      row.found_layers = o.culprit_layers;
      if (o.status == "untestable") {
        row.status = "skip";
        row.note = o.bad_summary.reason;
      } else if (o.status == "bad-is-good" && f->magnitude_dependent) {
        row.status = "skip";
        row.note = "not observable on this model: the fault needs larger activations than it has";
      } else if (o.status != "found") {
        row.status = "fail";
        row.note = cat("bisect status ", o.status, " (the injected fault did not make the run bad: ",
                       o.bad_summary.verdict, ")");
      } else if (layer < 0) {
        judge_model_row(row, *f, o);
      } else if (f->mechanism) {
        judge_serving_row(row, *f, layer, o);
      } else {
        if (o.culprit_layers.size() == 1) {
          auto reps = subop_analysis(rec, model, o.minimal_bad, o.culprit_layers[0], factory, 0, 64, &subop_cache);
          if (auto op = named_op(reps)) row.found_op = *op;
        }
        bool ok_layer = o.culprit_layers == std::vector<int>{layer};
        bool ok_op = row.found_op == f->op;
        row.status = ok_layer && ok_op ? "pass" : "fail";
        if (!ok_layer) row.note = "wrong layer";
        else if (!ok_op) row.note = row.found_op.empty() ? "no op over its floor" : "wrong op";
        (void)why;
      }
    } catch (const UntestableError& e) {
      row.status = "skip";
      row.note = e.what();
    }
    row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rows.push_back(row);
  }
  return rows;
}

std::string selftest_table(const std::vector<SelftestRow>& rows) {
  std::string s;
  char b[512];
  std::snprintf(b, sizeof b, "%-24s %-6s %-13s %-12s %-12s %-5s %-6s %s\n", "fault", "layer", "found layers",
                "expected op", "found op", "evals", "result", "note");
  s += b;
  int pass = 0, fail = 0, skip = 0;
  for (const auto& r : rows) {
    std::string fl;
    for (int l : r.found_layers) fl += (fl.empty() ? "" : ",") + std::to_string(l);
    if (fl.empty()) fl = r.layer < 0 && !r.found_toggles.empty() ? "(model)" : "-";
    std::snprintf(b, sizeof b, "%-24s %-6s %-13s %-12s %-12s %-5d %-6s %s\n", r.fault.c_str(),
                  r.layer < 0 ? "model" : std::to_string(r.layer).c_str(), fl.c_str(), r.expected_op.c_str(),
                  r.found_op.empty() ? "-" : r.found_op.c_str(), r.evaluations, r.status.c_str(), r.note.c_str());
    s += b;
    pass += r.status == "pass";
    fail += r.status == "fail";
    skip += r.status == "skip";
  }
  s += cat("selftest: ", pass, " pass, ", fail, " fail, ", skip, " skip\n");
  return s;
}

json selftest_json(const std::vector<SelftestRow>& rows) {
  json a = json::array();
  for (const auto& r : rows)
    a.push_back({{"fault", r.fault}, {"site", r.site}, {"layer", r.layer}, {"expected_op", r.expected_op},
                 {"found_layers", r.found_layers}, {"found_op", r.found_op}, {"found_toggles", r.found_toggles},
                 {"evaluations", r.evaluations}, {"seconds", r.seconds}, {"status", r.status}, {"note", r.note}});
  return a;
}

}  // namespace degen
