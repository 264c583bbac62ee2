// A small HTTP client over libcurl for talking to inference servers (compare --server): JSON POST and
// GET with a bounded time-out per attempt and a bounded number of attempts, so a server that hangs,
// refuses or drops the connection ends in an error naming the URL, never in a hang.
//   - transport failures (cannot connect, time-out, connection closed without a response) and HTTP
//     statuses >= 400: UntestableError (exit 125: the server cannot be reached or refuses), after
//     the retries for the transport ones;
//   - a body that is not JSON: InputError (exit 128: a malformed response), with an excerpt.
// Built without libcurl, every call is UntestableError saying so.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace degen::net {

struct HttpOptions {
  double timeout_s = 60;      // per attempt, connect included
  double connect_timeout_s = 10;
  int attempts = 3;           // transport failures only; an HTTP error status is not retried
  double retry_wait_s = 0.5;  // doubled after each failed attempt
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

// One request; throws as above (status >= 400 included).
HttpResponse request(const std::string& method, const std::string& url, const std::string& body, const HttpOptions& o);

// POST a JSON body, parse a JSON answer (InputError naming the URL when it is not JSON).
nlohmann::json post_json(const std::string& url, const nlohmann::json& body, const HttpOptions& o);
nlohmann::json get_json(const std::string& url, const HttpOptions& o);

bool available();  // built with libcurl

}  // namespace degen::net
