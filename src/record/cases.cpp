// Prompt suite loader (see cases.h): strict JSON validation with errors naming case and field.
#include "record/cases.h"

#include <cctype>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/run_config.h"
#include "model/chat_template.h"
#include "util/file_io.h"
#include "model/tokenizer.h"
#include "util/error.h"
#include "util/json_input.h"
#include "util/sha256.h"

namespace degen {

namespace {

using json = nlohmann::json;

// note: invalid UTF-8 would make the JSON parser fail before we know which case holds it. Each
// invalid byte b is therefore replaced by the private-use code point U+10FF00 + b (4 bytes,
// F4 8F BC|b>>6 80|b&63) before parsing, and string fields are scanned for it afterwards, which
// gives the case, the field and the byte offset inside the field.
std::string mark_invalid_utf8(const std::string& text, bool* any) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  *any = false;
  while (i < text.size()) {
    std::string_view rest(text.data() + i, text.size() - i);
    size_t bad = Tokenizer::find_invalid_utf8(rest);
    if (bad == std::string_view::npos) {
      out.append(rest);
      break;
    }
    out.append(rest.substr(0, bad));
    const auto b = static_cast<uint8_t>(rest[bad]);
    out += static_cast<char>(0xF4);
    out += static_cast<char>(0x8F);
    out += static_cast<char>(0xBC | (b >> 6));
    out += static_cast<char>(0x80 | (b & 0x3F));
    *any = true;
    i += bad + 1;
  }
  return out;
}

// Offset (in the original bytes of the field) of the first marked invalid byte, or npos.
size_t marked_offset(const std::string& s) {
  for (size_t i = 0; i + 3 < s.size(); ++i)
    if (static_cast<uint8_t>(s[i]) == 0xF4 && static_cast<uint8_t>(s[i + 1]) == 0x8F &&
        (static_cast<uint8_t>(s[i + 2]) & 0xFC) == 0xBC)
      return i;  // the first marker: every byte before it is an original byte
  return std::string::npos;
}

const char* json_type(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "something else";
  }
}

std::string short_dump(const json& j) { return json_excerpt(j, 60); }

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > kMaxCaseIdLength || s == "." || s == "..") return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

bool sampling_toggle(const Toggle& t) { return t.kind == ToggleKind::sampling; }

bool is_sampling_key(const std::string& key) {
  const Toggle* t = find_toggle(key);
  return t && sampling_toggle(*t);
}

struct Ctx {
  std::string where;  // "FILE: case 'id'" or "FILE: defaults"
  bool marked = false;

  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    input_error(where, ": field '", field, "': ", msg);
  }
  std::string str(const json& obj, const std::string& field) const {
    const json& v = obj.at(field);
    if (!v.is_string()) fail(field, cat("expected a string, found ", json_type(v), " ", short_dump(v)));
    std::string s = v.get<std::string>();
    if (marked) {
      size_t off = marked_offset(s);
      if (off != std::string::npos) fail(field, cat("not valid UTF-8 at byte offset ", off, " of the field"));
    }
    return s;
  }
  bool boolean(const json& obj, const std::string& field) const {
    const json& v = obj.at(field);
    if (!v.is_boolean()) fail(field, cat("expected true or false, found ", json_type(v), " ", short_dump(v)));
    return v.get<bool>();
  }
  int integer(const json& obj, const std::string& field, int64_t lo, int64_t hi) const {
    const json& v = obj.at(field);
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      fail(field, cat("expected an integer in [", lo, ", ", hi, "], found ", short_dump(v)));
    return static_cast<int>(v.get<int64_t>());
  }
  // A RunConfig-style sampling string or object -> the sampling it sets; only sampling keys.
  SamplingParams sampling(const json& obj, const std::string& field) const {
    const json& v = obj.at(field);
    std::string text;
    if (v.is_string()) {
      text = str(obj, field);
    } else if (v.is_object()) {
      for (const auto& [k, x] : v.items()) {
        std::string val;
        if (x.is_number_unsigned()) val = std::to_string(x.get<uint64_t>());  // a seed may use all 64 bits
        else if (x.is_number_integer()) val = std::to_string(x.get<int64_t>());
        else if (x.is_number()) val = json(x.get<double>()).dump();  // shortest round-trip text
        else fail(field, cat("key '", k, "': expected a number, found ", json_type(x), " ", short_dump(x)));
        text += (text.empty() ? "" : ",") + k + "=" + val;
      }
    } else {
      fail(field, cat("expected a \"key=value,...\" string or an object, found ", json_type(v)));
    }
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find(',', start);
      if (end == std::string::npos) end = text.size();
      std::string item = text.substr(start, end - start);
      std::string key = item.substr(0, item.find('='));
      while (!key.empty() && key.back() == ' ') key.pop_back();
      while (!key.empty() && key.front() == ' ') key.erase(key.begin());
      if (!item.empty() && !is_sampling_key(key))
        fail(field, cat("'", key, "' is not a sampling key (expected ", toggle_keys(sampling_toggle),
                        "; other toggles belong in --config)"));
      start = end + 1;
    }
    try {
      RunConfig rc = parse_run_config(text);  // the file's text, read here once
      validate(rc.sampling);
      return rc.sampling;
    } catch (const InputError& e) {
      fail(field, e.what());
    }
  }
  void only_keys(const json& obj, const std::set<std::string>& allowed) const {
    for (const auto& [k, v] : obj.items()) {
      if (!allowed.count(k)) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        input_error(where, ": unknown field '", k, "' (expected one of ", list, ")");
      }
    }
  }
};

