// The CUDA emulator's host side: the subset of the CUDA runtime, cuBLAS and NCCL that src/cuda uses,
// defined against the toolkit's own declarations (so a signature that drifts fails to compile), and
// the block scheduler that runs kernels as fibers. See tests/emu/README.md.
//
// What it checks that a plain CPU port would not:
//   - device memory: every allocation sits between PROT_NONE guard pages, so a kernel reading or
//     writing beyond them faults at once (the handler names the kernel, block, thread and the
//     allocation); the alignment slack between buffer and guard (under 256 bytes after, 256
//     checked before) holds a canary checked after every launch, so a write there fails the
//     launch; freed memory is made inaccessible (use after free faults; kept for reuse);
//   - launches: blockDim <= 1024, grid.y/z <= 65535, dynamic shared memory <= 48 KiB unless
//     cudaFuncSetAttribute raised the kernel's limit (at most 227 KiB, Hopper's opt-in maximum);
//     every pointer argument is null or inside a device allocation of the current device;
//   - barriers: a __syncthreads that some threads of the block never reach (they exited, or wait
//     at a shuffle) and a full-mask shuffle in a warp with exited or missing lanes are errors, not
//     hangs; dynamic shared memory starts filled with 0xFF bytes (NaN) in every block;
//   - copies: the device side of cudaMemcpy* must lie inside one allocation, the host side outside;
//   - cuBLAS: leading dimensions and the extents the GEMM reads and writes;
//   - devices: streams, cuBLAS handles and pointers must belong to the current device.
// A failed check prints "cuda-emu: ..." to stderr and the launch reports cudaErrorLaunchFailure.
//
// Environment: DEGEN_EMU_DEVICES (default 2, at most 64), DEGEN_EMU_MEM_GIB (per device, default 8),
// DEGEN_EMU_ORDER=reverse (run the threads of a block in reverse order between barriers: a result
// that changes with the order is a race).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#if DEGEN_HAVE_NCCL
#include <nccl.h>
#endif

#include "cuda/device_counters.h"
#include "cuda_emu.h"

namespace emu {
namespace {

// ---------------------------------------------------------------- configuration and devices
int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : dflt;
}
constexpr int kMaxDevices = 64;  // the size of g_live
int n_devices() {
  static const int n = std::clamp(env_int("DEGEN_EMU_DEVICES", 2), 0, kMaxDevices);
  return n;
}
size_t device_total() {
  static const size_t t = size_t(std::max(1, env_int("DEGEN_EMU_MEM_GIB", 8))) << 30;
  return t;
}
std::atomic<bool> g_reverse{[] {
  const char* v = std::getenv("DEGEN_EMU_ORDER");
  return v && std::strcmp(v, "reverse") == 0;
}()};
bool reverse_order() { return g_reverse.load(std::memory_order_relaxed); }

thread_local int tl_device = 0;
thread_local cudaError_t tl_last_error = cudaSuccess;

void report(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "cuda-emu: %s\n", buf);
  std::fflush(stderr);
}

cudaError_t fail(cudaError_t e) {
  tl_last_error = e;
  return e;
}

// ---------------------------------------------------------------- guarded device memory
const size_t kPage = size_t(sysconf(_SC_PAGESIZE));
constexpr uintptr_t kCanary = 256;  // bytes checked before each buffer (after it: up to the guard page)
constexpr unsigned char kCanaryByte = 0xCD;

struct Alloc {
  uintptr_t base;   // what cudaMalloc returned
  size_t size;      // bytes asked for
  int device;
  void* map;        // the mapping: guard page, data pages, guard page
  size_t map_len;
};
std::mutex g_alloc_mutex;
std::map<uintptr_t, Alloc> g_allocs;  // by base
size_t g_live[kMaxDevices];

// The allocation holding [p, p + n), or nullptr. p == end with n == 0 counts as inside.
const Alloc* find_alloc(const void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  const Alloc& x = it->second;
  if (a < x.base || a + n > x.base + x.size || a > x.base + x.size) return nullptr;
  return &x;
}

// ---- counting (src/cuda/device_counters.h): while `on`, every device data page is PROT_NONE at
// the start of each counted call (a kernel launch, a cuBLAS product, a copy, a memset); the fault
// handler opens a page at its first touch and adds its bytes to the call's reads or writes. Used by
// one host thread at a time (bench --count); the state is that thread's while it counts.
// The SIGSEGV and SIGBUS handlers replaced by the emulator's (install_on_segv).
struct OldHandlers {
  struct sigaction segv{}, bus{};
};

struct Count {
  bool on = false;
  bool in_call = false;
  bool quiet = false;  // the emulator's own accesses (canary checks): pages opened, not counted
  const char* call = "";
  int64_t call_read = 0, call_written = 0;
  int64_t outside_read = 0, outside_written = 0;  // touched between calls (e.g. the CUB stand-in)
  std::vector<uintptr_t> open;                    // pages opened since the last call began
  std::vector<uintptr_t> written;                 // pages the running call wrote
  degen::cuda::DeviceCounters c;
  std::map<std::string, degen::cuda::CallTraffic> by_name;
  OldHandlers old;  // the handlers counting replaced
};
Count g_count;

// Freed mappings kept for reuse by an allocation of the same length, their data pages PROT_NONE
// like the guards (a use after free still faults). note: the engine frees and allocates the same
// sizes every step; a fresh mmap, two mprotects, the page faults and a munmap per buffer were a
// sixth of the emulated time. At most kSpareMax bytes are kept; past it, freed memory is unmapped.
constexpr size_t kSpareMax = size_t(256) << 20;
std::multimap<size_t, void*> g_spare;  // mapping length -> mapping (under g_alloc_mutex)
size_t g_spare_bytes = 0;

void* guarded_alloc(size_t size, int device) {
  const size_t data = (std::max<size_t>(size, 1) + kPage - 1) / kPage * kPage;
  const size_t len = data + 2 * kPage;
  void* m = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_alloc_mutex);
    if (auto it = g_spare.find(len); it != g_spare.end()) {
      m = it->second;
      g_spare.erase(it);
      g_spare_bytes -= len;
    }
  }
  char* c = nullptr;
  if (m) {
    c = static_cast<char*>(m);
    if (mprotect(c + kPage, data, PROT_READ | PROT_WRITE) != 0) return nullptr;
  } else {
    m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    c = static_cast<char*>(m);
    mprotect(c, kPage, PROT_NONE);
    mprotect(c + kPage + data, kPage, PROT_NONE);
  }
  // The end of the buffer as close to the upper guard as 256-byte alignment (cudaMalloc's) allows.
  uintptr_t base = reinterpret_cast<uintptr_t>(c + kPage + data) - size;
  base &= ~uintptr_t(255);
  std::memset(reinterpret_cast<void*>(base), 0xA5, size);  // device memory starts as garbage
  // The slack between the buffer and the guard pages (alignment) holds a canary that every launch
  // checks: writes within it are caught there, accesses beyond it by the guard pages.
  const uintptr_t lo = std::max(reinterpret_cast<uintptr_t>(c + kPage), base - kCanary);
  std::memset(reinterpret_cast<void*>(lo), kCanaryByte, base - lo);
  std::memset(reinterpret_cast<void*>(base + size), kCanaryByte, reinterpret_cast<uintptr_t>(c + kPage + data) - (base + size));
  if (g_count.on) mprotect(c + kPage, data, PROT_NONE);  // counted from its first touch
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  g_allocs[base] = Alloc{base, size, device, m, len};
  g_live[device] += size;
  return reinterpret_cast<void*>(base);
}

cudaError_t guarded_free(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_allocs.end()) {
    report("cudaFree(%p): not a pointer cudaMalloc returned (or freed twice)", p);
    return fail(cudaErrorInvalidValue);
  }
  g_live[it->second.device] -= it->second.size;
  const size_t len = it->second.map_len;
  char* c = static_cast<char*>(it->second.map);
  // note: while counting, never unmapped: a page of it may wait in g_count.open to be closed again
  if ((g_count.on || g_spare_bytes + len <= kSpareMax) && mprotect(c + kPage, len - 2 * kPage, PROT_NONE) == 0) {
    g_spare.emplace(len, c);
    g_spare_bytes += len;
  } else {
    munmap(c, len);
  }
  g_allocs.erase(it);
  return cudaSuccess;
}

bool is_device_range(const void* p, size_t n, int* device = nullptr) {
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  const Alloc* a = find_alloc(p, n);
  if (a && device) *device = a->device;
  return a != nullptr;
}

// Whether [p, end) still holds only canary bytes. note: 8 bytes at a time: this runs after every
// launch over every live allocation (byte by byte it was a tenth of the emulated time).
bool canary_intact(uintptr_t p, uintptr_t end) {
  constexpr uint64_t kWord = 0x0101010101010101ull * kCanaryByte;
  for (; p < end && (p & 7u); ++p)
    if (*reinterpret_cast<const unsigned char*>(p) != kCanaryByte) return false;
  for (; p + 8 <= end; p += 8)
    if (*reinterpret_cast<const uint64_t*>(p) != kWord) return false;
  for (; p < end; ++p)
    if (*reinterpret_cast<const unsigned char*>(p) != kCanaryByte) return false;
  return true;
}

