// `degenbisect bench --backend cpu`: throughput of the CPU reference engine on a real or synthetic
// checkpoint: prefill and decode tokens/s (after a warm-up pass), achieved GFLOP/s of the matrix
// products against the multiply-add peak of their ISA measured in the same run (same threads), weight
// bytes streamed per decode step against a memcpy probe and a streaming-read probe (the kernels' own
// loads), and peak resident memory against the checkpoint's fp32 size (the engine never copies the
// model to fp32 as a whole).
// The driver of `degenbisect bench` (backends/bench.h); it sits above both backends.
#include "backends/bench.h"

#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <random>
#include <vector>

#include "build_config.h"
#include "backends/make_backend.h"
#include "cpu/cpu_backend.h"
#include "cpu/gemm.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#include "engine/bench_args.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/synth.h"
#include "util/cpu_isa.h"
#include "util/error.h"

namespace degen {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// The arithmetic peak of the product kernels' ISA (gemm.h madd_loop: independent vector multiply-adds
// on every thread), best of `reps`: fp32 flop/s, 2 per multiply-add. What the products are measured
// against.
double madd_peak(int reps) {
  const cpu::GemmKernels& k = cpu::gemm_kernels();
  const int64_t n = 20'000'000 / k.lanes;
  double best = 1e30, total = 0;
  int threads = 1;
  for (int r = 0; r < reps; ++r) {
    auto t0 = clock_type::now();
    double sum = 0;
#pragma omp parallel reduction(+ : sum)
    {
      sum += k.madd_loop(n);
#ifdef _OPENMP
#pragma omp single
      threads = omp_get_num_threads();
#endif
    }
    best = std::min(best, seconds_since(t0));
    total += sum;
  }
  if (!(total > 0)) std::abort();  // keep the arithmetic observable
  return 2.0 * 12.0 * double(n) * k.lanes * threads / best;
}

// memcpy of `bytes` split over the threads, best of `reps`: bytes copied per second (each byte is
// read once and written once, so the memory traffic is twice this).
double memcpy_bandwidth(size_t bytes, int reps) {
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = clock_type::now();
#pragma omp parallel
    {
#ifdef _OPENMP
      const size_t nt = omp_get_num_threads(), id = omp_get_thread_num();
#else
      const size_t nt = 1, id = 0;
#endif
      const size_t b0 = bytes * id / nt, b1 = bytes * (id + 1) / nt;
      std::memcpy(dst.data() + b0, src.data() + b0, b1 - b0);
    }
    best = std::min(best, seconds_since(t0));
  }
  if (dst[bytes / 2] != 1) std::abort();  // keep the copy observable
  return double(bytes) / best;
}

// Streaming read of `bytes` split over the threads, each thread summing its part with the product
// kernels' own widest loads (gemm.h stream_sum, the active ISA), best of `reps`: bytes read per
// second, the rate a decode step that reads every weight once can approach.
double read_bandwidth(size_t bytes, int reps) {
  std::vector<float> buf(bytes / 4, 1.0f);
  const cpu::GemmKernels& k = cpu::gemm_kernels();
  double best = 1e30, total = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = clock_type::now();
    double sum = 0;
#pragma omp parallel reduction(+ : sum)
    {
#ifdef _OPENMP
      const size_t nt = omp_get_num_threads(), id = omp_get_thread_num();
#else
      const size_t nt = 1, id = 0;
#endif
      const size_t n = buf.size(), b0 = n * id / nt, b1 = n * (id + 1) / nt;
      sum += k.stream_sum(buf.data() + b0, static_cast<int64_t>(b1 - b0));
    }
    best = std::min(best, seconds_since(t0));
    total += sum;
  }
  if (!(total > 0)) std::abort();  // keep the reads observable
  return double(bytes) / best;
}

double peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) * 1024.0;  // Linux: kilobytes
}

