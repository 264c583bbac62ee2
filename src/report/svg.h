// A small SVG plotting module for the HTML report: no dependencies, no scripts, no external fonts
// (font-family: sans-serif, whatever the browser has). Two things:
//   Plot: x/y axes (linear or log10) with ticks and grid lines, step bands, lines with markers,
//     vertical/horizontal rules with labels, single markers, and a legend below the plot. On a log
//     axis, values <= 0 are drawn at the bottom edge with a hollow marker and non-finite values at
//     the top edge with a cross, so nothing silently disappears.
//   Grid: labelled rows x columns of coloured cells (the sweep's toggle grid), each with a short
//     label and a tooltip, plus a legend.
// All text is escaped here (xml_escape); callers pass plain text. Grid column labels may hold '\n'
// (one line per axis value).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace degen::report::svg {

// Colours used across the report (also by the HTML's CSS).
inline constexpr const char* kGood = "#2e7d32";
inline constexpr const char* kBad = "#c62828";
inline constexpr const char* kIntrinsic = "#ef6c00";
inline constexpr const char* kUntestable = "#9e9e9e";
inline constexpr const char* kError = "#6a1b9a";
inline constexpr const char* kMissing = "#ffffff";
const char* verdict_colour(const std::string& verdict);

enum class Marker { none, circle, square, triangle, cross, hollow };

struct AxisSpec {
  double lo = 0, hi = 1;
  bool log = false;
  bool integer = false;  // integer ticks only (layers, positions)
  std::string label;
};

class Plot {
 public:
  Plot(int width, int height, std::string title);
  void x_axis(AxisSpec a) { x_ = std::move(a); }
  // Names instead of numbers under the x axis (drawn slanted); call before adding data, since the
  // plot area shrinks to make room for them.
  void x_names(std::vector<std::pair<double, std::string>> names);
  void y_axis(AxisSpec a) { y_ = std::move(a); }
  // A band from lo[i] to hi[i] over [x[i] - 0.5, x[i] + 0.5] (steps, for per-layer values);
  // entries with a missing bound are skipped.
  void step_band(const std::vector<double>& x, const std::vector<std::optional<double>>& lo,
                 const std::vector<std::optional<double>>& hi, const std::string& colour, double opacity,
                 const std::string& label);
  // A polyline through the points with a value (a missing value breaks the line), markers on
  // each point unless Marker::none.
  void line(const std::vector<double>& x, const std::vector<std::optional<double>>& y, const std::string& colour,
            double width, const std::string& dash, Marker marker, const std::string& label);
  void vrule(double x, const std::string& colour, const std::string& dash, const std::string& text, bool legend = true);
  void hrule(double y, const std::string& colour, const std::string& dash, const std::string& text);
  void marker(double x, double y, const std::string& colour, Marker m, const std::string& tooltip);
  std::string render() const;

  // A log range covering the positive finite values (whole decades, at least one), or [1e-12, 1].
  static AxisSpec log_range(const std::vector<std::optional<double>>& values, const std::string& label);

 private:
  struct LegendItem {
    std::string kind;  // "line", "band", "rule", "marker"
    std::string colour, dash, label;
    Marker marker = Marker::none;
    double opacity = 1;
  };
  double px(double x) const;
  double py(double y) const;
  double clamp_y(double y, Marker& m) const;  // log axis: <= 0 to the bottom (hollow), non-finite to the top (cross)
  void legend_item(LegendItem it);
  std::string marker_svg(double cx, double cy, const std::string& colour, Marker m, const std::string& tooltip) const;

  int w_, h_;
  std::string title_;
  AxisSpec x_, y_;
  double left_ = 70, right_ = 16, top_ = 30, bottom_ = 40, legend_h_ = 18;  // legend_h_: the first legend row
  std::vector<std::string> layers_[3];  // bands, lines, rules/markers (drawn in that order)
  std::vector<LegendItem> legend_;
  int rule_labels_ = 0;
  std::vector<std::pair<double, std::string>> x_names_;
};

struct GridCell {
  std::string fill = kMissing;
  std::string text;     // short, drawn in the cell
  std::string tooltip;  // full description
  bool dashed = false;  // no result
};

class Grid {
 public:
  Grid(std::string title, std::vector<std::string> row_labels, std::vector<std::string> col_labels, std::string row_title,
       std::string col_title);
  GridCell& at(size_t r, size_t c) { return cells_[r * cols_.size() + c]; }
  void legend(const std::string& colour, const std::string& label) { legend_.push_back({colour, label}); }
  std::string render() const;

 private:
  std::string title_, row_title_, col_title_;
  std::vector<std::string> rows_, cols_;
  std::vector<GridCell> cells_;
  std::vector<std::pair<std::string, std::string>> legend_;
};

// Formats a tick value: "1e-4" on log axes, the shortest of %g otherwise.
std::string tick_label(double v, bool log);

}  // namespace degen::report::svg
