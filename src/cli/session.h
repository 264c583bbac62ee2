// The setup that compare, sweep, bisect and selftest share: the golden record, the model loaded
// once with its tokenizer (when the folder has one), and the CompareOptions every run starts from.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "judge/result.h"
#include "subjects/engine.h"
#include "record/golden_record.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace degen::cli {

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;  // null when the folder has no tokenizer.json
};

// The model in `dir`, then its tokenizer.json when there is one. InputError from either.
LoadedModel load_model_and_tokenizer(const std::filesystem::path& dir);

// The flags of the commands that measure runs against a golden record.
struct SessionArgs {
  std::string golden, model;        // --golden DIR, --model DIR (the caller checks they are given)
  std::vector<std::string> cases;   // --case ids (empty: every case of the record)
  bool allow_mismatch = false;      // --allow-model-mismatch
  bool no_decode = false;           // --no-decode
};

struct Session {
  GoldenRecord rec;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;   // null when the model folder has no tokenizer.json
  CompareOptions base;              // allow_model_mismatch, decode_mode and cases set; the default config
};

// Opens the record (checksums checked), then loads the model and its tokenizer, in that order, so
// the first bad input is the one reported (InputError, exit 128).
Session open_session(const SessionArgs& a);

}  // namespace degen::cli
