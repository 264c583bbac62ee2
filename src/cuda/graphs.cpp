// StepGraphs (see graphs.h).
#include "cuda/graphs.h"

#include <cstring>
#include <stdexcept>

#include "kernels/check.h"
#include "cuda/context.h"
#include "util/error.h"

namespace degen::cuda {

namespace {
thread_local bool tl_suppressed = false;

// Arena and staging offsets keep CudaContext::alloc's alignment (at least 256 bytes per buffer).
size_t aligned(size_t n) { return (n < 256 ? 256 : n + 255) / 256 * 256; }

// At most this many keys keep their graphs and arenas; beyond it every key starts over. A run
// needs a few (one per batch shape and cache growth); more means the key changes every step
// (MTP rollback moves the GDN states), and then graphs cannot help anyway.
constexpr size_t kMaxKeys = 32;

const char* kind_name(char k) { return k == 'a' ? "buffer" : k == 'u' ? "host input" : "host synchronisation"; }
}  // namespace

bool launches_suppressed() { return tl_suppressed; }

StepGraphs::StepGraphs(std::shared_ptr<CudaContext> ctx) : ctx_(std::move(ctx)) {}

StepGraphs::~StepGraphs() {
  abort();
  free_entries();
}

StepGraphs::Entry::~Entry() {
  // note: errors ignored (destructor); the stream is synchronised so no launch still reads these.
  if (done) {
    cudaEventSynchronize(done);
    cudaEventDestroy(done);
  }
  for (cudaGraphExec_t e : segs) cudaGraphExecDestroy(e);
  if (staging) cudaFreeHost(staging);
}

void StepGraphs::free_entries() {
  if (!entries_.empty()) ctx_->sync();
  entries_.clear();
}

template <typename F>
void StepGraphs::guarded(F&& f) {
  const char* what = mode_ == Mode::capture ? "captured" : mode_ == Mode::replay ? "replayed" : "recorded";
  try {
    f();
  } catch (const UntestableError& e) {  // a CUDA error, or no device memory for the arena: still 125
    abort();
    throw UntestableError(cat("graphs=on: a decode step could not be ", what, " as a CUDA graph: ", e.what(),
                              " (graphs=off runs the same steps with plain launches)"));
  } catch (const std::exception& e) {
    abort();
    throw std::runtime_error(cat("graphs=on: a decode step could not be ", what, " as a CUDA graph: ", e.what(),
                                 " (graphs=off runs the same steps with plain launches)"));
  }
}

void StepGraphs::begin(const std::string& key) {
  DEGEN_ASSERT(mode_ == Mode::off, "graphs: a decode step began inside another");
  if (stale_) {  // the weights changed: every graph may hold a buffer that is gone
    free_entries();
    stale_ = false;
  }
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxKeys) free_entries();
    it = entries_.emplace(key, std::make_unique<Entry>()).first;
    cur_ = it->second.get();
    mode_ = Mode::record;
    stats_.recorded++;
  } else {
    cur_ = it->second.get();
    mode_ = cur_->captured() ? Mode::replay : Mode::capture;
  }
  key_ = key;
  paused_ = false;
  item_ = arena_off_ = staging_off_ = seg_ = 0;
  guarded([&] { start(); });
}

void StepGraphs::start() {
  if (mode_ == Mode::capture) {
    // the arena and staging sizes, and each segment's inputs (the uploads between two pauses)
    size_t arena = 0, staging = 0, seg_begin = 0;
    cur_->seg_staging.clear();
    for (const Item& i : cur_->sig) {
      if (i.kind == 'a') arena += aligned(i.bytes);
      if (i.kind == 'u') staging += aligned(i.bytes);
      if (i.kind == 'p') {
        cur_->seg_staging.emplace_back(seg_begin, staging);
        seg_begin = staging;
      }
    }
    cur_->seg_staging.emplace_back(seg_begin, staging);
    cur_->arena_bytes = arena;
    cur_->staging_bytes = staging;
    cur_->arena = CudaContext::alloc(ctx_, arena, "graph arena (decode step buffers)");
    cur_->dev_staging = CudaContext::alloc(ctx_, staging ? staging : 1, "graph staging (decode step inputs)");
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&cur_->staging), staging ? staging : 1));
    CUDA_CHECK(cudaEventCreateWithFlags(&cur_->done, cudaEventDisableTiming));
    ctx_->set_capturing(true);
    CUDA_CHECK(cudaStreamBeginCapture(ctx_->stream(), cudaStreamCaptureModeThreadLocal));
    capture_inputs();
    stats_.captured++;
  } else if (mode_ == Mode::replay) {
    // The previous launch of this key must have read the staging block before it is rewritten.
    // Asked first, waited for only when it has not: a decode loop reads each step's logits before
    // it runs the next step, so in the steady state the launch has finished and the host never
    // blocks here (bench --count counts the waits).
    const cudaError_t q = cudaEventQuery(cur_->done);
    if (q == cudaErrorNotReady) CUDA_CHECK(cudaEventSynchronize(cur_->done));
    else CUDA_CHECK(q);
    tl_suppressed = true;
    stats_.replayed++;
  }
}

