// The record store of `golden` (record_store.h): the crash-safe folder transaction of one run.
#include "record/record_store.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <set>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "record/golden_record.h"
#include "util/error.h"
#include "util/json_input.h"
#include "util/sha256.h"
#include "util/file_io.h"

namespace degen {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// True when `dir` may be replaced by --force: an empty folder or a golden record.
bool replaceable(const fs::path& dir) {
  if (!fs::is_directory(dir)) return false;
  if (fs::exists(dir / "manifest.json")) return true;
  return fs::directory_iterator(dir) == fs::directory_iterator();
}

// Test hook: DEGEN_TEST_GOLDEN_KILL=<point> kills this process with SIGKILL at that point ("case-N":
// case N (0-based) finished and its resume entry written; "before-swap": the new record complete
// beside the old one; "after-swap": swapped, the old one not yet removed), so tests can check what a
// kill leaves behind.
void test_kill_point(const char* point) {
  const char* want = std::getenv("DEGEN_TEST_GOLDEN_KILL");
  if (want && std::strcmp(want, point) == 0) ::raise(SIGKILL);
}

// The PID in a temporary's name ".<record>.tmp-PID" / ".<record>.old-PID", or -1.
pid_t temporary_pid(const std::string& entry, const std::string& prefix) {
  if (entry.rfind(prefix, 0) != 0 || entry.size() == prefix.size() || entry.size() - prefix.size() > 9) return -1;
  const std::string digits = entry.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  return static_cast<pid_t>(std::stol(digits));
}

// Leftovers of earlier writers of `out` that died (the caller holds the record's lock, so no live
// writer of it exists; a PID that is still alive is left alone all the same): a record moved aside
// by a writer killed before it put the new one in place is put back when `out` is missing; every
// other temporary folder is removed.
void clean_stale_temporaries(const fs::path& parent, const fs::path& out, std::FILE* progress) {
  const std::string name = out.filename().string();
  const std::string tmp_prefix = cat(".", name, ".tmp-"), old_prefix = cat(".", name, ".old-");
  std::vector<fs::path> tmps, olds;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string entry = e.path().filename().string();
    pid_t pid = temporary_pid(entry, tmp_prefix);
    const bool is_old = pid < 0 && (pid = temporary_pid(entry, old_prefix)) >= 0;
    if (pid < 0 || (pid != ::getpid() && process_alive(pid))) continue;
    (is_old ? olds : tmps).push_back(e.path());
  }
  for (const auto& old : olds) {
    if (!fs::exists(out) && fs::exists(old / "manifest.json")) {
      fs::rename(old, out);
      if (progress) std::fprintf(progress, "golden: put back %s, left aside by an interrupted --force (from %s)\n",
                                 out.string().c_str(), old.filename().string().c_str());
    } else {
      fs::remove_all(old);
    }
  }
  for (const auto& t : tmps) fs::remove_all(t);
}

// Puts the finished record `tmp` at `out` (an existing record or empty folder, or nothing) so that
// `out` is never missing: on Linux one renameat2(RENAME_EXCHANGE) swaps the two folders, then the
// old record (now at `tmp`) is removed; a kill at any point leaves `out` whole (old or new) and a
// temporary that the next run removes. Where the filesystem cannot exchange, the old record is moved
// aside first; a kill between the two renames leaves it at ".<name>.old-PID", which the next golden
// run on `out` puts back (clean_stale_temporaries).
void replace_record(const fs::path& tmp, const fs::path& out, const fs::path& parent) {
  if (!fs::exists(out)) {
    fs::rename(tmp, out);
    return;
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) == 0) {
    test_kill_point("after-swap");
    fs::remove_all(tmp);
    return;
  }
  const int err = errno;
  if (err != EINVAL && err != ENOSYS && err != EOPNOTSUPP)
    input_error("golden: cannot put the new record in place of ", out.string(), ": ", std::strerror(err));
  const fs::path old = parent / cat(".", out.filename().string(), ".old-", ::getpid());
  fs::remove_all(old);
  fs::rename(out, old);
  test_kill_point("after-swap");
  fs::rename(tmp, out);
  fs::remove_all(old);
}

