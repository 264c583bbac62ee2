// server_answer (server_compare.h): the answers of llama-server's native API, the OpenAI-compatible
// one and vLLM's shapes read without a network, and the malformed ones refused (issue 40).
#include <doctest/doctest.h>

#include <cmath>

#include "diag/server_compare.h"
#include "net/http.h"
#include "util/error.h"

using namespace degen;
using nlohmann::json;

namespace {
const std::string kUrl = "http://127.0.0.1:1/completion";
json body(const std::string& text) { return net::parse_answer(kUrl, text); }
}  // namespace

TEST_CASE("server answers: the shapes of each API are read as the client reads them") {
  const auto top = server_answer::llama_position(
      body(R"({"completion_probabilities": [{"id": 12, "logprob": -0.05, "top_logprobs": [{"id": 12, "logprob": -0.05},
           {"id": 7, "logprob": null}]}]})"), kUrl);
  REQUIRE(top.size() == 2);
  CHECK(top[0] == std::pair<int64_t, double>{12, -0.05});
  CHECK(std::isinf(top[1].second));
  const auto gen = server_answer::llama_generation(body(R"({"tokens": [1, 2048, 18446744073709551615], "stop_type": null})"), kUrl);
  CHECK(gen.tokens == std::vector<int64_t>{1, 2048, std::numeric_limits<int64_t>::max()});  // judged later, not here
  CHECK(gen.stop_reason == "?");
  // a long stop_type is cut to 40 bytes on a character boundary (it goes into --json)
  const auto cut = server_answer::llama_generation(body(R"({"tokens": [], "stop_type": ")" + std::string(39, 'a') + R"(\u00e9\u00e9"})"), kUrl);
  CHECK(cut.stop_reason == std::string(39, 'a'));
  CHECK_NOTHROW((void)json(cut.stop_reason).dump());
  const json vllm = body(R"({"choices": [{"finish_reason": "stop", "prompt_logprobs": [null, {"5": {"logprob": -0.1}}],
      "logprobs": {"tokens": ["token_id:12"], "top_logprobs": [{"token_id:12": -0.2, "token_id:3": -2.0}]}}]})");
  CHECK(server_answer::openai_position(vllm, kUrl).front() == std::pair<int64_t, double>{12, -0.2});
  CHECK(server_answer::openai_prompt_logprobs(vllm, 2, kUrl).size() == 2);
  CHECK(server_answer::openai_generation(vllm, kUrl).tokens == std::vector<int64_t>{12});
  CHECK(server_answer::openai_generation(vllm, kUrl).stop_reason == "stop");
  CHECK(server_answer::detokenized(body(R"({"prompt": "hi"})"), kUrl) == "hi");
  // issue 41: the per-step distributions of a generation (n_probs), an empty list where none is stated
  const auto steps = server_answer::llama_generation(
      body(R"({"tokens": [5, 6], "stop_type": "limit", "timings": {"draft_n": 4, "draft_n_accepted": 3},
               "completion_probabilities": [{"id": 5, "logprob": -0.1, "top_logprobs": [{"id": 5, "logprob": -0.1}]},
                                            {"id": 6, "logprob": 0, "top_logprobs": []}]})"), kUrl, 1);
  REQUIRE(steps.steps.size() == 2);
  CHECK(steps.steps[0] == server_answer::TopList{{5, -0.1}});
  CHECK(steps.steps[1].empty());
  CHECK(steps.draft_n == 4);
  CHECK(steps.draft_accepted == 3);
  const auto osteps = server_answer::openai_generation(vllm, kUrl, true);
  REQUIRE(osteps.steps.size() == 1);
  CHECK(osteps.steps[0].front() == std::pair<int64_t, double>{12, -0.2});
}

TEST_CASE("server answers: a malformed answer is an input error naming what was wrong, never another exception") {
  auto refused = [](const std::string& text, const char* what, int which) {
    CAPTURE(text);
    const json j = body(text);
    auto run = [&] {
      if (which == 0) (void)server_answer::llama_position(j, kUrl);
      if (which == 1) (void)server_answer::llama_generation(j, kUrl);
      if (which == 2) (void)server_answer::openai_position(j, kUrl);
      if (which == 3) (void)server_answer::openai_generation(j, kUrl);
    };
    CHECK_THROWS_WITH_AS(run(), doctest::Contains(what), InputError);
  };
  // issue 41: per-step log-probs missing (n_probs ignored), one short, for another token, more drafts accepted than made
  auto refused_steps = [](const std::string& text, const char* what) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS((void)server_answer::llama_generation(body(text), kUrl, 8), doctest::Contains(what), InputError);
  };
  refused_steps(R"({"tokens": [1]})", "under 'completion_probabilities'");
  refused_steps(R"({"tokens": [1, 2], "completion_probabilities": [{"id": 1, "top_logprobs": []}]})", "has 1 entries for 2 generated tokens");
  refused_steps(R"({"tokens": [1], "completion_probabilities": [{"id": 3, "top_logprobs": []}]})", "for another token than the one generated");
  refused_steps(R"({"tokens": [1], "completion_probabilities": [{"id": 1, "top_logprobs": {}}]})", "top_logprobs is not a list");
  refused_steps(R"({"tokens": [], "completion_probabilities": [], "timings": {"draft_n": 1, "draft_n_accepted": 2}})", "draft_n_accepted 2 > ");
  // a stop_type that is not a string was nlohmann's type_error: "internal error"
  refused(R"({"tokens": [1], "stop_type": 2})", "'stop_type' is not a string", 1);
  refused(R"({"tokens": [-3]})", "a negative token id", 1);
  refused(R"({"tokens": [1.5]})", "not an integer", 1);
  refused(R"({"completion_probabilities": [{"top_logprobs": [{"id": 1, "logprob": 0.5}]}]})", "a log-probability of 0.5", 0);
  refused(R"({"completion_probabilities": [{"top_logprobs": [{"id": 1, "logprob": -0.1}, {"id": 2, "logprob": -0.2}]}]})",
          "not a probability distribution", 0);
  refused(R"({"choices": [{"logprobs": {"top_logprobs": [{"token_id:99999999999999999999": -1}]}}]})", "is not 'token_id:N'", 2);
  refused(R"({"choices": [{"finish_reason": 7, "logprobs": {"tokens": []}}]})", "'finish_reason' is not a string", 3);
  CHECK_THROWS_WITH_AS(body("{\"x\": NaN}"), doctest::Contains("expected JSON"), InputError);
  CHECK_THROWS_AS(body("{\"x\": 1e999}"), InputError);
}

TEST_CASE("server answers: a time-out outside 1 ms .. 1 day is refused before any request") {
  net::HttpOptions o;
  for (double t : {0.0, 0.0005, 1e300, std::nan("")}) {
    o.timeout_s = t;
    CHECK_THROWS_WITH_AS(net::request("GET", "http://127.0.0.1:1/health", "", o), doctest::Contains("expected a duration"),
                         InputError);
  }
}
