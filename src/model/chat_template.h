// Fixed chat templates (no Jinja engine) for the model families degenbisect supports, the split of a
// generated text into thinking and answer, and the stop / padding ids used by generation.
// Spec: ../shared/spec/model.md §7.2 (Qwen3.5/3.6 ChatML) and §7.1 (stop tokens).
//
// qwen35 renders byte for byte what the official Qwen3.5 Jinja template (Qwen3.5-4B.jinja) renders,
// errors included, for every conversation of system/user/assistant messages with string content:
// tests/fixtures/chat/qwen35.json (tools/make_chat_fixtures.py, jinja2), checked by
// tests/test_chat_template.cpp. Differences that remain, all about tools and media (out of scope):
//  - a "tool" message is an InputError here; the template renders it as a <tool_response> user turn;
//  - assistant tool_calls and the `tools` list (its "# Tools" system block) are not offered;
//  - content is a string; the template also takes a list of text/image/video parts (add_vision_id);
//  - Qwen3.6's preserve_thinking option is not offered.
// A user message whose trimmed content is "<tool_response>...</tool_response>" is, as in the template,
// a tool result and not a query (it does not count as the last user turn).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace degen {

class Tokenizer;

enum class ChatFamily : uint8_t {
  qwen35,      // Qwen3.5 / Qwen3.6: ChatML, content trimmed, <think> block (thinking on by default)
  qwen3_next,  // Qwen3-Next-80B-A3B-Instruct: ChatML, no think block (see chat_template.cpp)
};
const char* chat_family_name(ChatFamily f);

// model_type of config.json -> family: qwen3_5, qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text -> qwen35;
// qwen3_next -> qwen3_next; anything else: InputError.
ChatFamily chat_family_for_model_type(const std::string& model_type);

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
  // assistant only: reasoning_content, the thinking text (rendered for turns after the last user
  // turn). nullopt = not given: then a "</think>" in content splits it into reasoning and answer; a
  // given one, even empty, is used as is and content is kept whole (the template's rule).
  std::optional<std::string> reasoning;
};

// Renders the conversation. enable_thinking only matters for qwen35 with add_generation_prompt:
// true appends "<think>\n", false appends "<think>\n\n</think>\n\n".
// InputError, for qwen35 where the official template raises, in its order: no messages; no user
// query (no user message, or only <tool_response> ones); a system message that is not first; a role
// other than system/user/assistant. Also for a "tool" message (not supported). qwen3_next: an
// unknown role or a misplaced system message.
std::string render_chat(ChatFamily family, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, bool enable_thinking = true);

// Convenience: optional system message (empty = none) + one user turn + generation prompt.
std::string render_single_turn(ChatFamily family, const std::string& system, const std::string& user,
                               bool enable_thinking = true);

// A generated continuation split at the first "</think>".
struct ThinkingSplit {
  std::string thinking;  // text before </think>, without a leading "<think>" and surrounding newlines
  std::string answer;    // text after </think>, leading newlines removed; the whole text if none
  bool closed = false;   // "</think>" was found
};
// prompt_opened_think: the prompt ended inside an open think block (qwen35 with thinking on), so
// text without "</think>" is all thinking (closed=false) rather than all answer.
ThinkingSplit split_thinking(const std::string& generated, bool prompt_opened_think);

// Stop ids: eos_token_id of generation_config.json (int or list; the file may be absent) plus the
// tokenizer's <|im_end|> and <|endoftext|>. Sorted, unique. InputError for a malformed file or an
// eos id the tokenizer does not define.
std::vector<int32_t> stop_token_ids(const std::filesystem::path& generation_config_json, const Tokenizer& tok);

}  // namespace degen
