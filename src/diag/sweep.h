// Sweep: run one evaluation per cell of a toggle matrix with the model loaded once (DESIGN.md §9).
// Results are appended as one JSON line per finished cell (flushed and fsynced), so an interrupted
// sweep resumes where it stopped; --shard i/n takes a deterministic share of the cells; --isolate
// runs each cell in a forked child, so a crashing cell costs one cell (recorded as "error").
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/run_config.h"

namespace degen {

// One axis: each value is a config fragment ("flash", or "temp=0.6,top_p=0.95" for a group axis).
struct SweepAxis {
  std::string name;
  std::vector<std::string> values;
};

// The most cells a matrix may have: a matrix beyond it (40 two-valued axes are 2^40 cells) is
// refused before any cell is enumerated, with the count, rather than spinning for hours.
constexpr size_t kMaxSweepCells = 100000;

struct SweepMatrix {
  std::string name = "sweep";
  // Server sweeps (sweep --server-cmd): a cell's fragments are free key=value parameters that fill
  // the server's command line, not toggles; they are not parsed as a RunConfig.
  bool params_only = false;
  std::string base;               // fragment applied to every cell first
  std::vector<SweepAxis> axes;    // cartesian product, last axis fastest
  std::vector<std::string> cells_extra;  // explicit extra cells (fragments on top of base)

  struct Cell {
    size_t index = 0;
    RunConfig config;
    std::string name;                  // config.str()
    std::vector<std::string> values;   // the axis values of this cell, by axis (empty for extra cells)
    std::vector<std::pair<std::string, std::string>> params;  // params_only: key=value, base first, in axis order
  };
  // InputError on a bad fragment, naming axis and value, and on more than kMaxSweepCells cells
  // (counted with overflow checks before any cell is built).
  std::vector<Cell> cells() const;
  size_t count() const;                // the number of combinations (before merging duplicates); same InputError on the cap
};

// Matrix file (JSON): {"name": ..., "base": "...", "axes": [{"name": "attn", "values": ["naive", "flash"]}, ...],
// "cells": ["fault=rope-interleaved@3", ...]}. "axes" may also be an object {"attn": [...]} (keys sorted).
// A value without '=' means "<axis name>=<value>".
SweepMatrix load_sweep_matrix(const std::filesystem::path& path, bool params_only = false);
// From --axis arguments "key=v1,v2,..." (no group values) and a base fragment.
SweepMatrix sweep_matrix_from_axes(const std::string& base, const std::vector<std::string>& axis_args,
                                   bool params_only = false);

// "i/n" with 1 <= i <= n. The shard takes the cells whose index % n == i - 1.
struct Shard { int i = 1, n = 1; };
Shard parse_shard(const std::string& text);

// What a cell evaluation reports (the columns of the sweep table).
struct CellSummary {
  std::string verdict = "error";  // good | bad | untestable | model-intrinsic | error
  std::string reason;             // one line: which rule fired, why untestable, the crash
  int worst_layer = -1;           // the first layer that breaks its floor (isolated), -1 none
  std::optional<double> kld_mean; // teacher-forced mean KLD
  std::optional<double> seq_rep_4;  // worst over the cases
  std::optional<int64_t> loop_onset;  // earliest loop onset over the cases
  nlohmann::json detail;          // everything else (per-case metrics)
};
nlohmann::json cell_summary_to_json(const CellSummary& s);
CellSummary cell_summary_from_json(const nlohmann::json& j);
// The fields of a cell summary read back from a file (a replay line's "summary"; with `row`, a
// results.jsonl line, which also has "cell", "index", "values", "seconds") have the types the tool
// writes, and the verdict is one it gives; else InputError "<where>: field 'F' is ..., expected ...".
// Every reader of results and replay files calls it, so the code after it can rely on the types.
void check_result_fields(const nlohmann::json& j, const std::string& where, bool row);

using CellEvaluator = std::function<CellSummary(const RunConfig&)>;
using CellParamsEvaluator = std::function<CellSummary(const SweepMatrix::Cell&)>;

class GoldenRecord;
struct Model;

// What a result was measured against, beyond its configuration: the model (its fingerprint, which
// covers config.json and the tensor headers, and a sample digest of the weights' bytes), the golden
// record's identity (SHA-256 of its manifest, which holds every data file's checksum), the case set
// ("all" or the sorted ids) and the evaluation mode. Stored with every results.jsonl and replay line,
// so a resume or replay for something else is refused instead of reporting old verdicts.
nlohmann::json evaluation_identity(const GoldenRecord& rec, const Model& model, std::vector<std::string> cases,
                                   bool decode_mode);
// "" when `found` equals `expected`, else one clause per differing field: "cases: expected [a]
// (this run), found [b]".
std::string identity_difference(const nlohmann::json& expected, const nlohmann::json& found);

struct SweepOptions {
  std::filesystem::path out;   // folder: results.jsonl (+ sweep.json with the matrix), locked while the sweep runs
  // evaluation_identity() (plus anything else that decides a verdict, such as the server command):
  // written into every results.jsonl line; a resume refuses lines with another or no identity.
  // Null: no check (tests with a stand-in evaluator).
  nlohmann::json identity;
  bool resume = false;
  Shard shard;
  bool isolate = false;        // fork a child per cell
  bool progress = true;        // a progress line on stderr when it is a terminal
};

struct SweepRow {
  size_t index = 0;
  std::string cell;
  std::vector<std::string> values;
  CellSummary summary;
  double seconds = 0;
};

// Runs the cells of this shard that results.jsonl does not already hold; returns every row of the
// shard (finished earlier or now), in cell order. Holds an exclusive lock on OUT/sweep.lock while it
// runs: a second sweep on the same folder is refused (InputError naming the holder's PID).
std::vector<SweepRow> run_sweep(const SweepMatrix& m, const SweepOptions& opt, const CellEvaluator& eval);
// The same for an evaluator that sees the whole cell (a server sweep's parameters).
std::vector<SweepRow> run_sweep(const SweepMatrix& m, const SweepOptions& opt, const CellParamsEvaluator& eval);

// Reads results.jsonl lines (a partial last line, as a kill mid-write leaves, is ignored).
std::vector<nlohmann::json> read_sweep_results(const std::filesystem::path& jsonl);

// The closing table (one row per cell) and the main-effects summary (for each axis value: bad
// cells with it and without it).
std::string sweep_table(const SweepMatrix& m, const std::vector<SweepRow>& rows);
std::string sweep_main_effects(const SweepMatrix& m, const std::vector<SweepRow>& rows);

}  // namespace degen
