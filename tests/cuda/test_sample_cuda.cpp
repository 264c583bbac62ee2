// GPU: the device sampler (src/cuda/sampler.h, kernels/sample.cu) against the CPU sampler
// (src/engine/sampler.h): on random logits (f32 and bf16 rows, vocabularies 1000 and 50257) and
// random settings (greedy, temperature, top-k, top-p, min-p, repetition and presence penalties,
// banned ids), with the same (seed; case, position), the two must return the same token. A
// difference is allowed only where the CPU's own draw lies within 1e-9 (relative) of a CDF
// boundary, where the device's parallel fp64 sums may round the other way (sampler.h note), and
// such cases must stay rare. Degenerate rows (NaN, -inf, +inf, ties) follow the CPU's rules exactly.
// Skips without a device (tests/cuda/main.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>

#include "../toggle_test_util.h"
#include "cuda/cuda_backend.h"
#include "cuda/sampler.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "util/error.h"

using namespace degen;

namespace {

// Distance of the CPU's draw to the nearest CDF boundary of its distribution, relative to the total.
double cdf_margin(const std::vector<double>& p, double u) {
  double total = 0;
  for (double x : p) total += x;
  const double target = u * total;
  double c = 0, best = INFINITY;
  for (double x : p) {
    if (!(x > 0)) continue;
    c += x;
    best = std::min(best, std::abs(c - target));
  }
  return best / total;
}

std::vector<int32_t> random_ids(std::mt19937& rng, size_t n, int64_t V) {
  std::uniform_int_distribution<int32_t> d(-2, static_cast<int32_t>(V + 1));  // a few out of range
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("cuda sampler: the device sampler returns the CPU sampler's token on random rows and settings") {
  CudaBackend gpu(0);
  gpu.set_guard_check(true);
  std::mt19937 rng(7);
  int cases = 0, differ = 0;
  for (int64_t V : {int64_t(1000), int64_t(50257)})
    for (DType dt : {DType::f32, DType::bf16})
      for (int c = 0; c < 60; ++c) {
        std::normal_distribution<double> nd(0.0, 3.0);
        std::vector<double> lv(static_cast<size_t>(V));
        for (double& x : lv) x = nd(rng);
        if (c % 7 == 0) lv[static_cast<size_t>(c) % V] = lv[(static_cast<size_t>(c) + 1) % V] = 14.0;  // a tie at the top
        const Tensor dev = gpu.from_host(lv, {1, V}, dt);
        const std::vector<float> host = gpu.to_host_f32(dev);  // the values the device holds
        std::vector<uint8_t> banned;
        if (c % 3 == 0) {
          banned.assign(static_cast<size_t>(V), 0);
          for (int64_t i = V - V / 50; i < V; ++i) banned[static_cast<size_t>(i)] = 1;
        }
        SamplingParams p;
        p.seed = 1000 + static_cast<uint64_t>(c);
        const int mode = c % 6;
        p.temperature = mode == 0 ? 0.0 : std::vector<double>{0.6, 1.0, 1.5, 0.05, 2.0}[static_cast<size_t>(c) % 5];
        if (mode == 1 || mode == 4) p.top_k = std::vector<int>{1, 20, 64}[static_cast<size_t>(c) % 3];
        if (mode == 2 || mode == 4) p.top_p = std::vector<double>{0.8, 0.95, 0.3}[static_cast<size_t>(c) % 3];
        if (mode == 3 || mode == 4) p.min_p = std::vector<double>{0.05, 0.2}[static_cast<size_t>(c) % 2];
        if (mode == 5) {
          p.repetition_penalty = 1.3;
          p.presence_penalty = 1.5;
          p.top_p = 0.95;
          p.top_k = 20;
        }
        const std::vector<int32_t> prompt = random_ids(rng, 30, V), generated = random_ids(rng, 12, V);
        const uint32_t case_index = static_cast<uint32_t>(c), position = static_cast<uint32_t>(42 + c);
        const int32_t want = sample(p, host, banned, prompt, generated, case_index, position);
        const int32_t got = cuda::sample_on_device(gpu, p, dev, 0, banned, prompt, generated, case_index, position);
        ++cases;
        if (got != want) {
          ++differ;
          const std::vector<double> dist = sampling_distribution(p, host, banned, prompt, generated);
          const double m = cdf_margin(dist, sampling_uniform(p.seed, case_index, position));
          MESSAGE("V=" << V << " " << dtype_name(dt) << " case " << c << ": device " << got << ", cpu " << want
                       << ", CDF margin " << m);
          CHECK_MESSAGE(m < 1e-9, "tokens differ away from a CDF boundary");
        }
      }
  std::printf("op-check %-34s %-26s tokens differing %d of %d  %s\n", "sample_on_device", "V=1000,50257", differ, cases,
              differ * 100 <= cases ? "ok" : "FAIL");
  CHECK(differ * 100 <= cases);
  const std::vector<std::string> bad = gpu.check_guards();
  CHECK_MESSAGE(bad.empty(), "a sampler kernel wrote outside its buffer");
}

TEST_CASE("cuda sampler: degenerate rows follow the CPU rules (NaN, -inf, +inf, ties, every id banned)") {
  CudaBackend gpu(0);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::vector<double>> rows = {
      {1.0, 3.0, 3.0, 2.0, -1.0},        // tie: lowest id
      {nan, nan, nan, nan, nan},         // every id NaN: lowest allowed
      {-inf, -inf, 0.5, -inf, 0.25},     // -inf removed
      {0.0, inf, 1.0, inf, 2.0},         // +inf ids share the mass
      {nan, 2.0, nan, 1.0, 0.0}};
  const std::vector<uint8_t> banned = {1, 0, 0, 0, 0};
  for (size_t r = 0; r < rows.size(); ++r)
    for (double temp : {0.0, 0.7})
      for (bool ban : {false, true}) {
        CAPTURE(r);
        CAPTURE(temp);
        CAPTURE(ban);
        SamplingParams p;
        p.temperature = temp;
        p.seed = 5;
        const Tensor dev = gpu.from_host(rows[r], {1, 5}, DType::f32);
        const std::vector<float> host = gpu.to_host_f32(dev);
        const std::span<const uint8_t> b = ban ? std::span<const uint8_t>(banned) : std::span<const uint8_t>();
        for (uint32_t pos = 0; pos < 8; ++pos)
          CHECK(cuda::sample_on_device(gpu, p, dev, 0, b, {}, {}, 3, pos) == sample(p, host, b, {}, {}, 3, pos));
      }
  const Tensor dev = gpu.from_host({1.0, 2.0}, {1, 2}, DType::f32);
  const std::vector<uint8_t> all = {1, 1};
  CHECK_THROWS_AS(cuda::sample_on_device(gpu, SamplingParams{}, dev, 0, all, {}, {}, 0, 0), InputError);
  SamplingParams bad;
  bad.top_p = 1.5;
  CHECK_THROWS_AS(cuda::sample_on_device(gpu, bad, dev, 0, {}, {}, {}, 0, 0), InputError);
}

TEST_CASE("cuda sampler: generation on backend=cuda samples on the device, reproducibly") {
  // Every generated token is chosen by the device sampler (the logits never come to the host); the
  // same seed gives the same tokens; they are in the vocabulary and never a banned id. Whether they
  // equal the CPU's is the compare e2e test's job (the sampled-story case of the golden records).
  const auto& dir = degen::test::synth_model("tiny-qwen35");
  degen::test::ToggledModel m(dir, "backend=cuda");
  auto& be = dynamic_cast<CudaBackend&>(*m.be);
  const std::vector<int32_t> ids = degen::test::test_ids(12, m.cfg.vocab_size, 5);
  std::vector<uint8_t> mask(static_cast<size_t>(m.cfg.vocab_size), 0);
  for (size_t i = 0; i < mask.size(); i += 7) mask[i] = 1;
  GenerateOptions go;
  go.max_new_tokens = 10;
  go.sampling.temperature = 0.9;
  go.sampling.top_p = 0.95;
  go.sampling.seed = 77;
  go.vocab_mask = &mask;
  be.stats().reset();
  const std::vector<GenerateResult> a = generate(*m.eng, {ids, ids}, go);
  CHECK(be.stats().device_samples == static_cast<int64_t>(a[0].tokens.size() + a[1].tokens.size()));
  const std::vector<GenerateResult> b = generate(*m.eng, {ids, ids}, go);
  CHECK(a[0].tokens == b[0].tokens);
  CHECK(a[1].tokens == b[1].tokens);
  for (const auto& r : a)
    for (int32_t t : r.tokens) {
      CHECK(t >= 0);
      CHECK(t < m.cfg.vocab_size);
      CHECK(mask[static_cast<size_t>(t)] == 0);
    }
  CHECK(a[0].tokens != a[1].tokens);  // two cases, two Philox streams (a tie here is ~V^-10)
}
