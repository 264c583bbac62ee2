// Golden records: teacher-forced runs with capture and injection, the writer and the verified reader
// (see golden.h for the record layout).
#include "diag/golden.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <signal.h>
#include <cmath>
#include <numeric>
#include <set>
#include <span>
#include <thread>
#include <unistd.h>

#include "build_config.h"
#include "diag/compare.h"
#include "diag/golden_plan.h"
#include "diag/metrics.h"
#include "engine/generate.h"
#include "model/chat_template.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"
#include "util/error.h"
#include "util/file_lock.h"
#include "util/json_input.h"
#include "util/sha256.h"

namespace degen {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* forced_mode_name(ForcedMode m) { return m == ForcedMode::prefill ? "prefill" : "decode"; }

std::vector<bool> parse_layer_list(const std::string& text, const ModelConfig& cfg) {
  std::vector<bool> out(static_cast<size_t>(cfg.num_layers), false);
  if (text == "all") return std::vector<bool>(out.size(), true);
  if (text == "none") return out;
  std::string scope = text;
  std::replace(scope.begin(), scope.end(), ',', '+');
  LayerScope s;
  try {
    s = LayerScope::parse(scope, "--layers");
  } catch (const InputError&) {
    input_error("--layers ", text, ": expected all, none, or layers and ranges such as 0,3,5-7 (or linear, full)");
  }
  for (const auto& r : s.ranges)
    if (r.b >= cfg.num_layers)
      input_error("--layers ", text, ": layer ", r.b, " is outside the model (layers 0..", cfg.num_layers - 1, ")");
  for (int l : s.layers(cfg.num_layers, &cfg)) out[static_cast<size_t>(l)] = true;
  return out;
}

TopK topk_of_row(const float* row, int64_t V, const std::vector<uint8_t>* mask, int k) {
  std::span<const float> x(row, static_cast<size_t>(V));
  std::span<const uint8_t> ex;
  if (mask) ex = *mask;
  std::vector<double> lp = metrics::log_softmax(x, ex);
  TopK t;
  std::vector<int32_t> idx;
  double m = -INFINITY;
  for (int64_t i = 0; i < V; ++i) {
    if (!ex.empty() && ex[static_cast<size_t>(i)]) continue;
    if (std::isnan(lp[static_cast<size_t>(i)])) return t;  // undefined distribution: caller reports it
    idx.push_back(static_cast<int32_t>(i));
    m = std::max(m, static_cast<double>(x[static_cast<size_t>(i)]));
  }
  const size_t K = std::min(idx.size(), static_cast<size_t>(std::max(k, 0)));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(K), idx.end(), [&](int32_t a, int32_t b) {
    return lp[a] > lp[b] || (lp[a] == lp[b] && a < b);
  });
  for (size_t i = 0; i < K; ++i) {
    t.ids.push_back(idx[i]);
    t.logprobs.push_back(static_cast<float>(lp[static_cast<size_t>(idx[i])]));
  }
  double s = 0;
  for (int32_t i : idx) s += std::exp(static_cast<double>(x[static_cast<size_t>(i)]) - m);
  t.lse = m + std::log(s);
  // lse_pad: the log-sum-exp over every row, padding included (what other engines normalise by),
  // minus lse, as log1p(padding mass / real mass) in fp64 around the largest logit of all rows.
  double mv = m;
  bool finite = true;
  for (int64_t i = 0; i < V; ++i) {
    if (ex.empty() || !ex[static_cast<size_t>(i)]) continue;
    const double v = x[static_cast<size_t>(i)];
    if (!std::isfinite(v)) finite = false;
    else mv = std::max(mv, v);
  }
  if (!finite) {
    t.lse_pad = NAN;
  } else {
    double real = 0, pad = 0;
    for (int64_t i = 0; i < V; ++i)
      (ex.empty() || !ex[static_cast<size_t>(i)] ? real : pad) += std::exp(static_cast<double>(x[static_cast<size_t>(i)]) - mv);
    t.lse_pad = std::log1p(pad / real);
  }
  return t;
}

std::optional<double> vocab_shift(const TopKBlock& b, int64_t row) {
  if (row < 0 || static_cast<size_t>(row) >= b.lse_pad.size()) return std::nullopt;
  const double p = b.lse_pad[static_cast<size_t>(row)];
  if (!std::isfinite(p)) return std::nullopt;
  return -p;
}

std::string weights_sample_digest(const Checkpoint& ckpt) {
  Sha256 h;
  for (const TensorView* t : ckpt.tensors()) {
    h.update(t->name);
    h.update("\n", 1);
    const size_t n = std::min<size_t>(64, t->nbytes);
    h.update(t->data, n);
    h.update(t->data + t->nbytes - n, n);
  }
  return h.hex();
}

uint64_t content_hash64(const uint8_t* data, size_t n) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  auto mix = [](uint64_t h) {
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return h;
  };
  uint64_t lane[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull, 0x082EFA98EC4E6C89ull};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, data + i + 8 * static_cast<size_t>(k), 8);
      lane[k] = mix((lane[k] ^ w) * kMul);
    }
  uint64_t h = static_cast<uint64_t>(n) * kMul;
  for (uint64_t l : lane) h = mix((h ^ l) * kMul);
  for (; i < n; ++i) h = mix((h ^ data[i]) * kMul);
  return mix(h);
}

std::map<std::string, std::string> tensor_digests(const Checkpoint& ckpt) {
  const std::vector<const TensorView*> ts = ckpt.tensors();
  std::vector<uint64_t> hs(ts.size());
  // One tensor at a time per thread, on every core (this library is built without OpenMP).
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < ts.size();) {
      if (i + 1 < ts.size()) read_ahead(*ts[i + 1]);
      hs[i] = content_hash64(ts[i]->data, ts[i]->nbytes);
    }
  };
  const size_t n = std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), ts.size()));
  std::vector<std::thread> pool;
  for (size_t k = 1; k < n; ++k) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < ts.size(); ++i) {
    char b[17];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(hs[i]));
    out[ts[i]->name] = b;
  }
  return out;
}

// ---- teacher-forced runs ----

ForcedRun forced_run(Engine& eng, const std::vector<int32_t>& tokens, const ForcedOptions& o) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const ModelConfig& cfg = eng.config();
  const int L = cfg.num_layers;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  ForcedRun r;
  r.T = o.run_positions < 0 ? static_cast<int64_t>(tokens.size())
                            : std::min<int64_t>(o.run_positions, static_cast<int64_t>(tokens.size()));
  DEGEN_ASSERT(r.T > 0, "forced_run: no tokens");
  if (o.inject) DEGEN_ASSERT(r.T <= o.inject->positions && o.inject->hidden == H, "forced_run: injection covers too few positions");
  if (o.patch_out)
    DEGEN_ASSERT(o.patch_layer >= 0 && o.patch_layer < L && static_cast<int64_t>(o.patch_out->size()) >= r.T * H,
                 "forced_run: the patch covers too few positions");
  DEGEN_ASSERT(o.prefill_positions <= 0 || (o.mode == ForcedMode::decode && !o.inject && !o.mtp),
               "forced_run: prefill_positions is for plain decode-mode runs");
  r.P = std::min(o.capture_positions, r.T);
  const size_t PH = static_cast<size_t>(r.P * H);
  r.l_out.resize(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l)
    if (!o.capture_layers.empty() && o.capture_layers[static_cast<size_t>(l)] && r.P > 0) r.l_out[l].assign(PH, 0.f);
  if (r.P > 0) r.embed.assign(PH, 0.f);
  r.l_out_norm.assign(static_cast<size_t>(L * r.T), 0.f);

  Tensor prenorm;  // l_out-(L-1) for the mtp-prenorm-hidden fault
  Trace tr;
  tr.observer = [&](const TraceEvent& ev, Tensor& t, Backend& be) {
    if (ev.mtp) return;
    const TraceSeq& s = ev.seqs.at(0);
    if (o.mtp_prenorm_hidden && ev.step == Step::l_out && ev.layer == L - 1) prenorm = be.clone(t);
    if (ev.step == Step::l_in && o.inject) {
      const std::vector<float>& g = o.inject->in.at(static_cast<size_t>(ev.layer));
      if (g.empty()) return;
      std::vector<double> v(static_cast<size_t>(s.rows * H));
      for (int64_t i = 0; i < s.rows; ++i)
        for (int64_t j = 0; j < H; ++j) v[i * H + j] = g[static_cast<size_t>((s.pos0 + i) * H + j)];
      t = be.from_host(v, t.shape, t.dtype);
    } else if (ev.step == Step::l_out) {
      if (ev.layer == o.patch_layer && o.patch_out) {
        std::vector<double> pv(static_cast<size_t>(s.rows * H));
        for (int64_t i = 0; i < s.rows; ++i)
          for (int64_t j = 0; j < H; ++j) pv[static_cast<size_t>(i * H + j)] = (*o.patch_out)[static_cast<size_t>((s.pos0 + i) * H + j)];
        t = be.from_host(pv, t.shape, t.dtype);
      }
      std::vector<float> v = be.to_host_f32(t);
      std::vector<float>& keep = r.l_out[static_cast<size_t>(ev.layer)];
      for (int64_t i = 0; i < s.rows; ++i) {
        const int64_t pos = s.pos0 + i;
        double n2 = 0;
        for (int64_t j = 0; j < H; ++j) n2 += double(v[i * H + j]) * v[i * H + j];
        r.l_out_norm[static_cast<size_t>(ev.layer * r.T + pos)] = static_cast<float>(std::sqrt(n2));
        if (pos < r.P && !keep.empty()) std::copy_n(v.begin() + i * H, H, keep.begin() + pos * H);
      }
    } else if (ev.step == Step::embed && r.P > 0) {
      std::vector<float> v = be.to_host_f32(t);
      for (int64_t i = 0; i < s.rows && s.pos0 + i < r.P; ++i)
        std::copy_n(v.begin() + i * H, H, r.embed.begin() + (s.pos0 + i) * H);
    }
  };

  SeqState st = eng.new_state();
  ForwardOptions fo;
  fo.vocab_mask = o.vocab_mask;
  if (o.mode == ForcedMode::prefill) {
    fo.logits = o.logits ? LogitsRows::all : LogitsRows::none;
    fo.keep_hidden = o.mtp && eng.has_mtp();
    std::vector<int32_t> ids(tokens.begin(), tokens.begin() + r.T);
    ForwardOutput out = eng.forward({SeqInput{&st, ids}}, fo, &tr);
    if (o.logits) r.logits = eng.backend().to_host_f32(out.logits);
    if (fo.keep_hidden && r.T >= 2) {
      MtpInput mi;
      mi.state = &st;
      mi.hidden = (o.mtp_prenorm_hidden ? prenorm : out.hidden).slice0(0, r.T - 1);
      mi.next_tokens.assign(ids.begin() + 1, ids.end());
      r.mtp_logits = eng.backend().to_host_f32(eng.mtp({mi}, o.vocab_mask));
    }
  } else {
    fo.logits = o.logits ? LogitsRows::last : LogitsRows::none;
    // The first N tokens in one call, keeping its last row only, as generate() prefills a prompt.
    const int64_t n0 = std::min(std::max<int64_t>(o.prefill_positions, 0), r.T);
    r.logits_pos0 = n0 > 0 ? n0 - 1 : 0;
    if (o.logits) r.logits.reserve(static_cast<size_t>((r.T - r.logits_pos0) * V));
    if (n0 > 0) {
      std::vector<int32_t> ids(tokens.begin(), tokens.begin() + n0);
      ForwardOutput out = eng.forward({SeqInput{&st, ids}}, fo, &tr);
      if (o.logits) r.logits = eng.backend().to_host_f32(out.logits);
    }
    for (int64_t i = n0; i < r.T; ++i) {
      ForwardOutput out = eng.forward({SeqInput{&st, {tokens[static_cast<size_t>(i)]}}}, fo, &tr);
      if (o.logits) {
        std::vector<float> row = eng.backend().to_host_f32(out.logits);
        r.logits.insert(r.logits.end(), row.begin(), row.end());
      }
    }
  }
  r.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return r;
}

LayerInputs make_layer_inputs(const std::vector<float>& embed, const std::vector<std::vector<float>>& l_out, int64_t P,
                              int64_t H) {
  LayerInputs in;
  in.positions = P;
  in.hidden = H;
  in.in.resize(l_out.size());
  if (P <= 0) return in;
  for (size_t l = 0; l < l_out.size(); ++l) in.in[l] = l == 0 ? embed : l_out[l - 1];
  return in;
}

