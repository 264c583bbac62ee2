// The CUDA emulator's device side: force-included (g++ -include) into every kernels/*.cu and
// src/cuda/*.cpp file of the emulated build, so that the project's own CUDA code, unchanged, runs on
// the CPU. It is test equipment, not a GPU: see tests/emu/README.md for what it checks and what it
// cannot.
//
// The kernel files are first rewritten by tests/emu/rewrite.cmake (launches and dynamic shared
// memory only); everything else compiles as plain C++ against the toolkit's own headers:
//   k<<<g, b, smem, st>>>(args)      ->  ::emu::named("k", k) | ::emu::Cfg{g, b, smem, st}(args)
//   extern __shared__ float smem[];  ->  float* smem = ::emu::dyn_smem<float>();
// Each block runs as blockDim user-level fibers on the launching OS thread; __syncthreads and warp
// shuffles are scheduling points (emu_runtime.cpp). `__shared__` becomes `static`: one copy per
// kernel, which is the block's shared memory because the blocks of every launch run one at a time
// under one process-wide lock.
#pragma once

// src/cuda/device_counters.cpp: the counting is the emulator's (emu_runtime.cpp)
#define DEGEN_CUDA_EMULATED 1

// Before the toolkit headers, which keep a definition they find (crt/host_defines.h).
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __constant__ static

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#undef __launch_bounds__
#define __launch_bounds__(...)

namespace emu {

// ---- built-in variables and barriers (emu_runtime.cpp) ----
// The running thread's built-in variables, set by the scheduler on the launching OS thread before
// it runs a thread of a block. note: read inline (no call per `threadIdx.x`): the kernels read them
// in their inner loops, and a call into the runtime there was a fifth of the emulated time.
struct Builtins {
  const uint3* tid = nullptr;  // the running thread's threadIdx
  uint3 bid{};                 // blockIdx
  dim3 block{1, 1, 1};         // blockDim
  dim3 grid{1, 1, 1};          // gridDim
  void* smem = nullptr;        // the launch's dynamic shared memory (0xFF-filled per block, see launch)
};
inline thread_local constinit Builtins tl_builtins{};
inline const uint3& thread_idx() { return *tl_builtins.tid; }
inline const uint3& block_idx() { return tl_builtins.bid; }
inline const dim3& block_dim() { return tl_builtins.block; }
inline const dim3& grid_dim() { return tl_builtins.grid; }
inline void* dyn_smem_base() { return tl_builtins.smem; }
void sync_block();                       // __syncthreads
void sync_warp_exchange(const void* v, void* out, unsigned size, unsigned src_lane, const char* op);
// A warp-collective meeting point: every lane of the warp must arrive (as at a full-mask shuffle);
// then each lane's `size` bytes at `mine` are copied, in lane order, to every lane's `all`
// (32 * size bytes; null: receive nothing). __syncwarp and wmma::mma_sync are built on it.
void sync_warp_gather(const void* mine, unsigned size, void* all, const char* op);
// A warp reduction of one float per lane as kernels/common.cuh's warp_sum / warp_max compute it: the
// butterfly of five full-mask __shfl_xor_sync (lane offsets 16, 8, 4, 2, 1), where at each step a
// lane combines its own value with its partner's, own first (v + partner, fmaxf(v, partner)). Every
// lane must arrive, as at a shuffle; the butterfly is then computed for all 32 lanes at one meeting
// point, in the same order, so each lane gets the value the five shuffles would give it, bit for bit
// (tests/emu/test_emu.cu), for one switch per lane instead of five.
enum class WarpReduce : unsigned { sum, max };
float warp_reduce(float v, WarpReduce kind, const char* op);
// A block reduction of one float per thread as kernels/common.cuh's block_sum / block_max compute
// it: each warp's butterfly (as warp_reduce), lane 0's result per warp, then every warp's butterfly
// over (lane < warps ? that warp's result : 0 or -inf). Every thread of the block must arrive: it is
// a barrier (as the two __syncthreads of block_sum); both butterflies are then computed at that one
// meeting point, in the same order, so each thread gets the value block_sum would give it, bit for
// bit (tests/emu/test_emu.cu), for one switch per thread instead of two barriers and two warp
// meetings. blockDim must be a multiple of 32, as block_sum requires.
float block_reduce(float v, WarpReduce kind, const char* op);
// Fails the running launch with this message (the kernel runs on; the launch reports it).
void kernel_error(const std::string& msg);

template <typename T>
T* dyn_smem() { return static_cast<T*>(dyn_smem_base()); }

// ---- launches ----
struct Cfg;
template <typename... A>
struct Pending {
  const Cfg* cfg;
  std::tuple<std::decay_t<A>...> args;
};
struct Cfg {
  dim3 grid;
  dim3 block;
  size_t smem = 0;
  cudaStream_t stream = nullptr;
  template <typename... A>
  Pending<A...> operator()(A&&... a) const {
    return Pending<A...>{this, std::tuple<std::decay_t<A>...>(std::forward<A>(a)...)};
  }
};
template <typename... P>
struct Kernel {
  const char* name;
  void (*fn)(P...);
};
template <typename... P>
Kernel<P...> named(const char* name, void (*fn)(P...)) { return {name, fn}; }

// Runs body() once per thread of every block (emu_runtime.cpp). `key` identifies the kernel for
// cudaFuncSetAttribute; pointer arguments are checked to lie in device allocations (or be null).
struct LaunchInfo {
  const char* name;
  const void* key;
  const Cfg* cfg;
  const void* const* pointers;  // the kernel's pointer arguments
  size_t n_pointers;
};
void launch(const LaunchInfo& info, void (*body)(void*), void* ctx);

// ---- stream capture (emu_runtime.cpp): a launch on a capturing stream becomes a graph node that
// keeps the arguments' values of the capture, as CUDA's kernel nodes do ----
bool capturing(cudaStream_t s);
void capture_node(cudaStream_t s, const char* name, std::function<void(cudaStream_t)> run);

template <typename T>
void collect_pointer(const T& v, const void** out, size_t& n) {
  if constexpr (std::is_pointer_v<T>) out[n++] = static_cast<const void*>(v);
}

template <typename... P, typename... A>
void operator|(const Kernel<P...>& k, Pending<A...>&& p) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  struct Ctx {
    void (*fn)(P...);
    std::tuple<P...> params;
  };
  Ctx ctx{k.fn, std::apply([](auto&... a) { return std::tuple<P...>(a...); }, p.args)};
  const void* ptrs[sizeof...(P) + 1] = {nullptr};
  size_t n = 0;
  std::apply([&](const auto&... v) { (collect_pointer(v, ptrs, n), ...); }, ctx.params);
  void (*body)(void*) = [](void* c) {
    auto* x = static_cast<Ctx*>(c);
    std::apply(x->fn, x->params);  // each thread gets its own copies of the by-value parameters
  };
  if (capturing(p.cfg->stream)) {
    auto held = std::make_shared<Ctx>(std::move(ctx));
    const Cfg cfg = *p.cfg;
    const char* name = k.name;
    const void* key = reinterpret_cast<const void*>(k.fn);
    std::vector<const void*> pv(ptrs, ptrs + n);
    capture_node(cfg.stream, name, [held, cfg, name, key, pv, body](cudaStream_t s) {
      Cfg c = cfg;
      c.stream = s;
      LaunchInfo info{name, key, &c, pv.data(), pv.size()};
      launch(info, body, held.get());
    });
    return;
  }
  LaunchInfo info{k.name, reinterpret_cast<const void*>(k.fn), p.cfg, ptrs, n};
  launch(info, body, &ctx);
}

