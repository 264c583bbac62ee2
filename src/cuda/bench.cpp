// `degenbisect bench --backend cuda`: throughput of the GPU path (CudaBackend) on a real checkpoint
// or, with --synthetic PRESET, on random weights generated on the device from the preset's config
// alone (nothing is read from disk, so a 27B-shaped model needs no 54 GB file). Prints:
//   probe    device-to-device copy bandwidth (bytes read + written per second) and a cuBLAS bf16 GEMM
//            at the model's MLP shape, both measured in this run;
//   prefill  tokens/s at each batch size (B sequences of --prefill tokens in one forward call), and
//            the GDN core's share of a prefill (conv1d + gates + delta rule, chunked): a second
//            prefill of the same size on fresh states with CudaStats::time_gdn on, which brackets
//            each GDN op with stream synchronisations (so the tokens/s come from the first run);
//   decode   tokens/s at each batch size (one token per sequence per step, no MTP, median step),
//            the weight bytes a step reads, and the achieved fraction of the memory-bandwidth
//            floor: floor = weight bytes per step / copy bandwidth, fraction = floor / step time.
//            (The GDN state a step reads and writes, 2 x 3 MiB per GDN layer of the 27B, is under
//            1 % of its weight bytes and not counted.)
//   count    (--count; the CUDA emulator only) what one decode step asks of the device, counted call
//            by call (cuda/device_counters.h): kernel launches (per decoder layer), the bytes read and
//            written in device memory against the floor (the weight bytes the step's products and
//            embedding read + the model's other weights + the GDN and conv states read and written
//            + the KV rows attention reads and appends), copies by direction, allocations and host
//            synchronisations, and the calls that move the most bytes. Nothing is timed.
//   ops      (--ops [--filter S] [--list]) one case per (op, shape, dtype) of the model's decode and
//            prefill (the op-case registry, cuda/op_cases.h, which the op tests check for correctness),
//            each on its own: on the emulator its launches and the bytes it moved against its floor
//            (inputs + weights + outputs once); on a GPU its best time of five, as GB/s against the
//            copy bandwidth and TFLOP/s. So each kernel's distance to its limit is known, not only
//            the whole model's.
// note: decode feeds random token ids rather than the argmax of the logits (the step's cost does not
// depend on the ids, and copying [B, V] logits to the host every step would be measured too).
#include "cuda/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>

#include "kernels/check.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_counters.h"
#include "cuda/graphs.h"
#include "cuda/op_cases.h"
#include "engine/backend_factory.h"
#include "engine/engine.h"
#include "engine/faults.h"
#include "engine/generate.h"
#include "engine/spec_decode.h"
#include "model/model.h"
#include "model/synth.h"
#include "model/weights.h"
#include "kernels/synth_weights.h"
#include "util/error.h"