// The benchmark prompt: n ids drawn with a fixed seed, the same for every measurement.
std::vector<int32_t> bench_prompt(const ModelConfig& cfg, int n) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(std::min<int64_t>(cfg.vocab_size, 1 << 30) - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(n));
  for (auto& t : prompt) t = pick(rng);
  return prompt;
}

// The next token of a greedy decode step.
int32_t greedy_next(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Tensor parallelism: decode at tp=1 and tp=N in the same run (same model, same tokens), through
// make_backend so that it measures what `run --config backend=...,tp=N` runs, and the all-reduces
// the communicator counted per decoded token.
int bench_tp(const Model& model, const BenchArgs& a) {
  const ModelConfig& cfg = model.config;
  const RunConfig base = a.backend == "cuda" ? RunConfig{}.with_backend(BackendKind::cuda)
                                             : RunConfig{}.with_precision(precision_in_config(a.precision));
  const std::vector<int32_t> prompt = bench_prompt(cfg, a.prefill);
  double rate[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const int tp = i == 0 ? 1 : a.tp;
    const RunConfig rc = base.with_tp(tp);
    std::unique_ptr<Backend> be = make_backend(rc, cfg);
    Engine eng(cfg, model.weights, *be, engine_options(rc));
    SeqState st = eng.new_state();
    auto t0 = clock_type::now();
    std::vector<float> lg = be->to_host_f32(eng.forward({SeqInput{&st, prompt}}).logits);
    const double t_pre = seconds_since(t0);
    if (eng.comm()) eng.comm()->stats().reset();
    t0 = clock_type::now();
    for (int s = 0; s < a.decode; ++s) {
      const int32_t next = greedy_next(lg);
      lg = be->to_host_f32(eng.forward({SeqInput{&st, {next}}}).logits);
    }
    const double t_dec = seconds_since(t0);
    rate[i] = a.decode / t_dec;
    std::printf("tp=%-2d    %s: prefill %d tokens %.1f tok/s; decode %d tokens %.2f tok/s", tp, be->name().c_str(),
                a.prefill, a.prefill / t_pre, a.decode, rate[i]);
    if (TpComm* c = eng.comm())
      std::printf("; %s all-reduce: %.1f per decoded token, %.0f bytes each (%lld calls, %lld bytes over %d steps)",
                  c->kind(), double(c->stats().all_reduces) / a.decode,
                  double(c->stats().all_reduce_bytes) / std::max<double>(1.0, double(c->stats().all_reduces)),
                  static_cast<long long>(c->stats().all_reduces), static_cast<long long>(c->stats().all_reduce_bytes),
                  a.decode);
    std::printf("\n");
  }
  std::printf("ratio    decode tok/s at tp=%d / tp=1: %.2f (the CPU twin shares one machine's cores between its "
              "ranks, so on the CPU this measures the overhead of the rank threads and all-reduces, not a speed-up)\n",
              a.tp, rate[1] / rate[0]);
  return 0;
}

// A preset written to a fresh temporary folder by a child `degenbisect synth`, so that its memory
// does not count in our peak RSS. Returns the folder.
fs::path write_preset(const std::string& preset_name) {
  find_synth_preset(preset_name);  // InputError listing the names
  const fs::path tmp = fs::temp_directory_path() / cat("degen-bench-", preset_name, "-", getpid());
  // Run without a shell (argv as words): a quote in $TMPDIR or in our own path is just a character.
  const std::string self = fs::read_symlink("/proc/self/exe").string(), out = tmp.string();
  std::vector<char*> argv = {const_cast<char*>(self.c_str()), const_cast<char*>("synth"),
                             const_cast<char*>("--preset"), const_cast<char*>(preset_name.c_str()),
                             const_cast<char*>("--out"), const_cast<char*>(out.c_str()), nullptr};
  std::fprintf(stderr, "bench: writing preset %s to %s ...\n", preset_name.c_str(), tmp.c_str());
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);  // the child's progress on our stderr, stdout stays ours
  pid_t pid = -1;
  int status = -1;
  const int rc = posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc == 0)
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    input_error("bench: could not write preset ", preset_name, " to ", out, rc != 0 ? cat(": ", std::strerror(rc)) : "");
  return tmp;
}

