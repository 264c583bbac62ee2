// CudaBackend: construction, device memory, host transfers, the weight cache and the layout ops.
// The numeric ops live in one file per family, as in src/cpu: elementwise.cpp, rmsnorm.cpp,
// rope.cpp, attention.cpp, matmul.cpp, moe.cpp, gdn.cpp (conv1d, gates, delta rule).
#include "cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "kernels/check.h"
#include "cuda/context.h"
#include "cuda/device_counters.h"
#include "cuda/graphs.h"
#include "kernels/layout.h"
#include "util/error.h"

namespace degen {

using cuda::CudaContext;

CudaBackend::CudaBackend(int device, GemmKind gemm, bool graphs, bool reference)
    : ctx_(CudaContext::open(device)), gemm_(gemm), reference_(reference) {
  if (graphs) graphs_ = std::make_unique<cuda::StepGraphs>(ctx_);
  // The storage defaults (Engine::numerics overrides them per layer): the activation dtype.
  numerics_.ssm_dtype = state_dtype();
  numerics_.conv_dtype = act_dtype();
  numerics_.kv_dtype = act_dtype();
}

CudaBackend::~CudaBackend() {
  graphs_.reset();
  try {
    ctx_->sync();
  } catch (...) {  // note: never throw from a destructor; a pending fault was already reported or is moot
  }
}

std::string CudaBackend::name() const {
  return cat("cuda:", ctx_->device(), reference_ ? ":ref" : "",
             gemm_ == GemmKind::simple ? ":gemm-simple" : gemm_ == GemmKind::cublas ? ":gemm-cublas" : "");
}

void CudaBackend::sync() { ctx_->sync(); }

void CudaBackend::begin_layer(const LayerNumerics& n) {
  numerics_ = n;
  if (layer_marks_on_) layer_marks_.push_back({n.layer, cuda::counters_read().calls()});
}

void CudaBackend::bind_thread() { CUDA_CHECK(cudaSetDevice(ctx_->device())); }

// ---- CUDA graphs ----

bool CudaBackend::graph_step_begin(const std::string& key) {
  // note: bench's GDN timing synchronises inside the step, and the sentinel guards read every
  // buffer back: neither can run in a graph, so those steps run as plain launches.
  if (!graphs_ || stats_.time_gdn || guard_) return false;
  graphs_->begin(key);
  return true;
}
void CudaBackend::graph_step_pause() { graphs_->pause(); }
void CudaBackend::graph_step_resume() { graphs_->resume(); }
void CudaBackend::graph_step_end() { graphs_->end(); }
void CudaBackend::graph_step_abort() noexcept {
  if (graphs_) graphs_->abort();
}
std::string CudaBackend::graph_summary() const {
  if (!graphs_) return "";
  const cuda::GraphStats g = graphs_->stats();
  return cat("graphs=on: ", g.replayed, " decode steps replayed from CUDA graphs, ", g.captured, " captured, ", g.recorded,
             " recorded with plain launches (the first step of each batch shape and cache size), ", g.segments,
             " graph launches");
}

void CudaBackend::set_graphs(bool on) {
  if (on && !graphs_) graphs_ = std::make_unique<cuda::StepGraphs>(ctx_);
  if (!on) graphs_.reset();
}

cuda::GraphStats CudaBackend::graph_stats() const { return graphs_ ? graphs_->stats() : cuda::GraphStats{}; }
bool CudaBackend::graphs_segment() const { return graphs_ && graphs_->in_segment(); }
bool CudaBackend::enqueue_allowed() { return !cuda::launches_suppressed(); }

void CudaBackend::require_device(const Tensor& t, const char* op) const {
  if (t.device != Device::cuda || t.empty())
    throw std::logic_error(cat("cuda backend: ", op, " was given a ", t.empty() ? "empty" : "host", " tensor ",
                               shape_str(t.shape)));
}

// ---- memory ----

Tensor CudaBackend::device_tensor(std::vector<int64_t> shape, DType dtype, const char* what, bool step_buffer) {
  Tensor t;
  t.dtype = dtype;
  t.device = Device::cuda;
  t.shape = std::move(shape);
  if (step_buffer && graphs_segment()) {
    // a graph step's buffer: from its arena (capture, replay), or plain while it is recorded
    t.storage = graphs_->alloc(t.nbytes(), what);
    if (t.storage) return t;
  }
  if (!guard_) {
    t.storage = CudaContext::alloc(ctx_, t.nbytes(), what);
    return t;
  }
  const size_t n = t.nbytes();
  t.storage = CudaContext::alloc(ctx_, n + 2 * kGuardBytes, what);
  t.offset = kGuardBytes;
  CUDA_CHECK(cudaMemsetAsync(t.storage.get(), kGuardByte, kGuardBytes, ctx_->stream()));
  CUDA_CHECK(cudaMemsetAsync(t.storage.get() + kGuardBytes, 0xFF, n, ctx_->stream()));
  CUDA_CHECK(cudaMemsetAsync(t.storage.get() + kGuardBytes + n, kGuardByte, kGuardBytes, ctx_->stream()));
  guarded_.push_back(Guarded{t.storage, n, cat(what, " ", shape_str(t.shape), " ", dtype_name(dtype))});
  return t;
}

std::vector<std::string> CudaBackend::check_guards() {
  std::vector<std::string> bad;
  std::vector<uint8_t> h(2 * kGuardBytes);
  ctx_->sync();
  std::vector<Guarded> alive;
  for (const Guarded& g : guarded_) {
    std::shared_ptr<uint8_t> p = g.storage.lock();
    if (!p) continue;
    CUDA_CHECK(cudaMemcpy(h.data(), p.get(), kGuardBytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(h.data() + kGuardBytes, p.get() + kGuardBytes + g.nbytes, kGuardBytes, cudaMemcpyDeviceToHost));
    size_t before = 0, after = 0;
    for (size_t i = 0; i < kGuardBytes; ++i) {
      before += h[i] != kGuardByte;
      after += h[kGuardBytes + i] != kGuardByte;
    }
    if (before || after) bad.push_back(cat(g.what, ": ", before, " guard bytes changed before, ", after, " after"));
    alive.push_back(g);
  }
  guarded_ = std::move(alive);
  return bad;
}

Tensor CudaBackend::zeros(std::vector<int64_t> shape, DType dtype) {
  Tensor t = device_tensor(std::move(shape), dtype, "zeros");
  if (t.nbytes() && enqueue_allowed()) CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), ctx_->stream()));
  return t;
}

