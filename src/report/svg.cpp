// SVG plots and grids for the HTML report (see svg.h).
#include "report/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report/escape.h"
#include "util/error.h"

namespace degen::report::svg {

namespace {

std::string f1(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

double text_width(const std::string& s, double font_px) {
  // note: a rough width for layout (no font metrics without a browser): 0.6 em per character.
  size_t chars = 0;
  for (unsigned char c : s) chars += (c & 0xC0) != 0x80;
  return static_cast<double>(chars) * font_px * 0.6;
}

std::vector<double> linear_ticks(double lo, double hi, bool integer) {
  std::vector<double> t;
  const double range = hi - lo;
  if (!(range > 0)) return {lo};
  const double raw = range / 6;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  if (integer) step = std::max(1.0, std::round(step));
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

}  // namespace

const char* verdict_colour(const std::string& v) {
  if (v == "good") return kGood;
  if (v == "bad") return kBad;
  if (v == "model-intrinsic") return kIntrinsic;
  if (v == "untestable") return kUntestable;
  if (v == "error") return kError;
  return kMissing;
}

std::string tick_label(double v, bool log) {
  char b[32];
  if (log) {
    const double e = std::round(std::log10(v));
    if (e == 0) return "1";
    std::snprintf(b, sizeof b, "1e%d", static_cast<int>(e));
    return b;
  }
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

Plot::Plot(int width, int height, std::string title) : w_(width), h_(height), title_(std::move(title)) {}

void Plot::x_names(std::vector<std::pair<double, std::string>> names) {
  double longest = 0;
  for (const auto& n : names) longest = std::max(longest, text_width(n.second, 10));
  const double extra = std::min(longest, 160.0) * 0.64;  // sin 40°
  bottom_ += extra;
  h_ += static_cast<int>(std::ceil(extra));
  x_names_ = std::move(names);
}

AxisSpec Plot::log_range(const std::vector<std::optional<double>>& values, const std::string& label) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& v : values)
    if (v && std::isfinite(*v) && *v > 0) {
      lo = std::min(lo, *v);
      hi = std::max(hi, *v);
    }
  AxisSpec a;
  a.log = true;
  a.label = label;
  if (!std::isfinite(lo)) {
    a.lo = 1e-12;
    a.hi = 1;
    return a;
  }
  // Whole decades with some room, so that points near a decade do not sit on the frame.
  a.lo = std::pow(10.0, std::floor(std::log10(lo / 1.25)));
  a.hi = std::pow(10.0, std::ceil(std::log10(hi * 1.25)));
  if (a.hi <= a.lo) a.hi = a.lo * 10;
  return a;
}

double Plot::px(double x) const {
  const double pw = w_ - left_ - right_;
  auto t = [&](double v) { return x_.log ? std::log10(v) : v; };
  const double span = t(x_.hi) - t(x_.lo);
  return left_ + (span > 0 ? (t(x) - t(x_.lo)) / span : 0.5) * pw;
}

double Plot::py(double y) const {
  const double ph = h_ - top_ - bottom_ - legend_h_;
  auto t = [&](double v) { return y_.log ? std::log10(v) : v; };
  const double span = t(y_.hi) - t(y_.lo);
  return top_ + ph - (span > 0 ? (t(y) - t(y_.lo)) / span : 0.5) * ph;
}

double Plot::clamp_y(double y, Marker& m) const {
  if (!std::isfinite(y)) {
    m = Marker::cross;
    return y_.hi;
  }
  if (y_.log && y <= y_.lo) {
    if (y <= 0) m = Marker::hollow;
    return y_.lo;
  }
  return std::min(y, y_.hi);
}

void Plot::legend_item(LegendItem it) {
  if (it.label.empty()) return;
  for (const auto& l : legend_)
    if (l.label == it.label) return;
  legend_.push_back(std::move(it));
}

std::string Plot::marker_svg(double cx, double cy, const std::string& colour, Marker m, const std::string& tooltip) const {
  const std::string tip = tooltip.empty() ? "" : "<title>" + xml_escape(tooltip) + "</title>";
  const std::string x = f1(cx), y = f1(cy);
  switch (m) {
    case Marker::none: return "";
    case Marker::circle:
      return "<circle cx=\"" + x + "\" cy=\"" + y + "\" r=\"3\" fill=\"" + colour + "\">" + tip + "</circle>";
    case Marker::hollow:
      return "<circle cx=\"" + x + "\" cy=\"" + y + "\" r=\"3.5\" fill=\"#fff\" stroke=\"" + colour + "\" stroke-width=\"1.5\">" + tip +
             "</circle>";
    case Marker::square:
      return "<rect x=\"" + f1(cx - 3) + "\" y=\"" + f1(cy - 3) + "\" width=\"6\" height=\"6\" fill=\"" + colour + "\">" + tip + "</rect>";
    case Marker::triangle:
      return "<path d=\"M" + f1(cx) + " " + f1(cy - 4) + "L" + f1(cx + 4) + " " + f1(cy + 3) + "L" + f1(cx - 4) + " " + f1(cy + 3) +
             "Z\" fill=\"" + colour + "\">" + tip + "</path>";
    case Marker::cross:
      return "<path d=\"M" + f1(cx - 4) + " " + f1(cy - 4) + "L" + f1(cx + 4) + " " + f1(cy + 4) + "M" + f1(cx + 4) + " " + f1(cy - 4) +
             "L" + f1(cx - 4) + " " + f1(cy + 4) + "\" stroke=\"" + colour + "\" stroke-width=\"2\">" + tip + "</path>";
  }
  return "";
}

void Plot::step_band(const std::vector<double>& x, const std::vector<std::optional<double>>& lo,
                     const std::vector<std::optional<double>>& hi, const std::string& colour, double opacity,
                     const std::string& label) {
  for (size_t i = 0; i < x.size() && i < lo.size() && i < hi.size(); ++i) {
    if (!lo[i] || !hi[i]) continue;
    Marker ignored = Marker::none;
    const double a = clamp_y(*lo[i], ignored), b = clamp_y(*hi[i], ignored);
    const double x0 = px(std::max(x_.lo, x[i] - 0.5)), x1 = px(std::min(x_.hi, x[i] + 0.5));
    const double y0 = py(std::max(a, b)), y1 = py(std::min(a, b));
    layers_[0].push_back("<rect x=\"" + f1(x0) + "\" y=\"" + f1(y0) + "\" width=\"" + f1(std::max(0.0, x1 - x0)) + "\" height=\"" +
                         f1(std::max(1.0, y1 - y0)) + "\" fill=\"" + colour + "\" fill-opacity=\"" + f1(opacity) + "\"/>");
  }
  legend_item({"band", colour, "", label, Marker::none, opacity});
}

void Plot::line(const std::vector<double>& x, const std::vector<std::optional<double>>& y, const std::string& colour,
                double width, const std::string& dash, Marker marker, const std::string& label) {
  std::string d, dots;
  bool pen = false;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (!y[i]) {
      pen = false;
      continue;
    }
    Marker m = marker;
    const double v = clamp_y(*y[i], m);
    const double cx = px(x[i]), cy = py(v);
    d += (pen ? "L" : "M") + f1(cx) + " " + f1(cy);
    pen = true;
    if (m != Marker::none) {
      char tip[96];
      std::snprintf(tip, sizeof tip, "%s: x=%g, %.3g", label.c_str(), x[i], *y[i]);
      dots += marker_svg(cx, cy, colour, m, tip);
    }
  }
  if (!d.empty())
    layers_[1].push_back("<path d=\"" + d + "\" fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"" + f1(width) + "\"" +
                         (dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"") + "/>" + dots);
  legend_item({"line", colour, dash, label, marker, 1});
}

void Plot::vrule(double x, const std::string& colour, const std::string& dash, const std::string& text, bool legend) {
  const double cx = px(x);
  layers_[2].push_back("<line x1=\"" + f1(cx) + "\" x2=\"" + f1(cx) + "\" y1=\"" + f1(top_) + "\" y2=\"" +
                       f1(h_ - bottom_ - legend_h_) + "\" stroke=\"" + colour + "\" stroke-width=\"1.5\"" +
                       (dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"") + "/>");
  if (!text.empty()) {
    // The label sits at the top, on the side with room; successive rules stack their labels so
    // that rules at the same x stay readable.
    const bool right_side = cx + text_width(text, 10) + 4 < w_ - right_;
    const double ty = top_ + 10 + 12 * static_cast<double>(rule_labels_++ % 4);
    layers_[2].push_back("<text x=\"" + f1(right_side ? cx + 3 : cx - 3) + "\" y=\"" + f1(ty) + "\" font-size=\"10\" fill=\"" +
                         colour + "\" text-anchor=\"" + (right_side ? "start" : "end") + "\">" + xml_escape(text) + "</text>");
  }
  if (legend) legend_item({"rule", colour, dash, text, Marker::none, 1});
}

void Plot::hrule(double y, const std::string& colour, const std::string& dash, const std::string& text) {
  Marker ignored = Marker::none;
  const double cy = py(clamp_y(y, ignored));
  layers_[2].push_back("<line x1=\"" + f1(left_) + "\" x2=\"" + f1(w_ - right_) + "\" y1=\"" + f1(cy) + "\" y2=\"" + f1(cy) +
                       "\" stroke=\"" + colour + "\" stroke-width=\"1\"" + (dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"") +
                       "/>");
  legend_item({"rule", colour, dash, text, Marker::none, 1});
}

void Plot::marker(double x, double y, const std::string& colour, Marker m, const std::string& tooltip) {
  Marker mm = m;
  const double v = clamp_y(y, mm);
  layers_[2].push_back(marker_svg(px(x), py(v), colour, mm, tooltip));
}

std::string Plot::render() const {
  // note: no xmlns: inline SVG in HTML needs none (and the page then holds no URL at all).
  std::string o = "<title>" + xml_escape(title_) + "</title>";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>";
  o += "<text x=\"" + f1(left_) + "\" y=\"18\" font-size=\"13\" font-weight=\"bold\" fill=\"#222\">" + xml_escape(title_) + "</text>";
  const double x0 = left_, x1 = w_ - right_, y0 = top_, y1 = h_ - bottom_ - legend_h_;
  // Grid and ticks.
  auto ticks = [&](const AxisSpec& a) {
    std::vector<double> t;
    if (a.log) {
      const int e0 = static_cast<int>(std::floor(std::log10(a.lo) + 1e-9)), e1 = static_cast<int>(std::ceil(std::log10(a.hi) - 1e-9));
      const int step = std::max(1, (e1 - e0 + 7) / 8);
      for (int e = e0; e <= e1; e += step) t.push_back(std::pow(10.0, e));
    } else {
      t = linear_ticks(a.lo, a.hi, a.integer);
    }
    return t;
  };
  for (double v : ticks(y_)) {
    const double cy = py(v);
    if (cy < y0 - 0.5 || cy > y1 + 0.5) continue;
    o += "<line x1=\"" + f1(x0) + "\" x2=\"" + f1(x1) + "\" y1=\"" + f1(cy) + "\" y2=\"" + f1(cy) + "\" stroke=\"#e5e5e5\"/>";
    o += "<text x=\"" + f1(x0 - 5) + "\" y=\"" + f1(cy + 3.5) + "\" font-size=\"10\" fill=\"#444\" text-anchor=\"end\">" +
         xml_escape(tick_label(v, y_.log)) + "</text>";
  }
  for (const auto& [v, name] : x_names_) {
    const double cx = px(v);
    o += "<text transform=\"translate(" + f1(cx + 3) + " " + f1(y1 + 10) + ") rotate(-40)\" font-size=\"10\" fill=\"#444\" "
         "text-anchor=\"end\">" + xml_escape(name) + "</text>";
  }
  for (double v : x_names_.empty() ? ticks(x_) : std::vector<double>{}) {
    const double cx = px(v);
    if (cx < x0 - 0.5 || cx > x1 + 0.5) continue;
    o += "<line x1=\"" + f1(cx) + "\" x2=\"" + f1(cx) + "\" y1=\"" + f1(y0) + "\" y2=\"" + f1(y1) + "\" stroke=\"#f0f0f0\"/>";
    o += "<text x=\"" + f1(cx) + "\" y=\"" + f1(y1 + 14) + "\" font-size=\"10\" fill=\"#444\" text-anchor=\"middle\">" +
         xml_escape(tick_label(v, x_.log)) + "</text>";
  }
  for (const auto& layer : layers_)
    for (const std::string& s : layer) o += s;
  o += "<rect x=\"" + f1(x0) + "\" y=\"" + f1(y0) + "\" width=\"" + f1(x1 - x0) + "\" height=\"" + f1(y1 - y0) +
       "\" fill=\"none\" stroke=\"#888\"/>";
  o += "<text x=\"" + f1((x0 + x1) / 2) + "\" y=\"" + f1(h_ - legend_h_ - 8) + "\" font-size=\"11\" fill=\"#222\" text-anchor=\"middle\">" +
       xml_escape(x_.label) + "</text>";
  o += "<text transform=\"translate(14 " + f1((y0 + y1) / 2) + ") rotate(-90)\" font-size=\"11\" fill=\"#222\" text-anchor=\"middle\">" +
       xml_escape(y_.label) + "</text>";
  // Legend: rows under the x label; the picture grows downwards when it wraps.
  double lx = x0, ly = h_ - legend_h_ + 12;
  for (const LegendItem& it : legend_) {
    const double wdt = 26 + text_width(it.label, 10) + 14;
    if (lx + wdt > w_ - right_ && lx > x0) {
      lx = x0;
      ly += 14;
    }
    if (it.kind == "band") {
      o += "<rect x=\"" + f1(lx) + "\" y=\"" + f1(ly - 8) + "\" width=\"20\" height=\"9\" fill=\"" + it.colour + "\" fill-opacity=\"" +
           f1(it.opacity) + "\"/>";
    } else {
      o += "<line x1=\"" + f1(lx) + "\" x2=\"" + f1(lx + 20) + "\" y1=\"" + f1(ly - 4) + "\" y2=\"" + f1(ly - 4) + "\" stroke=\"" + it.colour +
           "\" stroke-width=\"2\"" + (it.dash.empty() ? "" : " stroke-dasharray=\"" + it.dash + "\"") + "/>";
      if (it.marker != Marker::none) o += marker_svg(lx + 10, ly - 4, it.colour, it.marker, "");
    }
    o += "<text x=\"" + f1(lx + 24) + "\" y=\"" + f1(ly) + "\" font-size=\"10\" fill=\"#222\">" + xml_escape(it.label) + "</text>";
    lx += wdt;
  }
  const int height = static_cast<int>(std::ceil(std::max<double>(h_, ly + 6)));
  return "<svg class=\"plot\" viewBox=\"0 0 " + std::to_string(w_) + " " + std::to_string(height) + "\" width=\"" +
         std::to_string(w_) + "\" height=\"" + std::to_string(height) + "\" role=\"img\" font-family=\"sans-serif\">" + o +
         "</svg>";
}

// ---- Grid ----

Grid::Grid(std::string title, std::vector<std::string> row_labels, std::vector<std::string> col_labels, std::string row_title,
           std::string col_title)
    : title_(std::move(title)),
      row_title_(std::move(row_title)),
      col_title_(std::move(col_title)),
      rows_(std::move(row_labels)),
      cols_(std::move(col_labels)),
      cells_(rows_.size() * cols_.size()) {}

std::string Grid::render() const {
  double label_w = text_width(row_title_, 11) + 10;
  for (const auto& r : rows_) label_w = std::max(label_w, text_width(r, 11) + 12);
  label_w = std::min(label_w, 260.0);
  double cell_w = 64;
  size_t col_lines = 1;
  std::vector<std::vector<std::string>> col_text;
  for (const auto& c : cols_) {
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t nl; (nl = c.find('\n', start)) != std::string::npos; start = nl + 1) lines.push_back(c.substr(start, nl - start));
    lines.push_back(c.substr(start));
    for (const auto& l : lines) cell_w = std::max(cell_w, std::min(text_width(l, 10) + 10, 200.0));
    col_lines = std::max(col_lines, lines.size());
    col_text.push_back(std::move(lines));
  }
  for (const auto& g : cells_) cell_w = std::max(cell_w, std::min(text_width(g.text, 11) + 12, 200.0));
  const double cell_h = 30, top = 40 + 12 * static_cast<double>(col_lines), left = label_w + 8;
  double legend_w = 4;
  for (const auto& item : legend_) legend_w += 16 + text_width(item.second, 11) + 16;
  const double width = std::max({left + cell_w * static_cast<double>(cols_.size()) + 10, legend_w + 4, 360.0});
  const double legend_y = top + cell_h * static_cast<double>(rows_.size()) + 22;
  const double height = legend_y + 12;
  auto cut = [](const std::string& s, double max_w, double font) {
    const size_t max_chars = static_cast<size_t>(std::max(4.0, max_w / (font * 0.6)));
    return s.size() > max_chars ? utf8_truncate(s, max_chars - 1) : s;
  };
  std::string o = "<svg class=\"grid\" viewBox=\"0 0 " + f1(width) + " " + f1(height) +
                  "\" width=\"" + f1(width) + "\" height=\"" + f1(height) + "\" role=\"img\" font-family=\"sans-serif\">";
  o += "<title>" + xml_escape(title_) + "</title><rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>";
  o += "<text x=\"4\" y=\"16\" font-size=\"13\" font-weight=\"bold\" fill=\"#222\">" + xml_escape(title_) + "</text>";
  o += "<text x=\"" + f1(left) + "\" y=\"32\" font-size=\"11\" fill=\"#555\">" + xml_escape(col_title_) + "</text>";
  // note: the column title sits above the column labels, which take col_lines lines below y = 32.
  o += "<text x=\"4\" y=\"" + f1(top - 6) + "\" font-size=\"11\" fill=\"#555\">" + xml_escape(row_title_) + "</text>";
  for (size_t c = 0; c < cols_.size(); ++c) {
    const auto& lines = col_text[c];
    for (size_t k = 0; k < lines.size(); ++k)
      o += "<text x=\"" + f1(left + cell_w * (static_cast<double>(c) + 0.5)) + "\" y=\"" +
           f1(top - 6 - 12 * static_cast<double>(lines.size() - 1 - k)) + "\" font-size=\"10\" fill=\"#222\" text-anchor=\"middle\"><title>" +
           xml_escape(lines[k]) + "</title>" + xml_escape(cut(lines[k], cell_w - 6, 10)) + "</text>";
  }
  for (size_t r = 0; r < rows_.size(); ++r) {
    const double y = top + cell_h * static_cast<double>(r);
    o += "<text x=\"4\" y=\"" + f1(y + cell_h / 2 + 4) + "\" font-size=\"11\" fill=\"#222\"><title>" + xml_escape(rows_[r]) +
         "</title>" + xml_escape(cut(rows_[r], label_w - 8, 11)) + "</text>";
    for (size_t c = 0; c < cols_.size(); ++c) {
      const GridCell& g = cells_[r * cols_.size() + c];
      const double x = left + cell_w * static_cast<double>(c);
      const bool light = g.fill == std::string(kMissing);
      o += "<g><title>" + xml_escape(g.tooltip) + "</title><rect x=\"" + f1(x + 1) + "\" y=\"" + f1(y + 1) + "\" width=\"" + f1(cell_w - 2) +
           "\" height=\"" + f1(cell_h - 2) + "\" rx=\"3\" fill=\"" + g.fill + "\"" +
           (g.dashed ? " stroke=\"#999\" stroke-dasharray=\"3 2\"" : "") + "/>";
      o += "<text x=\"" + f1(x + cell_w / 2) + "\" y=\"" + f1(y + cell_h / 2 + 4) + "\" font-size=\"11\" fill=\"" +
           (light ? "#666" : "#fff") + "\" text-anchor=\"middle\">" + xml_escape(cut(g.text, cell_w - 6, 11)) + "</text></g>";
    }
  }
  double lx = 4;
  for (const auto& [colour, label] : legend_) {
    o += "<rect x=\"" + f1(lx) + "\" y=\"" + f1(legend_y - 9) + "\" width=\"12\" height=\"12\" rx=\"2\" fill=\"" + colour + "\"" +
         (colour == std::string(kMissing) ? " stroke=\"#999\" stroke-dasharray=\"3 2\"" : "") + "/>";
    o += "<text x=\"" + f1(lx + 16) + "\" y=\"" + f1(legend_y + 1) + "\" font-size=\"11\" fill=\"#222\">" + xml_escape(label) + "</text>";
    lx += 16 + text_width(label, 11) + 16;
  }
  return o + "</svg>";
}

}  // namespace degen::report::svg
