// An answer body of llama-server's native API as compare --server reads it (net::parse_answer, then
// server_answer): byte 0 picks the request it answers: a teacher-forced /completion (one position's
// top-K), a free-running /completion (tokens, stop_type; with n_probs: the per-step top-K too) or
// /detokenize (the text). The rule: the
// parsed values, or a degen::Error (128: a malformed answer); see fuzz_http_common.h.
#include "fuzz_http_common.h"
#include "net/http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int which = data[0] % 4;
  const std::string body(fuzz::as_view(data + 1, size - 1));
  fuzz::expect_clean("http llama", [&] {
    const std::string url = "http://127.0.0.1:8080/completion";
    const nlohmann::json j = degen::net::parse_answer(url, body);
    if (which == 0) fuzz::check_top("http llama", degen::server_answer::llama_position(j, url));
    if (which == 1) fuzz::check_generated("http llama", degen::server_answer::llama_generation(j, url));
    if (which == 3) fuzz::check_generated("http llama", degen::server_answer::llama_generation(j, url, 40));
    if (which == 2) (void)degen::server_answer::detokenized(j, "http://127.0.0.1:8080/detokenize");
  });
  return 0;
}