std::vector<std::optional<metrics::TensorError>> layer_errors(const std::vector<std::vector<float>>& test,
                                                              const std::vector<std::vector<float>>& golden,
                                                              const LayerInputs* inputs) {
  std::vector<std::optional<metrics::TensorError>> e(golden.size());
  for (size_t l = 0; l < golden.size(); ++l) {
    if (golden[l].empty() || l >= test.size() || test[l].size() != golden[l].size()) continue;
    if (inputs && inputs->in.at(l).empty()) continue;  // isolated: the layer's input was not injected
    e[l] = metrics::tensor_error(std::span<const float>(test[l]), std::span<const float>(golden[l]));
  }
  return e;
}

std::vector<metrics::LogitPosition> logit_positions(const std::vector<float>& logits, int64_t rows, int64_t V,
                                                    const TopKBlock& golden, const std::vector<int32_t>& next,
                                                    const std::vector<uint8_t>* mask) {
  const int K = golden.K;
  const std::vector<int32_t>& ids = golden.ids;
  const std::vector<float>& logprobs = golden.logprobs;
  const std::vector<float>& lse = golden.lse;
  std::vector<metrics::LogitPosition> out;
  std::span<const uint8_t> ex;
  if (mask) ex = *mask;
  for (int64_t i = 0; i < rows; ++i) {
    metrics::GoldenTopK g;
    g.ids = std::span<const int32_t>(ids.data() + i * K, static_cast<size_t>(K));
    g.logprobs = std::span<const float>(logprobs.data() + i * K, static_cast<size_t>(K));
    g.lse = lse[static_cast<size_t>(i)];
    out.push_back(metrics::compare_logits_topk(std::span<const float>(logits.data() + i * V, static_cast<size_t>(V)), g,
                                               next[static_cast<size_t>(i)], ex, std::min(K, 10)));
  }
  return out;
}

TopKBlock topk_block(const std::vector<float>& logits, int64_t rows, int64_t V, const std::vector<uint8_t>* mask, int K) {
  TopKBlock b;
  b.K = K;
  for (int64_t i = 0; i < rows; ++i) {
    TopK t = topk_of_row(logits.data() + i * V, V, mask, K);
    if (static_cast<int>(t.ids.size()) != K) {
      b.undefined_row = i;
      return b;
    }
    b.ids.insert(b.ids.end(), t.ids.begin(), t.ids.end());
    b.logprobs.insert(b.logprobs.end(), t.logprobs.begin(), t.logprobs.end());
    b.lse.push_back(static_cast<float>(t.lse));
    b.lse_pad.push_back(static_cast<float>(t.lse_pad));
  }
  return b;
}

double mean_kld(const std::vector<metrics::LogitPosition>& pos) {
  if (pos.empty()) return 0;
  double s = 0;
  for (const auto& p : pos) s += p.kld;
  return s / static_cast<double>(pos.size());
}

// ---- the manifest's own checksum ----

std::string manifest_checksum(const json& manifest) {
  json m = manifest;
  if (m.is_object()) m.erase(kManifestChecksumKey);
  // Through text and back, so that the writer's in-memory numbers (a NaN written as null, an int
  // read back as unsigned) hash as the reader will see them.
  return sha256_hex(json::parse(m.dump()).dump());
}

// ---- writing ----

int64_t golden_positions(const std::string& policy, int64_t T, int64_t per_position_bytes) {
  if (policy == "all") return T;
  if (policy == "none") return 0;
  if (policy == "auto")
    return per_position_bytes == 0 ? T : std::min<int64_t>(T, kAutoLayerBytesPerCase / per_position_bytes);
  return std::min<int64_t>(T, std::stoll(policy));  // validated before
}

namespace {

void validate_positions(const std::string& p) {
  if (p == "all" || p == "none" || p == "auto") return;
  bool digits = !p.empty() && p.size() < 10 && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) input_error("--positions ", p, ": expected auto, all, none or a number N (the first N positions of each case)");
}

// True when `dir` may be replaced by --force: an empty folder or a golden record.
bool replaceable(const fs::path& dir) {
  if (!fs::is_directory(dir)) return false;
  if (fs::exists(dir / "manifest.json")) return true;
  return fs::directory_iterator(dir) == fs::directory_iterator();
}

void add_i32(SafetensorsWriter& w, const std::string& name, const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  w.add(name, DType::i32, shape, v.data(), v.size() * 4);
}
void add_f32(SafetensorsWriter& w, const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
  w.add(name, DType::f32, shape, v.data(), v.size() * 4);
}

// Floors of one case for one floor engine: isolated rel_l2 per layer and mode, mean teacher-forced
// KLD per mode, MTP draft KLD (prefill).
json measure_floors(Engine& eng, const std::vector<int32_t>& seq, const ForcedRun& g, const std::vector<bool>& stored,
                    const TopKBlock& main_k, const TopKBlock& mtp_k, const std::vector<uint8_t>* maskp) {
  const ModelConfig& cfg = eng.config();
  const int L = cfg.num_layers;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size, T = static_cast<int64_t>(seq.size()), P = g.P;
  const LayerInputs in = make_layer_inputs(g.embed, g.l_out, P, H);
  std::vector<int32_t> next(seq.begin() + 1, seq.end());
  next.push_back(-1);
  std::vector<int32_t> mtp_next;
  for (int64_t i = 0; i + 1 < T; ++i) mtp_next.push_back(i + 2 < T ? seq[static_cast<size_t>(i + 2)] : -1);
  json f = json::object();
  for (ForcedMode m : {ForcedMode::prefill, ForcedMode::decode}) {
    const std::string mn = forced_mode_name(m);
    json arr = json::array();
    if (P > 0) {
      ForcedOptions io;
      io.mode = m;
      io.run_positions = P;
      io.capture_positions = P;
      io.capture_layers = stored;
      io.inject = &in;
      io.logits = false;
      ForcedRun iso = forced_run(eng, seq, io);
      for (auto& e : layer_errors(iso.l_out, g.l_out, &in)) arr.push_back(e ? metrics::json_number(e->rel_l2) : json(nullptr));
    } else {
      for (int l = 0; l < L; ++l) arr.push_back(nullptr);
    }
    f["iso_" + mn] = arr;
    ForcedOptions to;
    to.mode = m;
    to.vocab_mask = maskp;
    to.mtp = m == ForcedMode::prefill && !mtp_k.ids.empty();
    ForcedRun tf = forced_run(eng, seq, to);
    f["kld_" + mn] = metrics::json_number(mean_kld(logit_positions(tf.logits, T, V, main_k, next, maskp)));
    if (m == ForcedMode::prefill)
      f["mtp_kld"] = tf.mtp_logits.empty()
                         ? json(nullptr)
                         : metrics::json_number(mean_kld(logit_positions(tf.mtp_logits, T - 1, V, mtp_k, mtp_next, maskp)));
  }
  return f;
}

}  // namespace