namespace degen::cuda {
namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

// Best device-to-device copy of `bytes` over `reps`: bytes read + written per second.
double copy_bandwidth(CudaBackend& be, size_t bytes, int reps) {
  Tensor a = be.zeros({static_cast<int64_t>(bytes)}, DType::u8), b = be.zeros({static_cast<int64_t>(bytes)}, DType::u8);
  cudaStream_t st = be.context()->stream();
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  float best = 1e30f;
  for (int r = 0; r < reps + 1; ++r) {  // the first copy warms up
    CUDA_CHECK(cudaEventRecord(e0, st));
    CUDA_CHECK(cudaMemcpyAsync(b.raw(), a.raw(), bytes, cudaMemcpyDeviceToDevice, st));
    CUDA_CHECK(cudaEventRecord(e1, st));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (r > 0) best = std::min(best, ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 2.0 * double(bytes) / (best * 1e-3);
}

// The config of a synth preset, optionally cut to its first `layers` decoder layers.
ModelConfig preset_config(const std::string& name, int layers) {
  nlohmann::json j = find_synth_preset(name).config;
  nlohmann::json& t = j.contains("text_config") ? j["text_config"] : j;
  if (layers > 0) {
    const int L = t.at("num_hidden_layers").get<int>();
    if (layers > L) input_error("bench: --layers ", layers, " but ", name, " has ", L);
    t["num_hidden_layers"] = layers;
    if (t.contains("layer_types")) {
      nlohmann::json lt = nlohmann::json::array();
      for (int i = 0; i < layers; ++i) lt.push_back(t["layer_types"][i]);
      t["layer_types"] = lt;
    }
  }
  return parse_model_config(j, "synthetic:" + name);
}

// Views (no host data) of every weight of the table, and their device tensors: random values
// scaled like trained weights (matrices ~ N(0, 1/in), zero-centred norms ~ 0, the GDN norm ~ 1,
// A_log and dt_bias as a decay would need; A_log kept fp32).
struct SyntheticWeights {
  std::map<std::string, std::unique_ptr<TensorView>> views;
  ModelWeights weights;
};
std::unique_ptr<SyntheticWeights> synthetic_weights(const ModelConfig& cfg, CudaBackend& be, bool with_mtp) {
  auto s = std::make_unique<SyntheticWeights>();
  CheckpointLayout lay;  // per-expert tensors; the MTP layer only when --mtp asks for it
  lay.mtp_layers = with_mtp && cfg.mtp_num_layers > 0 ? 1 : 0;
  const std::vector<WeightSpec> table = weight_table(cfg, lay);
  const auto ends = [](const std::string& name, const char* suf) {
    const std::string x(suf);
    return name.size() >= x.size() && name.compare(name.size() - x.size(), x.size(), x) == 0;
  };
  // The views first (A_log fp32, the rest bf16), then the fit check before any allocation, counting
  // each tensor as CudaContext::alloc does (at least 256 bytes).
  std::vector<std::unique_ptr<TensorView>> views;
  int64_t need = 0;
  for (const WeightSpec& w : table) {
    auto v = std::make_unique<TensorView>();
    v->name = w.name;
    v->shape = w.shape;
    v->dtype = ends(w.name, "A_log") ? DType::f32 : DType::bf16;
    v->nbytes = static_cast<size_t>(v->numel()) * dtype_size(v->dtype);
    need += std::max<int64_t>(static_cast<int64_t>(v->nbytes), 256);
    views.push_back(std::move(v));
  }
  int64_t free_b = 0, total_b = 0;
  be.context()->mem_info(&free_b, &total_b);
  if (need > free_b)
    throw UntestableError(cat(cfg.origin, ": the weights need ", cuda::gib(need), ", device ", be.context()->device(),
                              " has ", cuda::gib(free_b), " free of ", cuda::gib(total_b),
                              " (--layers N keeps the first N decoder layers)"));
  uint64_t key = 1;
  for (auto& v : views) {
    const std::string n = v->name;  // a copy: v is moved into the map below
    float offset = 0.0f, scale = 0.02f;
    if (ends(n, "linear_attn.norm.weight")) { offset = 1.0f; scale = 0.05f; }
    else if (ends(n, "norm.weight") || ends(n, "layernorm.weight")) { scale = 0.05f; }
    else if (ends(n, "A_log")) { offset = 0.5f; scale = 0.3f; }
    else if (ends(n, "dt_bias")) { scale = 0.5f; }
    else if (ends(n, "conv1d.weight")) { scale = 0.3f; }
    else if (v->shape.size() == 2) { scale = static_cast<float>(1.0 / std::sqrt(double(v->shape[1]))); }
    Tensor t = be.device_tensor(v->shape, v->dtype, "synthetic weight");
    cuda::fill_random_cuda(t.raw(), v->dtype, t.numel(), 1234, key++, offset, scale, be.context()->stream());
    be.register_weight(*v, std::move(t));
    s->views[n] = std::move(v);
  }
  s->weights = bind_weight_views(cfg, lay, [&](const std::string& n) -> const TensorView* {
    auto it = s->views.find(n);
    return it == s->views.end() ? nullptr : it->second.get();
  });
  be.sync();
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The cuBLAS probe: a bf16 product at the MLP's shape (the first dense MLP's up projection), best
// of five; printed with the copy bandwidth.
void gemm_probe(CudaBackend& be, const ModelConfig& cfg, const ModelWeights& weights, double bw) {
  const int64_t M = 2048, K = cfg.hidden_size;
  const TensorView* wv = nullptr;
  for (const LayerWeights& lw : weights.layers)
    if (!lw.moe && lw.mlp.up) { wv = lw.mlp.up; break; }
  if (!wv) {
    std::printf("probe    device-to-device copy 2 GiB: %.0f GB/s (read + write)\n", bw / 1e9);
    return;
  }
  Tensor x = be.device_tensor({M, K}, DType::bf16, "gemm probe");
  cuda::fill_random_cuda(x.raw(), DType::bf16, x.numel(), 7, 7, 0.0f, 1.0f, be.context()->stream());
  be.matmul(x, *wv);
  be.sync();
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = clock_type::now();
    be.matmul(x, *wv);
    be.sync();
    best = std::min(best, seconds_since(t0));
  }
  const double gemm_tflops = 2.0 * double(M) * double(K) * double(wv->shape[0]) / best / 1e12;
  std::printf("probe    device-to-device copy 2 GiB: %.0f GB/s (read + write);  cuBLAS bf16 GEMM [%lld x %lld] x "
              "[%lld x %lld]^T: %.0f TFLOP/s\n",
              bw / 1e9, static_cast<long long>(M), static_cast<long long>(K),
              static_cast<long long>(wv->shape[0]), static_cast<long long>(K), gemm_tflops);
}

// The device's nominal limits, from the vendor's datasheets (bench --peak-gbps / --peak-tflops
// override; 0 = not known, the lines that need them are left out):
//   H200 SXM: HBM3e 4.8 TB/s; BF16 Tensor Core 1,979 TFLOP/s with sparsity, so 989 dense
//     (NVIDIA H200 Tensor Core GPU datasheet, 2024);
//   H100 SXM: HBM3 3.35 TB/s; BF16 989 TFLOP/s dense (NVIDIA H100 datasheet).
struct Peaks {
  double gbps = 0, tflops = 0;
};
Peaks nominal_peaks(const std::string& device_name, const BenchArgs& a) {
  Peaks p;
  if (device_name.find("H200") != std::string::npos) p = {4800, 989};
  else if (device_name.find("H100") != std::string::npos && device_name.find("PCIe") == std::string::npos) p = {3350, 989};
  if (a.peak_gbps > 0) p.gbps = a.peak_gbps;
  if (a.peak_tflops > 0) p.tflops = a.peak_tflops;
  return p;
}

// One batch size: a prefill with the GDN ops timed (its share), a plain prefill, then the decode
// steps on the prefilled states (and, with --graphs, the same steps as CUDA graphs).
void bench_batch(Engine& eng, CudaBackend& be, const BenchArgs& a, int B, double bw, const Peaks& peak,
                 const std::function<std::vector<int32_t>(int)>& tokens) {
  auto fresh_inputs = [&](std::vector<SeqState>& states) {
    states.clear();
    for (int i = 0; i < B; ++i) states.push_back(eng.new_state());
    std::vector<SeqInput> in;
    for (int i = 0; i < B; ++i) in.push_back(SeqInput{&states[i], tokens(a.prefill)});
    return in;
  };
  // GDN share: a prefill with the GDN ops timed (synchronised), on states thrown away after
  double gdn_s = 0, timed_s = 0;
  {
    std::vector<SeqState> tmp;
    std::vector<SeqInput> in = fresh_inputs(tmp);
    be.stats().reset();
    be.stats().time_gdn = true;
    const auto t0 = clock_type::now();
    eng.forward(in);
    be.sync();
    timed_s = seconds_since(t0);
    gdn_s = be.stats().gdn_seconds;
    be.stats().time_gdn = false;
  }
  std::vector<SeqState> states;
  std::vector<SeqInput> in = fresh_inputs(states);
  be.stats().reset();
  auto t0 = clock_type::now();
  eng.forward(in);
  be.sync();
  const double t_pre = seconds_since(t0);
  std::printf("%-8s %5d %9lld %12.3f %12.1f %12s %12.1f %7.1f%% %14s %10s\n", "prefill", B,
              static_cast<long long>(B) * a.prefill, t_pre, B * a.prefill / t_pre, "-", 1e3 * gdn_s,
              100.0 * gdn_s / std::max(timed_s, 1e-9), "-", "-");
  const double pre_flops = be.stats().matmul_flops;
  if (peak.tflops > 0)
    std::printf("mfu      prefill batch %d, %d tokens each: %.1f TFLOP/s in the matrix products = %.1f%% of the nominal "
                "%.0f TFLOP/s bf16 (products' FLOPs only; GDN %.1f%% of a timed prefill)\n",
                B, a.prefill, pre_flops / t_pre / 1e12, 100.0 * pre_flops / t_pre / 1e12 / peak.tflops, peak.tflops,
                100.0 * gdn_s / std::max(timed_s, 1e-9));
  // decode steps on the prefilled states; `extra` more first (graphs=on: the first step of a
  // key is recorded, the second captured); the median step is reported
  auto decode_row = [&](const char* label, int extra) {
    std::vector<double> steps;
    double bytes = 0;
    for (int s = 0; s < a.decode + extra; ++s) {
      in.clear();
      for (int i = 0; i < B; ++i) in.push_back(SeqInput{&states[i], tokens(1)});
      be.stats().reset();
      t0 = clock_type::now();
      eng.forward(in);
      be.sync();
      if (s >= extra) steps.push_back(seconds_since(t0));
      bytes = be.stats().weight_bytes;
    }
    const double step = median(steps);
    const double floor_s = bytes / bw;  // every weight byte read once at the copy rate
    std::printf("%-8s %5d %9lld %12.3f %12.1f %12.2f %12s %8s %14.3f %9.1f%%\n", label, B,
                static_cast<long long>(B) * a.decode, step * a.decode, B / step, 1e3 * step, "-", "-", bytes / 1e9,
                100.0 * floor_s / step);
    if (peak.gbps > 0)
      std::printf("peak     %s batch %d: %.1f%% of the nominal %.0f GB/s floor (%.2f ms for %.3f GB; %.1f%% of the "
                  "measured copy bandwidth's)\n",
                  label, B, 100.0 * bytes / (peak.gbps * 1e9) / step, peak.gbps, 1e3 * bytes / (peak.gbps * 1e9),
                  bytes / 1e9, 100.0 * floor_s / step);
    return step;
  };
  const double plain_step = decode_row("decode", 0);
  if (a.graphs) {
    be.set_graphs(true);
    const double graph_step = decode_row("decode-g", 2);
    const cuda::GraphStats gs = be.graph_stats();
    std::printf("graphs   batch %d: %.2fx the plain decode rate; %lld steps replayed, %lld captured, %lld recorded\n", B,
                plain_step / graph_step, static_cast<long long>(gs.replayed), static_cast<long long>(gs.captured),
                static_cast<long long>(gs.recorded));
    be.set_graphs(false);
  }
}

// The bytes of the weights a decode step reads besides the products' and the embedding's (which
// CudaStats::weight_bytes counts): norms, conv1d, A_log, dt_bias, every tensor that is not a matrix;
// not the MTP layer's (decode without MTP).
double small_weight_bytes(const ModelWeights& w) {
  double b = 0;
  auto add = [&](const TensorView* v) {
    if (v && v->shape.size() != 2) b += double(v->nbytes);
  };
  for (const LayerWeights& lw : w.layers) {
    for (const TensorView* v : {lw.input_norm, lw.post_norm, lw.attn.q_norm, lw.attn.k_norm, lw.gdn.conv1d,
                                lw.gdn.dt_bias, lw.gdn.A_log, lw.gdn.norm})
      add(v);
  }
  add(w.final_norm);
  return b;
}

// Each decoder layer's launches in a counted step (from its begin_layer to the next mark; the last
// to the end of the step), by layer kind.
void print_layer_launches(const ModelConfig& cfg, const std::vector<CudaBackend::LayerMark>& marks,
                          const cuda::DeviceCounters& d) {
  std::vector<int64_t> per_layer(static_cast<size_t>(cfg.num_layers), 0);
  int64_t outside = 0;
  for (size_t i = 0; i < marks.size(); ++i) {
    const int64_t n = (i + 1 < marks.size() ? marks[i + 1].calls : d.calls()) - marks[i].calls;
    if (marks[i].layer >= 0 && marks[i].layer < cfg.num_layers) per_layer[size_t(marks[i].layer)] += n;
    else outside += n;
  }
  std::string kinds;
  for (LayerKind kind : {LayerKind::linear, LayerKind::full}) {
    int64_t lo = INT64_MAX, hi = 0, count = 0;
    for (int l = 0; l < cfg.num_layers; ++l) {
      if (cfg.layer_types[size_t(l)] != kind) continue;
      lo = std::min(lo, per_layer[size_t(l)]);
      hi = std::max(hi, per_layer[size_t(l)]);
      ++count;
    }
    if (!count) continue;
    kinds += cat(kinds.empty() ? "" : ", ", kind == LayerKind::linear ? "GDN layers " : "attention layers ", lo,
                 lo == hi ? "" : cat("-", hi), " (", count, count == 1 ? " layer)" : " layers)");
  }
  const int64_t most = per_layer.empty() ? 0 : *std::max_element(per_layer.begin(), per_layer.end());
  std::printf("count    launches in each decoder layer: %s; at most %lld; outside the layers %lld (embedding, final "
              "norm, LM head)\n",
              kinds.c_str(), static_cast<long long>(most), static_cast<long long>(outside));
}

// The calls that moved the most bytes, and the most launched.
void print_calls(const cuda::DeviceCounters& d, double floor_b) {
  std::printf("count    %-44s %7s %14s %14s %10s\n", "calls by bytes moved", "calls", "read", "written", "of floor");
  const size_t show = std::min<size_t>(d.by_name.size(), 16);
  for (size_t i = 0; i < show; ++i) {
    const cuda::CallTraffic& t = d.by_name[i];
    std::printf("count    %-44s %7lld %14lld %14lld %9.1f%%\n", t.name.substr(0, 44).c_str(),
                static_cast<long long>(t.calls), static_cast<long long>(t.bytes_read),
                static_cast<long long>(t.bytes_written), 100.0 * double(t.bytes_read + t.bytes_written) / floor_b);
  }
  if (d.by_name.size() > show) std::printf("count    (%zu more call names)\n", d.by_name.size() - show);
  std::vector<cuda::CallTraffic> by_calls = d.by_name;
  std::sort(by_calls.begin(), by_calls.end(), [](const auto& x, const auto& y) { return x.calls > y.calls; });
  std::printf("count    most launched:");
  for (size_t i = 0; i < std::min<size_t>(by_calls.size(), 8); ++i)
    std::printf("%s %s x%lld", i ? "," : "", by_calls[i].name.c_str(), static_cast<long long>(by_calls[i].calls));
  std::printf("\n");
}

// --count, after the plain steps: the same step as the default runs it (graphs=on). `next_step`
// fills `in` with the next step's tokens.
void count_graph_step(Engine& eng, CudaBackend& be, const BenchArgs& a, std::vector<SeqInput>& in,
                      const std::function<void()>& next_step) {
  // The first step of a key is recorded, the second captured, the third replayed and counted. A
  // replay's inputs go to the device in one copy per graph segment (StepGraphs), where the steps
  // above, called op by op, copy each table apart. (bench's backend starts with graphs off: --config
  // refuses graphs=.)
  be.set_graphs(true);
  cuda::DeviceCounters g;
  for (int s = 0; s < 3; ++s) {
    next_step();
    if (s == 2) cuda::counters_start();
    eng.forward(in);
    if (s == 2) {
      g = cuda::counters_read();
      cuda::counters_stop();
    }
    be.sync();
  }
  const cuda::GraphStats gs = be.graph_stats();
  be.set_graphs(false);
  std::printf("count    graphs=on (the default), step %d replayed (%lld replayed, %lld captured, %lld recorded): graph "
              "launches %lld, kernels %lld; copies host->device %lld (%lld bytes), device->host %lld; allocations "
              "%lld, host synchronisations %lld\n",
              a.decode + 3, static_cast<long long>(gs.replayed), static_cast<long long>(gs.captured),
              static_cast<long long>(gs.recorded), static_cast<long long>(g.graph_launches),
              static_cast<long long>(g.launches), static_cast<long long>(g.copies_h2d),
              static_cast<long long>(g.bytes_h2d), static_cast<long long>(g.copies_d2h),
              static_cast<long long>(g.allocs), static_cast<long long>(g.host_syncs));
}

// --count: `a.decode` decode steps at batch B after a prefill of `a.prefill`, each counted; the last
// (the steady state) printed.
void bench_count(Engine& eng, CudaBackend& be, const ModelConfig& cfg, const ModelWeights& weights, const BenchArgs& a,
                 int B, const std::function<std::vector<int32_t>(int)>& tokens) {
  std::vector<SeqState> states;
  for (int i = 0; i < B; ++i) states.push_back(eng.new_state());
  std::vector<SeqInput> in;
  for (int i = 0; i < B; ++i) in.push_back(SeqInput{&states[i], tokens(a.prefill)});
  eng.forward(in);
  be.sync();
  cuda::DeviceCounters d;
  std::vector<CudaBackend::LayerMark> marks;
  double weights_b = 0;
  auto next_step = [&] {  // one new token per sequence
    in.clear();
    for (int i = 0; i < B; ++i) in.push_back(SeqInput{&states[i], tokens(1)});
  };
  for (int s = 0; s < a.decode; ++s) {
    next_step();
    be.stats().reset();
    cuda::counters_start();
    be.record_layer_marks(true);
    eng.forward(in);
    d = cuda::counters_read();  // before the bench's own synchronisation
    marks = be.layer_marks();
    be.record_layer_marks(false);
    cuda::counters_stop();
    be.sync();
    weights_b = be.stats().weight_bytes;
  }
  // the floor: every weight once, each state read and written once, the KV rows read and appended
  const double small_b = small_weight_bytes(weights);
  double gdn_b = 0, kv_b = 0;
  for (const SeqState& st : states) {
    for (const GdnState& g : st.gdn) gdn_b += 2.0 * double(g.S.nbytes() + g.conv.nbytes());
    for (const KvCache& kv : st.kv) {
      if (kv.k.empty()) continue;
      const double row = double(kv.k.nbytes() + kv.v.nbytes()) / double(kv.capacity());
      kv_b += row * double(kv.len) + row;  // the context read, the new row written
    }
  }
  const double floor_b = weights_b + small_b + gdn_b + kv_b;
  const double moved = double(d.bytes_read + d.bytes_written);
  const int64_t ctx = states.empty() ? 0 : states[0].pos;
  std::printf("count    batch %d, decode step %d at context %lld (counted call by call by the emulator)\n", B, a.decode,
              static_cast<long long>(ctx));
  std::printf("count    launches %lld = %.1f per decoder layer (%d layers; all launches / layers): kernels %lld, cuBLAS "
              "%lld; graph launches %lld\n",
              static_cast<long long>(d.calls()), double(d.calls()) / cfg.num_layers, cfg.num_layers,
              static_cast<long long>(d.launches), static_cast<long long>(d.blas_calls),
              static_cast<long long>(d.graph_launches));
  print_layer_launches(cfg, marks, d);
  std::printf("count    device memory moved %.4f GB (read %.4f, written %.4f) against the floor %.4f GB (weights %.4f "
              "+ small weights %.4f + GDN and conv states %.4f + KV %.4f): %.3f x the floor\n",
              moved / 1e9, d.bytes_read / 1e9, d.bytes_written / 1e9, floor_b / 1e9, weights_b / 1e9, small_b / 1e9,
              gdn_b / 1e9, kv_b / 1e9, moved / floor_b);
  std::printf("count    copies host->device %lld (%lld bytes), device->host %lld (%lld bytes), device->device %lld "
              "(%lld bytes), %lld with pageable host memory; memsets %lld\n",
              static_cast<long long>(d.copies_h2d), static_cast<long long>(d.bytes_h2d),
              static_cast<long long>(d.copies_d2h), static_cast<long long>(d.bytes_d2h),
              static_cast<long long>(d.copies_d2d), static_cast<long long>(d.bytes_d2d),
              static_cast<long long>(d.pageable_copies), static_cast<long long>(d.memsets));
  std::printf("count    allocations %lld, frees %lld, host synchronisations %lld\n", static_cast<long long>(d.allocs),
              static_cast<long long>(d.frees), static_cast<long long>(d.host_syncs));
  print_calls(d, floor_b);
  count_graph_step(eng, be, a, in, next_step);
}

// ---- per-op cases (--ops): the op-case registry (cuda/op_cases.h) at the bench's size ----

// One case on its own: on the emulator its launches and the bytes it moved against its floor, on a
// GPU its best time of five.
void run_op_case(CudaBackend& be, const OpCase& c, bool counted, double bw) {
  be.begin_layer(op_case_numerics());  // (a decode attention case leaves its algorithm set)
  const OpRun run = c.prepare(be);
  run();  // warm-up: weight uploads, first-use buffers
  be.sync();
  if (counted) {
    cuda::counters_start();
    run();
    const cuda::DeviceCounters d = cuda::counters_read();
    cuda::counters_stop();
    be.sync();
    const double moved = double(d.bytes_read + d.bytes_written);
    std::printf("%-72s %8lld %12.3f %12.3f %8.3f\n", c.name.substr(0, 72).c_str(),
                static_cast<long long>(d.calls() + d.copies_d2d + d.copies_h2d + d.memsets), c.floor_bytes / 1e6,
                moved / 1e6, moved / c.floor_bytes);
    return;
  }
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = clock_type::now();
    run();
    be.sync();
    best = std::min(best, seconds_since(t0));
  }
  std::printf("%-72s %8s %12.3f %12.1f %7.1f%%   %.1f TFLOP/s, %.1f us\n", c.name.substr(0, 72).c_str(), "-",
              c.floor_bytes / 1e6, c.floor_bytes / best / 1e9, 100.0 * c.floor_bytes / best / bw, c.flops / best / 1e12,
              best * 1e6);
}

int run_ops(CudaBackend& be, const ModelConfig& cfg, const ModelWeights& w, const BenchArgs& a, double bw) {
  const std::vector<OpCase> cases = op_cases(cfg, w, op_sizes_bench(a.prefill));
  const bool counted = cuda::counters_supported();
  if (!a.list)
    std::printf("%-72s %8s %12s %12s %8s\n", "op", "launches", "floor MB", counted ? "moved MB" : "GB/s",
                counted ? "x floor" : "of copy");
  int shown = 0;
  for (const OpCase& c : cases) {
    if (!a.filter.empty() && c.name.find(a.filter) == std::string::npos) continue;
    ++shown;
    if (a.list) std::printf("%s\n", c.name.c_str());
    else run_op_case(be, c, counted, bw);
  }
  if (shown == 0) input_error("bench --ops: no case matches --filter '", a.filter, "' (--list shows them)");
  if (!a.list)
    std::printf("note     %s\n", counted ? "counted by the CUDA emulator (distinct bytes per call at page granularity; "
                                            "re-reads within a kernel are not seen): not a GPU timing"
                                          : "best of 5, host-timed with a synchronisation (launch overhead included)");
  return 0;
}

// MTP: the same prompt generated greedily without and with drafts, at batch 1.
void bench_mtp(Engine& eng, const BenchArgs& a, bool synthetic, const std::function<std::vector<int32_t>(int)>& tokens) {
  GenerateOptions go;
  go.max_new_tokens = std::max(a.decode, 16);
  const std::vector<int32_t> prompt = tokens(a.prefill);
  const GenerateResult plain = generate(eng, {prompt}, go).at(0);
  go.mtp.draft_tokens = a.mtp;
  check_mtp_supported(eng, go.mtp);
  const GenerateResult spec = generate(eng, {prompt}, go).at(0);
  const double r0 = double(plain.tokens.size()) / std::max(plain.decode_seconds, 1e-9);
  const double r1 = double(spec.tokens.size()) / std::max(spec.decode_seconds, 1e-9);
  const auto opt = [](const std::optional<double>& v) { return v ? cat(*v) : std::string("-"); };
  std::printf("mtp      batch 1, greedy, %zu new tokens: plain decode %.1f tok/s; mtp=%d %.1f tok/s (x%.2f), "
              "acceptance %s of the drafts, %s tokens per verify step (%lld steps)\n",
              spec.tokens.size(), r0, a.mtp, r1, r1 / r0, spec.spec ? opt(spec.spec->accept_rate).c_str() : "-",
              spec.spec ? opt(spec.spec->accept_len).c_str() : "-",
              static_cast<long long>(spec.spec ? spec.spec->steps : 0));
  if (synthetic)
    std::printf("note     synthetic weights: a random MTP head's drafts are seldom accepted, so this rate is the cost "
                "of drafting and verifying; --model with a real checkpoint gives the acceptance that matters\n");
}

}  // namespace

