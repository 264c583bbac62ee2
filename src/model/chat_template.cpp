// Fixed ChatML templates for Qwen3.5/3.6 and Qwen3-Next, thinking/answer split, stop ids.
//
// Qwen3.5 / Qwen3.6 (spec §7.2): no default system prompt; content |trim-med; generation prompt
// "<|im_start|>assistant\n" + "<think>\n" (thinking on, the default) or "<think>\n\n</think>\n\n"
// (off). Assistant turns after the last user turn carry "<think>\nR\n</think>\n\nA"; earlier ones the
// answer only. UNCONFIRMED: when such a turn has no reasoning we still write the empty think block
// for the last message only (the Qwen3 template's rule); Qwen3.6's preserve_thinking is not offered.
//
// Qwen3-Next: we render the Qwen3-Next-80B-A3B-Instruct ChatML (as the Qwen3-2507 Instruct
// templates): content used as is (no trim), assistant answers only, generation prompt
// "<|im_start|>assistant\n" with no think block; enable_thinking is ignored. UNCONFIRMED: this is
// from the published Instruct-2507 template family, not checked against the Qwen3-Next file; the
// Thinking variant (same model_type) opens "<think>\n" itself and is not distinguished here.
//
// Neither family supports tools or tool messages here (an InputError says so).
#include "model/chat_template.h"

#include <utf8proc.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "model/tokenizer.h"
#include "util/error.h"

namespace degen {

const char* chat_family_name(ChatFamily f) { return f == ChatFamily::qwen35 ? "qwen35" : "qwen3_next"; }

ChatFamily chat_family_for_model_type(const std::string& model_type) {
  if (model_type == "qwen3_5" || model_type == "qwen3_5_text" || model_type == "qwen3_5_moe" ||
      model_type == "qwen3_5_moe_text")
    return ChatFamily::qwen35;
  if (model_type == "qwen3_next") return ChatFamily::qwen3_next;
  input_error("no chat template for model_type \"", model_type,
              "\"; expected one of qwen3_5, qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text, qwen3_next");
}

namespace {

// Python str.isspace(), which Jinja's |trim uses: category Zs or bidi class WS, B, S.
bool py_isspace(int32_t cp) {
  const utf8proc_property_t* p = utf8proc_get_property(cp);
  return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

// Jinja |trim: strip Unicode whitespace at both ends. Invalid UTF-8 is reported by the tokenizer later.
std::string trim(const std::string& s) {
  const auto* u = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  const auto n = static_cast<utf8proc_ssize_t>(s.size());
  utf8proc_ssize_t b = 0;
  while (b < n) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t l = utf8proc_iterate(u + b, n - b, &cp);
    if (l <= 0 || !py_isspace(cp)) break;
    b += l;
  }
  utf8proc_ssize_t e = n;
  while (e > b) {
    utf8proc_ssize_t start = e - 1;
    while (start > b && (u[start] & 0xC0) == 0x80) --start;
    utf8proc_int32_t cp;
    utf8proc_ssize_t l = utf8proc_iterate(u + start, e - start, &cp);
    if (l != e - start || !py_isspace(cp)) break;
    e = start;
  }
  return s.substr(static_cast<size_t>(b), static_cast<size_t>(e - b));
}

std::string strip_newlines(const std::string& s) {
  size_t b = s.find_first_not_of('\n');
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of('\n');
  return s.substr(b, e - b + 1);
}

void check_roles(const std::vector<ChatMessage>& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r == "system" && i != 0)
      input_error("chat message ", i, " is a system message; expected the system message to come first");
    if (r != "system" && r != "user" && r != "assistant")
      input_error("chat message ", i, " has role \"", r,
                  "\"; expected system, user or assistant (tools are not supported)");
  }
}