// The first allocation whose canary a write changed, as a message, and the canary restored.
// `only`: check these allocations' bases only (while counting: those the launch wrote).
std::string check_canaries(const std::vector<uintptr_t>* only = nullptr) {
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  for (const auto& [base, a] : g_allocs) {
    if (only && !std::binary_search(only->begin(), only->end(), base)) continue;
    const uintptr_t data = reinterpret_cast<uintptr_t>(a.map) + kPage;
    const uintptr_t lo = std::max(data, base - kCanary), end = base + a.size;
    const uintptr_t hi = reinterpret_cast<uintptr_t>(a.map) + a.map_len - kPage;
    if (canary_intact(end, hi) && canary_intact(lo, base)) continue;
    for (uintptr_t p = end; p < hi; ++p)
      if (*reinterpret_cast<unsigned char*>(p) != kCanaryByte) {
        std::memset(reinterpret_cast<void*>(end), kCanaryByte, hi - end);
        return "wrote " + std::to_string(p - end) + " bytes past the end of a " + std::to_string(a.size) +
               "-byte device allocation";
      }
    for (uintptr_t p = lo; p < base; ++p)
      if (*reinterpret_cast<unsigned char*>(p) != kCanaryByte) {
        std::memset(reinterpret_cast<void*>(lo), kCanaryByte, base - lo);
        return "wrote " + std::to_string(base - p) + " bytes before the start of a " + std::to_string(a.size) +
               "-byte device allocation";
      }
  }
  return "";
}

// ---------------------------------------------------------------- counting
// The allocation whose data pages hold address a, or nullptr. Its base lies less than a page above
// the first data page, and the next allocation's base lies beyond a guard page. note: no lock: the
// fault handler runs this on the counting thread, the only one allocating while counting.
const Alloc* page_owner(uintptr_t a) {
  auto it = g_allocs.upper_bound(a + kPage);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  const Alloc& x = it->second;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(x.map) + kPage, hi = reinterpret_cast<uintptr_t>(x.map) + x.map_len - kPage;
  return a >= lo && a < hi ? &x : nullptr;
}

// A fault at `addr` while counting: true when it was a closed device page, now open and counted.
bool count_fault(uintptr_t addr, void* uc) {
  if (!g_count.on) return false;
  const Alloc* x = page_owner(addr);
  if (!x) return false;
  const uintptr_t p = addr & ~(uintptr_t(kPage) - 1);
#if defined(__x86_64__)
  // the page-fault error code: bit 1 set for a write
  const bool write = (static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
  const bool read = !write;
#else
  const bool write = true, read = true;  // cannot tell: counted as both
#endif
  if (mprotect(reinterpret_cast<void*>(p), kPage, write ? PROT_READ | PROT_WRITE : PROT_READ) != 0) return false;
  const uintptr_t lo = std::max(p, x->base), hi = std::min(p + kPage, x->base + x->size);
  const int64_t bytes = hi > lo ? int64_t(hi - lo) : 0;
  g_count.open.push_back(p);
  if (write) g_count.written.push_back(p);
  if (g_count.quiet) return true;
  int64_t& r = g_count.in_call ? g_count.call_read : g_count.outside_read;
  int64_t& w = g_count.in_call ? g_count.call_written : g_count.outside_written;
  if (read) r += bytes;
  if (write) w += bytes;
  return true;
}

// Every page opened since the last call closed again (runs of neighbouring pages in one mprotect).
void close_pages() {
  std::vector<uintptr_t>& v = g_count.open;
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  for (size_t i = 0; i < v.size();) {
    size_t j = i + 1;
    while (j < v.size() && v[j] == v[j - 1] + kPage) ++j;
    mprotect(reinterpret_cast<void*>(v[i]), (j - i) * kPage, PROT_NONE);
    i = j;
  }
  v.clear();
  g_count.written.clear();
}

// A counted call: its pages start closed; on leaving, its bytes go to its name. A call inside
// another (a copy inside a 2D copy) is part of the outer one.
struct CountedCall {
  bool active = false;
  explicit CountedCall(const char* name) {
    if (!g_count.on || g_count.in_call) return;
    close_pages();
    g_count.in_call = true;
    g_count.call = name;
    g_count.call_read = g_count.call_written = 0;
    active = true;
  }
  ~CountedCall() {
    if (!active) return;
    degen::cuda::CallTraffic& t = g_count.by_name[g_count.call];
    t.name = g_count.call;
    t.calls += 1;
    t.bytes_read += g_count.call_read;
    t.bytes_written += g_count.call_written;
    g_count.c.bytes_read += g_count.call_read;
    g_count.c.bytes_written += g_count.call_written;
    g_count.in_call = false;
  }
};

// The bases of the allocations the running call wrote, sorted (for check_canaries).
std::vector<uintptr_t> written_allocations() {
  std::vector<uintptr_t> out;
  for (uintptr_t p : g_count.written)
    if (const Alloc* x = page_owner(p)) out.push_back(x->base);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Every live allocation's data pages set to `prot` (counting: closed at the start, open at the end).
void protect_data_pages(int prot) {
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  for (const auto& [base, a] : g_allocs) mprotect(static_cast<char*>(a.map) + kPage, a.map_len - 2 * kPage, prot);
}

void count(int64_t degen::cuda::DeviceCounters::*field, int64_t n = 1) {
  if (g_count.on) g_count.c.*field += n;
}

// ---------------------------------------------------------------- streams, handles, events
// A graph node: the work one captured call does when the graph is launched on `stream`.
struct Node {
  std::string name;
  std::function<void(cudaStream_t)> run;
};
struct Stream {
  int device;
  std::vector<Node>* capture = nullptr;  // capturing: the nodes so far
  std::string invalidated;               // why the capture is invalid ("" while it is valid)
};
}  // namespace
}  // namespace emu

struct CUstream_st { emu::Stream s; };
struct CUgraph_st { int device; std::vector<emu::Node> nodes; };
struct CUgraphExec_st { int device; std::vector<emu::Node> nodes; };
struct CUevent_st { std::chrono::steady_clock::time_point t; bool recorded = false; };
struct cublasContext { int device; cudaStream_t stream = nullptr; };

