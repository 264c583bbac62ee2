// Byte-level BPE tokenizer from a Hugging Face tokenizer.json: loader and validation, added-token
// matching, NFC (utf8proc), the Qwen Split pre-tokenizers as a hand-written matcher over code points
// (categories from utf8proc), byte-to-unicode mapping, rank-ordered BPE with a word cache, decoding.
// Behaviour follows HF `tokenizers` (spec model.md §7.1); tests/fixtures/tokenizer holds its ids.
#include "model/tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "util/file_io.h"
#include "util/error.h"
#include "util/json_input.h"

namespace degen {

const char* const kQwen35SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* pretokenizer_name(PreTokenizerKind k) {
  return k == PreTokenizerKind::qwen35 ? "qwen35" : "qwen2";
}

std::string fnv1a64_hex(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// ---------------------------------------------------------------------------------------------
// UTF-8
// ---------------------------------------------------------------------------------------------
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when it is invalid (overlong, surrogate,
// beyond U+10FFFF, truncated, stray continuation byte).
inline size_t utf8_seq_len(const unsigned char* s, size_t i, size_t n) {
  unsigned char c = s[i];
  if (c < 0x80) return 1;
  auto cont = [&](size_t k) { return i + k < n && (s[i + k] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (i + 1 >= n) return 0;
    unsigned char c1 = s[i + 1];
    if (c == 0xE0 && c1 < 0xA0) return 0;  // overlong
    if (c == 0xED && c1 > 0x9F) return 0;  // surrogates
    return cont(1) && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (i + 1 >= n) return 0;
    unsigned char c1 = s[i + 1];
    if (c == 0xF0 && c1 < 0x90) return 0;  // overlong
    if (c == 0xF4 && c1 > 0x8F) return 0;  // > U+10FFFF
    return cont(1) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// Decodes the (valid) sequence at s[i]; advances i.
inline uint32_t utf8_next(const unsigned char* s, size_t& i) {
  unsigned char c = s[i];
  if (c < 0x80) { i += 1; return c; }
  if (c < 0xE0) { uint32_t cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu); i += 2; return cp; }
  if (c < 0xF0) {
    uint32_t cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
    i += 3;
    return cp;
  }
  uint32_t cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
                (s[i + 3] & 0x3Fu);
  i += 4;
  return cp;
}

// Start of the code point that ends just before byte `end` (valid UTF-8).
inline size_t utf8_prev(const unsigned char* s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (s[i] & 0xC0) == 0x80) --i;
  return i;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

[[noreturn]] void throw_invalid_utf8(std::string_view s, size_t off) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", static_cast<unsigned char>(s[off]));
  input_error("text is not valid UTF-8 at byte offset ", off, " (byte ", buf,
              "); expected UTF-8 encoded text");
}

// ---------------------------------------------------------------------------------------------
// Character classes (utf8proc general categories)
// ---------------------------------------------------------------------------------------------
enum : uint8_t {
  kL = 1,      // \p{L}
  kM = 2,      // \p{M}
  kN = 4,      // \p{N}
  kWS = 8,     // \s (Oniguruma/Rust Unicode: 9-13, 0x20, 0x85, Zs, Zl, Zp)
  kCRLF = 16,  // \r or \n
  kWord = 32,  // \w of the Rust regex crate (single_word): L, M, Nd, Nl, Pc, ZWNJ/ZWJ
};

uint8_t compute_class(uint32_t cp) {
  uint8_t c = 0;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
      c |= kL | kWord; break;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
      c |= kM | kWord; break;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL:
      c |= kN | kWord; break;
    case UTF8PROC_CATEGORY_NO:
      c |= kN; break;
    case UTF8PROC_CATEGORY_PC:
      c |= kWord; break;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
      c |= kWS; break;
    default: break;
  }
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85) c |= kWS;
  if (cp == '\r' || cp == '\n') c |= kCRLF;
  if (cp == 0x200C || cp == 0x200D) c |= kWord;
  return c;
}

// Classes of the Basic Multilingual Plane, computed once; others ask utf8proc each time.
const std::vector<uint8_t>& bmp_classes() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(0x10000);
    for (uint32_t cp = 0; cp < 0x10000; ++cp) t[cp] = compute_class(cp);
    return t;
  }();
  return table;
}

inline uint8_t char_class(uint32_t cp) {
  static const uint8_t* bmp = bmp_classes().data();
  return cp < 0x10000 ? bmp[cp] : compute_class(cp);
}

