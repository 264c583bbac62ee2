// Bounded parsing and bounded excerpts of external JSON (see json_input.h).
#include "util/json_input.h"

#include <algorithm>
#include <memory>

#include "util/error.h"

namespace degen {

int json_nesting_depth(std::string_view text, int stop_above, size_t* where) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (where) *where = i;
          if (deepest > stop_above) return deepest;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;  // unbalanced text is the parser's to report
        break;
      default: break;
    }
  }
  return deepest;
}

void check_json_depth(std::string_view text, const std::string& what, int max_depth) {
  size_t at = 0;
  if (json_nesting_depth(text, max_depth, &at) > max_depth)
    input_error(what, ": JSON nested deeper than ", max_depth, " levels (level ", max_depth + 1, " opens at byte ", at,
                "); expected at most ", max_depth, " levels of arrays and objects");
}

nlohmann::json parse_json(std::string_view text, const std::string& what, bool allow_exceptions,
                          nlohmann::json::parser_callback_t cb) {
  check_json_depth(text, what);
  try {
    return nlohmann::json::parse(text.begin(), text.end(), std::move(cb), allow_exceptions);
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond double's range ("1e400") is reported by the parser as out_of_range 406, not
    // as a parse_error: callers that catch parse_error would let it through as an internal error
    // (found by tests/fuzz, fuzz_config).
    input_error(what, ": not valid JSON: ", e.what());
  }
}

namespace {

// Output adapter that keeps the first `limit` characters and then stops the serializer.
struct StopWriting {};
class BoundedOutput : public nlohmann::detail::output_adapter_protocol<char> {
 public:
  BoundedOutput(std::string* out, size_t limit) : out_(out), limit_(limit) {}
  void write_character(char c) override { write_characters(&c, 1); }
  void write_characters(const char* s, std::size_t n) override {
    const size_t room = limit_ - out_->size();
    out_->append(s, std::min(n, room));
    if (n > room) throw StopWriting{};
  }
 private:
  std::string* out_;
  size_t limit_;
};

}  // namespace

std::string json_excerpt(const nlohmann::json& j, size_t max_chars) {
  if (max_chars < 4) max_chars = 4;
  std::string s;
  bool cut = false;
  try {
    nlohmann::detail::serializer<nlohmann::json> ser(std::make_shared<BoundedOutput>(&s, max_chars), ' ',
                                                     nlohmann::json::error_handler_t::replace);
    ser.dump(j, /*pretty_print=*/false, /*ensure_ascii=*/false, /*indent_step=*/0);
  } catch (const StopWriting&) {
    cut = true;
  }
  if (cut) {
    s.resize(max_chars - 3);
    // note: do not leave half a UTF-8 sequence (messages may end up in JSON output)
    size_t lead = s.size();
    while (lead > 0 && (static_cast<unsigned char>(s[lead - 1]) & 0xC0) == 0x80) --lead;
    if (lead > 0) {
      const unsigned char c = static_cast<unsigned char>(s[lead - 1]);
      const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (s.size() - (lead - 1) < len) s.resize(lead - 1);  // the last sequence is incomplete
    }
    s += "...";
  }
  return s;
}

}  // namespace degen
