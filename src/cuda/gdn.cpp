// CudaBackend Gated DeltaNet ops (spec §4.7; src/cpu/conv1d.cpp and src/cpu/gdn.cpp are the
// reference).
//   gdn_gates: on the device (kernels/gdn_gates.cu), fault alog-no-exp honoured there.
//   conv1d_causal, gdn: *** CPU FALLBACK *** until the CUDA GDN core lands (next issue). Their
//     inputs, the conv windows and the recurrent states are copied to the host, run through an
//     internal CpuBackend(precision=bf16) — the GPU-storage emulation, with the same numerics and
//     faults (begin_layer is forwarded) — and the outputs, windows and states are copied back.
//     The backend's name() carries "+gdn-cpu-fallback"; CudaStats counts the time spent here.
#include <chrono>

#include "cpu/cpu_backend.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/cuda_backend.h"
#include "gdn_gates.h"

namespace degen {

namespace {
using clock_type = std::chrono::steady_clock;

// Host copies of device tensors that the CPU op updates in place, written back afterwards.
struct HostMirror {
  std::vector<Tensor> host;
  std::vector<Tensor*> ptrs;
  HostMirror(CudaBackend& be, const std::vector<Tensor*>& dev) {
    host.reserve(dev.size());
    for (Tensor* t : dev) host.push_back(be.to_host(*t));
    for (Tensor& t : host) ptrs.push_back(&t);
  }
  void write_back(CudaBackend& be, const std::vector<Tensor*>& dev) {
    for (size_t i = 0; i < dev.size(); ++i) {
      DEGEN_ASSERT(host[i].dtype == dev[i]->dtype && host[i].shape == dev[i]->shape, "gdn fallback: state changed layout");
      if (host[i].nbytes())
        CUDA_CHECK(cudaMemcpyAsync(dev[i]->raw(), host[i].raw(), host[i].nbytes(), cudaMemcpyHostToDevice,
                                   be.context()->stream()));
    }
    be.sync();  // note: the host copies are freed when this mirror goes
  }
};
}  // namespace

void CudaBackend::gdn_gates(const Tensor& a, const Tensor& b, const TensorView& A_log, const TensorView& dt_bias,
                            Tensor& g, Tensor& beta) {
  require_device(a, "gdn_gates");
  require_device(b, "gdn_gates");
  DEGEN_ASSERT(a.shape == b.shape && a.dtype == DType::bf16 && b.dtype == DType::bf16, "gdn_gates: bf16 a, b of one shape");
  const int64_t R = a.rows(), nv = a.cols();
  DEGEN_ASSERT(A_log.numel() == nv && dt_bias.numel() == nv, "gdn_gates: A_log/dt_bias size vs ", nv, " heads");
  const Tensor& A = weight(A_log, /*keep_dtype=*/true);
  const Tensor& dt = weight(dt_bias, /*keep_dtype=*/true);
  g = device_tensor(a.shape, DType::f32, "gdn g");
  beta = device_tensor(a.shape, DType::bf16, "gdn beta");
  cuda::gdn_gates_cuda(static_cast<const __nv_bfloat16*>(a.raw()), static_cast<const __nv_bfloat16*>(b.raw()), A.raw(),
                       A.dtype, dt.raw(), dt.dtype, g.data<float>(), static_cast<__nv_bfloat16*>(beta.raw()), R, nv,
                       numerics_.has(Fault::alog_no_exp), context()->stream());
}

// CPU FALLBACK (see the file comment).
Tensor CudaBackend::conv1d_causal(const Tensor& x, const TensorView& w, const std::vector<SeqSpan>& spans,
                                  const std::vector<Tensor*>& windows) {
  require_device(x, "conv1d_causal");
  const auto t0 = clock_type::now();
  CpuBackend& cpu = fallback();
  const Tensor hx = to_host(x);
  HostMirror win(*this, windows);
  const Tensor ho = cpu.conv1d_causal(hx, w, spans, win.ptrs);
  win.write_back(*this, windows);
  DEGEN_ASSERT(ho.dtype == DType::bf16, "gdn fallback: conv output ", dtype_name(ho.dtype));
  Tensor out = to_device(ho);
  stats_.fallback_seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
  stats_.fallback_calls++;
  return out;
}

// CPU FALLBACK (see the file comment).
Tensor CudaBackend::gdn(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        const std::vector<SeqSpan>& spans, const std::vector<Tensor*>& states, GdnAlgo algo) {
  for (const Tensor* t : {&q, &k, &v, &g, &beta}) require_device(*t, "gdn");
  const auto t0 = clock_type::now();
  CpuBackend& cpu = fallback();
  const Tensor hq = to_host(q), hk = to_host(k), hv = to_host(v), hg = to_host(g), hb = to_host(beta);
  HostMirror S(*this, states);
  const Tensor ho = cpu.gdn(hq, hk, hv, hg, hb, spans, S.ptrs, algo);
  S.write_back(*this, states);
  DEGEN_ASSERT(ho.dtype == DType::bf16, "gdn fallback: output ", dtype_name(ho.dtype));
  Tensor out = to_device(ho);
  stats_.fallback_seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
  stats_.fallback_calls++;
  return out;
}

}  // namespace degen