// ---------------------------------------------------------------------------------------------
// The Split pre-tokenizer (spec §7.1), matched by hand. Oniguruma tries the alternatives in order
// and takes the first that matches at the current position; every position matches one of them,
// so the pre-tokens tile the text:
//   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)
//   2 [^\r\n\p{L}\p{N}]?\p{L}+            (qwen35: [\p{L}\p{M}]+)
//   3 \p{N}
//   4  ?[^\s\p{L}\p{N}]+[\r\n]*           (qwen35: also excludes \p{M})
//   5 \s*[\r\n]+
//   6 \s+(?!\S)
//   7 \s+
// ---------------------------------------------------------------------------------------------
struct CharBuf {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<uint32_t> off;  // byte offset of each code point; off[n] = total length
};

inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// End (code point index) of the pre-token that starts at i.
size_t match_pretoken(const CharBuf& b, size_t i, size_t n, bool marks) {
  const uint32_t* cp = b.cp.data();
  const uint8_t* cls = b.cls.data();
  const uint8_t letter = marks ? (kL | kM) : kL;
  const uint8_t not_punct = marks ? (kWS | kL | kN | kM) : (kWS | kL | kN);
  // 1. contractions, case-insensitive (the long s U+017F case-folds to 's')
  if (cp[i] == '\'' && i + 1 < n) {
    uint32_t c1 = ascii_lower(cp[i + 1]);
    if (c1 == 's' || c1 == 0x17F || c1 == 't' || c1 == 'm' || c1 == 'd') {
      // 're/'ve/'ll come before 'm/'d in the pattern but share no first letter with s/t/m/d
      return i + 2;
    }
    if (i + 2 < n) {
      uint32_t c2 = ascii_lower(cp[i + 2]);
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return i + 3;
    }
  }
  // 2. optional non-letter/number/CRLF prefix, then a letter run
  if (i + 1 < n && !(cls[i] & (kCRLF | kL | kN)) && (cls[i + 1] & letter)) {
    size_t j = i + 2;
    while (j < n && (cls[j] & letter)) ++j;
    return j;
  }
  if (cls[i] & letter) {
    size_t j = i + 1;
    while (j < n && (cls[j] & letter)) ++j;
    return j;
  }
  // 3. one number character
  if (cls[i] & kN) return i + 1;
  // 4. optional space, punctuation run, trailing CR/LF
  {
    size_t j = i;
    if (cp[i] == ' ' && i + 1 < n && !(cls[i + 1] & not_punct)) j = i + 1;
    if (!(cls[j] & not_punct)) {
      while (j < n && !(cls[j] & not_punct)) ++j;
      while (j < n && (cls[j] & kCRLF)) ++j;
      return j;
    }
  }
  // 5-7. whitespace
  size_t q = i;
  size_t last_crlf = SIZE_MAX;
  while (q < n && (cls[q] & kWS)) {
    if (cls[q] & kCRLF) last_crlf = q;
    ++q;
  }
  if (q == i) return i + 1;  // unreachable: every class is covered above
  if (last_crlf != SIZE_MAX) return last_crlf + 1;  // 5: backtrack to the last CR/LF of the run
  if (q == n) return q;                             // 6: run reaches the end
  if (q - i >= 2) return q - 1;                     // 6: leave one space for the next word
  return q;                                         // 7
}

void fill_chars(std::string_view s, CharBuf& b) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size();
  b.cp.clear(); b.cls.clear(); b.off.clear();
  size_t i = 0;
  while (i < n) {
    b.off.push_back(static_cast<uint32_t>(i));
    uint32_t c = utf8_next(u, i);
    b.cp.push_back(c);
    b.cls.push_back(char_class(c));
  }
  b.off.push_back(static_cast<uint32_t>(n));
}

template <typename F>
void for_each_pretoken(std::string_view s, bool marks, F&& f) {
  thread_local CharBuf b;
  fill_chars(s, b);
  size_t n = b.cp.size();
  size_t i = 0;
  while (i < n) {
    size_t j = match_pretoken(b, i, n, marks);
    f(b.off[i], b.off[j]);
    i = j;
  }
}

// ---------------------------------------------------------------------------------------------
// GPT-2 byte-to-unicode mapping: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order.
// ---------------------------------------------------------------------------------------------
std::array<uint32_t, 256> byte_to_unicode_table() {
  std::array<uint32_t, 256> t{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    t[b] = printable ? b : next++;
  }
  return t;
}

const std::array<uint32_t, 256>& byte_to_unicode() {
  static const auto t = byte_to_unicode_table();
  return t;
}

// Byte-level symbols back to bytes; nullopt when a character is outside the 256-symbol alphabet.
std::optional<std::string> bytelevel_to_bytes(const std::string& piece) {
  static const std::unordered_map<uint32_t, unsigned char> inverse = [] {
    std::unordered_map<uint32_t, unsigned char> m;
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) m[t[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  const auto* u = reinterpret_cast<const unsigned char*>(piece.data());
  std::string out;
  size_t i = 0;
  while (i < piece.size()) {
    if (utf8_seq_len(u, i, piece.size()) == 0) return std::nullopt;
    auto it = inverse.find(utf8_next(u, i));
    if (it == inverse.end()) return std::nullopt;
    out += static_cast<char>(it->second);
  }
  return out;
}


}  // namespace

std::string bytes_to_bytelevel(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) append_utf8(out, byte_to_unicode()[c]);
  return out;
}