json step_topk_json(const std::vector<StepTopK>& v) {
  json a = json::array();
  for (const StepTopK& t : v) a.push_back({t.ids, t.logprobs});
  return a;
}

// Token ids of a --batch all generation as save_generation writes them: integers in [0, vocab),
// compared before they are narrowed (read as int32, 2^32 + 5 was id 5). std::out_of_range otherwise.
std::vector<int32_t> generation_ids(const json& a, int64_t vocab) {
  if (!a.is_array()) throw std::out_of_range("ids");
  std::vector<int32_t> out;
  for (const json& t : a) {
    if (!t.is_number_unsigned() || t.get<uint64_t>() >= static_cast<uint64_t>(vocab)) throw std::out_of_range("token");
    out.push_back(static_cast<int32_t>(t.get<uint64_t>()));
  }
  return out;
}

// One generation step's top-K as step_topk_json writes it: [ids, log-probs], as many of each; a
// log-prob is at most golden_record.h kMaxStoredLogprob (a log-softmax value, above 0 by rounding at
// most), or null: the writer's -inf (nlohmann::json writes a non-finite number as null).
StepTopK step_topk_from(const json& st, int64_t vocab) {
  if (!st.is_array() || st.size() != 2 || !st.at(1).is_array() || st.at(1).size() != st.at(0).size())
    throw std::out_of_range("step_topk");
  StepTopK t;
  t.ids = generation_ids(st.at(0), vocab);
  for (const json& l : st.at(1)) {
    if (l.is_null()) t.logprobs.push_back(-std::numeric_limits<double>::infinity());
    else if (l.is_number() && l.get<double>() <= kMaxStoredLogprob) t.logprobs.push_back(l.get<double>());
    else throw std::out_of_range("logprob");
  }
  return t;
}

// ---- resume state (the folders .NAME.partial and .NAME.resume of an interrupted run) ----
//
// Rule: the resume state is checked whole before anything in it is used. Every file the run writes
// there carries a checksum of its own content (SHA-256 of the canonical compact dump without the
// checksum field, as the manifest's) and the SHA-256 of the run's key (the settings that make a
// resume valid), and each case entry names its case, index and data file; the data file is checked
// against the entry. The tool writes each file whole (write_file_atomic), so an interruption never
// leaves one half-written: a file that fails a check was edited, damaged or copied from another run.
// A tampered or foreign entry, a data file that does not match its entry, or a file the run does
// not write (which would end up in the record) is refused (InputError, 128) naming the file and
// what to remove; nothing is deleted and nothing is computed, so nothing valid is lost and nothing
// tampered is sealed into a record. resume.json is the exception: it only says which settings made
// the partial record (a key with other settings discards it, as before), and every entry is bound to
// the key by itself, so an unreadable or edited resume.json is rewritten for this run with a warning
// and the entries are still checked one by one (a rerun is never blocked by it).
constexpr const char* kResumeChecksumKey = "resume_sha256";
// Bumped when the resume files change shape; part of the key, so an older partial record is
// discarded as "made with other settings" rather than refused.
constexpr int kResumeFormat = 2;

std::string checksum_without(const json& j, const char* field) {
  json m = j;
  if (m.is_object()) m.erase(field);
  return sha256_hex(json::parse(m.dump()).dump());
}

json seal_resume(json body, const std::string& key_sha) {
  body["key_sha256"] = key_sha;
  body[kResumeChecksumKey] = checksum_without(body, kResumeChecksumKey);
  return body;
}

[[noreturn]] void resume_refused(const fs::path& out, const fs::path& file, const std::string& what, const std::string& remedy) {
  input_error("golden: the resume state of ", out.string(), " is not what this tool wrote: ", file.string(), ": ", what,
              " (edited, damaged or copied from another run; an interruption never leaves this). Nothing was computed "
              "or removed. ", remedy, ", or rerun with --restart to discard the whole partial record");
}

