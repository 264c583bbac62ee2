// What the fuzz targets (tests/fuzz, issue 21) found, one test each, in the normal build: every one
// was an exception that was not a degen::Error (the CLI's "internal error", exit 128 without a
// message about the input) or an assertion in nlohmann::json (an abort). The inputs themselves are
// replayed by ctest fuzz:replay (tests/fuzz/regressions).
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "diag/bisect.h"
#include "record/golden_record.h"
#include "diag/sweep.h"
#include "engine/run_config.h"
#include "helpers.h"
#include "model/config.h"
#include "util/file_io.h"
#include "report/inputs.h"
#include "util/error.h"
#include "util/json_input.h"

using namespace degen;
using degen::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary).write(text.data(), static_cast<std::streamsize>(text.size()));
}

// The InputError's message, or a failed check when f throws anything else or nothing.
template <typename F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("not an InputError: " << e.what());
  }
  FAIL("no InputError");
  return "";
}

const json kIdentity = {{"model", "m"}, {"golden", "sha256:0"}, {"cases", "all"}, {"decode", true}};

}  // namespace

TEST_CASE("fuzz finding: a number beyond double's range is an input error, not json out_of_range") {
  // fuzz_config: {"hidden_size": 2480561e308} made nlohmann throw out_of_range 406, which the
  // readers (catching parse_error) let through.
  const std::string msg = input_error_of([] { parse_json(R"({"a": 2480561e308})", "config.json"); });
  CHECK(msg.find("config.json") != std::string::npos);
  CHECK(msg.find("not valid JSON") != std::string::npos);
  CHECK(msg.find("number overflow") != std::string::npos);
  TempDir tmp("fuzz-num");
  write_text(tmp / "config.json", R"({"model_type": "qwen3_5", "text_config": {"hidden_size": 1e400}})");
  CHECK(input_error_of([&] { load_model_config(tmp.path()); }).find("config.json") != std::string::npos);
  // Without exceptions it stays a discarded value (results.jsonl lines are read that way).
  CHECK(parse_json("[1e400]", "x", false).is_discarded());
}

TEST_CASE("fuzz finding: a replay line whose config or summary has the wrong type names the line and field") {
  // fuzz_replay: {"config": {...}, "summary": {...}} threw json type_error 302 from get<std::string>().
  TempDir tmp("fuzz-replay");
  const fs::path replay = tmp / "replay.jsonl";
  auto oracle = [&] { BisectOracle o([](const RunConfig&) { return CellSummary{}; }, replay, kIdentity); };
  json line = {{"config", json::object()}, {"identity", kIdentity}, {"summary", {{"verdict", "good"}}}};
  write_text(replay, line.dump() + "\n");
  std::string msg = input_error_of(oracle);
  CHECK(msg.find("line 1") != std::string::npos);
  CHECK(msg.find("'config'") != std::string::npos);
  line["config"] = "attn=flash";
  line["summary"] = {{"verdict", 3}};
  write_text(replay, line.dump() + "\n");
  msg = input_error_of(oracle);
  CHECK(msg.find("'verdict'") != std::string::npos);
  line["summary"] = {{"verdict", "bad"}, {"reason", {1, 2}}};
  write_text(replay, line.dump() + "\n");
  CHECK(input_error_of(oracle).find("'reason'") != std::string::npos);
  line["summary"] = {{"verdict", "bad"}, {"kld_mean", "lots"}};
  write_text(replay, line.dump() + "\n");
  CHECK(input_error_of(oracle).find("'kld_mean'") != std::string::npos);
  // A well-typed line is replayed; a null reason is no reason (fuzz_replay: value("reason", "")
  // threw type_error 302 on it).
  line["summary"] = {{"verdict", "bad"}, {"kld_mean", "inf"}, {"worst_layer", 2}, {"loop_onset", nullptr}, {"reason", nullptr}};
  write_text(replay, line.dump() + "\n");
  BisectOracle o([](const RunConfig&) { return CellSummary{}; }, replay, kIdentity);
  CHECK(o.eval(parse_run_config("attn=flash"), "test").verdict == "bad");
  CHECK(o.fresh_evaluations() == 0);
}

TEST_CASE("fuzz finding: results.jsonl lines with mistyped fields are refused by resume and report alike") {
  // A "cell" that is not a string threw type_error from get<std::string>() in sweep --resume and
  // from value() in report's merge; a row without a verdict was rendered.
  TempDir tmp("fuzz-results");
  const json good = {{"cell", "attn=flash"}, {"index", 1}, {"verdict", "good"}, {"values", {"flash"}}, {"seconds", 1.5}};
  struct Bad { const char* field; json value; };
  for (const Bad& b : {Bad{"cell", 7}, Bad{"index", -1}, Bad{"values", "flash"}, Bad{"verdict", "fine"},
                       Bad{"verdict", nullptr}, Bad{"seconds", "1"}, Bad{"detail", {1}}, Bad{"loop_onset", 2.5}}) {
    CAPTURE(b.field);
    json row = good;
    row[b.field] = b.value;
    write_text(tmp / "results.jsonl", good.dump() + "\n" + row.dump() + "\n");
    const std::string msg = input_error_of([&] { read_sweep_results(tmp / "results.jsonl"); });
    CHECK(msg.find("line 2") != std::string::npos);
    CHECK(msg.find(std::string("'") + b.field + "'") != std::string::npos);
    CHECK(input_error_of([&] { report::read_sweep_folder(tmp.path()); }).find(b.field) != std::string::npos);
  }
  // A line without a verdict (the fuzzer's second finding here: the message itself read the
  // missing field through operator[] on a const json, an assertion).
  json no_verdict = good;
  no_verdict.erase("verdict");
  write_text(tmp / "results.jsonl", no_verdict.dump() + "\n");
  CHECK(input_error_of([&] { read_sweep_results(tmp / "results.jsonl"); }).find("'verdict' is missing") != std::string::npos);
  write_text(tmp / "results.jsonl", good.dump() + "\n");
  CHECK(read_sweep_results(tmp / "results.jsonl").size() == 1);
}