namespace {
// ---------------------------------------------------------------------------------------------
// Added tokens
// ---------------------------------------------------------------------------------------------
struct AddedToken {
  std::string content;  // as in tokenizer.json
  std::string pattern;  // what is matched: content, or NFC(content) when normalized
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// Leftmost-longest matcher over a handful of literal patterns (HF uses Aho-Corasick with the same
// semantics; a few dozen short patterns need nothing cleverer than a first-byte index).
class AddedMatcher {
 public:
  void build(const std::vector<AddedToken>& toks, bool normalized) {
    for (auto& v : by_first_) v.clear();
    any_ = false;
    for (size_t k = 0; k < toks.size(); ++k) {
      if (toks[k].normalized != normalized || toks[k].pattern.empty()) continue;
      by_first_[static_cast<unsigned char>(toks[k].pattern[0])].push_back(static_cast<int>(k));
      any_ = true;
    }
    for (auto& v : by_first_)
      std::stable_sort(v.begin(), v.end(), [&](int a, int b) {
        return toks[a].pattern.size() > toks[b].pattern.size();
      });
  }
  bool empty() const { return !any_; }
  // First match starting at or after pos: (token index, start), or (-1, npos).
  std::pair<int, size_t> find(std::string_view s, size_t pos, const std::vector<AddedToken>& toks) const {
    for (size_t p = pos; p < s.size(); ++p) {
      const auto& cands = by_first_[static_cast<unsigned char>(s[p])];
      if (cands.empty()) continue;
      for (int k : cands) {
        const std::string& pat = toks[k].pattern;
        if (s.size() - p >= pat.size() && std::memcmp(s.data() + p, pat.data(), pat.size()) == 0)
          return {k, p};
      }
    }
    return {-1, std::string_view::npos};
  }

 private:
  std::array<std::vector<int>, 256> by_first_;
  bool any_ = false;
};

struct Piece {
  size_t begin, end;
  int32_t id;  // -1: text to tokenize
};

uint8_t class_before(std::string_view s, size_t end) {
  if (end == 0) return 0;
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = utf8_prev(u, end);
  return char_class(utf8_next(u, i));
}
uint8_t class_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  return char_class(utf8_next(u, pos));
}

// Cuts s into added-token matches and the text between, honouring single_word/lstrip/rstrip as HF
// AddedVocabulary::find_matches does.
void split_added(std::string_view s, const AddedMatcher& m, const std::vector<AddedToken>& toks,
                 std::vector<Piece>& out) {
  out.clear();
  if (m.empty()) {
    if (!s.empty()) out.push_back({0, s.size(), -1});
    return;
  }
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  size_t start_offset = 0, pos = 0;
  while (pos < s.size()) {
    auto [k, start] = m.find(s, pos, toks);
    if (k < 0) break;
    const AddedToken& t = toks[k];
    size_t stop = start + t.pattern.size();
    pos = stop;
    if (t.single_word) {
      bool start_ok = start == 0 || !(class_before(s, start) & kWord);
      bool stop_ok = stop == s.size() || !(class_at(s, stop) & kWord);
      if (!start_ok || !stop_ok) continue;
    }
    if (t.lstrip) {
      size_t ns = start;
      while (ns > 0) {
        size_t p = utf8_prev(u, ns);
        size_t q = p;
        if (!(char_class(utf8_next(u, q)) & kWS)) break;
        ns = p;
      }
      start = std::max(ns, start_offset);
    }
    if (t.rstrip) {
      while (stop < s.size()) {
        size_t q = stop;
        if (!(char_class(utf8_next(u, q)) & kWS)) break;
        stop = q;
      }
      // note: HF resumes its search at the unstripped end; this differs only for added tokens
      // that begin with whitespace, which no Qwen tokenizer has.
      pos = stop;
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, t.id});
    start_offset = stop;
  }
  if (start_offset < s.size()) out.push_back({start_offset, s.size(), -1});
}

// ---------------------------------------------------------------------------------------------
// JSON helpers
// ---------------------------------------------------------------------------------------------
using json = nlohmann::json;