// A resume file that must be sealed by this run's key: parsed, its checksum and key checked.
json open_resume(const fs::path& out, const fs::path& file, const std::string& key_sha, const std::string& remedy) {
  json j;
  try {
    j = parse_json(read_file(file, kMaxInputFileBytes), file.string(), false);
  } catch (const Error& e) {
    resume_refused(out, file, cat("unreadable (", e.what(), ")"), remedy);
  }
  if (j.is_discarded() || !j.is_object()) resume_refused(out, file, "not a JSON object", remedy);
  const json* sum = j.contains(kResumeChecksumKey) ? &j[kResumeChecksumKey] : nullptr;
  if (!sum || !sum->is_string()) resume_refused(out, file, cat("no ", kResumeChecksumKey, " checksum"), remedy);
  const std::string got = checksum_without(j, kResumeChecksumKey);
  if (got != sum->get<std::string>())
    resume_refused(out, file, cat("its content does not match its own checksum (", kResumeChecksumKey, " ",
                                  json_excerpt(*sum, 70), ", its content hashes to ", got, ")"), remedy);
  if (!j.contains("key_sha256") || j["key_sha256"] != key_sha)
    resume_refused(out, file, cat("it was made for another run (key_sha256 ",
                                  j.contains("key_sha256") ? json_excerpt(j["key_sha256"], 70) : std::string("missing"),
                                  ", this run's settings hash to ", key_sha, ")"), remedy);
  return j;
}

// The name of a temporary that write_atomic leaves when it is killed: ".NAME.tmp-PID-N".
bool atomic_write_leftover(const std::string& name) {
  const size_t at = name.rfind(".tmp-");
  if (name.empty() || name[0] != '.' || at == std::string::npos || at == 0) return false;
  const std::string tail = name.substr(at + 5);
  return !tail.empty() && std::all_of(tail.begin(), tail.end(), [](char c) { return (c >= '0' && c <= '9') || c == '-'; });
}

// Every entry of `dir` is one of `allowed` (or a leftover of an interrupted atomic write, removed);
// anything else would be sealed into the record (partial) or is not ours (resume): refused.
void check_resume_folder(const fs::path& out, const fs::path& dir, const std::set<std::string>& allowed, const char* expected) {
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e.path());
  std::sort(entries.begin(), entries.end());
  for (const fs::path& p : entries) {
    const std::string name = p.filename().string();
    if (atomic_write_leftover(name) && fs::is_regular_file(fs::symlink_status(p))) {
      fs::remove(p);
      continue;
    }
    if (!allowed.count(name) || !fs::is_regular_file(fs::symlink_status(p)))
      resume_refused(out, p, cat("not a file the run writes there (expected ", expected, ")"),
                     cat("Remove it (rm -r ", p.string(), ")"));
  }
}

// A finished case of the resume state, checked whole: its entry (checksum, key, case id, index,
// data file name, field types) and its data file (size, SHA-256). nullopt when the case has no entry
// (not finished); InputError otherwise.
std::optional<json> kept_case(const fs::path& out, const fs::path& partial, const fs::path& resume, const std::string& id,
                              size_t index, const std::string& key_sha) {
  const fs::path entry_file = resume / (id + ".case.json");
  if (!fs::exists(fs::symlink_status(entry_file))) return std::nullopt;
  const std::string file = id + ".safetensors";
  const std::string remedy = cat("Remove ", entry_file.string(), " and ", (partial / file).string(),
                                 " to have case '", id, "' computed again");
  const json e = open_resume(out, entry_file, key_sha, remedy);
  auto bad = [&](const std::string& what) { resume_refused(out, entry_file, what, remedy); };
  try {
    const json& jc = e.at("entry");
    if (jc.at("id") != id) bad(cat("its case id is ", json_excerpt(jc.at("id")), ", expected \"", id, "\""));
    if (!jc.at("index").is_number_unsigned() || jc.at("index").get<uint64_t>() != index)
      bad(cat("its case index is ", json_excerpt(jc.at("index")), ", expected ", index, " (the case's place in the suite)"));
    if (e.at("file") != file || jc.at("file") != file)
      bad(cat("its data file is ", json_excerpt(e.at("file")), ", expected \"", file, "\""));
    if (!e.at("bytes").is_number_unsigned() || !e.at("sha256").is_string() || !e.at("line").is_string())
      bad("expected bytes (a count), sha256 and line (strings)");
    // The entry goes into the manifest as it is: every value range-checked as the manifest's reader
    // checks it (record_manifest.cpp), so that no record is sealed with one it would refuse.
    (void)case_from_json(jc, "entry");
  } catch (const ManifestValueError& x) {
    bad(x.what());
  } catch (const json::exception&) {
    bad("expected the fields entry (a case's manifest entry: id, index, file, ...), file, bytes, sha256 and line");
  }
  const fs::path data = partial / file;
  if (!fs::is_regular_file(fs::symlink_status(data)))
    resume_refused(out, data, cat("missing, while its entry ", entry_file.string(), " says the case finished"), remedy);
  const std::string bytes = read_file(data);
  const std::string h = sha256_hex(bytes);
  if (bytes.size() != e["bytes"].get<uint64_t>() || h != e["sha256"].get<std::string>())
    resume_refused(out, data, cat("does not match its entry ", entry_file.string(), " (", bytes.size(), " bytes, SHA-256 ", h,
                                  "; expected ", e["bytes"].get<uint64_t>(), " bytes, ", e["sha256"].get<std::string>(), ")"),
                   remedy);
  return e;
}

}  // namespace

