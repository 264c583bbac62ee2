// `degenbisect tokenize --model DIR [--chat] [--no-think] [--system TEXT] TEXT`: the ids and pieces the
// model's own tokenizer gives (a debugging aid), `--decode ID...`, `--bench FILE` (MB/s), and
// `--write-synth KIND` (print the synthetic tokenizer.json used by test models).
// config.json is read here only for model_type (chat template) and vocab_size (padding ids).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "model/tokenizer_synth.h"
#include "util/file_io.h"
#include "util/error.h"
#include "util/output_file.h"
#include "util/json_input.h"

namespace degen::cli {
namespace {

namespace fs = std::filesystem;

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string file;
  bool chat = false;
  bool no_think = false;
  std::string system;
  bool ids_only = false;
  std::vector<int64_t> decode;
  std::string bench;
  double bench_seconds = 3.0;
  std::string write_synth;
  int max_ids = 1000;
};

// A document named on the command line: a regular file of at most kMaxInputFileBytes (read_file
// refuses folders, FIFOs and devices with exit 128), or "-" for standard input, read up to the same cap.
std::string read_input(const std::string& p, const char* what) {
  if (p != "-") return read_file(p, kMaxInputFileBytes);
  std::string text;
  char buf[1 << 16];
  while (std::cin.read(buf, sizeof buf) || std::cin.gcount() > 0) {
    text.append(buf, static_cast<size_t>(std::cin.gcount()));
    if (text.size() > kMaxInputFileBytes)
      input_error(what, " on standard input: more than ", kMaxInputFileBytes, " bytes; expected a text of at most that");
  }
  return text;
}

// What config.json says that the tokenizer needs; both optional.
struct ModelInfo {
  std::string model_type;
  int64_t vocab_size = 0;
};

ModelInfo read_model_info(const fs::path& dir) {
  ModelInfo info;
  fs::path cfg = dir / "config.json";
  std::error_code ec;
  if (!fs::exists(cfg, ec)) return info;
  nlohmann::json j;
  try {
    j = parse_json(read_file(cfg, kMaxInputFileBytes), cfg.string());
  } catch (const nlohmann::json::parse_error& e) {
    input_error(cfg.string(), ": not valid JSON (", e.what(), ")");
  }
  if (!j.is_object()) input_error(cfg.string(), ": expected a JSON object");
  if (j.contains("model_type") && j["model_type"].is_string()) info.model_type = j["model_type"];
  const nlohmann::json* vs = nullptr;
  if (j.contains("vocab_size")) vs = &j["vocab_size"];
  else if (j.contains("text_config") && j["text_config"].is_object() && j["text_config"].contains("vocab_size"))
    vs = &j["text_config"]["vocab_size"];
  if (vs) {
    if (!vs->is_number_integer() || vs->get<int64_t>() <= 0)
      input_error(cfg.string(), ": vocab_size is ", vs->dump(), "; expected a positive integer");
    info.vocab_size = vs->get<int64_t>();
  }
  return info;
}

// A token's bytes for the terminal: quoted, with C escapes for control and whitespace bytes, \xNN for
// bytes that are not a complete UTF-8 character inside this token.
std::string show_bytes(const std::string& b) {
  std::string out = "\"";
  size_t i = 0;
  while (i < b.size()) {
    unsigned char c = static_cast<unsigned char>(b[i]);
    char buf[16];
    if (c < 0x80) {
      switch (c) {
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        default:
          if (c < 0x20 || c == 0x7F) {
            std::snprintf(buf, sizeof buf, "\\x%02X", c);
            out += buf;
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    // one complete multi-byte character?
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    std::string ch = len && i + len <= b.size() ? b.substr(i, len) : std::string();
    if (!ch.empty() && Tokenizer::find_invalid_utf8(ch) == std::string::npos) {
      // invisible or space-like characters as \u{...}
      uint32_t cp = len == 2 ? ((c & 0x1F) << 6) | (b[i + 1] & 0x3F)
                  : len == 3 ? ((c & 0x0F) << 12) | ((b[i + 1] & 0x3F) << 6) | (b[i + 2] & 0x3F)
                             : ((c & 0x07) << 18) | ((b[i + 1] & 0x3F) << 12) | ((b[i + 2] & 0x3F) << 6) | (b[i + 3] & 0x3F);
      bool invisible = cp == 0x85 || cp == 0xA0 || cp == 0xAD || (cp >= 0x2000 && cp <= 0x200F) ||
                       (cp >= 0x2028 && cp <= 0x202F) || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
      if (invisible) {
        std::snprintf(buf, sizeof buf, "\\u{%X}", cp);
        out += buf;
      } else {
        out += ch;
      }
      i += len;
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
      ++i;
    }
  }
  return out + "\"";
}

fs::path tokenizer_path(const std::string& model) {
  fs::path p = model;
  std::error_code ec;
  if (fs::is_directory(p, ec)) p /= "tokenizer.json";
  if (!fs::exists(p, ec))
    input_error("tokenizer not found: ", p.string(), ec ? cat(" (", path_error_reason(ec.value()), ")") : std::string(),
                "; expected --model DIR holding tokenizer.json");
  return p;
}

int run_bench(const Tokenizer& tok, const TokenizeArgs& a) {
  std::string text = read_file(a.bench, kMaxInputFileBytes);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  size_t n_tokens = tok.encode(text).size();
  double cold = std::chrono::duration<double>(clock::now() - t0).count();
  int iters = 0;
  auto t1 = clock::now();
  double warm = 0;
  while (iters < 3 || warm < a.bench_seconds) {
    n_tokens = tok.encode(text).size();
    ++iters;
    warm = std::chrono::duration<double>(clock::now() - t1).count();
  }
  double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("bench %s: %.2f MB, %zu tokens (%.2f bytes/token)\n", a.bench.c_str(), mb, n_tokens,
              static_cast<double>(text.size()) / static_cast<double>(n_tokens));
  std::printf("first pass (cold word cache): %.1f MB/s\n", mb / cold);
  std::printf("%d more passes: %.1f MB/s  (%.0f tokens/s)\n", iters, mb * iters / warm,
              static_cast<double>(n_tokens) * iters / warm);
  return 0;
}

int run_tokenize(const TokenizeArgs& a) {
  if (!a.write_synth.empty()) {
    auto kind = a.write_synth == "qwen2" ? SynthTokenizerKind::qwen2 : SynthTokenizerKind::qwen35;
    std::fputs(synth_tokenizer_json(kind, a.max_ids).c_str(), stdout);
    return 0;
  }
  if (a.model.empty()) input_error("tokenize needs --model DIR (or --write-synth KIND)");
  fs::path tp = tokenizer_path(a.model);
  fs::path dir = tp.parent_path();
  auto tok = Tokenizer::load(tp);
  ModelInfo info = read_model_info(dir);

  if (!a.bench.empty()) return run_bench(*tok, a);

  if (!a.decode.empty()) {
    std::vector<int32_t> ids;
    for (int64_t id : a.decode) {
      if (id < 0 || id >= tok->vocab_end() || !tok->is_defined(static_cast<int32_t>(id)))
        input_error("--decode: token id ", id, " is not defined by ", tp.string(), "; expected an id in [0, ",
                    tok->vocab_end(), ")");
      ids.push_back(static_cast<int32_t>(id));
    }
    std::string text = tok->decode(ids);
    if (a.ids_only) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      return 0;
    }
    for (size_t i = 0; i < ids.size(); ++i)
      std::printf("%5zu %8d  %s%s\n", i, ids[i], show_bytes(tok->token_bytes(ids[i])).c_str(),
                  tok->is_special(ids[i]) ? "  [special]" : tok->is_added(ids[i]) ? "  [added]" : "");
    std::printf("text: %s\n", show_bytes(text).c_str());
    return 0;
  }

  std::string text;
  if (!a.file.empty()) text = read_input(a.file, "text file");
  else text = a.text;
  if (a.chat) {
    if (info.model_type.empty())
      input_error("--chat needs model_type from ", (dir / "config.json").string(), " to choose the chat template");
    ChatFamily fam = chat_family_for_model_type(info.model_type);
    if (size_t bad = Tokenizer::find_invalid_utf8(text); bad != std::string::npos)
      input_error("text is not valid UTF-8 at byte offset ", bad);
    text = render_single_turn(fam, a.system, text, !a.no_think);
  }
  std::vector<int32_t> ids = tok->encode(text);

  if (a.ids_only) {
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
    std::printf("\n");
    return 0;
  }
  std::printf("tokenizer %s  fingerprint %s  pre-tokenizer %s  ids %d  merges %zu\n", tp.string().c_str(),
              tok->fingerprint().c_str(), pretokenizer_name(tok->pretokenizer()), tok->vocab_end(),
              tok->num_merges());
  if (a.chat) std::printf("chat template %s, thinking %s\n", chat_family_name(chat_family_for_model_type(info.model_type)),
                          a.no_think ? "off" : "on");
  std::printf("%5s %8s  %s\n", "index", "id", "piece");
  for (size_t i = 0; i < ids.size(); ++i)
    std::printf("%5zu %8d  %s%s\n", i, ids[i], show_bytes(tok->token_bytes(ids[i])).c_str(),
                tok->is_special(ids[i]) ? "  [special]" : tok->is_added(ids[i]) ? "  [added]" : "");
  std::printf("%zu tokens from %zu bytes", ids.size(), text.size());
  if (!ids.empty()) std::printf(" (%.2f bytes/token)", static_cast<double>(text.size()) / static_cast<double>(ids.size()));
  std::printf("\n");
  auto stops = stop_token_ids(dir / "generation_config.json", *tok);
  std::printf("stop ids:");
  for (int32_t s : stops) std::printf(" %d %s", s, tok->piece(s).c_str());
  std::printf("\n");
  if (info.vocab_size > 0) {
    auto mask = tok->padding_mask(info.vocab_size);  // InputError if the model has fewer rows than ids
    size_t n_pad = 0;
    for (uint8_t m : mask) n_pad += m;
    std::printf("model vocab_size %lld: %zu padding ids never sampled (tokenizer defines %d)\n",
                static_cast<long long>(info.vocab_size), n_pad, tok->vocab_end());
  }
  return 0;
}

CommandRegistrar reg("tokenize", "Show the token ids and pieces of a text with the model's tokenizer", 20,
                     [](CLI::App* sub) {
  auto a = std::make_shared<TokenizeArgs>();
  sub->add_option("--model", a->model, "Model folder holding tokenizer.json (and config.json), or a tokenizer.json");
  sub->add_option("text", a->text, "Text to tokenize (special tokens written in it are recognised)");
  sub->add_option("--file", a->file, "Read the text from this file ('-' for stdin)");
  sub->add_flag("--chat", a->chat, "Wrap the text as one user turn of the model's chat template");
  sub->add_flag("--no-think", a->no_think, "With --chat: thinking disabled (<think>\\n\\n</think>\\n\\n)");
  sub->add_option("--system", a->system, "With --chat: a system message");
  sub->add_flag("--ids-only", a->ids_only, "Print only the ids (with --decode: only the decoded bytes)");
  sub->add_option("--decode", a->decode, "Decode these ids instead of encoding a text")->expected(1, -1);
  sub->add_option("--bench", a->bench, "Tokenize this file repeatedly and report MB/s");
  sub->add_option("--bench-seconds", a->bench_seconds, "Minimum benchmark time after the first pass")
      ->check(CLI::PositiveNumber);
  sub->add_option("--write-synth", a->write_synth, "Print the synthetic tokenizer.json of this kind and exit")
      ->check(CLI::IsMember({"qwen35", "qwen2"}));
  sub->add_option("--max-ids", a->max_ids, "With --write-synth: every id is below this (default 1000)");
  return [a] { return run_tokenize(*a); };
});

}  // namespace
}  // namespace degen::cli
