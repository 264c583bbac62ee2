// An answer body of an OpenAI-compatible /v1/completions (llama-server's, vLLM's) as compare
// --server --api openai reads it, or of SGLang's /generate as --api sglang does (net::parse_answer,
// then server_answer): byte 0 picks the request it answers: one position's top-K (max_tokens 1),
// prompt_logprobs over a prompt of 1 + byte 1 % 16 tokens (vLLM), a free-running generation (ids from
// logprobs), /detokenize; SGLang's teacher-forced answer over 1 + byte 1 % 16 ids (each 1 + byte 1
// % 3), its generation (with per-step lists when byte 1 >= 128), /v1/models. The rule: the parsed
// values, or a degen::Error (128: a malformed answer; an SGLang abort: 125); see fuzz_http_common.h.
#include "fuzz_http_common.h"
#include "net/http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int which = data[0] % 7;
  const int64_t positions = 1 + data[1] % 16;
  const std::string body(fuzz::as_view(data + 2, size - 2));
  fuzz::expect_clean("http openai", [&] {
    const std::string url = "http://127.0.0.1:8000/v1/completions";
    const nlohmann::json j = degen::net::parse_answer(url, body);
    if (which == 0) fuzz::check_top("http openai", degen::server_answer::openai_position(j, url));
    if (which == 1) {
      const auto tops = degen::server_answer::openai_prompt_logprobs(j, positions, url);
      if (static_cast<int64_t>(tops.size()) != positions) fuzz::finding("http openai", "prompt_logprobs: not one list per position");
      for (const auto& t : tops) fuzz::check_top("http openai", t);
    }
    if (which == 2) fuzz::check_generated("http openai", degen::server_answer::openai_generation(j, url, data[1] >= 128));
    if (which == 3) (void)degen::server_answer::detokenized(j, "http://127.0.0.1:8000/detokenize");
    if (which == 4) {
      const std::vector<int32_t> seq(static_cast<size_t>(positions), 1 + data[1] % 3);
      const auto tops = degen::server_answer::sglang_sequence(j, seq, url);
      if (static_cast<int64_t>(tops.size()) != positions) fuzz::finding("http sglang", "input rows: not one list per position");
      for (const auto& t : tops) fuzz::check_top("http sglang", t);
    }
    if (which == 5) fuzz::check_generated("http sglang", degen::server_answer::sglang_generation(j, url, data[1] >= 128));
    if (which == 6) (void)degen::server_answer::served_models(j, "http://127.0.0.1:8000/v1/models");
  });
  return 0;
}