GoldenResume open_golden_resume(const fs::path& out, const json& key, const Suite& suite,
                                const std::vector<std::pair<size_t, size_t>>& groups, int64_t vocab, bool restart,
                                std::FILE* progress) {
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  GoldenResume rs;
  rs.partial = parent / cat(".", out.filename().string(), ".partial");
  rs.resume = parent / cat(".", out.filename().string(), ".resume");
  const fs::path& partial = rs.partial;
  const fs::path& resume = rs.resume;
  const fs::path key_file = resume / "resume.json";
  rs.key_sha = sha256_hex(key.dump());
  const std::string& key_sha = rs.key_sha;
  const json sealed_key = seal_resume(key, key_sha);  // resume.json: the key, with its own checksum
  if (fs::exists(partial) || fs::exists(resume)) {
    std::string why, unreadable;
    if (!fs::is_directory(partial) || !fs::is_directory(resume)) {
      why = "incomplete";
    } else if (restart) {
      why = "--restart";
    } else if (fs::exists(fs::symlink_status(key_file))) {
      try {
        json k = parse_json(read_file(key_file, kMaxInputFileBytes), key_file.string(), false);
        if (k.is_discarded() || !k.is_object()) unreadable = "not a JSON object";
        else if (!k.contains(kResumeChecksumKey) || k[kResumeChecksumKey] != checksum_without(k, kResumeChecksumKey))
          unreadable = "its content does not match its own checksum";
        else if (k != sealed_key) why = "made with other settings";
      } catch (const Error& e) {
        unreadable = e.what();
      }
    }
    if (!why.empty()) {
      fs::remove_all(partial);
      fs::remove_all(resume);
      if (progress) std::fprintf(progress, "golden: discarded the partial record of an interrupted run (%s)\n", why.c_str());
    } else if (!unreadable.empty()) {
      // Its entries are bound to the key by themselves: resume.json is rewritten and each is checked.
      std::fprintf(stderr, "golden: warning: %s is damaged or was edited (%s); rewritten for this run's settings; the finished "
                   "cases of the partial record are each checked against their own checksum and this run's key\n",
                   key_file.string().c_str(), unreadable.c_str());
      write_file_atomic(key_file, sealed_key.dump(1) + "\n");
    }
  }
  if (!fs::exists(partial)) {
    fs::create_directories(partial);
    fs::create_directories(resume);
  }
  if (!fs::exists(fs::symlink_status(key_file))) write_file_atomic(key_file, sealed_key.dump(1) + "\n");
  {
    // Only what the run writes: the data files and the manifest (partial), and the key, the case
    // entries and the --batch all generations (resume).
    std::set<std::string> data = {"manifest.json"}, book = {"resume.json"};
    for (const Case& c : suite.cases) {
      data.insert(c.id + ".safetensors");
      book.insert(c.id + ".case.json");
      book.insert(cat("gen-", c.id, ".json"));
    }
    check_resume_folder(out, partial, data, "the data files <case id>.safetensors of the suite's cases and manifest.json");
    check_resume_folder(out, resume, book, "resume.json, <case id>.case.json and gen-<case id>.json of the suite's cases");
  }

  for (size_t ci = 0; ci < suite.cases.size(); ++ci)
    if (std::optional<json> e = kept_case(out, partial, resume, suite.cases[ci].id, ci, key_sha)) rs.cases[ci] = std::move(*e);
  for (const auto& [b, e] : groups) {
    const fs::path gf = resume / cat("gen-", suite.cases[b].id, ".json");
    if (!fs::exists(fs::symlink_status(gf))) continue;
    const std::string remedy = cat("Remove it to have the continuations of cases ", b + 1, "-", e, " generated again");
    const json g = open_resume(out, gf, key_sha, remedy);
    if (!g.contains("results") || !g["results"].is_array() || g["results"].size() != e - b || g.value("first", json()) != b)
      resume_refused(out, gf, cat("expected the ", e - b, " continuations of the batch group of cases ", b + 1, "-", e), remedy);
    std::vector<GenerateResult>& out_gen = rs.generations[b];
    for (size_t i = b; i < e; ++i) {
      GenerateResult r;
      try {
        const json& j = g["results"][i - b];
        r.tokens = generation_ids(j.at("tokens"), vocab);
        // a StopReason (engine/generate.h), compared as the JSON integer it is (read as int, 2^32 + 1 was 1)
        const json& reason = j.at("reason");
        if (!reason.is_number_unsigned() || reason.get<uint64_t>() > static_cast<uint64_t>(StopReason::max_context))
          throw std::out_of_range("reason");
        r.reason = static_cast<StopReason>(reason.get<uint64_t>());
        r.nonfinite_logits = j.at("nonfinite").get<bool>();
        const json& steps = j.value("step_topk", json::array());
        // at most one per generated token (the spot check's steps), each the ids and their log-probs
        if (!steps.is_array() || steps.size() > r.tokens.size()) throw std::out_of_range("step_topk");
        for (const json& st : steps) r.step_topk.push_back(step_topk_from(st, vocab));
      } catch (const std::exception&) {
        resume_refused(out, gf, cat("continuation ", i - b, " is not tokens (ids in [0, ", vocab, ")), a stop reason, "
                                    "nonfinite and step_topk as the run writes them"), remedy);
      }
      out_gen.push_back(std::move(r));
    }
  }
  return rs;
}


