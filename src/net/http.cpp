// libcurl behind net/http.h. One easy handle per request (the requests are few and long: a server's
// answer is a forward pass), with CURLOPT_TIMEOUT_MS / CONNECTTIMEOUT_MS / NOSIGNAL so a hanging
// server cannot block us past the time-out.
#include "net/http.h"

#include "curl_config.h"  // generated: DEGEN_HAVE_CURL

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "util/error.h"
#include "util/json_input.h"

#if DEGEN_HAVE_CURL
#include <curl/curl.h>
#endif

namespace degen::net {

namespace {

std::string excerpt(const std::string& s, size_t n = 200) {
  std::string e = s.substr(0, n);
  for (char& c : e)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return s.size() > n ? e + "..." : e;
}

#if DEGEN_HAVE_CURL
// libcurl's write callback: the chunk goes to the BodyReader; past the cap it takes nothing, so
// libcurl ends the transfer (CURLE_WRITE_ERROR) and the reader's over() says why.
size_t on_data(char* p, size_t size, size_t n, void* user) {
  const size_t len = size * n;  // (libcurl: size is always 1)
  return static_cast<BodyReader*>(user)->take(p, len) ? len : 0;
}

long to_ms(double seconds) { return static_cast<long>(std::llround(seconds * 1000)); }

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}
#endif

}  // namespace

bool available() { return DEGEN_HAVE_CURL != 0; }

bool BodyReader::take(const char* p, size_t len) {
  if (over_ || len > cap_ - std::min(cap_, body_.size())) {
    over_ = true;
    return false;
  }
  body_.append(p, len);
  return true;
}

std::string BodyReader::finish(const std::string& url) {
  if (over_)
    input_error("malformed response from ", url, ": the answer is longer than ", cap_,
                " bytes, the most this request can legitimately take (read stopped there): ", excerpt(body_));
  return std::move(body_);
}

void check_timeout(double seconds, const char* flag) {
  if (!(seconds >= kMinTimeoutS && seconds <= kMaxTimeoutS))
    input_error(flag, " ", seconds, " s: expected a duration of ", kMinTimeoutS, " to ", kMaxTimeoutS,
                " seconds (below 1 ms libcurl has no time-out; above a day it no longer guards against a hang)");
}

HttpResponse request(const std::string& method, const std::string& url, const std::string& body, const HttpOptions& o) {
  check_timeout(o.timeout_s, "http time-out");
  check_timeout(o.connect_timeout_s, "http connect time-out");
#if DEGEN_HAVE_CURL
  global_init();
  std::string last;
  double wait = o.retry_wait_s;
  for (int attempt = 1; attempt <= std::max(1, o.attempts); ++attempt) {
    CURL* h = curl_easy_init();
    if (!h) throw UntestableError("http: libcurl could not create a handle");
    HttpResponse r;
    BodyReader reader(o.max_body_bytes);
    char err[CURL_ERROR_SIZE] = {0};
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, to_ms(o.timeout_s));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, to_ms(std::min(o.connect_timeout_s, o.timeout_s)));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &reader);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    if (method == "POST") {
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    }
    const CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
    r.body = reader.finish(url);  // (InputError when the answer was longer than the cap)
    if (rc == CURLE_OK) {
      if (r.status >= 400)
        throw HttpStatusError(r.status, cat("server ", url, " refused the request: HTTP ", r.status, ": ", excerpt(r.body)));
      return r;
    }
    last = cat(curl_easy_strerror(rc), err[0] ? cat(" (", err, ")") : std::string());
    if (attempt < o.attempts) {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(wait, kMaxRetryWaitS)));
      wait = std::min(wait * 2, kMaxRetryWaitS);
    }
  }
  throw UntestableError(cat("server ", url, " cannot be reached: ", last, " (", std::max(1, o.attempts), " attempts, ",
                            o.timeout_s, " s time-out each)"));
#else
  (void)method, (void)body, (void)o;
  throw UntestableError(cat("server ", url, ": this degenbisect was built without libcurl (install libcurl4-openssl-dev "
                            "and rebuild)"));
#endif
}

nlohmann::json parse_answer(const std::string& url, const std::string& body) {
  try {
    return parse_json(body, cat("malformed response from ", url));
  } catch (const nlohmann::json::exception&) {
    input_error("malformed response from ", url, ": expected JSON, got ", body.empty() ? "an empty body" : "'" + excerpt(body) + "'");
  }
}

nlohmann::json post_json(const std::string& url, const nlohmann::json& body, const HttpOptions& o) {
  return parse_answer(url, request("POST", url, body.dump(), o).body);
}

nlohmann::json get_json(const std::string& url, const HttpOptions& o) { return parse_answer(url, request("GET", url, "", o).body); }

}  // namespace degen::net