std::string jstr(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
std::string short_json(const json& j) { return json_excerpt(j, 120); }

bool is_null_or_empty_string(const json& j) { return j.is_null() || (j.is_string() && j.get<std::string>().empty()); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Tokenizer implementation
// ---------------------------------------------------------------------------------------------
struct Tokenizer::Impl {
  std::unordered_map<std::string, int32_t> token_to_id;  // vocab and added tokens
  std::vector<std::string> pieces;                         // id -> token string
  std::vector<std::string> bytes;                          // id -> decoded bytes
  std::vector<uint8_t> flags;                              // id -> kDefined | kAdded | kSpecial
  enum : uint8_t { kDefined = 1, kAdded = 2, kSpecial = 4 };
  std::array<int32_t, 256> byte_id{};
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  size_t n_merges = 0;
  bool ignore_merges = false;
  bool nfc = true;
  std::vector<AddedToken> added;
  AddedMatcher raw_matcher, norm_matcher;

  // word cache: pre-token bytes -> ids
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;
  static constexpr size_t kCacheMaxEntries = 200000;
  static constexpr size_t kCacheMaxWordBytes = 128;

  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const std::pair<int32_t, int32_t>* merge(int32_t a, int32_t b) const {
    auto it = merges.find(key(a, b));
    return it == merges.end() ? nullptr : &it->second;
  }

  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_uncached(std::string_view word, std::vector<int32_t>& out) const;
  void encode_text(std::string_view normalized, PreTokenizerKind kind, std::vector<int32_t>& out) const;
};

// BPE of one pre-token: start from one symbol per byte, repeatedly merge the adjacent pair of lowest
// rank (leftmost on ties), as HF's Word::merge_all does with its priority queue.
void Tokenizer::Impl::bpe_uncached(std::string_view word, std::vector<int32_t>& out) const {
  const size_t n = word.size();
  if (n == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges) {
    auto it = token_to_id.find(bytes_to_bytelevel(word));
    if (it != token_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Sym { int32_t id, prev, next; };
  thread_local std::vector<Sym> sym;
  sym.resize(n);
  for (size_t i = 0; i < n; ++i)
    sym[i] = {byte_id[static_cast<unsigned char>(word[i])], static_cast<int32_t>(i) - 1,
              i + 1 < n ? static_cast<int32_t>(i + 1) : -1};

  if (n <= 24) {
    // Short words: scan for the best pair each round (cheaper than a heap at this size).
    for (;;) {
      int32_t best_pos = -1, best_rank = INT32_MAX, best_id = -1;
      for (int32_t p = 0; p != -1 && sym[p].next != -1; p = sym[p].next) {
        const auto* m = merge(sym[p].id, sym[sym[p].next].id);
        if (m && m->first < best_rank) { best_rank = m->first; best_pos = p; best_id = m->second; }
      }
      if (best_pos < 0) break;
      int32_t r = sym[best_pos].next;
      sym[best_pos].id = best_id;
      sym[best_pos].next = sym[r].next;
      if (sym[r].next != -1) sym[sym[r].next].prev = best_pos;
    }
  } else {
    struct Cand { int32_t rank, pos, new_id; };
    auto worse = [](const Cand& a, const Cand& b) {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    };
    std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> q(worse);
    std::vector<uint8_t> alive(n, 1);
    auto push = [&](int32_t p) {
      if (p < 0 || sym[p].next == -1) return;
      if (const auto* m = merge(sym[p].id, sym[sym[p].next].id)) q.push({m->first, p, m->second});
    };
    for (int32_t p = 0; p + 1 < static_cast<int32_t>(n); ++p) push(p);
    while (!q.empty()) {
      Cand c = q.top();
      q.pop();
      if (!alive[c.pos] || sym[c.pos].next == -1) continue;
      const auto* m = merge(sym[c.pos].id, sym[sym[c.pos].next].id);
      if (!m || m->second != c.new_id || m->first != c.rank) continue;  // stale entry
      int32_t r = sym[c.pos].next;
      sym[c.pos].id = c.new_id;
      sym[c.pos].next = sym[r].next;
      if (sym[r].next != -1) sym[sym[r].next].prev = c.pos;
      alive[r] = 0;
      push(sym[c.pos].prev);
      push(c.pos);
    }
  }
  for (int32_t p = 0; p != -1; p = sym[p].next) out.push_back(sym[p].id);
}

void Tokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(word[0])]);
    return;
  }
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    thread_local std::string k;
    k.assign(word);
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(k);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t first = out.size();
  bpe_uncached(word, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (cache.size() < kCacheMaxEntries)
      cache.emplace(std::string(word), std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

void Tokenizer::Impl::encode_text(std::string_view text, PreTokenizerKind kind,
                                  std::vector<int32_t>& out) const {
  bool marks = kind == PreTokenizerKind::qwen35;
  for_each_pretoken(text, marks, [&](size_t b, size_t e) { bpe(text.substr(b, e - b), out); });
}

namespace {
std::string nfc_valid(std::string_view s);
}

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;

size_t Tokenizer::find_invalid_utf8(std::string_view s) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    // fast path over ASCII
    while (i < n && u[i] < 0x80) ++i;
    if (i >= n) break;
    size_t l = utf8_seq_len(u, i, n);
    if (l == 0) return i;
    i += l;
  }
  return std::string_view::npos;
}

std::string Tokenizer::nfc(std::string_view s) {
  size_t bad = find_invalid_utf8(s);
  if (bad != std::string_view::npos) throw_invalid_utf8(s, bad);
  return nfc_valid(s);
}

namespace {
std::string nfc_utf8proc(std::string_view s);

// NFC of text already known to be valid UTF-8.
std::string nfc_valid(std::string_view s) {
  // Fast path: no code point >= U+0300 (no lead byte >= 0xCC). Every character below U+0300 is
  // NFC_Quick_Check=Yes and never combines with what precedes it, so the text is already NFC.
  bool simple = true;
  for (unsigned char c : s)
    if (c >= 0xCC) { simple = false; break; }
  if (simple) return std::string(s);
  // U+11A7 (UTF-8 E1 86 A7) is TBase of the Hangul composition algorithm, not a trailing consonant
  // (those are U+11A8..U+11C2), so an LV syllable followed by it must stay as it is. utf8proc before
  // 2.9.0 (Debian 12 ships 2.8.0) composes the pair as LV + T index 0, i.e. drops the U+11A7
  // (JuliaStrings/utf8proc#317). U+11A7 is a starter of canonical class 0 that no canonical
  // composition pairs with, so normalising the text in pieces cut before each U+11A7 gives the NFC of
  // the whole: no composition or reordering can cross such a cut.
  static constexpr std::string_view kTBase = "\xE1\x86\xA7";
  if (s.find(kTBase) == std::string_view::npos) return nfc_utf8proc(s);
  std::string out;
  size_t start = 0;
  while (start < s.size()) {
    size_t cut = s.find(kTBase, start + 1);
    if (cut == std::string_view::npos) cut = s.size();
    out += nfc_utf8proc(s.substr(start, cut - start));
    start = cut;
  }
  return out;
}

std::string nfc_utf8proc(std::string_view s) {
  utf8proc_uint8_t* dst = nullptr;
  utf8proc_ssize_t len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                      static_cast<utf8proc_ssize_t>(s.size()), &dst,
                                      static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (len < 0) input_error("NFC normalisation failed: ", utf8proc_errmsg(len));
  std::string out(reinterpret_cast<const char*>(dst), static_cast<size_t>(len));
  std::free(dst);
  return out;
}
}  // namespace

std::vector<std::pair<size_t, size_t>> Tokenizer::pre_tokenize(std::string_view s, PreTokenizerKind kind) {
  size_t bad = find_invalid_utf8(s);
  if (bad != std::string_view::npos) throw_invalid_utf8(s, bad);
  std::vector<std::pair<size_t, size_t>> out;
  for_each_pretoken(s, kind == PreTokenizerKind::qwen35, [&](size_t b, size_t e) { out.emplace_back(b, e); });
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) throw_invalid_utf8(text, bad);
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  std::vector<Piece> raw_pieces, norm_pieces;
  split_added(text, im.raw_matcher, im.added, raw_pieces);
  for (const Piece& p : raw_pieces) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    std::string_view seg = text.substr(p.begin, p.end - p.begin);
    std::string normalized;
    if (im.nfc) {
      normalized = nfc_valid(seg);
      seg = normalized;
    }
    if (im.norm_matcher.empty()) {
      im.encode_text(seg, kind_, out);
      continue;
    }
    split_added(seg, im.norm_matcher, im.added, norm_pieces);
    for (const Piece& q : norm_pieces) {
      if (q.id >= 0) out.push_back(q.id);
      else im.encode_text(seg.substr(q.begin, q.end - q.begin), kind_, out);
    }
  }
  return out;
}

