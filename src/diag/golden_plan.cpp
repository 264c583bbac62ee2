// golden --plan (see golden_plan.h for the formulas).
#include "diag/golden_plan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "model/safetensors.h"
#include "model/tokenizer.h"
#include "model/weights.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/resource_meter.h"

namespace degen {

namespace fs = std::filesystem;

namespace {

constexpr double kGB = 1e9;
// The program itself (libraries, CUDA runtime, tokenizer, OpenMP stacks): a golden of the tiny
// models, whose own data are a few MB, peaks at 105-110 MB of anonymous memory (measured 2026-12-02).
constexpr double kBaseBytes = 160.0 * (1 << 20);
// A thread's scratch in a product: at most 512 KiB (src/cpu/matmul.cpp: the Eigen path's converted tile;
// the kernels' widened weight tile of at most 256 KiB and its transposed output of a few rows)
constexpr double kTileBytes = 512.0 * 1024;

// One pass over the weights: n tokens through every layer at context up to `ctx`, with or without the MTP head.
struct Pass {
  int64_t n = 1, ctx = 1;
  bool mtp = false;
  bool compute = true;  // false: a read of every byte (the tensor digests)
  bool floor = false;   // a noise-floor run's pass
};

// Storage read rate: up to 512 MiB from the middle of the largest file with O_DIRECT (not from the
// page cache); where O_DIRECT is refused, after dropping the range from the cache.
std::optional<double> probe_storage(const fs::path& file, std::string& how) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  bool direct = fd >= 0;
  const int f = direct ? fd : ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (f < 0) return std::nullopt;
  struct stat st{};
  ::fstat(f, &st);
  const size_t block = 4 << 20;
  const off_t size = st.st_size;
  if (size < off_t(block) * 4) {
    ::close(f);
    return std::nullopt;
  }
  const off_t len = std::min<off_t>(off_t(512) << 20, size / 2) / off_t(block) * off_t(block);
  const off_t start = (size / 2 - len / 2) / 4096 * 4096;
  if (!direct) ::posix_fadvise(f, start, len, POSIX_FADV_DONTNEED);
  void* buf = nullptr;
  if (::posix_memalign(&buf, 4096, block) != 0) {
    ::close(f);
    return std::nullopt;
  }
  const auto t0 = std::chrono::steady_clock::now();
  off_t got = 0;
  while (got < len) {
    const ssize_t r = ::pread(f, buf, block, start + got);
    if (r <= 0) break;
    got += r;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > 3.0) break;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::free(buf);
  ::close(f);
  if (got == 0 || s <= 0) return std::nullopt;
  how = cat("measured: ", got >> 20, " MiB of ", file.filename().string(), direct ? " read with O_DIRECT" : " read after dropping it from the page cache");
  return double(got) / s / kGB;
}

// The reference's own matmul on in-memory bf16 weights of the model's MLP shapes, [I, H] and [H, I]
// through the kernels of the active ISA (util/cpu_isa.h): at 1 row, bytes of weight per second
// (decode); at 16 rows, flop/s (prefill).
void probe_matmul(const BackendFactory& factory, const ModelConfig& cfg, Precision prec, double& bytes_per_s, double& flops) {
  RunConfig rc;
  rc.precision = prec;
  std::unique_ptr<Backend> be = factory(rc, cfg);
  int64_t I = cfg.is_moe() ? std::max(cfg.shared_expert_intermediate_size, cfg.moe_intermediate_size) : cfg.intermediate_size;
  int64_t H = cfg.hidden_size;
  while (I * H > (int64_t(1) << 27)) (I > H ? I : H) /= 2;  // at most 256 MB of probe weights per shape
  I = std::max<int64_t>(I, 64);
  H = std::max<int64_t>(H, 64);
  auto weight = [](int64_t out, int64_t in, std::vector<uint16_t>& w, TensorView& tv) {
    w.resize(static_cast<size_t>(out * in));
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (auto& v : w) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v = f32_to_bf16(static_cast<float>(static_cast<int64_t>(s >> 40) - (1 << 23)) * (1.0f / (1 << 29)));
    }
    tv.name = "probe";
    tv.dtype = DType::bf16;
    tv.shape = {out, in};
    tv.data = reinterpret_cast<const uint8_t*>(w.data());
    tv.nbytes = w.size() * 2;
  };
  std::vector<uint16_t> wa, wb;
  TensorView up, down;
  weight(I, H, wa, up);
  weight(H, I, wb, down);
  auto seconds = [&](int64_t rows) {  // one product with each weight
    Tensor xa = be->from_host(std::vector<double>(static_cast<size_t>(rows * H), 0.01), {rows, H});
    Tensor xb = be->from_host(std::vector<double>(static_cast<size_t>(rows * I), 0.01), {rows, I});
    (void)be->matmul(xa, up);  // warm
    int reps = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double sec = 0;
    while (sec < 0.3 || reps < 2) {
      (void)be->matmul(xa, up);
      (void)be->matmul(xb, down);
      ++reps;
      sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return sec / reps;
  };
  bytes_per_s = double(up.nbytes + down.nbytes) / seconds(1);
  flops = 2.0 * 16 * 2 * double(I) * double(H) / seconds(16);
}

}  // namespace