void StepGraphs::check_item(char kind, size_t bytes, const char* what) {
  if (mode_ == Mode::record) {
    cur_->sig.push_back(Item{kind, bytes, what});
    return;
  }
  const bool ok = item_ < cur_->sig.size() && cur_->sig[item_].kind == kind && cur_->sig[item_].bytes == bytes;
  if (!ok) {
    const std::string had = item_ < cur_->sig.size()
                                ? cat(kind_name(cur_->sig[item_].kind), " of ", cur_->sig[item_].bytes, " bytes (",
                                      cur_->sig[item_].what, ")")
                                : std::string("the end of the step");
    const size_t n = item_;
    abort();
    throw std::logic_error(cat("graphs=on: this decode step differs from the step recorded for its key at item ", n,
                               ": a ", kind_name(kind), " of ", bytes, " bytes (", what, ") where the record has ", had,
                               "; the key misses something the step depends on (run with graphs=off meanwhile)"));
  }
  item_++;
}

std::shared_ptr<uint8_t> StepGraphs::alloc(size_t bytes, const char* what) {
  DEGEN_ASSERT(in_segment(), "graphs: alloc outside a graph segment");
  check_item('a', bytes, what);
  if (mode_ == Mode::record) return nullptr;
  uint8_t* p = cur_->arena.get() + arena_off_;
  arena_off_ += aligned(bytes);
  DEGEN_ASSERT(arena_off_ <= cur_->arena_bytes, "graphs: arena overrun");
  return std::shared_ptr<uint8_t>(cur_->arena, p);  // aliasing: keeps the arena alive, frees nothing
}

std::shared_ptr<uint8_t> StepGraphs::upload(const void* src, size_t n, const char* what) {
  DEGEN_ASSERT(in_segment(), "graphs: upload outside a graph segment");
  check_item('u', n, what);
  if (mode_ == Mode::record) return nullptr;
  const size_t off = staging_off_;
  staging_off_ += aligned(n);
  DEGEN_ASSERT(staging_off_ <= cur_->staging_bytes, "graphs: staging overrun");
  if (n) std::memcpy(cur_->staging + off, src, n);
  return std::shared_ptr<uint8_t>(cur_->dev_staging, cur_->dev_staging.get() + off);  // aliasing
}

// The first node of a captured segment: its staged inputs to the device, which every later node
// reads, in one copy (from the pinned block when the graph runs: replays rewrite it first).
void StepGraphs::capture_inputs() {
  DEGEN_ASSERT(seg_ < cur_->seg_staging.size(), "graphs: more segments than the signature has");
  const auto [b, e] = cur_->seg_staging[seg_];
  if (e > b)
    CUDA_CHECK(cudaMemcpyAsync(cur_->dev_staging.get() + b, cur_->staging + b, e - b, cudaMemcpyHostToDevice,
                               ctx_->stream()));
}

void StepGraphs::close_segment() {
  if (mode_ == Mode::capture) {
    cudaGraph_t g = nullptr;
    const cudaError_t err = cudaStreamEndCapture(ctx_->stream(), &g);
    ctx_->set_capturing(false);
    CUDA_CHECK(err);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t ierr = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    CUDA_CHECK(ierr);
    cur_->segs.push_back(exec);
  }
  if (mode_ == Mode::replay) tl_suppressed = false;
  if (mode_ != Mode::record) {
    DEGEN_ASSERT(seg_ < cur_->segs.size(), "graphs: more segments than captured");
    CUDA_CHECK(cudaGraphLaunch(cur_->segs[seg_], ctx_->stream()));
    stats_.segments++;
  }
  seg_++;
}

void StepGraphs::pause() {
  DEGEN_ASSERT(in_segment(), "graphs: pause outside a graph segment");
  check_item('p', 0, "pause");
  guarded([&] { close_segment(); });
  paused_ = true;
}

void StepGraphs::resume() {
  DEGEN_ASSERT(mode_ != Mode::off && paused_, "graphs: resume without pause");
  paused_ = false;
  if (mode_ == Mode::capture) {
    ctx_->set_capturing(true);
    guarded([&] {
      CUDA_CHECK(cudaStreamBeginCapture(ctx_->stream(), cudaStreamCaptureModeThreadLocal));
      capture_inputs();
    });
  } else if (mode_ == Mode::replay) {
    tl_suppressed = true;
  }
}

void StepGraphs::end() {
  DEGEN_ASSERT(in_segment(), "graphs: end outside a graph segment");
  if (mode_ != Mode::record && item_ != cur_->sig.size()) {
    const size_t n = item_, want = cur_->sig.size();
    abort();
    throw std::logic_error(cat("graphs=on: this decode step ended after ", n, " of the ", want,
                               " items recorded for its key; the key misses something the step depends on"));
  }
  guarded([&] {
    close_segment();
    if (mode_ != Mode::record) CUDA_CHECK(cudaEventRecord(cur_->done, ctx_->stream()));
  });
  mode_ = Mode::off;
  cur_ = nullptr;
}

void StepGraphs::abort() noexcept {
  tl_suppressed = false;
  if (mode_ == Mode::off) return;
  if (mode_ == Mode::capture && !paused_) {
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(ctx_->stream(), &g) == cudaSuccess && g) cudaGraphDestroy(g);
    cudaGetLastError();
    ctx_->set_capturing(false);
  }
  mode_ = Mode::off;
  paused_ = false;
  cur_ = nullptr;
  try {
    ctx_->sync();
  } catch (...) {  // note: a device fault is reported by the next checked call
  }
  entries_.erase(key_);  // recorded again from scratch next time (its destructor throws nothing)
}

}  // namespace degen::cuda
