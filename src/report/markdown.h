// Markdown report for a GitHub issue comment (GFM tables): the verdict paragraphs, the bisect's
// sub-op table, the sweep table and main effects, the per-layer table of each compared run with
// the prime suspect marked, the cases, their golden and tested text side by side, the configuration
// and model fingerprint, the tool version.
// Kept under kMarkdownBudget bytes (GitHub's comment limit is 65536 characters): long tables are
// cut with a note saying how many rows were left out, and sections past the budget are dropped
// with a note pointing to the HTML / JSON report.
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace degen::report {

inline constexpr size_t kMarkdownBudget = 60000;

std::string render_markdown(const nlohmann::json& doc);

}  // namespace degen::report