bool Tokenizer::is_defined(int32_t id) const {
  return id >= 0 && id < vocab_end_ && (impl_->flags[id] & Impl::kDefined);
}
bool Tokenizer::is_added(int32_t id) const { return is_defined(id) && (impl_->flags[id] & Impl::kAdded); }
bool Tokenizer::is_special(int32_t id) const { return is_defined(id) && (impl_->flags[id] & Impl::kSpecial); }
size_t Tokenizer::num_merges() const { return impl_->n_merges; }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  auto it = impl_->token_to_id.find(std::string(token));
  if (it == impl_->token_to_id.end()) return std::nullopt;
  return it->second;
}

static void check_id(const Tokenizer& t, int32_t id) {
  if (!t.is_defined(id))
    input_error("token id ", id, " is not defined by the tokenizer (", t.origin(), "); expected an id in [0, ",
                t.vocab_end(), ") that names a token");
}

std::string Tokenizer::piece(int32_t id) const {
  check_id(*this, id);
  return impl_->pieces[id];
}
std::string Tokenizer::token_bytes(int32_t id) const {
  check_id(*this, id);
  return impl_->bytes[id];
}
std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    check_id(*this, id);
    out += impl_->bytes[id];
  }
  return out;
}

std::vector<uint8_t> Tokenizer::padding_mask(int64_t model_vocab_size) const {
  if (model_vocab_size < vocab_end_)
    input_error("model vocab_size ", model_vocab_size, " is smaller than the tokenizer's ", vocab_end_,
                " ids (", origin_, "); expected vocab_size >= ", vocab_end_);
  std::vector<uint8_t> mask(static_cast<size_t>(model_vocab_size), 1);
  for (int32_t id = 0; id < vocab_end_; ++id) mask[id] = is_defined(id) ? 0 : 1;
  return mask;
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------
std::unique_ptr<Tokenizer> Tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    input_error("cannot open tokenizer file ", path.string(), ": no such file; expected a Hugging Face tokenizer.json");
  return from_json_text(read_file(path, kMaxInputFileBytes), path.string());
}

