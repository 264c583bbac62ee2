// Checkpoint digests (digests.h): a sample of the weight values and every tensor's content hash.
#include "model/digests.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "util/sha256.h"

namespace degen {

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

}  // namespace degen
