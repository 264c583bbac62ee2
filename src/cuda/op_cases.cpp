// The op cases of a model (see op_cases.h). Each case's `prepare` makes its inputs on the backend
// it is given from host values (seeded, rounded to bf16, so that every backend holds the same
// values) and returns the op's call; the weights are the model's own views.
#include "cuda/op_cases.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <utility>

#include "engine/state.h"
#include "util/dtype.h"
#include "util/error.h"

namespace degen::cuda {
namespace {

constexpr double kB2 = 2.0;  // bytes of a bf16 element

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// n values ~ N(0, scale²), rounded to bf16.
std::vector<double> randn(int64_t n, double scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = round_bf16(static_cast<float>(d(rng) * scale));
  return v;
}

// An activation of `be` (its activation dtype) ~ N(0, scale²).
Tensor act(Backend& be, std::vector<int64_t> shape, double scale, uint32_t seed) {
  const int64_t n = numel_of(shape);
  return be.from_host(randn(n, scale, seed), std::move(shape), be.act_dtype());
}

// The fp32 tensors of the GDN path (g, the state) on `be`: fp32, or the reference's own dtype.
DType f32_of(Backend& be) { return be.act_dtype() == DType::bf16 ? DType::f32 : be.act_dtype(); }

// q or k of the GDN core as the layer makes them: each head L2-normalised, times `scale`.
Tensor gdn_heads(Backend& be, int64_t N, int64_t nh, int64_t d, double scale, uint32_t seed) {
  std::vector<double> x = randn(N * nh * d, 1.0, seed);
  for (int64_t h = 0; h < N * nh; ++h) {
    double ss = 0;
    for (int64_t a = 0; a < d; ++a) ss += x[size_t(h * d + a)] * x[size_t(h * d + a)];
    for (int64_t a = 0; a < d; ++a)
      x[size_t(h * d + a)] = round_bf16(static_cast<float>(x[size_t(h * d + a)] / std::sqrt(ss + 1e-6) * scale));
  }
  return be.from_host(x, {N, nh, d}, be.act_dtype());
}

// The gates of the GDN core: g = -exp(N(-2.5, 1)) (decays 0.7..1, fp32), beta = sigmoid(N(0, 1)).
Tensor gdn_g(Backend& be, int64_t N, int64_t nv, uint32_t seed) {
  std::vector<double> g = randn(N * nv, 1.0, seed);
  for (double& x : g) x = -std::exp(x - 2.5);
  return be.from_host(g, {N, nv}, f32_of(be));
}
Tensor gdn_beta(Backend& be, int64_t N, int64_t nv, uint32_t seed) {
  std::vector<double> b = randn(N * nv, 1.0, seed);
  for (double& x : b) x = round_bf16(static_cast<float>(1.0 / (1.0 + std::exp(-x))));
  return be.from_host(b, {N, nv}, be.act_dtype());
}

std::vector<OpOutput> one(const char* what, Tensor t, OpTol tol = OpTol::bf16) {
  std::vector<OpOutput> o;
  o.push_back(OpOutput{what, std::move(t), tol});
  return o;
}

std::vector<OpOutput> many(const char* what, const std::vector<Tensor>& ts) {
  std::vector<OpOutput> o;
  for (size_t i = 0; i < ts.size(); ++i) o.push_back(OpOutput{cat(what, "[", i, "]"), ts[i], OpTol::bf16});
  return o;
}

// Builds the list part by part (each part's inputs use their own seeds).
struct Builder {
  const ModelConfig& cfg;
  const ModelWeights& w;
  OpSizes sz;
  std::vector<OpCase> out;