namespace {

// The suite's case `c` as the record runs it (the --gen-tokens override applied).
Case golden_case(const GoldenOptions& opt, const Case& suite_case) {
  Case c = suite_case;
  if (opt.gen_tokens) c.max_new_tokens = *opt.gen_tokens;
  return c;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> golden_batch_groups(const Suite& suite, const GoldenOptions& opt) {
  std::vector<std::pair<size_t, size_t>> g;
  auto same = [&](const Case& a0, const Case& b0) {
    const Case a = golden_case(opt, a0), b = golden_case(opt, b0);
    return sampling_str(case_sampling(a, SamplingParams{})) == sampling_str(case_sampling(b, SamplingParams{})) &&
           a.max_new_tokens == b.max_new_tokens && a.ignore_stop == b.ignore_stop;
  };
  for (size_t i = 0; i < suite.cases.size();) {
    size_t j = i + 1;
    while (opt.batch_all && j < suite.cases.size() && same(suite.cases[i], suite.cases[j])) ++j;
    g.emplace_back(i, j);
    i = j;
  }
  return g;
}

namespace {

// What every case of one record shares: the reference engine, the noise-floor engines (one per
// class, where this build can make it), the padding mask, the stop ids and the top-K width.
struct GoldenRun {
  const Model& model;
  const Tokenizer* tok;
  const GoldenOptions& opt;
  const ModelConfig& cfg;
  int L;
  int64_t H, V;
  std::vector<bool> stored;
  int n_stored;
  RunConfig rc;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Engine> eng;
  std::vector<uint8_t> mask;
  const std::vector<uint8_t>* maskp = nullptr;
  std::vector<int32_t> stops;
  int K = 0;
  RunConfig floor_rc[2];
  std::unique_ptr<Backend> floor_be[2];
  std::unique_ptr<Engine> floor_eng[2];
  // The CPU spot check of a reference made on the GPU (GoldenOptions::verify_layers).
  std::vector<bool> verify_layers;
  bool verify = false;
  RunConfig verify_rc;
  std::unique_ptr<Backend> verify_be;
  std::unique_ptr<Engine> verify_eng;
  // bf16 floors made on the GPU (GoldenOptions::bf16_floors backend=cuda): checked against the CPU's
  // emulation of GPU storage (precision=bf16) at the same layers and positions.
  bool verify_floors = false;
  std::unique_ptr<Backend> floor_check_be;
  std::unique_ptr<Engine> floor_check_eng;

  GoldenRun(const Model& model_, const Tokenizer* tok_, const GoldenOptions& opt_, const BackendFactory& factory,
            GoldenSummary& sum)
      : model(model_), tok(tok_), opt(opt_), cfg(model_.config), L(cfg.num_layers), H(cfg.hidden_size),
        V(cfg.vocab_size), stored(parse_layer_list(opt_.layers, cfg)),
        n_stored(static_cast<int>(std::count(stored.begin(), stored.end(), true))) {
    rc = opt.reference;
    if (rc.backend == BackendKind::cpu) rc.precision = opt.precision;
    be = factory(rc, cfg);
    eng = std::make_unique<Engine>(cfg, model.weights, *be, engine_options(rc));
    if (tok) {
      mask = tok->padding_mask(V);
      stops = stop_token_ids(model.dir / "generation_config.json", *tok);
    } else {
      for (int64_t e : cfg.eos_token_ids) stops.push_back(static_cast<int32_t>(e));
    }
    maskp = mask.empty() ? nullptr : &mask;
    const int real_ids = static_cast<int>(V - std::count(mask.begin(), mask.end(), uint8_t(1)));
    K = std::min(opt.topk, real_ids);
    const bool gpu_floors = opt.floors && opt.floor_classes != "fp32" && opt.bf16_floors.backend != BackendKind::cpu;
    if ((rc.backend != BackendKind::cpu || gpu_floors) && opt.verify_layers != "none" && opt.verify_positions > 0) {
      verify_layers = parse_layer_list(opt.verify_layers, cfg);
      const bool any = std::count(verify_layers.begin(), verify_layers.end(), true) > 0;
      verify = any && rc.backend != BackendKind::cpu;
      verify_floors = any && gpu_floors;
    }
    if (verify) {
      verify_be = factory(verify_rc, cfg);  // the CPU reference (precision=ref)
      verify_eng = std::make_unique<Engine>(cfg, model.weights, *verify_be, engine_options(verify_rc));
    }
    if (verify_floors) {
      RunConfig emu;
      emu.precision = Precision::bf16;  // the CPU's emulation of GPU storage
      floor_check_be = factory(emu, cfg);
      floor_check_eng = std::make_unique<Engine>(cfg, model.weights, *floor_check_be, engine_options(emu));
    }
    floor_rc[0] = opt.bf16_floors;
    if (floor_rc[0].backend == BackendKind::cpu) floor_rc[0].precision = Precision::bf16;
    floor_rc[1].precision = opt.precision == Precision::fp64 ? Precision::ref : Precision::fp64;
    for (int fc = 0; fc < 2; ++fc) {
      if (!opt.floors) {
        sum.floors_reason[fc] = "not measured (--no-floors)";
        continue;
      }
      if (opt.floor_classes != "both" && opt.floor_classes != floor_class_name(static_cast<FloorClass>(fc))) {
        sum.floors_reason[fc] = cat("not measured (--floor-classes ", opt.floor_classes, ")");
        continue;
      }
      try {
        floor_be[fc] = factory(floor_rc[fc], cfg);
        floor_eng[fc] = std::make_unique<Engine>(cfg, model.weights, *floor_be[fc], engine_options(floor_rc[fc]));
        sum.floors[fc] = true;
      } catch (const UntestableError& e) {
        sum.floors_reason[fc] = e.what();
      }
    }
  }
};

// The options write_golden refuses, and an `out` it may not replace.
void check_golden_options(const GoldenOptions& opt, const fs::path& out) {
  if (opt.precision == Precision::bf16)
    input_error("golden: --precision must be fp32 or fp64 (the reference); bf16 is what the noise floors measure");
  if (opt.topk < 1 || opt.topk > 1000) input_error("golden: --topk must be in [1, 1000], found ", opt.topk);
  if (opt.gen_tokens && (*opt.gen_tokens < 0 || *opt.gen_tokens > kMaxNewTokensLimit))
    input_error("golden: --gen-tokens must be in [0, ", kMaxNewTokensLimit, "], found ", *opt.gen_tokens);
  validate_positions(opt.positions);
  const RunConfig& r = opt.reference;
  if (r.backend == BackendKind::cuda) {
    if (!r.cuda_reference())
      input_error("golden: --config ", r.str(), " is the bf16 GPU path, not a reference; the reference on the GPU is "
                  "backend=cuda,precision=ref");
    if (opt.precision != Precision::ref)
      input_error("golden: --precision fp64 runs on the CPU only; the reference on the GPU is fp32 (precision=ref)");
  } else if (r.precision_set && r.precision != Precision::ref && r.precision != Precision::fp64) {
    input_error("golden: --config precision=", r.str(), ": the reference is precision=ref (fp32) or fp64 (--precision)");
  }
  // Only what leaves the reference's numerics as they are: the backend, precision=ref and the GPU's
  // way of running it (tp, gemm, graphs); faults to test the spot check.
  RunConfig neutral = r;
  neutral.backend = BackendKind::cpu;
  neutral.precision = Precision::ref;
  neutral.precision_set = false;
  neutral.tp = 1;
  neutral.gemm.reset();
  neutral.graphs.reset();
  neutral.faults.clear();
  if (neutral.str() != RunConfig{}.str())
    input_error("golden: --config ", r.str(), ": ", neutral.str(), " would change the reference's numerics; --config takes "
                "backend, precision=ref, tp, gemm and graphs (and faults, to test the spot check)");
  if (r.backend == BackendKind::cpu && !r.faults.empty())
    input_error("golden: --config fault=... on the CPU would make a wrong golden record; faults are allowed only with "
                "backend=cuda,precision=ref, to show that the CPU spot check refuses them");
  const RunConfig& bf = opt.bf16_floors;
  const bool gpu_floors = bf.backend != BackendKind::cpu;
  if (gpu_floors) {
    RunConfig n2 = bf;
    n2.backend = BackendKind::cpu;
    n2.tp = 1;
    n2.gemm.reset();
    n2.graphs.reset();
    n2.faults.clear();  // to show that the spot check refuses them
    if (bf.cuda_reference() || n2.str() != RunConfig{}.str())
      input_error("golden: --floors-config ", bf.str(), ": the bf16 floors run on precision=bf16 (the CPU's emulation) or "
                  "backend=cuda (the bf16 GPU path; tp, gemm and graphs allowed)");
  } else if (bf.str() != "precision=bf16") {
    input_error("golden: --floors-config ", bf.str(), ": the bf16 floors run on precision=bf16 (the CPU's emulation) or "
                "backend=cuda (the bf16 GPU path)");
  }
  if (opt.floor_classes != "both" && opt.floor_classes != "bf16" && opt.floor_classes != "fp32")
    input_error("golden: --floor-classes ", opt.floor_classes, ": expected both, bf16 or fp32");
  if (r.backend == BackendKind::cpu && !gpu_floors && (opt.verify_layers != "all" || opt.verify_positions != 4))
    input_error("golden: --verify-layers and --verify-positions check what runs on the GPU (--config "
                "backend=cuda,precision=ref, --floors-config backend=cuda) against the CPU");
  if (gpu_floors && opt.floors && (opt.verify_layers == "none" || opt.verify_positions == 0))
    input_error("golden: --floors-config backend=cuda needs the CPU spot check (--verify-layers, --verify-positions)");
  if (opt.verify_positions < 0 || opt.verify_positions > 4096)
    input_error("golden: --verify-positions must be in [0, 4096], found ", opt.verify_positions);
  if (!r.faults.empty() && (opt.verify_layers == "none" || opt.verify_positions == 0))
    input_error("golden: a reference with faults is only run to test the spot check; --verify-layers none or "
                "--verify-positions 0 would let it write a wrong record");
}

// One case of the record, written as TMP/ID.safetensors: 1. the continuation, through the
// generation loop; 2. one teacher-forced prefill over prompt + continuation (top-K, stored layers,
// MTP top-K); 3. the noise floors of each class against it. Returns the case's manifest entry.
// Progress inside a case on a large model (stderr): once the case has run 10 s, a line per phase and,
// at most every 10 s, one on the generation steps with the time left.
struct CaseProgress {
  using clock = std::chrono::steady_clock;
  bool on = false;
  std::string what;
  int total = 0, steps = 0;
  clock::time_point t0 = clock::now(), last = clock::now();
  double since(clock::time_point t) const { return std::chrono::duration<double>(clock::now() - t).count(); }
  void step() {
    ++steps;
    if (!on || since(t0) < 10 || since(last) < 10) return;
    last = clock::now();
    const double per = since(t0) / steps;
    std::fprintf(stderr, "golden: %s: generation step %d of at most %d, %.1f s per step, about %s left of it\n", what.c_str(),
                 steps, total, per, format_duration(per * std::max(total - steps, 0)).c_str());
  }
  // Inside a pass (a long prefill): the layer it has reached, at most every 10 s.
  void layer(int l, int L) {
    if (!on || since(t0) < 10 || since(last) < 10) return;
    last = clock::now();
    std::fprintf(stderr, "golden: %s: step %d, layer %d of %d (%s into it)\n", what.c_str(), steps + 1, l + 1, L,
                 format_duration(since(t0)).c_str());
  }
  void phase(const std::string& p) const {
    if (on && since(t0) >= 10) std::fprintf(stderr, "golden: %s: %s (%s into the case)\n", what.c_str(), p.c_str(), format_duration(since(t0)).c_str());
  }
};

// The spot checks' inputs: the record's own input of each checked layer (the embedding, or the
// previous layer's output) at the first Nv positions of the run `g` that made it.
LayerInputs checked_layer_inputs(const GoldenRun& run, const ForcedRun& g, int64_t Nv) {
  LayerInputs in;
  in.positions = Nv;
  in.hidden = run.H;
  in.in.resize(static_cast<size_t>(run.L));
  for (int l = 0; l < run.L; ++l)
    if (run.verify_layers[static_cast<size_t>(l)]) {
      const std::vector<float>& src = l == 0 ? g.embed : g.l_out[static_cast<size_t>(l - 1)];
      in.in[static_cast<size_t>(l)].assign(src.begin(), src.begin() + in.positions * run.H);
    }
  return in;
}

// A teacher-forced prefill of those positions that recomputes each checked layer from `in`.
ForcedOptions checked_run(const GoldenRun& run, const LayerInputs& in, bool logits) {
  ForcedOptions fo;
  fo.run_positions = in.positions;
  fo.capture_positions = in.positions;
  fo.capture_layers = run.verify_layers;
  fo.inject = &in;
  fo.logits = logits;
  return fo;
}

// The CPU spot check of one case of a reference made on the GPU (GoldenOptions::verify_layers): the
// CPU reference runs the first Nv positions with the GPU's input of every checked layer injected,
// so each checked layer's output is the CPU's from the GPU's input (isolated: errors do not carry
// from layer to layer), and the logits that follow the last layer. Each layer's rel_l2 against the
// GPU's must be within kFallbackRelL2 and each position's KLD (CPU over GPU, the real vocabulary)
// within kFallbackKld. The decode path, which made the continuation, is checked where that costs
// nothing: under plain greedy sampling each generated token must be the top-1 of the record's own
// teacher-forced logits, or within kGreedyTieNats of it. Else Error(bad) naming the worst.
// Returns the case's verification entry.
json spot_check(GoldenRun& run, const Case& c, const SamplingParams& sp, const std::vector<int32_t>& seq,
                size_t prompt_len, const GenerateResult& gen, const ForcedRun& g, int64_t Nv) {
  const std::string& case_id = c.id;
  const int64_t H = run.H, V = run.V;
  const LayerInputs in = checked_layer_inputs(run, g, Nv);
  const ForcedRun cpu = forced_run(*run.verify_eng, seq, checked_run(run, in, true));
  double worst_rel = 0, worst_kld = 0;
  int worst_layer = -1;
  int64_t worst_pos = -1;
  json layers = json::array();
  for (int l = 0; l < run.L; ++l) {
    if (!run.verify_layers[static_cast<size_t>(l)]) continue;
    const std::vector<float>& gpu = g.l_out[static_cast<size_t>(l)];
    const std::span<const float> a(gpu.data(), static_cast<size_t>(Nv * H));
    const metrics::TensorError e = metrics::tensor_error(a, std::span<const float>(cpu.l_out[static_cast<size_t>(l)]));
    const double rel = std::isfinite(e.rel_l2) && e.nonfinite == 0 ? e.rel_l2 : INFINITY;
    layers.push_back({{"layer", l}, {"rel_l2", std::isfinite(rel) ? json(rel) : json(nullptr)}});
    if (!(rel <= worst_rel)) {
      worst_rel = rel;
      worst_layer = l;
    }
  }
  // the logits: KL(CPU || GPU) over the real vocabulary, in double
  for (int64_t t = 0; t < Nv; ++t) {
    const float* p = cpu.logits.data() + t * V;
    const float* q = g.logits.data() + t * V;
    auto lse = [&](const float* x) {
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < V; ++j)
        if (!(run.maskp && run.mask[static_cast<size_t>(j)])) m = std::max(m, double(x[j]));
      for (int64_t j = 0; j < V; ++j)
        if (!(run.maskp && run.mask[static_cast<size_t>(j)])) sum += std::exp(double(x[j]) - m);
      return m + std::log(sum);
    };
    const double lp = lse(p), lq = lse(q);
    double kld = 0;
    for (int64_t j = 0; j < V; ++j) {
      if (run.maskp && run.mask[static_cast<size_t>(j)]) continue;
      const double a = double(p[j]) - lp, b = double(q[j]) - lq;
      kld += std::exp(a) * (a - b);
    }
    if (!std::isfinite(kld)) kld = INFINITY;
    if (!(kld <= worst_kld)) {
      worst_kld = kld;
      worst_pos = t;
    }
  }
  // the generating path: each step's top-K against the record's teacher-forced logits there
  double worst_gen_kld = 0;
  int64_t worst_gen_step = -1;
  for (size_t s = 0; s < gen.step_topk.size() && prompt_len + s <= seq.size(); ++s) {
    const float* row = g.logits.data() + static_cast<int64_t>(prompt_len - 1 + s) * V;
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < V; ++j)
      if (!(run.maskp && run.mask[static_cast<size_t>(j)])) m = std::max(m, double(row[j]));
    for (int64_t j = 0; j < V; ++j)
      if (!(run.maskp && run.mask[static_cast<size_t>(j)])) sum += std::exp(double(row[j]) - m);
    const double lse = m + std::log(sum);
    const StepTopK& t = gen.step_topk[s];
    double kld = 0;
    for (size_t i = 0; i < t.ids.size(); ++i) kld += std::exp(t.logprobs[i]) * (t.logprobs[i] - (double(row[t.ids[i]]) - lse));
    if (!std::isfinite(kld)) kld = INFINITY;
    if (!(kld <= worst_gen_kld)) {
      worst_gen_kld = kld;
      worst_gen_step = static_cast<int64_t>(s);
    }
  }
  if (!(worst_gen_kld <= kFallbackKld))
    throw Error(ExitCode::bad,
                cat("golden: the CPU spot check refused the reference ", run.rc.str(), " (", run.be->name(), "): case '", case_id,
                    "': the logits its continuation was generated from (step ", worst_gen_step, ", position ",
                    prompt_len - 1 + static_cast<size_t>(worst_gen_step), ") differ from the record's teacher-forced logits "
                    "there by KLD ", worst_gen_kld, " nats (top-", kSpotCheckTopK, "), over the fp32 limit ", kFallbackKld,
                    ": the decode path disagrees with the prefill; no record written"));
  // the continuation under plain greedy sampling: the top-1 of the record's own logits
  const bool greedy = sp.temperature == 0 && sp.repetition_penalty == 1 && sp.presence_penalty == 0;
  int64_t greedy_checked = 0;
  for (size_t i = prompt_len; greedy && i < seq.size(); ++i, ++greedy_checked) {
    const float* row = g.logits.data() + static_cast<int64_t>(i - 1) * V;
    int64_t top = -1;
    for (int64_t j = 0; j < V; ++j)
      if (!(run.maskp && run.mask[static_cast<size_t>(j)]) && (top < 0 || row[j] > row[top])) top = j;
    const double gap = double(row[top]) - double(row[seq[i]]);
    if (!(gap <= kGreedyTieNats))
      throw Error(ExitCode::bad,
                  cat("golden: the CPU spot check refused the reference ", run.rc.str(), " (", run.be->name(), "): case '",
                      case_id, "' is greedy, but its generated token ", i - prompt_len, " (id ", seq[i], ") is not the top-1 of "
                      "the record's own teacher-forced logits at position ", i - 1, " (id ", top, ", ", gap,
                      " nats higher; limit ", kGreedyTieNats, "): the decode path disagrees with the prefill; no record written"));
  }
  const std::string what = cat("golden: the CPU spot check refused the reference ", run.rc.str(), " (", run.be->name(), "): case '",
                               case_id, "', positions 0-", Nv - 1, ": ");
  if (!(worst_rel <= kFallbackRelL2))
    throw Error(ExitCode::bad, cat(what, "layer ", worst_layer, " from the record's own input differs from the CPU reference by rel_l2 ",
                                   worst_rel, ", over the fp32 limit ", kFallbackRelL2, "; no record written"));
  if (!(worst_kld <= kFallbackKld))
    throw Error(ExitCode::bad, cat(what, "the logits at position ", worst_pos, " differ from the CPU reference's by KLD ", worst_kld,
                                   " nats, over the fp32 limit ", kFallbackKld, "; no record written"));
  return {{"by", run.verify_be->name()},
          {"positions", Nv},
          {"worst_rel_l2", worst_rel},
          {"worst_layer", worst_layer},
          {"worst_kld", worst_kld},
          {"greedy_tokens_checked", greedy_checked},
          {"generation_steps_checked", gen.step_topk.size()},
          {"worst_generation_kld", worst_gen_kld},
          {"layers", std::move(layers)}};
}

// The CPU spot check of bf16 floors made on the GPU (GoldenOptions::bf16_floors backend=cuda): the
// GPU's bf16 path and the CPU's emulation of its storage (precision=bf16) each recompute the checked
// layers from the record's own inputs at the first Nv positions; the GPU's output must be no farther
// from the emulation's than kFloorCheckK times the emulation's own distance from the record (both
// round to bf16 at the same points; they differ where fp32 sums in other orders round to another
// bf16 neighbour). Else Error(bad). Returns the case's entry.
json spot_check_floors(GoldenRun& run, const std::string& case_id, const std::vector<int32_t>& seq, const ForcedRun& g,
                       int64_t Nv) {
  const int64_t H = run.H;
  const LayerInputs in = checked_layer_inputs(run, g, Nv);
  const ForcedOptions fo = checked_run(run, in, false);
  const ForcedRun gpu = forced_run(*run.floor_eng[0], seq, fo);
  const ForcedRun emu = forced_run(*run.floor_check_eng, seq, fo);
  double worst = 0;
  int worst_layer = -1;
  json layers = json::array();
  for (int l = 0; l < run.L; ++l) {
    if (!run.verify_layers[static_cast<size_t>(l)]) continue;
    const std::span<const float> rec(g.l_out[static_cast<size_t>(l)].data(), static_cast<size_t>(Nv * H));
    const double d = metrics::tensor_error(gpu.l_out[static_cast<size_t>(l)], emu.l_out[static_cast<size_t>(l)]).rel_l2;
    const double e = metrics::tensor_error(emu.l_out[static_cast<size_t>(l)], rec).rel_l2;
    const double ratio = e > 0 ? d / e : (d > 0 ? INFINITY : 0.0);
    layers.push_back({{"layer", l}, {"gpu_vs_emulation", metrics::json_number(d)}, {"emulation_vs_record", metrics::json_number(e)}});
    if (!(d <= kFloorCheckK * e + kFloorCheckEps))
      throw Error(ExitCode::bad,
                  cat("golden: the CPU spot check refused the bf16 noise floors made on ", run.floor_rc[0].str(), " (",
                      run.floor_be[0]->name(), "): case '", case_id, "', layer ", l, " at positions 0-", Nv - 1,
                      ": the GPU's bf16 output differs from the CPU's emulation of GPU storage by rel_l2 ", d, ", over ",
                      kFloorCheckK, " x the emulation's own error ", e, "; no record written"));
    if (!(ratio <= worst)) {
      worst = ratio;
      worst_layer = l;
    }
  }
  return {{"by", run.floor_check_be->name()}, {"positions", Nv}, {"worst_ratio", metrics::json_number(worst)},
          {"worst_layer", worst_layer}, {"layers", std::move(layers)}};
}

json step_topk_json(const std::vector<StepTopK>& v) {
  json a = json::array();
  for (const StepTopK& t : v) a.push_back({t.ids, t.logprobs});
  return a;
}

// The generation settings of a case of the record (first_case: the sampler's case index of prompt 0).
GenerateOptions golden_generate_options(const GoldenRun& run, const Case& c, size_t first_case) {
  GenerateOptions go;
  go.max_new_tokens = c.max_new_tokens;
  if (!c.ignore_stop) go.stop_ids = run.stops;
  go.sampling = case_sampling(c, SamplingParams{});
  go.vocab_mask = run.maskp;
  go.first_case = static_cast<uint32_t>(first_case);
  if (run.verify) go.keep_topk = kSpotCheckTopK;  // the spot check of the generating path
  return go;
}

// --batch all: the continuations of cases [b, e) of one batch group, generated together (one pass
// over the weights per step for all of them).
std::vector<GenerateResult> generate_batch(GoldenRun& run, const Suite& suite, size_t b, size_t e, bool progress) {
  const Case c0 = golden_case(run.opt, suite.cases[b]);
  GenerateOptions go = golden_generate_options(run, c0, b);
  go.check_finite = true;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = b; i < e; ++i) prompts.push_back(encode_case(golden_case(run.opt, suite.cases[i]), run.tok, run.cfg).ids);
  if (go.max_new_tokens <= 0) return std::vector<GenerateResult>(e - b);
  CaseProgress cp{progress, cat("cases ", b + 1, "-", e), go.max_new_tokens};
  Trace watch;
  watch.observer = [&](const TraceEvent& ev, Tensor&, Backend&) {
    if (ev.step == Step::logits && !ev.mtp) cp.step();
    if (ev.step == Step::l_out && !ev.mtp) cp.layer(ev.layer, run.L);
  };
  return generate(*run.eng, prompts, go, &watch);
}