namespace emu {
namespace {

int stream_device(cudaStream_t s) { return s ? s->s.device : tl_device; }

// ---------------------------------------------------------------- stream capture
// The capture of this thread (cudaStreamCaptureModeGlobal and ThreadLocal behave alike here, as
// the project captures on one thread). While it runs, a call that would synchronise or allocate
// ("potentially unsafe" in CUDA's terms) fails with cudaErrorStreamCaptureUnsupported and
// invalidates the capture, as on a GPU; stream-ordered allocation inside a capture (graph memory
// nodes) is not modelled and is refused the same way.
thread_local cudaStream_t tl_capture = nullptr;
std::mutex g_pinned_mutex;
std::map<const char*, size_t> g_pinned;  // cudaMallocHost / cudaHostAlloc blocks

bool is_pinned(const void* p, size_t n) {
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto it = g_pinned.upper_bound(static_cast<const char*>(p));
  if (it == g_pinned.begin()) return false;
  --it;
  return static_cast<const char*>(p) >= it->first && static_cast<const char*>(p) + n <= it->first + it->second;
}

// cudaSuccess, or the error of `call` made while this thread captures.
cudaError_t unsafe_in_capture(const char* call) {
  if (!tl_capture) return cudaSuccess;
  report("%s while stream %p is being captured: not permitted in a capture (it invalidates it)", call,
         static_cast<void*>(tl_capture));
  if (tl_capture->s.invalidated.empty()) tl_capture->s.invalidated = call;
  return fail(cudaErrorStreamCaptureUnsupported);
}

// ---------------------------------------------------------------- the block scheduler
constexpr size_t kStack = 256 * 1024;
enum FiberState { kRun, kBlockWait, kWarpWait, kDone };

// ---- the context switch ----
// x86-64: save the callee-saved registers on the current stack, swap stack pointers, restore
// (glibc's swapcontext also saves the signal mask, a system call per switch: 70% of the time).
// Elsewhere, ucontext.
#if defined(__x86_64__)
extern "C" void emu_switch_stack(void** save_sp, void* to_sp);
asm(R"(
.pushsection .text
.globl emu_switch_stack
.type emu_switch_stack, @function
emu_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch_stack, .-emu_switch_stack
.popsection
)");
struct Context {
  void* sp = nullptr;
};
// A fresh context on [stack, stack + size) that starts in entry(), which must never return.
void make_context(Context& c, char* stack, size_t size, void (*entry)()) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t(15);
  auto* p = reinterpret_cast<void**>(top);
  *--p = nullptr;                               // entry's "return address": entry sees rsp = 8 mod 16
  *--p = reinterpret_cast<void*>(entry);        // where the first switch's ret goes
  for (int i = 0; i < 6; ++i) *--p = nullptr;   // rbp rbx r12 r13 r14 r15
  c.sp = p;
}
inline void switch_context(Context& from, Context& to) { emu_switch_stack(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t uc;
};
void make_context(Context& c, char* stack, size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
inline void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

struct Fiber {
  Context ctx;
  char* stack = nullptr;  // kStack bytes above a guard page
  uint3 tid;
  unsigned linear = 0;
  FiberState st = kRun;
  uint64_t xin = 0;      // shuffle: this lane's value
  void* xout = nullptr;  // shuffle: where the source lane's value goes
  unsigned xsize = 0, xsrc = 0;
  const void* xptr = nullptr;  // gather (xsrc == kGather): this lane's xsize bytes
  const char* xop = nullptr;
};

constexpr size_t kSmemAlign = 128;  // dynamic shared memory's alignment here

// Fiber::xsrc of a lane at a warp gather (sync_warp_gather) or a warp reduction (warp_reduce)
// rather than a shuffle (whose xsrc is the source lane, or 0xffffffff for a mask not emulated).
constexpr unsigned kGather = 0xfffffffeu;
constexpr unsigned kReduceSum = 0xfffffffdu;
constexpr unsigned kReduceMax = 0xfffffffcu;
// Fiber::xsrc of a thread waiting at a block barrier: a plain __syncthreads, or a block reduction
// (block_reduce); a barrier's threads must all wait at the same one.
constexpr unsigned kBarrier = 0u;
constexpr unsigned kBlockSum = 0xfffffffbu;
constexpr unsigned kBlockMax = 0xfffffffau;
// The kind of warp operation an xsrc stands for: a shuffle (any lane or the unemulated mask) is 0.
inline unsigned warp_kind(unsigned xsrc) { return xsrc >= kReduceMax && xsrc != 0xffffffffu ? xsrc : 0; }

struct Run {
  const LaunchInfo* info;
  unsigned n = 0;            // threads per block
  void (*body)(void*);
  void* ctx;
  dim3 grid, block;
  uint3 bid;
  std::vector<unsigned char> smem;
  Context sched;
  Fiber* cur = nullptr;
  bool direct = false;       // this block runs its threads as plain calls (kernel never synchronises)
  bool synced = false;       // some thread waited at a barrier or shuffle in this launch
  uint3 direct_tid;
  std::string error;
};

std::mutex g_launch_mutex;  // one launch at a time in the process: `__shared__` is `static`
thread_local Run* tl_run = nullptr;
std::vector<Fiber> g_fibers;  // reused; used under g_launch_mutex only
std::unordered_map<const void*, bool> g_syncs;  // kernel -> uses barriers (learned from block 0)
std::unordered_map<const void*, int> g_max_dyn_smem;

// The alternate signal stack of each thread that launches, for faults in a fiber's small stack.
void ensure_altstack() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  stack_t ss{};
  ss.ss_size = 64 * 1024;
  ss.ss_sp = std::malloc(ss.ss_size);
  sigaltstack(&ss, nullptr);
}

void on_segv(int sig, siginfo_t* si, void* uc) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  if (count_fault(a, uc)) return;  // a closed page of a counted run, now open
  char where[512] = "outside any kernel";
  if (Run* r = tl_run) {
    const uint3 t = r->direct ? r->direct_tid : (r->cur ? r->cur->tid : uint3{0, 0, 0});
    std::snprintf(where, sizeof where, "in kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", r->info->name, r->bid.x,
                  r->bid.y, r->bid.z, t.x, t.y, t.z);
  }
  char what[512] = "not near any device allocation";
  for (const auto& [base, x] : g_allocs) {  // note: no lock: the process is going down
    const uintptr_t lo = reinterpret_cast<uintptr_t>(x.map), hi = lo + x.map_len;
    if (a >= lo && a < hi) {
      if (a >= x.base + x.size)
        std::snprintf(what, sizeof what, "%zu bytes past the end of a %zu-byte device allocation at %p",
                      size_t(a - (x.base + x.size)), x.size, reinterpret_cast<void*>(x.base));
      else
        std::snprintf(what, sizeof what, "%zu bytes before the start of a %zu-byte device allocation at %p",
                      size_t(x.base - a), x.size, reinterpret_cast<void*>(x.base));
      break;
    }
  }
  if (Run* r = tl_run; r && !r->direct && r->cur) {
    const uintptr_t s = reinterpret_cast<uintptr_t>(r->cur->stack);
    if (a >= s - kPage && a < s) std::snprintf(what, sizeof what, "a thread's stack overflowed (%zu KiB)", kStack / 1024);
  }
  std::fprintf(stderr, "cuda-emu: invalid memory access at %p %s: %s\n", si->si_addr, where, what);
  std::fflush(stderr);
  signal(sig, SIG_DFL);
  raise(sig);
}

// on_segv for SIGSEGV and SIGBUS (on the alternate stack); the handlers it replaces in *old.
void install_on_segv(OldHandlers* old) {
  struct sigaction sa{};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, &old->segv);
  sigaction(SIGBUS, &sa, &old->bus);
}
void restore_handlers(const OldHandlers& old) {
  sigaction(SIGSEGV, &old.segv, nullptr);
  sigaction(SIGBUS, &old.bus, nullptr);
}

// The handler is ours while a launch runs (under g_launch_mutex), the program's otherwise.
struct SegvHandler {
  OldHandlers old;
  SegvHandler() { install_on_segv(&old); }
  ~SegvHandler() { restore_handlers(old); }
};

bool release_complete_warp(unsigned w, unsigned n);

// Leaves the running fiber, which now waits or has exited, for the next runnable fiber of this round
// (the threads of a block run in index order, or reversed), or for the scheduler after the round's
// last. note: one switch per thread per round instead of two through the scheduler; the order is
// the scheduler's, which would have run the same fiber next.
// note: always inlined: after a switch, each return up the resumed fiber's calls is mispredicted (the
// return stack holds the other fiber's), so fewer frames between a shuffle and the switch pay less.
__attribute__((always_inline)) inline void yield_fiber(Run& r) {
  Fiber& f = *r.cur;
  Fiber* next = nullptr;
  // The last lane of a warp to arrive at a warp operation (in this round's order) releases the warp
  // at once, and its first lane runs next: a warp runs on to its next barrier or exit before the
  // next warp starts (warps are independent between barriers, so this is a schedule CUDA allows).
  // note: the lanes' stacks stay in cache (one warp's 32, not the block's up to 1024 in turn), and
  // no end-of-round pass is needed per shuffle (with the inlining below, one case of tiny-qwen35 on
  // backend=cuda: 4.58 s of CPU before, 3.90 s after).
  const bool rev = reverse_order();
  if (f.st == kWarpWait) {
    const unsigned lane = f.linear & 31u, w = f.linear >> 5;
    const bool last = rev ? lane == 0 : (lane == 31 || f.linear + 1 == r.n);
    if (last && release_complete_warp(w, r.n)) next = &g_fibers[rev ? std::min(r.n, w * 32 + 32) - 1 : w * 32];
  }
  if (!next && rev) {
    for (unsigned i = f.linear; i-- > 0;)
      if (g_fibers[i].st == kRun) { next = &g_fibers[i]; break; }
  } else if (!next) {
    for (unsigned i = f.linear + 1; i < r.n; ++i)
      if (g_fibers[i].st == kRun) { next = &g_fibers[i]; break; }
  }
  if (!next) {
    switch_context(f.ctx, r.sched);
    return;
  }
  r.cur = next;
  tl_builtins.tid = &next->tid;
  switch_context(f.ctx, next->ctx);
}

void fiber_main() {
  Run* r = tl_run;
  r->body(r->ctx);
  r->cur->st = kDone;
  yield_fiber(*r);  // never comes back: the next block makes a fresh context
}

void ensure_fibers(size_t n) {
  while (g_fibers.size() < n) {
    Fiber f;
    void* m = mmap(nullptr, kStack + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      report("cannot map a thread stack");
      std::abort();
    }
    mprotect(m, kPage, PROT_NONE);
    f.stack = static_cast<char*>(m) + kPage;
    g_fibers.push_back(f);
  }
}

void set_error(Run& r, const std::string& msg) {
  if (!r.error.empty()) return;
  char head[256];
  std::snprintf(head, sizeof head, "kernel %s, block (%u,%u,%u): ", r.info->name, r.bid.x, r.bid.y, r.bid.z);
  r.error = head + msg;
}

// dst = src for a shuffled value of 1, 2, 4 or 8 bytes. note: fixed-size copies compile to a move;
// memcpy with a variable size was a library call per lane and shuffle.
void copy_value(void* dst, const void* src, unsigned size) {
  switch (size) {
    case 4: std::memcpy(dst, src, 4); break;
    case 8: std::memcpy(dst, src, 8); break;
    case 2: std::memcpy(dst, src, 2); break;
    default: std::memcpy(dst, src, size); break;
  }
}

// Exchanges the values of warp lanes lo..hi (all waiting at one warp operation whose sizes and
// sources were checked) and makes them runnable again.
// The butterfly of warp_sum / warp_max (cuda_emu.h warp_reduce) over v, in place: at offsets 16, 8,
// 4, 2, 1 every lane combines its value with lane (l ^ offset)'s, its own first.
void butterfly(float* v, bool sum) {
  float w[32];
  for (unsigned o = 16; o > 0; o >>= 1) {
    for (unsigned l = 0; l < 32; ++l) w[l] = sum ? v[l] + v[l ^ o] : fmaxf(v[l], v[l ^ o]);
    std::memcpy(v, w, sizeof w);
  }
}

