// CpuBackend: memory, host transfer and layout ops. The numeric ops live in one file per family.
#include "cpu/cpu_backend.h"

#include <cstring>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/common.h"

namespace degen {

using cpu::dispatch;

const char* cpu_precision_name(CpuPrecision p) {
  switch (p) {
    case CpuPrecision::ref: return "ref";
    case CpuPrecision::fp64: return "fp64";
    case CpuPrecision::bf16: return "bf16";
    case CpuPrecision::q8_0: return "q8_0";
  }
  return "?";
}

CpuBackend::CpuBackend(CpuPrecision precision) : precision_(precision) {
  // Until the engine says otherwise, every storage dtype is this backend's own.
  numerics_.ssm_dtype = state_dtype();
  numerics_.conv_dtype = act_dtype();
  numerics_.kv_dtype = act_dtype();
}

std::string CpuBackend::name() const { return std::string("cpu:") + cpu_precision_name(precision_); }

DType CpuBackend::act_dtype() const {
  switch (precision_) {
    case CpuPrecision::ref: return DType::f32;
    case CpuPrecision::fp64: return DType::f64;
    case CpuPrecision::bf16: return DType::bf16;
    case CpuPrecision::q8_0: return DType::f32;
  }
  return DType::f32;
}

Tensor CpuBackend::convert(const Tensor& t, DType to) {
  Tensor out = host_tensor(t.shape, to);
  const size_t n = static_cast<size_t>(t.numel());
  if (to == DType::f32 && (t.dtype == DType::bf16 || t.dtype == DType::f8_e4m3)) {  // widening the caches: exact
    float* o = out.data<float>();
    if (t.dtype == DType::bf16) {
      const uint16_t* p = t.data<uint16_t>();
      for (size_t i = 0; i < n; ++i) o[i] = bf16_to_f32(p[i]);
    } else {
      static const std::vector<float> table = [] {
        std::vector<float> v(256);
        for (int i = 0; i < 256; ++i) v[static_cast<size_t>(i)] = e4m3_to_f32(static_cast<uint8_t>(i));
        return v;
      }();
      const uint8_t* p = t.data<uint8_t>();
      for (size_t i = 0; i < n; ++i) o[i] = table[p[i]];
    }
    return out;
  }
  for (size_t i = 0; i < n; ++i) cpu::store_elem(out.raw(), to, i, cpu::load_f64(t.raw(), t.dtype, i));
  return out;
}

Tensor CpuBackend::wide(const Tensor& x) { return x.dtype == compute_dtype() ? x : convert(x, compute_dtype()); }

Tensor CpuBackend::store(const Tensor& t) { return t.dtype == act_dtype() ? t : convert(t, act_dtype()); }

int CpuBackend::num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

void CpuBackend::prefetch(const TensorView& w) { read_ahead(w); }

void CpuBackend::bind_thread() {
#ifdef _OPENMP
  if (threads_ > 0) omp_set_num_threads(threads_);
#endif
}

Tensor CpuBackend::zeros(std::vector<int64_t> shape, DType dtype) { return host_tensor(std::move(shape), dtype); }

Tensor CpuBackend::clone(const Tensor& t) {
  Tensor c = host_tensor(t.shape, t.dtype);
  if (t.nbytes()) std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}

std::vector<float> CpuBackend::to_host_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(t.raw(), t.dtype, i);
  return out;
}

std::vector<double> CpuBackend::to_host_f64(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::f64) {
    std::memcpy(out.data(), t.raw(), t.nbytes());
  } else {
    for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(t.raw(), t.dtype, i);
  }
  return out;
}

Tensor CpuBackend::from_host(const std::vector<double>& v, std::vector<int64_t> shape, DType dtype) {
  Tensor t = host_tensor(std::move(shape), dtype);
  DEGEN_ASSERT(static_cast<int64_t>(v.size()) == t.numel(), "from_host: ", v.size(), " values for ", shape_str(t.shape));
  for (size_t i = 0; i < v.size(); ++i) cpu::store_elem(t.raw(), dtype, i, v[i]);
  return t;
}

Tensor CpuBackend::slice_cols(const Tensor& x, int64_t c0, int64_t n) {
  const int64_t R = x.rows(), C = x.cols();
  DEGEN_ASSERT(c0 >= 0 && n >= 0 && c0 + n <= C, "slice_cols ", c0, "+", n, " of ", C);
  Tensor out = host_tensor({R, n}, x.dtype);
  const size_t es = dtype_size(x.dtype);
  const uint8_t* src = static_cast<const uint8_t*>(x.raw());
  uint8_t* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t r = 0; r < R; ++r) std::memcpy(dst + r * n * es, src + (r * C + c0) * es, n * es);
  return out;
}

