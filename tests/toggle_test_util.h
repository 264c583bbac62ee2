// Helpers shared by the toggle and fault tests (test_emulation.cpp, test_faults.cpp): an engine
// built from a RunConfig string exactly as the CLI builds it (make_backend + engine_options), and a
// run of prefill + decode steps that keeps every traced tensor by name.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/make_backend.h"
#include "engine_test_util.h"
#include "model/synth.h"

namespace degen::test {

// A shipped tiny preset synthesised once per test process.
inline const std::filesystem::path& synth_model(const std::string& preset) {
  static std::map<std::string, std::unique_ptr<TempDir>> dirs;
  auto& d = dirs[preset];
  if (!d) {
    d = std::make_unique<TempDir>("tog-" + preset);
    const SynthPreset& sp = find_synth_preset(preset);
    synth_checkpoint(sp.config, sp.options, d->path());
  }
  return d->path();
}

// A model folder with an engine built from a RunConfig string.
struct ToggledModel {
  ModelConfig cfg;
  std::unique_ptr<Checkpoint> ckpt;
  ModelWeights w;
  RunConfig rc;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Engine> eng;

  ToggledModel(const std::filesystem::path& dir, const std::string& config) {
    cfg = load_model_config(dir);
    ckpt = Checkpoint::open(dir);
    w = bind_weights(cfg, *ckpt);
    rc = parse_run_config(config);
    be = make_backend(rc, cfg);
    eng = std::make_unique<Engine>(cfg, w, *be, engine_options(rc));
  }
};

// Deterministic token ids in [0, V).
inline std::vector<int32_t> test_ids(size_t n, int64_t V, uint32_t seed = 1) {
  std::vector<int32_t> ids(n);
  uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (auto& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(V));
  }
  return ids;
}

// Everything one run produced: traced tensors by "<call>:<trace name>" (call "p" = the prefill,
// "d0", "d1", ... = decode steps), their dtypes, all logits rows in order, and the final state.
struct RunTrace {
  std::map<std::string, std::vector<double>> t;
  std::map<std::string, DType> dtype;
  std::vector<double> logits;
  SeqState state;
};

// Prefill `ids` (logits of every row) then `decode` one-token steps with the ids that follow.
inline RunTrace run_traced(ToggledModel& m, const std::vector<int32_t>& ids, int decode,
                           const std::vector<int32_t>& next = {}) {
  RunTrace r;
  r.state = m.eng->new_state();
  std::string call = "p";
  Trace tr;
  tr.observer = [&](const TraceEvent& ev, Tensor& t, Backend& be) {
    r.t[call + ":" + ev.name] = be.to_host_f64(t);
    r.dtype[call + ":" + ev.name] = t.dtype;
  };
  ForwardOptions fo;
  fo.logits = LogitsRows::all;
  auto append = [&](const Tensor& lg) {
    const std::vector<double> v = m.be->to_host_f64(lg);
    r.logits.insert(r.logits.end(), v.begin(), v.end());
  };
  append(m.eng->forward({SeqInput{&r.state, ids}}, fo, &tr).logits);
  const std::vector<int32_t> steps = next.empty() ? test_ids(static_cast<size_t>(decode), m.cfg.vocab_size, 99) : next;
  for (int s = 0; s < decode; ++s) {
    call = "d" + std::to_string(s);
    append(m.eng->forward({SeqInput{&r.state, {steps.at(static_cast<size_t>(s))}}}, fo, &tr).logits);
  }
  return r;
}

// The layer index of a trace name "call:step-L" (-1 for whole-model steps).
inline int trace_layer(const std::string& key) {
  const size_t dash = key.rfind('-');
  if (dash == std::string::npos) return -1;
  const std::string tail = key.substr(dash + 1);
  if (tail.empty() || tail.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(tail);
}

}  // namespace degen::test
