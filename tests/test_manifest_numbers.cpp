// The numbers of a golden record's manifest are range-checked when they are read, even when the
// manifest's own checksum matches (anyone editing a record can recompute it): a value out of range is
// an InputError (exit 128) naming the file, the field, what was expected and what was found
// (record_manifest.cpp "reading", golden_record.cpp check_manifest_ranges). The same holds for the
// resume state of an interrupted golden run, whose entries go into the manifest as they are.
// Each edit below was accepted before (a negative floor made compare judge the reference itself bad;
// 2^32 + 1 was read as 1; an unknown ISA, a budget of 2^40 or a duplicate case id went through).
#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "record/cases.h"
#include "diag/golden.h"
#include "record/golden_record.h"
#include "record/record_store.h"
#include "helpers.h"
#include "util/file_io.h"
#include "util/error.h"
#include "util/sha256.h"

using namespace degen;
using degen::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The fuzz targets' seed record: two short cases of the tiny model, 8 layers, vocabulary 1024.
fs::path seed_record() { return test::source_dir() / "tests/fuzz/seeds/golden-mini"; }

json seed_manifest() { return json::parse(read_file(seed_record() / "manifest.json")); }

// A copy of the seed record at `dir` whose manifest is `m` with its own checksum recomputed.
void write_resealed(const fs::path& dir, json m) {
  if (!fs::exists(dir)) fs::copy(seed_record(), dir, fs::copy_options::recursive);
  m[kManifestChecksumKey] = manifest_checksum(m);
  write_file_atomic(dir / "manifest.json", m.dump(1) + "\n");
}