void exchange_and_release(unsigned lo, unsigned hi, unsigned size, unsigned kind) {
  if (kind == kReduceSum || kind == kReduceMax) {
    float v[32];
    for (unsigned i = 0; i < 32; ++i) std::memcpy(&v[i], &g_fibers[lo + i].xin, sizeof(float));
    butterfly(v, kind == kReduceSum);
    for (unsigned i = lo; i < hi; ++i) std::memcpy(g_fibers[i].xout, &v[i - lo], sizeof(float));
  } else if (kind == kGather) {  // every lane receives every lane's bytes, in lane order
    for (unsigned i = lo; i < hi; ++i)
      if (g_fibers[i].xout)
        for (unsigned s = 0; s < 32; ++s)
          std::memcpy(static_cast<unsigned char*>(g_fibers[i].xout) + size_t(s) * size, g_fibers[lo + s].xptr, size);
  } else {
    for (unsigned i = lo; i < hi; ++i) copy_value(g_fibers[i].xout, &g_fibers[lo + g_fibers[i].xsrc].xin, size);
  }
  for (unsigned i = lo; i < hi; ++i) g_fibers[i].st = kRun;
}

// Called by the last lane of warp w to arrive at a warp operation, in the middle of a round: releases
// the warp when it is complete and its lanes agree (one pass checks, one exchanges), and returns
// whether it did. Every doubtful case is left to the end of the round (release_warp), which reports
// the errors.
bool release_complete_warp(unsigned w, unsigned n) {
  const unsigned lo = w * 32, hi = std::min(n, lo + 32);
  if (hi - lo < 32) return false;
  const Fiber& f0 = g_fibers[lo];
  const char* op = f0.xop;
  const unsigned size = f0.xsize;
  const unsigned kind = warp_kind(f0.xsrc);
  for (unsigned i = lo; i < hi; ++i) {
    const Fiber& f = g_fibers[i];
    if (f.st != kWarpWait || f.xop != op || f.xsize != size || warp_kind(f.xsrc) != kind || f.xsrc == 0xffffffffu)
      return false;
  }
  exchange_and_release(lo, hi, size, kind);
  return true;
}

// At the end of a round, warp w when its live lanes all wait at a warp operation: checks that they
// meet at the same one, exchanges the values and makes the lanes runnable again. Returns 1 when
// released, 0 when not (some lanes still run toward the operation), -1 on an error (set in r).
int release_warp(Run& r, unsigned w, unsigned n) {
  const unsigned lo = w * 32, hi = std::min(n, lo + 32);
  unsigned waiting = 0;
  for (unsigned i = lo; i < hi; ++i) waiting += g_fibers[i].st == kWarpWait;
  if (waiting == 0) return 0;
  if (hi - lo < 32) {
    set_error(r, std::string(g_fibers[lo].xop) + " with a full mask in a partial warp (blockDim " +
                     std::to_string(n) + " is not a multiple of 32)");
    return -1;
  }
  if (waiting < 32) {
    bool others_blocked = false;
    for (unsigned i = lo; i < hi; ++i) others_blocked |= g_fibers[i].st != kWarpWait && g_fibers[i].st != kRun;
    if (!others_blocked) return 0;  // some lanes still running toward the shuffle
    set_error(r, std::string(g_fibers[lo].xop) + ": lanes of warp " + std::to_string(w) +
                     " exited or wait at __syncthreads while others shuffle (divergent full-mask shuffle)");
    return -1;
  }
  const unsigned kind = warp_kind(g_fibers[lo].xsrc);
  const bool gather = kind == kGather;
  const char* op = g_fibers[lo].xop;
  for (unsigned i = lo; i < hi; ++i) {
    // note: the same call site passes the same literal; strcmp only where the pointers differ
    if (warp_kind(g_fibers[i].xsrc) != kind || (g_fibers[i].xop != op && std::strcmp(g_fibers[i].xop, op) != 0)) {
      set_error(r, std::string("lanes of warp ") + std::to_string(w) + " meet at different warp operations (" + op +
                       " and " + g_fibers[i].xop + ")");
      return -1;
    }
  }
  const unsigned size = g_fibers[lo].xsize;
  for (unsigned i = lo; i < hi; ++i) {
    if (g_fibers[i].xsize != size) {
      set_error(r, gather ? std::string(op) + ": lanes of one warp contribute different sizes"
                          : std::string("lanes of one warp shuffle values of different sizes"));
      return -1;
    }
    if (kind == 0 && g_fibers[i].xsrc == 0xffffffffu) {
      set_error(r, std::string(g_fibers[i].xop) + " with a mask other than 0xffffffff (not emulated)");
      return -1;
    }
  }
  exchange_and_release(lo, hi, size, kind);
  return 1;
}

// Releases the warps whose live lanes all wait at a shuffle; returns whether any was released.
bool release_warps(Run& r, unsigned n) {
  bool released = false;
  for (unsigned w = 0; w * 32 < n; ++w) {
    const int rc = release_warp(r, w, n);
    if (rc < 0) return false;
    released |= rc > 0;
  }
  return released;
}

// Every live thread of the block waits at a barrier: checks that they wait at the same kind (a plain
// __syncthreads or one block_reduce), computes a block reduction (block_sum's two butterflies, in
// its order) and makes them runnable. False on a mismatch (the error set in r).
bool release_block(Run& r, unsigned n) {
  const unsigned kind = g_fibers[0].xsrc;
  const char* op = g_fibers[0].xop;
  for (unsigned i = 1; i < n; ++i)
    if (g_fibers[i].xsrc != kind || (kind != kBarrier && g_fibers[i].xop != op)) {
      const auto name = [](const Fiber& f) { return std::string(f.xsrc == kBarrier ? "__syncthreads" : f.xop); };
      set_error(r, "threads of one block wait at different barriers: thread 0 at " + name(g_fibers[0]) + ", thread " +
                       std::to_string(i) + " at " + name(g_fibers[i]));
      return false;
    }
  if (kind == kBlockSum || kind == kBlockMax) {
    if (n % 32 != 0 || r.block.y != 1 || r.block.z != 1) {
      set_error(r, std::string(op) + " in a block of " + std::to_string(n) +
                       " threads (block_sum needs a one-dimensional block of whole warps)");
      return false;
    }
    const bool sum = kind == kBlockSum;
    const unsigned nw = n / 32;
    float t[32], v[32];
    for (unsigned l = 0; l < 32; ++l) t[l] = sum ? 0.0f : -INFINITY;
    for (unsigned w = 0; w < nw; ++w) {  // each warp's butterfly; lane 0's value is the warp's
      for (unsigned l = 0; l < 32; ++l) std::memcpy(&v[l], &g_fibers[w * 32 + l].xin, sizeof(float));
      butterfly(v, sum);
      t[w] = v[0];
    }
    butterfly(t, sum);  // every warp reduces the same 32 values: the same result per lane
    for (unsigned i = 0; i < n; ++i) std::memcpy(g_fibers[i].xout, &t[i % 32], sizeof(float));
  }
  for (unsigned i = 0; i < n; ++i) g_fibers[i].st = kRun;
  return true;
}

void run_block_fibers(Run& r) {
  const unsigned n = r.block.x * r.block.y * r.block.z;
  ensure_fibers(n);
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = g_fibers[i];
    f.linear = i;
    f.tid = uint3{i % r.block.x, (i / r.block.x) % r.block.y, i / (r.block.x * r.block.y)};
    f.st = kRun;
    // note: each stack's top staggered by a few cache lines: at the same offset in every 256 KiB
    // stack, the fibers' frames all fell into the same cache sets and every switch missed the cache.
    make_context(f.ctx, f.stack, kStack - (i % 97) * 192, fiber_main);
  }
  for (;;) {
    // One round: the first runnable fiber runs, and each hands over to the next (yield_fiber).
    for (unsigned j = 0; j < n; ++j) {
      Fiber& f = g_fibers[reverse_order() ? n - 1 - j : j];
      if (f.st != kRun) continue;
      r.cur = &f;
      tl_builtins.tid = &f.tid;
      switch_context(r.sched, f.ctx);
      break;
    }
    r.cur = nullptr;
    unsigned done = 0, at_barrier = 0, at_shuffle = 0;
    for (unsigned i = 0; i < n; ++i) {
      done += g_fibers[i].st == kDone;
      at_barrier += g_fibers[i].st == kBlockWait;
      at_shuffle += g_fibers[i].st == kWarpWait;
    }
    if (done == n) return;
    r.synced = true;
    if (at_shuffle && release_warps(r, n)) continue;
    if (!r.error.empty()) return;
    if (at_barrier == n - done && at_shuffle == 0) {
      if (done) {
        set_error(r, std::to_string(done) + " of " + std::to_string(n) +
                         " threads exited while the others wait at __syncthreads (a barrier not every thread reaches)");
        return;
      }
      if (!release_block(r, n)) return;
      continue;
    }
    set_error(r, std::to_string(at_barrier) + " threads wait at __syncthreads and " + std::to_string(at_shuffle) +
                     " at a shuffle, " + std::to_string(done) + " exited: deadlock");
    return;
  }
}