std::string format_bytes(double bytes) {
  char b[32];
  if (bytes >= 1e9) std::snprintf(b, sizeof b, "%.2f GB", bytes / 1e9);
  else std::snprintf(b, sizeof b, "%.0f MB", bytes / 1e6);
  return b;
}

std::string format_duration(double s) {
  // Every double is printed without a conversion to int (int(s / 3600) of 1e300 s is undefined; it
  // printed "-2147483648 h"): whole hours up to a million, then in exponent notation.
  char b[64];
  if (std::isnan(s) || s < 0) return "unknown";
  if (std::isinf(s)) return "unbounded";
  const double h = std::floor(s / 3600);
  if (h >= 1e6) std::snprintf(b, sizeof b, "%.3g h", s / 3600);
  else if (s >= 3600) std::snprintf(b, sizeof b, "%.0f h %02.0f min", h, std::floor(std::fmod(s, 3600) / 60));
  else if (s >= 60) std::snprintf(b, sizeof b, "%.0f min %02.0f s", std::floor(s / 60), std::floor(std::fmod(s, 60)));
  else std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

int64_t GoldenPasses::Case::total() const { return gen + forced + floors; }
int64_t GoldenPasses::gen() const {
  int64_t n = 0;
  for (const Case& c : cases) n += c.gen;
  return n;
}
int64_t GoldenPasses::forced() const {
  int64_t n = 0;
  for (const Case& c : cases) n += c.forced;
  return n;
}
int64_t GoldenPasses::floors() const {
  int64_t n = 0;
  for (const Case& c : cases) n += c.floors;
  return n;
}
int64_t GoldenPasses::of_cases() const { return gen() + forced() + floors(); }

GoldenPasses golden_passes(const ModelConfig& cfg, const Tokenizer* tok, const Suite& suite, const GoldenOptions& opt) {
  GoldenPasses g;
  const std::vector<bool> stored = parse_layer_list(opt.layers, cfg);
  const int n_stored = g.n_stored = static_cast<int>(std::count(stored.begin(), stored.end(), true));
  // the floor classes the run measures on the CPU (a bf16 class made on the GPU costs the CPU only its spot check)
  if (opt.floors) {
    if (opt.floor_classes != "fp32" && opt.bf16_floors.backend == BackendKind::cpu) ++g.classes;
    if (opt.floor_classes != "bf16") ++g.classes;
  }
  for (const Case& c0 : suite.cases) {
    Case c = c0;
    if (opt.gen_tokens) c.max_new_tokens = *opt.gen_tokens;
    GoldenPasses::Case pc;
    pc.Tp = static_cast<int64_t>(encode_case(c, tok, cfg).ids.size());
    pc.G = c.max_new_tokens;
    pc.T = pc.Tp + pc.G;
    pc.P = n_stored == 0 ? 0 : golden_positions(opt.positions, pc.T, (n_stored + 1) * cfg.hidden_size * 4);
    // per class: the isolated prefill and decode of the stored positions, the teacher-forced prefill and decode
    pc.floors = g.classes * ((pc.P > 0 ? 1 : 0) + pc.P + 1 + pc.T);
    g.cases.push_back(pc);
  }
  // generation: per batch group (one case, or with --batch all a run of cases with equal settings),
  // a prefill of every prompt, then a decode step per further token for all of them together; counted
  // at the group's first case, where the writer generates them
  for (const auto& [b, e] : golden_batch_groups(suite, opt)) g.cases[b].gen = std::max<int64_t>(g.cases[b].G, 0);
  return g;
}

namespace {

// The weights by what a pass reads of them, and what a pass costs.
struct WeightModel {
  const ModelConfig& cfg;
  GoldenPlan& p;
  CheckpointLayout lay;
  int moe_layers = 0;
  double E = 0, k = 0, per_expert = 0, bytes_per_param = 2;

  WeightModel(const ModelConfig& cfg_, const Checkpoint* ckpt, GoldenPlan& plan) : cfg(cfg_), p(plan) {
    if (ckpt) lay = detect_layout(cfg, *ckpt);
    else lay.mtp_layers = cfg.mtp_num_layers;
    for (int l = 0; l < cfg.num_layers; ++l) moe_layers += cfg.is_moe_layer(l) ? 1 : 0;
    for (const WeightSpec& spec : weight_table(cfg, lay)) {
      const TensorView* t = ckpt ? ckpt->find(spec.name) : nullptr;
      if (!t && spec.need == Need::optional) continue;
      int64_t n = 1;
      for (int64_t d : spec.shape) n *= d;
      const double b = t ? double(t->nbytes) : double(n) * 2;
      p.params += n;
      p.weight_bytes += b;
      if (spec.kind == "embed") p.embed_bytes += b;
      else if (spec.kind == "mtp") p.mtp_bytes += b;
      else if (spec.name.find(".experts.") != std::string::npos) p.expert_bytes += b;
    }
    E = double(cfg.num_experts);
    k = double(cfg.experts_per_tok);
    per_expert = moe_layers > 0 && E > 0 ? p.expert_bytes / (moe_layers * E) : 0;
    bytes_per_param = p.params > 0 ? p.weight_bytes / double(p.params) : 2;
  }
  double touched(int64_t n) const { return E > 0 ? E * (1 - std::pow(1 - k / E, double(n))) : 0.0; }
  // weight bytes through the matmuls in a pass over n tokens
  double bytes(const Pass& ps) const {
    if (!ps.compute) return p.weight_bytes;
    double b = p.weight_bytes - p.embed_bytes - p.expert_bytes - p.mtp_bytes;
    b += moe_layers * touched(ps.n) * per_expert;
    if (ps.mtp) b += p.mtp_bytes;  // (an MoE MTP layer counted whole: an upper bound)
    return b;
  }
  double flops(const Pass& ps) const {
    if (!ps.compute) return 0.0;
    const double active_bytes = bytes(Pass{1, 1, ps.mtp, true});
    double f = 2.0 * double(ps.n) * active_bytes / bytes_per_param;
    f += 4.0 * double(ps.n) * double(ps.ctx) * cfg.n_q * cfg.head_dim * cfg.num_full_layers();  // QK^T and AV
    f += 6.0 * double(ps.n) * cfg.n_v * double(cfg.d_k) * cfg.d_v * cfg.num_linear_layers();     // GDN state update and read
    return f;
  }
};

// The passes of the run (golden_passes) as the time model sees them, and compare --server's
// decode-path scoring of the suite (dp: not part of the golden run).
struct PassList {
  std::vector<Pass> run, dp;
  double record_bytes_max = 0, layers_max = 0;
};

PassList plan_passes(GoldenPlan& p, const ModelConfig& cfg, const GoldenPasses& gp, const Suite& suite,
                     const GoldenOptions& opt) {
  PassList pl;
  const int n_stored = gp.n_stored;
  const double H = double(cfg.hidden_size);
  for (const GoldenPasses::Case& c : gp.cases) {
    const int64_t Tp = c.Tp, G = c.G, T = c.T, P = c.P;
    p.max_T = std::max(p.max_T, T);
    pl.run.push_back({T, T, true, true});  // the teacher-forced prefill
    // compare --server's decode-path scoring of this case (not part of the golden run): the
    // reference's prefill over the engine's sequence (T tokens when it generates as many as the
    // golden), and the floor class's engine decoding it as a server does: the prompt, then a token a call
    pl.dp.push_back({T, T, false, true});
    pl.dp.push_back({Tp, Tp, false, true});
    for (int64_t i = 1; i < G; ++i) pl.dp.push_back({1, Tp + i, false, true});
    for (int cl = 0; cl < gp.classes; ++cl) {
      if (P > 0) pl.run.push_back({P, P, false, true, true});
      for (int64_t i = 0; i < P; ++i) pl.run.push_back({1, i + 1, false, true, true});
      pl.run.push_back({T, T, true, true, true});
      for (int64_t i = 0; i < T; ++i) pl.run.push_back({1, i + 1, false, true, true});
    }
    const double K = std::min(opt.topk, 1000);
    const double rec = T * K * 12 + (T - 1) * K * 12 + (n_stored + 1) * double(P) * H * 4 + cfg.num_layers * double(T) * 4;
    pl.record_bytes_max = std::max(pl.record_bytes_max, rec);
    pl.layers_max = std::max(pl.layers_max, 3.0 * (n_stored + 1) * double(P) * H * 4 + cfg.num_layers * double(T) * 4);
  }
  for (const auto& [b, e] : golden_batch_groups(suite, opt)) {
    const int64_t G = gp.cases[b].G;
    if (G <= 0) continue;
    int64_t tp = 0, tp_max = 0;
    for (size_t i = b; i < e; ++i) {
      tp += gp.cases[i].Tp;
      tp_max = std::max(tp_max, gp.cases[i].Tp);
    }
    pl.run.push_back({tp, tp_max, false, true});
    for (int64_t i = 1; i < G; ++i) pl.run.push_back({static_cast<int64_t>(e - b), tp_max + i, false, true});
  }
  pl.run.push_back({0, 0, false, false});  // the tensor digests of the manifest read every byte once
  p.passes_gen = gp.gen();
  p.passes_forced = gp.forced();
  p.passes_floors = gp.floors();
  p.passes_digest = gp.digest;
  p.cases = static_cast<int>(suite.cases.size());
  p.batch_groups = static_cast<int>(golden_batch_groups(suite, opt).size());
  return pl;
}

void plan_memory(GoldenPlan& p, const ModelConfig& cfg, const WeightModel& wm, const GoldenPasses& gp, const PassList& pl,
                 const Suite& suite, const GoldenOptions& opt, const PlanAssumptions& as) {
  const double e = opt.precision == Precision::fp64 ? 8 : 4;
  const double T = double(p.max_T), H = double(cfg.hidden_size), V = double(cfg.vocab_size);
  // B: the most sequences alive at once (the largest batch group); R: the most rows in one forward
  // (a case's teacher-forced prefill, or a group's prompts prefilled together)
  double B = 1, R = T;
  for (const auto& [b, e] : golden_batch_groups(suite, opt)) {
    B = std::max(B, double(e - b));
    double rows = 0;
    for (size_t i = b; i < e; ++i) rows += double(gp.cases[i].Tp);
    R = std::max(R, rows);
  }
  const double n_lin = cfg.num_linear_layers(), n_full = cfg.num_full_layers(), n_mtp = wm.lay.mtp_layers;
  const double proj = std::max(2.0 * cfg.n_q * cfg.head_dim, double(cfg.d_conv() + cfg.d_val() + 2 * cfg.n_v));
  const double I = cfg.is_moe() ? std::max<double>(cfg.shared_expert_intermediate_size, wm.k * cfg.moe_intermediate_size)
                                : double(cfg.intermediate_size);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  p.memory = {
      {"state", B * (n_lin * (double(cfg.n_v) * cfg.d_k * cfg.d_v + (cfg.conv_kernel - 1) * double(cfg.d_conv())) * e +
                     (n_full + n_mtp) * T * cfg.n_kv * cfg.head_dim * 2 * e),
       cat("GDN state and conv windows of every linear layer, KV cache of T tokens; for ", B, B == 1 ? " sequence" : " sequences at once")},
      {"activations", R * (3 * H + 2 * proj + 3 * I) * e + R * T * cfg.n_q * e, cat("one forward over ", R, " rows")},
      {"logits", 2 * T * V * (8 + e), "T rows of V logits, record and floor runs, with the MTP head's"},
      {"layers", pl.layers_max, "stored layer outputs, captured, injected and compared"},
      {"record", 2 * pl.record_bytes_max, "a case's data file, written and checksummed"},
      {"tiles", threads * kTileBytes * (e / 4) + R * std::max({double(H), I, proj}) * 4,
       "converted weight tiles and a product's packed input (R rows)"},
      {"base", kBaseBytes, "the program: libraries, CUDA runtime, tokenizer, thread stacks"},
  };
  for (const PlanItem& m : p.memory) p.peak_anon_bytes += m.bytes;
  if (as.memory_gb) {
    p.available_bytes = *as.memory_gb * kGB;
    p.available_source = "--memory-gb";
  } else {
    p.available_bytes = double(memory_available_bytes()) + double(rss_anon_bytes());
    p.available_source = "this machine (MemAvailable, cgroup limit)";
  }
  p.fits_page_cache = p.weight_bytes + p.peak_anon_bytes <= p.available_bytes * 0.9;
}

void plan_rates(GoldenPlan& p, const ModelConfig& cfg, const Checkpoint* ckpt, const GoldenOptions& opt,
                const PlanAssumptions& as, const BackendFactory& factory) {
  if (as.storage_gbps) {
    p.storage_gbps = *as.storage_gbps;
    p.storage_source = "--storage-gbps";
  } else if (ckpt && as.probe) {
    fs::path largest;
    uintmax_t size = 0;
    for (const auto& f : ckpt->files()) {
      std::error_code ec;
      const uintmax_t s = fs::file_size(f->path(), ec);
      if (!ec && s > size) {
        size = s;
        largest = f->path();
      }
    }
    std::string how;
    if (auto r = probe_storage(largest, how)) {
      p.storage_gbps = *r;
      p.storage_source = how;
    }
  }
  if (as.memory_gbps && as.gflops) {
    p.memory_gbps = *as.memory_gbps;
    p.gflops = *as.gflops;
    p.memory_source = "--memory-gbps";
    p.flops_source = "--gflops";
  } else if (as.probe) {
    double bps = 0, fl = 0;
    probe_matmul(factory, cfg, opt.precision, bps, fl);
    p.memory_gbps = as.memory_gbps ? *as.memory_gbps : bps / kGB;
    p.gflops = as.gflops ? *as.gflops : fl / 1e9;
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    const std::string m = cat("measured: the reference matmul on bf16 weights of this model's MLP shapes in RAM, ", threads, " threads");
    p.memory_source = as.memory_gbps ? "--memory-gbps" : m + ", 1 row";
    p.flops_source = as.gflops ? "--gflops" : m + ", 16 rows";
  }
  if (p.storage_gbps <= 0 && !p.fits_page_cache) {
    p.storage_source = ckpt ? "not measured (the probe could not read the checkpoint)" : "not measured (no weight files)";
  }
}

// A pass takes the longer of its storage reads and its arithmetic (the next layer is read while
// this one computes); seconds_read counts the passes bound by reading, seconds_compute the rest.
void plan_time(GoldenPlan& p, const WeightModel& wm, const PassList& pl) {
  // (read, compute) seconds of a pass; from_storage: its weights come from storage, not RAM
  auto pass_seconds = [&](const Pass& ps, bool from_storage) {
    const double W = wm.bytes(ps);
    const double read = from_storage && p.storage_gbps > 0 ? W / (p.storage_gbps * kGB) : 0;
    double compute = 0;
    if (ps.compute) {
      if (p.memory_gbps > 0) compute = std::max(compute, W / (p.memory_gbps * kGB));
      if (p.gflops > 0) compute = std::max(compute, wm.flops(ps) / (p.gflops * 1e9));
    }
    return std::pair{read, compute};
  };
  bool first = true;
  for (const Pass& ps : pl.run) {
    const auto [read, compute] = pass_seconds(ps, !p.fits_page_cache || first);
    first = false;
    if (ps.compute) {
      p.bytes_weights_total += wm.bytes(ps);
      p.flops_total += wm.flops(ps);
    }
    (read >= compute ? p.seconds_read : p.seconds_compute) += std::max(read, compute);
    if (ps.floor) p.seconds_floors += std::max(read, compute);
  }
  // compare --server's decode-path scoring: the same rates, the weights read from RAM when they fit
  for (const Pass& ps : pl.dp) {
    const auto [read, compute] = pass_seconds(ps, !p.fits_page_cache);
    p.seconds_decode_path += std::max(read, compute);
  }
  p.passes_decode_path = static_cast<int64_t>(pl.dp.size());
}

}  // namespace

GoldenPlan plan_golden(const fs::path& dir, const ModelConfig& cfg, const Checkpoint* ckpt, const Tokenizer* tok,
                       const Suite& suite, const GoldenOptions& opt, const PlanAssumptions& as,
                       const BackendFactory& factory) {
  check_golden_options(opt, cfg);  // what `golden` refuses, `golden --plan` refuses the same way
  GoldenPlan p;
  p.model_name = dir.filename().string();
  p.weights_present = ckpt != nullptr;
  p.files = ckpt ? static_cast<int>(ckpt->files().size()) : 0;
  const WeightModel wm(cfg, ckpt, p);
  const GoldenPasses gp = golden_passes(cfg, tok, suite, opt);
  const PassList pl = plan_passes(p, cfg, gp, suite, opt);
  plan_memory(p, cfg, wm, gp, pl, suite, opt, as);
  plan_rates(p, cfg, ckpt, opt, as, factory);
  plan_time(p, wm, pl);
  return p;
}

std::vector<std::string> GoldenPlan::lines() const {
  std::vector<std::string> o;
  o.push_back(cat("model: ", model_name, ", ", std::to_string(params / 1000000), "M parameters, ", format_bytes(weight_bytes),
                  " of weights", weights_present ? cat(" in ", files, files == 1 ? " file" : " files") : " (config only; bf16 assumed)"));
  o.push_back(cat("suite: ", cases, " cases, up to ", max_T, " tokens each (prompt + generated), ",
                  batch_groups == cases ? "generated one at a time" : cat("generated in ", batch_groups, " batch groups (--batch all)")));
  o.push_back(cat("passes over the weights: ", passes(), " = ", passes_gen, " generation + ", passes_forced,
                  " teacher-forced + ", passes_floors, " noise floors + ", passes_digest, " digest read"));
  o.push_back(cat("  through the matmuls: ", format_bytes(bytes_weights_total), " of weights, ", cat(std::lround(flops_total / 1e9)), " GFLOP"));
  o.push_back("peak anonymous memory, at most (formula in `golden --help`):");
  for (const PlanItem& m : memory) {
    char b[160];
    std::snprintf(b, sizeof b, "  %-12s %10s  %s", m.name.c_str(), format_bytes(m.bytes).c_str(), m.formula.c_str());
    o.push_back(b);
  }
  o.push_back(cat("  total        ", format_bytes(peak_anon_bytes), " of ", format_bytes(available_bytes), " available (", available_source, ")"));
  o.push_back(fits_page_cache ? "page cache: the weights fit beside the run: storage is read once, later passes read RAM"
                              : "page cache: the weights do not fit beside the run: every pass reads them from storage");
  auto rate = [](double v, const char* unit, const std::string& src) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f", v);
    return v > 0 ? cat(b, " ", unit, " (", src, ")") : cat("unknown (", src.empty() ? "not measured" : src, ")");
  };
  o.push_back(cat("storage read: ", rate(storage_gbps, "GB/s", storage_source)));
  o.push_back(cat("decode matmul: ", rate(memory_gbps, "GB/s of weights", memory_source)));
  o.push_back(cat("prefill matmul: ", rate(gflops, "GFLOP/s", flops_source)));
  if (!fits_page_cache && storage_gbps <= 0)
    o.push_back(cat("estimate: computing ", format_duration(seconds_compute), ", plus reading ", format_bytes(bytes_weights_total),
                    " from storage at a rate not measured (give --storage-gbps)"));
  else
    o.push_back(cat("estimate: ", format_duration(seconds()), " (passes bound by reading ", format_duration(seconds_read),
                    ", by computing ", format_duration(seconds_compute), ")",
                    passes_floors > 0 ? cat("; the noise floors take ", format_duration(seconds_floors), " of it (--no-floors)") : ""));
  if (passes_decode_path > 0 && (fits_page_cache || storage_gbps > 0) && (memory_gbps > 0 || gflops > 0))
    o.push_back(cat("compare --server, later (not part of this run): scoring a server's decode path takes about ",
                    format_duration(seconds_decode_path), " per run of this suite (", passes_decode_path,
                    " passes: per case the reference's prefill over the server's sequence and the floor engine's decode of it; "
                    "--decode-steps N bounds it, --no-decode-path skips it)"));
  if (refused())
    o.push_back(cat("REFUSED: needs ", format_bytes(peak_anon_bytes), " of memory, ", format_bytes(available_bytes),
                    " available: store fewer --positions or --layers, or split the suite"));
  return o;
}

}  // namespace degen