std::string render_qwen35(const std::vector<ChatMessage>& messages, bool gen, bool thinking) {
  int last_user = -1;
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == "user") last_user = static_cast<int>(i);
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "assistant") {
      out += "<|im_start|>" + m.role + "\n" + trim(m.content) + "<|im_end|>\n";
      continue;
    }
    std::string content = m.content, reasoning = m.reasoning;
    size_t close = content.find("</think>");
    if (reasoning.empty() && close != std::string::npos) {
      // reasoning written inline in the content, as the HF templates accept
      reasoning = content.substr(0, close);
      size_t open = reasoning.find("<think>");
      if (open != std::string::npos) reasoning = reasoning.substr(open + 7);
      content = content.substr(close + 8);
    }
    content = trim(content);
    reasoning = trim(reasoning);
    bool after_query = static_cast<int>(i) > last_user;
    bool last = i + 1 == messages.size();
    out += "<|im_start|>assistant\n";
    if (after_query && (last || !reasoning.empty()))
      out += "<think>\n" + reasoning + "\n</think>\n\n";
    out += content + "<|im_end|>\n";
  }
  if (gen) out += thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  return out;
}

std::string render_qwen3_next(const std::vector<ChatMessage>& messages, bool gen) {
  std::string out;
  for (const ChatMessage& m : messages) {
    std::string content = m.content;
    if (m.role == "assistant") {
      size_t close = content.find("</think>");
      if (close != std::string::npos) {  // the Qwen3 templates drop inline reasoning of past turns
        content = content.substr(close + 8);
        size_t b = content.find_first_not_of('\n');
        content = b == std::string::npos ? "" : content.substr(b);
      }
    }
    out += "<|im_start|>" + m.role + "\n" + content + "<|im_end|>\n";
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace

std::string render_chat(ChatFamily family, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                        bool enable_thinking) {
  check_roles(messages);
  if (family == ChatFamily::qwen35) return render_qwen35(messages, add_generation_prompt, enable_thinking);
  return render_qwen3_next(messages, add_generation_prompt);
}

std::string render_single_turn(ChatFamily family, const std::string& system, const std::string& user,
                               bool enable_thinking) {
  std::vector<ChatMessage> msgs;
  if (!system.empty()) msgs.push_back({"system", system, ""});
  msgs.push_back({"user", user, ""});
  return render_chat(family, msgs, true, enable_thinking);
}

ThinkingSplit split_thinking(const std::string& text, bool prompt_opened_think) {
  ThinkingSplit r;
  size_t close = text.find("</think>");
  if (close == std::string::npos) {
    if (prompt_opened_think) r.thinking = strip_newlines(text);
    else r.answer = text;
    return r;
  }
  r.closed = true;
  std::string think = text.substr(0, close);
  size_t open = think.find("<think>");
  if (open != std::string::npos) think = think.substr(open + 7);
  r.thinking = strip_newlines(think);
  r.answer = text.substr(close + 8);
  size_t b = r.answer.find_first_not_of('\n');
  r.answer = b == std::string::npos ? "" : r.answer.substr(b);
  return r;
}

std::vector<int32_t> stop_token_ids(const std::filesystem::path& gen_config, const Tokenizer& tok) {
  std::set<int32_t> ids;
  for (const char* t : {"<|im_end|>", "<|endoftext|>"})
    if (auto id = tok.token_id(t)) ids.insert(*id);
  std::error_code ec;
  if (!gen_config.empty() && std::filesystem::exists(gen_config, ec)) {
    std::ifstream f(gen_config, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::parse_error& e) {
      input_error(gen_config.string(), ": not valid JSON (", e.what(), ")");
    }
    if (!j.is_object()) input_error(gen_config.string(), ": expected a JSON object");
    if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
      const auto& e = j["eos_token_id"];
      std::vector<nlohmann::json> items;
      if (e.is_array()) items.assign(e.begin(), e.end());
      else items.push_back(e);
      for (const auto& v : items) {
        if (!v.is_number_integer())
          input_error(gen_config.string(), ": eos_token_id contains ", v.dump(), "; expected an integer or a list of integers");
        auto id = v.get<int64_t>();
        if (id < 0 || id > INT32_MAX || !tok.is_defined(static_cast<int32_t>(id)))
          input_error(gen_config.string(), ": eos_token_id ", id, " is not a token of ", tok.origin(),
                      "; expected an id below ", tok.vocab_end());
        ids.insert(static_cast<int32_t>(id));
      }
    }
  }
  return {ids.begin(), ids.end()};
}

}  // namespace degen
