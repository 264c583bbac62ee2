// HTML writer (see html.h). All text from the inputs goes through html_escape (or svg's
// xml_escape); nothing else is interpolated into markup.
#include "report/html.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "report/common.h"
#include "report/escape.h"
#include "report/svg.h"
#include "util/error.h"

namespace degen::report {

using nlohmann::json;

namespace {

constexpr size_t kMaxKldPlots = 24;
constexpr size_t kMaxTableRows = 2000;

const char* const kCss = R"CSS(
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#f6f7f9;line-height:1.45}
main{max-width:1160px;margin:0 auto;padding:16px 24px 40px}
h1{font-size:24px;margin:8px 0 12px}h2{font-size:19px;margin:28px 0 10px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 8px}h4{font-size:13px;margin:0 0 4px;color:#444}
section{background:#fff;border:1px solid #e2e4e8;border-radius:6px;padding:6px 18px 16px;margin:18px 0}
.summary p{background:#fff;border-left:4px solid #888;padding:8px 12px;margin:8px 0}
.summary p.bad{border-color:#c62828}.summary p.good{border-color:#2e7d32}
code{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.9em;background:#f0f1f3;padding:0 3px;border-radius:3px;overflow-wrap:anywhere}
.v{display:inline-block;padding:0 7px;border-radius:10px;color:#fff;font-size:.85em;font-weight:600}
.v-good{background:#2e7d32}.v-bad{background:#c62828}.v-model-intrinsic{background:#ef6c00}.v-untestable{background:#9e9e9e}.v-error{background:#6a1b9a}.v-none{background:#555}.v-not{background:#9e9e9e}
table{border-collapse:collapse;font-size:13px;margin:8px 0;max-width:100%}
th,td{border:1px solid #dde;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f2f5}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.sortable th{cursor:pointer}table.sortable th:hover{background:#e3e7ee}
tr.culprit td{background:#fdecea;font-weight:600}tr.over td{background:#fff6f5}
.plot,.grid{max-width:100%;height:auto;display:block;margin:8px 0}
.plots{display:flex;flex-wrap:wrap;gap:8px}
.sbs{display:grid;grid-template-columns:1fr 1fr;gap:12px;margin:6px 0 14px}
.sbs .loop{outline:2px solid #c62828;background:#ffebee}.sbs .loop-label{color:#c62828;font-weight:normal;font-size:12px}
.sbs pre{white-space:pre-wrap;word-break:break-word;background:#fafafa;border:1px solid #e0e0e0;padding:8px;margin:0;font-size:12.5px;max-height:360px;overflow:auto}
.firstbad{color:#c62828;font-weight:700}
mark{background:#ffe0b2;color:#7a2e00;border-bottom:2px solid #ef6c00}
.note{color:#555;font-size:13px}.warn{color:#8a4b00}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}
footer{color:#666;font-size:12px;margin-top:24px}
)CSS";

// Sorting only: click a header to sort by that column (numbers numerically, the rest as text).
const char* const kJs = R"JS(
document.querySelectorAll('table.sortable').forEach(function(t){
  t.querySelectorAll('th').forEach(function(th,i){
    th.addEventListener('click',function(){
      var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows),asc=th.dataset.dir!=='asc';
      th.dataset.dir=asc?'asc':'desc';
      rows.sort(function(x,y){
        var a=x.cells[i].textContent.trim(),c=y.cells[i].textContent.trim(),na=parseFloat(a),nc=parseFloat(c);
        var r=(!isNaN(na)&&!isNaN(nc))?na-nc:a.localeCompare(c);
        return asc?r:-r;});
      rows.forEach(function(r){b.appendChild(r);});});});});
)JS";

std::string s(const json& v) { return v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump(); }
std::string h(const std::string& t) { return html_escape(t); }
// Code; configurations may break after their commas (<wbr>) rather than anywhere.
std::string code(const std::string& t) {
  std::string e = h(t), o;
  for (char c : e) {
    o += c;
    if (c == ',') o += "<wbr>";
  }
  return "<code>" + o + "</code>";
}
std::string badge(const std::string& v) { return "<span class=\"v v-" + h(v.empty() ? "none" : v) + "\">" + h(v) + "</span>"; }
std::string inline_text(const std::string& t) {
  std::string o;
  for (const auto& [c, part] : split_code(t)) o += c ? code(part) : h(part);
  return o;
}
std::string opt_int_str(const json& v) { return v.is_number() ? std::to_string(v.get<int64_t>()) : "-"; }
std::string num(const json& v) { return fmt_sci(as_num(v)); }

std::string th_row(const std::vector<std::string>& cols) {
  std::string o = "<thead><tr>";
  for (const auto& c : cols) o += "<th>" + h(c) + "</th>";
  return o + "</tr></thead>";
}

// ---- summary ----

std::string summary_html(const json& doc) {
  std::string o = "<div class=\"summary\">";
  for (const json& p : doc["summary"]) {
    const std::string t = s(p);
    const std::string cls = t.find(" is bad") != std::string::npos || t.find(" bad.") != std::string::npos ? "bad" : "";
    o += "<p class=\"" + cls + "\">" + inline_text(t) + "</p>";
  }
  return o + "</div>";
}

// ---- bisect ----

std::string bisect_html(const json& b, size_t idx) {
  std::string o = "<section id=\"bisect-" + std::to_string(idx) + "\"><h2>Bisect " + badge(s(b["verdict"])) + " <span class=\"note\">" +
                  h(s(b["status"])) + "</span></h2>";
  // note: its paragraph opens the report (the summary), so the section holds the details only.
  o += "<table><tbody>";
  auto row = [&](const std::string& k, const std::string& v) { o += "<tr><th>" + h(k) + "</th><td>" + v + "</td></tr>"; };
  row("bad", code(s(b["bad"])));
  row("good", code(s(b["good"])));
  std::string t;
  for (const json& x : b["culprit_toggles"]) t += (t.empty() ? "" : ", ") + code(s(x));
  if (!t.empty()) row("culprit toggles", t);
  t.clear();
  for (const json& x : b["culprit_layers"]) t += (t.empty() ? "" : ", ") + x.dump();
  if (!t.empty()) {
    row("culprit layers", h(t));
    row("minimal bad", code(s(b["minimal_bad"])));
  }
  if (b["patch"].is_object())
    row("patched", code(s(b["patch"].value("config", json()))) +
                       (b["patch"].value("fixes", false) ? " is good again (confirmed)" : " is still bad"));
  for (const json& n : b["named_ops"]) row("operation", code(s(n["op"]) + "-" + n["layer"].dump()));
  row("evaluations", h(opt_int_str(b["evaluations"])));
  if (b["model_fingerprint"].is_string()) row("model fingerprint", code(s(b["model_fingerprint"])));
  o += "</tbody></table>";
  size_t shown = 0;
  for (const json& r : b["subop"]) {
    // The sub-op errors as a plot (log scale, one point per op in forward order) and a table; the
    // first report open, the others (other mode, other layers) folded.
    const bool open = shown++ == 0;
    const json& rows = r["rows"];
    std::vector<double> x;
    std::vector<std::optional<double>> err, floor, limit, all;
    for (size_t i = 0; i < rows.size(); ++i) {
      x.push_back(static_cast<double>(i));
      err.push_back(as_num(rows[i]["rel_l2"]));
      floor.push_back(as_num(rows[i]["floor"]));
      limit.push_back(as_num(rows[i]["limit"]));
      all.insert(all.end(), {err.back(), floor.back(), limit.back()});
    }
    const std::string title = cat("Layer ", opt_int_str(r["layer"]), " sub-operations, ", s(r["mode"]), " mode (case ", s(r["case"]), ")");
    o += std::string("<details") + (open ? " open" : "") + "><summary>" + h(title) +
         (r["first_break"].is_string() ? ": first over its floor " + code(s(r["first_break"])) : std::string(": no op over its floor")) +
         "</summary>";
    if (!rows.empty()) {
      svg::Plot p(640, 260, title);
      p.x_axis({-0.5, static_cast<double>(rows.size()) - 0.5, false, true, "operation, in forward order"});
      std::vector<std::pair<double, std::string>> names;
      for (size_t i = 0; i < rows.size(); ++i) names.emplace_back(static_cast<double>(i), s(rows[i]["step"]));
      p.x_names(names);
      p.y_axis(svg::Plot::log_range(all, "rel_l2 vs reference"));
      p.step_band(x, floor, limit, "#66bb6a", 0.25, "noise floor .. limit");
      p.line(x, err, "#1565c0", 1.5, "", svg::Marker::circle, "rel_l2 (golden input)");
      for (size_t i = 0; i < rows.size(); ++i)
        if (r["first_break"].is_string() && r["first_break"] == rows[i]["step"])
          p.vrule(static_cast<double>(i), svg::kBad, "", "first over its floor: " + s(rows[i]["step"]));
      o += p.render();
    }
    o += "<details><summary>Table</summary><table class=\"sortable\">" + th_row({"#", "op", "rel_l2", "floor", "limit", ""}) + "<tbody>";
    for (size_t i = 0; i < rows.size(); ++i) {
      const json& x2 = rows[i];
      const bool first = r["first_break"].is_string() && r["first_break"] == x2["step"];
      const bool pass = x2["pass"].get<bool>();
      o += std::string("<tr") + (first ? " class=\"culprit\"" : !pass ? " class=\"over\"" : "") + "><td class=\"n\">" + std::to_string(i) +
           "</td><td>" + code(s(x2["step"])) + "</td><td class=\"n\">" + h(num(x2["rel_l2"])) + "</td><td class=\"n\">" +
           h(num(x2["floor"])) + "</td><td class=\"n\">" + h(num(x2["limit"])) + "</td><td>" +
           (first ? "first over its floor" : pass ? "" : "over") + "</td></tr>";
    }
    o += "</tbody></table></details><p class=\"note\">Floor: " + code(s(r["floor_config"])) + ", golden input injected at the layer.</p></details>";
  }
  return o + "</section>";
}

// ---- sweep ----

std::string short_verdict(const json& r) {
  const std::string v = s(r["verdict"]);
  if (v == "bad") return r["worst_layer"].is_number() ? "bad L" + r["worst_layer"].dump() : "bad";
  if (v == "model-intrinsic") return "intrinsic";
  if (v == "untestable") return "untestable";
  return v;
}

std::string cell_tip(const json& r) {
  std::string t = s(r["cell"]) + ": " + s(r["verdict"]);
  if (!s(r["reason"]).empty()) t += " - " + s(r["reason"]);
  return utf8_truncate(t, 400);
}

std::string sweep_grid(const json& sw) {
  const json& axes = sw["axes"];
  std::map<std::string, const json*> by_values;
  for (const json& r : sw["rows"]) {
    std::string k;
    for (const json& v : r["values"]) k += s(v) + '\x1f';
    if (!r["values"].empty()) by_values[k] = &r;
  }
  std::map<std::string, int> counts;
  std::string o;
  auto legend = [&](svg::Grid& g) {
    for (const char* v : {"good", "bad", "model-intrinsic", "untestable", "error"})
      g.legend(svg::verdict_colour(v), cat(v, " (", sw["counts"].value(v, 0), ")"));
    if (!sw["missing"].empty()) g.legend(svg::kMissing, cat("no result (", sw["missing"].size(), ")"));
  };
  if (!axes.empty()) {
    // Rows: the first axis (or one row for a single axis); columns: the other axes' combinations.
    std::vector<std::vector<std::string>> vals;
    for (const json& a : axes) vals.push_back(a["values"].get<std::vector<std::string>>());
    const bool single = axes.size() == 1;
    std::vector<std::string> rows = single ? std::vector<std::string>{s(axes[0]["name"])} : vals[0];
    std::vector<std::vector<std::string>> combos = {{}};
    for (size_t a = single ? 0 : 1; a < axes.size(); ++a) {
      std::vector<std::vector<std::string>> next;
      for (const auto& c : combos)
        for (const auto& v : vals[a]) {
          auto n = c;
          n.push_back(v);
          next.push_back(n);
        }
      combos = next;
    }
    std::vector<std::string> cols;
    for (const auto& c : combos) {
      std::string l;
      for (const auto& v : c) l += (l.empty() ? "" : "\n") + v;  // one line per axis
      cols.push_back(l);
    }
    std::string col_title;
    for (size_t a = single ? 0 : 1; a < axes.size(); ++a) col_title += (col_title.empty() ? "" : " \xC2\xB7 ") + s(axes[a]["name"]);
    svg::Grid g(cat("Sweep ", s(sw["name"]), ": verdict per cell"), rows, cols, single ? "" : s(axes[0]["name"]), col_title);
    for (size_t r = 0; r < rows.size(); ++r)
      for (size_t c = 0; c < combos.size(); ++c) {
        std::string k = single ? "" : rows[r] + '\x1f';
        for (const auto& v : combos[c]) k += v + '\x1f';
        auto it = by_values.find(k);
        svg::GridCell& cell = g.at(r, c);
        if (it == by_values.end()) {
          cell.text = "no result";
          cell.tooltip = "no result for this combination";
          cell.dashed = true;
        } else {
          cell.fill = svg::verdict_colour(s((*it->second)["verdict"]));
          cell.text = short_verdict(*it->second);
          cell.tooltip = cell_tip(*it->second);
        }
      }
    legend(g);
    o += g.render();
  }
  // Extra cells (explicit fragments on top of the base): one row each.
  std::vector<const json*> extra;
  for (const json& r : sw["rows"])
    if (r["values"].empty()) extra.push_back(&r);
  if (!extra.empty()) {
    std::vector<std::string> names;
    for (const json* r : extra) names.push_back(s((*r)["cell"]));
    svg::Grid g(axes.empty() ? cat("Sweep ", s(sw["name"]), ": verdict per cell") : "Extra cells", names, {"verdict"}, "cell", "");
    for (size_t i = 0; i < extra.size(); ++i) {
      svg::GridCell& cell = g.at(i, 0);
      cell.fill = svg::verdict_colour(s((*extra[i])["verdict"]));
      cell.text = short_verdict(*extra[i]);
      cell.tooltip = cell_tip(*extra[i]);
    }
    if (axes.empty()) legend(g);
    o += g.render();
  }
  return o;
}

std::string sweep_html(const json& sw, size_t idx) {
  std::string o = "<section id=\"sweep-" + std::to_string(idx) + "\"><h2>Sweep " + code(s(sw["name"])) + ": " + h(sw["results"].dump());
  if (sw["cells"].is_number()) o += " of " + h(sw["cells"].dump());
  o += " cells</h2>";
  if (!s(sw["base"]).empty()) o += "<p>Base configuration: " + code(s(sw["base"])) + "</p>";
  o += sweep_grid(sw);
  for (const json& w : sw["warnings"]) o += "<p class=\"warn\">warning: " + h(s(w)) + "</p>";
  if (!sw["missing"].empty()) {
    o += "<p class=\"warn\">" + std::to_string(sw["missing"].size()) + " cells have no result (a shard not given, or the sweep still running): ";
    for (size_t i = 0; i < sw["missing"].size() && i < 20; ++i) o += (i ? ", " : "") + code(s(sw["missing"][i]));
    o += "</p>";
  }
  o += "<table class=\"sortable\">" + th_row({"#", "cell", "verdict", "worst layer", "kld_mean", "seq_rep_4", "loop onset", "s", "reason"}) +
       "<tbody>";
  size_t n = 0;
  for (const json& r : sw["rows"]) {
    if (++n > kMaxTableRows) break;
    o += "<tr><td class=\"n\">" + h(opt_int_str(r["index"])) + "</td><td>" + code(s(r["cell"])) + "</td><td>" + badge(s(r["verdict"])) +
         "</td><td class=\"n\">" + h(opt_int_str(r["worst_layer"])) + "</td><td class=\"n\">" + h(num(r["kld_mean"])) +
         "</td><td class=\"n\">" + h(fmt_fixed(as_num(r["seq_rep_4"]), 3)) + "</td><td class=\"n\">" + h(opt_int_str(r["loop_onset"])) +
         "</td><td class=\"n\">" + h(fmt_fixed(as_num(r["seconds"]), 1)) + "</td><td>" + h(s(r["reason"])) + "</td></tr>";
  }
  o += "</tbody></table>";
  if (sw["rows"].size() > kMaxTableRows)
    o += "<p class=\"note\">" + std::to_string(sw["rows"].size() - kMaxTableRows) + " more cells in the JSON report.</p>";
  if (!sw["main_effects"].empty()) {
    o += "<h3>Main effects</h3><table class=\"sortable\">" + th_row({"axis", "value", "bad with", "bad without"}) + "<tbody>";
    for (const json& e : sw["main_effects"])
      o += "<tr><td>" + h(s(e["axis"])) + "</td><td>" + code(s(e["value"])) + "</td><td class=\"n\">" + h(e["bad_with"].dump()) + "/" +
           h(e["with"].dump()) + "</td><td class=\"n\">" + h(e["bad_without"].dump()) + "/" + h(e["without"].dump()) + "</td></tr>";
    o += "</tbody></table>";
  }
  return o + "</section>";
}

// ---- compare ----

std::string layer_plot(const json& c) {
  const json& layers = c["layers"];
  if (layers.empty()) return "";
  std::vector<double> x;
  std::vector<std::optional<double>> iso_p, iso_d, drift_p, drift_d, floor, limit, all;
  bool have_floor = false;
  for (const json& l : layers) {
    x.push_back(l["layer"].get<double>());
    iso_p.push_back(as_num(l["iso_prefill"]));
    iso_d.push_back(as_num(l["iso_decode"]));
    drift_p.push_back(as_num(l["drift_prefill"]));
    drift_d.push_back(as_num(l["drift_decode"]));
    floor.push_back(as_num(l["floor_prefill"]));
    limit.push_back(as_num(l["limit_prefill"]));
    have_floor = have_floor || floor.back().has_value();
    all.insert(all.end(), {iso_p.back(), iso_d.back(), drift_p.back(), drift_d.back(), floor.back(), limit.back()});
  }
  svg::Plot p(std::clamp(static_cast<int>(layers.size()) * 30 + 160, 720, 1100), 330, "Per-layer error (rel_l2, worst over the cases)");
  p.x_axis({-0.5, static_cast<double>(layers.size()) - 0.5, false, true, "layer"});
  p.y_axis(svg::Plot::log_range(all, "rel_l2 (log)"));
  if (have_floor) {
    p.step_band(x, floor, limit, "#66bb6a", 0.28, "noise floor .. limit (k x floor)");
  } else {
    std::vector<std::optional<double>> zero(limit.size());
    for (size_t i = 0; i < limit.size(); ++i)
      if (limit[i]) zero[i] = 1e-300;  // from the bottom of the plot
    p.step_band(x, zero, limit, "#66bb6a", 0.18, "fixed limit (no noise floors)");
  }
  if (c["first_break"].is_object())
    p.vrule(c["first_break"]["layer"].get<double>(), svg::kBad, "", cat("first break: layer ", c["first_break"]["layer"].get<int>()));
  p.line(x, drift_p, "#757575", 1.5, "", svg::Marker::square, "drift (teacher-forced), prefill");
  p.line(x, drift_d, "#757575", 1.2, "4 3", svg::Marker::none, "drift, decode");
  p.line(x, iso_p, "#1565c0", 2, "", svg::Marker::circle, "isolated error (golden input), prefill");
  p.line(x, iso_d, "#1565c0", 1.4, "4 3", svg::Marker::triangle, "isolated error, decode");
  for (size_t i = 0; i < layers.size(); ++i) {
    const json& l = layers[i];
    if (!l["pass"].get<bool>() && iso_p[i])
      p.marker(x[i], *iso_p[i], svg::kBad, svg::Marker::circle, cat("layer ", l["layer"].dump(), " over its limit"));
    if (l["nonfinite"].get<bool>())
      p.marker(x[i], INFINITY, svg::kBad, svg::Marker::cross, cat("layer ", l["layer"].dump(), ": non-finite values"));
  }
  return p.render();
}

std::string layer_table(const json& c) {
  std::string o = "<table class=\"sortable\">" +
                  th_row({"layer", "kind", "drift prefill", "drift decode", "iso prefill", "iso decode", "floor", "limit", "floor_ratio", ""}) +
                  "<tbody>";
  for (const json& l : c["layers"]) {
    const bool first = !l["first_break_cases"].empty(), pass = l["pass"].get<bool>();
    std::string mark = first ? "first break" : pass ? "" : "over";
    if (l["nonfinite"].get<bool>()) mark += " non-finite";
    o += std::string("<tr") + (first ? " class=\"culprit\"" : !pass ? " class=\"over\"" : "") + "><td class=\"n\">" + h(l["layer"].dump()) +
         "</td><td>" + h(s(l["kind"])) + "</td>";
    for (const char* k : {"drift_prefill", "drift_decode", "iso_prefill", "iso_decode", "floor_prefill", "limit_prefill", "floor_ratio"})
      o += "<td class=\"n\">" + h(num(l[k])) + "</td>";
    o += "<td>" + h(mark) + "</td></tr>";
  }
  return o + "</tbody></table>";
}

// A per-index series of report numbers: x = 0, 1, ...; y = the value, nullopt where null.
void index_series(const json& values, std::vector<double>& x, std::vector<std::optional<double>>& y) {
  for (size_t i = 0; i < values.size(); ++i) {
    x.push_back(static_cast<double>(i));
    y.push_back(as_num(values[i]));
  }
}

std::string kld_plot(const json& k, const json& limit) {
  const json& kld = k["kld"];
  if (kld.empty()) return "";
  std::vector<double> x;
  std::vector<std::optional<double>> y;
  index_series(kld, x, y);
  svg::Plot p(720, 260, cat("KLD per position: ", s(k["id"])));
  p.x_axis({0, std::max(1.0, static_cast<double>(kld.size() - 1)), false, true, "position (teacher-forced along the golden sequence)"});
  std::vector<std::optional<double>> range = y;
  if (auto l = as_num(limit)) range.push_back(*l);
  p.y_axis(svg::Plot::log_range(range, "KLD (nats, log)"));
  if (auto l = as_num(limit)) p.hrule(*l, "#2e7d32", "5 3", "mean KLD limit");
  const auto prompt = k["prompt_tokens"].is_number() ? std::optional<int64_t>(k["prompt_tokens"].get<int64_t>()) : std::nullopt;
  const json& g = k["generation"];
  if (prompt && *prompt > 0) {
    p.vrule(static_cast<double>(*prompt - 1), "#555", "2 2", "generation starts");
    if (g["first_divergence"].is_number())
      p.vrule(static_cast<double>(*prompt - 1 + g["first_divergence"].get<int64_t>()), svg::kIntrinsic, "5 3",
              cat("first divergence (token ", g["first_divergence"].get<int64_t>(), ")"));
    if (g["loop_onset"].is_number())
      p.vrule(static_cast<double>(*prompt - 1 + g["loop_onset"].get<int64_t>()), svg::kBad, "",
              cat("loop onset (token ", g["loop_onset"].get<int64_t>(), ")"));
  }
  p.line(x, y, "#1565c0", 1.3, "", kld.size() <= 80 ? svg::Marker::circle : svg::Marker::none, "KLD (prefill mode)");
  return p.render();
}

// compare --server: the KLD of the server's distribution at each generated step against the
// reference over the same tokens, with the per-step limit and the first step over it.
std::string decode_path_plot(const json& k) {
  const json& d = k["generation"].value("decode_path", json());
  if (!d.is_object() || !d["kld"].is_array() || d["kld"].empty()) return "";
  const json& kld = d["kld"];
  std::vector<double> x;
  std::vector<std::optional<double>> y;
  index_series(kld, x, y);
  svg::Plot p(720, 240, cat("Decode path, KLD per generated step: ", s(k["id"])));
  p.x_axis({0, std::max(1.0, static_cast<double>(kld.size() - 1)), false, true, "generated step (the server's own sequence)"});
  std::vector<std::optional<double>> range = y;
  if (auto l = as_num(d["limit"])) range.push_back(*l);
  p.y_axis(svg::Plot::log_range(range, "KLD (nats, log)"));
  if (auto l = as_num(d["limit"])) p.hrule(*l, svg::kGood, "5 3", "step limit");
  if (d["first_bad_step"].is_number())
    p.vrule(static_cast<double>(d["first_bad_step"].get<int64_t>()), svg::kBad, "",
            cat("first bad step (", d["first_bad_step"].get<int64_t>(), ")"));
  p.line(x, y, "#6a1b9a", 1.3, "", kld.size() <= 80 ? svg::Marker::circle : svg::Marker::none, "KLD (decode path)");
  std::string o = p.render();
  if (d["first_bad_step"].is_number())
    o += "<p class=\"note\">First bad decode step " + h(opt_int_str(d["first_bad_step"])) + ": KLD over the limit " + h(num(d["limit"])) +
         "; the server's own prefill of the same tokens there: " + h(num(d["prefill_kld"])) + " against the reference, its decode against that prefill: " +
         h(num(d["self_kld"])) + ".</p>";
  return o;
}

// compare --server: the serving probes of every case, one row per case and probe.
std::string probes_html(const json& c) {
  std::string rows;
  for (const json& k : c["cases"])
    for (const json& p : k["generation"].value("probes", json::array())) {
      const std::string detail = h(probe_detail(p));
      rows += "<tr><td>" + code(s(k["id"])) + "</td><td>" + h(s(p["probe"])) + "</td><td>" + badge(s(p["verdict"])) + "</td><td class=\"n\">" +
              h(opt_int_str(p["first_difference"])) + "</td><td class=\"n\">" + h(num(p["max_kld"])) + "</td><td class=\"n\">" +
              h(num(p["limit"])) + "</td><td>" + detail + "</td></tr>";
    }
  if (rows.empty()) return "";
  return "<h3>Serving probes</h3><table class=\"sortable\">" +
         th_row({"case", "probe", "verdict", "first difference", "KLD max", "limit", "detail"}) + "<tbody>" + rows +
         "</tbody></table><p class=\"note\">Each probe is a differential measurement on the server itself: the case warm "
         "after a request sharing its prompt against cold (prefix-cache), beside other requests against alone (batching).</p>";
}

std::string text_pair(const json& k) {
  const json& g = k["generation"];
  std::string o = "<div class=\"sbs\">";
  if (g["text"].is_object()) {
    const json& t = g["text"];
    const std::string golden = s(t["golden"]), tested = s(t["tested"]);
    const size_t n = std::min<size_t>(t["common_prefix_bytes"].get<size_t>(), std::min(golden.size(), tested.size()));
    // Highlighted from the first difference (n); the loop, from its onset to the end, framed in red
    // and labelled with its period.
    // The first bad decode step (compare --server), marked in the tested text where its token starts.
    const json& dp = g.value("decode_path", json());
    const json& bad_at = t.value("tested_first_bad_bytes", json());
    auto side = [&](const std::string& title, const std::string& text, const json& loop_at, const char* onset_key,
                    const char* period_key, const json& first_bad_at = json()) {
      const size_t lb = loop_at.is_number_unsigned() ? std::min<size_t>(loop_at.get<size_t>(), text.size()) : text.size();
      const size_t fb = first_bad_at.is_number_unsigned() ? first_bad_at.get<size_t>() : SIZE_MAX;
      auto plain = [&](size_t a, size_t b) {  // [a, b) with the difference highlight
        std::string r;
        if (a < std::min(b, n)) r += h(text.substr(a, std::min(b, n) - a));
        if (std::max(a, n) < b) r += "<mark>" + h(text.substr(std::max(a, n), b - std::max(a, n))) + "</mark>";
        return r;
      };
      auto piece = [&](size_t a, size_t b) {  // and the first bad decode step's marker where it falls
        if (fb < a || fb >= b) return plain(a, b);
        return plain(a, fb) + "<span class=\"firstbad\" title=\"first bad decode step " + h(opt_int_str(dp.value("first_bad_step", json()))) +
               "\">&#x25BC;</span>" + plain(fb, b);
      };
      std::string body = piece(0, lb);
      std::string label;
      if (lb < text.size()) {
        label = cat("loop from token ", opt_int_str(g[onset_key]),
                    g[period_key].is_number() ? cat(", period ", g[period_key].get<int64_t>(), " tokens") : std::string());
        body += "<span class=\"loop\" title=\"" + h(label) + "\">" + piece(lb, text.size()) + "</span>";
      }
      return "<div><h4>" + h(title) + (label.empty() ? "" : " <span class=\"loop-label\">" + h(label) + "</span>") +
             "</h4><pre>" + body + "</pre></div>";
    };
    o += side("golden (CPU reference)", golden, t.value("golden_loop_bytes", json()), "golden_loop_onset", "golden_tail_period") +
         side("tested", tested, t.value("tested_loop_bytes", json()), "loop_onset", "tail_period", bad_at) + "</div>";
    o += "<p class=\"note\">Highlighted: from the first character that differs; framed in red: the loop, from its onset "
         "to the end" +
         std::string(bad_at.is_number() ? "; &#x25BC;: where the first bad decode step's token starts" : "") +
         ". Text decoded with " + h(s(t["source"])) + ".</p>";
    return o;
  }
  // No tokenizer: the token ids, highlighted from the first divergence.
  const auto d = g["first_divergence"].is_number() ? g["first_divergence"].get<size_t>() : SIZE_MAX;
  auto ids = [&](const std::string& title, const json& toks) {
    std::string t = "<div><h4>" + h(title) + " (token ids)</h4><pre>";
    for (size_t i = 0; i < toks.size(); ++i) {
      if (i == d) t += "<mark>";
      t += (i ? " " : "") + toks[i].dump();
    }
    if (d < toks.size()) t += "</mark>";
    return t + "</pre></div>";
  };
  o += ids("golden", g["golden_tokens"]) + ids("tested", g["tokens"]) + "</div>";
  o += "<p class=\"note\">No tokenizer found for the text (report --model DIR names one).</p>";
  return o;
}

std::string cases_html(const json& c) {
  std::string o = "<table class=\"sortable\">" +
                  th_row({"case", "verdict", "KLD prefill", "KLD decode", "top-1", "diverges at", "loop onset", "degenerate", "reasons"}) +
                  "<tbody>";
  for (const json& k : c["cases"]) {
    const json& g = k["generation"];
    std::string degen = g["degenerate"].get<bool>() ? s(g["rule"]) : "no";
    if (g["golden_degenerate"].get<bool>()) degen += " (golden: " + s(g["golden_rule"]) + ")";
    std::string reasons;
    for (const json& r : k["reasons"]) reasons += (reasons.empty() ? "" : "<br>") + h(s(r));
    o += "<tr><td>" + code(s(k["id"])) + "</td><td>" + badge(s(k["verdict"])) + "</td><td class=\"n\">" + h(num(k["kld_mean_prefill"])) +
         "</td><td class=\"n\">" + h(num(k["kld_mean_decode"])) + "</td><td class=\"n\">" +
         (k["same_top_p"].is_null() ? "-" : h(fmt_fixed(as_num(k["same_top_p"]).value() * 100, 1) + "%")) + "</td><td class=\"n\">" +
         h(opt_int_str(g["first_divergence"])) + "</td><td class=\"n\">" + h(opt_int_str(g["loop_onset"])) + "</td><td>" + h(degen) +
         "</td><td>" + reasons + "</td></tr>";
  }
  o += "</tbody></table><p class=\"note\">Per case below: the KLD of the teacher-forced run at each position of the golden "
       "sequence (prompt and golden continuation); the first divergence and the loop onset are tokens of the free-running "
       "output, drawn at the position that predicts them.</p>";
  // Per case: KLD along the sequence and the two texts side by side.
  size_t plotted = 0;
  for (const json& k : c["cases"]) {
    const bool open = k["verdict"] == "bad" && plotted < 3;
    o += std::string("<details") + (open ? " open" : "") + "><summary>Case " + code(s(k["id"])) + " " + badge(s(k["verdict"])) + "</summary>";
    if (plotted++ < kMaxKldPlots) o += kld_plot(k, k["kld_limit"]) + decode_path_plot(k);
    const json& g = k["generation"];
    if (g["degenerate"].get<bool>() && g["reason"].is_string())
      o += "<p class=\"note\">Tested output: " + h(s(g["reason"])) + (g["cause"].is_string() ? " (" + h(s(g["cause"])) + ")" : "") + ".</p>";
    o += text_pair(k) + "</details>";
  }
  return o;
}

std::string config_html(const json& c) {
  std::string o = "<h3>Configuration and model</h3><table><tbody>";
  auto row = [&](const std::string& k, const std::string& v) { o += "<tr><th>" + h(k) + "</th><td>" + v + "</td></tr>"; };
  row("config", code(s(c["config"])));
  if (c["backend"].is_string()) row("backend", code(s(c["backend"])));
  row("golden record", code(s(c["golden"])) + (c["suite"].is_string() ? " (suite " + code(s(c["suite"])) + ")" : ""));
  if (!s(c["model"]).empty()) row("model", code(s(c["model"])));
  if (!s(c["model_fingerprint"]).empty()) row("model fingerprint", code(s(c["model_fingerprint"])));
  if (c["record_fingerprint"].is_string() && c["record_fingerprint"] != c["model_fingerprint"])
    row("record made for", code(s(c["record_fingerprint"])) + " (compared with --allow-model-mismatch)");
  if (c["weights_differ"].get<bool>()) row("weights", "differ from the record's model (same fingerprint)");
  if (c["noise_floors"].is_string())
    row("noise floors", h(s(c["noise_floors"])) + (c["noise_floors_reason"].is_string() ? " (" + h(s(c["noise_floors_reason"])) + ")" : ""));
  if (c["seconds"].is_number()) row("time", h(fmt_fixed(as_num(c["seconds"]), 2) + " s"));
  return o + "</tbody></table>";
}

std::string compare_html(const json& c, size_t idx) {
  std::string o = "<section id=\"compare-" + std::to_string(idx) + "\"><h2>Compare " + code(s(c["config"])) + " " + badge(s(c["verdict"])) + "</h2>";
  if (c["verdict"] == "untestable") return o + "<p>Untestable: " + h(s(c["reason"])) + "</p>" + config_html(c) + "</section>";
  if (c["first_break"].is_object())
    o += "<p>Prime suspect: layer " + h(c["first_break"]["layer"].dump()) + ", the first whose isolated error (golden input injected) breaks its rule (" +
         h(s(c["first_break"]["mode"])) + " mode). Later layers whose drift grows while their own error stays low are victims.</p>";
  o += layer_plot(c) + layer_table(c) + "<h3>Cases</h3>" + cases_html(c) + probes_html(c) + config_html(c);
  return o + "</section>";
}

}  // namespace

std::string render_html(const json& doc) {
  const std::string verdict = s(doc["verdict"]);
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">";
  o += "<title>degenbisect report: " + h(verdict) + "</title><style>" + kCss + "</style></head>\n<body><main>";
  o += "<h1>degenbisect report " + badge(verdict) + "</h1>";
  o += summary_html(doc);
  std::string toc;
  size_t i = 0;
  for (const json& b : doc["bisects"]) toc += "<li><a href=\"#bisect-" + std::to_string(++i) + "\">Bisect</a> " + badge(s(b["verdict"])) + "</li>";
  i = 0;
  for (const json& sw : doc["sweeps"]) toc += "<li><a href=\"#sweep-" + std::to_string(++i) + "\">Sweep " + h(s(sw["name"])) + "</a></li>";
  i = 0;
  for (const json& c : doc["compares"])
    toc += "<li><a href=\"#compare-" + std::to_string(++i) + "\">Compare " + h(s(c["config"])) + "</a> " + badge(s(c["verdict"])) + "</li>";
  if (i + doc["bisects"].size() + doc["sweeps"].size() > 1) o += "<nav><ul>" + toc + "</ul></nav>";
  i = 0;
  for (const json& b : doc["bisects"]) o += bisect_html(b, ++i);
  i = 0;
  for (const json& sw : doc["sweeps"]) o += sweep_html(sw, ++i);
  i = 0;
  for (const json& c : doc["compares"]) o += compare_html(c, ++i);
  o += "<footer>degenbisect " + h(s(doc["tool_version"])) + " report, schema " + h(doc["schema_version"].dump()) +
       ". Metric names as in the metrics specification (nmse, rel_l2, floor_ratio, kld, seq_rep_n, loop_onset).</footer>";
  o += "</main><script>" + std::string(kJs) + "</script></body></html>\n";
  return o;
}

}  // namespace degen::report
