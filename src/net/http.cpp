// libcurl behind net/http.h. One easy handle per request (the requests are few and long: a server's
// answer is a forward pass), with CURLOPT_TIMEOUT_MS / CONNECTTIMEOUT_MS / NOSIGNAL so a hanging
// server cannot block us past the time-out.
#include "net/http.h"

#include <chrono>
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
size_t on_data(char* p, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(p, size * n);
  return size * n;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}
#endif

}  // namespace

bool available() { return DEGEN_HAVE_CURL != 0; }

HttpResponse request(const std::string& method, const std::string& url, const std::string& body, const HttpOptions& o) {
#if DEGEN_HAVE_CURL
  global_init();
  std::string last;
  double wait = o.retry_wait_s;
  for (int attempt = 1; attempt <= std::max(1, o.attempts); ++attempt) {
    CURL* h = curl_easy_init();
    if (!h) throw UntestableError("http: libcurl could not create a handle");
    HttpResponse r;
    char err[CURL_ERROR_SIZE] = {0};
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(o.timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r.body);
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
    if (rc == CURLE_OK) {
      if (r.status >= 400)
        throw HttpStatusError(r.status, cat("server ", url, " refused the request: HTTP ", r.status, ": ", excerpt(r.body)));
      return r;
    }
    last = cat(curl_easy_strerror(rc), err[0] ? cat(" (", err, ")") : std::string());
    if (attempt < o.attempts) {
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      wait *= 2;
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

namespace {
nlohmann::json parse(const std::string& url, const HttpResponse& r) {
  try {
    return parse_json(r.body, cat("malformed response from ", url));
  } catch (const nlohmann::json::exception&) {
    input_error("malformed response from ", url, ": expected JSON, got ", r.body.empty() ? "an empty body" : "'" + excerpt(r.body) + "'");
  }
}
}  // namespace

nlohmann::json post_json(const std::string& url, const nlohmann::json& body, const HttpOptions& o) {
  return parse(url, request("POST", url, body.dump(), o));
}

nlohmann::json get_json(const std::string& url, const HttpOptions& o) { return parse(url, request("GET", url, "", o)); }

}  // namespace degen::net