// ---- warp shuffles: every lane of the warp must take part (mask 0xffffffff only) ----
template <typename T>
T shfl_xor(unsigned mask, T v, int lane_mask, const char* op) {
  static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
  T out{};
  const unsigned lane = (thread_idx().x + thread_idx().y * block_dim().x +
                         thread_idx().z * block_dim().x * block_dim().y) & 31u;
  sync_warp_exchange(&v, &out, sizeof(T), mask == 0xffffffffu ? (lane ^ unsigned(lane_mask)) & 31u : 0xffffffffu, op);
  return out;
}

}  // namespace emu

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())
#define __syncthreads() ::emu::sync_block()
#define __shfl_xor_sync(mask, v, lane) ::emu::shfl_xor((mask), (v), (lane), "__shfl_xor_sync")
// kernels/common.cuh's warp_sum and warp_max use ::emu::warp_reduce where this is defined.
#define DEGEN_CUDA_EMU_WARP_REDUCE 1
// Every lane of the warp must arrive (full mask only, as the shuffles).
#define __syncwarp(...) ::emu::sync_warp_gather(nullptr, 0, nullptr, "__syncwarp")

// ---- warp matrix products (CUDA's nvcuda::wmma; <mma.h> defines nothing outside nvcc) ----
// The model: the m16n16k16 shape with bf16 or fp16 inputs and fp32 accumulators only (a shape or
// type the kernels do not use is a build error). A fragment's element-to-lane mapping is
// unspecified in CUDA; here lane l holds elements 8l .. 8l+7 of the 16x16 tile in row-major order,
// so code that relies on a mapping (other than applying one operation to every element) computes
// something else here than on a GPU. load/store_matrix_sync and fill_fragment act per lane at once,
// with no meeting point: a tile written by other lanes without a __syncwarp (or __syncthreads)
// before is read stale, as it may be on a GPU. A pointer not 256-bit aligned or an ldm not a
// multiple of 16 bytes fails the launch (CUDA's stated requirements). mma_sync is a warp meeting
// point (every lane must arrive) that gathers the lanes' A and B elements; each lane then computes
// its 8 elements of D = A B + C as fp32 sums in k order of the exact products (a bf16 or fp16
// product is exact in fp32). The tensor cores' own summation order and intermediate rounding are
// not modelled: results may differ from a GPU's in fp32 rounding, never more.
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the CUDA emulator models wmma's m16n16k16 shape only");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float>
                                                 : (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>),
                "the CUDA emulator models bf16/fp16 inputs with fp32 accumulators only");
  static constexpr int num_elements = 8;
  T x[8];
};