// ---- the resume key ----

json resume_key(const Manifest& head, const ResumeAsked& asked) {
  const Manifest::Settings& s = head.settings;
  json key = {{"tool_version", head.tool_version ? json(*head.tool_version) : json(nullptr)},
          {"model", head.model.fingerprint},
          {"weights_sample", head.model.weights_sample ? json(*head.model.weights_sample) : json(nullptr)},
          {"tokenizer", head.tokenizer.fingerprint ? json(*head.tokenizer.fingerprint) : json(nullptr)},
          {"suite", head.suite.sha256 ? json(*head.suite.sha256) : json(nullptr)},
          {"command", head.command ? json(*head.command) : json(nullptr)},
          {"precision", s.reference_config ? json(*s.reference_config) : json(nullptr)},
          {"gen_tokens", s.gen_tokens ? json(*s.gen_tokens) : json(nullptr)},
          {"layers", asked.layers},
          {"positions", s.positions ? json(*s.positions) : json(nullptr)},
          {"topk", asked.topk},
          {"floors", asked.floors},
          {"batch", s.batch.value_or("1")},
          {"verify", asked.verify ? json({{"layers", asked.verify->first}, {"positions", asked.verify->second}}) : json(nullptr)},
          {"bf16_floors", head.noise_floors.classes[0].config ? json(*head.noise_floors.classes[0].config) : json(nullptr)},
          {"floor_classes", asked.floor_classes},
          {"resume_format", kResumeFormat}};
  // The ISA of the CPU's products changes the last bits of every case: a partial record made under
  // another one is not resumed (absent in keys of records made before the ISA was recorded).
  if (s.cpu_isa) key["cpu_isa"] = *s.cpu_isa;
  return key;
}

