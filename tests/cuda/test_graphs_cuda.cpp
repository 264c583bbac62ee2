// GPU: CUDA graphs for decode steps (graphs=on, src/cuda/graphs.h). Two CUDA backends, one with
// graphs, run the same prefill and the same teacher-forced decode steps; every step's logits and
// the final states (KV rows, conv windows, S) must be equal bit for bit, while the graph backend
// actually recorded, captured and replayed steps (its counters say so). The batch holds two
// sequences of different lengths, and 40 steps take the KV caches through two growths (16 -> 32 ->
// 64 rows), so keys change and graphs are captured again. MoE models under gemm=cublas pause each
// step at the routing (segments); under gemm=auto it stays on the device. Skips without a device
// (tests/cuda/main.cpp).
#include <doctest/doctest.h>

#include <cstring>

#include "cuda_test_util.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_counters.h"
#include "cuda/graphs.h"
#include "engine/backend_factory.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/run_config.h"

using namespace degen;
using test::random_ids;

namespace {

using Model = test::SynthModel;

std::vector<uint8_t> bytes(CudaBackend& be, const Tensor& t, int64_t rows = -1) {
  if (t.empty()) return {};
  const Tensor h = be.to_host(rows < 0 ? t : t.slice0(0, rows));
  const uint8_t* p = h.data<uint8_t>();
  return std::vector<uint8_t>(p, p + h.nbytes());
}

// Runs prefill + `steps` decode steps of two sequences (prompts of `prompt0` and 5 tokens) on `be`
// under `config`; returns every step's logits bytes and leaves the states in `st`.
std::vector<std::vector<uint8_t>> run(const Model& m, CudaBackend& be, const std::string& config, int steps,
                                      std::vector<SeqState>& st, Trace* tr = nullptr, int prompt0 = 13) {
  Engine eng(m.cfg, m.w, be, engine_options(parse_run_config(config)));
  const int64_t V = m.cfg.vocab_size;
  st.clear();
  st.push_back(eng.new_state());
  st.push_back(eng.new_state());
  eng.forward({SeqInput{&st[0], random_ids(prompt0, V, 1)}, SeqInput{&st[1], random_ids(5, V, 2)}}, {}, tr);
  std::vector<std::vector<uint8_t>> out;
  for (int s = 0; s < steps; ++s) {
    const std::vector<int32_t> t = random_ids(2, V, 100 + static_cast<uint32_t>(s));
    ForwardOutput o = eng.forward({SeqInput{&st[0], {t[0]}}, SeqInput{&st[1], {t[1]}}}, {}, tr);
    out.push_back(bytes(be, o.logits));
  }
  return out;
}

// The final states of two runs, byte for byte: KV rows, conv windows, S.
void check_states_equal(CudaBackend& a, const std::vector<SeqState>& sa, CudaBackend& b, const std::vector<SeqState>& sb) {
  REQUIRE(sa.size() == sb.size());
  for (size_t i = 0; i < sa.size(); ++i)
    for (size_t l = 0; l < sa[i].kv.size(); ++l) {
      CAPTURE(l);
      CHECK(sa[i].kv[l].len == sb[i].kv[l].len);
      if (sa[i].kv[l].len > 0) {
        CHECK(bytes(a, sa[i].kv[l].k, sa[i].kv[l].len) == bytes(b, sb[i].kv[l].k, sb[i].kv[l].len));
        CHECK(bytes(a, sa[i].kv[l].v, sa[i].kv[l].len) == bytes(b, sb[i].kv[l].v, sb[i].kv[l].len));
      }
      CHECK(bytes(a, sa[i].gdn[l].conv) == bytes(b, sb[i].gdn[l].conv));
      CHECK(bytes(a, sa[i].gdn[l].S) == bytes(b, sb[i].gdn[l].S));
    }
}

GemmKind gemm_of(const char* config) {
  return std::strstr(config, "gemm=simple") ? GemmKind::simple
         : std::strstr(config, "gemm=cublas") ? GemmKind::cublas
                                              : GemmKind::automatic;
}

}  // namespace

