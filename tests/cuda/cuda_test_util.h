// Helpers of the GPU tests: a synthetic model on disk, seeded inputs scaled like real activations
// (bf16-exact, so every backend gets the same values), host-owned weights, NaN/Inf counts, NMSE,
// and the one-line result records that scripts/gpu-check.sh collects ("op-check ...").
#pragma once
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../helpers.h"
#include "cuda/device_counters.h"
#include "engine/backend.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/synth.h"
#include "model/weights.h"
#include "util/dtype.h"

namespace degen::test {

// A synthetic preset written to a temporary folder, opened and bound (the weights stay on the host;
// each test makes the backends it compares). mtp: with the MTP layer.
struct SynthModel {
  TempDir dir{"cuda-model"};
  ModelConfig cfg;
  std::unique_ptr<Checkpoint> ckpt;
  ModelWeights w;
  explicit SynthModel(const std::string& preset, bool mtp = false) {
    const SynthPreset& sp = find_synth_preset(preset);
    SynthOptions o = sp.options;
    if (mtp) o.mtp = true;
    synth_checkpoint(sp.config, o, dir.path());
    cfg = load_model_config(dir.path());
    ckpt = Checkpoint::open(dir.path());
    w = bind_weights(cfg, *ckpt);
  }
};

// n values ~ N(0, scale²) rounded to bf16 (exactly representable in every backend's dtype).
inline std::vector<double> randn_bf16(size_t n, double scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = round_bf16(static_cast<float>(d(rng) * scale));
  return v;
}

// A weight owned by the test, stored as `dtype` (bf16 or f32), seen through a TensorView.
struct HostWeight {
  std::vector<uint8_t> bytes;
  TensorView view;
  HostWeight(const std::string& name, std::vector<int64_t> shape, const std::vector<double>& values,
             DType dtype = DType::bf16) {
    view.name = name;
    view.dtype = dtype;
    view.shape = std::move(shape);
    bytes.resize(values.size() * dtype_size(dtype));
    for (size_t i = 0; i < values.size(); ++i) {
      if (dtype == DType::bf16) {
        uint16_t b = f32_to_bf16(static_cast<float>(values[i]));
        std::memcpy(bytes.data() + 2 * i, &b, 2);
      } else {
        float f = static_cast<float>(values[i]);
        std::memcpy(bytes.data() + 4 * i, &f, 4);
      }
    }
    view.data = bytes.data();
    view.nbytes = bytes.size();
  }
  HostWeight(const HostWeight&) = delete;
};

inline size_t count_nonfinite(const std::vector<float>& v) {
  size_t n = 0;
  for (float x : v) n += !std::isfinite(x);
  return n;
}

// Σ(a - b)² / Σ b² over the elements (NaN when b is all zeros and a is not).
inline double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den == 0 ? (num == 0 ? 0 : NAN) : num / den;
}

// Calls, among the emulator's counted ones, of the kernels whose name starts with `prefix`.
inline int64_t calls_named(const cuda::DeviceCounters& c, const std::string& prefix) {
  int64_t n = 0;
  for (const cuda::CallTraffic& t : c.by_name) n += t.name.rfind(prefix, 0) == 0 ? t.calls : 0;
  return n;
}

// Fraction of elements equal bit for bit after rounding both to bf16.
inline double bf16_exact_fraction(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.empty()) return 1.0;
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += f32_to_bf16(a[i]) == f32_to_bf16(b[i]);
  return double(same) / double(a.size());
}

// One result line: gpu-check.sh greps "op-check" lines into its summary.
inline void report_op(const std::string& op, const std::string& shape, double nmse_emu, double nmse_ref, double exact,
                      double limit, bool pass) {
  std::printf("op-check %-34s %-26s nmse(vs cpu:bf16) %9.2e  nmse(vs cpu:ref) %9.2e  bf16-exact %6.2f%%  limit %7.1e  %s\n",
              op.c_str(), shape.c_str(), nmse_emu, nmse_ref, 100.0 * exact, limit, pass ? "ok" : "FAIL");
  std::fflush(stdout);
}

}  // namespace degen::test
