// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (spec model.md §7.1).
// Pipeline of encode(), the same as HF `tokenizers` for the Qwen2/Qwen3/Qwen3.5 files:
//   1. added tokens (normalized=false) are matched in the raw text, leftmost-longest;
//   2. the pieces between them are NFC-normalised (utf8proc), then added tokens with normalized=true
//      are matched in the normalised pieces;
//   3. the Split pre-tokenizer cuts each piece with the Qwen3.5 pattern (with \p{M}) or the
//      Qwen2/Qwen3 pattern (without), implemented as a hand-written matcher over code points;
//   4. each pre-token is mapped to byte-level symbols and merged by BPE rank.
// Every structural problem of the file is an InputError (exit 128) saying expected vs found.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace degen {

// Which Split pattern tokenizer.json uses (spec §7.1); llama.cpp calls them "qwen35" and "qwen2".
enum class PreTokenizerKind : uint8_t {
  qwen35,  // (?i:'s|...)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|...
  qwen2,   // the same without \p{M} (Qwen2, Qwen3, Qwen3-Next)
};
const char* pretokenizer_name(PreTokenizerKind k);  // "qwen35" / "qwen2"

// The exact regex strings of tokenizer.json (after JSON unescaping) that we recognise.
extern const char* const kQwen35SplitRegex;
extern const char* const kQwen2SplitRegex;

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Reads and validates tokenizer.json; InputError naming the file on any problem.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& tokenizer_json);
  // Same from text; `origin` names the source in messages.
  static std::unique_ptr<Tokenizer> from_json_text(const std::string& text, const std::string& origin);

  // Text to ids. Added/special tokens written in the text are recognised. No BOS is added.
  // Invalid UTF-8: InputError "... not valid UTF-8 at byte offset N ..." (callers add the case id).
  // Thread-safe (the word cache is guarded).
  std::vector<int32_t> encode(std::string_view utf8_text) const;
  // Ids to raw bytes (byte-level decoding; added tokens give their content). The result may be
  // invalid UTF-8 when a multi-byte character is split across the ids. Unknown id: InputError.
  std::string decode(const std::vector<int32_t>& ids) const;
  // Bytes of one token (decode of a single id).
  std::string token_bytes(int32_t id) const;
  // The token string as written in tokenizer.json (byte-level symbols such as "Ġthe", or the
  // added token's content). Unknown id: InputError.
  std::string piece(int32_t id) const;

  int32_t vocab_end() const { return vocab_end_; }  // 1 + the largest id the tokenizer defines
  bool is_defined(int32_t id) const;                 // id names a token (vocab or added)
  std::optional<int32_t> token_id(std::string_view token) const;  // vocab or added token, exact string
  bool is_added(int32_t id) const;    // listed in added_tokens
  bool is_special(int32_t id) const;  // listed in added_tokens with "special": true
  PreTokenizerKind pretokenizer() const { return kind_; }
  std::string fingerprint() const { return fingerprint_; }  // FNV-1a 64 of the file bytes, 16 hex digits
  size_t num_merges() const;
  const std::string& origin() const { return origin_; }

  // 1 for every id in [0, model_vocab_size) the tokenizer does not define (the embedding rows past
  // vocab_end(), or holes): sampling must never pick them. InputError if the model's vocabulary
  // is smaller than vocab_end() (the tokenizer could produce ids the model has no row for).
  std::vector<uint8_t> padding_mask(int64_t model_vocab_size) const;

  // Building blocks, exposed for tests and tools.
  // NFC of valid UTF-8 (utf8proc). InputError on invalid UTF-8.
  static std::string nfc(std::string_view utf8);
  // The pre-tokens of already-normalised text, as byte ranges [begin, end).
  static std::vector<std::pair<size_t, size_t>> pre_tokenize(std::string_view utf8, PreTokenizerKind kind);
  // Byte offset of the first invalid UTF-8 sequence, or npos when the text is valid.
  static size_t find_invalid_utf8(std::string_view s);

  struct Impl;

 private:
  Tokenizer();
  std::unique_ptr<Impl> impl_;
  PreTokenizerKind kind_ = PreTokenizerKind::qwen35;
  int32_t vocab_end_ = 0;
  std::string fingerprint_;
  std::string origin_;
};

// FNV-1a 64-bit hash as 16 lowercase hex digits.
std::string fnv1a64_hex(std::string_view bytes);

// GPT-2 byte-to-unicode mapping of raw bytes ("Hello world" -> "HelloĠworld").
std::string bytes_to_bytelevel(std::string_view bytes);

}  // namespace degen