// The engine has one path (engine.cpp, "Observe what runs"): a trace that observes the layers gets
// the steps inside the fused ops from the ops themselves (the kernels write them, or the backend
// copies an output it already holds), so the observed decode steps give the logits and states of the
// unobserved ones, bit for bit, with the same kernel launches: nothing is recomputed for the observer.
// (Before issue 43 an observer switched the engine to split ops, 20-40 % more launches.)
TEST_CASE("cuda engine: observed decode steps give the logits, states and kernel launches of unobserved ones") {
  for (const char* preset : {"tiny-qwen35", "tiny-qwen35-r3", "tiny-qwen35-moe", "tiny-qwen3next"}) {
    CAPTURE(preset);
    Model m(preset);
    CudaBackend plain_be(0, GemmKind::automatic, false), observed_be(0, GemmKind::automatic, false);
    Trace watch;
    int64_t offered = 0;
    watch.observer = [&](const TraceEvent&, Tensor&, Backend&) { ++offered; };
    constexpr int kSteps = 6;
    std::vector<SeqState> sa, sb;
    const bool count = cuda::counters_supported();
    if (count) cuda::counters_start();
    const auto got = run(m, plain_be, "backend=cuda", kSteps, sa);
    const cuda::DeviceCounters plain_calls = count ? cuda::counters_read() : cuda::DeviceCounters{};
    if (count) cuda::counters_stop();
    if (count) cuda::counters_start();
    const auto want = run(m, observed_be, "backend=cuda", kSteps, sb, &watch);
    const cuda::DeviceCounters observed_calls = count ? cuda::counters_read() : cuda::DeviceCounters{};
    if (count) cuda::counters_stop();
    CHECK(offered > 0);
    REQUIRE(got.size() == want.size());
    for (size_t s = 0; s < want.size(); ++s) CHECK_MESSAGE(got[s] == want[s], "decode step " << s);
    CHECK(want.front() != want.back());
    check_states_equal(plain_be, sa, observed_be, sb);
    if (count) {
      std::printf("observation-check %-16s launches: %lld unobserved, %lld observed\n", preset,
                  static_cast<long long>(plain_calls.launches), static_cast<long long>(observed_calls.launches));
      CHECK(observed_calls.launches == plain_calls.launches);
    }
  }
}

TEST_CASE("cuda graphs: decode steps replayed from graphs give the logits and states of plain launches, bit for bit") {
  struct Run { const char* preset; const char* config; int prompt = 13; };
  const Run runs[] = {
      {"tiny-qwen35", "backend=cuda"},
      {"tiny-qwen35", "backend=cuda,gemm=cublas"},
      {"tiny-qwen35", "backend=cuda,attn=naive,kv_dtype=fp8"},
      {"tiny-qwen35", "backend=cuda,attn=splitkv,ssm_dtype=bf16"},
      // grouped: the first sequence's decode rows go from one part (up to 256 keys) to two inside
      // replayed graphs, whose grid and merge launch the cache's capacity fixed
      {"tiny-qwen35", "backend=cuda,attn=grouped", 236},
      {"tiny-qwen35", "backend=cuda,fault=kv-off-by-one@3"},
      {"tiny-qwen35-r3", "backend=cuda,gemm=simple"},
      {"tiny-qwen35-moe", "backend=cuda"},
      {"tiny-qwen35-moe", "backend=cuda,gemm=cublas"},
      {"tiny-qwen3next", "backend=cuda"},
  };
  constexpr int kSteps = 40;
  for (const Run& r : runs) {
    CAPTURE(r.preset);
    CAPTURE(r.config);
    Model m(r.preset);
    const GemmKind gemm = gemm_of(r.config);
    CudaBackend plain(0, gemm, /*graphs=*/false), graphed(0, gemm, /*graphs=*/true);
    std::vector<SeqState> sa, sb;
    const auto want = run(m, plain, r.config, kSteps, sa, nullptr, r.prompt);
    const auto got = run(m, graphed, r.config, kSteps, sb, nullptr, r.prompt);
    REQUIRE(got.size() == want.size());
    int equal = 0;
    for (size_t s = 0; s < want.size(); ++s) equal += got[s] == want[s];
    CHECK(equal == kSteps);
    CHECK(want.front() != want.back());  // the steps compute different logits: equality is not trivial
    check_states_equal(plain, sa, graphed, sb);
    const cuda::GraphStats gs = graphed.graph_stats();
    // MoE under gemm=cublas routes on the host (the step's graph pauses at each MoE layer); under
    // gemm=auto the routing stays on the device (moe_experts_on_device): one graph per step
    const bool paused = m.cfg.num_experts > 0 && gemm != GemmKind::automatic;
    std::printf("graph-check %-16s %-44s %d/%d steps equal; recorded %lld, captured %lld, replayed %lld, graph launches %lld\n",
                r.preset, r.config, equal, kSteps, static_cast<long long>(gs.recorded),
                static_cast<long long>(gs.captured), static_cast<long long>(gs.replayed),
                static_cast<long long>(gs.segments));
    // the first step of each key (a cache that grew has new buffers) is recorded, the second
    // captured, the others replayed; a step that finds less than two rows to spare in a cache runs
    // plainly and grows it (at most once per growth: three growths of two caches here)
    // A prompt longer than 14 tokens gets a cache of exactly its rows + 2 (kv_reserve's floor is
    // 16), so its first key serves one step: recorded, never captured.
    const int64_t single = r.prompt > 14 ? 1 : 0;
    CHECK(gs.recorded >= 2);
    CHECK(gs.captured + single == gs.recorded);
    CHECK(gs.recorded + gs.captured + gs.replayed + 6 >= kSteps);
    CHECK(gs.recorded + gs.captured + gs.replayed <= kSteps);
    if (paused) CHECK(gs.segments > gs.captured + gs.replayed);  // a segment per MoE layer, and the tail
    else CHECK(gs.segments == gs.captured + gs.replayed);
    CHECK(plain.graph_stats().recorded == 0);
  }
}

