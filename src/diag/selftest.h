// selftest: the bisector checked against the fault catalogue (DESIGN.md §7). For every fault, at two
// or more layers of each kind that can host it, inject it (fault=NAME@L), run bisect, and check that
// the named layer and operation are the injected ones. Model-level faults (MTP, tp-skip-last-allreduce) are checked for the
// toggle only; faults that need a configuration this build cannot run are reported as skipped.
#pragma once
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "record/cases.h"
#include "record/golden_record.h"
#include "engine/backend_factory.h"
#include "engine/run_config.h"
#include "model/model.h"

namespace degen {

class Tokenizer;

struct SelftestRow {
  std::string fault;
  std::string site;
  int layer = -1;                 // injected layer (-1: model-level)
  std::string expected_op;        // the catalogue's op
  std::vector<int> found_layers;
  std::string found_op;           // "" when none was named
  std::vector<std::string> found_toggles;
  int evaluations = 0;
  double seconds = 0;
  std::string status;             // pass | fail | skip
  std::string note;               // why it failed or was skipped
};

struct SelftestOptions {
  std::vector<std::string> faults;  // only these (empty: all)
  int layers_per_kind = 2;
  RunConfig base;                   // toggles every run starts from (e.g. backend=cuda)
  std::vector<std::string> cases;   // case ids of the record to use (empty: all)
};

// The built-in suite selftest records when no golden record is given: short, both prompt styles.
Suite selftest_suite();

std::vector<SelftestRow> run_selftest(const GoldenRecord& rec, const Model& model, const Tokenizer* tok,
                                      const SelftestOptions& opt, const BackendFactory& factory,
                                      std::FILE* progress = nullptr);
std::string selftest_table(const std::vector<SelftestRow>& rows);
nlohmann::json selftest_json(const std::vector<SelftestRow>& rows);

}  // namespace degen