// bench --backend cpu on the checkpoint in `dir`: the probes, one prefill, the decode steps, the
// peak memory.
int bench_cpu(const fs::path& dir, CpuPrecision prec, const BenchArgs& a) {
  auto model = load_model(dir);
  const ModelConfig& cfg = model->config;
  double params = 0, stored = 0;
  for (const TensorView* t : model->checkpoint->tensors()) {
    params += double(t->numel());
    stored += double(t->nbytes);
  }
  const double fp32_bytes = params * 4;
  std::printf("model    %s: %s, %d layers %s, H %lld, V %lld, %.1fM parameters, %.2f GB stored, %.2f GB as fp32\n",
              dir.c_str(), arch_name(cfg.arch), cfg.num_layers, cfg.layer_map().c_str(),
              static_cast<long long>(cfg.hidden_size), static_cast<long long>(cfg.vocab_size), params / 1e6,
              stored / 1e9, fp32_bytes / 1e9);
  std::printf("backend  cpu:%s, %d threads\n", cpu_precision_name(prec), CpuBackend::num_threads());
  std::printf("isa      products on %s\n", cpu::isa_description().c_str());

  // Probes first (they allocate and free their own buffers).
  const double peak = madd_peak(5) / 1e9;
  const double bw = memcpy_bandwidth(size_t(256) << 20, 5), rd = read_bandwidth(size_t(256) << 20, 5);
  std::printf("probe    %s multiply-add peak: %.1f GFLOP/s;  memcpy 256 MiB: %.2f GB/s copied;  streaming read 256 MiB "
              "(%s loads): %.2f GB/s\n",
              cpu::isa_name(cpu::gemm_kernels().isa), peak, bw / 1e9, cpu::isa_name(cpu::gemm_kernels().isa), rd / 1e9);

  CpuBackend be(prec);
  Engine eng(cfg, model->weights, be, EngineOptions{GdnAlgo::chunked});
  const std::vector<int32_t> prompt = bench_prompt(cfg, a.prefill);

  // A warm-up prefill first, as llama-bench makes one: the weights' pages are mapped into the process
  // (a first touch of the 1B model costs about half a million page faults) and the allocator warmed,
  // so that the measured passes are the engine's own cost.
  {
    SeqState warm = eng.new_state();
    (void)eng.forward({SeqInput{&warm, prompt}});
  }
  // Prefill.
  SeqState st = eng.new_state();
  be.stats().reset();
  auto t0 = clock_type::now();
  ForwardOutput out = eng.forward({SeqInput{&st, prompt}});
  const double t_pre = seconds_since(t0);
  const CpuStats pre = be.stats();
  std::printf("prefill  %d tokens in %.2f s: %.1f tok/s; matmul %.1f GFLOP/s (%.0f%% of the multiply-add peak), "
              "%.0f%% of the time in matmul\n",
              a.prefill, t_pre, a.prefill / t_pre, pre.matmul_flops / pre.matmul_seconds / 1e9,
              100.0 * pre.matmul_flops / pre.matmul_seconds / 1e9 / peak, 100.0 * pre.matmul_seconds / t_pre);

  // Decode (greedy on the logits, one token per step). note: on a shared machine single steps vary a
  // lot; the best step is compared with the best probe (both measure what the hardware allows).
  std::vector<float> lg = be.to_host_f32(out.logits);
  std::vector<double> steps;
  be.stats().reset();
  for (int s = 0; s < a.decode; ++s) {
    const int32_t next = greedy_next(lg);
    t0 = clock_type::now();
    lg = be.to_host_f32(eng.forward({SeqInput{&st, {next}}}).logits);
    steps.push_back(seconds_since(t0));
  }
  const CpuStats dec = be.stats();
  double t_dec = 0;
  for (double x : steps) t_dec += x;
  std::sort(steps.begin(), steps.end());
  const double best = steps.front(), median = steps[steps.size() / 2];
  const double bytes_step = dec.weight_bytes / a.decode, flops_step = dec.matmul_flops / a.decode;
  std::printf("decode   %d tokens in %.2f s: %.2f tok/s (median step %.3f s, best %.3f s); best step: matmul %.2f "
              "GFLOP/s, %.3f GB of weights streamed = %.2f GB/s: %.0f%% of the memcpy rate, %.0f%% of the "
              "streaming-read rate; the products %.0f%% of the decode time, at %.0f%% of the streaming-read rate\n",
              a.decode, t_dec, a.decode / t_dec, median, best, flops_step / best / 1e9, bytes_step / 1e9,
              bytes_step / best / 1e9, 100.0 * bytes_step / best / bw, 100.0 * bytes_step / best / rd,
              100.0 * dec.matmul_seconds / t_dec, 100.0 * dec.weight_bytes / dec.matmul_seconds / rd);

  const double rss = peak_rss_bytes();
  std::printf("memory   peak RSS %.2f GB = %.0f%% of the checkpoint's fp32 size (%.2f GB); stored weights %.2f GB "
              "(memory-mapped, counted in RSS once touched)\n",
              rss / 1e9, 100.0 * rss / fp32_bytes, fp32_bytes / 1e9, stored / 1e9);
  return 0;
}

}  // namespace