Tensor CudaBackend::clone(const Tensor& t) {
  require_device(t, "clone");
  Tensor c = device_tensor(t.shape, t.dtype, "clone");
  if (t.nbytes() && enqueue_allowed()) CUDA_CHECK(cudaMemcpyAsync(c.raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToDevice, ctx_->stream()));
  return c;
}

// A graph step's host input (capture, replay): its slot of the step's staging block, which the
// step's one copy fills. Empty otherwise; the caller then copies into a buffer of its own, which
// in a recorded step is not the arena's (the signature has the upload only).
Tensor CudaBackend::graph_input(const void* src, const std::vector<int64_t>& shape, DType dtype, const char* what) {
  Tensor t;
  if (!graphs_segment()) return t;
  t.dtype = dtype;
  t.device = Device::cuda;
  t.shape = shape;
  t.storage = graphs_->upload(src, t.nbytes(), what);
  return t.storage ? t : Tensor{};
}

template <typename T>
Tensor CudaBackend::upload(const std::vector<T>& v, DType dtype, const char* what) {
  DEGEN_ASSERT(dtype_size(dtype) == sizeof(T), "upload: element size");
  // Small uploads by content: the engine uploads the same tables at every layer of a step (rope
  // positions twice per attention layer, the sequence tables of conv1d, gdn and attention at each
  // layer), and some at every step (rope frequencies). A hit returns the device copy made before,
  // which kernels only read. Not inside a graph step, whose uploads are staged by StepGraphs.
  constexpr size_t kCacheMaxBytes = size_t(16) << 10, kCacheEntries = 32;
  const size_t nbytes = v.size() * sizeof(T);
  const bool cacheable = !graphs_segment() && !v.empty() && nbytes <= kCacheMaxBytes;
  if (cacheable) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    for (size_t i = upload_cache_.size(); i-- > 0;) {
      CachedUpload& c = upload_cache_[i];
      if (c.dtype == dtype && c.bytes.size() == nbytes && std::equal(c.bytes.begin(), c.bytes.end(), p)) {
        Tensor hit = c.dev;
        if (i + 1 != upload_cache_.size()) std::rotate(upload_cache_.begin() + i, upload_cache_.begin() + i + 1, upload_cache_.end());
        return hit;
      }
    }
  }
  const std::vector<int64_t> shape{static_cast<int64_t>(v.size())};
  if (Tensor staged = graph_input(v.data(), shape, dtype, what); !staged.empty()) return staged;
  Tensor t = device_tensor(shape, dtype, what, /*step_buffer=*/!graphs_segment());
  if (cacheable) {
    if (upload_cache_.size() >= kCacheEntries) upload_cache_.erase(upload_cache_.begin());
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    upload_cache_.push_back(CachedUpload{dtype, std::vector<uint8_t>(p, p + nbytes), t});
  }
  // note: from pageable memory the copy is staged before cudaMemcpyAsync returns, so `v` may go.
  if (!v.empty()) CUDA_CHECK(cudaMemcpyAsync(t.raw(), v.data(), t.nbytes(), cudaMemcpyHostToDevice, ctx_->stream()));
  return t;
}
template Tensor CudaBackend::upload(const std::vector<int32_t>&, DType, const char*);
template Tensor CudaBackend::upload(const std::vector<int64_t>&, DType, const char*);
template Tensor CudaBackend::upload(const std::vector<float>&, DType, const char*);
template Tensor CudaBackend::upload(const std::vector<uint8_t>&, DType, const char*);

