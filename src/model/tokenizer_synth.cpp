// Synthetic tokenizer.json: a deterministic byte-level BPE trainer over a built-in corpus (English
// prose, C++/Python code, a little French, German, Greek, Russian, Hindi, Chinese, Japanese, emoji),
// pre-tokenized with the same Qwen Split pattern the file declares. Ties between equally frequent
// pairs are broken by the byte strings of the pair, so the output never depends on hash order.
#include "model/tokenizer_synth.h"

#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/tokenizer.h"
#include "util/error.h"

namespace degen {

namespace {

const char* const kCorpus = R"CORPUS(The quick brown fox jumps over the lazy dog. The dog doesn't care; it's sleeping.
A transformer model reads a sequence of tokens and predicts the next one. Each layer mixes
information between positions, then applies a feed-forward network to every position.
When the output starts repeating the same phrase again and again, we say that the model has
degenerated. We'll find out why: was it the kernel, the cache, or the sampler? They're all suspects.
I've seen this before. You'd think it would be easy to spot, but it isn't. We're going to compare
every layer against a reference computed in double precision, and we'll report the first layer
where the difference grows above the noise floor.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 256 1024 2048 4096 65536 3.14159 2.71828 1e-6 -0.5
Dates and times: 2024-05-17 12:30:45, version 3.5.1, port 8080, rgb(255, 128, 0).
Hello, world! Hello again, world. "Quoted text" and 'single quotes' (parentheses) [brackets] {braces}.
Email: someone@example.com  URL: https://example.com/path?query=value&other=1#anchor
    Indented line with four spaces.
	Tabbed line.
Windows line end.
Trailing spaces here.   
DON'T SHOUT. I'M NOT SHOUTING. WE'LL SEE. THEY'VE GONE. YOU'RE RIGHT. IT'S FINE.

def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v

for i in range(10):
    print(f"step {i}: loss = {loss:.4f}")

#include <vector>
#include <cstdint>
int main(int argc, char** argv) {
  std::vector<float> x(1024, 0.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
  if (argc > 1 && argv[1][0] == '-') return 1;
  return 0;
}

struct Config {
  int hidden_size = 2048;     // model width
  int num_layers = 24;        // decoder layers
  float rms_norm_eps = 1e-6f; // epsilon of RMSNorm
};

{"model_type": "qwen3_5_text", "vocab_size": 1024, "hidden_size": 64, "tie_word_embeddings": false}

Le café est très bon, et la crème brûlée aussi. Où est la bibliothèque ? Déjà vu, naïve façade.
Die Straße ist schön. Grüße aus München! Über den Wolken muss die Freiheit wohl grenzenlos sein.
El niño comió mañana por la mañana. ¿Dónde está el baño? ¡Qué bueno!
Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.
Быстрая коричневая лиса прыгает через ленивую собаку. Привет, мир!
नमस्ते दुनिया। यह एक परीक्षण वाक्य है।
สวัสดีครับ นี่คือประโยคทดสอบ
你好，世界！这是一个测试句子。模型的输出开始重复。
こんにちは世界。これはテストの文です。カタカナとひらがな。
안녕하세요 세계
Emoji: 😀 😃 👍 🎉 ❤️ 👨‍👩‍👧‍👦 🇫🇷 ✨ 🚀
Combining: e\u0301 → é, n\u0303 → ñ, a̐ b̂ c̈
Math: ∑ ∫ √ ∞ ≈ ≠ ≤ ≥ ± × ÷ α β γ δ ε π σ ω Ω µ
The end. The end. The end.
)CORPUS";

const char* const kSpecialTokens[] = {
    "<|endoftext|>",       "<|im_start|>",       "<|im_end|>",        "<|object_ref_start|>",
    "<|object_ref_end|>",  "<|box_start|>",      "<|box_end|>",       "<|quad_start|>",
    "<|quad_end|>",        "<|vision_start|>",   "<|vision_end|>",    "<|vision_pad|>",
    "<|image_pad|>",       "<|video_pad|>",      "<tool_call>",       "</tool_call>",
    "<|fim_prefix|>",      "<|fim_middle|>",     "<|fim_suffix|>",    "<|fim_pad|>",
    "<|repo_name|>",       "<|file_sep|>",       "<tool_response>",   "</tool_response>",
    "<think>",             "</think>",
};
constexpr int kNumSpecial = static_cast<int>(sizeof(kSpecialTokens) / sizeof(kSpecialTokens[0]));

// Tokens written without "<|...|>" are plain added tokens in the Qwen files ("special": false).
bool is_special_flag(const std::string& t) { return t.size() > 4 && t.compare(0, 2, "<|") == 0; }

struct Trainer {
  std::vector<std::string> tok;  // id -> bytes
  std::map<std::string, int> id_of;
  std::vector<std::pair<int, int>> merges;
  struct Word { std::vector<int> syms; long count; };
  std::vector<Word> words;