json record_case(GoldenRun& run, const Case& suite_case, size_t ci, const fs::path& tmp, json& jfiles, GoldenSummary& sum,
                 std::FILE* progress, const GenerateResult* pre = nullptr) {
  const int64_t H = run.H, V = run.V;
  const Case c = golden_case(run.opt, suite_case);
  const CasePrompt cp = encode_case(c, run.tok, run.cfg);
  const SamplingParams sp = case_sampling(c, SamplingParams{});
  // 1. the continuation (made already with the case's batch group under --batch all)
  const GenerateOptions go = golden_generate_options(run, c, ci);
  bool nonfinite = pre && pre->nonfinite_logits;
  Trace watch;
  CaseProgress prog{progress != nullptr, cat("case '", c.id, "'"), c.max_new_tokens};
  watch.logits_only = !prog.on;  // (the layer events only to say how far a long pass has got)
  watch.observer = [&](const TraceEvent& ev, Tensor& t, Backend& b) {
    if (ev.step == Step::l_out && !ev.mtp) prog.layer(ev.layer, run.L);
    if (ev.step == Step::logits && !ev.mtp) prog.step();
    if (ev.step != Step::logits || nonfinite) return;
    std::vector<float> v = b.to_host_f32(t);
    for (size_t j = 0; j < v.size(); ++j)
      if (!std::isfinite(v[j]) && !(v[j] < 0 && run.maskp && run.mask[j % V])) nonfinite = true;
  };
  GenerateResult gen;
  if (pre) gen = *pre;
  else if (c.max_new_tokens > 0) gen = generate(*run.eng, {cp.ids}, go, &watch).at(0);
  std::vector<int32_t> seq = cp.ids;
  seq.insert(seq.end(), gen.tokens.begin(), gen.tokens.end());
  const int64_t T = static_cast<int64_t>(seq.size());
  const int64_t P = run.n_stored == 0 ? 0 : golden_positions(run.opt.positions, T, (run.n_stored + 1) * H * 4);

  // 2. the teacher-forced prefill (with the spot check, also the layers and positions it checks)
  const int64_t Nv = run.verify || run.verify_floors ? std::min<int64_t>(run.opt.verify_positions, T) : 0;
  ForcedOptions fo;
  fo.capture_positions = std::max(P, Nv);
  fo.capture_layers = run.stored;
  for (int l = 0; l < run.L && Nv > 0; ++l)
    if (run.verify_layers[static_cast<size_t>(l)]) {
      fo.capture_layers[static_cast<size_t>(l)] = true;
      if (l > 0) fo.capture_layers[static_cast<size_t>(l - 1)] = true;  // its input
    }
  fo.mtp = true;
  // note: no vocab_mask: the padding rows keep their logits so that lse_pad (from lse to what other
  // engines normalise by) can be computed; topk_block masks them for the top-K and lse (same values).
  prog.phase(cat("teacher-forced prefill of ", T, " tokens"));
  ForcedRun g = forced_run(*run.eng, seq, fo);
  json jverify, jfloor_check;
  if (Nv > 0 && run.verify) {
    prog.phase(cat("CPU spot check of ", Nv, " positions"));
    jverify = spot_check(run, c, sp, seq, cp.ids.size(), gen, g, Nv);
  }
  if (Nv > 0 && run.verify_floors) {
    prog.phase(cat("CPU spot check of the GPU's bf16 floor run at ", Nv, " positions"));
    jfloor_check = spot_check_floors(run, c.id, seq, g, Nv);
  }
  // from here on, what the record keeps: the stored layers at the first P positions
  g.P = P;
  g.embed.resize(static_cast<size_t>(P * H));
  for (int l = 0; l < run.L; ++l) {
    std::vector<float>& v = g.l_out[static_cast<size_t>(l)];
    if (!run.stored[static_cast<size_t>(l)] || P == 0) v.clear();
    else v.resize(static_cast<size_t>(P * H));
  }

  SafetensorsWriter w;
  w.set_metadata("format", kGoldenFormat);
  w.set_metadata("case", c.id);
  w.set_metadata("model_fingerprint", run.model.fingerprint);
  add_i32(w, "prompt", cp.ids, {static_cast<int64_t>(cp.ids.size())});
  add_i32(w, "continuation", gen.tokens, {static_cast<int64_t>(gen.tokens.size())});
  auto topk_checked = [&](const std::vector<float>& logits, int64_t rows, bool mtp) {
    TopKBlock b = topk_block(logits, rows, V, run.maskp, run.K);
    if (b.undefined_row >= 0)
      input_error("golden: case '", c.id, "': the reference's ", mtp ? "MTP " : "", "logits at position ",
                  b.undefined_row, " are not a distribution (NaN or +inf); the checkpoint is broken "
                  "(try `degenbisect run --check-weights`)");
    return b;
  };
  const TopKBlock main_k = topk_checked(g.logits, T, false);
  add_i32(w, "topk_ids", main_k.ids, {T, run.K});
  add_f32(w, "topk_logprobs", main_k.logprobs, {T, run.K});
  add_f32(w, "lse", main_k.lse, {T});
  add_f32(w, "lse_pad", main_k.lse_pad, {T});
  if (!g.embed.empty()) add_f32(w, "embed", g.embed, {P, H});
  for (int l = 0; l < run.L; ++l)
    if (!g.l_out[l].empty()) add_f32(w, trace_name(Step::l_out, l), g.l_out[l], {P, H});
  add_f32(w, "l_out_norm", g.l_out_norm, {run.L, T});
  TopKBlock mtp_k;
  if (!g.mtp_logits.empty()) {
    mtp_k = topk_checked(g.mtp_logits, T - 1, true);
    add_i32(w, "mtp_topk_ids", mtp_k.ids, {T - 1, run.K});
    add_f32(w, "mtp_topk_logprobs", mtp_k.logprobs, {T - 1, run.K});
    add_f32(w, "mtp_lse", mtp_k.lse, {T - 1});
    add_f32(w, "mtp_lse_pad", mtp_k.lse_pad, {T - 1});
  }

  // 3. noise floors: each class's run against this record (isolated, then teacher-forced)
  json jfloors = json::object();
  for (int fc = 0; fc < 2; ++fc) {
    const char* cn = floor_class_name(static_cast<FloorClass>(fc));
    if (!run.floor_eng[fc]) {
      jfloors[cn] = nullptr;
      continue;
    }
    prog.phase(cat(cn, " noise floors"));
    jfloors[cn] = measure_floors(*run.floor_eng[fc], seq, g, run.stored, main_k, mtp_k, run.maskp);
  }

  const std::string file = c.id + ".safetensors";
  w.write(tmp / file);
  const std::string bytes = read_file(tmp / file);
  jfiles[file] = {{"bytes", bytes.size()}, {"sha256", sha256_hex(bytes)}};
  sum.bytes += static_cast<int64_t>(bytes.size());

  metrics::ContentOptions content;
  if (run.tok && cp.opened_think) content.think_end = run.tok->token_id("</think>");
  content.stop_ids = run.stops;
  metrics::Degeneration dg = metrics::degeneration(gen.tokens, metrics::DegenRules{}, nonfinite, content);
  json jc = {{"id", c.id},
             {"index", ci},
             {"input", case_input_name(c.input)},
             {"opened_think", cp.opened_think},
             {"max_new_tokens", c.max_new_tokens},
             {"ignore_stop", c.ignore_stop},
             {"sampling", sampling_str(sp)},
             {"prompt_tokens", cp.ids.size()},
             {"generated_tokens", gen.tokens.size()},
             {"stop_reason", c.max_new_tokens > 0 ? stop_reason_name(gen.reason) : "no budget"},
             {"nonfinite_logits", nonfinite},
             {"positions_stored", P},
             {"file", file},
             {"degeneration", dg.to_json()},
             {"floors", jfloors}};
  if (!jverify.is_null()) jc["verification"] = jverify;
  if (!jfloor_check.is_null()) jc["floor_check"] = jfloor_check;
  sum.lines.push_back(cat("case ", c.id, ": ", cp.ids.size(), " prompt + ", gen.tokens.size(), " generated tokens (",
                          jc["stop_reason"].get<std::string>(), "), ", P, " of ", T, " positions stored, ",
                          (bytes.size() + 512) / 1024, " KiB", dg.degenerate ? cat(", degenerate (", *dg.rule, ")") : ""));
  if (progress) std::fprintf(progress, "golden: %s\n", sum.lines.back().c_str());
  return jc;
}

