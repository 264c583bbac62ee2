// CPU Gated DeltaNet core (spec §4.7.4-4.7.6): the gates, and the gated delta rule in two
// algorithms that are equal up to rounding:
//   recurrent (§4.7.5), per token and value head j (key head j / r):
//     S ← α S;  δ = β (v − Sᵀk);  S ← S + k δᵀ;  o = Sᵀq
//   chunked (§4.7.6), C = 64: WY/UT form per chunk, solved by forward substitution; a last
//     partial chunk is processed at its real length (identical to zero padding).
// note: the arithmetic is in T (fp32, or fp64 under precision=fp64): every dot product is
// accumulated in double, and the chunked form keeps its per-chunk intermediates (U, W, V_new,
// cumulative log-decay) in double. The state S is stored in its tensor's dtype (ssm_dtype): rounded
// after every token by the recurrent form and after every chunk by the chunked form (where a
// kernel writes it back); the output o is computed from the state before that rounding.
// FLA's chunked kernel also stores w, u and the per-chunk states used for the output in bf16
// (spec §4.7.6): gdn=fla emulates that (gdn_fla_head); chunked keeps its intermediates in double.
//
// Faults (numerics()), in both forms:
//   gdn-read-before-decay: δ_t = β (v − S_{t-1}ᵀk) from the undecayed state, then S ← αS + kδᵀ.
//     In the chunked form this is the correct algebra with the read key k_i e^{-g_i}: row i of M
//     and of W take a factor e^{-g_i} (the write keys are unchanged);
//   gdn-head-mod: value head j reads key head j mod n_k instead of j / r;
//   gdn-out-fp16: o rounded to fp16 (inf beyond ±65504) before it is stored.
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/common.h"
#include "cpu/cpu_backend.h"
#include "util/cpu_isa.h"