void run_block_direct(Run& r) {
  const unsigned n = r.block.x * r.block.y * r.block.z;
  tl_builtins.tid = &r.direct_tid;
  for (unsigned j = 0; j < n && r.error.empty(); ++j) {
    const unsigned i = reverse_order() ? n - 1 - j : j;
    r.direct_tid = uint3{i % r.block.x, (i / r.block.x) % r.block.y, i / (r.block.x * r.block.y)};
    r.body(r.ctx);
  }
}

}  // namespace

void set_reverse_order(bool on) { g_reverse = on; }

namespace {
// The running fiber waits at a warp operation (a shuffle from src, or kGather) until its warp meets.
__attribute__((always_inline)) inline void wait_at_warp(Run& r, void* out, unsigned size, unsigned src, const char* op) {
  Fiber& f = *r.cur;
  f.xout = out;
  f.xsize = size;
  f.xsrc = src;
  f.xop = op;
  f.st = kWarpWait;
  r.synced = true;  // the round may end with every warp released on the way (yield_fiber)
  yield_fiber(r);
}
// The running fiber waits at a block barrier: a plain __syncthreads (kBarrier) or a block reduction
// (kBlockSum, kBlockMax: its result goes to out) until every thread of the block meets (release_block).
__attribute__((always_inline)) inline void wait_at_block(Run& r, unsigned kind, void* out, const char* op) {
  Fiber& f = *r.cur;
  f.xout = out;
  f.xsrc = kind;
  f.xop = op;
  f.st = kBlockWait;
  yield_fiber(r);
}
}  // namespace

void sync_warp_gather(const void* mine, unsigned size, void* all, const char* op) {
  Run* r = tl_run;
  if (r->direct) {
    set_error(*r, std::string(op) + " in a block after block 0 ran without one (data-dependent warp operation)");
    for (unsigned s = 0; s < 32 && all; ++s) std::memcpy(static_cast<unsigned char*>(all) + size_t(s) * size, mine, size);
    return;
  }
  r->cur->xptr = mine;
  wait_at_warp(*r, all, size, kGather, op);
}

float warp_reduce(float v, WarpReduce kind, const char* op) {
  Run* r = tl_run;
  if (r->direct) {
    set_error(*r, std::string(op) + " in a block after block 0 ran without one (data-dependent warp operation)");
    return v;
  }
  float out = 0;
  copy_value(&r->cur->xin, &v, sizeof v);
  wait_at_warp(*r, &out, sizeof out, kind == WarpReduce::sum ? kReduceSum : kReduceMax, op);
  return out;
}

void kernel_error(const std::string& msg) { set_error(*tl_run, msg); }

void sync_block() {
  Run* r = tl_run;
  if (r->direct) {
    set_error(*r, "__syncthreads in a block after block 0 ran without one (data-dependent barrier)");
    return;
  }
  wait_at_block(*r, kBarrier, nullptr, "__syncthreads");
}

float block_reduce(float v, WarpReduce kind, const char* op) {
  Run* r = tl_run;
  if (r->direct) {
    set_error(*r, std::string(op) + " in a block after block 0 ran without one (data-dependent barrier)");
    return v;
  }
  float out = 0;
  copy_value(&r->cur->xin, &v, sizeof v);
  wait_at_block(*r, kind == WarpReduce::sum ? kBlockSum : kBlockMax, &out, op);
  return out;
}

void sync_warp_exchange(const void* v, void* out, unsigned size, unsigned src_lane, const char* op) {
  Run* r = tl_run;
  if (r->direct) {
    set_error(*r, std::string(op) + " in a block after block 0 ran without one (data-dependent shuffle)");
    std::memcpy(out, v, size);
    return;
  }
  copy_value(&r->cur->xin, v, size);
  wait_at_warp(*r, out, size, src_lane, op);
}

void launch(const LaunchInfo& info, void (*body)(void*), void* ctx) {
  const Cfg& c = *info.cfg;
  const unsigned threads = c.block.x * c.block.y * c.block.z;
  const int dev = tl_device;
  if (threads == 0 || threads > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
      c.grid.y > 65535 || c.grid.z > 65535 || c.grid.x > 2147483647u) {
    report("kernel %s: invalid launch configuration grid (%u,%u,%u) block (%u,%u,%u)", info.name, c.grid.x, c.grid.y,
           c.grid.z, c.block.x, c.block.y, c.block.z);
    fail(cudaErrorInvalidConfiguration);
    return;
  }
  if (stream_device(c.stream) != dev) {
    report("kernel %s: launched on a stream of device %d while device %d is current", info.name,
           stream_device(c.stream), dev);
    fail(cudaErrorInvalidResourceHandle);
    return;
  }
  std::lock_guard<std::mutex> lock(g_launch_mutex);
  {
    auto it = g_max_dyn_smem.find(info.key);
    const size_t limit = it == g_max_dyn_smem.end() ? 48 * 1024 : size_t(it->second);
    if (c.smem > limit) {
      report("kernel %s: %zu bytes of dynamic shared memory, the kernel's limit is %zu%s", info.name, c.smem, limit,
             it == g_max_dyn_smem.end() ? " (cudaFuncSetAttribute(MaxDynamicSharedMemorySize) was not called)" : "");
      fail(cudaErrorInvalidValue);
      return;
    }
  }
  for (size_t i = 0; i < info.n_pointers; ++i) {
    const void* p = info.pointers[i];
    if (!p) continue;
    int pd = -1;
    if (!is_device_range(p, 0, &pd)) {
      report("kernel %s: pointer argument %zu (%p) is not in any device allocation", info.name, i, p);
      fail(cudaErrorIllegalAddress);
      return;
    }
    if (pd != dev) {
      report("kernel %s: pointer argument %zu is memory of device %d, the kernel runs on device %d", info.name, i, pd, dev);
      fail(cudaErrorIllegalAddress);
      return;
    }
  }
  SegvHandler segv;
  ensure_altstack();
  count(&degen::cuda::DeviceCounters::launches);
  CountedCall counted(info.name);
  Run r;
  r.info = &info;
  r.body = body;
  r.ctx = ctx;
  r.grid = c.grid;
  r.block = c.block;
  r.n = threads;
  r.smem.resize(std::max<size_t>(c.smem, 1) + kSmemAlign);
  Run* saved = tl_run;
  const Builtins saved_builtins = tl_builtins;
  tl_run = &r;
  tl_builtins.block = c.block;
  tl_builtins.grid = c.grid;
  // the shared window's start, aligned as the hardware's is (wmma needs 256-bit aligned tiles)
  tl_builtins.smem = r.smem.data() + (kSmemAlign - reinterpret_cast<uintptr_t>(r.smem.data()) % kSmemAlign) % kSmemAlign;
  auto known = g_syncs.find(info.key);
  bool syncs = known == g_syncs.end() ? true : known->second;
  bool first = true;
  for (unsigned z = 0; z < c.grid.z && r.error.empty(); ++z)
    for (unsigned y = 0; y < c.grid.y && r.error.empty(); ++y)
      for (unsigned x = 0; x < c.grid.x && r.error.empty(); ++x) {
        r.bid = uint3{x, y, z};
        tl_builtins.bid = r.bid;
        std::fill(r.smem.begin(), r.smem.end(), 0xFF);
        r.direct = !syncs;
        if (r.direct) {
          run_block_direct(r);
        } else {
          run_block_fibers(r);
          if (first && known == g_syncs.end()) {
            syncs = r.synced;
            g_syncs[info.key] = syncs;
          }
        }
        first = false;
      }
  tl_run = saved;
  tl_builtins = saved_builtins;
  if (r.error.empty()) {
    std::string overrun;
    if (g_count.on) {  // only the allocations this launch wrote could have lost their canary
      const std::vector<uintptr_t> wrote = written_allocations();
      g_count.quiet = true;
      overrun = check_canaries(&wrote);
      g_count.quiet = false;
    } else {
      overrun = check_canaries();
    }
    if (!overrun.empty()) r.error = std::string("kernel ") + info.name + " " + overrun + " (found after the launch)";
  }
  if (!r.error.empty()) {
    report("%s", r.error.c_str());
    fail(cudaErrorLaunchFailure);
  }
}

bool capturing(cudaStream_t s) { return s && s->s.capture; }

void capture_node(cudaStream_t s, const char* name, std::function<void(cudaStream_t)> run) {
  s->s.capture->push_back(Node{name, std::move(run)});
}

}  // namespace emu

// ==================================================================== the CUDA runtime API
using emu::fail;
using emu::report;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = emu::n_devices();
  return emu::n_devices() ? cudaSuccess : emu::fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= emu::n_devices()) return fail(cudaErrorInvalidDevice);
  emu::tl_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = emu::tl_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device < 0 || device >= emu::n_devices()) return fail(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "degen CUDA emulator (CPU) #%d", device);
  p->totalGlobalMem = emu::device_total();
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 227 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 2;
  p->l2CacheSize = 1 << 20;
  p->memoryBusWidth = 64;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= emu::n_devices()) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMemoryClockRate: *value = 1000000; break;  // kHz: with 64 bits, 16 GB/s nominal
    case cudaDevAttrGlobalMemoryBusWidth: *value = 64; break;
    case cudaDevAttrMultiProcessorCount: *value = 2; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 227 * 1024; break;
    default: *value = 0; break;
  }
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  std::lock_guard<std::mutex> lock(emu::g_alloc_mutex);
  const size_t live = emu::g_live[emu::tl_device];
  *total = emu::device_total();
  *free_bytes = live > *total ? 0 : *total - live;
  return cudaSuccess;
}