TEST_CASE("cuda graphs: greedy generation with graphs=on equals graphs=off") {
  Model m("tiny-qwen35");
  const std::vector<int32_t> prompt = random_ids(11, m.cfg.vocab_size, 9);
  GenerateOptions go;
  go.max_new_tokens = 30;
  CudaBackend plain(0), graphed(0, GemmKind::cublas, true);
  Engine a(m.cfg, m.w, plain), b(m.cfg, m.w, graphed);
  const std::vector<int32_t> want = generate(a, {prompt}, go)[0].tokens;
  const std::vector<int32_t> got = generate(b, {prompt}, go)[0].tokens;
  std::printf("e2e-check tiny-qwen35 backend=cuda greedy graphs=on vs graphs=off: %s (%zu tokens, %lld replayed)\n",
              got == want ? "equal" : "DIFFER", want.size(), static_cast<long long>(graphed.graph_stats().replayed));
  CHECK(got == want);
  CHECK(graphed.graph_stats().replayed > 0);
}

TEST_CASE("cuda graphs: a step that does not match its key's record is an error, and the backend goes on") {
  Model m("tiny-qwen35");
  CudaBackend be(0, GemmKind::cublas, true);
  const Tensor x = be.from_host(std::vector<double>(64, 0.5), {4, 16}, DType::bf16);
  auto step = [&](int64_t cols) {
    REQUIRE(be.graph_step_begin("k"));
    Tensor y = be.add(be.slice_cols(x, 0, cols), be.slice_cols(x, 0, cols));
    be.graph_step_end();
    return y;
  };
  step(8);  // recorded
  step(8);  // captured
  std::vector<float> y = be.to_host_f32(step(8));  // replayed
  CHECK(y == std::vector<float>(32, 1.0f));
  REQUIRE(be.graph_step_begin("k"));
  std::string msg;
  try {
    (void)be.slice_cols(x, 0, 4);  // a 16-byte slice where the record has 32 bytes
  } catch (const std::logic_error& e) {
    msg = e.what();
  }
  CHECK(msg.find("differs from the step recorded for its key") != std::string::npos);
  CHECK(msg.find("slice_cols") != std::string::npos);
  be.graph_step_abort();
  // the key was forgotten: recorded again, and plain ops work
  std::vector<float> again = be.to_host_f32(step(4));
  CHECK(again == std::vector<float>(16, 1.0f));
  CHECK(be.graph_stats().recorded == 2);
  // a synchronisation inside a capture invalidates it (CUDA's rule): the error comes out, abort
  // ends the capture, and the next step of the key is recorded again
  REQUIRE(be.graph_step_begin("k"));  // captured
  (void)be.add(be.slice_cols(x, 0, 4), be.slice_cols(x, 0, 4));
  CHECK_THROWS_AS(be.sync(), UntestableError);
  be.graph_step_abort();
  CHECK(be.to_host_f32(step(4)) == std::vector<float>(16, 1.0f));
  CHECK(be.graph_stats().recorded == 3);
  CHECK(be.to_host_f32(step(4)) == std::vector<float>(16, 1.0f));  // captured
  CHECK(be.to_host_f32(step(4)) == std::vector<float>(16, 1.0f));  // replayed
  CHECK(be.graph_stats().replayed == 3);  // with the replay that failed its check above
}

// A replayed step brings its host inputs (token ids, positions, cache rows, sequence tables) to the
// device in one copy: the staging block's, the first node of its graph (counted by the emulator).
TEST_CASE("cuda graphs: a replayed decode step uploads its host inputs in one copy") {
  if (!cuda::counters_supported()) return;  // counts: the emulator only
  for (const char* preset : {"tiny-qwen35", "tiny-qwen35-moe"}) {
    CAPTURE(preset);
    Model m(preset);
    CudaBackend be(0, GemmKind::automatic, /*graphs=*/true);
    Engine eng(m.cfg, m.w, be, engine_options(parse_run_config("backend=cuda")));
    const int64_t V = m.cfg.vocab_size;
    std::vector<SeqState> st;
    st.push_back(eng.new_state());
    st.push_back(eng.new_state());
    eng.forward({SeqInput{&st[0], random_ids(13, V, 1)}, SeqInput{&st[1], random_ids(5, V, 2)}});
    for (int s = 0; s < 8; ++s) {  // the cache growths (plain steps), then record, capture, replays
      const std::vector<int32_t> t = random_ids(2, V, 100 + static_cast<uint32_t>(s));
      eng.forward({SeqInput{&st[0], {t[0]}}, SeqInput{&st[1], {t[1]}}});
    }
    const cuda::GraphStats before = be.graph_stats();
    const std::vector<int32_t> t = random_ids(2, V, 200);
    cuda::counters_start();
    eng.forward({SeqInput{&st[0], {t[0]}}, SeqInput{&st[1], {t[1]}}});
    const cuda::DeviceCounters d = cuda::counters_read();
    cuda::counters_stop();
    const cuda::GraphStats after = be.graph_stats();
    CHECK(after.replayed == before.replayed + 1);
    CHECK(d.graph_launches == 1);
    CHECK(d.copies_h2d == 1);
    CHECK(d.bytes_h2d > 0);
    CHECK(d.copies_d2h == 0);
    CHECK(d.launches > 0);
  }
}
