// Inputs of `degenbisect report`: compare JSON files (`compare --json`), bisect JSON files
// (`bisect --json`) and sweep folders (`sweep --out`: results.jsonl + sweep.json), named directly
// or found one level down in a folder. Shard folders of one sweep (same name, base, axes, extra
// cells) merge into one sweep: the rows of every shard, by cell index, so the merged sweep equals
// the unsharded one; cells that no folder holds are listed as missing.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace degen::report {

struct SweepInput {
  nlohmann::json meta = nlohmann::json::object();  // sweep.json without "shard": name, base, axes, cells, cells_extra
  std::vector<nlohmann::json> rows;                // results.jsonl lines, one per cell, by index
  std::vector<std::string> folders;                // where they came from (messages only)
  std::vector<std::string> shards;                 // "i/n" of each folder (messages only)
  std::vector<std::string> warnings;               // conflicting duplicates, a folder without sweep.json
};

struct InputDoc {
  std::string source;  // the file it was read from (messages only)
  nlohmann::json doc;
};

struct ReportInputs {
  std::vector<InputDoc> compares, bisects;
  std::vector<SweepInput> sweeps;
  bool empty() const { return compares.empty() && bisects.empty() && sweeps.empty(); }
};

// InputError (exit 128) for a path that does not exist, a file that is neither kind, a folder with
// nothing to report, or a damaged results.jsonl line. Invalid UTF-8 in a file is replaced (U+FFFD)
// before parsing. Inputs keep the order given; a folder's entries are read in name order.
ReportInputs load_report_inputs(const std::vector<std::filesystem::path>& paths);

// One sweep folder (also used by tests).
SweepInput read_sweep_folder(const std::filesystem::path& dir);

// Merges sweep folders that belong to one sweep; keeps the others apart, in first-seen order.
std::vector<SweepInput> merge_sweeps(std::vector<SweepInput> parts);

// The final merge of one sweep run as `n` shards (report --expect-shards N, the merge job of a job
// array): the inputs hold exactly one sweep, its folders are shards 1/n .. n/n, each given once, and
// together they hold a result for every cell. InputError (exit 128) naming the folder or shard
// otherwise: a folder of another sweep (another matrix, model or golden record: the first differing
// field), a shard of another count (an array of another size), a shard given twice or not at all,
// a shard with cells still missing (a task still running or stopped), a folder without sweep.json.
void check_complete_sweep(const ReportInputs& in, int n);

// The exit code `sweep` gives for these rows: 1 when a cell is bad or crashed, 125 when every cell
// is untestable, else 0.
int sweep_exit_code(const SweepInput& s);

}  // namespace degen::report