Tensor CpuBackend::gather_cols(const Tensor& x, const std::vector<int64_t>& cols) {
  const int64_t R = x.rows(), C = x.cols(), n = static_cast<int64_t>(cols.size());
  Tensor out = host_tensor({R, n}, x.dtype);
  const size_t es = dtype_size(x.dtype);
  const uint8_t* src = static_cast<const uint8_t*>(x.raw());
  uint8_t* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t j = 0; j < n; ++j) DEGEN_ASSERT(cols[j] >= 0 && cols[j] < C, "gather_cols index ", cols[j], " of ", C);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < n; ++j) std::memcpy(dst + (r * n + j) * es, src + (r * C + cols[j]) * es, es);
  return out;
}

Tensor CpuBackend::concat_cols(const Tensor& a, const Tensor& b) {
  DEGEN_ASSERT(a.rows() == b.rows() && a.dtype == b.dtype, "concat_cols: ", shape_str(a.shape), " and ", shape_str(b.shape));
  const int64_t R = a.rows(), ca = a.cols(), cb = b.cols();
  Tensor out = host_tensor({R, ca + cb}, a.dtype);
  const size_t es = dtype_size(a.dtype);
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t r = 0; r < R; ++r) {
    std::memcpy(dst + r * (ca + cb) * es, static_cast<const uint8_t*>(a.raw()) + r * ca * es, ca * es);
    std::memcpy(dst + (r * (ca + cb) + ca) * es, static_cast<const uint8_t*>(b.raw()) + r * cb * es, cb * es);
  }
  return out;
}

Tensor CpuBackend::gather_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  const int64_t R = x.rows(), C = x.cols(), n = static_cast<int64_t>(rows.size());
  Tensor out = host_tensor({n, C}, x.dtype);
  const size_t es = dtype_size(x.dtype);
  for (int64_t i = 0; i < n; ++i) {
    DEGEN_ASSERT(rows[i] >= 0 && rows[i] < R, "gather_rows index ", rows[i], " of ", R);
    std::memcpy(static_cast<uint8_t*>(out.raw()) + i * C * es, static_cast<const uint8_t*>(x.raw()) + rows[i] * C * es,
                C * es);
  }
  return out;
}

Tensor CpuBackend::concat_rows(const std::vector<Tensor>& parts) {
  DEGEN_ASSERT(!parts.empty(), "concat_rows of nothing");
  int64_t R = 0;
  const int64_t C = parts[0].cols();
  for (const Tensor& p : parts) {
    DEGEN_ASSERT(p.cols() == C && p.dtype == parts[0].dtype, "concat_rows: ", shape_str(p.shape), " vs ",
                 shape_str(parts[0].shape));
    R += p.rows();
  }
  Tensor out = host_tensor({R, C}, parts[0].dtype);
  size_t off = 0;
  for (const Tensor& p : parts) {
    if (p.nbytes()) std::memcpy(static_cast<uint8_t*>(out.raw()) + off, p.raw(), p.nbytes());
    off += p.nbytes();
  }
  return out;
}

void CpuBackend::scatter_add_rows(Tensor& out, const Tensor& y, const std::vector<int64_t>& rows,
                                  const std::vector<double>& w) {
  const int64_t C = out.cols();
  DEGEN_ASSERT(y.cols() == C && y.rows() == static_cast<int64_t>(rows.size()) && w.size() == rows.size() &&
                   y.dtype == out.dtype, "scatter_add_rows shapes");
  for (size_t i = 0; i < rows.size(); ++i) DEGEN_ASSERT(rows[i] >= 0 && rows[i] < out.rows(), "scatter_add_rows index");
  if (out.dtype != compute_dtype()) {
    // Narrow storage: each weighted expert output and each running sum rounded to out's dtype.
    const DType d = out.dtype;
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t c = 0; c < C; ++c) {
        const size_t o = static_cast<size_t>(rows[i] * C + c), s = i * static_cast<size_t>(C) + c;
        const double wy = cpu::round_to(w[i] * cpu::load_f64(y.raw(), d, s), d);
        cpu::store_elem(out.raw(), d, o, cpu::load_f64(out.raw(), d, o) + wy);
      }
    return;
  }
  dispatch(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    T* o = out.data<T>();
    const T* s = y.data<T>();
    for (size_t i = 0; i < rows.size(); ++i) {
      T* orow = o + rows[i] * C;
      const T* srow = s + static_cast<int64_t>(i) * C;
      // note: the weighted expert output is rounded to T before the add, as HF does (weights * out, index_add_).
      for (int64_t c = 0; c < C; ++c) orow[c] = static_cast<T>(orow[c] + static_cast<T>(w[i] * srow[c]));
    }
  });
}

}  // namespace degen
