// CPU Gated DeltaNet core (spec §4.7.4-4.7.6): the gates, and the gated delta rule in two
// algorithms that are equal up to rounding:
//   recurrent (§4.7.5), per token and value head j (key head j / r):
//     S ← α S;  δ = β (v − Sᵀk);  S ← S + k δᵀ;  o = Sᵀq
//   chunked (§4.7.6), C = 64: WY/UT form per chunk, solved by forward substitution; a last
//     partial chunk is processed at its real length (identical to zero padding).
// note: the state S is stored in T (fp32 under precision=ref, between tokens and between calls);
// every dot product is accumulated in double; the chunked form keeps its per-chunk intermediates
// (U, W, V_new, cumulative log-decay) in double.
#include <cmath>
#include <vector>

#include "cpu/common.h"
#include "cpu/cpu_backend.h"

namespace degen {

namespace {

constexpr int64_t kChunk = 64;

struct GdnDims {
  int64_t n_k, d_k, n_v, d_v, r;
};

// One value head of one sequence, token by token.
template <typename T>
void gdn_recurrent_head(const GdnDims& d, const T* q, const T* k, const T* v, const T* g, const T* beta, int64_t row0,
                        int64_t rows, int64_t j, T* S, T* o) {
  const int64_t kh = j / d.r, dk = d.d_k, dv = d.d_v;
  std::vector<double> acc(static_cast<size_t>(dv));
  std::vector<T> delta(static_cast<size_t>(dv));
  for (int64_t t = row0; t < row0 + rows; ++t) {
    const T* kt = k + (t * d.n_k + kh) * dk;
    const T* qt = q + (t * d.n_k + kh) * dk;
    const T* vt = v + (t * d.n_v + j) * dv;
    const T alpha = static_cast<T>(std::exp(double(g[t * d.n_v + j])));
    const double b = beta[t * d.n_v + j];
    for (int64_t i = 0; i < dk * dv; ++i) S[i] = S[i] * alpha;  // decay first
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t a = 0; a < dk; ++a) {  // Sᵀk from the decayed state
      const double ka = kt[a];
      const T* Sa = S + a * dv;
      for (int64_t c = 0; c < dv; ++c) acc[c] += double(Sa[c]) * ka;
    }
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
    for (int64_t c = 0; c < dv; ++c) ot[c] = static_cast<T>(acc[c]);
  }
}

// One value head of one sequence, chunk by chunk.
template <typename T>
void gdn_chunked_head(const GdnDims& d, const T* q, const T* k, const T* v, const T* g, const T* beta, int64_t row0,
                      int64_t rows, int64_t j, T* S, T* o) {
  const int64_t kh = j / d.r, dk = d.d_k, dv = d.d_v, C = kChunk;
  std::vector<double> G(C), M(C * C), U(C * dv), W(C * dk), Vn(C * dv), Snew(dk * dv), acc(dv);
  auto K = [&](int64_t t) { return k + (t * d.n_k + kh) * dk; };
  auto Q = [&](int64_t t) { return q + (t * d.n_k + kh) * dk; };
  for (int64_t c0 = row0; c0 < row0 + rows; c0 += C) {
    const int64_t L = std::min(C, row0 + rows - c0);
    // cumulative log-decay G_i = Σ_{m<=i} g_m
    double run = 0;
    for (int64_t i = 0; i < L; ++i) G[i] = (run += double(g[(c0 + i) * d.n_v + j]));
    // M_il = β_i e^{G_i - G_l} k_i·k_l  (l < i)
    for (int64_t i = 0; i < L; ++i) {
      const double bi = beta[(c0 + i) * d.n_v + j];
      for (int64_t l = 0; l < i; ++l) {
        double dot = 0;
        const T *ki = K(c0 + i), *kl = K(c0 + l);
        for (int64_t a = 0; a < dk; ++a) dot += double(ki[a]) * double(kl[a]);
        M[i * C + l] = bi * std::exp(G[i] - G[l]) * dot;
      }
    }
    // (I + M) U = B V  and  (I + M) W = B diag(e^G) K, by forward substitution
    for (int64_t i = 0; i < L; ++i) {
      const double bi = beta[(c0 + i) * d.n_v + j], eg = std::exp(G[i]);
      const T* vi = v + ((c0 + i) * d.n_v + j) * dv;
      const T* ki = K(c0 + i);
      for (int64_t c = 0; c < dv; ++c) U[i * dv + c] = bi * double(vi[c]);
      for (int64_t a = 0; a < dk; ++a) W[i * dk + a] = bi * eg * double(ki[a]);
      for (int64_t l = 0; l < i; ++l) {
        const double m = M[i * C + l];
        for (int64_t c = 0; c < dv; ++c) U[i * dv + c] -= m * U[l * dv + c];
        for (int64_t a = 0; a < dk; ++a) W[i * dk + a] -= m * W[l * dk + a];
      }
    }
    // V_new = U - W S
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t c = 0; c < dv; ++c) acc[c] = 0;
      for (int64_t a = 0; a < dk; ++a) {
        const double wa = W[i * dk + a];
        const T* Sa = S + a * dv;
        for (int64_t c = 0; c < dv; ++c) acc[c] += wa * double(Sa[c]);
      }
      for (int64_t c = 0; c < dv; ++c) Vn[i * dv + c] = U[i * dv + c] - acc[c];
    }
    // O_i = e^{G_i} q_iᵀ S + Σ_{l<=i} (q_i·k_l) e^{G_i - G_l} V_new_l
    for (int64_t i = 0; i < L; ++i) {
      const T* qi = Q(c0 + i);
      for (int64_t c = 0; c < dv; ++c) acc[c] = 0;
      for (int64_t a = 0; a < dk; ++a) {
        const double qa = qi[a];
        const T* Sa = S + a * dv;
        for (int64_t c = 0; c < dv; ++c) acc[c] += qa * double(Sa[c]);
      }
      const double eg = std::exp(G[i]);
      for (int64_t c = 0; c < dv; ++c) acc[c] *= eg;
      for (int64_t l = 0; l <= i; ++l) {
        const T* kl = K(c0 + l);
        double dot = 0;
        for (int64_t a = 0; a < dk; ++a) dot += double(qi[a]) * double(kl[a]);
        const double f = dot * std::exp(G[i] - G[l]);
        for (int64_t c = 0; c < dv; ++c) acc[c] += f * Vn[l * dv + c];
      }
      T* oi = o + ((c0 + i) * d.n_v + j) * dv;
      for (int64_t c = 0; c < dv; ++c) oi[c] = static_cast<T>(acc[c]);
    }
    // S ← e^{G_L} S + Σ_i e^{G_L - G_i} k_i V_new_iᵀ
    const double eL = std::exp(G[L - 1]);
    for (int64_t x = 0; x < dk * dv; ++x) Snew[x] = eL * double(S[x]);
    for (int64_t i = 0; i < L; ++i) {
      const double f = std::exp(G[L - 1] - G[i]);
      const T* ki = K(c0 + i);
      for (int64_t a = 0; a < dk; ++a) {
        const double ka = f * double(ki[a]);
        for (int64_t c = 0; c < dv; ++c) Snew[a * dv + c] += ka * Vn[i * dv + c];
      }
    }
    for (int64_t x = 0; x < dk * dv; ++x) S[x] = static_cast<T>(Snew[x]);
  }
}

}  // namespace

