// Markdown writer (see markdown.h). Every piece of text from the inputs goes through md_escape or
// md_code; summary paragraphs keep their `code` spans.
#include "report/markdown.h"

#include <algorithm>
#include <functional>

#include "report/common.h"
#include "report/escape.h"
#include "report/json.h"
#include "util/error.h"

namespace degen::report {

using nlohmann::json;

namespace {

// Rows each table may show; a section that does not fit the remaining budget is written again
// with smaller caps (scaled()) before it is dropped.
struct Caps {
  size_t sweep = 200, layers = 96, cases = 40, subop = 40, reasons = 10, text_bytes = 600;
  Caps scaled(double f) const {
    auto k = [f](size_t n) { return std::max<size_t>(3, static_cast<size_t>(static_cast<double>(n) * f)); };
    return {k(sweep), k(layers), k(cases), k(subop), k(reasons), std::max<size_t>(80, k(text_bytes))};
  }
};

std::string md_inline(const std::string& text) {
  std::string o;
  for (const auto& [code, part] : split_code(text)) o += code ? md_code(part) : md_escape(part);
  return o;
}

std::string s(const json& v) { return v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump(); }

std::string row(const std::vector<std::string>& cells) {
  std::string o = "|";
  for (const auto& c : cells) o += " " + c + " |";
  return o + "\n";
}

std::string header(const std::vector<std::string>& cells, const std::string& align = "") {
  std::string o = row(cells) + "|";
  for (size_t i = 0; i < cells.size(); ++i) o += (i < align.size() && align[i] == 'r') ? " ---: |" : " --- |";
  return o + "\n";
}

std::string verdict_cell(const std::string& v) { return v == "bad" || v == "error" ? "**" + md_escape(v) + "**" : md_escape(v); }

std::string opt_int_str(const json& v) { return v.is_number() ? std::to_string(v.get<int64_t>()) : "-"; }

// Indices of the rows to show when a table has more than `max`: the first ones, plus a window
// around `focus` when it would be cut.
std::vector<size_t> pick_rows(size_t n, size_t max, std::optional<size_t> focus) {
  std::vector<size_t> out;
  if (n <= max) {
    for (size_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  size_t head = max;
  if (focus && *focus >= max) head = max / 2;
  for (size_t i = 0; i < head; ++i) out.push_back(i);
  if (focus && *focus >= head) {
    const size_t lo = std::max(head, *focus >= max / 4 ? *focus - max / 4 : 0);
    for (size_t i = lo; i < n && out.size() < max; ++i) out.push_back(i);
  }
  return out;
}

std::string cut_note(size_t shown, size_t total, const std::string& what) {
  if (shown >= total) return "";
  return cat("\n_", total - shown, " of ", total, " ", what, " left out to fit a comment; the HTML and JSON reports have them all._\n");
}

std::string bisect_md(const json& b, const Caps& caps) {
  // note: its paragraph opens the report (the summary), so the section holds the details only.
  std::string o = cat("## Bisect: ", md_escape(s(b["status"])), "\n\n");
  o += header({"", ""});
  o += row({"bad", md_code(s(b["bad"]))});
  o += row({"good", md_code(s(b["good"]))});
  if (!b["culprit_toggles"].empty()) {
    std::string t;
    for (const json& x : b["culprit_toggles"]) t += (t.empty() ? "" : ", ") + md_code(s(x));
    o += row({"culprit toggles", t});
  }
  if (!b["culprit_layers"].empty()) {
    std::string t;
    for (const json& x : b["culprit_layers"]) t += (t.empty() ? "" : ", ") + x.dump();
    o += row({"culprit layers", t});
    o += row({"minimal bad", md_code(s(b["minimal_bad"]))});
  }
  if (b["patch"].is_object())
    o += row({"patched", md_code(s(b["patch"].value("config", json()))) +
                             (b["patch"].value("fixes", false) ? " is good again (confirmed)" : " is still bad")});
  for (const json& n : b["named_ops"]) o += row({"operation", md_code(cat(s(n["op"]), "-", n["layer"].dump()))});
  o += row({"evaluations", opt_int_str(b["evaluations"])});
  o += "\n";
  for (const json& r : b["subop"]) {
    o += cat("Sub-operations of layer ", opt_int_str(r["layer"]), " (", md_escape(s(r["kind"])), ", ", md_escape(s(r["mode"])),
             " mode, case ", md_code(s(r["case"])), ", golden input injected; floor: ", md_code(s(r["floor_config"])), "):\n\n");
    o += header({"op", "rel_l2", "floor", "limit", ""}, "lrrrl");
    const json& rows = r["rows"];
    const auto pick = pick_rows(rows.size(), caps.subop, std::nullopt);
    for (size_t i : pick) {
      const json& x = rows[i];
      const bool first = r["first_break"].is_string() && r["first_break"] == x["step"];
      std::string mark = first ? "**first over its floor**" : x["pass"].get<bool>() ? "" : "over";
      if (x["nonfinite"].is_number() && x["nonfinite"].get<int64_t>() > 0) mark += cat(" (", x["nonfinite"].dump(), " non-finite)");
      o += row({md_code(s(x["step"])), fmt_sci(as_num(x["rel_l2"])), fmt_sci(as_num(x["floor"])), fmt_sci(as_num(x["limit"])), mark});
    }
    o += cut_note(pick.size(), rows.size(), "operations") + "\n";
  }
  return o;
}

std::string sweep_md(const json& sw, const Caps& caps) {
  std::string o = cat("## Sweep ", md_code(s(sw["name"])), ": ", sw["results"].dump());
  if (sw["cells"].is_number()) o += cat(" of ", sw["cells"].dump());
  o += " cells\n\n";
  if (!s(sw["base"]).empty()) o += cat("Base: ", md_code(s(sw["base"])), ". ");
  std::string counts;
  for (const char* k : {"bad", "error", "model-intrinsic", "good", "untestable"})
    if (sw["counts"].value(k, 0) > 0) counts += cat(counts.empty() ? "" : ", ", sw["counts"].value(k, 0), " ", k);
  o += cat("Verdicts: ", counts.empty() ? "none" : counts, ".\n\n");
  const json& rows = sw["rows"];
  o += header({"#", "cell", "verdict", "worst layer", "kld_mean", "seq_rep_4", "loop onset", "s", "reason"}, "rllrrrrrl");
  const auto pick = pick_rows(rows.size(), caps.sweep, std::nullopt);
  for (size_t i : pick) {
    const json& r = rows[i];
    o += row({opt_int_str(r["index"]), md_code(s(r["cell"])), verdict_cell(s(r["verdict"])), opt_int_str(r["worst_layer"]),
              fmt_sci(as_num(r["kld_mean"])), fmt_fixed(as_num(r["seq_rep_4"]), 3), opt_int_str(r["loop_onset"]),
              fmt_fixed(as_num(r["seconds"]), 1), md_escape(utf8_truncate(s(r["reason"]), 200))});
  }
  o += cut_note(pick.size(), rows.size(), "cells");
  if (!sw["missing"].empty()) {
    o += cat("\n", sw["missing"].size(), " cells have no result (a shard not given, or the sweep still running): ");
    for (size_t i = 0; i < sw["missing"].size() && i < 10; ++i) o += cat(i ? ", " : "", md_code(s(sw["missing"][i])));
    if (sw["missing"].size() > 10) o += cat(" and ", sw["missing"].size() - 10, " more");
    o += ".\n";
  }
  for (const json& w : sw["warnings"]) o += cat("\n> warning: ", md_escape(s(w)), "\n");
  if (!sw["main_effects"].empty()) {
    o += "\nMain effects (bad cells with the value, and without it):\n\n";
    o += header({"axis", "value", "bad with", "bad without"}, "llrr");
    for (const json& e : sw["main_effects"])
      o += row({md_escape(s(e["axis"])), md_code(s(e["value"])), cat(e["bad_with"].dump(), "/", e["with"].dump()),
                cat(e["bad_without"].dump(), "/", e["without"].dump())});
  }
  return o + "\n";
}

std::string layers_md(const json& c, const Caps& caps) {
  const json& layers = c["layers"];
  if (layers.empty()) return "";
  std::optional<size_t> focus;
  if (c["first_break"].is_object()) focus = c["first_break"]["layer"].get<size_t>();
  std::string o = cat("Per layer, worst over ", c["cases"].size(),
                      " cases (rel_l2; drift: teacher-forced, iso: golden input injected; limit: what iso may reach):\n\n");
  o += header({"layer", "drift prefill", "drift decode", "iso prefill", "iso decode", "floor", "limit", "floor_ratio", ""},
              "lrrrrrrrl");
  const auto pick = pick_rows(layers.size(), caps.layers, focus);
  for (size_t i : pick) {
    const json& l = layers[i];
    std::string mark;
    if (!l["first_break_cases"].empty()) mark = "**← first break**";
    else if (!l["pass"].get<bool>()) mark = "over";
    if (l["nonfinite"].get<bool>()) mark += " non-finite";
    auto cell = [&](const char* k) {
      std::string v = fmt_sci(as_num(l[k]));
      return !l["first_break_cases"].empty() && std::string(k).rfind("iso", 0) == 0 ? "**" + v + "**" : v;
    };
    o += row({cat(l["layer"].dump(), " ", md_escape(s(l["kind"]))), cell("drift_prefill"), cell("drift_decode"), cell("iso_prefill"),
              cell("iso_decode"), fmt_sci(as_num(l["floor_prefill"])), fmt_sci(as_num(l["limit_prefill"])),
              fmt_sci(as_num(l["floor_ratio"])), mark});
  }
  return o + cut_note(pick.size(), layers.size(), "layers") + "\n";
}

std::string cases_md(const json& c, const Caps& caps) {
  const json& cases = c["cases"];
  if (cases.empty()) return "";
  std::string o = header({"case", "verdict", "KLD prefill", "KLD decode", "top-1", "diverges at", "loop onset", "degenerate"}, "llrrrrrl");
  const auto pick = pick_rows(cases.size(), caps.cases, std::nullopt);
  for (size_t i : pick) {
    const json& k = cases[i];
    const json& g = k["generation"];
    std::string degen = g["degenerate"].get<bool>() ? md_escape(s(g["rule"])) : "no";
    if (g["golden_degenerate"].get<bool>()) degen += cat(" (golden: ", md_escape(s(g["golden_rule"])), ")");
    o += row({md_code(s(k["id"])), verdict_cell(s(k["verdict"])), fmt_sci(as_num(k["kld_mean_prefill"])),
              fmt_sci(as_num(k["kld_mean_decode"])),
              k["same_top_p"].is_null() ? "-" : fmt_fixed(as_num(k["same_top_p"]).value() * 100, 1) + "%",
              opt_int_str(g["first_divergence"]), opt_int_str(g["loop_onset"]), degen});
  }
  o += cut_note(pick.size(), cases.size(), "cases");
  std::string reasons;
  size_t listed = 0;
  for (const json& k : cases) {
    if (k["reasons"].empty() || listed >= caps.reasons) continue;
    ++listed;
    reasons += cat("- ", md_code(s(k["id"])), ": ");
    for (size_t i = 0; i < k["reasons"].size() && i < 4; ++i) reasons += cat(i ? "; " : "", md_escape(s(k["reasons"][i])));
    reasons += "\n";
  }
  if (!reasons.empty()) o += "\nReasons:\n\n" + reasons;
  return o + "\n";
}

// Each case's golden and tested text side by side (when the report decoded them: json.h), with where
// they part. The texts show what a user sees, which the figures above may not: a fault can move the
// logits and the layers over their floors while the text stays the reference's.
std::string texts_md(const json& c, const Caps& caps) {
  std::string rows;
  size_t shown = 0, all = 0;
  for (const json& k : c["cases"]) {
    const json& t = k["generation"]["text"];
    if (!t.is_object()) continue;
    if (all++ >= caps.cases) continue;
    ++shown;
    const std::string golden = s(t["golden"]), tested = s(t["tested"]);
    const size_t n = t["common_prefix_bytes"].is_number_unsigned() ? t["common_prefix_bytes"].get<size_t>() : 0;
    const std::string part = golden == tested ? "the same text" : cat("differ from byte ", n);
    rows += row({md_code(s(k["id"])), md_escape(utf8_truncate(golden, caps.text_bytes)),
                 md_escape(utf8_truncate(tested, caps.text_bytes)), part});
  }
  if (all == 0) return "";
  return "Text, golden and tested side by side:\n\n" + header({"case", "golden (CPU reference)", "tested", ""}) + rows +
         cut_note(shown, all, "texts") + "\n";
}

// compare --server: each case's decode path (the engine's own per-step distributions against the
// reference over its sequence) and the serving probes, one row per case and per probe.
std::string serving_md(const json& c, const Caps& caps) {
  const json& cases = c["cases"];
  std::string dp, probes;
  size_t dp_rows = 0, dp_all = 0, probe_rows = 0, probe_all = 0;
  for (const json& k : cases) {
    const json& g = k["generation"];
    const json& d = g.value("decode_path", json());
    if (d.is_object()) {
      if (dp_rows++ < caps.cases) {
        std::string first = d["first_bad_step"].is_number() ? "**" + opt_int_str(d["first_bad_step"]) + "**" : "-";
        dp += row({md_code(s(k["id"])), cat(opt_int_str(d["scored"]), " of ", opt_int_str(d["steps"])), fmt_sci(as_num(d["mean_kld"])),
                   fmt_sci(as_num(d["max_kld"])), fmt_sci(as_num(d["limit"])), first, fmt_sci(as_num(d["prefill_kld"])),
                   fmt_sci(as_num(d["self_kld"])), md_escape(s(g.value("agreement", json())))});
      }
      ++dp_all;
    }
    for (const json& p : g.value("probes", json::array())) {
      if (probe_rows++ < caps.cases) {
        probes += row({md_code(s(k["id"])), md_escape(s(p["probe"])), verdict_cell(s(p["verdict"])), opt_int_str(p["first_difference"]),
                       fmt_sci(as_num(p["max_kld"])), fmt_sci(as_num(p["limit"])), md_escape(utf8_truncate(probe_detail(p), 200))});
      }
      ++probe_all;
    }
  }
  std::string o;
  if (dp_all > 0)
    o += "Decode path (the server's distribution at each generated step against the reference over the same tokens; "
         "prefill: the server's own prefill of those tokens at the first bad step; self: its decode against that prefill):\n\n" +
         header({"case", "steps scored", "KLD mean", "KLD max", "step limit", "first bad step", "prefill KLD", "self KLD", "greedy agreement"},
                "lrrrrrrrl") +
         dp + cut_note(std::min(dp_rows, caps.cases), dp_all, "cases") + "\n";
  if (probe_all > 0)
    o += "Serving probes (each a differential measurement on the server itself):\n\n" +
         header({"case", "probe", "verdict", "first difference", "KLD max", "limit", "detail"}, "lllrrrl") + probes +
         cut_note(std::min(probe_rows, caps.cases), probe_all, "probe rows") + "\n";
  return o;
}

std::string config_md(const json& c) {
  std::string o = "Configuration and model:\n\n" + header({"", ""});
  auto add = [&](const std::string& k, const std::string& v) { o += row({k, v}); };
  add("config", md_code(s(c["config"])));
  if (c["backend"].is_string()) add("backend", md_code(s(c["backend"])));
  add("golden record", md_code(s(c["golden"])) + (c["suite"].is_string() ? cat(" (suite ", md_code(s(c["suite"])), ")") : ""));
  if (!s(c["model"]).empty()) add("model", md_code(s(c["model"])));
  if (!s(c["model_fingerprint"]).empty()) add("model fingerprint", md_code(s(c["model_fingerprint"])));
  if (c["record_fingerprint"].is_string() && c["record_fingerprint"] != c["model_fingerprint"])
    add("record made for", md_code(s(c["record_fingerprint"])) + " (compared with --allow-model-mismatch)");
  if (c["weights_differ"].get<bool>()) add("weights", "differ from the record's model (same fingerprint)");
  if (c["noise_floors"].is_string())
    add("noise floors", md_escape(s(c["noise_floors"])) +
                            (c["noise_floors_reason"].is_string() ? cat(" (", md_escape(s(c["noise_floors_reason"])), ")") : ""));
  if (c["seconds"].is_number()) add("time", fmt_fixed(as_num(c["seconds"]), 2) + " s");
  return o + "\n";
}

std::string compare_md(const json& c, const Caps& caps) {
  std::string o = cat("## Compare ", md_code(s(c["config"])), ": ", verdict_cell(s(c["verdict"])), "\n\n");
  if (c["verdict"] == "untestable") return o + cat("Untestable: ", md_escape(s(c["reason"])), "\n\n") + config_md(c);
  return o + layers_md(c, caps) + cases_md(c, caps) + texts_md(c, caps) + serving_md(c, caps) + config_md(c);
}

}  // namespace

std::string render_markdown(const json& doc) {
  const std::string footer = cat("\n---\n<sub>degenbisect ", md_escape(s(doc["tool_version"])), " report, schema ",
                                 doc["schema_version"].dump(), "</sub>\n");
  std::string o = cat("# degenbisect report: ", verdict_cell(s(doc["verdict"])), "\n\n");
  for (const json& p : doc["summary"]) o += md_inline(s(p)) + "\n\n";
  std::vector<std::function<std::string(const Caps&)>> sections;
  for (const json& b : doc["bisects"]) sections.push_back([&b](const Caps& c) { return bisect_md(b, c); });
  for (const json& sw : doc["sweeps"]) sections.push_back([&sw](const Caps& c) { return sweep_md(sw, c); });
  for (const json& c : doc["compares"]) sections.push_back([&c](const Caps& k) { return compare_md(c, k); });
  size_t dropped = 0;
  const size_t reserve = footer.size() + 200;
  for (const auto& section : sections) {
    bool added = false;
    for (double f : {1.0, 0.5, 0.25, 0.1, 0.03}) {
      if (dropped > 0) break;  // keep the order: nothing after a dropped section
      const std::string sec = section(Caps{}.scaled(f));
      if (o.size() + sec.size() + reserve <= kMarkdownBudget) {
        o += sec;
        added = true;
        break;
      }
    }
    if (!added) ++dropped;
  }
  if (o.size() + reserve > kMarkdownBudget) {  // the summary alone is too long
    o = utf8_truncate(o, kMarkdownBudget - reserve);
    o = o.substr(0, o.rfind('\n') + 1);
  }
  if (dropped > 0)
    o += cat("\n_", dropped, " of ", sections.size(), " sections left out to stay under ", kMarkdownBudget / 1000,
             " KB; the HTML and JSON reports have them all._\n");
  return o + footer;
}

}  // namespace degen::report