struct Defaults {
  int max_new_tokens = 32;
  bool thinking = true;
  SamplingParams sampling;
};

}  // namespace

const char* case_input_name(CaseInput k) {
  switch (k) {
    case CaseInput::prompt: return "prompt";
    case CaseInput::raw: return "raw";
    case CaseInput::tokens: return "tokens";
  }
  return "?";
}

std::string sampling_str(const SamplingParams& s) {
  RunConfig rc;
  rc.sampling = s;
  std::string out = rc.str();
  return out == "default" ? "" : out;
}

SamplingParams case_sampling(const Case& c, const SamplingParams& base) { return with_sampling_of(base, c.sampling); }

Suite parse_suite(const std::string& raw_text, const std::string& origin) {
  Suite suite;
  suite.origin = origin;
  suite.sha256 = sha256_hex(raw_text);
  bool marked = false;
  const std::string text = mark_invalid_utf8(raw_text, &marked);
  json doc;
  try {
    doc = parse_json(text, origin);
  } catch (const json::parse_error& e) {
    input_error(origin, ": not valid JSON: ", e.what());
  }
  if (!doc.is_object()) input_error(origin, ": expected a JSON object {\"suite\": ..., \"cases\": [...]}, found ", json_type(doc));
  Ctx top{origin, marked};
  top.only_keys(doc, {"suite", "description", "defaults", "cases"});
  if (!doc.contains("suite")) input_error(origin, ": missing field 'suite' (the suite name)");
  suite.name = top.str(doc, "suite");
  if (!valid_name(suite.name))
    top.fail("suite", cat("expected a name of 1-", kMaxCaseIdLength, " characters from [A-Za-z0-9._-], found '", suite.name, "'"));
  if (doc.contains("description")) suite.description = top.str(doc, "description");

  Defaults def;
  if (doc.contains("defaults")) {
    const json& d = doc["defaults"];
    Ctx dc{origin + ": defaults", marked};
    if (!d.is_object()) top.fail("defaults", cat("expected an object, found ", json_type(d)));
    dc.only_keys(d, {"max_new_tokens", "thinking", "sampling"});
    if (d.contains("max_new_tokens")) def.max_new_tokens = dc.integer(d, "max_new_tokens", 0, kMaxNewTokensLimit);
    if (d.contains("thinking")) def.thinking = dc.boolean(d, "thinking");
    if (d.contains("sampling")) def.sampling = dc.sampling(d, "sampling");
  }

  if (!doc.contains("cases")) input_error(origin, ": missing field 'cases' (an array of cases)");
  const json& cases = doc["cases"];
  if (!cases.is_array()) top.fail("cases", cat("expected an array, found ", json_type(cases)));
  if (cases.empty()) top.fail("cases", "the suite has no cases");
  std::set<std::string> ids;
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& cj = cases[i];
    Ctx cc{cat(origin, ": case #", i + 1), marked};
    if (!cj.is_object()) input_error(cc.where, ": expected an object, found ", json_type(cj));
    if (!cj.contains("id")) input_error(cc.where, ": missing field 'id'");
    Case c;
    c.id = cc.str(cj, "id");
    if (!valid_name(c.id))
      cc.fail("id", cat("expected 1-", kMaxCaseIdLength, " characters from [A-Za-z0-9._-], found '", c.id, "'"));
    cc.where = cat(origin, ": case '", c.id, "'");
    if (!ids.insert(c.id).second) input_error(cc.where, ": duplicate id (case #", i + 1, ")");
    cc.only_keys(cj, {"id", "description", "prompt", "raw", "tokens", "system", "thinking", "max_new_tokens",
                      "ignore_stop", "sampling"});
    if (cj.contains("description")) c.description = cc.str(cj, "description");
    const int given = int(cj.contains("prompt")) + int(cj.contains("raw")) + int(cj.contains("tokens"));
    if (given != 1)
      input_error(cc.where, ": expected exactly one of the fields 'prompt', 'raw', 'tokens', found ", given);
    if (cj.contains("prompt")) {
      c.input = CaseInput::prompt;
      c.text = cc.str(cj, "prompt");
      if (c.text.empty()) cc.fail("prompt", "empty");
    } else if (cj.contains("raw")) {
      c.input = CaseInput::raw;
      c.text = cc.str(cj, "raw");
      if (c.text.empty()) cc.fail("raw", "empty");
    } else {
      c.input = CaseInput::tokens;
      const json& t = cj["tokens"];
      if (!t.is_array() || t.empty()) cc.fail("tokens", cat("expected a non-empty array of token ids, found ", short_dump(t)));
      for (size_t k = 0; k < t.size(); ++k) {
        if (!t[k].is_number_integer() || t[k].get<int64_t>() < 0 || t[k].get<int64_t>() > INT32_MAX)
          cc.fail("tokens", cat("element ", k, ": expected a non-negative integer id, found ", short_dump(t[k])));
        c.tokens.push_back(static_cast<int32_t>(t[k].get<int64_t>()));
      }
    }
    if (c.input != CaseInput::prompt) {
      for (const char* f : {"system", "thinking"})
        if (cj.contains(f)) cc.fail(f, cat("only applies to 'prompt' cases (this one is '", case_input_name(c.input), "')"));
    }
    c.thinking = def.thinking;
    if (cj.contains("system")) c.system = cc.str(cj, "system");
    if (cj.contains("thinking")) c.thinking = cc.boolean(cj, "thinking");
    c.max_new_tokens = cj.contains("max_new_tokens") ? cc.integer(cj, "max_new_tokens", 0, kMaxNewTokensLimit)
                                                     : def.max_new_tokens;
    if (cj.contains("ignore_stop")) c.ignore_stop = cc.boolean(cj, "ignore_stop");
    c.sampling = def.sampling;
    if (cj.contains("sampling")) c.sampling = with_sampling_of(def.sampling, cc.sampling(cj, "sampling"));
    suite.cases.push_back(std::move(c));
  }
  return suite;
}

