// Text that reaches a report (case ids, reasons, decoded model output) may hold '<', '&', quotes,
// control characters or invalid UTF-8 (a broken model emits half a character). These functions make
// any byte string safe for each output format; none of them throws.
//   sanitize_utf8: valid UTF-8 in, the same text out, except that each maximal invalid subpart
//     (Unicode §3.9, "substitution of maximal subparts"), each C0 control other than tab, LF and CR,
//     and U+FFFE / U+FFFF become U+FFFD. The result is valid UTF-8 and valid XML 1.0 character data.
//   html_escape / xml_escape: sanitize, then & < > " ' as entities (safe in text and in quoted
//     attributes); xml_attr also writes tab, LF and CR as character references so attribute values
//     keep them.
//   md_escape: sanitize, one line (newlines become spaces), Markdown and table specials escaped and
//     < and & as entities (GitHub renders raw HTML in comments; a lone ">" mid-line is harmless).
//   md_code: an inline code span that survives a GFM table cell (pipes escaped, backtick fences
//     longer than any backtick run inside).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace degen::report {

std::string sanitize_utf8(std::string_view s);
std::string html_escape(std::string_view s);
std::string xml_escape(std::string_view s);
std::string xml_attr(std::string_view s);
std::string md_escape(std::string_view s);
std::string md_code(std::string_view s);

// Length in bytes of the common prefix of two valid UTF-8 strings, backed off to a character start.
size_t utf8_common_prefix(std::string_view a, std::string_view b);

// At most `max_bytes` of valid UTF-8 `s`, cut at a character boundary, with "…" appended when cut.
std::string utf8_truncate(std::string_view s, size_t max_bytes);

}  // namespace degen::report
