// The flags that compare (--server, --server-cmd) and sweep (--server-cmd) share to talk to an
// inference server, and the ServerCompareOptions they make (docs/server.md).
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "subjects/server/compare.h"

namespace degen::cli {

struct ServerFlags {
  std::string api = "llama", served_model, sglang_logprobs = "scaled";
  std::string engine_class = "fp32";  // registered by each command: its help differs (compare --dump too)
  double timeout = 60, health_timeout = 120;
  int attempts = 3, topk = 0;
  bool no_generate = false, prompt_logprobs = false, no_decode_path = false;
  int64_t decode_steps = -1;
  std::vector<std::string> probes = serving_probe_names(true);

  // --api, --prompt-logprobs, --served-model, --sglang-logprobs, --timeout, --attempts, --topk, --no-generate and
  // --health-timeout; `with` is the flag their help says they go with ("--server", "--server-cmd").
  void add(CLI::App* sub, const std::string& with);
  // api, prompt_logprobs, served_model, the engine class (a measured one runs our engine with
  // make_backend), topk, free_running and the HTTP time-out and attempts. The caller sets url,
  // cases and the record options.
  ServerCompareOptions options() const;
};

}  // namespace degen::cli