// The record's manifest.json: what it was made with (tool, command, model, tokenizer, suite,
// reference settings, noise floors), its cases and the checksums of its files.
json golden_manifest(const GoldenRun& run, const Suite& suite, const GoldenSummary& sum, json jcases, json jfiles) {
  const GoldenOptions& opt = run.opt;
  std::vector<int> layer_list;
  for (int l = 0; l < run.L; ++l)
    if (run.stored[static_cast<size_t>(l)]) layer_list.push_back(l);
  // A reference made on the GPU: what the CPU spot check checked and the worst it found.
  json verification = nullptr;
  if (run.rc.backend != BackendKind::cpu) {
    if (!run.verify) {
      verification = {{"status", "not checked"}, {"reason", cat("--verify-layers ", opt.verify_layers, " --verify-positions ", opt.verify_positions)}};
    } else {
      std::vector<int> vl;
      for (int l = 0; l < run.L; ++l)
        if (run.verify_layers[static_cast<size_t>(l)]) vl.push_back(l);
      double rel = 0, kld = 0, gen_kld = 0;
      int cases = 0;
      for (const json& jc : jcases)
        if (jc.contains("verification")) {
          ++cases;
          rel = std::max(rel, jc["verification"].at("worst_rel_l2").get<double>());
          kld = std::max(kld, jc["verification"].at("worst_kld").get<double>());
          gen_kld = std::max(gen_kld, jc["verification"].at("worst_generation_kld").get<double>());
        }
      verification = {{"status", "passed"},
                      {"by", run.verify_be->name()},
                      {"what", "isolated output of each checked layer from the record's own input, and the logits, at "
                               "the first positions of every case, recomputed by the CPU reference"},
                      {"layers", vl},
                      {"positions", opt.verify_positions},
                      {"cases", cases},
                      {"limit_rel_l2", kFallbackRelL2},
                      {"limit_kld", kFallbackKld},
                      {"worst_rel_l2", rel},
                      {"worst_kld", kld},
                      {"worst_generation_kld", gen_kld},
                      {"generation", cat("the logits each continuation was generated from against the record's teacher-forced "
                                         "ones (top-", kSpotCheckTopK, " KLD, same limit), and greedy continuations against "
                                         "their top-1")}};
    }
  }
  json m = {
      {"format", kGoldenFormat},
      {"format_version", kGoldenFormatVersion},
      {"tool_version", kVersion},
      {"command", opt.command},
      {"model",
       {{"fingerprint", run.model.fingerprint},
        {"weights_sample", weights_sample_digest(*run.model.checkpoint)},
        {"tensor_digests", tensor_digests(*run.model.checkpoint)},
        {"name", run.model.dir.filename().string()},
        {"model_type", run.cfg.model_type},
        {"num_hidden_layers", run.L},
        {"hidden_size", run.H},
        {"vocab_size", run.V},
        {"has_mtp", run.eng->has_mtp()}}},
      {"tokenizer", {{"fingerprint", run.tok ? json(run.tok->fingerprint()) : json(nullptr)}}},
      {"suite", {{"name", suite.name}, {"sha256", suite.sha256}, {"cases", suite.cases.size()}}},
      {"settings",
       {{"precision", opt.precision == Precision::fp64 ? "fp64" : "fp32"},
        {"reference_config", run.rc.str()},
        {"backend", run.be->name()},
        {"gdn", gdn_algo_name(engine_options(run.rc).gdn)},
        {"gen_tokens", opt.gen_tokens ? json(*opt.gen_tokens) : json(nullptr)},
        {"layers", layer_list},
        {"positions", opt.positions},
        {"topk", run.K}}},
      {"noise_floors",
       {{"status", sum.floors[0] && sum.floors[1] ? "measured" : sum.floors[0] || sum.floors[1] ? "partial" : "absent"},
        {"reason", sum.floors[0] ? json(nullptr) : json(sum.floors_reason[0])},
        {"metric", "rel_l2 of the isolated layer output (metrics.md §1, §3); kld: mean kld_topk, teacher-forced"},
        {"classes",
         {{"bf16", {{"config", run.floor_rc[0].str()}, {"measured", sum.floors[0]},
                    {"reason", sum.floors[0] ? json(nullptr) : json(sum.floors_reason[0])},
                    {"judges", "precision=bf16, backend=cuda and any narrow storage or attention toggle"}}},
          {"fp32", {{"config", run.floor_rc[1].str()}, {"measured", sum.floors[1]},
                    {"reason", sum.floors[1] ? json(nullptr) : json(sum.floors_reason[1])},
                    {"judges", "the CPU at precision=ref or fp64 without storage or attention toggles"}}}}}}},
      {"cases", std::move(jcases)},
      {"files", std::move(jfiles)}};
  if (!verification.is_null()) m["settings"]["verification"] = std::move(verification);
  if (run.verify_floors && sum.floors[0]) {
    double worst = 0;
    int cases = 0;
    for (const json& jc : m["cases"])
      if (jc.contains("floor_check")) {
        ++cases;
        if (jc["floor_check"]["worst_ratio"].is_number()) worst = std::max(worst, jc["floor_check"]["worst_ratio"].get<double>());
      }
    m["noise_floors"]["classes"]["bf16"]["spot_check"] = {
        {"status", "passed"}, {"by", run.floor_check_be->name()}, {"cases", cases}, {"positions", opt.verify_positions},
        {"what", "each checked layer from the record's own input on the GPU's bf16 path against the CPU's emulation of "
                 "GPU storage, within k x the emulation's own error"},
        {"k", kFloorCheckK}, {"worst_ratio", worst}};
  }
  return m;
}

// Test hook: DEGEN_TEST_GOLDEN_KILL=<point> kills this process with SIGKILL at that point ("case-N":
// case N (0-based) finished and its resume entry written; "before-swap": the new record complete
// beside the old one; "after-swap": swapped, the old one not yet removed), so tests can check what a
// kill leaves behind.
void test_kill_point(const char* point) {
  const char* want = std::getenv("DEGEN_TEST_GOLDEN_KILL");
  if (want && std::strcmp(want, point) == 0) ::raise(SIGKILL);
}

// The PID in a temporary's name ".<record>.tmp-PID" / ".<record>.old-PID", or -1.
pid_t temporary_pid(const std::string& entry, const std::string& prefix) {
  if (entry.rfind(prefix, 0) != 0 || entry.size() == prefix.size() || entry.size() - prefix.size() > 9) return -1;
  const std::string digits = entry.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  return static_cast<pid_t>(std::stol(digits));
}

// Leftovers of earlier writers of `out` that died (the caller holds the record's lock, so no live
// writer of it exists; a PID that is still alive is left alone all the same): a record moved aside
// by a writer killed before it put the new one in place is put back when `out` is missing; every
// other temporary folder is removed.
void clean_stale_temporaries(const fs::path& parent, const fs::path& out, std::FILE* progress) {
  const std::string name = out.filename().string();
  const std::string tmp_prefix = cat(".", name, ".tmp-"), old_prefix = cat(".", name, ".old-");
  std::vector<fs::path> tmps, olds;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string entry = e.path().filename().string();
    pid_t pid = temporary_pid(entry, tmp_prefix);
    const bool is_old = pid < 0 && (pid = temporary_pid(entry, old_prefix)) >= 0;
    if (pid < 0 || (pid != ::getpid() && process_alive(pid))) continue;
    (is_old ? olds : tmps).push_back(e.path());
  }
  for (const auto& old : olds) {
    if (!fs::exists(out) && fs::exists(old / "manifest.json")) {
      fs::rename(old, out);
      if (progress) std::fprintf(progress, "golden: put back %s, left aside by an interrupted --force (from %s)\n",
                                 out.string().c_str(), old.filename().string().c_str());
    } else {
      fs::remove_all(old);
    }
  }
  for (const auto& t : tmps) fs::remove_all(t);
}

// Puts the finished record `tmp` at `out` (an existing record or empty folder, or nothing) so that
// `out` is never missing: on Linux one renameat2(RENAME_EXCHANGE) swaps the two folders, then the
// old record (now at `tmp`) is removed; a kill at any point leaves `out` whole (old or new) and a
// temporary that the next run removes. Where the filesystem cannot exchange, the old record is moved
// aside first; a kill between the two renames leaves it at ".<name>.old-PID", which the next golden
// run on `out` puts back (clean_stale_temporaries).
void replace_record(const fs::path& tmp, const fs::path& out, const fs::path& parent) {
  if (!fs::exists(out)) {
    fs::rename(tmp, out);
    return;
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) == 0) {
    test_kill_point("after-swap");
    fs::remove_all(tmp);
    return;
  }
  const int err = errno;
  if (err != EINVAL && err != ENOSYS && err != EOPNOTSUPP)
    input_error("golden: cannot put the new record in place of ", out.string(), ": ", std::strerror(err));
  const fs::path old = parent / cat(".", out.filename().string(), ".old-", ::getpid());
  fs::remove_all(old);
  fs::rename(out, old);
  test_kill_point("after-swap");
  fs::rename(tmp, out);
  fs::remove_all(old);
}

