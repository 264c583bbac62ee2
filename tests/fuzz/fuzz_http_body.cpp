// The answer body reader of every compare --server request (net::BodyReader, src/net/http.h) driven
// as libcurl drives it, without a network: bytes 0-1 the cap (little-endian; 65535: no cap, SIZE_MAX),
// byte 2 the number n of chunk sizes, the next n bytes the sizes (a byte b: b bytes, or with its top bit
// set (b & 0x7f) x 256), the rest the body, cut into chunks of those sizes in turn (the last chunk what
// remains). Chunks are offered until the reader refuses one (libcurl then ends the transfer).
// The rule: the reader never holds more than the cap; it refuses exactly when the bytes offered add up
// to more than the cap, keeping none of that chunk; what it keeps is the chunks it took, in order; then
// finish() is an InputError exactly when it refused, and net::parse_answer reads what was kept (an
// answer or a degen::Error).
#include <cstring>
#include <limits>

#include "fuzz_common.h"
#include "net/http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const unsigned c16 = data[0] | (data[1] << 8);
  const size_t cap = c16 == 0xffff ? std::numeric_limits<size_t>::max() : c16;
  const size_t n = std::min<size_t>(data[2], size - 3);
  std::vector<size_t> sizes;
  for (size_t i = 0; i < n; ++i) sizes.push_back(data[3 + i] & 0x80 ? size_t(data[3 + i] & 0x7f) * 256 : data[3 + i]);
  const char* body = reinterpret_cast<const char*>(data + 3 + n);
  const size_t body_len = size - 3 - n;

  degen::net::BodyReader r(cap);
  std::string kept;       // what the reader must hold: the chunks it took
  size_t offered = 0;     // bytes offered so far
  size_t at = 0;
  for (size_t k = 0; at < body_len || k == 0; ++k) {
    const size_t len = sizes.empty() || at + sizes[k % sizes.size()] > body_len || k + 1 >= 4096 ? body_len - at
                                                                                                 : sizes[k % sizes.size()];
    offered += len;
    const bool took = r.take(body + at, len);
    if (took != (offered <= cap)) fuzz::finding("http body", "refused " + std::to_string(offered) + " bytes offered under a cap of " +
                                                                 std::to_string(cap) + ", or took them over it");
    if (r.over() == took) fuzz::finding("http body", "over() disagrees with what take() answered");
    if (r.body().size() > cap) fuzz::finding("http body", "holds more than its cap");
    if (!took) break;  // libcurl ends the transfer
    kept.append(body + at, len);
    if (r.body() != kept) fuzz::finding("http body", "what it holds is not the chunks it took, in order");
    at += len;
    if (len == 0 && at >= body_len) break;
  }
  const bool over = r.over();
  const std::string url = "http://127.0.0.1:8080/completion";
  std::string got;
  bool refused = false;
  try {
    got = r.finish(url);
  } catch (const degen::InputError& e) {
    refused = true;
    if (std::strstr(e.what(), "longer than") == nullptr) fuzz::finding("http body", std::string("an unexpected refusal: ") + e.what());
  }
  if (refused != over) fuzz::finding("http body", "finish() refused an answer within the cap, or took one over it");
  if (!refused && got != kept) fuzz::finding("http body", "finish() returned another body than the one kept");
  if (!refused) fuzz::expect_clean("http body", [&] { (void)degen::net::parse_answer(url, got); });
  return 0;
}
