// compare's result as text (report/compare_text.h). What it renders: judge/result.h; the comparison
// itself: judge/compare.h (the orchestrator) over a subject (subjects/).
#include "report/compare_text.h"

#include <algorithm>
#include <cmath>
#include <iomanip>

#include "judge/format.h"
#include "util/error.h"

namespace degen {

namespace {

using json = nlohmann::json;
using metrics::Verdict;

constexpr int kModes = 2;

using compare_format::sci;

std::string fmt_pad(const std::string& s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); }

}  // namespace

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
