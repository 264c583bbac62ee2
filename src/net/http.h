// A small HTTP client over libcurl for talking to inference servers (compare --server): JSON POST and
// GET with a bounded time-out per attempt and a bounded number of attempts, so a server that hangs,
// refuses or drops the connection ends in an error naming the URL, never in a hang.
//   - transport failures (cannot connect, time-out, connection closed without a response) and HTTP
//     statuses >= 400: UntestableError (exit 125: the server cannot be reached or refuses), after
//     the retries for the transport ones;
//   - a body that is not JSON: InputError (exit 128: a malformed response), with an excerpt;
//   - a body larger than the request's max_body_bytes: InputError (128) at once, not retried: the
//     read stops at the cap, so an endless answer cannot fill the memory;
//   - a time-out outside [kMinTimeoutS, kMaxTimeoutS]: InputError (128), as the flags that set it.
// Built without libcurl, every call is UntestableError saying so.
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace degen::net {

// The bounds of every time-out (--timeout, --health-timeout and the fields below). libcurl takes
// milliseconds and reads 0 as "no time-out": below 1 ms the conversion would make 0 and turn the
// time-out off. Above one day it no longer protects against a hang (the longest request the tool
// makes is one vLLM prompt_logprobs answer for a whole sequence, minutes on a slow machine; a
// server's start, model loading included, takes minutes too), and 1e300 s would overflow the
// conversion.
constexpr double kMinTimeoutS = 0.001;
constexpr double kMaxTimeoutS = 86400;
// "<flag> <v> s: expected a duration of 0.001 to 86400 seconds" when v is outside the bounds (or NaN).
void check_timeout(double seconds, const char* flag);

// The largest answer body read when a request does not set its own cap: /health, /detokenize of
// one prompt (a few KiB of text), a single position's top-K. 16 MiB is thousands of times those; the
// requests whose answers grow with what they ask (every id at every position) set their cap from it
// (subjects/server/compare.cpp, answer_cap()).
constexpr size_t kDefaultMaxBodyBytes = size_t{16} << 20;

// The longest wait between two attempts: doubling from 0.5 s, --attempts 20 waited 3 days in all
// (2^19 x 0.5 s before the last); a server that restarts or finishes loading takes seconds.
constexpr double kMaxRetryWaitS = 8;

struct HttpOptions {
  double timeout_s = 60;      // per attempt, connect included
  double connect_timeout_s = 10;
  int attempts = 3;           // transport failures only; an HTTP error status is not retried
  double retry_wait_s = 0.5;  // doubled after each failed attempt, up to kMaxRetryWaitS
  size_t max_body_bytes = kDefaultMaxBodyBytes;  // a longer answer is refused (InputError) as it arrives
};

struct HttpResponse {
  long status = 0;
  std::string body;
};

// The UntestableError of an HTTP status >= 400, with the status (a caller may accept a 404).
class HttpStatusError : public UntestableError {
 public:
  HttpStatusError(long status, const std::string& msg) : UntestableError(msg), status_(status) {}
  long status() const { return status_; }
 private:
  long status_;
};

// An answer body as it arrives in chunks (libcurl's write callback), kept up to a cap: a chunk that
// would take the total past `cap` is refused whole and nothing more is kept after it (the transfer
// ends there), so at most `cap` bytes are ever held and over() is true exactly when the bytes offered
// added up to more than `cap`. request() reads every answer through one; it needs no network, so a
// test or fuzz target can drive it (tests/fuzz/fuzz_http_body.cpp).
class BodyReader {
 public:
  explicit BodyReader(size_t cap) : cap_(cap) {}
  // Takes `len` bytes at `p`; false (keeping none of them) once the total would exceed the cap.
  bool take(const char* p, size_t len);
  bool over() const { return over_; }
  size_t cap() const { return cap_; }
  const std::string& body() const { return body_; }
  // The body, or InputError naming `url` when the answer was longer than the cap (with an excerpt of
  // what was kept).
  std::string finish(const std::string& url);

 private:
  size_t cap_;
  std::string body_;
  bool over_ = false;
};

// One request; throws as above (status >= 400 included).
HttpResponse request(const std::string& method, const std::string& url, const std::string& body, const HttpOptions& o);

// POST a JSON body, parse a JSON answer (InputError naming the URL when it is not JSON).
nlohmann::json post_json(const std::string& url, const nlohmann::json& body, const HttpOptions& o);
nlohmann::json get_json(const std::string& url, const HttpOptions& o);
// The JSON of an answer body from `url` (InputError with an excerpt when it is not JSON): what
// post_json and get_json parse with, callable without a network (tests/fuzz/fuzz_http_*.cpp).
nlohmann::json parse_answer(const std::string& url, const std::string& body);

bool available();  // built with libcurl

}  // namespace degen::net
