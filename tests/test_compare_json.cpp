// The JSON form of a compare result both ways (judge/compare_json.h): every committed compare result
// (tests/fixtures and docs, found by their "tool") read back and written again gives the same JSON,
// the same bytes too; a result holding every optional part and non-finite numbers round-trips
// exactly; a missing key or a value of the wrong type is an InputError (exit 128) naming its path,
// also through `report`'s reading of a file.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "judge/compare_json.h"
#include "helpers.h"
#include "util/file_io.h"
#include "report/inputs.h"
#include "util/error.h"
#include "util/json_output.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace degen;

namespace {

// Every .json file under the fixtures and docs that says it is a compare result.
std::vector<fs::path> compare_fixtures() {
  std::vector<fs::path> out;
  for (const fs::path& root : {test::fixtures_dir(), test::source_dir() / "docs"}) {
    if (!fs::exists(root)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (!e.is_regular_file() || e.path().extension() != ".json" || e.file_size() > (64 << 20)) continue;
      const json j = json::parse(read_file(e.path()), nullptr, false);
      if (j.is_object() && j.value("tool", std::string()) == "degenbisect compare") out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Removes from `back` the keys of kCompatKeys that `orig` lacks (a result written before them).
void drop_compat_keys(json& back, const json& orig, const std::string& pattern) {
  const size_t dot = pattern.find('.');
  const std::string head = pattern.substr(0, dot);
  const std::string rest = dot == std::string::npos ? "" : pattern.substr(dot + 1);
  if (head.size() > 3 && head.compare(head.size() - 3, 3, "[*]") == 0) {
    const std::string key = head.substr(0, head.size() - 3);
    if (!orig.contains(key) || !back.contains(key)) return;
    for (size_t i = 0; i < back[key].size() && i < orig[key].size(); ++i) drop_compat_keys(back[key][i], orig[key][i], rest);
    return;
  }
  if (rest.empty()) {
    if (!orig.contains(head)) back.erase(head);
  } else if (orig.contains(head) && back.contains(head) && back[head].is_object()) {
    drop_compat_keys(back[head], orig[head], rest);
  }
}

// A result with every optional part set and non-finite numbers where they can occur.
CompareResult full_result() {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  metrics::TensorError err;
  err.n = 8, err.n_compared = 7, err.nonfinite = 1, err.rel_l2 = inf, err.nmse = nan, err.max_abs = 0.25, err.argmax_abs = 3;
  LogitsResult lr;
  lr.summary.n = 3, lr.summary.topk_bound = true, lr.summary.kld_mean = {0.5, inf}, lr.summary.kld.max = inf;
  lr.summary.n_dp = 2, lr.summary.dp.min = -0.5, lr.summary.same_top_p = {2.0 / 3, 0.3};
  lr.kld = {0.1, inf, nan}, lr.top1_agree = {1, 0, 1}, lr.mean_kld = inf, lr.limit = 1e-9, lr.floor = 3e-10, lr.pass = false;
  lr.nonfinite = 1, lr.logprob_offset = -0.125, lr.logprob_offset_vocab = false, lr.resolved = 0.75;
  LogitsResult no_floor;
  no_floor.kld = {0.0}, no_floor.top1_agree = {1};
  CaseResult c;
  c.id = "case-1", c.prompt_tokens = 4, c.positions = 9, c.stored_positions = 9, c.verdict = metrics::Verdict::bad;
  c.reasons = {"why", "and why"}, c.seconds = 0.5, c.embed[0] = err, c.logits[0] = lr, c.logits[1] = no_floor, c.mtp = lr;
  LayerRow row;
  row.layer = 1, row.kind = 'A', row.drift[0] = err, row.iso[1] = err, row.floor[0] = 1e-7, row.limit[0] = 3e-7;
  row.floor_ratio[0] = inf, row.drift_norm[1] = 0.5, row.pass[0] = false;
  c.layers = {LayerRow{}, row};
  c.first_break = std::make_pair(1, 1);
  c.mtp_forced = MtpForcedResult{3, 1, lr, 2e-3, 4, 7, "S", false};
  ServingCheck sc;
  sc.mechanism = "chunk", sc.what = "prefill in chunks of 3", sc.state_err = nan, sc.state_limit = 1e-4, sc.state_layer = 2;
  sc.state_position = 6, sc.state_part = "conv", sc.logits = no_floor, sc.state_decides = false, sc.pass = false, sc.note = "n";
  c.serving = {sc, ServingCheck{}};
  c.observation = ObservationCheck{"case-1", 9, 90, 2, inf, 12};
  GenerationResult& g = c.gen;
  g.tokens = {1, 2, 3, 3}, g.golden_tokens = {1, 2, 4}, g.stop_reason = "budget", g.first_divergence = 2, g.golden_margin = 0.5;
  g.degen.T = 4, g.degen.seq_rep = {0.1, 0.2, inf, nan}, g.degen.tail_period = 1, g.degen.tail_repeats = 2, g.degen.loop_onset = 2;
  g.degen.empty_content = false, g.degen.degenerate = true, g.degen.rule = "max_run", g.degen.rules_fired = {"max_run"};
  g.degen.reason = "r", g.golden_degen.empty_content = true, g.golden_rerun = true, g.model_changed = true;
  g.verdict = metrics::Verdict::bad, g.seconds = 0.25, g.logits = lr, g.margin_engine = 0.5, g.flip_margin = inf;
  g.agreement = "beyond noise", g.spec_stated = "12 drafts, 9 accepted";
  g.spec = SpecDecode{3, 6, 4, 4.0 / 6, 2.0, std::nullopt, 1.0, "accept_rate_jump"};
  g.mtp_equiv = metrics::MtpEquiv{false, 2};
  DecodePathResult dp;
  dp.steps = 4, dp.stated = 3, dp.scored = 3, dp.kld = {1e-9, nan, inf, 0.5}, dp.floor = {1e-10, 2e-10, 3e-10}, dp.peak_floor = 3e-10;
  dp.limit = 1e-9, dp.mean_kld = inf, dp.max_kld = inf, dp.first_bad = 2, dp.prefill_kld = 1e-9, dp.self_kld = nan;
  dp.resolved = 0.5, dp.floor_source = "fp64 reference", dp.note = "one step not stated", dp.pass = false;
  g.decode_path = dp;
  g.probes = {ProbeResult{"prefix-cache", "bad", "warm against cold", 18, std::nullopt, 2, 0.04, 1e-5},
              ProbeResult{"batching", "not applicable", "1 slot", std::nullopt, 1, std::nullopt, std::nullopt, std::nullopt}};
  CompareResult r;
  r.golden_dir = "golden/x", r.model_dir = "models/x", r.config = "precision=bf16", r.suite = "smoke", r.backend = "cpu:bf16";
  r.record_fingerprint = "sha256:1", r.model_fingerprint = "sha256:2", r.model_mismatch = true, r.weights_differ = true;
  r.changed_tensors = {"a.weight"}, r.manifest_checked = false, r.tokenizer_mismatch = true, r.record_tokenizer = "t1";
  r.decode_skipped = true, r.floor_class = "bf16", r.floors = false, r.floors_reason = "made with --no-floors";
  r.source = "server", r.limits_note = "limits: per step", r.cases = {c, CaseResult{}}, r.verdict = metrics::Verdict::bad;
  r.fail_on_model_degeneration = true, r.exit_code = 1, r.seconds = 2.5;
  return r;
}

std::string error_of(const json& j) {
  try {
    (void)compare_result_from_json(j);
  } catch (const InputError& e) {
    CHECK(e.code() == ExitCode::input);
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("compare json: every committed compare result reads back to the same JSON and bytes") {
  const std::vector<fs::path> files = compare_fixtures();
  REQUIRE(!files.empty());  // tests/fixtures/report/compare.json at least
  for (const fs::path& f : files) {
    CAPTURE(f.string());
    const std::string text = read_file(f);
    const json orig = json::parse(text);
    const json back = compare_result_from_json(orig).to_json();
    json same = back;
    for (const std::string& k : kCompatKeys) drop_compat_keys(same, orig, k);
    CHECK(same == orig);
    CHECK(json_text(same, 1) + "\n" == text);  // the fixtures are compare --json's output
    // Written by this version, it reads back exactly.
    CHECK(json_text(compare_result_from_json(back).to_json(), 1) == json_text(back, 1));
  }
}

TEST_CASE("compare json: every optional part and non-finite numbers round-trip exactly") {
  const CompareResult r = full_result();
  const json j = r.to_json();
  const std::string text = json_text(j, 1);
  CHECK(text.find("\"inf\"") != std::string::npos);
  CHECK(text.find("\"nan\"") != std::string::npos);
  CHECK(j["cases"][0]["generation"]["decode_path"]["kld"][1].is_null());  // an unscored step
  const CompareResult back = compare_result_from_json(j);
  CHECK(json_text(back.to_json(), 1) == text);
  CHECK(std::isnan(back.cases[0].gen.decode_path->kld[1]));
  CHECK(std::isinf(back.cases[0].layers[1].drift[0]->rel_l2));
  CHECK(back.cases[0].gen.model_changed);
  CHECK(back.cases[0].first_break == std::make_pair(1, 1));
}

TEST_CASE("compare json: a missing key or a wrong type names its path") {
  const json good = full_result().to_json();
  json j = good;
  j["cases"][0]["generation"].erase("tokens");
  CHECK(error_of(j) == "compare result: cases[0].generation.tokens: missing");
  j = good;
  j["cases"][0]["layers"][1]["iso_decode"]["rel_l2"] = "small";
  CHECK(error_of(j).find("cases[0].layers[1].iso_decode.rel_l2: expected a number") != std::string::npos);
  j = good;
  j["cases"][0]["generation"]["tokens"][2] = 1.5;
  CHECK(error_of(j).find("cases[0].generation.tokens[2]: expected an integer, found 1.5") != std::string::npos);
  j = good;
  j["cases"][1]["verdict"] = "fine";
  CHECK(error_of(j).find("cases[1].verdict: expected one of \"good\", \"bad\"") != std::string::npos);
  j = good;
  j["cases"] = json::object();
  CHECK(error_of(j).find("cases: expected an array") != std::string::npos);
  j = good;
  j["cases"][0]["generation"]["cause"] = "none";
  CHECK(error_of(j).find("cases[0].generation.cause: \"none\" does not go with verdict \"bad\"") != std::string::npos);
  j = good;
  j["exit_code"] = json(uint64_t(1) << 40);
  CHECK(error_of(j).find("exit_code: expected an integer") != std::string::npos);
  CHECK(error_of(json::array()).find("expected an object") != std::string::npos);

  // Keys of earlier versions may be absent; others may not.
  j = good;
  for (const char* k : {"changed_tensors", "decode_skipped", "floor_class", "fail_on_model_degeneration"}) j.erase(k);
  j["cases"][0].erase("serving");
  j["cases"][0]["generation"].erase("decode_path");
  const CompareResult old = compare_result_from_json(j);
  CHECK(old.changed_tensors.empty());
  CHECK(old.cases[0].serving.empty());
  CHECK_FALSE(old.fail_on_model_degeneration);  // bad, not model-intrinsic
  j["verdict"] = "model-intrinsic";
  CHECK(compare_result_from_json(j).fail_on_model_degeneration);  // model-intrinsic that exited 1
  j = good;
  j.erase("backend");
  CHECK(error_of(j) == "compare result: backend: missing");
}

TEST_CASE("compare json: report refuses a damaged compare result, naming the file and the key") {
  test::TempDir dir("compare-json");
  json j = json::parse(read_file(test::fixtures_dir() / "report" / "compare.json"));
  j["cases"][1]["layers"][0].erase("pass_decode");
  write_file_atomic(dir / "damaged.json", j.dump());
  CHECK_THROWS_WITH_AS(report::load_report_inputs({dir / "damaged.json"}),
                       doctest::Contains("damaged.json: compare result: cases[1].layers[0].pass_decode: missing"), InputError);
}
