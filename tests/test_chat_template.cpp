// The Qwen3.5 chat template against the official one (issue 20, point 6): every conversation of
// tests/fixtures/chat/qwen35.json (rendered by the official Qwen3.5-4B.jinja with jinja2,
// tools/make_chat_fixtures.py) must render byte for byte the same with render_chat, and every one the
// template rejects must be an InputError saying the same thing. The CLI test tests/cli/chat_fixtures.sh
// reruns the generator when jinja2 and the template are at hand, so the fixture is known current.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "helpers.h"
#include "model/chat_template.h"
#include "util/error.h"

using namespace degen;
using nlohmann::json;

namespace {

json load_fixture() {
  const auto path = test::fixtures_dir() / "chat" / "qwen35.json";
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot open ", path.string(), " (python3 tools/make_chat_fixtures.py writes it)");
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str());
  REQUIRE(j.at("format") == "degenbisect-chat-fixtures");
  REQUIRE(j.at("version") == 1);
  return j;
}

std::vector<ChatMessage> messages_of(const json& c) {
  std::vector<ChatMessage> out;
  for (const json& m : c.at("messages")) {
    ChatMessage msg{m.at("role").get<std::string>(), m.at("content").get<std::string>(), std::nullopt};
    // a null reasoning_content is "not a string" for the template, as absent
    if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
      msg.reasoning = m["reasoning_content"].get<std::string>();
    out.push_back(msg);
  }
  return out;
}

// The official template's error messages -> what ours must say instead.
const std::map<std::string, std::string>& error_meaning() {
  static const std::map<std::string, std::string> m{
      {"No messages provided.", "no messages"},
      {"No user query found in messages.", "no user message"},
      {"System message must be at the beginning.", "expected the system message to come first"},
      {"Unexpected message role.", "expected system, user or assistant"},
  };
  return m;
}

}  // namespace

TEST_CASE("chat template: qwen35 renders every fixture conversation as the official Jinja template") {
  const json j = load_fixture();
  const json& cases = j.at("cases");
  REQUIRE(cases.size() >= 200);
  int rendered = 0, rejected = 0;  // as the template does
  std::map<std::string, int> errors_seen;
  for (const json& c : cases) {
    const std::string name = c.at("name").get<std::string>();
    CAPTURE(name);
    const auto msgs = messages_of(c);
    const bool gen = c.at("add_generation_prompt").get<bool>();
    const bool thinking = c.value("enable_thinking", true);  // absent: undefined, which means on
    if (c.contains("text")) {
      std::string ours;
      try {
        ours = render_chat(ChatFamily::qwen35, msgs, gen, thinking);
      } catch (const InputError& e) {
        FAIL_CHECK("the template renders it, ours raised: ", e.what());
        continue;
      }
      const bool same = ours == c["text"].get<std::string>();
      CHECK(ours == c["text"].get<std::string>());
      rendered += same;
    } else {
      const std::string theirs = c.at("error").get<std::string>();
      const auto it = error_meaning().find(theirs);
      REQUIRE_MESSAGE(it != error_meaning().end(), "the template raised an error this test does not know: ", theirs);
      try {
        const std::string ours = render_chat(ChatFamily::qwen35, msgs, gen, thinking);
        FAIL_CHECK("the template raises \"", theirs, "\", ours rendered: ", ours);
      } catch (const InputError& e) {
        INFO("template: ", theirs, " ours: ", e.what());
        CHECK(e.code() == ExitCode::input);
        const bool same = std::string(e.what()).find(it->second) != std::string::npos;
        CHECK(same);
        rejected += same;
      }
      ++errors_seen[theirs];
    }
  }
  MESSAGE(cases.size(), " conversations: ", rendered, " rendered identically, ", rejected,
          " rejected with the template's error");
  CHECK(rendered >= 150);
  // every error the template has for tool-free conversations is exercised
  CHECK(errors_seen.size() == error_meaning().size());
}

// The four differences issue 20.6 found, by name, so that a regeneration cannot drop them unnoticed.
TEST_CASE("chat template: the fixture covers the issue 20.6 differences") {
  const json j = load_fixture();
  std::map<std::string, const json*> by_name;
  for (const json& c : j.at("cases")) by_name[c.at("name").get<std::string>()] = &c;
  for (const char* n : {"assistant after the last user, not final, no reasoning", "text after </think> keeps spaces",
                        "several </think>: text after the last", "no user message: assistant only",
                        "no user message: system and assistant", "no messages"}) {
    CAPTURE(n);
    CHECK(by_name.count(n) == 1);
  }
  const json& empty_think = *by_name.at("assistant after the last user, not final, no reasoning");
  CHECK(empty_think.at("text").get<std::string>().find("<think>\n\n</think>\n\nA1<|im_end|>") != std::string::npos);
  CHECK(by_name.at("no user message: assistant only")->contains("error"));
}

TEST_CASE("chat template: qwen35 errors say what was expected and what was found") {
  using V = std::vector<ChatMessage>;
  auto message_of = [](const V& v) -> std::string {
    try {
      render_chat(ChatFamily::qwen35, v, true);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  const std::string none = message_of({{"system", "S"}, {"assistant", "A"}});
  CHECK(none.find("roles: system, assistant") != std::string::npos);
  CHECK(none.find("expected at least one user message") != std::string::npos);
  CHECK(message_of({{"user", "<tool_response>r</tool_response>"}}).find("not a <tool_response>") != std::string::npos);
  CHECK(message_of({}).find("no messages") != std::string::npos);
  CHECK(message_of({{"user", "U"}, {"tool", "r"}}).find("tools are not supported") != std::string::npos);
  // the Qwen3-Next template is not the official Qwen3.5 one: unchanged, no user query needed
  CHECK(render_chat(ChatFamily::qwen3_next, V{{"assistant", "A"}}, false) == "<|im_start|>assistant\nA<|im_end|>\n");
}