namespace degen {

namespace {

constexpr int64_t kChunk = 64;

struct GdnDims {
  int64_t n_k, d_k, n_v, d_v, r;
};

struct GdnFlags {
  bool read_before_decay = false;  // fault gdn-read-before-decay
  bool head_mod = false;           // fault gdn-head-mod
  bool out_fp16 = false;           // fault gdn-out-fp16
  bool round_state = false;        // S is stored narrower than T: round it where it is stored
  DType state = DType::f32;        // S's storage dtype
  int64_t key_head(const GdnDims& d, int64_t j) const { return head_mod ? j % d.n_k : j / d.r; }
};

template <typename T>
void round_state(const GdnFlags& f, T* S, int64_t n) {
  if (!f.round_state) return;
  for (int64_t i = 0; i < n; ++i) S[i] = static_cast<T>(cpu::round_to(double(S[i]), f.state));
}

template <typename T>
T out_value(const GdnFlags& f, double x) {
  return f.out_fp16 ? static_cast<T>(round_f16(static_cast<float>(x))) : static_cast<T>(x);
}

// One value head of one sequence, token by token.
template <typename T>
void gdn_recurrent_head(const GdnDims& d, const GdnFlags& f, const T* q, const T* k, const T* v, const T* g,
                        const T* beta, int64_t row0, int64_t rows, int64_t j, T* S, T* o) {
  const int64_t kh = f.key_head(d, j), dk = d.d_k, dv = d.d_v;
  std::vector<double> acc(static_cast<size_t>(dv));
  std::vector<T> delta(static_cast<size_t>(dv));
  for (int64_t t = row0; t < row0 + rows; ++t) {
    const T* kt = k + (t * d.n_k + kh) * dk;
    const T* qt = q + (t * d.n_k + kh) * dk;
    const T* vt = v + (t * d.n_v + j) * dv;
    const T alpha = static_cast<T>(std::exp(double(g[t * d.n_v + j])));
    const double b = beta[t * d.n_v + j];
    auto read_k = [&] {  // acc = Sᵀk
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t a = 0; a < dk; ++a) {
        const double ka = kt[a];
        const T* Sa = S + a * dv;
        for (int64_t c = 0; c < dv; ++c) acc[c] += double(Sa[c]) * ka;
      }
    };
    if (f.read_before_decay) read_k();  // fault: from the undecayed state
    for (int64_t i = 0; i < dk * dv; ++i) S[i] = S[i] * alpha;  // decay first
    if (!f.read_before_decay) read_k();  // Sᵀk from the decayed state
    for (int64_t c = 0; c < dv; ++c) delta[c] = static_cast<T>(b * (double(vt[c]) - acc[c]));
    for (int64_t a = 0; a < dk; ++a) {  // write
      const T ka = kt[a];
      T* Sa = S + a * dv;
      for (int64_t c = 0; c < dv; ++c) Sa[c] = static_cast<T>(Sa[c] + ka * delta[c]);
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t a = 0; a < dk; ++a) {  // read after the write
      const double qa = qt[a];
      const T* Sa = S + a * dv;
      for (int64_t c = 0; c < dv; ++c) acc[c] += double(Sa[c]) * qa;
    }
    T* ot = o + (t * d.n_v + j) * dv;
    for (int64_t c = 0; c < dv; ++c) ot[c] = out_value<T>(f, acc[c]);
    round_state(f, S, dk * dv);  // stored between steps
  }
}

// The chunked form's inner loops (gdn_loops.inc) for the baseline ISA, AVX2 and AVX-512: the same
// bits under each, chosen with the products' ISA.
namespace loops_baseline {
#include "cpu/gdn_loops.inc"
}
#if DEGEN_GEMM_X86 && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2")
namespace loops_avx2 {
#include "cpu/gdn_loops.inc"
}
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace loops_avx512 {
#include "cpu/gdn_loops.inc"
}
#pragma GCC pop_options
#endif

struct GdnLoops {
  decltype(&loops_baseline::dots_kt) dots_kt;
  decltype(&loops_baseline::sub_rows) sub_rows;
  decltype(&loops_baseline::acc_rows_f) acc_rows_f;
  decltype(&loops_baseline::acc_rows_d) acc_rows_d;
  decltype(&loops_baseline::axpy_rows) axpy_rows;
  decltype(&loops_baseline::outer_acc) outer_acc;
  void acc_rows(double* acc, const double* coef, const float* S, int64_t dk, int64_t dv) const {
    acc_rows_f(acc, coef, S, dk, dv);
  }
  void acc_rows(double* acc, const double* coef, const double* S, int64_t dk, int64_t dv) const {
    acc_rows_d(acc, coef, S, dk, dv);
  }
};

#define DEGEN_GDN_LOOPS(ns) \
  GdnLoops { &ns::dots_kt, &ns::sub_rows, &ns::acc_rows_f, &ns::acc_rows_d, &ns::axpy_rows, &ns::outer_acc }
const GdnLoops& gdn_loops() {
  static const GdnLoops l = [] {
#if DEGEN_GEMM_X86 && defined(__GNUC__)
    if (cpu::active_isa() == cpu::Isa::avx512) return DEGEN_GDN_LOOPS(loops_avx512);
    if (cpu::active_isa() == cpu::Isa::avx2) return DEGEN_GDN_LOOPS(loops_avx2);
#endif
    return DEGEN_GDN_LOOPS(loops_baseline);
  }();
  return l;
}
#undef DEGEN_GDN_LOOPS

// One value head of one sequence, chunk by chunk. Every sum runs in the order the formulas below
// write it (a over the key dimension, l over the chunk's earlier rows), element by element, through
// gdn_loops(): a chunk of 64 rows costs about 4.3 M multiply-adds per head in double.
template <typename T>
void gdn_chunked_head(const GdnDims& d, const GdnFlags& f, const T* q, const T* k, const T* v, const T* g,
                      const T* beta, int64_t row0, int64_t rows, int64_t j, T* S, T* o) {
  const GdnLoops& lp = gdn_loops();
  const int64_t kh = f.key_head(d, j), dk = d.d_k, dv = d.d_v, C = kChunk;
  std::vector<double> G(C), M(C * C), U(C * dv), W(C * dk), Vn(C * dv), Snew(dk * dv), acc(dv), KT(dk * C), dots(C),
      xd(dk);
  auto K = [&](int64_t t) { return k + (t * d.n_k + kh) * dk; };
  auto Q = [&](int64_t t) { return q + (t * d.n_k + kh) * dk; };
  // dots[l] = x·k_l for l < n, each the sum over a in order (the chain of a plain dot product)
  auto dots_with_keys = [&](const T* x, int64_t n) {
    for (int64_t a = 0; a < dk; ++a) xd[a] = double(x[a]);
    lp.dots_kt(xd.data(), dk, KT.data(), C, n, dots.data());
  };
  for (int64_t c0 = row0; c0 < row0 + rows; c0 += C) {
    const int64_t L = std::min(C, row0 + rows - c0);
    // cumulative log-decay G_i = Σ_{m<=i} g_m
    double run = 0;
    for (int64_t i = 0; i < L; ++i) G[i] = (run += double(g[(c0 + i) * d.n_v + j]));
    for (int64_t l = 0; l < L; ++l)  // the chunk's keys transposed: KT[a][l] = k_l[a]
      for (int64_t a = 0; a < dk; ++a) KT[a * C + l] = double(K(c0 + l)[a]);
    // M_il = β_i e^{G_i - G_l} k_i·k_l  (l < i)
    for (int64_t i = 0; i < L; ++i) {
      const double bi = beta[(c0 + i) * d.n_v + j];
      dots_with_keys(K(c0 + i), i);
      for (int64_t l = 0; l < i; ++l) {
        M[i * C + l] = bi * std::exp(G[i] - G[l]) * dots[l];
        if (f.read_before_decay) M[i * C + l] *= std::exp(-double(g[(c0 + i) * d.n_v + j]));
      }
    }
    // (I + M) U = B V  and  (I + M) W = B diag(e^G) K, by forward substitution
    for (int64_t i = 0; i < L; ++i) {
      const double bi = beta[(c0 + i) * d.n_v + j], eg = std::exp(G[i]);
      const T* vi = v + ((c0 + i) * d.n_v + j) * dv;
      const T* ki = K(c0 + i);
      for (int64_t c = 0; c < dv; ++c) U[i * dv + c] = bi * double(vi[c]);
      for (int64_t a = 0; a < dk; ++a) W[i * dk + a] = bi * eg * double(ki[a]);
      if (f.read_before_decay)
        for (int64_t a = 0; a < dk; ++a) W[i * dk + a] *= std::exp(-double(g[(c0 + i) * d.n_v + j]));
      lp.sub_rows(U.data() + i * dv, U.data(), M.data() + i * C, i, dv, dv);
      lp.sub_rows(W.data() + i * dk, W.data(), M.data() + i * C, i, dk, dk);
    }
    // V_new = U - W S
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t c = 0; c < dv; ++c) acc[c] = 0;
      lp.acc_rows(acc.data(), W.data() + i * dk, S, dk, dv);
      for (int64_t c = 0; c < dv; ++c) Vn[i * dv + c] = U[i * dv + c] - acc[c];
    }
    // O_i = e^{G_i} q_iᵀ S + Σ_{l<=i} (q_i·k_l) e^{G_i - G_l} V_new_l
    for (int64_t i = 0; i < L; ++i) {
      const T* qi = Q(c0 + i);
      for (int64_t c = 0; c < dv; ++c) acc[c] = 0;
      dots_with_keys(qi, i + 1);  // also leaves q_i in xd
      lp.acc_rows(acc.data(), xd.data(), S, dk, dv);
      const double eg = std::exp(G[i]);
      for (int64_t c = 0; c < dv; ++c) acc[c] *= eg;
      for (int64_t l = 0; l <= i; ++l) dots[l] = dots[l] * std::exp(G[i] - G[l]);
      lp.axpy_rows(acc.data(), dots.data(), Vn.data(), i + 1, dv);
      T* oi = o + ((c0 + i) * d.n_v + j) * dv;
      for (int64_t c = 0; c < dv; ++c) oi[c] = out_value<T>(f, acc[c]);
    }
    // S ← e^{G_L} S + Σ_i e^{G_L - G_i} k_i V_new_iᵀ
    const double eL = std::exp(G[L - 1]);
    for (int64_t x = 0; x < dk * dv; ++x) Snew[x] = eL * double(S[x]);
    for (int64_t i = 0; i < L; ++i) {
      const double fi = std::exp(G[L - 1] - G[i]);
      const T* ki = K(c0 + i);
      for (int64_t a = 0; a < dk; ++a) xd[a] = fi * double(ki[a]);
      lp.outer_acc(Snew.data(), xd.data(), Vn.data() + i * dv, dk, dv);
    }
    for (int64_t x = 0; x < dk * dv; ++x) S[x] = static_cast<T>(Snew[x]);
    round_state(f, S, dk * dv);  // stored between chunks
  }
}