TEST_CASE("fuzz finding: a sweep.json whose axes are not {name, values} is refused by report") {
  // fuzz_report: an axis without "name" reached operator[] on a const json in the HTML grid (an
  // assertion in nlohmann::json, abort).
  TempDir tmp("fuzz-sweepjson");
  struct Bad { const char* what; json meta; const char* field; };
  for (const Bad& b : {Bad{"axis without name", {{"axes", {{{"nafresh_me", "attn"}, {"values", {"naive"}}}}}}, "axes"},
                       Bad{"values not strings", {{"axes", {{{"name", "attn"}, {"values", {1, 2}}}}}}, "axes"},
                       Bad{"axes an object", {{"axes", {{"attn", {"naive"}}}}}, "axes"},
                       Bad{"name a number", {{"name", 5}}, "name"},
                       Bad{"cells negative", {{"cells", -3}}, "cells"},
                       Bad{"cells_extra not strings", {{"cells_extra", {json::object()}}}, "cells_extra"}}) {
    CAPTURE(b.what);
    write_text(tmp / "sweep.json", b.meta.dump());
    const std::string msg = input_error_of([&] { report::read_sweep_folder(tmp.path()); });
    CHECK(msg.find("sweep.json") != std::string::npos);
    CHECK(msg.find(std::string("'") + b.field + "'") != std::string::npos);
  }
}

TEST_CASE("fuzz finding: an identity mismatch shows bounded excerpts, not the file's values whole") {
  json found = kIdentity;
  found["model"] = std::string(100000, 'x');
  for (int i = 0; i < 20; ++i) found["extra" + std::to_string(i)] = i;
  const std::string d = identity_difference(kIdentity, found);
  CHECK(d.find("model fingerprint") != std::string::npos);
  CHECK(d.find("and other fields") != std::string::npos);
  CHECK(d.size() < 2000);
  CHECK(identity_difference(kIdentity, json::array({std::string(100000, 'y')})).size() < 600);
}

TEST_CASE("fuzz finding: a sampling value is printed so that the canonical form reads back as itself") {
  // top_p one part in 10^11 below 1 was printed with ten digits as top_p=1, which read back as the
  // default and dropped out of the canonical string: two spellings of one configuration then keyed
  // results differently. Every value now prints as the shortest text that reads back exactly.
  for (const char* text : {"temp=1.0,top_p=0.99999999999222,top_k=20,min_p=0,presence_pen=1.5,seed=1",
                           "temp=0.70000000000000007", "min_p=0.1", "rep_pen=1.0000000001"}) {
    CAPTURE(text);
    const std::string canon = parse_run_config(text).str();
    CHECK(parse_run_config(canon).str() == canon);
  }
  CHECK(parse_run_config("top_p=0.99999999999222").str() == "top_p=0.99999999999222");
  CHECK(parse_run_config("temp=0.7").str() == "temp=0.7");  // the short forms stay short
}

TEST_CASE("fuzz finding: a golden manifest's numbers are range-checked before they are narrowed or used") {
  // fuzz_manifest_numbers against the reader as it was (resealed manifests of the seed record), on
  // its first inputs: 1e300 in an int field (cases[0].verification.worst_layer) was converted to int
  // (undefined behaviour, UBSan); 0.5 as a budget (cases[1].max_new_tokens) or a worst_layer was read
  // as 0; noise floors of -inf, -1 and -0.000267 (the seed's mtp_kld negated) were kept (a negative
  // limit: the reference judged bad). Inputs: tests/fuzz/regressions/manifest_numbers.
  TempDir tmp("fuzz-manifest");
  const fs::path dir = tmp / "rec";
  fs::copy(test::source_dir() / "tests/fuzz/seeds/golden-mini", dir, fs::copy_options::recursive);
  const json seed = json::parse(read_file(dir / "manifest.json"));
  struct Bad {
    json::json_pointer at;
    json value;
    const char* field;
    const char* found;
  };
  for (const Bad& b : {Bad{json::json_pointer("/cases/0/index"), 1e300, "cases[0].index", "found 1e+300"},
                       Bad{json::json_pointer("/cases/1/max_new_tokens"), 0.5, "cases[1].max_new_tokens", "found 0.5"},
                       Bad{json::json_pointer("/cases/0/floors/bf16/iso_decode/0"), "-inf", "cases[0].floors.bf16.iso_decode[0]",
                           "found \"-inf\""},
                       Bad{json::json_pointer("/cases/0/floors/bf16/mtp_kld"), -0.000267, "cases[0].floors.bf16.mtp_kld",
                           "found -0.000267"}}) {
    const std::string field = b.field;
    CAPTURE(field);
    json m = seed;
    m[b.at] = b.value;
    m[kManifestChecksumKey] = manifest_checksum(m);
    write_text(dir / "manifest.json", m.dump(1));
    const std::string msg = input_error_of([&] { (void)GoldenRecord::open(dir); });
    CHECK(msg.find((dir / "manifest.json").string()) != std::string::npos);
    CHECK(msg.find(cat("field '", b.field, "': expected ")) != std::string::npos);
    CHECK(msg.find(b.found) != std::string::npos);
  }
  write_text(dir / "manifest.json", seed.dump(1));
  CHECK(GoldenRecord::open(dir).cases().size() == 2);  // the seed itself opens
}
