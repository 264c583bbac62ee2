// The report document: everything `degenbisect report` shows, as one JSON value. The Markdown, HTML
// and JUnit writers render this document and nothing else, so `--format json` carries the same
// content as the others. Metric names are those of ../shared/spec/metrics.md.
//
// Schema, version 1 (kSchemaVersion; a change that removes or renames a key, or changes a value's
// meaning, bumps it; adding a key does not). Numbers that may be non-finite are written as
// metrics::json_number does: a number, or the string "inf", "-inf" or "nan"; null = not measured.
// Strings are valid UTF-8: invalid bytes in the inputs (decoded output of a broken model) are
// replaced by U+FFFD. Keys of objects are sorted.
//
// {
//   "schema_version": 1, "tool": "degenbisect report", "tool_version": "0.1.0",
//   "verdict":  worst over everything: "bad" > "error" > "model-intrinsic" > "good" > "untestable"
//               ("untestable" only when nothing could be tested), "none" without results,
//   "summary":  [paragraph, ...]  plain text, `backticks` around configurations and names,
//   "bisects":  [{ "status": found | bad-is-good | good-is-bad | no-difference | untestable,
//                  "verdict", "paragraph" (bisect's verdict text), "bad", "good", "minimal_bad",
//                  "culprit_toggles": [..], "culprit_layers": [..], "layer_specific",
//                  "patch": {"config", "fixes"} | null, "named_ops": [{"layer", "op"}],
//                  "evaluations", "fresh_evaluations", "golden", "model", "model_fingerprint",
//                  "subop": [{"layer", "kind", "mode", "case", "positions", "first_break",
//                             "floor_config", "rows": [{"step", "rel_l2", "floor", "limit", "pass",
//                                                       "nonfinite"}]}] }],
//   "sweeps":   [{ "name", "base", "axes": [{"name", "values"}], "cells_extra": [..],
//                  "cells": total cells of the matrix (null if unknown), "results": rows present,
//                  "missing": [cell names without a result], "warnings": [..],
//                  "counts": {"good", "bad", "untestable", "model-intrinsic", "error"},
//                  "rows": [{"index", "cell", "values", "verdict", "reason", "worst_layer",
//                            "kld_mean", "seq_rep_4", "loop_onset", "seconds",
//                            "cases": [{"id", "verdict", "reasons", "first_break"}]}],
//                  "main_effects": [{"axis", "value", "with", "bad_with", "without", "bad_without"}] }],
//   "compares": [{ "config", "backend", "suite", "golden", "model", "model_fingerprint",
//                  "record_fingerprint", "model_mismatch", "weights_differ", "noise_floors",
//                  "noise_floors_reason", "verdict", "exit_code", "seconds",
//                  "fail_on_model_degeneration" (model-intrinsic counts as a failure: the result's own
//                  key, or, for results without it, verdict model-intrinsic with exit code 1),
//                  "reason" (why untestable, else null),
//                  "first_break": {"layer", "mode", "cases": [ids]} | null (the earliest layer over
//                                 the cases whose isolated error breaks its rule: the prime suspect),
//                  "layers": [{"layer", "kind" ("G" GDN, "A" attention), worst over the cases (rel_l2):
//                              "drift_prefill", "drift_decode", "iso_prefill", "iso_decode",
//                              "floor_prefill", "floor_decode", "limit_prefill", "limit_decode",
//                              "floor_ratio" (largest), "pass", "nonfinite", "first_break_cases": [ids]}],
//                  "cases": [{"id", "verdict", "reasons", "prompt_tokens", "positions", "seconds",
//                             "kld_mean_prefill", "kld_mean_decode", "kld_limit", "same_top_p",
//                             "mtp_kld_mean", "first_break": {"layer", "mode"} | null,
//                             "kld": [per teacher-forced position, prefill mode; position i predicts
//                                     token i + 1, so generated token j is predicted at
//                                     prompt_tokens - 1 + j],
//                             "generation": {"tokens", "golden_tokens", "stop_reason",
//                                            "first_divergence", "golden_margin", "loop_onset",
//                                            "tail_period", "tail_repeats", "seq_rep_4", "max_run",
//                                            "degenerate", "rule", "reason", "golden_degenerate",
//                                            "golden_rule", "golden_loop_onset", "cause", "verdict",
//                                            "agreement" (compare --server's greedy agreement) | null,
//                                            "server_speculation" (the server's own draft counts) | null,
//                                            "decode_path": {"steps", "stated", "scored",
//                                                 "kld": [per generated step, null: not scored],
//                                                 "limit", "peak_floor", "mean_kld", "max_kld",
//                                                 "first_bad_step", "prefill_kld", "self_kld",
//                                                 "floor_source", "note", "pass"} | null,
//                                            "probes": [{"probe", "verdict", "reason",
//                                                 "cached_tokens", "slots", "first_difference",
//                                                 "max_kld", "limit"}],
//                                            "text": {"golden", "tested", "common_prefix_bytes",
//                                                     "source", "tested_loop_bytes",
//                                                     "golden_loop_bytes",
//                                                     "tested_first_bad_bytes"} | null}}] }]
//   (*_loop_bytes: byte offset in that text where its loop onset is, or null; tested_first_bad_bytes:
//   where the first bad decode step's token starts, or null)
// }
#pragma once
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "report/inputs.h"

namespace degen::report {

inline constexpr int kSchemaVersion = 1;

struct ReportOptions {
  // Tokenizer for the generated text (decoding the token ids of compare results): this model
  // folder's tokenizer.json; unset: the folder named by each compare result's "model", if it is
  // there. Without one the report shows token ids.
  std::optional<std::filesystem::path> model_dir;
  size_t max_text_bytes = 16384;  // per generated text, each side
};

nlohmann::json build_report(const ReportInputs& in, const ReportOptions& opt = {});

// The document as text (indent 1, a final newline).
std::string render_json(const nlohmann::json& doc);

}  // namespace degen::report
