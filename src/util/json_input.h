// Reading JSON that comes from outside the tool (cases files, config.json, safetensors headers,
// sweep matrices, results.jsonl, report inputs, server responses). Two rules, one place:
//  - nesting depth is bounded before a DOM is built: nlohmann's parser is iterative (3.11 keeps an
//    explicit stack), but dump(), copies and comparisons recurse once per level, so 300,000 nested
//    arrays overflowed the stack while an error message was being formatted (issue 21 item 1);
//  - error messages show a bounded excerpt of a value (json_excerpt), never a whole dump.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace degen {

// note: real inputs nest a handful of levels (a safetensors header 3, a report input < 10);
// nlohmann::json recursion uses a few hundred bytes of stack per level, so 256 is far from the limit.
constexpr int kMaxJsonDepth = 256;

// Deepest nesting of arrays and objects in `text` (brackets inside strings ignored); counting stops
// once `stop_above` is exceeded, and *where (if given) receives the byte offset of the deepest bracket.
int json_nesting_depth(std::string_view text, int stop_above = kMaxJsonDepth, size_t* where = nullptr);

// Throws InputError "<what>: JSON nested deeper than <max> levels ..." when `text` nests too deep.
void check_json_depth(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth);

// The one parse of external JSON: check_json_depth (always an InputError), then nlohmann::json::parse.
// With allow_exceptions, a syntax error throws nlohmann::json::parse_error as json::parse does;
// without, the result is discarded (is_discarded()). A number out of double's range is an
// InputError either way. `what` names the input (a path) in messages.
nlohmann::json parse_json(std::string_view text, const std::string& what, bool allow_exceptions = true,
                          nlohmann::json::parser_callback_t cb = nullptr);

// At most max_chars characters of j's compact JSON text ("..." marks a cut); the dump stops once the
// limit is reached, so neither its time nor its recursion depends on the size of j.
std::string json_excerpt(const nlohmann::json& j, size_t max_chars = 60);

}  // namespace degen