// ---- the store ----

namespace {

fs::path parent_of(const fs::path& out) { return out.has_parent_path() ? out.parent_path() : fs::path("."); }

// `out` named as a folder, its parent created (before the lock file is made there).
const fs::path& checked_out(const fs::path& out) {
  if (out.filename().empty() || out.filename() == "." || out.filename() == "..")
    input_error("golden: --out ", out.string(), ": expected a folder name (such as golden/MODEL/smoke)");
  fs::create_directories(parent_of(out));
  return out;
}

}  // namespace

RecordStore::RecordStore(const fs::path& out, bool force, std::FILE* progress)
    : out_(checked_out(out)), parent_(parent_of(out)), progress_(progress),
      lock_(parent_ / cat(".", out.filename().string(), ".lock"), cat("golden --out ", out.string())) {
  // One writer per record at a time (the lock); then the leftovers of writers that were killed.
  clean_stale_temporaries(parent_, out_, progress_);
  if (fs::exists(out_) && !force)
    input_error("golden: ", out_.string(), " already exists (use --force to replace a golden record)");
  if (fs::exists(out_) && !replaceable(out_))
    input_error("golden: ", out_.string(), " exists and is not a golden record or an empty folder; not replacing it");
}

void RecordStore::open_resume(const json& key, const Suite& suite, const std::vector<std::pair<size_t, size_t>>& groups,
                              int64_t vocab, bool restart) {
  resume_ = open_golden_resume(out_, key, suite, groups, vocab, restart, progress_);
}

const json* RecordStore::kept_case(size_t ci) const {
  auto it = resume_.cases.find(ci);
  return it == resume_.cases.end() ? nullptr : &it->second;
}

const std::vector<GenerateResult>* RecordStore::kept_generation(size_t first) const {
  auto it = resume_.generations.find(first);
  return it == resume_.generations.end() ? nullptr : &it->second;
}

json RecordStore::save_case(size_t ci, const std::string& id, const json& entry, const std::string& file, uint64_t bytes,
                            const std::string& sha256, const std::string& line) {
  json e = {{"entry", entry}, {"file", file}, {"bytes", bytes}, {"sha256", sha256}, {"line", line}};
  write_file_atomic(resume_.resume / (id + ".case.json"), seal_resume(e, resume_.key_sha).dump() + "\n");
  test_kill_point(cat("case-", ci).c_str());
  return e;
}

void RecordStore::save_generation(size_t first, const std::string& first_id, const std::vector<GenerateResult>& gen) {
  json saved = json::array();
  for (const GenerateResult& r : gen)
    saved.push_back({{"tokens", r.tokens},
                     {"reason", static_cast<int>(r.reason)},
                     {"nonfinite", r.nonfinite_logits},
                     {"step_topk", step_topk_json(r.step_topk)}});
  write_file_atomic(resume_.resume / cat("gen-", first_id, ".json"),
                    seal_resume({{"first", first}, {"results", saved}}, resume_.key_sha).dump() + "\n");
}

uint64_t RecordStore::commit(const std::string& manifest_text) {
  write_file_atomic(resume_.partial / "manifest.json", manifest_text);
  // Finished: the record leaves `partial` for a temporary of this process, the bookkeeping goes, and
  // the record is put in place (a kill in between leaves a temporary that the next run removes).
  const fs::path tmp = parent_ / cat(".", out_.filename().string(), ".tmp-", ::getpid());
  fs::remove_all(tmp);
  fs::rename(resume_.partial, tmp);
  fs::remove_all(resume_.resume);
  test_kill_point("before-swap");
  replace_record(tmp, out_, parent_);
  return static_cast<uint64_t>(fs::file_size(out_ / "manifest.json"));
}

}  // namespace degen
