// The record store of `golden`: the crash-safe folder transaction that puts a record at --out.
// One writer per record at a time (the lock .NAME.lock beside it); the leftovers of writers that
// were killed are removed or put back first; the record is built in .NAME.partial, each finished
// case's manifest entry kept in .NAME.resume so that an interrupted run resumes where it stopped
// (every file sealed with its own checksum and the run's key); at the end the record is swapped in
// place atomically, so --out holds the old or the new record at every moment.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "record/cases.h"
#include "record/record_manifest.h"
#include "engine/generate.h"
#include "util/file_lock.h"

namespace degen {

// The resume state of an interrupted `golden --out out` run: the folders .NAME.partial (the finished
// cases' data files) and .NAME.resume (resume.json: the key; <case id>.case.json: each finished
// case's manifest entry; gen-<first case id>.json: a --batch all group's continuations) beside
// `out`. Read as a run with `key` (the settings that make a resume valid) over `suite` would:
// discarded when made with other settings, incomplete or `restart`; else checked whole (record_store.cpp,
// "resume state"): every file sealed with its own checksum and the key's, each entry bound to its
// case, each data file to its entry, nothing else in either folder. InputError (128) naming the file
// and what to remove otherwise; a damaged resume.json is rewritten with a warning. Made empty when
// absent.
struct GoldenResume {
  std::filesystem::path partial, resume;
  std::string key_sha;                                     // SHA-256 of the key
  std::map<size_t, nlohmann::json> cases;                  // finished cases by suite index: their entries
  std::map<size_t, std::vector<GenerateResult>> generations;  // --batch all: group's first case -> continuations
};
GoldenResume open_golden_resume(const std::filesystem::path& out, const nlohmann::json& key, const Suite& suite,
                                const std::vector<std::pair<size_t, size_t>>& groups, int64_t vocab, bool restart,
                                std::FILE* progress);

// What a run asked for that the manifest holds in another form or not at all: the text of --layers
// (the manifest: the layer list), --topk before the vocabulary caps it, whether floors were asked and
// of which classes, and the spot check's --verify-layers text and positions (when it runs).
struct ResumeAsked {
  std::string layers;
  int topk = 0;
  bool floors = true;
  std::string floor_classes;
  std::optional<std::pair<std::string, int>> verify;
};

// The key of a run's resume state (the settings that make a resume valid): the manifest's head as
// the run starts (tool_version, command, model fingerprint and weights sample, tokenizer, suite,
// settings: reference_config, gen_tokens, positions, batch; the bf16 floor class's config) and what
// was asked. Its JSON is the key of every earlier version (resume_format 2), so an interrupted run
// of one still resumes.
nlohmann::json resume_key(const Manifest& head, const ResumeAsked& asked);

// One golden run's folder transaction on `out`.
class RecordStore {
 public:
  // Checks that `out` names a folder, takes the record's lock (InputError naming the holder), removes
  // the leftovers of killed writers, and refuses an existing `out` without `force` or one that is not
  // a record or an empty folder.
  RecordStore(const std::filesystem::path& out, bool force, std::FILE* progress);
  // Opens (or creates) the resume state for `key` (open_golden_resume).
  void open_resume(const nlohmann::json& key, const Suite& suite, const std::vector<std::pair<size_t, size_t>>& groups,
                   int64_t vocab, bool restart);
  // Where the data files go.
  const std::filesystem::path& partial() const { return resume_.partial; }
  // Case `ci` finished by an interrupted run ({entry, file, bytes, sha256, line}, checked), or null.
  const nlohmann::json* kept_case(size_t ci) const;
  // --batch all: the continuations of the group starting at case `first` kept by an interrupted run, or null.
  const std::vector<GenerateResult>* kept_generation(size_t first) const;
  // Keeps a finished case (its manifest entry and data file's size and SHA-256, and the line the CLI
  // prints); returns what kept_case would return for it.
  nlohmann::json save_case(size_t ci, const std::string& id, const nlohmann::json& entry, const std::string& file,
                           uint64_t bytes, const std::string& sha256, const std::string& line);
  void save_generation(size_t first, const std::string& first_id, const std::vector<GenerateResult>& gen);
  // Writes manifest.json and puts the record in place; returns the manifest's size.
  uint64_t commit(const std::string& manifest_text);

 private:
  std::filesystem::path out_, parent_;
  std::FILE* progress_;
  FileLock lock_;
  GoldenResume resume_;
};

}  // namespace degen
