// Shared CLI setup for the commands that run against a golden record (see session.h).
#include "cli/session.h"

namespace degen::cli {

namespace fs = std::filesystem;

LoadedModel load_model_and_tokenizer(const fs::path& dir) {
  LoadedModel l;
  l.model = load_model(dir);
  if (fs::exists(dir / "tokenizer.json")) l.tok = Tokenizer::load(dir / "tokenizer.json");
  return l;
}

Session open_session(const SessionArgs& a) {
  Session s;
  s.rec = GoldenRecord::open(a.golden);
  LoadedModel l = load_model_and_tokenizer(a.model);
  s.model = std::move(l.model);
  s.tok = std::move(l.tok);
  s.base.allow_model_mismatch = a.allow_mismatch;
  s.base.decode_mode = !a.no_decode;
  s.base.cases = a.cases;
  return s;
}

}  // namespace degen::cli
