// GPU: MTP speculative decoding (engine/spec_decode.h) on backend=cuda, with the GDN core on the
// device: greedy output with mtp=2 equals mtp=0 token for token, and verify + rollback to m accepted
// drafts leaves the state (positions, KV rows, conv windows, S, the MTP cache) bit-identical to plain
// decoding of the m+1 tokens, and both go on with identical logits. The verify pass runs one-row
// forwards (plain decode's calls) and the kernels are deterministic, so equality is exact.
// Skips without a device (tests/cuda/main.cpp).
#include <doctest/doctest.h>

#include <cstring>

#include "cuda_test_util.h"
#include "cuda/cuda_backend.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/spec_decode.h"

using namespace degen;
using test::random_ids;

namespace {

// A preset with its MTP layer, on backend=cuda.
struct CudaModel : test::SynthModel {
  std::unique_ptr<CudaBackend> be;
  std::unique_ptr<Engine> eng;
  explicit CudaModel(const std::string& preset) : SynthModel(preset, /*mtp=*/true) {
    be = std::make_unique<CudaBackend>(0);
    eng = std::make_unique<Engine>(cfg, w, *be, EngineOptions{GdnAlgo::chunked});
  }
};

GenerateOptions greedy(int max_new, int k) {
  GenerateOptions go;
  go.max_new_tokens = max_new;
  go.mtp.draft_tokens = k;
  return go;
}

// Bytes of a device tensor's first `rows` rows (all when rows < 0).
std::vector<uint8_t> bytes(CudaBackend& be, const Tensor& t, int64_t rows = -1) {
  if (t.empty()) return {};
  const Tensor h = be.to_host(rows < 0 ? t : t.slice0(0, rows));
  const uint8_t* p = h.data<uint8_t>();
  return std::vector<uint8_t>(p, p + h.nbytes());
}

void check_same_state(CudaBackend& be, const SeqState& a, const SeqState& b) {
  CHECK(a.pos == b.pos);
  CHECK(a.mtp_pos == b.mtp_pos);
  REQUIRE(a.kv.size() == b.kv.size());
  for (size_t l = 0; l < a.kv.size(); ++l) {
    CAPTURE(l);
    CHECK(a.kv[l].len == b.kv[l].len);
    if (a.kv[l].len > 0) {
      CHECK(bytes(be, a.kv[l].k, a.kv[l].len) == bytes(be, b.kv[l].k, b.kv[l].len));
      CHECK(bytes(be, a.kv[l].v, a.kv[l].len) == bytes(be, b.kv[l].v, b.kv[l].len));
    }
    CHECK(bytes(be, a.gdn[l].conv) == bytes(be, b.gdn[l].conv));
    CHECK(bytes(be, a.gdn[l].S) == bytes(be, b.gdn[l].S));
  }
  CHECK(a.mtp_kv.len == b.mtp_kv.len);
  if (a.mtp_kv.len > 0) {
    CHECK(bytes(be, a.mtp_kv.k, a.mtp_kv.len) == bytes(be, b.mtp_kv.k, b.mtp_kv.len));
    CHECK(bytes(be, a.mtp_kv.v, a.mtp_kv.len) == bytes(be, b.mtp_kv.v, b.mtp_kv.len));
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("cuda mtp: greedy output with mtp=2 equals mtp=0 on backend=cuda") {
  for (const char* preset : {"tiny-qwen35", "tiny-qwen3next"}) {
    SUBCASE(preset) {
      CudaModel m(preset);
      const std::vector<int32_t> prompt = random_ids(13, m.cfg.vocab_size, 5);
      const std::vector<int32_t> ref = generate(*m.eng, {prompt}, greedy(40, 0))[0].tokens;
      const GenerateResult r = generate(*m.eng, {prompt}, greedy(40, 2))[0];
      std::printf("e2e-check %-16s backend=cuda greedy mtp=2 vs mtp=0: %s (%zu tokens)\n", preset,
                  r.tokens == ref ? "equal" : "DIFFER", ref.size());
      CHECK(r.tokens == ref);
      REQUIRE(r.spec.has_value());
    }
  }
}

TEST_CASE("cuda mtp: rollback to m accepted drafts leaves the state of plain decoding, bit for bit, on backend=cuda") {
  CudaModel m("tiny-qwen35");
  Engine& eng = *m.eng;
  CudaBackend& be = *m.be;
  const int64_t V = m.cfg.vocab_size, H = m.cfg.hidden_size;
  const int k = 2;
  SeqState base = eng.new_state();
  const std::vector<int32_t> prompt = random_ids(70, V, 3);  // > one chunk: the chunked prefill on the device
  ForwardOptions fo;
  fo.keep_hidden = true;
  ForwardOutput pre = eng.forward({SeqInput{&base, prompt}}, fo);
  const std::vector<int32_t> toks = random_ids(k + 1, V, 4);
  std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
  next.push_back(toks[0]);
  eng.mtp({MtpInput{&base, pre.hidden, next}});
  for (int mm = 0; mm <= k; ++mm) {
    CAPTURE(mm);
    SeqState spec = eng.snapshot(base);
    eng.mtp({MtpInput{&spec, be.from_host(std::vector<double>(static_cast<size_t>((k - 1) * H), 0.1), {k - 1, H}),
                      std::vector<int32_t>(toks.begin() + 1, toks.begin() + k)}});
    VerifyPass vp = verify_tokens(eng, spec, toks, nullptr, false);
    rollback_target(spec, vp, mm);
    rollback_mtp(spec, base.mtp_pos);
    SeqState plain = eng.snapshot(base);
    for (int j = 0; j <= mm; ++j) eng.forward({SeqInput{&plain, {toks[static_cast<size_t>(j)]}}});
    check_same_state(be, spec, plain);
    const int32_t after = toks[static_cast<size_t>(k)] ^ 1;
    ForwardOutput a = eng.forward({SeqInput{&spec, {after}}}, fo), b = eng.forward({SeqInput{&plain, {after}}}, fo);
    CHECK(same_bits(be.to_host_f32(a.logits), be.to_host_f32(b.logits)));
  }
}