  void init(const std::string& text, PreTokenizerKind kind) {
    for (int b = 0; b < 256; ++b) {
      tok.push_back(std::string(1, static_cast<char>(b)));
      id_of[tok.back()] = b;
    }
    std::map<std::string, long> counts;
    for (auto [b, e] : Tokenizer::pre_tokenize(text, kind)) ++counts[text.substr(b, e - b)];
    for (const auto& [w, c] : counts) {
      Word word{{}, c};
      for (unsigned char ch : w) word.syms.push_back(ch);
      words.push_back(std::move(word));
    }
  }

  // One merge (pairs seen once are merged last, so the budget fills); false when no pair is left.
  bool step(bool* added_token) {
    std::map<std::pair<int, int>, long> pairs;
    for (const Word& w : words)
      for (size_t i = 0; i + 1 < w.syms.size(); ++i) pairs[{w.syms[i], w.syms[i + 1]}] += w.count;
    // most frequent pair; ties go to the smaller (left bytes, right bytes)
    auto less = [&](const std::pair<int, int>& a, const std::pair<int, int>& b) {
      return tok[a.first] != tok[b.first] ? tok[a.first] < tok[b.first] : tok[a.second] < tok[b.second];
    };
    const std::pair<int, int>* best = nullptr;
    long best_count = 0;
    for (const auto& [p, c] : pairs) {
      if (c < 1) continue;
      if (!best || c > best_count || (c == best_count && less(p, *best))) {
        best = &p;
        best_count = c;
      }
    }
    if (!best) return false;
    auto [l, r] = *best;
    std::string joined = tok[l] + tok[r];
    auto it = id_of.find(joined);
    int nid;
    *added_token = it == id_of.end();
    if (*added_token) {
      nid = static_cast<int>(tok.size());
      tok.push_back(joined);
      id_of[joined] = nid;
    } else {
      nid = it->second;
    }
    merges.emplace_back(l, r);
    for (Word& w : words) {
      std::vector<int> out;
      out.reserve(w.syms.size());
      for (size_t i = 0; i < w.syms.size(); ++i) {
        if (i + 1 < w.syms.size() && w.syms[i] == l && w.syms[i + 1] == r) {
          out.push_back(nid);
          ++i;
        } else {
          out.push_back(w.syms[i]);
        }
      }
      w.syms.swap(out);
    }
    return true;
  }
};

}  // namespace

const char* const* synth_special_tokens(int* count) {
  *count = kNumSpecial;
  return kSpecialTokens;
}

std::string synth_tokenizer_json(SynthTokenizerKind kind, int max_ids) {
  if (max_ids < 300)
    input_error("synthetic tokenizer needs max_ids >= 300 (256 bytes + ", kNumSpecial, " added tokens); found ", max_ids);
  PreTokenizerKind pk = kind == SynthTokenizerKind::qwen35 ? PreTokenizerKind::qwen35 : PreTokenizerKind::qwen2;
  // The corpus spells "e\u0301" literally; make those real combining marks so the pattern sees \p{M}.
  std::string corpus = kCorpus;
  for (size_t p; (p = corpus.find("\\u0301")) != std::string::npos;) corpus.replace(p, 6, "\xCC\x81");
  for (size_t p; (p = corpus.find("\\u0303")) != std::string::npos;) corpus.replace(p, 6, "\xCC\x83");

  Trainer t;
  t.init(corpus, pk);  // note: not NFC-normalised on purpose, so decomposed sequences get merges too
  bool added = false;
  while (static_cast<int>(t.tok.size()) + kNumSpecial < max_ids && t.step(&added)) {}

  using ojson = nlohmann::ordered_json;
  ojson vocab = ojson::object();
  for (size_t id = 0; id < t.tok.size(); ++id) vocab[bytes_to_bytelevel(t.tok[id])] = id;
  ojson merges = ojson::array();
  for (auto [l, r] : t.merges) merges.push_back({bytes_to_bytelevel(t.tok[l]), bytes_to_bytelevel(t.tok[r])});
  ojson added_tokens = ojson::array();
  for (int k = 0; k < kNumSpecial; ++k) {
    std::string c = kSpecialTokens[k];
    added_tokens.push_back({{"id", static_cast<int>(t.tok.size()) + k},
                            {"content", c},
                            {"single_word", false},
                            {"lstrip", false},
                            {"rstrip", false},
                            {"normalized", false},
                            {"special", is_special_flag(c)}});
  }
  ojson byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added_tokens;
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       ojson::array({ojson{{"type", "Split"},
                           {"pattern", {{"Regex", pk == PreTokenizerKind::qwen35 ? kQwen35SplitRegex : kQwen2SplitRegex}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                     byte_level})}};
  j["post_processor"] = byte_level;
  j["decoder"] = byte_level;
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}};
  return j.dump(1) + "\n";
}

}  // namespace degen
