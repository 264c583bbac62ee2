// Bisection (DESIGN.md §7 steps 3-5): from a good and a bad configuration, delta-debug the set of
// differing toggles to a minimal harmful subset, then apply that subset to layer sets only and
// search the minimal set of layers that still makes the run bad (binary search for one culprit,
// delta debugging when one layer is not enough), then confirm by patching: the bad configuration
// with the culprit layers reset to the good toggles must no longer be bad.
// Every evaluation goes through an evaluator (compare, in the CLI) and is logged to a replay file,
// so an interrupted bisect continues without repeating evaluations.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diag/sweep.h"
#include "engine/run_config.h"
#include "model/config.h"
#include "util/file_lock.h"

namespace degen {

// Memoising evaluator with a JSONL replay log: {"config": canonical, "identity": {...}, "summary":
// {...}} per line. The replay file is locked while the oracle lives (FILE.lock beside it: a second
// bisect on the same file is refused, naming the holder's PID). With an identity
// (evaluation_identity(), sweep.h), a replay file whose lines were measured against another model,
// record, case set or mode, or that predates identities, is refused (InputError saying what
// differs): its evidence is never reported for this run. A null identity checks nothing (tests).
class BisectOracle {
 public:
  BisectOracle(CellEvaluator eval, std::optional<std::filesystem::path> replay, nlohmann::json identity = nullptr);
  // The cached or fresh evaluation of `rc`; `why` says what the evaluation is for (logged).
  const CellSummary& eval(const RunConfig& rc, const std::string& why);
  bool is_bad(const RunConfig& rc, const std::string& why) { return eval(rc, why).verdict == "bad"; }
  int fresh_evaluations() const { return fresh_; }   // evaluations actually run (not replayed)
  int total_evaluations() const { return static_cast<int>(asked_.size()); }  // distinct configs asked for
  const std::vector<nlohmann::json>& log() const { return log_; }

 private:
  CellEvaluator eval_;
  std::optional<std::filesystem::path> replay_;
  nlohmann::json identity_;
  std::unique_ptr<FileLock> lock_;
  std::map<std::string, CellSummary> memo_;
  std::vector<nlohmann::json> log_;
  std::set<std::string> asked_;
  int fresh_ = 0;
};

// Zeller's ddmin: a 1-minimal subset of `items` for which `fails` holds (fails(items) must hold).
template <typename T>
std::vector<T> ddmin(std::vector<T> items, const std::function<bool(const std::vector<T>&)>& fails);

// Smallest failing set of layers: binary search while one half alone fails, then ddmin.
std::vector<int> bisect_layers(const std::vector<int>& candidates, const std::function<bool(const std::vector<int>&)>& fails);

struct BisectOutcome {
  RunConfig good, bad;
  bool good_given = false;
  std::string status;                      // "found", "bad-is-good", "good-is-bad", "no-difference", "untestable"
  std::vector<std::string> differing;      // toggles differing between good and bad
  std::vector<std::string> culprit_toggles;
  bool layer_specific = false;             // the culprit toggles could be narrowed to layers
  std::vector<int> culprit_layers;
  RunConfig minimal_bad;                   // good + culprit toggles on culprit layers only
  std::optional<bool> patch_fixes;         // bad with the culprit layers reset is no longer bad
  RunConfig patched;
  CellSummary bad_summary, minimal_summary;
  int evaluations = 0;                     // distinct configurations evaluated (incl. replayed)
  int fresh_evaluations = 0;
};

// The default "good" when none is given: the bad config with every scopable toggle and fault reset
// to its default (backend, precision, MTP and sampling kept), so the search looks at layer-level
// toggles only.
RunConfig implicit_good(const RunConfig& bad);

BisectOutcome bisect(const RunConfig& good, bool good_given, const RunConfig& bad, const ModelConfig& cfg,
                     BisectOracle& oracle);

}  // namespace degen
