// Helpers shared by the engine tests: load a checkpoint folder into a ready Engine, compare
// tensors by relative L2 error, read reference tensors.
#pragma once
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "helpers.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace degen::test {

// ||a - b|| / ||b|| in double (b the reference). Size mismatch or non-finite values: +inf.
inline double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  return rel_l2(std::vector<double>(a.begin(), a.end()), std::vector<double>(b.begin(), b.end()));
}

// A model folder opened and bound, with a CPU backend and an engine.
struct LoadedModel {
  ModelConfig cfg;
  std::unique_ptr<Checkpoint> ckpt;
  ModelWeights w;
  std::unique_ptr<CpuBackend> be;
  std::unique_ptr<Engine> eng;

  explicit LoadedModel(const std::filesystem::path& dir, CpuPrecision p = CpuPrecision::ref,
                       GdnAlgo algo = GdnAlgo::chunked) {
    cfg = load_model_config(dir);
    ckpt = Checkpoint::open(dir);
    w = bind_weights(cfg, *ckpt);
    be = std::make_unique<CpuBackend>(p);
    eng = std::make_unique<Engine>(cfg, w, *be, EngineOptions{algo});
  }
};

// A reference tensor as doubles (F32 / F64 / I64).
inline std::vector<double> ref_values(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find(name);
  if (!t) return {};
  std::vector<double> v(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t->dtype == DType::i64) {
      int64_t x;
      std::memcpy(&x, t->data + 8 * i, 8);
      v[i] = static_cast<double>(x);
    } else {
      v[i] = t->at(i);
      if (t->dtype == DType::f64) std::memcpy(&v[i], t->data + 8 * i, 8);
    }
  }
  return v;
}

inline std::vector<int32_t> ref_ids(const SafetensorsFile& f, const std::string& name) {
  std::vector<int32_t> ids;
  for (double d : ref_values(f, name)) ids.push_back(static_cast<int32_t>(d));
  return ids;
}

inline int64_t argmax(const std::vector<double>& v, int64_t off, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[off + i] > v[off + best]) best = i;
  return best;
}

}  // namespace degen::test