// ---- resume state (the folders .NAME.partial and .NAME.resume of an interrupted run) ----
//
// Rule: the resume state is checked whole before anything in it is used. Every file the run writes
// there carries a checksum of its own content (SHA-256 of the canonical compact dump without the
// checksum field, as the manifest's) and the SHA-256 of the run's key (the settings that make a
// resume valid), and each case entry names its case, index and data file; the data file is checked
// against the entry. The tool writes each file whole (write_file_atomic), so an interruption never
// leaves one half-written: a file that fails a check was edited, damaged or copied from another run.
// A tampered or foreign entry, a data file that does not match its entry, or a file the run does
// not write (which would end up in the record) is refused (InputError, 128) naming the file and
// what to remove; nothing is deleted and nothing is computed, so nothing valid is lost and nothing
// tampered is sealed into a record. resume.json is the exception: it only says which settings made
// the partial record (a key with other settings discards it, as before), and every entry is bound to
// the key by itself, so an unreadable or edited resume.json is rewritten for this run with a warning
// and the entries are still checked one by one (a rerun is never blocked by it).
constexpr const char* kResumeChecksumKey = "resume_sha256";
// Bumped when the resume files change shape; part of the key, so an older partial record is
// discarded as "made with other settings" rather than refused.
constexpr int kResumeFormat = 2;

std::string checksum_without(const json& j, const char* field) {
  json m = j;
  if (m.is_object()) m.erase(field);
  return sha256_hex(json::parse(m.dump()).dump());
}

json seal_resume(json body, const std::string& key_sha) {
  body["key_sha256"] = key_sha;
  body[kResumeChecksumKey] = checksum_without(body, kResumeChecksumKey);
  return body;
}

[[noreturn]] void resume_refused(const fs::path& out, const fs::path& file, const std::string& what, const std::string& remedy) {
  input_error("golden: the resume state of ", out.string(), " is not what this tool wrote: ", file.string(), ": ", what,
              " (edited, damaged or copied from another run; an interruption never leaves this). Nothing was computed "
              "or removed. ", remedy, ", or rerun with --restart to discard the whole partial record");
}

// A resume file that must be sealed by this run's key: parsed, its checksum and key checked.
json open_resume(const fs::path& out, const fs::path& file, const std::string& key_sha, const std::string& remedy) {
  json j;
  try {
    j = parse_json(read_file(file, kMaxInputFileBytes), file.string(), false);
  } catch (const Error& e) {
    resume_refused(out, file, cat("unreadable (", e.what(), ")"), remedy);
  }
  if (j.is_discarded() || !j.is_object()) resume_refused(out, file, "not a JSON object", remedy);
  const json* sum = j.contains(kResumeChecksumKey) ? &j[kResumeChecksumKey] : nullptr;
  if (!sum || !sum->is_string()) resume_refused(out, file, cat("no ", kResumeChecksumKey, " checksum"), remedy);
  const std::string got = checksum_without(j, kResumeChecksumKey);
  if (got != sum->get<std::string>())
    resume_refused(out, file, cat("its content does not match its own checksum (", kResumeChecksumKey, " ",
                                  json_excerpt(*sum, 70), ", its content hashes to ", got, ")"), remedy);
  if (!j.contains("key_sha256") || j["key_sha256"] != key_sha)
    resume_refused(out, file, cat("it was made for another run (key_sha256 ",
                                  j.contains("key_sha256") ? json_excerpt(j["key_sha256"], 70) : std::string("missing"),
                                  ", this run's settings hash to ", key_sha, ")"), remedy);
  return j;
}

// The name of a temporary that write_atomic leaves when it is killed: ".NAME.tmp-PID-N".
bool atomic_write_leftover(const std::string& name) {
  const size_t at = name.rfind(".tmp-");
  if (name.empty() || name[0] != '.' || at == std::string::npos || at == 0) return false;
  const std::string tail = name.substr(at + 5);
  return !tail.empty() && std::all_of(tail.begin(), tail.end(), [](char c) { return (c >= '0' && c <= '9') || c == '-'; });
}

// Every entry of `dir` is one of `allowed` (or a leftover of an interrupted atomic write, removed);
// anything else would be sealed into the record (partial) or is not ours (resume): refused.
void check_resume_folder(const fs::path& out, const fs::path& dir, const std::set<std::string>& allowed, const char* expected) {
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e.path());
  std::sort(entries.begin(), entries.end());
  for (const fs::path& p : entries) {
    const std::string name = p.filename().string();
    if (atomic_write_leftover(name) && fs::is_regular_file(fs::symlink_status(p))) {
      fs::remove(p);
      continue;
    }
    if (!allowed.count(name) || !fs::is_regular_file(fs::symlink_status(p)))
      resume_refused(out, p, cat("not a file the run writes there (expected ", expected, ")"),
                     cat("Remove it (rm -r ", p.string(), ")"));
  }
}

// A finished case of the resume state, checked whole: its entry (checksum, key, case id, index,
// data file name, field types) and its data file (size, SHA-256). nullopt when the case has no entry
// (not finished); InputError otherwise.
std::optional<json> kept_case(const fs::path& out, const fs::path& partial, const fs::path& resume, const std::string& id,
                              size_t index, const std::string& key_sha) {
  const fs::path entry_file = resume / (id + ".case.json");
  if (!fs::exists(fs::symlink_status(entry_file))) return std::nullopt;
  const std::string file = id + ".safetensors";
  const std::string remedy = cat("Remove ", entry_file.string(), " and ", (partial / file).string(),
                                 " to have case '", id, "' computed again");
  const json e = open_resume(out, entry_file, key_sha, remedy);
  auto bad = [&](const std::string& what) { resume_refused(out, entry_file, what, remedy); };
  try {
    const json& jc = e.at("entry");
    if (jc.at("id") != id) bad(cat("its case id is ", json_excerpt(jc.at("id")), ", expected \"", id, "\""));
    if (!jc.at("index").is_number_unsigned() || jc.at("index").get<uint64_t>() != index)
      bad(cat("its case index is ", json_excerpt(jc.at("index")), ", expected ", index, " (the case's place in the suite)"));
    if (e.at("file") != file || jc.at("file") != file)
      bad(cat("its data file is ", json_excerpt(e.at("file")), ", expected \"", file, "\""));
    if (!e.at("bytes").is_number_unsigned() || !e.at("sha256").is_string() || !e.at("line").is_string())
      bad("expected bytes (a count), sha256 and line (strings)");
  } catch (const json::exception&) {
    bad("expected the fields entry (id, index, file), file, bytes, sha256 and line");
  }
  const fs::path data = partial / file;
  if (!fs::is_regular_file(fs::symlink_status(data)))
    resume_refused(out, data, cat("missing, while its entry ", entry_file.string(), " says the case finished"), remedy);
  const std::string bytes = read_file(data);
  const std::string h = sha256_hex(bytes);
  if (bytes.size() != e["bytes"].get<uint64_t>() || h != e["sha256"].get<std::string>())
    resume_refused(out, data, cat("does not match its entry ", entry_file.string(), " (", bytes.size(), " bytes, SHA-256 ", h,
                                  "; expected ", e["bytes"].get<uint64_t>(), " bytes, ", e["sha256"].get<std::string>(), ")"),
                   remedy);
  return e;
}

}  // namespace

GoldenResume open_golden_resume(const fs::path& out, const json& key, const Suite& suite,
                                const std::vector<std::pair<size_t, size_t>>& groups, int64_t vocab, bool restart,
                                std::FILE* progress) {
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  GoldenResume rs;
  rs.partial = parent / cat(".", out.filename().string(), ".partial");
  rs.resume = parent / cat(".", out.filename().string(), ".resume");
  const fs::path& partial = rs.partial;
  const fs::path& resume = rs.resume;
  const fs::path key_file = resume / "resume.json";
  rs.key_sha = sha256_hex(key.dump());
  const std::string& key_sha = rs.key_sha;
  const json sealed_key = seal_resume(key, key_sha);  // resume.json: the key, with its own checksum
  if (fs::exists(partial) || fs::exists(resume)) {
    std::string why, unreadable;
    if (!fs::is_directory(partial) || !fs::is_directory(resume)) {
      why = "incomplete";
    } else if (restart) {
      why = "--restart";
    } else if (fs::exists(fs::symlink_status(key_file))) {
      try {
        json k = parse_json(read_file(key_file, kMaxInputFileBytes), key_file.string(), false);
        if (k.is_discarded() || !k.is_object()) unreadable = "not a JSON object";
        else if (!k.contains(kResumeChecksumKey) || k[kResumeChecksumKey] != checksum_without(k, kResumeChecksumKey))
          unreadable = "its content does not match its own checksum";
        else if (k != sealed_key) why = "made with other settings";
      } catch (const Error& e) {
        unreadable = e.what();
      }
    }
    if (!why.empty()) {
      fs::remove_all(partial);
      fs::remove_all(resume);
      if (progress) std::fprintf(progress, "golden: discarded the partial record of an interrupted run (%s)\n", why.c_str());
    } else if (!unreadable.empty()) {
      // Its entries are bound to the key by themselves: resume.json is rewritten and each is checked.
      std::fprintf(stderr, "golden: warning: %s is damaged or was edited (%s); rewritten for this run's settings; the finished "
                   "cases of the partial record are each checked against their own checksum and this run's key\n",
                   key_file.string().c_str(), unreadable.c_str());
      write_file_atomic(key_file, sealed_key.dump(1) + "\n");
    }
  }
  if (!fs::exists(partial)) {
    fs::create_directories(partial);
    fs::create_directories(resume);
  }
  if (!fs::exists(fs::symlink_status(key_file))) write_file_atomic(key_file, sealed_key.dump(1) + "\n");
  {
    // Only what the run writes: the data files and the manifest (partial), and the key, the case
    // entries and the --batch all generations (resume).
    std::set<std::string> data = {"manifest.json"}, book = {"resume.json"};
    for (const Case& c : suite.cases) {
      data.insert(c.id + ".safetensors");
      book.insert(c.id + ".case.json");
      book.insert(cat("gen-", c.id, ".json"));
    }
    check_resume_folder(out, partial, data, "the data files <case id>.safetensors of the suite's cases and manifest.json");
    check_resume_folder(out, resume, book, "resume.json, <case id>.case.json and gen-<case id>.json of the suite's cases");
  }

  for (size_t ci = 0; ci < suite.cases.size(); ++ci)
    if (std::optional<json> e = kept_case(out, partial, resume, suite.cases[ci].id, ci, key_sha)) rs.cases[ci] = std::move(*e);
  for (const auto& [b, e] : groups) {
    const fs::path gf = resume / cat("gen-", suite.cases[b].id, ".json");
    if (!fs::exists(fs::symlink_status(gf))) continue;
    const std::string remedy = cat("Remove it to have the continuations of cases ", b + 1, "-", e, " generated again");
    const json g = open_resume(out, gf, key_sha, remedy);
    if (!g.contains("results") || !g["results"].is_array() || g["results"].size() != e - b || g.value("first", json()) != b)
      resume_refused(out, gf, cat("expected the ", e - b, " continuations of the batch group of cases ", b + 1, "-", e), remedy);
    std::vector<GenerateResult>& out_gen = rs.generations[b];
    for (size_t i = b; i < e; ++i) {
      GenerateResult r;
      try {
        const json& j = g["results"][i - b];
        r.tokens = j.at("tokens").get<std::vector<int32_t>>();
        const int reason = j.at("reason").get<int>();
        if (reason < 0 || reason > static_cast<int>(StopReason::max_context)) throw std::out_of_range("reason");
        r.reason = static_cast<StopReason>(reason);
        r.nonfinite_logits = j.at("nonfinite").get<bool>();
        for (const json& st : j.value("step_topk", json::array()))
          r.step_topk.push_back({st.at(0).get<std::vector<int32_t>>(), st.at(1).get<std::vector<double>>()});
        for (int32_t t : r.tokens)
          if (t < 0 || t >= vocab) throw std::out_of_range("token");
        for (const StepTopK& st : r.step_topk)
          for (int32_t t : st.ids)
            if (t < 0 || t >= vocab) throw std::out_of_range("token");
      } catch (const std::exception&) {
        resume_refused(out, gf, cat("continuation ", i - b, " is not tokens (ids in [0, ", vocab, ")), a stop reason, "
                                    "nonfinite and step_topk as the run writes them"), remedy);
      }
      out_gen.push_back(std::move(r));
    }
  }
  return rs;
}

