// HTML report: one self-contained file that opens offline. No external resource of any kind (no
// CDN, no web font, no remote image, no URL at all): CSS inline, plots inline SVG drawn by
// report/svg, and a few lines of inline JavaScript that only make tables sortable (everything is
// readable without it). Shows the summary paragraphs, the bisect result with the sub-op table, the
// sweep as a grid of toggle values coloured by verdict (with a legend) and its table, and for each
// compared run: per-layer isolated error and drift on a log scale with the noise-floor band and the
// prime-suspect layer marked, the per-layer table, per-position KLD along each case with the
// generation start, first divergence and loop onset marked, the golden and tested generated text
// side by side with the first divergence highlighted, and the configuration and model fingerprint.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace degen::report {

std::string render_html(const nlohmann::json& doc);

}  // namespace degen::report