// One value head of one sequence, chunk by chunk, with flash-linear-attention's storage points
// (gdn=fla; its chunk_gated_delta_rule, spec §4.7.6): the same algebra as gdn_chunked_head, but the
// values that FLA's kernels store between their products, or cast before a bf16 tensor-core
// product, are rounded to the activation dtype `act` (R below; the identity under fp32/fp64):
//   T = R((I + M)⁻¹)  (solve_tril writes it in the input dtype);
//   W = R(T · R(e^G R(β K))),  U = R(T · R(β V))  (recompute_w_u: β k is a bf16 product, scaled by
//     e^G in fp32 and cast again before the product; w, u stored);
//   per chunk, h = R(S) (the stored chunk state), V_new = U − W h, stored as R(V_new);
//   O = diag(e^G) (Q h) + R((QKᵀ) ⊙ Γ) · R(V_new)  (chunk_fwd_o: the decayed scores cast before P·V);
//   S ← e^{G_L} S + Kᵀ R(diag(e^{G_L − G}) V_new)  (S itself stays in T between chunks, as FLA keeps
//   it in fp32 registers; the ssm_dtype rounding after each chunk is as in gdn_chunked_head).
// Checked against fla-org/flash-linear-attention at bc3b101 (2026-08-22; chunk.py, wy_fast.py,
// common/chunk_delta_h.py, common/chunk_o.py). Not emulated: FLA's exp2 with g pre-scaled by
// 1/ln 2 (ulp-level), the TF32 block merges of its fused 64-row triangular solve on Hopper, its
// scale applied after the products (our q arrives scaled, gdn_split_norm), and the FlashQLA backend
// that replaces the Triton path on SM90 when installed.
// Sums are in double, so a value next to a bf16 rounding boundary may round the other way on the
// GPU (fp32 sums): the per-dtype tolerance covers that (tests/tolerances.h).
template <typename T>
void gdn_fla_head(const GdnDims& d, const GdnFlags& f, DType act, const T* q, const T* k, const T* v, const T* g,
                  const T* beta, int64_t row0, int64_t rows, int64_t j, T* S, T* o) {
  const int64_t kh = f.key_head(d, j), dk = d.d_k, dv = d.d_v, C = kChunk;
  auto R = [act](double x) { return cpu::round_to(x, act); };
  std::vector<double> G(C), M(C * C), Tm(C * C), A(C * C), Kb(C * dk), Vb(C * dv), W(C * dk), U(C * dv),
      H(dk * dv), Vn(C * dv), Vr(C * dv), Fv(C * dv), acc(dv);
  auto K = [&](int64_t t) { return k + (t * d.n_k + kh) * dk; };
  auto Q = [&](int64_t t) { return q + (t * d.n_k + kh) * dk; };
  auto dot = [dk](const T* x, const T* y) {
    double s = 0;
    for (int64_t a = 0; a < dk; ++a) s += double(x[a]) * double(y[a]);
    return s;
  };
  for (int64_t c0 = row0; c0 < row0 + rows; c0 += C) {
    const int64_t L = std::min(C, row0 + rows - c0);
    auto gate = [&](int64_t i) { return double(g[(c0 + i) * d.n_v + j]); };
    auto bet = [&](int64_t i) { return double(beta[(c0 + i) * d.n_v + j]); };
    double run = 0;
    for (int64_t i = 0; i < L; ++i) G[i] = (run += gate(i));
    // M (strictly lower) and A = R((QKᵀ) ⊙ Γ) (lower with the diagonal)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t l = 0; l <= i; ++l) {
        const double dec = std::exp(G[i] - G[l]);
        A[i * C + l] = R(dot(Q(c0 + i), K(c0 + l)) * dec);
        if (l == i) continue;
        M[i * C + l] = bet(i) * dec * dot(K(c0 + i), K(c0 + l));
        if (f.read_before_decay) M[i * C + l] *= std::exp(-gate(i));
      }
    // T = (I + M)⁻¹ by forward substitution, row by row, then stored: R(T)
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t jj = 0; jj < i; ++jj) {
        double s = M[i * C + jj];
        for (int64_t l = jj + 1; l < i; ++l) s += M[i * C + l] * Tm[l * C + jj];
        Tm[i * C + jj] = -s;
      }
      Tm[i * C + i] = 1;
    }
    for (int64_t i = 0; i < L; ++i)
      for (int64_t l = 0; l < i; ++l) Tm[i * C + l] = R(Tm[i * C + l]);
    // the operands of W and U, cast: R(R(β k) e^G) (fault: × e^{-g}), R(β v)
    for (int64_t i = 0; i < L; ++i) {
      double eg = std::exp(G[i]);
      if (f.read_before_decay) eg *= std::exp(-gate(i));
      for (int64_t a = 0; a < dk; ++a) Kb[i * dk + a] = R(R(bet(i) * double(K(c0 + i)[a])) * eg);
      const T* vi = v + ((c0 + i) * d.n_v + j) * dv;
      for (int64_t c = 0; c < dv; ++c) Vb[i * dv + c] = R(bet(i) * double(vi[c]));
    }
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t a = 0; a < dk; ++a) {
        double s = 0;
        for (int64_t l = 0; l <= i; ++l) s += Tm[i * C + l] * Kb[l * dk + a];
        W[i * dk + a] = R(s);
      }
      for (int64_t c = 0; c < dv; ++c) {
        double s = 0;
        for (int64_t l = 0; l <= i; ++l) s += Tm[i * C + l] * Vb[l * dv + c];
        U[i * dv + c] = R(s);
      }
    }
    for (int64_t x = 0; x < dk * dv; ++x) H[x] = R(double(S[x]));
    // V_new = U − W h; the output reads R(V_new), the state update R(e^{G_L − G_i} V_new)
    const double eL = std::exp(G[L - 1]);
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t c = 0; c < dv; ++c) acc[c] = 0;
      for (int64_t a = 0; a < dk; ++a)
        for (int64_t c = 0; c < dv; ++c) acc[c] += W[i * dk + a] * H[a * dv + c];
      const double fi = std::exp(G[L - 1] - G[i]);
      for (int64_t c = 0; c < dv; ++c) {
        Vn[i * dv + c] = U[i * dv + c] - acc[c];
        Vr[i * dv + c] = R(Vn[i * dv + c]);
        Fv[i * dv + c] = R(fi * Vn[i * dv + c]);
      }
    }
    // O_i = e^{G_i} q_iᵀ h + Σ_{l<=i} A_il R(V_new_l)
    for (int64_t i = 0; i < L; ++i) {
      const T* qi = Q(c0 + i);
      for (int64_t c = 0; c < dv; ++c) acc[c] = 0;
      for (int64_t a = 0; a < dk; ++a)
        for (int64_t c = 0; c < dv; ++c) acc[c] += double(qi[a]) * H[a * dv + c];
      const double eg = std::exp(G[i]);
      for (int64_t c = 0; c < dv; ++c) acc[c] *= eg;
      for (int64_t l = 0; l <= i; ++l)
        for (int64_t c = 0; c < dv; ++c) acc[c] += A[i * C + l] * Vr[l * dv + c];
      T* oi = o + ((c0 + i) * d.n_v + j) * dv;
      for (int64_t c = 0; c < dv; ++c) oi[c] = out_value<T>(f, acc[c]);
    }
    // S ← e^{G_L} S + Σ_i k_i R(e^{G_L − G_i} V_new_i)ᵀ
    for (int64_t a = 0; a < dk; ++a)
      for (int64_t c = 0; c < dv; ++c) {
        double s = eL * double(S[a * dv + c]);
        for (int64_t i = 0; i < L; ++i) s += double(K(c0 + i)[a]) * Fv[i * dv + c];
        S[a * dv + c] = static_cast<T>(s);
      }
    round_state(f, S, dk * dv);  // stored between chunks
  }
}

}  // namespace

