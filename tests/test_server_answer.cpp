// server_answer (subjects/server/compare.h): the answers of llama-server's native API, the OpenAI-compatible
// one, vLLM's shapes and SGLang's /generate (issue 42) read without a network, and the malformed ones
// refused (issue 40).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "subjects/server/answers.h"
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

// Issue 42: SGLang's /generate. A sequence of 3 ids with a 3-id vocabulary; the model's distribution
// after seq[0..i] is d_i. SGLang's input rows are shifted by one (entry j: the distribution that
// predicted seq[j], entry 0 null), the last distribution comes as output_top_logprobs[0].
TEST_CASE("server answers: SGLang's shifted input rows, null first entry and triples give the distribution after each prefix") {
  const std::vector<int32_t> seq{2, 0, 1};
  const std::string ok = R"({"text": "", "output_ids": [2], "meta_info": {"cached_tokens": 0,
      "finish_reason": {"type": "length", "length": 1},
      "input_token_logprobs": [[null, 2, null], [-1.5, 0, null], [-0.25, 1, "b"]],
      "input_top_logprobs": [null, [[-0.5, 1, null], [-1.5, 0, null]], [[-0.25, 1, null], [-1.75, 2, null]]],
      "output_token_logprobs": [[-0.125, 2, null]],
      "output_top_logprobs": [[[-0.125, 2, null], [-2.5, 0, null]]]}})";
  const auto tops = server_answer::sglang_sequence(body(ok), seq, kUrl);
  REQUIRE(tops.size() == 3);
  // after seq[0]: row 1 (the one that predicted seq[1] = 0); after seq[0..1]: row 2; after all: the output's
  CHECK(tops[0] == server_answer::TopList{{1, -0.5}, {0, -1.5}});
  CHECK(tops[1] == server_answer::TopList{{1, -0.25}, {2, -1.75}});
  CHECK(tops[2] == server_answer::TopList{{2, -0.125}, {0, -2.5}});
  const auto gen = server_answer::sglang_generation(body(ok), kUrl, true);
  CHECK(gen.tokens == std::vector<int64_t>{2});
  CHECK(gen.stop_reason == "length");
  CHECK(gen.cached_tokens == 0);
  REQUIRE(gen.steps.size() == 1);
  CHECK(gen.steps[0].front() == std::pair<int64_t, double>{2, -0.125});
  // a batch answer is a list; /detokenize's field is "text"
  CHECK(server_answer::detokenized(body(R"({"text": "hi"})"), kUrl) == "hi");
  CHECK(server_answer::served_models(body(R"({"object": "list", "data": [{"id": "a"}, {"id": "b"}]})"), kUrl) ==
        std::vector<std::string>{"a", "b"});

  auto refused = [&](const std::string& text, const char* what) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS((void)server_answer::sglang_sequence(body(text), seq, kUrl), doctest::Contains(what), InputError);
  };
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = ok;
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  refused(R"({"text": ""})", "under 'meta_info'");
  refused(with("[-1.5, 0, null], [-0.25", "[-1.5, 0], [-0.25"), "expected a (logprob, token_id, text) triple");
  refused(with("[-0.25, 1, \"b\"]", "[-0.25, 1, 7]"), "neither null nor a string");
  refused(with("[-1.5, 0, null], [-0.25", "[-1.5, 5, null], [-0.25"), "is for token 5 but the request's input_ids[1] is 0");
  // the rows not shifted (entry 0 a log-prob): refused, not read one row off
  refused(with("[[null, 2, null]", "[[-0.7, 2, null]"), "states a log-prob");
  // a row whose top-K states its own token at another log-prob than the token row: not the same position
  refused(with("[[-0.5, 1, null], [-1.5, 0, null]]", "[[-0.5, 0, null], [-1.5, 1, null]]"), "not for the same position");
  refused(with("[null, 2, null], [-1.5, 0, null], [-0.25, 1, \"b\"]]", "[null, 2, null]]"), "expected 3 meta_info.input_token_logprobs entries");
  CHECK_THROWS_WITH_AS((void)server_answer::sglang_generation(body(with("\"output_ids\": [2]", "\"output_ids\": [1]")), kUrl),
                       doctest::Contains("the log-probs are for other tokens"), InputError);
  CHECK_THROWS_WITH_AS((void)server_answer::sglang_generation(body(with("\"cached_tokens\": 0", "\"cached_tokens\": -1")), kUrl),
                       doctest::Contains("cached_tokens is not a count"), InputError);
  CHECK_THROWS_AS((void)server_answer::sglang_generation(body(with("{\"type\": \"length\", \"length\": 1}",
                                                                   "{\"type\": \"abort\", \"message\": \"out of memory\"}")), kUrl),
                  UntestableError);
}

// SGLang's output log-probs are log(softmax((z - penalties) / T)); taken back with a complete listing.
TEST_CASE("server answers: SGLang's temperature-scaled, penalised log-probs are taken back to the model's distribution exactly") {
  const std::vector<double> z{1.0, -0.5, 2.0, 0.25};  // logits of a 4-id vocabulary
  auto log_softmax = [](std::vector<double> x) {
    double m = *std::max_element(x.begin(), x.end()), s = 0;
    for (double v : x) s += std::exp(v - m);
    for (double& v : x) v -= m + std::log(s);
    return x;
  };
  const std::vector<double> model = log_softmax(z);
  const double T = 0.7, presence = 1.5;
  const std::vector<int64_t> before{2, 2};  // id 2 generated before this step
  std::vector<double> served = z;
  served[2] -= presence;
  for (double& v : served) v /= T;
  served = log_softmax(served);
  server_answer::TopList listed;
  for (int64_t i = 0; i < 4; ++i) listed.emplace_back(i, served[static_cast<size_t>(i)]);
  const auto back = server_answer::sglang_model_step(listed, T, presence, 1.0, before, 4);
  REQUIRE(back);
  for (const auto& [id, lp] : *back) CHECK(lp == doctest::Approx(model[static_cast<size_t>(id)]).epsilon(1e-12));
  // as they are when nothing was applied; refused where the normalisation or the logit's sign is unknown
  CHECK(*server_answer::sglang_model_step(listed, 1.0, presence, 1.0, {}, 4) == listed);
  CHECK_FALSE(server_answer::sglang_model_step(server_answer::TopList(listed.begin(), listed.begin() + 3), T, 0, 1, {}, 4));
  CHECK_FALSE(server_answer::sglang_model_step(listed, 1.0, 0, 1.2, before, 4));
  // mishandled (the temperature left in), the distribution is measurably another one
  const auto left = server_answer::sglang_model_step(listed, 1.0, presence, 1.0, before, 4);
  CHECK(std::abs(left->at(0).second - model[0]) > 0.05);
}
