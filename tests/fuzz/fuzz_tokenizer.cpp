// tokenizer.json as Tokenizer::load reads it, then a few encodes and decodes over what it defines
// (special tokens written in the text, byte-level fallbacks, NFC, both pre-tokenizers).
#include "fuzz_common.h"
#include "model/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_view(data, size));
  fuzz::expect_clean("tokenizer", [&] {
    auto tok = degen::Tokenizer::from_json_text(text, "tokenizer.json");
    for (const char* s : {"Hello world", "<|im_start|>user\nhi<|im_end|>", "cafe\xcc\x81 \xf0\x9f\x98\x80 12345", "  \n\t x"}) {
      const std::vector<int32_t> ids = tok->encode(s);
      for (int32_t id : ids)
        if (!tok->is_defined(id)) fuzz::finding("tokenizer", "encode produced an id the tokenizer does not define");
      (void)tok->decode(ids);
    }
    const int32_t end = tok->vocab_end();
    for (int32_t id : {0, end / 2, end - 1})
      if (id >= 0 && tok->is_defined(id)) (void)tok->piece(id), (void)tok->token_bytes(id);
    (void)tok->padding_mask(int64_t(end) + 3);
  });
  return 0;
}