Tensor CudaBackend::to_device(const Tensor& host) {
  DEGEN_ASSERT(host.device == Device::cpu, "to_device of a device tensor");
  if (Tensor staged = graph_input(host.raw(), host.shape, host.dtype, "to_device"); !staged.empty()) return staged;
  Tensor t = device_tensor(host.shape, host.dtype, "to_device", /*step_buffer=*/!graphs_segment());
  if (t.nbytes()) CUDA_CHECK(cudaMemcpyAsync(t.raw(), host.raw(), t.nbytes(), cudaMemcpyHostToDevice, ctx_->stream()));
  return t;
}

Tensor CudaBackend::to_host(const Tensor& dev) {
  require_device(dev, "to_host");
  if (graphs_segment())
    throw std::logic_error("graphs=on: a device tensor read on the host inside a graph step (the engine pauses the step around host reads)");
  Tensor h = host_tensor(dev.shape, dev.dtype);
  if (h.nbytes()) CUDA_CHECK(cudaMemcpyAsync(h.raw(), dev.raw(), h.nbytes(), cudaMemcpyDeviceToHost, ctx_->stream()));
  ctx_->sync();
  return h;
}

std::vector<float> CudaBackend::to_host_f32(const Tensor& t) {
  const Tensor h = to_host(t);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(h.raw(), h.dtype, i);
  return out;
}

std::vector<double> CudaBackend::to_host_f64(const Tensor& t) {
  const Tensor h = to_host(t);
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = h.dtype == DType::f64 ? h.data<double>()[i] : static_cast<double>(load_as_f32(h.raw(), h.dtype, i));
  return out;
}

Tensor CudaBackend::from_host(const std::vector<double>& v, std::vector<int64_t> shape, DType dtype) {
  Tensor h = host_tensor(std::move(shape), dtype);
  DEGEN_ASSERT(static_cast<int64_t>(v.size()) == h.numel(), "from_host: ", v.size(), " values for ", shape_str(h.shape));
  // note: the host rounding functions are the device intrinsics' bit for bit (tests/cuda/test_convert_cuda.cpp).
  for (size_t i = 0; i < v.size(); ++i) {
    const float f = static_cast<float>(v[i]);
    switch (dtype) {
      case DType::f32: h.data<float>()[i] = f; break;
      case DType::f64: h.data<double>()[i] = v[i]; break;
      case DType::bf16: h.data<uint16_t>()[i] = f32_to_bf16(f); break;
      case DType::f16: h.data<uint16_t>()[i] = f32_to_f16(f); break;
      case DType::f8_e4m3: h.data<uint8_t>()[i] = f32_to_e4m3(f); break;
      case DType::i32: h.data<int32_t>()[i] = static_cast<int32_t>(v[i]); break;
      case DType::i64: h.data<int64_t>()[i] = static_cast<int64_t>(v[i]); break;
      case DType::u8: h.data<uint8_t>()[i] = static_cast<uint8_t>(v[i]); break;
    }
  }
  return to_device(h);
}

// ---- weights ----