// The message of the InputError GoldenRecord::open throws, or "" when it opens.
std::string refusal(const fs::path& dir) {
  try {
    (void)GoldenRecord::open(dir);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

struct Edit {
  const char* field;  // as the message names it
  std::function<void(json&)> edit;
  const char* expected;
  const char* found;
};

}  // namespace

TEST_CASE("manifest numbers: a resealed manifest with a number out of range is refused, naming the file, the field, expected and found") {
  TempDir tmp("manifest-numbers");
  const fs::path dir = tmp / "rec";
  write_resealed(dir, seed_manifest());
  REQUIRE(refusal(dir).empty());  // the seed itself opens
  const std::string file = (dir / "manifest.json").string();
  const Edit edits[] = {
      // noise floors below 0 (compare made their limit negative and judged the reference bad)
      {"cases[0].floors.bf16.iso_prefill[0]", [](json& m) { m["cases"][0]["floors"]["bf16"]["iso_prefill"][0] = -0.5; },
       "a rel_l2 noise floor >= 0", "found -0.5"},
      {"cases[1].floors.fp32.kld_decode", [](json& m) { m["cases"][1]["floors"]["fp32"]["kld_decode"] = -1e-3; },
       "a KLD noise floor >= 0", "found -0.001"},
      {"cases[0].floors.bf16.mtp_kld", [](json& m) { m["cases"][0]["floors"]["bf16"]["mtp_kld"] = "-inf"; },
       "a KLD noise floor >= 0", "found \"-inf\""},
      // numbers that wrapped when narrowed to int
      {"format_version", [](json& m) { m["format_version"] = uint64_t{4294967297}; }, "expected 1", "found 4294967297"},
      {"model.num_hidden_layers", [](json& m) { m["model"]["num_hidden_layers"] = uint64_t{4294967304}; },
       "an integer in [1, 1024]", "found 4294967304"},
      {"settings.gen_tokens", [](json& m) { m["settings"]["gen_tokens"] = uint64_t{4294967296}; }, "an integer in [0, 1048576]",
       "found 4294967296"},
      {"settings.layers[1]", [](json& m) { m["settings"]["layers"][1] = uint64_t{4294967303}; }, "an integer in [0, 1023]",
       "found 4294967303"},
      // generation budgets outside what a prompt suite allows
      {"cases[0].max_new_tokens", [](json& m) { m["cases"][0]["max_new_tokens"] = -1; }, "an integer in [0, 1048576]", "found -1"},
      {"cases[1].max_new_tokens", [](json& m) { m["cases"][1]["max_new_tokens"] = int64_t{1} << 40; }, "an integer in [0, 1048576]",
       "found 1099511627776"},
      // enumerated strings
      {"settings.cpu_isa", [](json& m) { m["settings"]["cpu_isa"] = "sse9"; }, "one of \"baseline\", \"avx2\" or \"avx512\"",
       "found \"sse9\""},
      {"settings.precision", [](json& m) { m["settings"]["precision"] = "fp16"; }, "\"fp32\" or \"fp64\"", "found \"fp16\""},
      {"noise_floors.status", [](json& m) { m["noise_floors"]["status"] = "maybe"; }, "\"measured\", \"partial\" or \"absent\"",
       "found \"maybe\""},
      {"cases[0].stop_reason", [](json& m) { m["cases"][0]["stop_reason"] = "done"; }, "\"max tokens\"", "found \"done\""},
      {"cases[0].input", [](json& m) { m["cases"][0]["input"] = "text"; }, "\"prompt\", \"raw\" or \"tokens\"", "found \"text\""},
      {"settings.positions", [](json& m) { m["settings"]["positions"] = "-1"; }, "auto, all, none or a number N", "found \"-1\""},
      // other ranges of one field
      {"settings.topk", [](json& m) { m["settings"]["topk"] = 0; }, "an integer in [1, 1000]", "found 0"},
      {"settings.topk", [](json& m) { m["settings"]["topk"] = 2.5; }, "an integer in [1, 1000]", "found 2.5"},
      {"model.vocab_size", [](json& m) { m["model"]["vocab_size"] = uint64_t{2147483648}; }, "an integer in [1, 2147483647]",
       "found 2147483648"},
      {"cases[0].positions_stored", [](json& m) { m["cases"][0]["positions_stored"] = uint64_t{9223372036854775808u}; },
       "an integer in [0, 2147483647]", "found 9223372036854775808"},
      {"cases[0].prompt_tokens", [](json& m) { m["cases"][0]["prompt_tokens"] = 0; }, "an integer in [1, 2147483647]", "found 0"},
      {"files.hi.safetensors.bytes", [](json& m) { m["files"]["hi.safetensors"]["bytes"] = -1; }, "a file size in bytes", "found -1"},
      {"files.hi.safetensors.bytes", [](json& m) { m["files"]["hi.safetensors"]["bytes"] = 9316.5; }, "a file size in bytes",
       "found 9316.5"},
      // ranges that span fields
      {"cases[1].id", [](json& m) { m["cases"][1]["id"] = "hi"; }, "an id of its own", "found 'hi', the id of cases[0]"},
      {"cases[1].index", [](json& m) { m["cases"][1]["index"] = 0; }, "below 2 and each once", "found 0"},
      {"cases[0].index", [](json& m) { m["cases"][0]["index"] = 2; }, "below 2 and each once", "found 2"},
      {"settings.layers[1]", [](json& m) { m["settings"]["layers"][1] = 8; }, "a layer of the 8-layer model", "found 8"},
      {"suite.cases", [](json& m) { m["suite"]["cases"] = 3; }, "expected 2", "found 3"},
      {"cases[0].generated_tokens", [](json& m) { m["cases"][0]["generated_tokens"] = 4; }, "at most the case's max_new_tokens (3)",
       "found 4"},
      // the numbers of a case's sampling string (compare generates with it again)
      {"cases[1].sampling", [](json& m) { m["cases"][1]["sampling"] = "temp=1e300,seed=3"; }, "in their ranges",
       "found \"temp=1e300,seed=3\""},
      {"cases[1].sampling", [](json& m) { m["cases"][1]["sampling"] = "temp=0.7,attn=flash"; }, "temp, top_p, top_k",
       "found \"temp=0.7,attn=flash\""},
  };
  for (const Edit& e : edits) {
    const std::string field = e.field, found = e.found;
    CAPTURE(field);
    CAPTURE(found);
    json m = seed_manifest();
    e.edit(m);
    write_resealed(dir, m);
    const std::string msg = refusal(dir);
    INFO("message: " << msg);
    CHECK(msg.find(file) != std::string::npos);
    CHECK(msg.find(cat("field '", e.field, "'")) != std::string::npos);
    CHECK(msg.find(cat("expected ")) != std::string::npos);
    CHECK(msg.find(e.expected) != std::string::npos);
    CHECK(msg.find(e.found) != std::string::npos);
  }
}

TEST_CASE("manifest numbers: values at the edges of their ranges, and the spellings of non-finite floors, are read as written") {
  TempDir tmp("manifest-edges");
  const fs::path dir = tmp / "rec";
  json m = seed_manifest();
  m["settings"]["cpu_isa"] = "avx2";
  m["settings"]["topk"] = 1000;
  m["settings"]["positions"] = "123456789";
  m["settings"]["gen_tokens"] = 1 << 20;
  m["cases"][0]["max_new_tokens"] = 1 << 20;
  m["cases"][0]["floors"]["bf16"]["iso_prefill"][0] = "inf";  // a floor run that was not finite (json_number)
  m["cases"][0]["floors"]["bf16"]["iso_decode"][0] = "nan";
  m["cases"][0]["floors"]["fp32"]["kld_prefill"] = 0;
  m["cases"][1]["floors"]["bf16"]["kld_decode"] = nullptr;  // not measured there
  write_resealed(dir, m);
  const GoldenRecord rec = GoldenRecord::open(dir);
  CHECK(rec.manifest().settings.cpu_isa == "avx2");
  CHECK(rec.manifest().settings.topk == 1000);
  CHECK(rec.cases()[0].max_new_tokens == 1 << 20);
  CHECK(std::isinf(*rec.cases()[0].floors[0]->iso[0][0]));
  CHECK(std::isnan(*rec.cases()[0].floors[0]->iso[1][0]));
  CHECK(*rec.cases()[0].floors[1]->kld[0] == 0);
  CHECK_FALSE(rec.cases()[1].floors[0]->kld[1].has_value());
  CHECK(json(rec.manifest()) == json::parse(read_file(dir / "manifest.json")));  // nothing narrowed
}

namespace {

// The resume state of tests/fuzz/seeds/golden-resume (a golden-mini run with --batch all killed after
// its first case) at dir/.mini.partial and dir/.mini.resume, read as `golden` reads it.
struct ResumeSeed {
  fs::path dir;
  Suite suite;
  json key;
  std::vector<std::pair<size_t, size_t>> groups;

  explicit ResumeSeed(const fs::path& d) : dir(d) {
    const fs::path src = test::source_dir() / "tests/fuzz/seeds";
    fs::copy(src / "golden-resume/partial", dir / ".mini.partial", fs::copy_options::recursive);
    fs::copy(src / "golden-resume/resume", dir / ".mini.resume", fs::copy_options::recursive);
    suite = load_suite(src / "mini-cases.json");
    key = json::parse(read_file(src / "golden-resume/resume/resume.json"));
    key.erase("key_sha256");
    key.erase("resume_sha256");
    GoldenOptions o;
    o.batch_all = true;
    groups = golden_batch_groups(suite, o);
  }
  GoldenResume open() const { return open_golden_resume(dir / "mini", key, suite, groups, 1024, false, nullptr); }
  // Edits a file of .mini.resume and recomputes its resume_sha256 (as an editor could).
  void edit(const std::string& name, const std::function<void(json&)>& f) const {
    const fs::path p = dir / ".mini.resume" / name;
    json j = json::parse(read_file(p));
    f(j);
    j.erase("resume_sha256");
    j["resume_sha256"] = sha256_hex(json::parse(j.dump()).dump());
    write_file_atomic(p, j.dump() + "\n");
  }
  std::string refusal() const {
    try {
      (void)open();
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
};

}  // namespace

TEST_CASE("manifest numbers: an interrupted run's resume entries and generations are range-checked before they are kept") {
  {
    TempDir tmp("resume-numbers");
    const ResumeSeed s(tmp.path());
    const GoldenResume r = s.open();
    REQUIRE(r.generations.count(0));
    CHECK(r.generations.at(0).at(0).tokens == std::vector<int32_t>{638, 161, 735});
  }
  struct ResumeEdit {
    const char* what;
    const char* file;
    std::function<void(json&)> edit;
    const char* says;
  };
  const ResumeEdit edits[] = {
      // read as int32 / int, these wrapped to a valid id (638) and stop reason (1)
      {"token 2^32 + 638", "gen-hi.json", [](json& j) { j["results"][0]["tokens"][0] = uint64_t{4294967934}; }, "continuation 0"},
      {"reason 2^32 + 1", "gen-hi.json", [](json& j) { j["results"][0]["reason"] = uint64_t{4294967297}; }, "continuation 0"},
      // a step's ids and log-probs of different lengths (the spot check read past the log-probs)
      {"step_topk sizes", "gen-hi.json", [](json& j) { j["results"][0]["step_topk"] = json::parse("[[[5, 6], [-0.1]]]"); },
       "continuation 0"},
      {"step_topk log-prob 5", "gen-hi.json", [](json& j) { j["results"][0]["step_topk"] = json::parse("[[[5], [5.0]]]"); },
       "continuation 0"},
      // the entry goes into the manifest: checked as the manifest's reader checks it
      {"entry budget 2^40", "hi.case.json", [](json& j) { j["entry"]["max_new_tokens"] = int64_t{1} << 40; },
       "field 'entry.max_new_tokens': expected an integer in [0, 1048576]"},
      {"entry negative floor", "hi.case.json", [](json& j) { j["entry"]["floors"]["fp32"]["kld_prefill"] = -1; },
       "field 'entry.floors.fp32.kld_prefill': expected a KLD noise floor >= 0"},
  };
  for (const ResumeEdit& e : edits) {
    const std::string what = e.what;
    CAPTURE(what);
    TempDir tmp("resume-numbers");
    const ResumeSeed s(tmp.path());
    s.edit(e.file, e.edit);
    const std::string msg = s.refusal();
    INFO("message: " << msg);
    CHECK(msg.find((tmp.path() / ".mini.resume" / e.file).string()) != std::string::npos);
    CHECK(msg.find(e.says) != std::string::npos);
  }
  // null: the writer's -inf (nlohmann::json writes a non-finite number as null), read back as -inf
  TempDir tmp("resume-numbers");
  const ResumeSeed s(tmp.path());
  s.edit("gen-hi.json", [](json& j) { j["results"][0]["step_topk"] = json::parse("[[[5, 6], [-0.1, null]]]"); });
  const GoldenResume r = s.open();
  REQUIRE(r.generations.at(0).at(0).step_topk.size() == 1);
  CHECK(r.generations.at(0).at(0).step_topk[0].logprobs[1] == -std::numeric_limits<double>::infinity());
}