void CpuBackend::gdn_gates(const Tensor& a0, const Tensor& b0, const TensorView& A_log, const TensorView& dt_bias,
                           Tensor& g, Tensor& beta) {
  cpu::check_same_shape(a0, b0, "gdn_gates");
  const Tensor a = wide(a0), b = wide(b0);
  const int64_t R = a.rows(), nv = a.cols();
  DEGEN_ASSERT(A_log.numel() == nv && dt_bias.numel() == nv, "gdn_gates: A_log/dt_bias size vs ", nv, " heads");
  const bool no_exp = numerics_.has(Fault::alog_no_exp);
  g = zeros(a.shape, a.dtype);
  beta = zeros(a.shape, a.dtype);
  cpu::dispatch(a.dtype, [&](auto zero) {
    using T = decltype(zero);
    // note: A_log may be bf16 or fp32; it is upcast before exp (spec §8.3) and, like dt_bias, used
    // as stored under every precision.
    std::vector<double> A = cpu::weight_vector<double>(A_log), dt = cpu::weight_vector<double>(dt_bias);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < nv; ++j) {
        const int64_t i = r * nv + j;
        const double decay_rate = no_exp ? A[j] : std::exp(A[j]);  // fault alog-no-exp: A_log taken as A
        g.data<T>()[i] = static_cast<T>(-decay_rate * cpu::softplus(double(a.data<T>()[i]) + dt[j]));
        beta.data<T>()[i] = static_cast<T>(cpu::sigmoid(b.data<T>()[i]));
      }
  });
  beta = store(beta);  // g stays in the compute dtype (fp32 on the GPU path, spec §4.10)
}

