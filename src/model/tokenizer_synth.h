// A small, complete Hugging Face tokenizer.json for synthetic test models: 256 byte tokens, BPE
// merges learned deterministically on a built-in corpus, and the Qwen special tokens of spec §7.1
// appended as added tokens. Loads with degen::Tokenizer and with the HF `tokenizers` package.
#pragma once
#include <cstdint>
#include <string>

namespace degen {

enum class SynthTokenizerKind : uint8_t {
  qwen35,  // Split regex with \p{M}
  qwen2,   // Split regex without \p{M} (Qwen2/Qwen3/Qwen3-Next)
};

// The JSON text; byte-identical on every call with the same arguments. Every id is < max_ids
// (as many merges as the corpus supports up to that budget). InputError if max_ids < 300.
std::string synth_tokenizer_json(SynthTokenizerKind kind, int max_ids);

// The added tokens, in id order after the learned vocabulary.
const char* const* synth_special_tokens(int* count);

}  // namespace degen
