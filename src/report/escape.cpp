// Escaping for the report formats (see escape.h).
#include "report/escape.h"

#include <algorithm>

namespace degen::report {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence starting at s[i], or 0 with `consumed` set to the length of
// the maximal invalid subpart (at least 1).
size_t valid_sequence(std::string_view s, size_t i, size_t& consumed) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  consumed = 1;
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;  // continuation byte, C0/C1 overlong lead, F5..FF
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return 0;
    const unsigned char x = b(i + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (x < l || x > h) return 0;
    consumed = k + 1;
  }
  return len;
}

}  // namespace

std::string sanitize_utf8(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t consumed = 1;
    const size_t n = valid_sequence(s, i, consumed);
    if (n == 0) {
      o += kReplacement;
      i += consumed;
      continue;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (n == 1 && c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
      o += kReplacement;  // not an XML 1.0 character
    } else if (n == 3 && c == 0xEF && static_cast<unsigned char>(s[i + 1]) == 0xBF &&
               (static_cast<unsigned char>(s[i + 2]) == 0xBE || static_cast<unsigned char>(s[i + 2]) == 0xBF)) {
      o += kReplacement;  // U+FFFE, U+FFFF
    } else {
      o.append(s.substr(i, n));
    }
    i += n;
  }
  return o;
}

std::string html_escape(std::string_view s) {
  const std::string clean = sanitize_utf8(s);
  std::string o;
  o.reserve(clean.size() + clean.size() / 8);
  for (char c : clean) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string xml_escape(std::string_view s) { return html_escape(s); }

std::string xml_attr(std::string_view s) {
  const std::string e = html_escape(s);
  std::string o;
  o.reserve(e.size());
  for (char c : e) {
    if (c == '\n') o += "&#10;";
    else if (c == '\r') o += "&#13;";
    else if (c == '\t') o += "&#9;";
    else o += c;
  }
  return o;
}

std::string md_escape(std::string_view s) {
  const std::string clean = sanitize_utf8(s);
  std::string o;
  o.reserve(clean.size() + clean.size() / 8);
  for (char c : clean) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;  // note: '>' alone starts nothing mid-line, so it stays readable
      case '\n': case '\r': case '\t': o += ' '; break;
      case '\\': case '`': case '*': case '_': case '[': case ']': case '|': case '#': case '~':
        o += '\\';
        o += c;
        break;
      default: o += c;
    }
  }
  return o;
}

std::string md_code(std::string_view s) {
  std::string clean = sanitize_utf8(s);
  if (clean.empty()) return "` `";
  for (char& c : clean)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  size_t longest = 0, run = 0;
  for (char c : clean) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  std::string body;
  for (char c : clean) {
    if (c == '|') body += "\\|";  // GFM splits table cells before it parses code spans
    else body += c;
  }
  const std::string fence(longest + 1, '`');
  const bool pad = !body.empty() && (body.front() == '`' || body.back() == '`' || longest > 0);
  return fence + (pad ? " " : "") + body + (pad ? " " : "") + fence;
}

size_t utf8_common_prefix(std::string_view a, std::string_view b) {
  size_t n = 0;
  const size_t m = std::min(a.size(), b.size());
  while (n < m && a[n] == b[n]) ++n;
  if (n == a.size() && n == b.size()) return n;
  // Back off to the start of the character that differs.
  while (n > 0 && n < a.size() && (static_cast<unsigned char>(a[n]) & 0xC0) == 0x80) --n;
  while (n > 0 && n < b.size() && (static_cast<unsigned char>(b[n]) & 0xC0) == 0x80) --n;
  return n;
}

std::string utf8_truncate(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n)) + "\xE2\x80\xA6";
}

}  // namespace degen::report
