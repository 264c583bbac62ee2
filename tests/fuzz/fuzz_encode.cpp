// Text through a real tokenizer (the committed Qwen3.5-style fixture): what `tokenize --file`,
// cases and chat templates feed it. Checks, besides the error contract: valid UTF-8 in gives ids
// that decode back to the NFC form of the text (the byte-level BPE round trip).
#include "fuzz_common.h"
#include "model/tokenizer.h"

namespace {
const degen::Tokenizer& tok() {
  static auto t = degen::Tokenizer::load(fuzz::source_dir() / "tests/fixtures/tokenizer/qwen35/tokenizer.json");
  return *t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_view(data, size);
  fuzz::expect_clean("encode", [&] {
    const std::vector<int32_t> ids = tok().encode(text);
    const std::string back = tok().decode(ids);
    if (back != degen::Tokenizer::nfc(text))
      fuzz::finding("encode", "decode(encode(text)) is not the NFC form of the text");
  });
  return 0;
}