Tensor CpuBackend::gdn(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& g0, const Tensor& beta0,
                       const std::vector<SeqSpan>& spans, const std::vector<Tensor*>& states, GdnAlgo algo) {
  DEGEN_ASSERT(q0.shape.size() == 3 && q0.shape == k0.shape && v0.shape.size() == 3, "gdn shapes");
  const Tensor q = wide(q0), k = wide(k0), v = wide(v0), g = wide(g0), beta = wide(beta0);
  GdnDims d{q.shape[1], q.shape[2], v.shape[1], v.shape[2], 0};
  DEGEN_ASSERT(d.n_v % d.n_k == 0, "gdn: n_v ", d.n_v, " not a multiple of n_k ", d.n_k);
  d.r = d.n_v / d.n_k;
  const int64_t N = q.shape[0];
  DEGEN_ASSERT(v.shape[0] == N && g.rows() == N && g.cols() == d.n_v && beta.shape == g.shape, "gdn gate shapes");
  DEGEN_ASSERT(spans.size() == states.size(), "gdn: one state per sequence");
  GdnFlags f;
  f.read_before_decay = numerics_.has(Fault::gdn_read_before_decay);
  f.head_mod = numerics_.has(Fault::gdn_head_mod);
  f.out_fp16 = numerics_.has(Fault::gdn_out_fp16);
  Tensor o = zeros({N, d.n_v, d.d_v}, q.dtype);
  cpu::dispatch(q.dtype, [&](auto zero) {
    using T = decltype(zero);
    for (size_t s = 0; s < spans.size(); ++s) {
      Tensor& St = *states[s];
      DEGEN_ASSERT(St.shape == (std::vector<int64_t>{d.n_v, d.d_k, d.d_v}), "gdn state ", shape_str(St.shape));
      GdnFlags fs = f;
      fs.state = St.dtype;
      fs.round_state = St.dtype != q.dtype;
      Tensor Sw = wide(St);  // St itself when stored in T, else a working copy
      const SeqSpan& sp = spans[s];
      // Work: every state element is touched about four times per token (decay, read, write, read out):
      // a decode step of 16 heads of 128 x 128 is worth both threads (it was run on one while the
      // other waited: 12 GDN layers of bench-1b, ~5 ms of a 88 ms step).
#pragma omp parallel for schedule(static) if (4.0 * double(sp.rows) * double(d.d_k * d.d_v) * double(d.n_v) >= cpu::kParallelMinWork)
      for (int64_t j = 0; j < d.n_v; ++j) {
        T* Sj = Sw.data<T>() + j * d.d_k * d.d_v;
        if (algo == GdnAlgo::fla)
          gdn_fla_head<T>(d, fs, q0.dtype, q.data<T>(), k.data<T>(), v.data<T>(), g.data<T>(), beta.data<T>(), sp.row0,
                          sp.rows, j, Sj, o.data<T>());
        else if (algo == GdnAlgo::chunked)
          gdn_chunked_head<T>(d, fs, q.data<T>(), k.data<T>(), v.data<T>(), g.data<T>(), beta.data<T>(), sp.row0,
                              sp.rows, j, Sj, o.data<T>());
        else
          gdn_recurrent_head<T>(d, fs, q.data<T>(), k.data<T>(), v.data<T>(), g.data<T>(), beta.data<T>(), sp.row0,
                                sp.rows, j, Sj, o.data<T>());
      }
      if (Sw.raw() != St.raw()) {  // exact: the values were rounded to St's dtype already
        const Tensor r = convert(Sw, St.dtype);
        std::memcpy(St.raw(), r.raw(), r.nbytes());
      }
    }
  });
  return store(o);
}

}  // namespace degen
