// JSON text for a result (--json of compare, bisect, eval, selftest and inspect; a sweep's
// results.jsonl and sweep.json; bisect's replay lines): the one dump that cannot fail at the end of a
// run. nlohmann's plain dump() throws type_error.316 on a string that is not UTF-8, and some strings
// come from outside the tool's control: a server's error body quoted in an untestable reason, a
// model's half character, an OS message. Here each invalid byte sequence becomes U+FFFD (the text
// stays valid JSON). The strings the user gives on the command line are refused before the run
// instead (cli/main.cpp), so no path or URL is ever altered.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace degen {

// j.dump(indent) with invalid UTF-8 replaced by U+FFFD instead of throwing; never throws type_error.316.
inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace degen