int run_bench(const BenchArgs& a) {
  if (!a.preset.empty()) input_error("bench --backend cuda: use --synthetic PRESET (weights made on the device)");
  if (a.precision != "ref") input_error("bench --backend cuda: --precision is a CPU option");
  if (a.model.empty() == a.synthetic.empty())
    input_error("bench --backend cuda: give exactly one of --model DIR or --synthetic PRESET");
  if (a.prefill < 1 || a.decode < 1) input_error("bench: --prefill and --decode must be >= 1");
  // --config: the layers' toggles and gemm; the keys bench sets with its own options are refused
  const RunConfig rc = parse_run_config(a.config);
  {
    const RunConfig rest = without_toggles(rc, [](const Toggle& t) { return t.bench; });  // the registry's bench flag
    if (rest.str() != "default")
      input_error("bench --config: ", rest.str(), " cannot be given here; expected the layers' toggles (attn, gdn, ",
                  "ssm_dtype, conv_dtype, kv_dtype, fault) and gemm (--graphs, --mtp, --tp and --batch are bench's own)");
  }
  CudaBackend be(a.device, gemm_kind(rc.gemm));
  const cuda::CudaContext& ctx = *be.context();
  std::unique_ptr<Model> model;
  std::unique_ptr<SyntheticWeights> synth;
  ModelConfig cfg;
  const ModelWeights* weights = nullptr;
  std::string what;
  auto t_load = clock_type::now();
  if (!a.synthetic.empty()) {
    cfg = preset_config(a.synthetic, a.layers);
    synth = synthetic_weights(cfg, be, a.mtp > 0);
    weights = &synth->weights;
    what = cat(a.synthetic, " (synthetic weights generated on the device)");
  } else {
    if (a.layers > 0) input_error("bench: --layers applies to --synthetic only");
    model = load_model(a.model);
    cfg = model->config;
    weights = &model->weights;
    what = a.model;
  }
  const double load_s = seconds_since(t_load);
  int64_t free_b = 0, total_b = 0;
  ctx.mem_info(&free_b, &total_b);
  std::printf("model    %s: %s, %d layers %s, H %lld, V %lld\n", what.c_str(), arch_name(cfg.arch), cfg.num_layers,
              cfg.layer_map().c_str(), static_cast<long long>(cfg.hidden_size), static_cast<long long>(cfg.vocab_size));
  std::printf("backend  %s on %s (%d SMs), %s free of %s; weights on device %s (%.1f s)\n", be.name().c_str(),
              ctx.props().name, ctx.props().multiProcessorCount, cuda::gib(free_b).c_str(), cuda::gib(total_b).c_str(),
              cuda::gib(be.weight_bytes_on_device()).c_str(), load_s);

  if (a.list) return run_ops(be, cfg, *weights, a, 0);  // the names only: no probe needed
  // Probes: device-to-device copy, and a cuBLAS product at the MLP's shape.
  const double bw = copy_bandwidth(be, size_t(2) << 30, 5);
  gemm_probe(be, cfg, *weights, bw);

  const std::string shown = rc.str();
  if (shown != "default") std::printf("config   %s\n", shown.c_str());
  validate_run_config(rc, cfg);  // the run's one check (a CUDA toggle such as gemm is bench's here: no
  check_faults(rc, cfg);         // untestable_reason, which judges rc as a backend=cpu configuration)
  Engine eng(cfg, *weights, be, engine_options(rc));
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(std::min<int64_t>(cfg.vocab_size, 1 << 30) - 1));
  auto tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = pick(rng);
    return t;
  };
  if (a.ops) return run_ops(be, cfg, *weights, a, bw);
  if (a.count) {
    if (!cuda::counters_supported())
      throw UntestableError("bench --count: only the CUDA emulator counts calls and bytes (build/degenbisect-emu); on a "
                            "GPU use Nsight Systems / Nsight Compute");
    {  // warm-up: first-use allocations and uploads
      SeqState st = eng.new_state();
      eng.forward({SeqInput{&st, tokens(8)}});
      eng.forward({SeqInput{&st, tokens(1)}});
      be.sync();
    }
    for (int B : a.batches) bench_count(eng, be, cfg, *weights, a, B, tokens);
    return 0;
  }
  {  // warm-up: cuBLAS heuristics, the memory pool, first-use uploads of a real checkpoint
    SeqState st = eng.new_state();
    eng.forward({SeqInput{&st, tokens(8)}});
    eng.forward({SeqInput{&st, tokens(1)}});
    be.sync();
  }

  std::printf("%-8s %5s %9s %12s %12s %12s %12s %8s %14s %10s\n", "phase", "batch", "tokens", "seconds", "tok/s",
              "step ms", "gdn ms", "gdn %", "weights GB/st", "of floor");
  const Peaks peak = nominal_peaks(ctx.props().name, a);
  for (int B : a.batches) bench_batch(eng, be, a, B, bw, peak, tokens);
  if (a.mtp > 0) bench_mtp(eng, a, synth != nullptr, tokens);
  std::printf("note     floor = weight bytes per decode step / copy bandwidth (decode without MTP); gdn = conv1d + "
              "gates + delta rule of a timed prefill (%% of that prefill's time); peak device memory %s\n",
              cuda::gib(ctx.peak_bytes()).c_str());
  return 0;
}

}  // namespace degen::cuda