int run_bench(const BenchArgs& a) {
  if (a.tp > 1) {
    if (a.model.empty()) input_error("bench --tp: give --model DIR (a shipped tiny model works: models/tiny-qwen35)");
    auto model = load_model(a.model);
    std::printf("model    %s: %s, %d layers, H %lld; tensor parallelism tp=%d against tp=1\n", a.model.c_str(),
                arch_name(model->config.arch), model->config.num_layers,
                static_cast<long long>(model->config.hidden_size), a.tp);
    return bench_tp(*model, a);
  }
  if (a.backend == "cuda") {
    return run_cuda_bench(a);  // src/cuda/bench.cpp (exit 125 in a build without CUDA)
  }
  if (!a.synthetic.empty() || a.layers || a.mtp || a.graphs || a.count || a.ops || a.list || !a.filter.empty() ||
      a.peak_gbps > 0 || a.peak_tflops > 0 || !a.config.empty())
    input_error("bench: --synthetic, --layers, --mtp, --graphs, --count, --ops, --list, --filter, --peak-* and --config "
                "are options of --backend cuda");
  if (a.backend != "cpu") input_error("bench: --backend must be cpu or cuda, found '", a.backend, "'");
  if (a.model.empty() == a.preset.empty()) input_error("bench: give exactly one of --model DIR or --preset NAME");
  if (a.prefill < 1 || a.decode < 1) input_error("bench: --prefill and --decode must be >= 1");
  const std::optional<Precision> word = precision_from_word(a.precision);  // the words of --config precision=
  if (!word || (*word != Precision::ref && *word != Precision::fp64))
    input_error("bench: --precision must be ref or fp64, found '", a.precision, "'");
  CpuPrecision prec = *word == Precision::fp64 ? CpuPrecision::fp64 : CpuPrecision::ref;

  // A preset is written by a child `degenbisect synth`, so its memory does not count in our peak RSS.
  fs::path dir = a.model, tmp;
  if (!a.preset.empty()) {
    tmp = write_preset(a.preset);
    dir = tmp;
  }
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      if (!p.empty()) fs::remove_all(p, ec);
    }
  } cleanup{tmp};

  return bench_cpu(dir, prec, a);
}

}  // namespace degen