Suite load_suite(const std::filesystem::path& path) {
  return parse_suite(read_file(path, kMaxInputFileBytes), path.string());
}

CasePrompt encode_case(const Case& c, const Tokenizer* tok, const ModelConfig& cfg) {
  CasePrompt p;
  const std::string where = cat("case '", c.id, "'");
  if (c.input == CaseInput::tokens) {
    p.ids = c.tokens;
  } else {
    if (!tok) input_error(where, ": the model has no tokenizer.json, so a '", case_input_name(c.input), "' case cannot be encoded");
    std::string text = c.text;
    if (c.input == CaseInput::prompt) {
      const ChatFamily fam = chat_family_for_model_type(cfg.model_type);
      text = render_single_turn(fam, c.system, c.text, c.thinking);
      p.opened_think = fam == ChatFamily::qwen35 && c.thinking;
    }
    try {
      p.ids = tok->encode(text);
    } catch (const InputError& e) {
      input_error(where, ": ", e.what());
    }
  }
  if (p.ids.empty()) input_error(where, ": the prompt encodes to no tokens");
  for (size_t i = 0; i < p.ids.size(); ++i)
    if (p.ids[i] >= cfg.vocab_size)
      input_error(where, ": token ", i, " has id ", p.ids[i], ", expected < vocab_size ", cfg.vocab_size);
  const int top_k = case_sampling(c, SamplingParams{}).top_k;  // as `run` refuses it (run_config.cpp)
  if (top_k > cfg.vocab_size)
    input_error(where, ": sampling top_k=", top_k, " exceeds the vocabulary (", cfg.vocab_size, ")");
  const int64_t need = static_cast<int64_t>(p.ids.size()) + c.max_new_tokens;
  if (cfg.max_position_embeddings > 0 && need > cfg.max_position_embeddings)
    input_error(where, ": ", p.ids.size(), " prompt tokens + max_new_tokens ", c.max_new_tokens,
                " exceed the model's maximum context max_position_embeddings = ", cfg.max_position_embeddings);
  return p;
}

}  // namespace degen