const Tensor& CudaBackend::weight(const TensorView& w, bool keep_dtype) {
  auto& cache = weights_[keep_dtype ? 1 : 0];
  auto it = cache.find(&w);
  // note: the pointer alone could name a new view at a freed address; data, size and name must agree too.
  if (it != cache.end() && it->second.data == w.data && it->second.nbytes == w.nbytes && it->second.name == w.name)
    return it->second.t;
  if (!w.data)
    throw std::logic_error(cat("cuda backend: weight ", w.name, " has no host data and no registered device copy"));
  if (graphs_segment() && graphs_->mode() != cuda::StepGraphs::Mode::record)
    throw std::logic_error(cat("graphs=on: weight ", w.name, " first used in a captured or replayed step"));
  // Upload as stored, then round on the device (bf16 as is; A_log / dt_bias keep f32 or bf16; the
  // reference widens anything but bf16 to fp32, exactly, as the CPU's reference reads it).
  DType to = DType::bf16;
  if (keep_dtype || reference_) to = (w.dtype == DType::bf16 || w.dtype == DType::f32) ? w.dtype : DType::f32;
  Tensor raw = device_tensor(w.shape, w.dtype, w.name.c_str(), /*step_buffer=*/false);
  if (w.nbytes) CUDA_CHECK(cudaMemcpyAsync(raw.raw(), w.data, w.nbytes, cudaMemcpyHostToDevice, ctx_->stream()));
  Tensor dev = raw;
  if (to != w.dtype) {
    dev = device_tensor(w.shape, to, w.name.c_str(), /*step_buffer=*/false);
    cuda::convert_cuda(raw.raw(), w.dtype, dev.raw(), to, w.numel(), ctx_->stream());
  }
  weight_bytes_ += static_cast<int64_t>(dev.nbytes());
  // note: an expert first used between a MoE step's pause and resume is no graph's buffer
  if (graphs_ && !graphs_->paused()) graphs_->invalidate();
  CachedWeight& c = cache[&w];
  if (!c.t.empty()) weight_bytes_ -= static_cast<int64_t>(c.t.nbytes());
  c = CachedWeight{dev, w.data, w.nbytes, w.name};
  return c.t;
}

void CudaBackend::register_weight(const TensorView& w, Tensor device_copy) {
  require_device(device_copy, "register_weight");
  DEGEN_ASSERT(device_copy.numel() == w.numel(), "register_weight ", w.name);
  DEGEN_ASSERT(device_copy.dtype == DType::bf16 || device_copy.dtype == DType::f32, "register_weight ", w.name, " dtype");
  weight_bytes_ += static_cast<int64_t>(device_copy.nbytes());
  if (graphs_) graphs_->invalidate();
  // keep-dtype lookups (A_log, dt_bias) take it as registered; bf16 lookups only a bf16 copy
  if (device_copy.dtype == DType::bf16) weights_[0][&w] = CachedWeight{device_copy, w.data, w.nbytes, w.name};
  weights_[1][&w] = CachedWeight{std::move(device_copy), w.data, w.nbytes, w.name};
}

// ---- layout ----

Tensor CudaBackend::slice_cols(const Tensor& x, int64_t c0, int64_t n) {
  require_device(x, "slice_cols");
  const int64_t R = x.rows(), C = x.cols();
  DEGEN_ASSERT(c0 >= 0 && n >= 0 && c0 + n <= C, "slice_cols ", c0, "+", n, " of ", C);
  Tensor out = device_tensor({R, n}, x.dtype, "slice_cols");
  const size_t es = dtype_size(x.dtype);
  if (R * n != 0 && enqueue_allowed())
    CUDA_CHECK(cudaMemcpy2DAsync(out.raw(), n * es, static_cast<const uint8_t*>(x.raw()) + c0 * es, C * es, n * es, R,
                                 cudaMemcpyDeviceToDevice, ctx_->stream()));
  return out;
}

Tensor CudaBackend::gather_cols(const Tensor& x, const std::vector<int64_t>& cols) {
  require_device(x, "gather_cols");
  const int64_t R = x.rows(), C = x.cols(), n = static_cast<int64_t>(cols.size());
  for (int64_t j = 0; j < n; ++j) DEGEN_ASSERT(cols[j] >= 0 && cols[j] < C, "gather_cols index ", cols[j], " of ", C);
  Tensor out = device_tensor({R, n}, x.dtype, "gather_cols");
  Tensor idx = upload(cols, DType::i64, "gather_cols index");
  cuda::gather_cols_cuda(x.raw(), R, C, idx.data<int64_t>(), n, out.raw(), dtype_size(x.dtype), ctx_->stream());
  return out;
}