static cudaError_t emu_malloc(void** p, size_t size) {
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  if (size > f) {
    *p = nullptr;
    return fail(cudaErrorMemoryAllocation);
  }
  *p = emu::guarded_alloc(size, emu::tl_device);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaMalloc(void** p, size_t size) {
  if (cudaError_t e = emu::unsafe_in_capture("cudaMalloc")) return e;
  emu::count(&degen::cuda::DeviceCounters::allocs);
  return emu_malloc(p, size);
}
cudaError_t cudaMallocAsync(void** p, size_t size, cudaStream_t s) {
  if (emu::stream_device(s) != emu::tl_device) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = emu::unsafe_in_capture("cudaMallocAsync (graph memory nodes are not modelled)")) return e;
  emu::count(&degen::cuda::DeviceCounters::allocs);
  return emu_malloc(p, size);
}
cudaError_t cudaFree(void* p) {
  if (cudaError_t e = emu::unsafe_in_capture("cudaFree")) return e;
  if (p) emu::count(&degen::cuda::DeviceCounters::frees);
  return emu::guarded_free(p);
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t) {
  if (cudaError_t e = emu::unsafe_in_capture("cudaFreeAsync (graph memory nodes are not modelled)")) return e;
  if (p) emu::count(&degen::cuda::DeviceCounters::frees);
  return emu::guarded_free(p);
}
cudaError_t cudaHostAlloc(void** p, size_t size, unsigned) {
  if (cudaError_t e = emu::unsafe_in_capture("cudaHostAlloc")) return e;
  *p = std::malloc(size ? size : 1);
  if (!*p) return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(emu::g_pinned_mutex);
  emu::g_pinned[static_cast<const char*>(*p)] = size;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t size) { return cudaHostAlloc(p, size, 0); }
cudaError_t cudaFreeHost(void* p) {
  if (cudaError_t e = emu::unsafe_in_capture("cudaFreeHost")) return e;
  {
    std::lock_guard<std::mutex> lock(emu::g_pinned_mutex);
    if (!emu::g_pinned.erase(static_cast<const char*>(p))) {
      report("cudaFreeHost(%p): not a block of cudaMallocHost / cudaHostAlloc", p);
      return fail(cudaErrorInvalidValue);
    }
  }
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device < 0 || device >= emu::n_devices()) return fail(cudaErrorInvalidDevice);
  *pool = reinterpret_cast<cudaMemPool_t>(uintptr_t(device + 1));
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }

// The device side of a copy must lie inside one allocation of the current device, the host side
// outside every allocation.
static cudaError_t check_side(const void* p, size_t n, bool device, const char* call, const char* side) {
  if (n == 0) return cudaSuccess;
  int d = -1;
  const bool in = emu::is_device_range(p, n, &d);
  if (device && !in) {
    report("%s: the %s (%p, %zu bytes) is not inside one device allocation", call, side, p, n);
    return fail(cudaErrorInvalidValue);
  }
  if (!device && emu::is_device_range(p, 0)) {
    report("%s: the %s (%p) is device memory, the copy kind says host", call, side, p);
    return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

// Which sides of a copy of `kind` are device memory (*dd, *sd), each side checked.
// Which sides of a copy of `kind` are device memory (*dd, *sd); false for a kind that is none.
static bool device_sides(const void* dst, const void* src, cudaMemcpyKind kind, bool* dd, bool* sd) {
  *dd = *sd = false;
  switch (kind) {
    case cudaMemcpyHostToDevice: *dd = true; return true;
    case cudaMemcpyDeviceToHost: *sd = true; return true;
    case cudaMemcpyDeviceToDevice: *dd = *sd = true; return true;
    case cudaMemcpyHostToHost: return true;
    case cudaMemcpyDefault:
      *dd = emu::is_device_range(dst, 0);
      *sd = emu::is_device_range(src, 0);
      return true;
    default: return false;
  }
}

static cudaError_t copy_sides(const void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* call,
                              bool* dd_out, bool* sd_out) {
  bool dd = false, sd = false;
  if (!device_sides(dst, src, kind, &dd, &sd)) return fail(cudaErrorInvalidMemcpyDirection);
  if (cudaError_t e = check_side(dst, n, dd, call, "destination")) return e;
  if (cudaError_t e = check_side(src, n, sd, call, "source")) return e;
  *dd_out = dd;
  *sd_out = sd;
  return cudaSuccess;
}

// Counts one copy of n bytes by direction (while counting); the name of its counted call.
static const char* count_copy(bool dd, bool sd, const void* dst, const void* src, size_t n, bool two_d) {
  using C = degen::cuda::DeviceCounters;
  const bool pageable = (!dd && !emu::is_pinned(dst, n)) || (!sd && !emu::is_pinned(src, n));
  if (pageable) emu::count(&C::pageable_copies);
  if (dd && sd) {
    emu::count(&C::copies_d2d);
    emu::count(&C::bytes_d2d, int64_t(n));
    return two_d ? "cudaMemcpy2DAsync DtoD" : "cudaMemcpy DtoD";
  }
  if (dd) {
    emu::count(&C::copies_h2d);
    emu::count(&C::bytes_h2d, int64_t(n));
    return two_d ? "cudaMemcpy2DAsync HtoD" : "cudaMemcpy HtoD";
  }
  if (sd) {
    emu::count(&C::copies_d2h);
    emu::count(&C::bytes_d2h, int64_t(n));
    return two_d ? "cudaMemcpy2DAsync DtoH" : "cudaMemcpy DtoH";
  }
  return "cudaMemcpy HtoH";
}

static cudaError_t emu_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* call) {
  bool dd, sd;
  if (cudaError_t e = copy_sides(dst, src, n, kind, call, &dd, &sd)) return e;
  emu::CountedCall counted(emu::g_count.on && !emu::g_count.in_call ? count_copy(dd, sd, dst, src, n, false) : "");
  if (n) std::memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (cudaError_t e = emu::unsafe_in_capture("cudaMemcpy")) return e;
  emu::count(&degen::cuda::DeviceCounters::host_syncs);  // a blocking copy
  return emu_copy(dst, src, n, kind, "cudaMemcpy");
}

// A copy captured into a graph reads and writes its addresses when the graph runs; its host side
// must be pinned memory (cudaMallocHost), which the project's graphs use for their inputs. The
// device sides are checked at capture and again at every launch.
static cudaError_t capture_copy(cudaStream_t s, void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                                const char* call) {
  bool dd, sd;
  if (cudaError_t e = copy_sides(dst, src, n, kind, call, &dd, &sd)) return e;
  if ((!dd && !emu::is_pinned(dst, n)) || (!sd && !emu::is_pinned(src, n))) {
    report("%s captured with pageable host memory (%p): a graph copies from / to that address at every launch; "
           "use pinned memory (cudaMallocHost)", call, dd ? src : dst);
    if (s->s.invalidated.empty()) s->s.invalidated = call;
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  emu::capture_node(s, call, [dst, src, n, kind, call](cudaStream_t) { emu_copy(dst, src, n, kind, call); });
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
  if (emu::capturing(s)) return capture_copy(s, dst, src, n, kind, "cudaMemcpyAsync");
  // a copy from the device into pageable memory returns when it is done: the host waited
  if (emu::g_count.on && n && !emu::is_device_range(dst, 0) && !emu::is_pinned(dst, n) && emu::is_device_range(src, 0))
    emu::count(&degen::cuda::DeviceCounters::host_syncs);
  return emu_copy(dst, src, n, kind, "cudaMemcpyAsync");
}
static cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                           cudaMemcpyKind kind) {
  bool dd = false, sd = false;
  const bool known = device_sides(dst, src, kind, &dd, &sd);  // an unknown kind: emu_copy refuses it
  emu::CountedCall counted(known && emu::g_count.on && !emu::g_count.in_call
                               ? count_copy(dd, sd, dst, src, width * height, true) : "");
  for (size_t r = 0; r < height; ++r)
    if (cudaError_t e = emu_copy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width,
                                 kind, "cudaMemcpy2DAsync"))
      return e;
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s) {
  if (width > dpitch || width > spitch) {
    report("cudaMemcpy2DAsync: width %zu exceeds a pitch (destination %zu, source %zu)", width, dpitch, spitch);
    return fail(cudaErrorInvalidPitchValue);
  }
  if (emu::capturing(s)) {
    if (kind != cudaMemcpyDeviceToDevice) {
      report("cudaMemcpy2DAsync: only device-to-device 2D copies are modelled in a capture");
      return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (height && width) {
      if (cudaError_t e = check_side(dst, (height - 1) * dpitch + width, true, "cudaMemcpy2DAsync", "destination")) return e;
      if (cudaError_t e = check_side(src, (height - 1) * spitch + width, true, "cudaMemcpy2DAsync", "source")) return e;
    }
    emu::capture_node(s, "cudaMemcpy2DAsync", [=](cudaStream_t) { copy_2d(dst, dpitch, src, spitch, width, height, kind); });
    return cudaSuccess;
  }
  return copy_2d(dst, dpitch, src, spitch, width, height, kind);
}
static cudaError_t emu_memset(void* p, int v, size_t n) {
  if (cudaError_t e = check_side(p, n, true, "cudaMemset", "destination")) return e;
  emu::count(&degen::cuda::DeviceCounters::memsets);
  emu::CountedCall counted("cudaMemset");
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int v, size_t n) {
  if (cudaError_t e = emu::unsafe_in_capture("cudaMemset")) return e;
  return emu_memset(p, v, n);
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
  if (emu::capturing(s)) {
    if (cudaError_t e = check_side(p, n, true, "cudaMemsetAsync", "destination")) return e;
    emu::capture_node(s, "cudaMemsetAsync", [p, v, n](cudaStream_t) { emu_memset(p, v, n); });
    return cudaSuccess;
  }
  return emu_memset(p, v, n);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new CUstream_st{emu::Stream{emu::tl_device, nullptr, {}}};
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  if (cudaError_t e = emu::unsafe_in_capture("cudaStreamSynchronize")) return e;
  emu::count(&degen::cuda::DeviceCounters::host_syncs);
  return emu::tl_last_error == cudaErrorLaunchFailure ? cudaErrorLaunchFailure : cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return cudaStreamSynchronize(nullptr); }

// ---- stream capture and graphs: a graph is its captured nodes, run in order by cudaGraphLaunch ----
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (!s) {
    report("cudaStreamBeginCapture: the legacy default stream cannot be captured");
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (s->s.capture || emu::tl_capture) {
    report("cudaStreamBeginCapture: a capture is already running on this thread");
    return fail(cudaErrorIllegalState);
  }
  if (s->s.device != emu::tl_device) return fail(cudaErrorInvalidResourceHandle);
  s->s.capture = new std::vector<emu::Node>();
  s->s.invalidated.clear();
  emu::tl_capture = s;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  *g = nullptr;
  if (!s || !s->s.capture) return fail(cudaErrorIllegalState);
  std::unique_ptr<std::vector<emu::Node>> nodes(s->s.capture);
  s->s.capture = nullptr;
  if (emu::tl_capture == s) emu::tl_capture = nullptr;
  if (!s->s.invalidated.empty()) {
    report("cudaStreamEndCapture: the capture was invalidated by %s", s->s.invalidated.c_str());
    return fail(cudaErrorStreamCaptureInvalidated);
  }
  *g = new CUgraph_st{s->s.device, std::move(*nodes)};
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* st) {
  *st = s && s->s.capture ? (s->s.invalidated.empty() ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusInvalidated)
                          : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long) {
  if (!g) return fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{g->device, g->nodes};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  if (!exec) return fail(cudaErrorInvalidValue);
  if (emu::capturing(s)) {
    report("cudaGraphLaunch into a capturing stream: child graphs are not modelled");
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (emu::stream_device(s) != exec->device || emu::tl_device != exec->device) {
    report("cudaGraphLaunch: a graph of device %d launched on a stream of device %d (device %d current)", exec->device,
           emu::stream_device(s), emu::tl_device);
    return fail(cudaErrorInvalidResourceHandle);
  }
  emu::count(&degen::cuda::DeviceCounters::graph_launches);
  for (const emu::Node& n : exec->nodes) {
    n.run(s);
    if (emu::tl_last_error == cudaErrorLaunchFailure) break;  // reported by the next synchronisation
  }
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  delete e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st();
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->t = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  if (cudaError_t e = emu::unsafe_in_capture("cudaEventSynchronize")) return e;
  emu::count(&degen::cuda::DeviceCounters::host_syncs);
  return cudaSuccess;
}
// The emulator runs a stream's work when it is enqueued: an event's work is always done.
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a->recorded || !b->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > 227 * 1024) {
      report("cudaFuncSetAttribute: MaxDynamicSharedMemorySize %d exceeds the device's 232448 bytes", value);
      return fail(cudaErrorInvalidValue);
    }
    std::lock_guard<std::mutex> lock(emu::g_launch_mutex);
    emu::g_max_dyn_smem[func] = value;
  }
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  cudaError_t e = emu::tl_last_error;
  emu::tl_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return emu::tl_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    default: return "cudaError(emulated)";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory (emulated device)";
    case cudaErrorNoDevice: return "no emulated device (DEGEN_EMU_DEVICES=0)";
    case cudaErrorLaunchFailure: return "the emulator stopped a kernel (see the cuda-emu line above)";
    case cudaErrorIllegalAddress: return "a kernel argument is not device memory of this device (emulated)";
    default: return cudaGetErrorName(e);
  }
}

}  // extern "C"