namespace {
constexpr int32_t kMaxTokenId = 1 << 24;  // far above any real vocabulary; guards huge allocations

void check_pre_tokenizer(const json& pt, const std::string& origin, PreTokenizerKind* kind) {
  const std::string expected =
      "expected a Sequence of Split (Qwen2 or Qwen3.5 regex, behavior Isolated) and ByteLevel "
      "(add_prefix_space=false, use_regex=false)";
  if (!pt.is_object() || pt.value("type", "") != "Sequence" || !pt.contains("pretokenizers") ||
      !pt["pretokenizers"].is_array() || pt["pretokenizers"].size() != 2)
    input_error(origin, ": unsupported pre_tokenizer ", short_json(pt), "; ", expected);
  const json& split = pt["pretokenizers"][0];
  const json& bl = pt["pretokenizers"][1];
  if (!split.is_object() || split.value("type", "") != "Split")
    input_error(origin, ": pre_tokenizer[0] is ", short_json(split), "; ", expected);
  if (!split.contains("pattern") || !split["pattern"].is_object() || !split["pattern"].contains("Regex") ||
      !split["pattern"]["Regex"].is_string())
    input_error(origin, ": pre_tokenizer Split has no {\"Regex\": ...} pattern (found ",
                short_json(split.value("pattern", json())), "); ", expected);
  std::string re = split["pattern"]["Regex"].get<std::string>();
  if (re == kQwen35SplitRegex) *kind = PreTokenizerKind::qwen35;
  else if (re == kQwen2SplitRegex) *kind = PreTokenizerKind::qwen2;
  else
    input_error(origin, ": unknown Split regex ", json(re).dump(), "; expected the Qwen3.5 pattern ",
                json(kQwen35SplitRegex).dump(), " or the Qwen2/Qwen3 pattern ", json(kQwen2SplitRegex).dump());
  std::string behavior = split.value("behavior", "");
  if (behavior != "Isolated")
    input_error(origin, ": pre_tokenizer Split behavior is \"", behavior, "\"; expected \"Isolated\"");
  if (split.value("invert", false))
    input_error(origin, ": pre_tokenizer Split has invert=true; expected false");
  if (!bl.is_object() || bl.value("type", "") != "ByteLevel")
    input_error(origin, ": pre_tokenizer[1] is ", short_json(bl), "; ", expected);
  if (bl.value("add_prefix_space", false))
    input_error(origin, ": ByteLevel pre-tokenizer has add_prefix_space=true; expected false");
  if (bl.value("use_regex", true))
    input_error(origin, ": ByteLevel pre-tokenizer has use_regex=true (or missing); expected false");
}

bool check_normalizer(const json& n, const std::string& origin) {
  if (n.is_null()) return false;
  if (n.is_object() && n.value("type", "") == "NFC") return true;
  if (n.is_object() && n.value("type", "") == "Sequence" && n.contains("normalizers") &&
      n["normalizers"].is_array()) {
    if (n["normalizers"].empty()) return false;
    if (n["normalizers"].size() == 1 && n["normalizers"][0].is_object() &&
        n["normalizers"][0].value("type", "") == "NFC")
      return true;
  }
  input_error(origin, ": unsupported normalizer ", short_json(n), "; expected {\"type\": \"NFC\"} or null");
}

void check_decoder_and_post(const json& j, const std::string& origin) {
  if (j.contains("decoder") && !j["decoder"].is_null()) {
    const json& d = j["decoder"];
    if (!d.is_object() || d.value("type", "") != "ByteLevel")
      input_error(origin, ": unsupported decoder ", short_json(d), "; expected {\"type\": \"ByteLevel\"}");
  }
  if (j.contains("post_processor") && !j["post_processor"].is_null()) {
    const json& p = j["post_processor"];
    std::string t = p.is_object() ? p.value("type", "") : "";
    bool ok = t == "ByteLevel";
    if (t == "TemplateProcessing" && p.contains("single")) {
      // Accepted only when it adds nothing to a single sequence.
      const json& s = p["single"];
      ok = s.is_array() && s.size() == 1 && s[0].is_object() && s[0].contains("Sequence");
    }
    if (!ok)
      input_error(origin, ": unsupported post_processor ", short_json(p),
                  "; expected ByteLevel or null (Qwen adds no BOS/EOS when encoding)");
  }
  for (const char* k : {"truncation", "padding"})
    if (j.contains(k) && !j[k].is_null())
      input_error(origin, ": \"", k, "\" is set (", short_json(j[k]), "); expected null");
}

// The BPE model's settings the tokenizer supports: type BPE, no dropout, no subword affixes.
void check_bpe_model(const json& m, const std::string& origin) {
  std::string type = m.value("type", "");
  if (type != "BPE")
    input_error(origin, ": model type is \"", type, "\"; expected \"BPE\" (byte-level BPE)");
  if (m.contains("dropout") && !m["dropout"].is_null() && !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0))
    input_error(origin, ": BPE dropout is ", jstr(m["dropout"]), "; expected null (deterministic BPE)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !is_null_or_empty_string(m[k]))
      input_error(origin, ": BPE ", k, " is ", jstr(m[k]), "; expected null or \"\"");
}

using Impl = Tokenizer::Impl;
using VocabEntries = std::vector<std::pair<int32_t, std::string>>;

// model.vocab as (id, token) pairs; max_id is raised to the largest id.
VocabEntries read_vocab(const json& m, const std::string& origin, int32_t& max_id) {
  VocabEntries entries;
  if (!m.contains("vocab") || !m["vocab"].is_object())
    input_error(origin, ": model has no \"vocab\" object; expected {token: id}");
  entries.reserve(m["vocab"].size());
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer())
      input_error(origin, ": vocab entry \"", it.key(), "\" has id ", jstr(it.value()), "; expected an integer");
    int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= kMaxTokenId)
      input_error(origin, ": vocab entry \"", it.key(), "\" has id ", id, "; expected 0 <= id < ", kMaxTokenId);
    entries.emplace_back(static_cast<int32_t>(id), it.key());
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  return entries;
}