  void add(std::string name, double floor, double flops, OpPrepare prepare, OpPrepare reference = {}) {
    out.push_back(OpCase{std::move(name), floor, flops, std::move(prepare), std::move(reference)});
  }
  void matmul(const std::string& what, const TensorView* wv, int64_t N);
  void matmul_many(const std::string& what, std::vector<const TensorView*> ws);
  void gdn_decode(const LayerWeights& layer);
  void gdn_core();
  void mlp(const MlpWeights& m);
  void moe(const MoeWeights& m);
  void attention(const AttnWeights& a);
  void norms();
};

void Builder::matmul(const std::string& what, const TensorView* wv, int64_t N) {
  if (!wv) return;
  const int64_t in = wv->shape[1];
  const double wb = double(wv->nbytes), io = kB2 * double(N) * double(wv->shape[0] + in);
  add(cat("matmul ", what, " [", N, " x ", in, "] x [", wv->shape[0], " x ", in, "]^T"), wb + io,
      2.0 * double(N) * double(wv->numel()), [wv, N, in](Backend& be) -> OpRun {
        const Tensor x = act(be, {N, in}, 1.0, 1);
        return [&be, x, wv] { return one("y", be.matmul(x, *wv)); };
      });
}

// the projections of one decode row in one call (bf16 weights: 2 FLOPs per weight byte)
void Builder::matmul_many(const std::string& what, std::vector<const TensorView*> ws) {
  const int64_t H = cfg.hidden_size;
  double wb = 0, rows = 0;
  for (const TensorView* v : ws) {
    wb += double(v->nbytes);
    rows += double(v->shape[0]);
  }
  add(cat("matmul_many ", what, " [1 x ", H, "]"), wb + kB2 * (double(H) + rows), wb, [ws, H](Backend& be) -> OpRun {
    const Tensor x = act(be, {1, H}, 1.0, 2);
    return [&be, x, ws] { return many("y", be.matmul_many(x, ws)); };
  });
}

// The GDN layer's decode-sized ops: its products, and the fused ops of the decode layer
// (Backend::norm_matmul_many, gdn_inputs, gated_norm_matmul): what each reads and writes once.
void Builder::gdn_decode(const LayerWeights& layer) {
  const GdnWeights& g = layer.gdn;
  const int64_t H = cfg.hidden_size;
  const ModelConfig c = cfg;
  matmul("gdn.in_proj_qkv", g.in_proj_qkv, 1);
  matmul("gdn.out_proj", g.out_proj, 1);
  const std::vector<const TensorView*> ws{g.in_proj_qkv, g.in_proj_z, g.in_proj_b, g.in_proj_a};
  matmul_many("gdn.in_proj qkv,z,b,a", ws);
  const TensorView* nw = layer.input_norm;
  double wb = double(nw->nbytes), rows = 0;
  for (const TensorView* v : ws) {
    wb += double(v->nbytes);
    rows += double(v->shape[0]);
  }
  add(cat("norm_matmul_many input norm + gdn.in_proj [1 x ", H, "]"), wb + kB2 * (double(H) + rows),
      wb - double(nw->nbytes), [ws, nw, c](Backend& be) -> OpRun {
        const Tensor h = act(be, {1, c.hidden_size}, 1.0, 20);
        return [&be, h, ws, nw, c] {
          return many("y", be.norm_matmul_many(h, {nw, c.rms_norm_eps, NormKind::zero_centred}, ws));
        };
      });
  const int64_t C = cfg.d_conv(), K = cfg.conv_kernel;
  const double io = kB2 * double(C) * (1.0 + 2.0 * double(K - 1) + 1.0) + double(g.conv1d->nbytes) +
                    kB2 * 2.0 * double(cfg.n_v) + double(g.A_log->nbytes + g.dt_bias->nbytes) + 8.0 * double(cfg.n_v);
  add(cat("gdn_inputs conv + q/k norms + gates [1 x ", C, "]"), io, 0, [g, c, C, K](Backend& be) -> OpRun {
    const Tensor qkv = act(be, {1, C}, 1.0, 21);
    const DType wd = be.numerics().conv_dtype;  // the window's storage
    auto win = std::make_shared<Tensor>(be.from_host(randn((K - 1) * C, 1.0, 22), {K - 1, C}, wd));
    const Tensor a = act(be, {1, c.n_v}, 1.0, 23), b = act(be, {1, c.n_v}, 1.0, 24);
    return [&be, qkv, win, a, b, g, c] {
      const Backend::GdnInputs r = be.gdn_inputs(qkv, *g.conv1d, {SeqSpan{0, 1, 1}}, {win.get()}, a, b, *g.A_log,
                                                 *g.dt_bias, {c.n_k, c.d_k, c.n_v, c.d_v}, 1e-6,
                                                 1.0 / std::sqrt(double(c.d_k)));
      return std::vector<OpOutput>{{"q", r.q}, {"k", r.k}, {"v", r.v}, {"g", r.g}, {"beta", r.beta}, {"window", *win}};
    };
  });
  const int64_t dval = cfg.d_val();
  const double ob = double(g.out_proj->nbytes);
  add(cat("gated_norm_matmul gdn norm + out_proj + residual [1 x ", dval, "]"),
      ob + double(g.norm->nbytes) + kB2 * (2.0 * double(dval) + 2.0 * double(H)), ob,
      [g, c, dval](Backend& be) -> OpRun {
        const Tensor o = act(be, {1, dval}, 0.3, 25), z = act(be, {1, dval}, 1.0, 26);
        const Tensor res = act(be, {1, c.hidden_size}, 1.0, 27);
        return [&be, o, z, res, g, c] {
          return one("y", be.gated_norm_matmul(o, z, *g.norm, c.rms_norm_eps, *g.out_proj, &res));
        };
      });
  // the conv output's split with the q/k norms, one row
  add(cat("gdn_split_norm [1 x ", C, "]"), 2.0 * kB2 * double(C), 0, [c, C](Backend& be) -> OpRun {
    const Tensor conv = act(be, {1, C}, 1.0, 3);
    return [&be, conv, c] {
      const Backend::GdnQkv r = be.gdn_split_norm(conv, c.n_k, c.d_k, c.n_v, c.d_v, 1e-6, 0.1);
      return std::vector<OpOutput>{{"q", r.q}, {"k", r.k}, {"v", r.v}};
    };
  });
}

// The GDN core: the recurrent delta rule for one token (the state read and written once dominates),
// and the chunked delta rule over `rows` rows, with fp32 intermediates (chunked) or FLA's bf16 ones
// on tensor cores (fla). Prefill floor: q, k, v, beta, g read and o written once, the state read and
// written once. FLOPs: the products of the chunked form as full 64-row tiles (KKᵀ and QKᵀ, W and U,
// W h, Kᵀ V_new, Q h, A V_new). Each case starts from a zero state of its own.
void Builder::gdn_core() {
  const int64_t nk = cfg.n_k, dk = cfg.d_k, nv = cfg.n_v, dv = cfg.d_v;
  const double sb = 4.0 * double(nv * dk * dv);
  auto prepare = [nk, dk, nv, dv](int64_t N, int64_t pos0, GdnAlgo algo) {
    return [=](Backend& be) -> OpRun {
      auto st = std::make_shared<Tensor>(be.zeros({nv, dk, dv}, f32_of(be)));
      const Tensor q = gdn_heads(be, N, nk, dk, 1.0 / std::sqrt(double(dk)), 4), k = gdn_heads(be, N, nk, dk, 1.0, 5);
      const Tensor v = act(be, {N, nv, dv}, 1.0, 6), g = gdn_g(be, N, nv, 7), beta = gdn_beta(be, N, nv, 11);
      return [&be, st, q, k, v, g, beta, N, pos0, algo] {
        std::vector<Tensor*> states{st.get()};
        const Tensor o = be.gdn(q, k, v, g, beta, {SeqSpan{0, N, pos0}}, states, algo);
        return std::vector<OpOutput>{{"o", o, algo == GdnAlgo::fla ? OpTol::gdn_fla : OpTol::bf16},
                                     {"S", *st, OpTol::gdn_state}};
      };
    };
  };
  add(cat("gdn recurrent [1 token, state ", nv, " x ", dk, " x ", dv, " fp32]"),
      2.0 * sb + kB2 * double(2 * nk * dk + 2 * nv * dv), 4.0 * double(nv) * double(dk) * double(dv),
      prepare(1, 1, GdnAlgo::recurrent));
  const int64_t N = std::max<int64_t>(sz.rows, 1);
  const double io_b = kB2 * double(2 * N * nk * dk + 2 * N * nv * dv) + 4.0 * double(N * nv) + kB2 * double(N * nv);
  const double Cc = 64, fk = double(dk), fv = double(dv);
  const double fl = 2.0 * double(N) * double(nv) * (2 * Cc * fk + Cc * (fk + fv) + 3 * fk * fv + Cc * fv);
  for (GdnAlgo algo : {GdnAlgo::chunked, GdnAlgo::fla})
    add(cat("gdn prefill gdn=", gdn_algo_name(algo), " [", N, " rows, state ", nv, " x ", dk, " x ", dv, " fp32]"),
        2.0 * sb + io_b, fl, prepare(N, 0, algo));
}

void Builder::mlp(const MlpWeights& m) {
  const int64_t H = cfg.hidden_size;
  const ModelConfig c = cfg;
  matmul("mlp.down", m.down, 1);
  const double wb = double(m.gate->nbytes + m.up->nbytes);
  add(cat("matmul_swiglu mlp.gate,up [1 x ", H, "] -> ", m.gate->shape[0]), wb + kB2 * double(H + m.gate->shape[0]), wb,
      [m, H](Backend& be) -> OpRun {
        const Tensor x = act(be, {1, H}, 1.0, 8);
        return [&be, x, m] { return one("y", be.matmul_swiglu(x, *m.gate, *m.up)); };
      });
  matmul("mlp.gate (prefill)", m.gate, sz.rows);
  const TensorView* nw = w.layers.at(0).post_norm;
  add(cat("norm_matmul_swiglu post norm + mlp.gate,up [1 x ", H, "]"),
      wb + double(nw->nbytes) + kB2 * double(H + m.gate->shape[0]), wb, [m, nw, c](Backend& be) -> OpRun {
        const Tensor h = act(be, {1, c.hidden_size}, 1.0, 28);
        return [&be, h, m, nw, c] {
          return one("y", be.norm_matmul_swiglu(h, {nw, c.rms_norm_eps, NormKind::zero_centred}, *m.gate, *m.up));
        };
      });
  const int64_t I = m.down->shape[1];
  const double db = double(m.down->nbytes);
  add(cat("matmul_add mlp.down + residual [1 x ", I, "]"), db + kB2 * double(I + 2 * H), db,
      [m, H, I](Backend& be) -> OpRun {
        const Tensor s = act(be, {1, I}, 1.0, 29), res = act(be, {1, H}, 1.0, 30);
        return [&be, s, res, m] { return one("y", be.matmul_add(s, *m.down, res)); };
      });
}

// The routed experts of the first MoE layer with the routing on the device (one row; the floor reads
// its k experts' three matrices), and the shared expert's down projection with its sigmoid gate and
// the routed sum.
void Builder::moe(const MoeWeights& m) {
  const int64_t H = cfg.hidden_size;
  const int E = cfg.num_experts, k = cfg.experts_per_tok;
  const double eb = double(m.experts[0].gate->nbytes + m.experts[0].up->nbytes + m.experts[0].down->nbytes);
  const std::vector<MlpWeights>* ex = &m.experts;
  auto inputs = [H, E](Backend& be) {
    return std::make_pair(act(be, {1, H}, 1.0, 31), act(be, {1, int64_t(E)}, 2.0, 32));
  };
  add(cat("moe_experts_on_device top-", k, " of ", E, " [1 x ", H, "]"), double(k) * eb + kB2 * double(2 * H + E),
      double(k) * eb,
      [inputs, ex, k](Backend& be) -> OpRun {
        const std::pair<Tensor, Tensor> in = inputs(be);
        return [&be, x = in.first, logits = in.second, ex, k] {
          std::optional<Tensor> y = be.moe_experts_on_device(x, logits, *ex, k, true);
          if (!y) throw std::logic_error("moe_experts_on_device: not on the device at one row");
          return one("y", *y);
        };
      },
      [inputs, ex, k](Backend& be) -> OpRun {
        const std::pair<Tensor, Tensor> in = inputs(be);
        return [&be, x = in.first, logits = in.second, ex, k] {
          return one("y", moe_routed_on_host(be, x, logits, *ex, k, true));
        };
      });
  if (!m.shared_gate) return;
  const TensorView* down = m.shared.down;
  const int64_t I = down->shape[1];
  const double db = double(down->nbytes);
  add(cat("matmul_gate_add moe shared down + gate + routed [1 x ", I, "]"), db + kB2 * double(I + 1 + 2 * H), db,
      [down, H, I](Backend& be) -> OpRun {
        const Tensor s = act(be, {1, I}, 1.0, 36), gate = act(be, {1, 1}, 2.0, 37), routed = act(be, {1, H}, 1.0, 38);
        return [&be, s, gate, routed, down] { return one("y", be.matmul_gate_add(s, *down, gate, routed)); };
      });
}

// The attention layer: its q/k/v products of one row, the output gate with o_proj and the residual;
// decode attention at context `ctx` under each algorithm and cache dtype (the cache filled by one
// prefill call, then one row: the KV append and the attention, as the op attention() does them);
// prefill attention of `rows` rows from an empty cache under flash (on tensor cores where the
// head_dim allows, kernels/attention_flash.cu): the KV append and the attention. Prefill floor: q and
// the output once, the new K/V rows read, stored in the cache and read back; FLOPs of the causal
// products (Q Kᵀ and P V over ctx = 1 .. N keys).
void Builder::attention(const AttnWeights& a) {
  const int64_t H = cfg.hidden_size;
  matmul_many("attn q,k,v", {a.q_proj, a.k_proj, a.v_proj});
  const int64_t in = a.o_proj->shape[1];
  const double ob = double(a.o_proj->nbytes);
  const TensorView* o_proj = a.o_proj;
  add(cat("sigmoid_gate_matmul output gate + o_proj + residual [1 x ", in, "]"),
      ob + kB2 * (2.0 * double(in) + 2.0 * double(H)), ob, [o_proj, in, H](Backend& be) -> OpRun {
        const Tensor y = act(be, {1, in}, 1.0, 33), gate = act(be, {1, in}, 1.0, 34), res = act(be, {1, H}, 1.0, 35);
        return [&be, y, gate, res, o_proj] { return one("y", be.sigmoid_gate_matmul(y, gate, *o_proj, &res)); };
      });
  const int64_t nq = cfg.n_q, nkv = cfg.n_kv, D = cfg.head_dim, ctx = sz.ctx;
  // runs attention under `algo` on the cache, from `len` rows (the same rows appended each time)
  auto call = [](Backend& be, AttnAlgo algo, const Tensor& q, const Tensor& k, const Tensor& v, KvCache& cache,
                 int64_t len, int64_t rows) {
    LayerNumerics n = be.numerics();
    n.attn = algo;
    be.begin_layer(n);
    cache.len = len;
    return one("out", be.attention(q, k, v, {SeqSpan{0, rows, len}}, {&cache}));
  };
  // decode under each algorithm with a bf16 and an fp8 cache (kv_dtype=fp8; the fp32 reference of the
  // tests keeps its fp32 cache)
  for (DType kv : {DType::bf16, DType::f8_e4m3}) {
    const double kvb = double(dtype_size(kv)) * 2.0 * double(ctx + 1) * double(nkv * D);
    for (AttnAlgo algo : {AttnAlgo::naive, AttnAlgo::flash, AttnAlgo::splitkv, AttnAlgo::grouped})
      add(cat("attention decode attn=", attn_algo_name(algo), " [", nq, " heads x ", D, ", ", nkv,
              kv == DType::bf16 ? " KV" : " fp8 KV", ", context ", ctx, "]"),
          kvb + kB2 * 2.0 * double(nq * D), 4.0 * double(ctx) * double(nq * D), [=](Backend& be) -> OpRun {
            LayerNumerics n = be.numerics();
            if (n.kv_dtype != DType::f32) n.kv_dtype = kv;
            be.begin_layer(n);
            auto cache = std::make_shared<KvCache>();
            be.attention(act(be, {ctx, nq, D}, 1.0, 10), act(be, {ctx, nkv, D}, 1.0, 11),
                         act(be, {ctx, nkv, D}, 1.0, 12), {SeqSpan{0, ctx, 0}}, {cache.get()});
            const Tensor q = act(be, {1, nq, D}, 1.0, 13), k = act(be, {1, nkv, D}, 1.0, 14);
            const Tensor v = act(be, {1, nkv, D}, 1.0, 15);
            return [&be, q, k, v, cache, ctx, algo, call] { return call(be, algo, q, k, v, *cache, ctx, 1); };
          });
  }
  const int64_t N = sz.rows;
  add(cat("attention prefill attn=flash [", N, " rows x ", nq, " heads x ", D, ", ", nkv, " KV]"),
      kB2 * (2.0 * double(N * nq * D) + 6.0 * double(N * nkv * D)),
      4.0 * double(nq * D) * double(N) * double(N + 1) / 2.0,
      [=](Backend& be) -> OpRun {
        const Tensor q = act(be, {N, nq, D}, 1.0, 40), k = act(be, {N, nkv, D}, 1.0, 41);
        const Tensor v = act(be, {N, nkv, D}, 1.0, 42);
        auto cache = std::make_shared<KvCache>();
        return [&be, q, k, v, cache, N, call] { return call(be, AttnAlgo::flash, q, k, v, *cache, 0, N); };
      });
}

void Builder::norms() {
  const int64_t H = cfg.hidden_size, R = sz.rows;
  const TensorView* nw = w.layers.at(0).post_norm;
  const double eps = cfg.rms_norm_eps;
  add(cat("add_rmsnorm [1 x ", H, "]"), kB2 * 4.0 * double(H) + double(nw->nbytes), 0,
      [H, nw, eps](Backend& be) -> OpRun {
    const Tensor a = act(be, {1, H}, 1.0, 16), b = act(be, {1, H}, 1.0, 17);
    return [&be, a, b, nw, eps] {
      auto [sum, y] = be.add_rmsnorm(a, b, *nw, eps, NormKind::zero_centred);
      return std::vector<OpOutput>{{"sum", sum}, {"norm", y}};
    };
  });
  add(cat("rmsnorm [", R, " x ", H, "]"), kB2 * 2.0 * double(R) * double(H), 0, [H, R, nw, eps](Backend& be) -> OpRun {
    const Tensor x = act(be, {R, H}, 1.0, 18);
    return [&be, x, nw, eps] { return one("y", be.rmsnorm(x, *nw, eps, NormKind::zero_centred)); };
  });
}

}  // namespace

Tensor moe_routed_on_host(Backend& be, const Tensor& x, const Tensor& logits, const std::vector<MlpWeights>& ex, int k,
                          bool renorm) {
  const MoeRouting route = be.moe_route(logits, k, renorm);
  Tensor routed = be.zeros({x.rows(), x.cols()}, be.act_dtype());
  for (int e = 0; e < static_cast<int>(ex.size()); ++e) {
    std::vector<int64_t> rows;
    std::vector<double> wt;
    for (int64_t t = 0; t < x.rows(); ++t)
      for (int i = 0; i < k; ++i)
        if (route.experts[size_t(t * k + i)] == e) {
          rows.push_back(t);
          wt.push_back(route.weights[size_t(t * k + i)]);
        }
    if (rows.empty()) continue;
    const Tensor h = be.matmul_swiglu(be.gather_rows(x, rows), *ex[size_t(e)].gate, *ex[size_t(e)].up);
    be.scatter_add_rows(routed, be.matmul(h, *ex[size_t(e)].down), rows, wt);
  }
  return routed;
}

LayerNumerics op_case_numerics() {
  LayerNumerics n;
  n.layer = 0;
  n.ssm_dtype = DType::f32;
  n.conv_dtype = DType::bf16;
  n.kv_dtype = DType::bf16;
  return n;
}

std::vector<OpCase> op_cases(const ModelConfig& cfg, const ModelWeights& w, OpSizes sizes) {
  Builder b{cfg, w, sizes, {}};
  const LayerWeights* gdn = nullptr;
  const LayerWeights* att = nullptr;
  const MlpWeights* mlp = nullptr;
  const LayerWeights* moe = nullptr;
  for (const LayerWeights& lw : w.layers) {
    if (!gdn && lw.kind == LayerKind::linear && !lw.gdn.fused) gdn = &lw;
    if (!att && lw.kind == LayerKind::full) att = &lw;
    if (!mlp && !lw.moe && lw.mlp.gate) mlp = &lw.mlp;
    if (!moe && lw.moe) moe = &lw;
  }
  if (gdn) {
    b.gdn_decode(*gdn);
    b.gdn_core();
  }
  if (mlp) b.mlp(*mlp);
  if (moe) b.moe(moe->moe_w);
  if (att) b.attention(att->attn);
  b.norms();
  b.matmul("lm_head", w.lm_head, 1);
  return std::move(b.out);
}

}  // namespace degen::cuda