// ==================================================================== cuBLAS
namespace {

float load(const void* p, cudaDataType t, size_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(p)[i];
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(p)[i]);
    default: return NAN;
  }
}
void store(void* p, cudaDataType t, size_t i, float v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = v; break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    default: break;
  }
}
size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : (t == CUDA_R_16BF || t == CUDA_R_16F) ? 2 : 0; }

// The bytes a column-major rows x cols matrix with leading dimension ld spans.
size_t span(int rows, int cols, int ld, cudaDataType t) {
  return rows == 0 || cols == 0 ? 0 : (size_t(ld) * size_t(cols - 1) + size_t(rows)) * type_size(t);
}

}  // namespace

static void gemm_run(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float al, const void* A,
                     cudaDataType at, int lda, const void* B, cudaDataType bt, int ldb, float be, void* C,
                     cudaDataType ct, int ldc);

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  *h = new cublasContext{emu::tl_device};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  if (emu::stream_device(s) != h->device) return CUBLAS_STATUS_INVALID_VALUE;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS(emulated)";
  }
}
const char* cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }

// C = alpha op(A) op(B) + beta C, column-major, fp32 accumulation in k order.
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType at, int lda, const void* B,
                            cudaDataType bt, int ldb, const void* beta, void* C, cudaDataType ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (h->device != emu::tl_device) {
    report("cublasGemmEx: handle of device %d used while device %d is current", h->device, emu::tl_device);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (compute != CUBLAS_COMPUTE_32F || !type_size(at) || !type_size(bt) || !type_size(ct) ||
      (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T)) {
    report("cublasGemmEx: a combination the emulator does not model (compute %d, types %d %d %d)", int(compute),
           int(at), int(bt), int(ct));
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  const int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, ar) || ldb < std::max(1, br) || ldc < std::max(1, m)) {
    report("cublasGemmEx: m %d n %d k %d with lda %d ldb %d ldc %d: a leading dimension is below its rows", m, n, k,
           lda, ldb, ldc);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  struct Side { const void* p; size_t bytes; const char* name; };
  for (const Side& s : {Side{A, span(ar, ac, lda, at), "A"}, Side{B, span(br, bc, ldb, bt), "B"},
                        Side{C, span(m, n, ldc, ct), "C"}}) {
    int d = -1;
    if (s.bytes && (!emu::is_device_range(s.p, s.bytes, &d) || d != h->device)) {
      report("cublasGemmEx: %s (%p) does not hold the %zu bytes the product reads or writes on device %d", s.name, s.p,
             s.bytes, h->device);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  // note: alpha and beta are read now (host pointer mode), so a captured product keeps their values.
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  if (emu::capturing(h->stream)) {
    emu::capture_node(h->stream, "cublasGemmEx", [=](cudaStream_t) {
      gemm_run(ta, tb, m, n, k, al, A, at, lda, B, bt, ldb, be, C, ct, ldc);
    });
    return CUBLAS_STATUS_SUCCESS;
  }
  gemm_run(ta, tb, m, n, k, al, A, at, lda, B, bt, ldb, be, C, ct, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void* workspace, size_t bytes) {
  int d = -1;
  if (bytes && (!emu::is_device_range(workspace, bytes, &d) || d != h->device)) {
    report("cublasSetWorkspace: %p does not hold %zu bytes of device %d memory", workspace, bytes, h->device);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

namespace {

float to_f32(float v) { return v; }
float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
float to_f32(__half v) { return __half2float(v); }

// out[i * k + l] = M[i * s_row + l * s_k] in fp32, for `rows` rows of k (the type's switch hoisted
// out of the loops).
void gather_f32(const void* M, cudaDataType t, int rows, int k, size_t s_row, size_t s_k, float* out) {
  auto go = [&](const auto* p) {
    for (int i = 0; i < rows; ++i)
      for (int l = 0; l < k; ++l) out[size_t(i) * k + l] = to_f32(p[size_t(i) * s_row + size_t(l) * s_k]);
  };
  switch (t) {
    case CUDA_R_32F: go(static_cast<const float*>(M)); break;
    case CUDA_R_16BF: go(static_cast<const __nv_bfloat16*>(M)); break;
    case CUDA_R_16F: go(static_cast<const __half*>(M)); break;
    default: std::fill(out, out + size_t(rows) * k, NAN); break;
  }
}

}  // namespace

namespace {

// C = al op(A) B' + be C, where row i of op(A) is a[i * a_row .. + k) (TA: float, bf16 or half) and
// column j of B' is b[j * k .. + k) in fp32.
// note: each output is one fp32 sum in k order, as the emulated cuBLAS always computed it. Rows are
// taken kRows at a time, converted to fp32 and interleaved ([k][kRows]) once for every column, so
// that kRows independent sums advance together: every sum is bit for bit the plain loop's.
template <typename TA>
void gemm_rows(const TA* a, size_t a_row, const float* b, int m, int n, int k, float al, float be, void* C,
               cudaDataType ct, int ldc) {
  auto out = [&](int i, int j, float acc) {
    const size_t ci = size_t(i) + size_t(j) * ldc;
    store(C, ct, ci, be == 0.0f ? al * acc : al * acc + be * load(C, ct, ci));
  };
  constexpr int kRows = 8;
  std::vector<float> panel(size_t(k) * kRows);  // [k][kRows]: rows i .. i + kRows of op(A)
  int i = 0;
  for (; i + kRows <= m; i += kRows) {
    const TA* ai = &a[size_t(i) * a_row];
    for (int l = 0; l < k; ++l)
      for (int r = 0; r < kRows; ++r) panel[size_t(l) * kRows + r] = to_f32(ai[size_t(r) * a_row + l]);
    for (int j = 0; j < n; ++j) {
      const float* bc = &b[size_t(j) * k];
      float acc[kRows] = {};
      for (int l = 0; l < k; ++l) {
        const float bl = bc[l];
        const float* p = &panel[size_t(l) * kRows];
        for (int r = 0; r < kRows; ++r) acc[r] += p[r] * bl;
      }
      for (int r = 0; r < kRows; ++r) out(i + r, j, acc[r]);
    }
  }
  for (; i < m; ++i) {
    const TA* ar = &a[size_t(i) * a_row];
    for (int j = 0; j < n; ++j) {
      const float* bc = &b[size_t(j) * k];
      float acc = 0.0f;
      for (int l = 0; l < k; ++l) acc += to_f32(ar[l]) * bc[l];
      out(i, j, acc);
    }
  }
}

}  // namespace

// C = al op(A) op(B) + be C, the arguments checked by cublasGemmEx.
static void gemm_run(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float al, const void* A,
                     cudaDataType at, int lda, const void* B, cudaDataType bt, int ldb, float be, void* C,
                     cudaDataType ct, int ldc) {
  emu::count(&degen::cuda::DeviceCounters::blas_calls);
  emu::CountedCall counted("cublasGemmEx");
  // op(B) as columns of k in fp32 (the inputs are exact in fp32).
  std::vector<float> b(size_t(n) * size_t(k));
  gather_f32(B, bt, n, k, tb == CUBLAS_OP_N ? size_t(ldb) : 1, tb == CUBLAS_OP_N ? 1 : size_t(ldb), b.data());
  if (ta == CUBLAS_OP_N) {  // the rows of op(A) are strided: gathered to fp32 rows first
    std::vector<float> a(size_t(m) * size_t(k));
    gather_f32(A, at, m, k, 1, size_t(lda), a.data());
    gemm_rows(a.data(), size_t(k), b.data(), m, n, k, al, be, C, ct, ldc);
    return;
  }
  switch (at) {  // the rows of op(A) are A's columns
    case CUDA_R_32F: gemm_rows(static_cast<const float*>(A), size_t(lda), b.data(), m, n, k, al, be, C, ct, ldc); break;
    case CUDA_R_16BF:
      gemm_rows(static_cast<const __nv_bfloat16*>(A), size_t(lda), b.data(), m, n, k, al, be, C, ct, ldc);
      break;
    case CUDA_R_16F: gemm_rows(static_cast<const __half*>(A), size_t(lda), b.data(), m, n, k, al, be, C, ct, ldc); break;
    default: break;  // refused by cublasGemmEx
  }
}

// ==================================================================== NCCL
#if DEGEN_HAVE_NCCL
struct ncclComm {
  struct Group* group;
  int rank;
  int device;
};
struct Group {
  int n;
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<const void*> send;
  std::vector<void*> recv;
  std::vector<size_t> count;
  std::vector<int> type;
  std::atomic<int> refs{0};
  bool mismatch = false;
};

extern "C" {

ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  if (ndev < 1) return ncclInvalidArgument;
  auto* g = new Group();
  g->n = ndev;
  g->send.resize(size_t(ndev));
  g->recv.resize(size_t(ndev));
  g->count.resize(size_t(ndev));
  g->type.resize(size_t(ndev));
  g->refs = ndev;
  for (int r = 0; r < ndev; ++r) {
    const int d = devlist ? devlist[r] : r;
    if (d < 0 || d >= emu::n_devices()) return ncclInvalidArgument;
    comm[r] = new ncclComm{g, r, d};
  }
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return ncclSuccess;
  if (--c->group->refs == 0) delete c->group;
  delete c;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage: return "invalid usage (emulated NCCL)";
    default: return "NCCL error (emulated)";
  }
}

// Every rank's call waits for the others; the last to arrive sums in rank order in fp32 and rounds
// once per element (what a ring all-reduce of two ranks does; more ranks round at every hop).
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t stream) {
  const cudaDataType ct = type == ncclFloat32 ? CUDA_R_32F : type == ncclBfloat16 ? CUDA_R_16BF
                          : type == ncclFloat16 ? CUDA_R_16F : CUDA_R_64F;
  if (op != ncclSum || !type_size(ct)) return ncclInvalidArgument;
  if (emu::tl_device != c->device || emu::stream_device(stream) != c->device) {
    report("ncclAllReduce: rank %d (device %d) called with device %d current / a stream of device %d", c->rank,
           c->device, emu::tl_device, emu::stream_device(stream));
    return ncclInvalidUsage;
  }
  if (emu::capturing(stream)) {
    report("ncclAllReduce: captured into a graph, which the emulator does not model");
    return ncclInvalidUsage;
  }
  const size_t bytes = count * type_size(ct);
  int ds = -1, dr = -1;
  if (bytes && (!emu::is_device_range(send, bytes, &ds) || !emu::is_device_range(recv, bytes, &dr) ||
                ds != c->device || dr != c->device)) {
    report("ncclAllReduce: rank %d's buffers are not %zu bytes of device %d memory", c->rank, bytes, c->device);
    return ncclInvalidArgument;
  }
  Group& g = *c->group;
  std::unique_lock<std::mutex> lock(g.m);
  const uint64_t gen = g.generation;
  g.send[size_t(c->rank)] = send;
  g.recv[size_t(c->rank)] = recv;
  g.count[size_t(c->rank)] = count;
  g.type[size_t(c->rank)] = int(type);
  if (++g.arrived == g.n) {
    g.mismatch = false;
    for (int r = 1; r < g.n; ++r)
      g.mismatch |= g.count[size_t(r)] != g.count[0] || g.type[size_t(r)] != g.type[0];
    if (!g.mismatch) {
      std::vector<float> sum(count, 0.0f);
      for (int r = 0; r < g.n; ++r)
        for (size_t i = 0; i < count; ++i) sum[i] += load(g.send[size_t(r)], ct, i);
      for (int r = 0; r < g.n; ++r)
        for (size_t i = 0; i < count; ++i) store(g.recv[size_t(r)], ct, i, sum[i]);
    }
    g.arrived = 0;
    ++g.generation;
    g.cv.notify_all();
  } else {
    g.cv.wait(lock, [&] { return g.generation != gen; });
  }
  if (g.mismatch) {
    report("ncclAllReduce: the ranks passed different counts or types");
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

}  // extern "C"
#endif

// ==================================================================== counting (device_counters.h)
namespace degen::cuda {

bool counters_supported() { return true; }

void counters_start() {
  emu::Count& g = emu::g_count;
  if (!g.on) {
    emu::ensure_altstack();
    emu::install_on_segv(&g.old);
    emu::protect_data_pages(PROT_NONE);
    g.open.reserve(size_t(1) << 20);
    g.written.reserve(size_t(1) << 16);
    g.on = true;
  }
  g.c = DeviceCounters{};
  g.by_name.clear();
  g.outside_read = g.outside_written = 0;
}

DeviceCounters counters_read() {
  const emu::Count& g = emu::g_count;
  DeviceCounters d = g.c;
  for (const auto& [n, t] : g.by_name) d.by_name.push_back(t);
  if (g.outside_read || g.outside_written) {
    d.by_name.push_back(CallTraffic{"(host code between calls)", 0, g.outside_read, g.outside_written});
    d.bytes_read += g.outside_read;
    d.bytes_written += g.outside_written;
  }
  sort_by_bytes(d.by_name);
  return d;
}

void counters_stop() {
  emu::Count& g = emu::g_count;
  if (!g.on) return;
  emu::protect_data_pages(PROT_READ | PROT_WRITE);
  g.open.clear();
  g.written.clear();
  g.on = false;
  emu::restore_handlers(g.old);
}

}  // namespace degen::cuda