// The added tokens (ids may extend the vocabulary) into im.added; max_id is raised to the largest id.
void read_added_tokens(const json& j, const std::string& origin, Impl& im, int32_t& max_id) {
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) input_error(origin, ": \"added_tokens\" is not an array");
    for (const json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        input_error(origin, ": added token ", short_json(a), " lacks an integer \"id\" or a string \"content\"");
      AddedToken t;
      int64_t id = a["id"].get<int64_t>();
      if (id < 0 || id >= kMaxTokenId)
        input_error(origin, ": added token ", short_json(a), " has id ", id, "; expected 0 <= id < ", kMaxTokenId);
      t.id = static_cast<int32_t>(id);
      t.content = a["content"].get<std::string>();
      if (t.content.empty()) input_error(origin, ": added token id ", id, " has empty content");
      if (Tokenizer::find_invalid_utf8(t.content) != std::string::npos)
        input_error(origin, ": added token id ", id, " is not valid UTF-8");
      auto flag = [&](const char* k, bool def) {
        if (!a.contains(k)) return def;
        if (!a[k].is_boolean()) input_error(origin, ": added token id ", id, " field \"", k, "\" is not a boolean");
        return a[k].get<bool>();
      };
      t.single_word = flag("single_word", false);
      t.lstrip = flag("lstrip", false);
      t.rstrip = flag("rstrip", false);
      t.normalized = flag("normalized", !flag("special", false));
      t.special = flag("special", false);
      max_id = std::max(max_id, t.id);
      im.added.push_back(std::move(t));
    }
  }
}