void CpuBackend::gdn_gates(const Tensor& a, const Tensor& b, const TensorView& A_log, const TensorView& dt_bias,
                           Tensor& g, Tensor& beta) {
  cpu::check_same_shape(a, b, "gdn_gates");
  const int64_t R = a.rows(), nv = a.cols();
  DEGEN_ASSERT(A_log.numel() == nv && dt_bias.numel() == nv, "gdn_gates: A_log/dt_bias size vs ", nv, " heads");
  g = zeros(a.shape, a.dtype);
  beta = zeros(a.shape, a.dtype);
  cpu::dispatch(a.dtype, [&](auto zero) {
    using T = decltype(zero);
    // note: A_log may be bf16 or fp32; it is upcast before exp (spec §8.3).
    std::vector<double> A = cpu::weight_vector<double>(A_log), dt = cpu::weight_vector<double>(dt_bias);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < nv; ++j) {
        const int64_t i = r * nv + j;
        g.data<T>()[i] = static_cast<T>(-std::exp(A[j]) * cpu::softplus(double(a.data<T>()[i]) + dt[j]));
        beta.data<T>()[i] = static_cast<T>(cpu::sigmoid(b.data<T>()[i]));
      }
  });
}

Tensor CpuBackend::gdn(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                       const std::vector<SeqSpan>& spans, const std::vector<Tensor*>& states, GdnAlgo algo) {
  DEGEN_ASSERT(q.shape.size() == 3 && q.shape == k.shape && v.shape.size() == 3, "gdn shapes");
  GdnDims d{q.shape[1], q.shape[2], v.shape[1], v.shape[2], 0};
  DEGEN_ASSERT(d.n_v % d.n_k == 0, "gdn: n_v ", d.n_v, " not a multiple of n_k ", d.n_k);
  d.r = d.n_v / d.n_k;
  const int64_t N = q.shape[0];
  DEGEN_ASSERT(v.shape[0] == N && g.rows() == N && g.cols() == d.n_v && beta.shape == g.shape, "gdn gate shapes");
  DEGEN_ASSERT(spans.size() == states.size(), "gdn: one state per sequence");
  Tensor o = zeros({N, d.n_v, d.d_v}, q.dtype);
  cpu::dispatch(q.dtype, [&](auto zero) {
    using T = decltype(zero);
    for (size_t s = 0; s < spans.size(); ++s) {
      Tensor& St = *states[s];
      DEGEN_ASSERT(St.dtype == q.dtype && St.shape == (std::vector<int64_t>{d.n_v, d.d_k, d.d_v}), "gdn state ",
                   shape_str(St.shape));
      const SeqSpan& sp = spans[s];
#pragma omp parallel for schedule(static) if (double(sp.rows) * double(d.d_k * d.d_v) * double(d.n_v) >= cpu::kParallelMinWork)
      for (int64_t j = 0; j < d.n_v; ++j) {
        T* Sj = St.data<T>() + j * d.d_k * d.d_v;
        if (algo == GdnAlgo::chunked)
          gdn_chunked_head<T>(d, q.data<T>(), k.data<T>(), v.data<T>(), g.data<T>(), beta.data<T>(), sp.row0, sp.rows,
                              j, Sj, o.data<T>());
        else
          gdn_recurrent_head<T>(d, q.data<T>(), k.data<T>(), v.data<T>(), g.data<T>(), beta.data<T>(), sp.row0,
                                sp.rows, j, Sj, o.data<T>());
      }
    }
  });
  return o;
}

}  // namespace degen