GoldenSummary write_golden(const Model& model, const Tokenizer* tok, const Suite& suite, const fs::path& out_arg,
                           const GoldenOptions& opt, const BackendFactory& factory, std::FILE* progress) {
  const fs::path out = out_arg.has_filename() ? out_arg : out_arg.parent_path();  // "golden/x/" is "golden/x"
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  check_golden_options(opt, out);
  (void)parse_layer_list(opt.layers, model.config);  // a bad --layers is refused before an existing `out`
  if (opt.verify_layers != "none") {
    try {
      (void)parse_layer_list(opt.verify_layers, model.config);
    } catch (const InputError& e) {  // its message names --layers
      const std::string m = e.what();
      input_error("golden: --verify-", m.rfind("--", 0) == 0 ? m.substr(2) : m);
    }
  }
  if (out.filename().empty() || out.filename() == "." || out.filename() == "..")
    input_error("golden: --out ", out.string(), ": expected a folder name (such as golden/MODEL/smoke)");
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  fs::create_directories(parent);
  // One writer per record at a time; then the leftovers of writers that were killed.
  FileLock lock(parent / cat(".", out.filename().string(), ".lock"), cat("golden --out ", out.string()));
  clean_stale_temporaries(parent, out, progress);
  if (fs::exists(out) && !opt.force)
    input_error("golden: ", out.string(), " already exists (use --force to replace a golden record)");
  if (fs::exists(out) && !replaceable(out))
    input_error("golden: ", out.string(), " exists and is not a golden record or an empty folder; not replacing it");

  GoldenSummary sum;
  GoldenRun run(model, tok, opt, factory, sum);

  // The record is built in `partial`, a folder that outlives an interrupted run: every finished case
  // leaves its data file there and its manifest entry in `resume` beside it, and a later run with
  // the same key (the model, the suite and every setting that shapes the record) keeps them, each
  // checked against its SHA-256, and computes only the rest. Every case is computed alone, so the
  // record is the same bytes however often the run was interrupted. The bookkeeping stays out of
  // the record; at the end `partial` becomes a temporary of this run, `resume` is removed and the
  // record is put in place.
  const fs::path partial = parent / cat(".", out.filename().string(), ".partial");
  const fs::path resume = parent / cat(".", out.filename().string(), ".resume");
  const json key = {{"tool_version", kVersion},
                    {"model", model.fingerprint},
                    {"weights_sample", weights_sample_digest(*model.checkpoint)},
                    {"tokenizer", tok ? json(tok->fingerprint()) : json(nullptr)},
                    {"suite", suite.sha256},
                    {"command", opt.command},
                    {"precision", run.rc.str()},
                    {"gen_tokens", opt.gen_tokens ? json(*opt.gen_tokens) : json(nullptr)},
                    {"layers", opt.layers},
                    {"positions", opt.positions},
                    {"topk", opt.topk},
                    {"floors", opt.floors},
                    {"batch", opt.batch_all ? "all" : "1"},
                    {"verify", run.verify || run.verify_floors ? json({{"layers", opt.verify_layers}, {"positions", opt.verify_positions}}) : json(nullptr)},
                    {"bf16_floors", run.floor_rc[0].str()},
                    {"floor_classes", opt.floor_classes},
                    {"resume_format", kResumeFormat}};
  const std::vector<std::pair<size_t, size_t>> groups = golden_batch_groups(suite, opt);
  const GoldenResume rs = open_golden_resume(out, key, suite, groups, run.V, opt.restart, progress);
  const std::string& key_sha = rs.key_sha;

  // Progress: the share of the work done, by each case's passes over the weights (golden_plan.h).
  std::vector<double> work(suite.cases.size());
  for (size_t ci = 0; ci < suite.cases.size(); ++ci) {
    const Case c = golden_case(opt, suite.cases[ci]);
    const double T = double(encode_case(c, tok, model.config).ids.size() + static_cast<size_t>(std::max(c.max_new_tokens, 0)));
    work[ci] = std::max(c.max_new_tokens, 0) + 1 + (opt.floors ? 2 * (2 * T + 2) : 0);
  }
  const double work_total = std::accumulate(work.begin(), work.end(), 0.0);
  double work_done = 0, work_timed = 0, seconds_timed = 0;
  int resumed = 0;

  // --batch all: each group's continuations, generated together when the first of its cases that is
  // not kept comes up, and kept in `resume` (gen-FIRST_ID.json) so an interruption does not redo them.
  std::map<size_t, GenerateResult> pregen;
  auto batch_generation = [&](size_t ci) -> const GenerateResult* {
    if (!opt.batch_all) return nullptr;
    if (!pregen.count(ci)) {
      const auto [b, e] = *std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return ci >= g.first && ci < g.second; });
      std::vector<GenerateResult> gen;
      if (auto it = rs.generations.find(b); it != rs.generations.end()) {
        gen = it->second;
      } else {
        if (progress) std::fprintf(stderr, "golden: generating the continuations of cases %zu-%zu together\n", b + 1, e);
        gen = generate_batch(run, suite, b, e, progress != nullptr);
        json saved = json::array();
        for (const GenerateResult& r : gen)
          saved.push_back({{"tokens", r.tokens},
                           {"reason", static_cast<int>(r.reason)},
                           {"nonfinite", r.nonfinite_logits},
                           {"step_topk", step_topk_json(r.step_topk)}});
        write_file_atomic(rs.resume / cat("gen-", suite.cases[b].id, ".json"),
                          seal_resume({{"first", b}, {"results", saved}}, key_sha).dump() + "\n");
      }
      for (size_t i = b; i < e; ++i) pregen[i] = gen.at(i - b);
    }
    return &pregen.at(ci);
  };

  json jcases = json::array(), jfiles = json::object();
  for (size_t ci = 0; ci < suite.cases.size(); ++ci) {
    const std::string id = suite.cases[ci].id;
    const fs::path entry_file = resume / (id + ".case.json");
    std::optional<json> kept;
    if (auto it = rs.cases.find(ci); it != rs.cases.end()) kept = it->second;
    const auto c0 = clock::now();
    if (kept) {
      ++resumed;
    } else {
      json one_file = json::object();
      GoldenSummary one;
      json jc = record_case(run, suite.cases[ci], ci, partial, one_file, one, progress, batch_generation(ci));
      const std::string file = jc.at("file").get<std::string>();
      json e = {{"entry", jc},
                {"file", file},
                {"bytes", one_file.at(file).at("bytes")},
                {"sha256", one_file.at(file).at("sha256")},
                {"line", one.lines.at(0)}};
      write_file_atomic(entry_file, seal_resume(e, key_sha).dump() + "\n");
      test_kill_point(cat("case-", ci).c_str());
      kept = e;
      work_timed += work[ci];
      seconds_timed += std::chrono::duration<double>(clock::now() - c0).count();
    }
    const json& e = *kept;
    jcases.push_back(e.at("entry"));
    jfiles[e.at("file").get<std::string>()] = {{"bytes", e.at("bytes")}, {"sha256", e.at("sha256")}};
    sum.bytes += e.at("bytes").get<int64_t>();
    sum.lines.push_back(e.at("line").get<std::string>());
    work_done += work[ci];
    if (progress) {
      const double left = work_total - work_done;
      std::string eta = work_timed > 0 && left > 0 ? cat(", about ", format_duration(seconds_timed / work_timed * left), " left") : "";
      std::fprintf(stderr, "golden: %zu of %zu cases done%s (%.0f %% of the work)%s\n", ci + 1, suite.cases.size(),
                   resumed ? cat(", ", resumed, " kept from an interrupted run").c_str() : "", 100.0 * work_done / work_total,
                   eta.c_str());
    }
  }
  if (progress && resumed)
    std::fprintf(progress, "golden: resumed: %d of %zu cases kept from an interrupted run (checked by SHA-256)\n", resumed,
                 suite.cases.size());
  if (!run.floor_rc[0].faults.empty() && run.floor_eng[0])
    throw Error(ExitCode::bad, cat("golden: the CPU spot check passed the bf16 floors made on ", run.floor_rc[0].str(),
                                   ", which has faults; no record written"));
  if (!run.rc.faults.empty())
    throw Error(ExitCode::bad, cat("golden: the CPU spot check passed every case of the reference ", run.rc.str(),
                                   ", which has faults: they act outside the checked layers and positions (--verify-layers ",
                                   opt.verify_layers, ", --verify-positions ", opt.verify_positions,
                                   ") or below the fp32 limits; no record written"));
  json manifest = golden_manifest(run, suite, sum, std::move(jcases), std::move(jfiles));
  if (const json& v = manifest["settings"].value("verification", json()); !v.is_null()) {
    if (v.at("status") == "passed")
      sum.verification = cat("CPU spot check passed: ", v.at("cases").get<int>(), " cases, ", v.at("layers").size(),
                             " layers at the first ", v.at("positions").get<int>(), " positions; worst rel_l2 ",
                             v.at("worst_rel_l2").get<double>(), " (limit ", kFallbackRelL2, "), worst KLD ",
                             v.at("worst_kld").get<double>(), " nats (limit ", kFallbackKld, "), generation steps' worst KLD ",
                             v.at("worst_generation_kld").get<double>(), " nats");
    else
      sum.verification = cat("NOT CHECKED by the CPU (", v.at("reason").get<std::string>(), ")");
  }
  if (opt.batch_all) manifest["settings"]["batch"] = "all";  // (absent: one case at a time, as every record before it)
  manifest[kManifestChecksumKey] = manifest_checksum(manifest);
  write_file_atomic(partial / "manifest.json", manifest.dump(1) + "\n");
  // Finished: the record leaves `partial` for a temporary of this process, the bookkeeping goes, and
  // the record is put in place (a kill in between leaves a temporary that the next run removes).
  const fs::path tmp = parent / cat(".", out.filename().string(), ".tmp-", ::getpid());
  fs::remove_all(tmp);
  fs::rename(partial, tmp);
  fs::remove_all(resume);
  test_kill_point("before-swap");
  replace_record(tmp, out, parent);
  sum.dir = out;
  sum.bytes += static_cast<int64_t>(fs::file_size(out / "manifest.json"));
  sum.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return sum;
}

// ---- reading ----

std::vector<int32_t> GoldenCase::sequence() const {
  std::vector<int32_t> s = prompt;
  s.insert(s.end(), continuation.begin(), continuation.end());
  return s;
}

namespace {

std::optional<double> opt_from(const json& j) {
  if (j.is_null()) return std::nullopt;
  return metrics::number_from_json(j);
}

}  // namespace

