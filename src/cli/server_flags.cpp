// ServerFlags (server_flags.h).
#include "cli/server_flags.h"

#include "backends/make_backend.h"
#include "net/http.h"
#include "subjects/server/engine_api.h"

namespace degen::cli {

namespace {
// Seconds within net::kMinTimeoutS..kMaxTimeoutS (NaN and inf refused too, which CLI::Range lets
// through or reads as "no limit"): outside them a time-out is off or overflows (net/http.h).
CLI::Validator duration_seconds() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::logic_error&) {
          return "expected a number of seconds, found '" + text + "'";
        }
        if (used != text.size()) return "expected a number of seconds, found '" + text + "'";
        if (!(v >= net::kMinTimeoutS && v <= net::kMaxTimeoutS))
          return cat("expected ", net::kMinTimeoutS, " to ", net::kMaxTimeoutS, " seconds (below 1 ms libcurl would have ",
                     "no time-out; above a day it no longer guards against a hang), found ", text);
        return "";
      },
      "SECONDS", "duration");
}
}  // namespace

void ServerFlags::add(CLI::App* sub, const std::string& with) {
  sub->add_option("--health-timeout", health_timeout,
                  "With --server-cmd: seconds a started server may take to answer GET /health with 200 (default 120)")
      ->check(duration_seconds());
  sub->add_option("--api", api, "With " + with + ": the server's API: " + server::apis_help() + "; docs/server.md")
      ->check(CLI::IsMember(server::api_names()));
  sub->add_option("--sglang-logprobs", sglang_logprobs,
                  "With --api sglang: how the server states its output log-probs: scaled (SGLang's default: at the\n"
                  "sampling temperature, taken back to the model's distribution here) or original (the server runs\n"
                  "with SGLANG_RETURN_ORIGINAL_LOGPROB=1); a reading the server's answers contradict is an error (128)")
      ->check(CLI::IsMember({"scaled", "original"}));
  sub->add_flag("--prompt-logprobs", prompt_logprobs,
                "With --api openai: ask for prompt_logprobs (vLLM): one request per sequence instead of one per position\n"
                "(--api vllm always does)");
  sub->add_option("--served-model", served_model,
                  "With --api openai: the request's \"model\" (the name the server serves; checked against GET\n"
                  "/v1/models, as vLLM checks it)");
  sub->add_option("--timeout", timeout, "With " + with + ": seconds per request before it counts as failed (default 60)")
      ->check(duration_seconds());
  sub->add_option("--attempts", attempts, "With " + with + ": attempts per request on a transport failure (default 3)")
      ->check(CLI::Range(1, 20));
  sub->add_option("--topk", topk, "With " + with + ": log-probs asked per position (default: every id up to 4096 ids, else 40)")
      ->check(CLI::Range(1, 1000000));
  sub->add_flag("--no-generate", no_generate, "With " + with + ": teacher-forced only, no free-running generation");
  sub->add_flag("--no-decode-path", no_decode_path,
                "With " + with + ": do not score the generation's decode path (the server's distribution at each\n"
                "generated step against our reference over the engine's own sequence; its cost: one CPU prefill\n"
                "and one CPU decode of prompt + generated tokens per case, see --decode-steps)");
  std::vector<std::string> probe_names = serving_probe_names(), defaults = serving_probe_names(true);
  std::string default_list;
  for (const std::string& n : defaults) default_list += (default_list.empty() ? "" : ",") + n;
  probe_names.push_back("none");
  sub->add_option("--probes", probes,
                  "With " + with + ": the serving probes to run after each case, comma-separated:\n" + serving_probes_help() +
                      "or none (default: " + default_list + "; each costs about one more generation per case)")
      ->delimiter(',')
      ->check(CLI::IsMember(probe_names));
  sub->add_option("--decode-steps", decode_steps,
                  "With " + with + ": score the decode path at most at this many generated steps per case\n"
                  "(default: every step; the reference's passes then stop after the last scored step)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
}

ServerCompareOptions ServerFlags::options() const {
  ServerCompareOptions o;
  o.api = api;
  o.prompt_logprobs = prompt_logprobs;
  o.served_model = served_model;
  o.sglang_original_logprobs = sglang_logprobs == "original";
  const EngineClass ec = parse_engine_class(engine_class);
  o.fclass = ec.record_class;
  o.measured_class = ec.measured;
  o.class_name = ec.name;
  o.factory = make_backend;
  o.free_running = !no_generate;
  o.decode_path = !no_decode_path;
  o.decode_steps = decode_steps;
  o.probes.clear();
  for (const std::string& p : probes)
    if (p != "none") o.probes.push_back(p);
  o.topk = topk;
  o.http.timeout_s = timeout;
  o.http.attempts = attempts;
  return o;
}

}  // namespace degen::cli
