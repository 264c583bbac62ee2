// The resume state of an interrupted golden run (the folders .NAME.partial and .NAME.resume), read as
// `golden` reads it before it computes anything (open_golden_resume): the input is the two folders'
// files packed (fuzz_common.h unpack_files: "partial/<name>", "resume/<name>"), written into a scratch
// folder. The run's key, suite and batch groups are those of the seed (tests/fuzz/seeds/golden-resume,
// a run of the golden-mini settings with --batch all killed after its first case). As the
// golden_manifest target, the harness sets every resume_sha256 to its file's own checksum, as someone
// editing and recomputing it would, so the checks behind the checksum are reached.
#include <map>

#include "record/cases.h"
#include "golden_seed.h"
#include "util/sha256.h"
#include "util/file_io.h"

namespace {

struct Seed {
  degen::Suite suite;
  nlohmann::json key;
  std::vector<std::pair<size_t, size_t>> groups;
  int64_t vocab = 0;
};

const Seed& seed() {
  static const Seed s = [] {
    Seed r;
    const auto src = fuzz::source_dir() / "tests/fuzz/seeds";
    r.suite = degen::load_suite(src / "mini-cases.json");
    r.key = nlohmann::json::parse(degen::read_file(src / "golden-resume/resume/resume.json"));
    r.key.erase("key_sha256");
    r.key.erase("resume_sha256");
    degen::GoldenOptions o;
    o.batch_all = r.key.value("batch", std::string()) == "all";
    r.groups = degen::golden_batch_groups(r.suite, o);
    r.vocab = nlohmann::json::parse(degen::read_file(src / "golden-mini/manifest.json"))["model"]["vocab_size"].get<int64_t>();
    return r;
  }();
  return s;
}

// The file's resume_sha256 set to its content's checksum (a JSON object that carries one), else as is.
std::string resealed(const std::string& bytes) {
  try {
    nlohmann::json j = degen::parse_json(bytes, "resume file");
    if (!j.is_object() || !j.contains("resume_sha256")) return bytes;
    nlohmann::json c = j;
    c.erase("resume_sha256");
    j["resume_sha256"] = degen::sha256_hex(nlohmann::json::parse(c.dump()).dump());
    return j.dump();
  } catch (const nlohmann::json::exception&) {
    return bytes;  // written as is: the reader must refuse it
  } catch (const degen::Error&) {
    return bytes;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Seed& s = seed();
  std::vector<std::pair<std::string, std::string>> files;
  for (auto& [name, bytes] : fuzz::unpack_files(fuzz::as_view(data, size))) {
    const bool partial = name.rfind("partial/", 0) == 0, resume = name.rfind("resume/", 0) == 0;
    if (!partial && !resume) continue;
    files.emplace_back(partial ? ".mini.partial/" + name.substr(8) : ".mini.resume/" + name.substr(7),
                       resume ? resealed(bytes) : bytes);
  }
  const auto dir = fuzz::scratch() / "resume";
  fuzz::write_files(dir, files);
  fuzz::expect_clean("golden resume state", [&] {
    const degen::GoldenResume r = degen::open_golden_resume(dir / "mini", s.key, s.suite, s.groups, s.vocab, false, nullptr);
    for (const auto& [i, e] : r.cases) (void)e.at("entry");
  });
  return 0;
}