Tensor CudaBackend::concat_cols(const Tensor& a, const Tensor& b) {
  require_device(a, "concat_cols");
  require_device(b, "concat_cols");
  DEGEN_ASSERT(a.rows() == b.rows() && a.dtype == b.dtype, "concat_cols: ", shape_str(a.shape), " and ", shape_str(b.shape));
  const int64_t R = a.rows(), ca = a.cols(), cb = b.cols();
  Tensor out = device_tensor({R, ca + cb}, a.dtype, "concat_cols");
  const size_t es = dtype_size(a.dtype), ld = (ca + cb) * es;
  uint8_t* dst = static_cast<uint8_t*>(out.raw());
  if (!enqueue_allowed()) return out;
  if (R * ca != 0) CUDA_CHECK(cudaMemcpy2DAsync(dst, ld, a.raw(), ca * es, ca * es, R, cudaMemcpyDeviceToDevice, ctx_->stream()));
  if (R * cb != 0)
    CUDA_CHECK(cudaMemcpy2DAsync(dst + ca * es, ld, b.raw(), cb * es, cb * es, R, cudaMemcpyDeviceToDevice, ctx_->stream()));
  return out;
}

Tensor CudaBackend::gather_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  require_device(x, "gather_rows");
  const int64_t R = x.rows(), C = x.cols(), n = static_cast<int64_t>(rows.size());
  for (int64_t i = 0; i < n; ++i) DEGEN_ASSERT(rows[i] >= 0 && rows[i] < R, "gather_rows index ", rows[i], " of ", R);
  Tensor out = device_tensor({n, C}, x.dtype, "gather_rows");
  Tensor idx = upload(rows, DType::i64, "gather_rows index");
  cuda::gather_rows_cuda(x.raw(), C, idx.data<int64_t>(), n, out.raw(), dtype_size(x.dtype), ctx_->stream());
  return out;
}

Tensor CudaBackend::concat_rows(const std::vector<Tensor>& parts) {
  DEGEN_ASSERT(!parts.empty(), "concat_rows of nothing");
  int64_t R = 0;
  const int64_t C = parts[0].cols();
  for (const Tensor& p : parts) {
    require_device(p, "concat_rows");
    DEGEN_ASSERT(p.cols() == C && p.dtype == parts[0].dtype, "concat_rows: ", shape_str(p.shape), " vs ",
                 shape_str(parts[0].shape));
    R += p.rows();
  }
  Tensor out = device_tensor({R, C}, parts[0].dtype, "concat_rows");
  size_t off = 0;
  for (const Tensor& p : parts) {
    if (p.nbytes() && enqueue_allowed())
      CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(out.raw()) + off, p.raw(), p.nbytes(), cudaMemcpyDeviceToDevice,
                                 ctx_->stream()));
    off += p.nbytes();
  }
  return out;
}

void CudaBackend::scatter_add_rows(Tensor& out, const Tensor& y, const std::vector<int64_t>& rows,
                                   const std::vector<double>& w) {
  require_device(out, "scatter_add_rows");
  require_device(y, "scatter_add_rows");
  const int64_t C = out.cols();
  DEGEN_ASSERT(y.cols() == C && y.rows() == static_cast<int64_t>(rows.size()) && w.size() == rows.size() &&
                   y.dtype == out.dtype, "scatter_add_rows shapes");
  std::unordered_set<int64_t> seen;
  bool unique = true;
  for (int64_t r : rows) {
    DEGEN_ASSERT(r >= 0 && r < out.rows(), "scatter_add_rows index");
    unique = unique && seen.insert(r).second;
  }
  std::vector<float> wf(w.begin(), w.end());  // the routing weights are fp32 values (spec §4.10)
  Tensor idx = upload(rows, DType::i64, "scatter_add_rows index");
  Tensor wt = upload(wf, DType::f32, "scatter_add_rows weights");
  cuda::scatter_add_rows_cuda(out.raw(), y.raw(), out.dtype, C, idx.data<int64_t>(), wt.data<float>(),
                              static_cast<int64_t>(rows.size()), unique, ctx_->stream());
}

}  // namespace degen