// The id tables (pieces, bytes, flags, token_to_id) of vocab_end ids from the vocabulary and the
// added tokens, and the id of each of the 256 byte-level symbols.
void fill_token_tables(Impl& im, VocabEntries& entries, int32_t vocab_end, const std::string& origin) {
  im.pieces.assign(vocab_end, std::string());
  im.bytes.assign(vocab_end, std::string());
  im.flags.assign(vocab_end, 0);
  im.token_to_id.reserve(entries.size() + im.added.size());
  for (auto& [id, s] : entries) {
    if (im.flags[id] & Impl::kDefined)
      input_error(origin, ": vocab gives id ", id, " to both \"", im.pieces[id], "\" and \"", s,
                  "\"; expected unique ids");
    im.flags[id] = Impl::kDefined;
    auto b = bytelevel_to_bytes(s);
    im.bytes[id] = b ? *b : s;  // HF's ByteLevel decoder keeps a token with foreign symbols as is
    im.token_to_id.emplace(s, id);
    im.pieces[id] = std::move(s);
  }
  for (const AddedToken& t : im.added) {
    if ((im.flags[t.id] & Impl::kAdded) && im.pieces[t.id] != t.content)
      input_error(origin, ": added tokens give id ", t.id, " to both \"", im.pieces[t.id], "\" and \"",
                  t.content, "\"");
    im.flags[t.id] |= Impl::kDefined | Impl::kAdded | (t.special ? Impl::kSpecial : 0);
    im.pieces[t.id] = t.content;
    im.bytes[t.id] = t.content;
    im.token_to_id[t.content] = t.id;  // added tokens shadow the vocabulary, as in HF
  }
  const auto& b2u = byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string sym;
    append_utf8(sym, b2u[b]);
    auto it = im.token_to_id.find(sym);
    if (it == im.token_to_id.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      input_error(origin, ": vocab has no token for byte ", hex, " (\"", sym,
                  "\"); expected all 256 byte-level symbols (no byte fallback or unk is supported)");
    }
    im.byte_id[b] = it->second;
  }
}

// model.merges, as "a b" strings or ["a", "b"] pairs, into im.merges ranked in order.
void read_merges(const json& m, const std::string& origin, Impl& im) {
  if (!m.contains("merges") || !m["merges"].is_array())
    input_error(origin, ": model has no \"merges\" array; expected [\"a b\", ...] or [[\"a\", \"b\"], ...]");
  const json& merges = m["merges"];
  im.merges.reserve(merges.size() * 2);
  int32_t rank = 0;
  for (const json& e : merges) {
    std::string a, b;
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        input_error(origin, ": merges[", rank, "] is ", jstr(e), "; expected two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      input_error(origin, ": merges[", rank, "] is ", short_json(e), "; expected \"a b\" or [\"a\", \"b\"]");
    }
    auto find = [&](const std::string& s) {
      auto it = im.token_to_id.find(s);
      if (it == im.token_to_id.end())
        input_error(origin, ": merges[", rank, "] ", jstr(e), " names token \"", s,
                    "\" which is not in the vocabulary");
      return it->second;
    };
    int32_t ia = find(a), ib = find(b), inew = find(a + b);
    im.merges[Impl::key(ia, ib)] = {rank, inew};  // a repeated pair keeps its last rank, as in HF
    ++rank;
  }
  im.n_merges = merges.size();
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_json_text(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = parse_json(text, origin);
  } catch (const json::parse_error& e) {
    input_error(origin, ": not valid JSON (", e.what(), "); expected a Hugging Face tokenizer.json");
  }
  if (!j.is_object()) input_error(origin, ": top level is ", j.type_name(), "; expected a JSON object");
  if (!j.contains("model") || !j["model"].is_object())
    input_error(origin, ": no \"model\" object; expected a Hugging Face tokenizer.json with a BPE model");

  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->origin_ = origin;
  tok->fingerprint_ = fnv1a64_hex(text);
  Impl& im = *tok->impl_;
  try {
    const json& m = j["model"];
    check_bpe_model(m, origin);
    im.ignore_merges = m.value("ignore_merges", false);

    int32_t max_id = -1;
    VocabEntries entries = read_vocab(m, origin, max_id);
    read_added_tokens(j, origin, im, max_id);
    if (max_id < 0) input_error(origin, ": empty vocabulary; expected at least the 256 byte tokens");
    tok->vocab_end_ = max_id + 1;
    fill_token_tables(im, entries, tok->vocab_end_, origin);

    read_merges(m, origin, im);

    im.nfc = check_normalizer(j.value("normalizer", json()), origin);
    if (!j.contains("pre_tokenizer"))
      input_error(origin, ": no \"pre_tokenizer\"; expected Split + ByteLevel as in Qwen tokenizers");
    check_pre_tokenizer(j["pre_tokenizer"], origin, &tok->kind_);
    check_decoder_and_post(j, origin);

    // Added-token patterns: the content, or its NFC form when the token matches normalised text.
    for (AddedToken& t : im.added) t.pattern = (t.normalized && im.nfc) ? nfc(t.content) : t.content;
    im.raw_matcher.build(im.added, false);
    im.norm_matcher.build(im.added, true);
  } catch (const json::exception& e) {
    input_error(origin, ": malformed tokenizer.json (", e.what(), ")");
  }
  return tok;
}

}  // namespace degen
