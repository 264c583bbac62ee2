// Fixed ChatML templates for Qwen3.5/3.6 and Qwen3-Next, thinking/answer split, stop ids.
//
// Qwen3.5 / Qwen3.6 (spec §7.2): the rules of the official Jinja template (Qwen3.5-4B.jinja, as
// llama.cpp ships it), without tools; tests/fixtures/chat/qwen35.json holds its renderings:
//  1. checks, in the template's order: a message at all; a user query (the last user message whose
//     trimmed content is not "<tool_response>...</tool_response>"); then per message, a system
//     message only first and no other role than system/user/assistant;
//  2. every content |trim-med (Python str.isspace); no default system prompt;
//  3. assistant: reasoning_content if given (even empty), else, when content holds "</think>", the
//     text before the first "</think>" (trailing '\n's dropped) after the last "<think>" (leading
//     '\n's dropped) is the reasoning and the text after the last "</think>" (leading '\n's dropped,
//     nothing else) the answer; reasoning |trim-med;
//  4. assistant turns after the last query are "<think>\nR\n</think>\n\nA", R possibly empty (so
//     "<think>\n\n</think>\n\n"), whether or not they are the last message; earlier ones "A" only;
//  5. generation prompt "<|im_start|>assistant\n" + "<think>\n" (thinking on, the default) or
//     "<think>\n\n</think>\n\n" (off). Qwen3.6's preserve_thinking is not offered.
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
#include "util/file_io.h"
#include "util/error.h"
#include "util/json_input.h"

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

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
std::string lstrip_newlines(const std::string& s) {
  size_t b = s.find_first_not_of('\n');
  return b == std::string::npos ? "" : s.substr(b);
}
std::string rstrip_newlines(const std::string& s) {
  size_t e = s.find_last_not_of('\n');
  return e == std::string::npos ? "" : s.substr(0, e + 1);
}

std::string roles_list(const std::vector<ChatMessage>& messages) {
  std::string r;
  for (const ChatMessage& m : messages) r += (r.empty() ? "" : ", ") + m.role;
  return r;
}

// Index of the last user message that is a query, not a tool result; -1 if none. note: no tool
// messages reach here, but the template also treats a user turn written as a tool result this way.
int last_query_index(const std::vector<ChatMessage>& messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role != "user") continue;
    const std::string c = trim(messages[i].content);
    if (!(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) return static_cast<int>(i);
  }
  return -1;
}

// The template's checks, in its order (see the top of this file); returns the last query's index.
int check_qwen35(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) input_error("the chat has no messages; expected at least one user message");
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == "tool")
      input_error("chat message ", i,
                  " has role \"tool\"; expected system, user or assistant (tools are not supported)");
  const int last_query = last_query_index(messages);
  if (last_query < 0)
    input_error("the chat has no user message to answer (roles: ", roles_list(messages),
                "); expected at least one user message that is not a <tool_response>...</tool_response> "
                "tool result");
  check_roles(messages);
  return last_query;
}

// An assistant message's reasoning and answer (rule 3 at the top of this file). note: "<think>" and
// "</think>" cannot overlap themselves, so find/rfind split where Python's str.split does.
void assistant_parts(const ChatMessage& m, std::string& reasoning, std::string& answer) {
  answer = trim(m.content);
  if (m.reasoning) {
    reasoning = trim(*m.reasoning);
    return;
  }
  reasoning.clear();
  const std::string close = "</think>", open = "<think>";
  const size_t first_close = answer.find(close);
  if (first_close == std::string::npos) return;
  std::string r = rstrip_newlines(answer.substr(0, first_close));
  const size_t last_open = r.rfind(open);
  if (last_open != std::string::npos) r = r.substr(last_open + open.size());
  reasoning = trim(lstrip_newlines(r));
  answer = lstrip_newlines(answer.substr(answer.rfind(close) + close.size()));
}

std::string render_qwen35(const std::vector<ChatMessage>& messages, bool gen, bool thinking) {
  const int last_query = check_qwen35(messages);
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "assistant") {
      out += "<|im_start|>" + m.role + "\n" + trim(m.content) + "<|im_end|>\n";
      continue;
    }
    std::string reasoning, answer;
    assistant_parts(m, reasoning, answer);
    out += "<|im_start|>assistant\n";
    if (static_cast<int>(i) > last_query) out += "<think>\n" + reasoning + "\n</think>\n\n";
    out += answer + "<|im_end|>\n";
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
  if (family == ChatFamily::qwen35) return render_qwen35(messages, add_generation_prompt, enable_thinking);
  check_roles(messages);
  return render_qwen3_next(messages, add_generation_prompt);
}

std::string render_single_turn(ChatFamily family, const std::string& system, const std::string& user,
                               bool enable_thinking) {
  std::vector<ChatMessage> msgs;
  if (!system.empty()) msgs.push_back({"system", system, std::nullopt});
  msgs.push_back({"user", user, std::nullopt});
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
    nlohmann::json j;
    try {
      j = parse_json(read_file(gen_config, kMaxInputFileBytes), gen_config.string());
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
          input_error(gen_config.string(), ": eos_token_id contains ", json_excerpt(v), "; expected an integer or a list of integers");
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