GoldenRecord GoldenRecord::open(const fs::path& dir) {
  GoldenRecord g;
  g.dir_ = dir;
  const fs::path mpath = dir / "manifest.json";
  if (!fs::is_directory(dir)) input_error("golden record ", dir.string(), ": not a folder");
  if (!fs::exists(mpath)) input_error("golden record ", dir.string(), ": no manifest.json (not a golden record, or an interrupted write)");
  const std::string where = mpath.string();
  try {
    g.manifest_ = parse_json(read_file(mpath, kMaxInputFileBytes), where);
  } catch (const json::parse_error& e) {
    input_error(where, ": not valid JSON (edited or truncated?): ", e.what());
  }
  const json& m = g.manifest_;
  try {
    if (m.value("format", "") != kGoldenFormat)
      input_error(where, ": expected format \"", kGoldenFormat, "\", found ", m.contains("format") ? m["format"].dump() : "none");
    if (m.at("format_version").get<int>() != kGoldenFormatVersion)
      input_error(where, ": format_version ", m["format_version"].dump(), ", this tool reads version ", kGoldenFormatVersion,
                  " (regenerate the record with `degenbisect golden`)");
    // The manifest's own checksum (before any of its values is used): its noise floors, settings and
    // the data files' checksums are what every verdict rests on.
    if (m.contains(kManifestChecksumKey)) {
      const json& want = m[kManifestChecksumKey];
      if (!want.is_string())
        input_error(where, ": ", kManifestChecksumKey, " is ", want.dump(), ", expected a SHA-256 as 64 hex digits");
      const std::string got = manifest_checksum(m);
      if (got != want.get<std::string>())
        input_error("golden record ", dir.string(), ": manifest.json does not match its own checksum (", kManifestChecksumKey,
                    " ", want.get<std::string>(), ", its content hashes to ", got,
                    "): the manifest was edited after it was written (noise floors, settings, cases or file checksums); "
                    "refusing it; regenerate the record with `degenbisect golden`");
      g.manifest_checked_ = true;
    }
    g.model_fp_ = m.at("model").at("fingerprint").get<std::string>();
    g.weights_sample_ = m.at("model").value("weights_sample", std::string());
    if (m.at("model").contains("tensor_digests"))
      g.tensor_digests_ = m.at("model").at("tensor_digests").get<std::map<std::string, std::string>>();
    g.layers_ = m.at("model").at("num_hidden_layers").get<int>();
    g.hidden_ = m.at("model").at("hidden_size").get<int64_t>();
    g.vocab_ = m.at("model").at("vocab_size").get<int64_t>();
    const json& tf = m.at("tokenizer").at("fingerprint");
    g.tok_fp_ = tf.is_null() ? "" : tf.get<std::string>();
    g.suite_ = m.at("suite").at("name").get<std::string>();
    g.stored_.assign(static_cast<size_t>(g.layers_), false);
    for (const json& l : m.at("settings").at("layers")) {
      int li = l.get<int>();
      if (li < 0 || li >= g.layers_) input_error(where, ": settings.layers names layer ", li, " of a ", g.layers_, "-layer model");
      g.stored_[static_cast<size_t>(li)] = true;
    }
    const json& nfc = m.at("noise_floors").at("classes");
    for (int fc = 0; fc < 2; ++fc) {
      const json& cl = nfc.at(floor_class_name(static_cast<FloorClass>(fc)));
      g.floors_[fc] = cl.at("measured").get<bool>();
      if (!g.floors_[fc]) g.floors_reason_[fc] = cl.at("reason").is_null() ? "" : cl.at("reason").get<std::string>();
    }

    // Every data file: present, same size, same SHA-256.
    const json& files = m.at("files");
    for (const auto& [name, info] : files.items()) {
      if (name.find('/') != std::string::npos || name.find("..") != std::string::npos)
        input_error(where, ": file name '", name, "' leaves the record folder");
      const fs::path p = dir / name;
      if (!fs::exists(p)) input_error("golden record ", dir.string(), ": data file ", name, " is missing");
      const std::string bytes = read_file(p);
      const uint64_t want = info.at("bytes").get<uint64_t>();
      if (bytes.size() != want)
        input_error("golden record ", dir.string(), ": ", name, " has ", bytes.size(), " bytes, the manifest says ", want,
                    " (truncated or replaced; regenerate the record)");
      const std::string h = sha256_hex(bytes);
      if (h != info.at("sha256").get<std::string>())
        input_error("golden record ", dir.string(), ": ", name, " does not match its checksum in manifest.json (SHA-256 ",
                    h, ", expected ", info["sha256"].get<std::string>(), "): the file was edited or corrupted");
    }

    for (const json& jc : m.at("cases")) {
      GoldenCase c;
      c.id = jc.at("id").get<std::string>();
      c.index = jc.at("index").get<int>();
      c.input = jc.at("input").get<std::string>();
      c.opened_think = jc.at("opened_think").get<bool>();
      c.max_new_tokens = jc.at("max_new_tokens").get<int>();
      c.ignore_stop = jc.at("ignore_stop").get<bool>();
      c.sampling = jc.at("sampling").get<std::string>();
      c.stop_reason = jc.at("stop_reason").get<std::string>();
      c.nonfinite_logits = jc.at("nonfinite_logits").get<bool>();
      c.P = jc.at("positions_stored").get<int64_t>();
      c.file = jc.at("file").get<std::string>();
      if (!files.contains(c.file)) input_error(where, ": case '", c.id, "': data file ", c.file, " has no checksum in 'files'");
      for (int fc = 0; fc < 2; ++fc) {
        const char* cn = floor_class_name(static_cast<FloorClass>(fc));
        const json& fl = jc.at("floors").at(cn);
        if (fl.is_null()) {
          if (g.floors_[fc]) input_error(where, ": case '", c.id, "' has no ", cn, " floors although the record says they were measured");
          continue;
        }
        CaseFloors f;
        for (ForcedMode md : {ForcedMode::prefill, ForcedMode::decode}) {
          const int mi = static_cast<int>(md);
          const std::string mn = forced_mode_name(md);
          for (const json& v : fl.at("iso_" + mn)) f.iso[mi].push_back(opt_from(v));
          if (static_cast<int>(f.iso[mi].size()) != g.layers_)
            input_error(where, ": case '", c.id, "': floors.", cn, ".iso_", mn, " has ", f.iso[mi].size(), " entries, expected ",
                        g.layers_);
          f.kld[mi] = opt_from(fl.at("kld_" + mn));
        }
        f.mtp_kld = opt_from(fl.at("mtp_kld"));
        c.floors[fc] = f;
      }
      g.cases_.push_back(std::move(c));
    }
  } catch (const json::exception& e) {
    input_error(where, ": malformed manifest (edited?): ", e.what());
  } catch (const std::invalid_argument& e) {
    input_error(where, ": malformed manifest (edited?): ", e.what());
  }
  if (g.cases_.empty()) input_error(where, ": the record has no cases");
  return g;
}

namespace {

// Every number of a case's data is checked before use (finiteness and range; issue 40): a record is
// only checksummed, not proven, and the comparisons downstream treat a NaN or a positive log-prob as
// a bug of their own. Per position and rank, a top-K row must be a log-probability: -inf (an id of
// probability 0) or finite and at most kMaxStoredLogprob, with no id twice; lse finite; lse_pad >= 0
// or not finite (NaN: a padding logit was not finite, golden.h); the layer outputs and their norms
// finite (norms >= 0). InputError naming the file, the case, the tensor, the position (and rank).
void check_topk_numbers(const TopKBlock& b, const std::string& where, const char* prefix) {
  const size_t K = static_cast<size_t>(b.K);
  for (size_t r = 0; K > 0 && r < b.logprobs.size() / K; ++r) {
    for (size_t k = 0; k < K; ++k) {
      const float lp = b.logprobs[r * K + k];
      if (std::isnan(lp) || lp > kMaxStoredLogprob)
        input_error(where, ": tensor '", prefix, "topk_logprobs' at position ", r, ", rank ", k, " (id ", b.ids[r * K + k],
                    ") is ", lp, "; expected a log-probability (-inf, or finite and at most ", kMaxStoredLogprob,
                    "): the record is damaged or was not written by degenbisect golden");
      for (size_t j = 0; j < k; ++j)
        if (b.ids[r * K + j] == b.ids[r * K + k])
          input_error(where, ": tensor '", prefix, "topk_ids' at position ", r, " holds id ", b.ids[r * K + k], " twice (ranks ",
                      j, " and ", k, "); expected K different ids");
    }
  }
  for (size_t r = 0; r < b.lse.size(); ++r)
    if (!std::isfinite(b.lse[r]))
      input_error(where, ": tensor '", prefix, "lse' at position ", r, " is ", b.lse[r], "; expected a finite log-sum-exp");
  for (size_t r = 0; r < b.lse_pad.size(); ++r)
    if (b.lse_pad[r] < 0)
      input_error(where, ": tensor '", prefix, "lse_pad' at position ", r, " is ", b.lse_pad[r],
                  "; expected >= 0 (the padding rows' share, log1p(padding mass / real mass)) or NaN");
}

void check_record_numbers(const GoldenCase& c, const std::string& where, int64_t T, int layers) {
  check_topk_numbers(c.topk, where, "");
  check_topk_numbers(c.mtp_topk, where, "mtp_");
  auto finite = [&](const std::vector<float>& v, const std::string& name, int64_t row_len) {
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]))
        input_error(where, ": tensor '", name, "' at position ", static_cast<int64_t>(i) / row_len, " is ", v[i],
                    "; expected a finite value (the reference's own run was finite)");
  };
  if (c.P > 0 && !c.embed.empty()) finite(c.embed, "embed", static_cast<int64_t>(c.embed.size()) / c.P);
  for (size_t l = 0; l < c.l_out.size(); ++l)
    if (!c.l_out[l].empty()) finite(c.l_out[l], trace_name(Step::l_out, static_cast<int>(l)), static_cast<int64_t>(c.l_out[l].size()) / c.P);
  for (int l = 0; l < layers; ++l)
    for (int64_t t = 0; t < T; ++t) {
      const float v = c.l_out_norm[static_cast<size_t>(l * T + t)];
      if (!std::isfinite(v) || v < 0)
        input_error(where, ": tensor 'l_out_norm' at layer ", l, ", position ", t, " is ", v,
                    "; expected a finite norm >= 0");
    }
}

}  // namespace

GoldenCase GoldenRecord::load_case(size_t i, bool with_layers) const {
  GoldenCase c = cases_.at(i);
  auto f = SafetensorsFile::open(dir_ / c.file);
  const std::string where = cat("golden record ", dir_.string(), ": ", c.file, " (case '", c.id, "')");
  auto get = [&](const std::string& name, DType dt, std::vector<int64_t> shape, bool required) -> const TensorView* {
    const TensorView* t = f->find(name);
    if (!t) {
      if (required) input_error(where, ": tensor '", name, "' is missing");
      return nullptr;
    }
    if (t->dtype != dt) input_error(where, ": tensor '", name, "' is ", dtype_name(t->dtype), ", expected ", dtype_name(dt));
    for (size_t k = 0; k < shape.size(); ++k)
      if (shape[k] < 0) shape[k] = k < t->shape.size() ? t->shape[k] : -1;
    if (t->shape != shape) input_error(where, ": tensor '", name, "' has shape ", shape_str(t->shape), ", expected ", shape_str(shape));
    return t;
  };
  // note: an empty tensor has no data (memcpy from or to nullptr is undefined even for 0 bytes)
  auto i32 = [](const TensorView* t) {
    std::vector<int32_t> v(static_cast<size_t>(t->numel()));
    if (t->nbytes > 0) std::memcpy(v.data(), t->data, t->nbytes);
    return v;
  };
  auto f32 = [](const TensorView* t) {
    std::vector<float> v(static_cast<size_t>(t->numel()));
    if (t->nbytes > 0) std::memcpy(v.data(), t->data, t->nbytes);
    return v;
  };
  c.prompt = i32(get("prompt", DType::i32, {-1}, true));
  if (c.prompt.empty()) input_error(where, ": tensor 'prompt' is empty; expected at least one prompt token");
  c.continuation = i32(get("continuation", DType::i32, {-1}, true));
  const int64_t T = static_cast<int64_t>(c.prompt.size() + c.continuation.size());
  const TensorView* ti = get("topk_ids", DType::i32, {T, -1}, true);
  const int K = static_cast<int>(ti->shape[1]);
  if (K < 1) input_error(where, ": topk_ids has no columns");
  c.topk.K = K;
  c.topk.ids = i32(ti);
  c.topk.logprobs = f32(get("topk_logprobs", DType::f32, {T, K}, true));
  c.topk.lse = f32(get("lse", DType::f32, {T}, true));
  if (const TensorView* lv = get("lse_pad", DType::f32, {T}, false)) c.topk.lse_pad = f32(lv);  // absent: older record
  if (const TensorView* m = get("mtp_topk_ids", DType::i32, {T - 1, K}, false)) {
    c.mtp_topk.K = K;
    c.mtp_topk.ids = i32(m);
    c.mtp_topk.logprobs = f32(get("mtp_topk_logprobs", DType::f32, {T - 1, K}, true));
    c.mtp_topk.lse = f32(get("mtp_lse", DType::f32, {T - 1}, true));
    if (const TensorView* lv = get("mtp_lse_pad", DType::f32, {T - 1}, false)) c.mtp_topk.lse_pad = f32(lv);
  }
  if (c.P < 0 || c.P > T) input_error(where, ": positions_stored ", c.P, " outside [0, ", T, "]");
  c.l_out.resize(static_cast<size_t>(layers_));
  if (c.P > 0 && with_layers) {
    if (const TensorView* e = get("embed", DType::f32, {c.P, hidden_}, false)) c.embed = f32(e);
    for (int l = 0; l < layers_; ++l)
      if (stored_[static_cast<size_t>(l)]) c.l_out[l] = f32(get(trace_name(Step::l_out, l), DType::f32, {c.P, hidden_}, true));
  }
  c.l_out_norm = f32(get("l_out_norm", DType::f32, {layers_, T}, true));
  check_record_numbers(c, where, T, layers_);
  for (int32_t id : c.sequence())
    if (id < 0 || id >= vocab_) input_error(where, ": token id ", id, " outside the record's vocabulary [0, ", vocab_, ")");
  for (int32_t id : c.mtp_topk.ids)
    if (id < 0 || id >= vocab_) input_error(where, ": MTP top-K id ", id, " outside the record's vocabulary [0, ", vocab_, ")");
  for (int32_t id : c.topk.ids)
    if (id < 0 || id >= vocab_) input_error(where, ": top-K id ", id, " outside the record's vocabulary [0, ", vocab_, ")");
  return c;
}

}  // namespace degen