namespace detail {
inline unsigned lane() {
  return (::emu::thread_idx().x + ::emu::thread_idx().y * ::emu::block_dim().x +
          ::emu::thread_idx().z * ::emu::block_dim().x * ::emu::block_dim().y) & 31u;
}
template <typename T>
inline void check_tile(const T* p, unsigned ldm, const char* op) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    ::emu::kernel_error(std::string(op) + ": pointer not 256-bit aligned");
  if ((size_t(ldm) * sizeof(T)) % 16 != 0 || ldm < 16)
    ::emu::kernel_error(std::string(op) + ": ldm " + std::to_string(ldm) + " is not a multiple of 16 bytes of at least 16 elements");
}
// Element i of this lane's fragment is tile element (r, c); its offset in memory of `col` layout.
inline size_t offset(int i, unsigned ldm, bool col) {
  const unsigned e = lane() * 8 + unsigned(i), r = e / 16, c = e % 16;
  return col ? size_t(c) * ldm + r : size_t(r) * ldm + c;
}
}  // namespace detail

template <typename Use, typename T, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load takes a layout_t");
  detail::check_tile(p, ldm, "wmma::load_matrix_sync");
  for (int i = 0; i < 8; ++i) f.x[i] = p[detail::offset(i, ldm, std::is_same_v<L, col_major>)];
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
  detail::check_tile(p, ldm, "wmma::load_matrix_sync");
  for (int i = 0; i < 8; ++i) f.x[i] = p[detail::offset(i, ldm, l == mem_col_major)];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
  detail::check_tile(p, ldm, "wmma::store_matrix_sync");
  for (int i = 0; i < 8; ++i) p[detail::offset(i, ldm, l == mem_col_major)] = f.x[i];
}
template <typename Use, typename T, typename L, typename V>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, const V& v) {
  for (int i = 0; i < 8; ++i) f.x[i] = T(v);
}
template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  struct Mine {
    T a[8], b[8];
  } mine;
  for (int i = 0; i < 8; ++i) {
    mine.a[i] = a.x[i];
    mine.b[i] = b.x[i];
  }
  Mine all[32];
  ::emu::sync_warp_gather(&mine, sizeof mine, all, "wmma::mma_sync");
  // tile element e (row e / 16, column e % 16) of A and of B is lane e / 8's element e % 8
  auto A = [&](unsigned r, unsigned k) { return float(all[(r * 16 + k) / 8].a[(r * 16 + k) % 8]); };
  auto B = [&](unsigned k, unsigned n) { return float(all[(k * 16 + n) / 8].b[(k * 16 + n) % 8]); };
  float out[8];
  for (int i = 0; i < 8; ++i) {
    const unsigned e = detail::lane() * 8 + unsigned(i), r = e / 16, n = e % 16;
    float acc = c.x[i];
    for (unsigned k = 0; k < 16; ++k) acc += A(r, k) * B(k, n);
    out[i] = acc;
  }
  for (int i = 0; i < 8; ++i) d.x[i] = out[i];
}
}  // namespace nvcuda::wmma

// ---- device intrinsics the kernels use, with their CUDA meaning ----
// Fibers of one block never run at the same time, so the atomics are plain read-modify-writes.
template <typename T>
inline T atomicMax(T* p, T v) { T old = *p; if (v > old) *p = v; return old; }
template <typename T>
inline T atomicMin(T* p, T v) { T old = *p; if (v < old) *p = v; return old; }
template <typename T>
inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
// The blocks of a launch run one after another, so an earlier block's writes are visible to a later
// one without a fence: __threadfence orders nothing here. (On a GPU it is what makes a block's
// global writes visible before its atomic ticket; the emulator cannot catch a missing one.)
inline void __threadfence() {}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
using std::isinf;
using std::isnan;

// CUDA's min/max for mixed integer and float arguments.
template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return C(b) < C(a) ? C(b) : C(a);
}
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return C(a) < C(b) ? C(b) : C(a);
}

// The runtime's typed overload (cuda_runtime.h declares it for nvcc only).
template <typename... P>
inline cudaError_t cudaFuncSetAttribute(void (*f)(P...), cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(f), attr, value);
}
